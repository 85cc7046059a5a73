//! API errors as kube-apiserver sends them: a `Status` object with `code`, `reason` and `details`.

use kaos_schema::FieldError;
use serde_json::{Value, json};

/// An error answer of the API server.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Value,
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: String, details: Value) -> Self {
        Self {
            code,
            reason,
            message,
            details,
        }
    }

    /// An error about one object, worded as kube-apiserver's: `<plural>[.<group>] "<name>"
    /// <what>`, with the object in the details.
    fn about_object(
        code: u16,
        reason: &'static str,
        resource: &str,
        group: &str,
        name: &str,
        what: &str,
    ) -> Self {
        Self::new(
            code,
            reason,
            format!("{} \"{name}\" {what}", qualified(resource, group)),
            details(name, group, resource),
        )
    }

    /// `<plural>[.<group>] "<name>" not found`.
    pub fn not_found(resource: &str, group: &str, name: &str) -> Self {
        Self::about_object(404, "NotFound", resource, group, name, "not found")
    }

    /// What kube-apiserver's NamespaceLifecycle admission answers to a create in a namespace
    /// that is being deleted.
    pub fn namespace_terminating(resource: &str, group: &str, name: &str, namespace: &str) -> Self {
        Self::new(
            403,
            "Forbidden",
            format!(
                "{} \"{name}\" is forbidden: unable to create new content in namespace {namespace} because it is being terminated",
                qualified(resource, group)
            ),
            with_causes(
                details(name, group, resource),
                json!([{
                    "reason": "NamespaceTerminating",
                    "message": format!("namespace {namespace} is being terminated"),
                    "field": "metadata.namespace",
                }]),
            ),
        )
    }

    pub fn already_exists(resource: &str, group: &str, name: &str) -> Self {
        Self::about_object(
            409,
            "AlreadyExists",
            resource,
            group,
            name,
            "already exists",
        )
    }

    /// A write based on a stale `resourceVersion`.
    pub fn conflict(resource: &str, group: &str, name: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; \
                 please apply your changes to the latest version and try again",
                qualified(resource, group)
            ),
            details(name, group, resource),
        )
    }

    /// A server-side apply that would take fields another manager owns.
    pub fn apply_conflict(fields: &[(String, String)]) -> Self {
        let lines: Vec<String> = fields
            .iter()
            .map(|(manager, path)| format!("conflict with \"{manager}\": {path}"))
            .collect();
        let causes: Vec<Value> = fields
            .iter()
            .map(|(manager, path)| {
                json!({"reason": "FieldManagerConflict", "message": format!("conflict with \"{manager}\""), "field": path})
            })
            .collect();
        Self::new(
            409,
            "Conflict",
            format!(
                "Apply failed with {} conflict(s): {}",
                fields.len(),
                lines.join("; ")
            ),
            json!({"causes": causes}),
        )
    }

    /// 422 for a rejected object, listing every field error.
    pub fn invalid(kind: &str, group: &str, name: &str, errors: &[FieldError]) -> Self {
        let texts: Vec<String> = errors.iter().map(ToString::to_string).collect();
        let subject = format!("{} \"{name}\" is invalid", qualified(kind, group));
        let message = if texts.len() == 1 {
            format!("{subject}: {}", texts[0])
        } else {
            format!("{subject}: [{}]", texts.join(", "))
        };
        let causes: Vec<Value> = errors
            .iter()
            .map(|e| json!({"reason": e.reason(), "message": e.detail_message(), "field": e.path}))
            .collect();
        Self::new(
            422,
            "Invalid",
            message,
            with_causes(details(name, group, kind), json!(causes)),
        )
    }

    /// 422 for a request that is well-formed but cannot be applied (e.g. a failing JSON patch test).
    pub fn unprocessable(message: impl Into<String>) -> Self {
        Self::new(422, "Invalid", message.into(), json!({}))
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message.into(), json!({}))
    }

    /// A create of a kind whose CRD is being deleted, worded as kube-apiserver's.
    pub fn crd_terminating(resource: &str, group: &str, name: &str) -> Self {
        Self::about_object(
            403,
            "Forbidden",
            resource,
            group,
            name,
            "is forbidden: create not allowed while custom resource definition is terminating",
        )
    }

    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message.into(), json!({}))
    }

    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/merge-patch+json, application/json-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml (got {content_type:?})"
            ),
            json!({}),
        )
    }

    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message.into(), json!({}))
    }

    pub fn forbidden(
        user: &str,
        verb: &str,
        resource: &str,
        group: &str,
        namespace: Option<&str>,
    ) -> Self {
        let scope = match namespace {
            Some(ns) => format!("in the namespace \"{ns}\""),
            None => "at the cluster scope".to_string(),
        };
        Self::new(
            403,
            "Forbidden",
            format!(
                "{resource}{} is forbidden: User \"{user}\" cannot {verb} resource \"{resource}\" in API group \"{group}\" {scope}",
                if group.is_empty() {
                    String::new()
                } else {
                    format!(".{group}")
                }
            ),
            details("", group, resource),
        )
    }

    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized".into(), json!({}))
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message.into(), json!({}))
    }

    /// kube-apiserver's `NewInternalError`: the error's text as the message and its one cause.
    pub fn internal_error(error: impl Into<String>) -> Self {
        let error = error.into();
        Self::new(
            500,
            "InternalError",
            format!("Internal error occurred: {error}"),
            json!({"causes": [{"message": error}]}),
        )
    }

    pub fn too_many_requests() -> Self {
        Self::new(
            429,
            "TooManyRequests",
            "the server has received too many requests and has asked us to try again later".into(),
            json!({"retryAfterSeconds": 1}),
        )
    }

    /// The `Status` object sent as the response body.
    pub fn to_status(&self) -> Value {
        json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "details": self.details,
            "code": self.code,
        })
    }
}

/// A Status' `details`: kube-apiserver leaves out an empty name or group.
fn details(name: &str, group: &str, kind: &str) -> Value {
    let mut details = json!({"kind": kind});
    if !name.is_empty() {
        details["name"] = json!(name);
    }
    if !group.is_empty() {
        details["group"] = json!(group);
    }
    details
}

fn with_causes(mut details: Value, causes: Value) -> Value {
    details["causes"] = causes;
    details
}

fn qualified(resource: &str, group: &str) -> String {
    if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
