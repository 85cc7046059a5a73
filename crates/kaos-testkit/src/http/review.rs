//! TokenReview (`authentication.k8s.io/v1`) and SubjectAccessReview (`authorization.k8s.io/v1`)
//! creates, what a server that delegates its authentication and authorization to the API server
//! calls (controller-runtime's secure metrics, kube-rbac-proxy, our controllers' `/metrics`).
//! They are answered as kube-apiserver answers them, from the testkit's own tokens and RBAC, and
//! nothing is stored.

use http::StatusCode;
use serde_json::{Value, json};

use crate::auth::{Access, Auth, DEFAULT_AUDIENCE, Identity};
use crate::cluster::Cluster;
use crate::error::{ApiError, ApiResult};
use crate::resources::ResourceType;

/// The create (POST) of a review of type `rt`.
pub fn create(
    cluster: &Cluster,
    auth: &Auth,
    body: &Value,
    rt: &ResourceType,
) -> ApiResult<(StatusCode, Value)> {
    let spec = body.get("spec").cloned().unwrap_or_else(|| json!({}));
    let status = match rt.plural.as_str() {
        "tokenreviews" => token_review(cluster, auth, &spec)?,
        _ => access_review(cluster, auth, &spec)?,
    };
    Ok((
        StatusCode::CREATED,
        json!({
            "kind": rt.kind,
            "apiVersion": rt.api_version(),
            "metadata": {"creationTimestamp": null},
            "spec": spec,
            "status": status,
        }),
    ))
}

/// Who the token is, or `{"user": {}, "error": …}` (still a 201) when no one.
fn token_review(cluster: &Cluster, auth: &Auth, spec: &Value) -> ApiResult<Value> {
    let token = spec.get("token").and_then(Value::as_str).unwrap_or("");
    if token.is_empty() {
        return Err(ApiError::bad_request(
            "token is required for TokenReview in authentication",
        ));
    }
    let Some(identity) = auth.authenticate_token(token) else {
        return Ok(json!({"user": {}, "error": "[invalid bearer token]"}));
    };
    let mut user = json!({"username": identity.user, "groups": identity.groups});
    if let Some((namespace, name)) = service_account(&identity) {
        let uid = cluster
            .resource("", "v1", "serviceaccounts")
            .and_then(|sa| cluster.get(&sa, namespace, name).ok())
            .and_then(|sa| sa.pointer("/metadata/uid").cloned());
        if let Some(uid) = uid {
            user["uid"] = uid;
        }
    }
    let audiences = match spec.get("audiences") {
        Some(Value::Array(list)) if !list.is_empty() => Value::Array(list.clone()),
        _ => json!([DEFAULT_AUDIENCE]),
    };
    Ok(json!({"authenticated": true, "user": user, "audiences": audiences}))
}

fn service_account(identity: &Identity) -> Option<(&str, &str)> {
    identity
        .user
        .strip_prefix("system:serviceaccount:")?
        .split_once(':')
}

/// Whether the user of the spec may do what it asks: `{"allowed": true, "reason": …}` or
/// `{"allowed": false}` (RBAC only ever allows; nothing here denies explicitly).
fn access_review(cluster: &Cluster, auth: &Auth, spec: &Value) -> ApiResult<Value> {
    let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or("").to_string();
    let user = text(spec.get("user"));
    let groups = crate::meta::strings(spec.get("groups"));
    let invalid = |message: &str| {
        ApiError::unprocessable(format!(
            "SubjectAccessReview.authorization.k8s.io \"\" is invalid: {message}"
        ))
    };
    if user.is_empty() && groups.is_empty() {
        return Err(invalid(
            "spec.user: Invalid value: \"\": at least one of user or group must be specified",
        ));
    }
    let access = match (
        spec.get("resourceAttributes"),
        spec.get("nonResourceAttributes"),
    ) {
        (Some(r), None) => {
            let subresource = text(r.get("subresource"));
            let mut resource = text(r.get("resource"));
            if !subresource.is_empty() {
                resource = format!("{resource}/{subresource}");
            }
            let optional = |f: &str| Some(text(r.get(f))).filter(|s| !s.is_empty());
            Access::Resource {
                namespace: optional("namespace"),
                verb: text(r.get("verb")),
                group: text(r.get("group")),
                resource,
                name: optional("name"),
            }
        }
        (None, Some(n)) => Access::NonResource {
            path: text(n.get("path")),
            verb: text(n.get("verb")),
        },
        (Some(_), Some(_)) => {
            return Err(invalid(
                "spec.nonResourceAttributes: Invalid value: \"\": cannot be specified in combination with resourceAttributes",
            ));
        }
        (None, None) => {
            return Err(invalid(
                "spec.resourceAttributes: Invalid value: \"null\": exactly one of nonResourceAttributes or resourceAttributes must be specified",
            ));
        }
    };
    let identity = Identity {
        user,
        groups,
        client: String::new(),
    };
    Ok(match auth.review_access(cluster, &identity, &access) {
        Some(reason) if reason.is_empty() => json!({"allowed": true}),
        Some(reason) => json!({"allowed": true, "reason": reason}),
        None => json!({"allowed": false}),
    })
}
