//! The TokenRequest subresource of ServiceAccounts (`POST
//! /api/v1/namespaces/<ns>/serviceaccounts/<name>/token`), what `kubectl create token` and
//! client libraries call: it mints a bearer token for the ServiceAccount, as
//! `POST /kaos-testkit/tokens` does. Tokens do not expire; the answer still states when they
//! would, from `spec.expirationSeconds` (default one hour, as kube-apiserver).

use http::StatusCode;
use serde_json::{Value, json};

use crate::auth::{Auth, DEFAULT_AUDIENCE, Identity};
use crate::cluster::Cluster;
use crate::error::{ApiError, ApiResult};
use crate::resources::ResourceType;

const DEFAULT_EXPIRATION_SECONDS: i64 = 3600;
/// The create (POST) of a TokenRequest for the ServiceAccount `name` in `namespace`.
pub fn create(
    cluster: &Cluster,
    auth: &Auth,
    body: &Value,
    rt: &ResourceType,
    namespace: &str,
    name: &str,
) -> ApiResult<(StatusCode, Value)> {
    // As kube-apiserver: a token only for a ServiceAccount that exists.
    cluster.get(rt, namespace, name)?;
    let spec = body.get("spec").cloned().unwrap_or_else(|| json!({}));
    let seconds = spec
        .get("expirationSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(DEFAULT_EXPIRATION_SECONDS);
    let audiences = match spec.get("audiences") {
        Some(Value::Array(list)) if !list.is_empty() => Value::Array(list.clone()),
        _ => json!([DEFAULT_AUDIENCE]),
    };
    let expires = jiff::Timestamp::now()
        .checked_add(jiff::SignedDuration::from_secs(seconds))
        .map_err(|e| ApiError::bad_request(format!("spec.expirationSeconds: {e}")))?
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let token = auth.mint_token(Identity::service_account(namespace, name));
    Ok((
        StatusCode::CREATED,
        json!({
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "creationTimestamp": crate::meta::now(),
            },
            "spec": {
                "audiences": audiences,
                "expirationSeconds": seconds,
                "boundObjectRef": spec.get("boundObjectRef").cloned().unwrap_or(Value::Null),
            },
            "status": {"token": token, "expirationTimestamp": expires},
        }),
    ))
}
