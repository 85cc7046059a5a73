//! Test-control endpoints under `/kaos-testkit/`, for scripts and out-of-process tests:
//! mint service-account tokens, read or clear the audit log, read used RBAC grants, set faults,
//! compact the watch history. Only the admin identity may call them when RBAC is on.

use std::time::Duration;

use http::Method;
use serde_json::{Value, json};

use super::ApiServer;
use super::path::Query;
use crate::auth::{Grant, Identity};
use crate::error::{ApiError, ApiResult};
use crate::faults::FaultConfig;
use crate::http::audit::AuditRecord;

pub fn handle(
    server: &ApiServer,
    identity: &Identity,
    method: &Method,
    action: &str,
    query: &Query,
    body: &Value,
) -> ApiResult<Value> {
    if server.auth.enabled() && !identity.is_admin() {
        return Err(ApiError::forbidden(
            &identity.user,
            "use",
            "kaos-testkit",
            "",
            None,
        ));
    }
    match (method.as_str(), action) {
        ("POST", "tokens") => {
            let namespace = query
                .get("namespace")
                .ok_or_else(|| ApiError::bad_request("namespace is required"))?;
            let name = query
                .get("serviceAccount")
                .ok_or_else(|| ApiError::bad_request("serviceAccount is required"))?;
            let identity = Identity::service_account(namespace, name);
            let user = identity.user.clone();
            let token = server.auth.mint_token(identity);
            // The credential's name in the audit log.
            let client = server
                .auth
                .authenticate_token(&token)
                .map(|i| i.client)
                .unwrap_or_default();
            Ok(json!({"token": token, "user": user, "client": client}))
        }
        ("GET", "audit") => Ok(Value::Array(
            server.audit.records().iter().map(audit_json).collect(),
        )),
        ("DELETE", "audit") => {
            server.audit.clear();
            Ok(json!({}))
        }
        ("GET", "grants") => Ok(Value::Array(
            server.auth.used_grants().iter().map(grant_json).collect(),
        )),
        ("GET", "faults") => Ok(faults_json(&server.faults.config())),
        ("PUT", "faults") => {
            server.faults.set(parse_faults(body)?);
            Ok(faults_json(&server.faults.config()))
        }
        ("POST", "compact") => {
            server.cluster.compact();
            Ok(json!({"resourceVersion": server.cluster.resource_version().to_string()}))
        }
        _ => Err(ApiError::not_found("kaos-testkit", "", action)),
    }
}

pub fn audit_json(r: &AuditRecord) -> Value {
    let time = jiff::Timestamp::try_from(r.time)
        .map(|t| t.to_string())
        .unwrap_or_default();
    json!({
        "time": time, "user": r.user, "verb": r.verb, "method": r.method, "path": r.path, "query": r.query, "client": r.client,
        "group": r.group, "resource": r.resource, "subresource": r.subresource,
        "namespace": r.namespace, "name": r.name, "code": r.code,
        "latencyMicros": r.latency.as_micros() as u64,
    })
}

fn grant_json(g: &Grant) -> Value {
    json!({"user": g.user, "verb": g.verb, "group": g.group, "resource": g.resource, "namespace": g.namespace})
}

fn faults_json(c: &FaultConfig) -> Value {
    json!({
        "seed": c.seed, "errorRate": c.error_rate, "throttleRate": c.throttle_rate,
        "conflictRate": c.conflict_rate, "latencyMs": c.latency.as_millis() as u64,
        "watchCutEvents": c.watch_cut_events, "watchCutAfterMs": c.watch_cut_after.map(|d| d.as_millis() as u64),
        "goneRate": c.gone_rate, "spareAdmin": c.spare_admin, "resources": c.resources,
    })
}

fn parse_faults(body: &Value) -> ApiResult<FaultConfig> {
    if !body.is_object() {
        return Err(ApiError::bad_request(
            "the fault configuration must be a JSON object",
        ));
    }
    let rate = |k: &str| body.get(k).and_then(Value::as_f64).unwrap_or(0.0);
    let ms = |k: &str| {
        body.get(k)
            .and_then(Value::as_u64)
            .map(Duration::from_millis)
    };
    Ok(FaultConfig {
        seed: body.get("seed").and_then(Value::as_u64).unwrap_or(0),
        error_rate: rate("errorRate"),
        throttle_rate: rate("throttleRate"),
        conflict_rate: rate("conflictRate"),
        latency: ms("latencyMs").unwrap_or_default(),
        watch_cut_events: body
            .get("watchCutEvents")
            .and_then(Value::as_u64)
            .map(|n| n as usize),
        watch_cut_after: ms("watchCutAfterMs"),
        gone_rate: rate("goneRate"),
        spare_admin: body
            .get("spareAdmin")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        resources: match body.get("resources") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(names)) => names
                .iter()
                .map(|n| n.as_str().map(str::to_string))
                .collect::<Option<_>>()
                .ok_or_else(|| ApiError::bad_request("resources must be a list of strings"))?,
            Some(_) => {
                return Err(ApiError::bad_request("resources must be a list of strings"));
            }
        },
    })
}
