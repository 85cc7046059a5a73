//! The HTTP face of the cluster: kube-apiserver's REST paths, verbs and content types, as an axum
//! router (a `tower::Service`, usable in-process by `kube::Client` or served over TCP).

mod admin;
pub mod audit;
mod discovery;
pub mod path;
mod review;
mod scale;
mod table;
mod token;
mod watch;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::response::Response;
use http::{HeaderMap, Method, StatusCode, Uri, header};
use kaos_schema::UnknownFields;
use serde_json::{Value, json};

use crate::auth::{Auth, Identity};
use crate::cluster::{
    Cluster, ListOptions, Patch, PatchType, Propagation, Subresource, WriteOptions,
};
use crate::error::{ApiError, ApiResult};
use crate::faults::{Fault, Faults};
use crate::http::audit::{Audit, AuditRecord};
use crate::resources::ResourceType;
use crate::selectors::{FieldSelector, LabelSelector};
use path::{Query, Route, Target};

/// Everything a request is served from.
#[derive(Clone)]
pub struct ApiServer {
    pub cluster: Cluster,
    pub audit: Audit,
    pub faults: Faults,
    pub auth: Auth,
    /// How often watches that allow bookmarks get one.
    pub bookmark_interval: Duration,
}

impl ApiServer {
    pub fn new(cluster: Cluster) -> Self {
        Self {
            cluster,
            audit: Audit::default(),
            faults: Faults::default(),
            auth: Auth::default(),
            bookmark_interval: Duration::from_secs(5),
        }
    }

    /// The axum router serving every path.
    pub fn router(self) -> Router {
        Router::new().fallback(handle).with_state(Arc::new(self))
    }
}

/// The verb of a resource request, as RBAC and the audit log name it.
fn verb(method: &Method, target: &Target, query: &Query) -> &'static str {
    match (method.as_str(), target.name.is_some()) {
        ("GET", true) => "get",
        ("GET", false) if query.flag("watch") => "watch",
        ("GET", false) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => "unknown",
    }
}

async fn handle(
    State(server): State<Arc<ApiServer>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let started = std::time::Instant::now();
    let query = Query::parse(uri.query());
    let identity = server.auth.authenticate(&headers);
    let route = path::route(&server.cluster, uri.path());
    let (verb, target) = match &route {
        Route::Resource(t) => (verb(&method, t, &query), Some(t.clone())),
        _ => ("get", None),
    };
    let response = match identity.clone() {
        Err(e) => error_response(&e),
        Ok(identity) => {
            serve(
                &server, &method, &uri, &headers, &body, &query, route, verb, &identity,
            )
            .await
        }
    };
    let who = identity
        .map(|i| (i.user, i.client))
        .unwrap_or_else(|_| ("system:anonymous".into(), String::new()));
    server.audit.record(AuditRecord::new(
        who,
        verb,
        &method,
        &uri,
        target.as_ref(),
        response.status().as_u16(),
        started.elapsed(),
    ));
    response
}

#[allow(clippy::too_many_arguments)]
async fn serve(
    server: &ApiServer,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &Bytes,
    query: &Query,
    route: Route,
    verb: &'static str,
    identity: &Identity,
) -> Response {
    let cluster = &server.cluster;
    match route {
        Route::Version => json_response(StatusCode::OK, discovery::version()),
        Route::Health => text_response(StatusCode::OK, "ok"),
        Route::CoreVersions => json_response(StatusCode::OK, discovery::core_versions()),
        Route::Groups => json_response(StatusCode::OK, discovery::groups(cluster)),
        Route::Group(group) => match discovery::group(cluster, &group) {
            Some(g) => json_response(StatusCode::OK, g),
            None => error_response(&ApiError::not_found("groups", "", &group)),
        },
        Route::Resources(group, version) => match discovery::resources(cluster, &group, &version) {
            Some(list) => json_response(StatusCode::OK, list),
            None => error_response(&ApiError::not_found(
                "groupversions",
                "",
                &format!("{group}/{version}"),
            )),
        },
        Route::OpenApiRoot => json_response(StatusCode::OK, discovery::openapi_root(cluster)),
        Route::OpenApiGroup(group, version) => {
            match discovery::openapi_group(cluster, &group, &version) {
                Some(doc) => json_response(StatusCode::OK, doc),
                None => error_response(&ApiError::not_found("openapi", "", uri.path())),
            }
        }
        Route::NotFound => error_response(&ApiError::not_found("paths", "", uri.path())),
        Route::Admin(action) => {
            let result = parse_body(headers, body)
                .and_then(|b| admin::handle(server, identity, method, &action, query, &b));
            match result {
                Ok(value) => json_response(StatusCode::OK, value),
                Err(e) => error_response(&e),
            }
        }
        Route::Resource(target) => {
            let Some(rt) = cluster.resource(&target.group, &target.version, &target.plural) else {
                return error_response(&ApiError::not_found(
                    &target.plural,
                    &target.group,
                    target.name.as_deref().unwrap_or(""),
                ));
            };
            let namespace = target.namespace.as_deref();
            // As kube-apiserver: a list or watch of one name (fieldSelector metadata.name=X) is
            // authorized for that name, so rules with resourceNames can allow it.
            let selected_name = query
                .get("fieldSelector")
                .and_then(|f| f.strip_prefix("metadata.name="))
                .filter(|n| !n.contains(','));
            let name = target.name.as_deref().or(selected_name);
            let sub = target.subresource.as_deref();
            if let Err(e) = server
                .auth
                .authorize(cluster, identity, verb, &rt, namespace, name, sub)
            {
                return error_response(&e);
            }
            // A server-side apply that creates the object also needs permission to create.
            let applies = patch_type(headers).is_ok_and(|p| p == PatchType::Apply);
            if verb == "patch" && applies && sub.is_none() {
                let missing =
                    name.is_some_and(|n| cluster.get(&rt, namespace.unwrap_or(""), n).is_err());
                if missing
                    && let Err(e) = server
                        .auth
                        .authorize(cluster, identity, "create", &rt, namespace, name, None)
                {
                    return error_response(&e);
                }
            }
            let faults = server.faults.config();
            let spared = (identity.is_admin() && faults.spare_admin) || !faults.targets(&rt.plural);
            match server.faults.draw(verb).filter(|_| !spared) {
                Some(Fault::Error(e)) => return error_response(&e),
                Some(Fault::Delay(d)) => tokio::time::sleep(d).await,
                None => {}
            }
            if rt.review {
                let reviewed = parse_body(headers, body).and_then(|b| {
                    only_create(method, &rt.plural)?;
                    review::create(cluster, &server.auth, &b, &rt)
                });
                return answer(reviewed);
            }
            if sub == Some("token") && rt.group.is_empty() && rt.plural == "serviceaccounts" {
                let minted = parse_body(headers, body).and_then(|b| {
                    only_create(method, "serviceaccounts/token")?;
                    let (namespace, name) = (namespace.unwrap_or(""), name.unwrap_or(""));
                    token::create(cluster, &server.auth, &b, &rt, namespace, name)
                });
                return answer(minted);
            }
            if verb == "watch" {
                return watch::serve(server, &rt, namespace.unwrap_or(""), query, headers, spared);
            }
            match resource_request(cluster, method, headers, body, query, &rt, &target) {
                Ok((status, value)) => {
                    let value = negotiate(headers, &rt, value, query);
                    json_response(status, value)
                }
                Err(e) => error_response(&e),
            }
        }
    }
}

fn write_options(query: &Query) -> WriteOptions {
    WriteOptions {
        field_manager: query.get("fieldManager").map(String::from),
        force: query.flag("force"),
        dry_run: query.get("dryRun") == Some("All"),
        unknown_fields: match query.get("fieldValidation") {
            Some("Strict") => UnknownFields::Reject,
            _ => UnknownFields::Prune,
        },
    }
}

fn list_options(query: &Query) -> ApiResult<ListOptions> {
    Ok(ListOptions {
        labels: LabelSelector::parse(query.get("labelSelector").unwrap_or(""))?,
        fields: FieldSelector::parse(query.get("fieldSelector").unwrap_or(""))?,
        limit: query.get("limit").and_then(|l| l.parse().ok()),
        continue_token: query.get("continue").map(String::from),
    })
}

/// Reviews and token requests are answered, never stored: create (POST) is all they support.
fn only_create(method: &Method, resource: &str) -> ApiResult<()> {
    if method == Method::POST {
        Ok(())
    } else {
        Err(ApiError::method_not_allowed(format!(
            "{resource} only supports POST (create)"
        )))
    }
}

/// The answer of a request handled in one go: its status and body, or its error.
fn answer(result: ApiResult<(StatusCode, Value)>) -> Response {
    match result {
        Ok((status, value)) => json_response(status, value),
        Err(e) => error_response(&e),
    }
}

fn parse_body(headers: &HeaderMap, body: &Bytes) -> ApiResult<Value> {
    if body.is_empty() {
        return Ok(Value::Null);
    }
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json");
    // Protobuf and CBOR bodies are not decoded: a 415 makes clients fall back to JSON.
    if content_type.contains("protobuf") || content_type.contains("cbor") {
        return Err(ApiError::unsupported_media_type(content_type));
    }
    match serde_json::from_slice(body) {
        Ok(value) => Ok(value),
        Err(json_error) if content_type.contains("yaml") => {
            let text = std::str::from_utf8(body)
                .map_err(|_| ApiError::bad_request("the body is not UTF-8"))?;
            serde_saphyr::from_str(text).map_err(|e| {
                ApiError::bad_request(format!("the body is not valid YAML: {e} ({json_error})"))
            })
        }
        Err(e) => Err(ApiError::bad_request(format!(
            "the body is not valid JSON: {e}"
        ))),
    }
}

fn patch_type(headers: &HeaderMap) -> ApiResult<PatchType> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let media = content_type.split(';').next().unwrap_or("").trim();
    match media {
        "application/merge-patch+json" => Ok(PatchType::Merge),
        "application/json-patch+json" => Ok(PatchType::Json),
        "application/strategic-merge-patch+json" => Ok(PatchType::Strategic),
        "application/apply-patch+yaml" | "application/apply-patch+cbor" => Ok(PatchType::Apply),
        other => Err(ApiError::unsupported_media_type(other)),
    }
}

fn resource_request(
    cluster: &Cluster,
    method: &Method,
    headers: &HeaderMap,
    body: &Bytes,
    query: &Query,
    rt: &ResourceType,
    target: &Target,
) -> ApiResult<(StatusCode, Value)> {
    let namespace = target.namespace.as_deref().unwrap_or("");
    let sub = match target.subresource.as_deref() {
        None => Subresource::Main,
        Some("status") if rt.has_status => Subresource::Status,
        Some("scale") if rt.scale.is_some() && target.name.is_some() => {
            let body = parse_body(headers, body)?;
            return scale::serve(cluster, method, headers, body, query, rt, target);
        }
        Some(other) => {
            return Err(ApiError::not_found(
                &format!("{}/{other}", rt.plural),
                &rt.group,
                target.name.as_deref().unwrap_or(""),
            ));
        }
    };
    if rt.namespaced && target.namespace.is_none() && method != Method::GET {
        return Err(ApiError::method_not_allowed(format!(
            "{} is namespaced: use /namespaces/<ns>/{}",
            rt.plural, rt.plural
        )));
    }
    let options = write_options(query);
    match (method.as_str(), target.name.as_deref()) {
        ("GET", Some(name)) => Ok((StatusCode::OK, cluster.get(rt, namespace, name)?)),
        ("GET", None) => Ok((
            StatusCode::OK,
            cluster.list(rt, namespace, &list_options(query)?)?,
        )),
        ("POST", None) => {
            let created = cluster.create(rt, namespace, parse_body(headers, body)?, &options)?;
            Ok((StatusCode::CREATED, created))
        }
        ("PUT", Some(name)) => {
            let updated = cluster.update(
                rt,
                namespace,
                name,
                parse_body(headers, body)?,
                sub,
                &options,
            )?;
            Ok((StatusCode::OK, updated))
        }
        ("PATCH", Some(name)) => {
            let kind = patch_type(headers)?;
            let existed = cluster.get(rt, namespace, name).is_ok();
            let body = parse_body(headers, body)?;
            let patched = cluster.patch(
                rt,
                namespace,
                name,
                Patch { kind, body: &body },
                sub,
                &options,
            )?;
            let status = if existed {
                StatusCode::OK
            } else {
                StatusCode::CREATED
            };
            Ok((status, patched))
        }
        ("DELETE", Some(name)) => {
            // DeleteOptions may come as protobuf from typed clients: read what JSON we can.
            let options_body = parse_body(headers, body).unwrap_or(Value::Null);
            let policy = query.get("propagationPolicy").or_else(|| {
                options_body
                    .get("propagationPolicy")
                    .and_then(Value::as_str)
            });
            let propagation = match policy {
                Some("Foreground") => Propagation::Foreground,
                Some("Orphan") => Propagation::Orphan,
                _ => Propagation::Background,
            };
            let dry_run = query.get("dryRun") == Some("All")
                || options_body
                    .get("dryRun")
                    .and_then(Value::as_array)
                    .is_some_and(|d| d.iter().any(|v| v == "All"));
            let deleted = cluster.delete(
                rt,
                namespace,
                name,
                propagation,
                options_body.get("preconditions"),
                dry_run,
            )?;
            Ok((StatusCode::OK, deletion_answer(rt, deleted, dry_run)))
        }
        ("DELETE", None) => Ok((
            StatusCode::OK,
            cluster.delete_collection(rt, namespace, &list_options(query)?)?,
        )),
        (method, _) => Err(ApiError::method_not_allowed(format!(
            "{method} is not supported on this path"
        ))),
    }
}

/// What a DELETE answers, as kube-apiserver: the object when finalizers hold it (or for a dry
/// run), and when it was deleted at once a `Success` Status naming it (pods excepted).
fn deletion_answer(rt: &ResourceType, deleted: Value, dry_run: bool) -> Value {
    let held = deleted
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null());
    let returns_object = rt.group.is_empty() && rt.plural == "pods";
    if held || dry_run || returns_object {
        return deleted;
    }
    let mut details = json!({
        "name": deleted.pointer("/metadata/name").cloned().unwrap_or(Value::Null),
        "kind": rt.plural,
        "uid": deleted.pointer("/metadata/uid").cloned().unwrap_or(Value::Null),
    });
    if !rt.group.is_empty() {
        details["group"] = json!(rt.group);
    }
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details})
}

/// Answers in the representation the client asked for: a Table, metadata only, or the object.
fn negotiate(headers: &HeaderMap, rt: &ResourceType, value: Value, query: &Query) -> Value {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let first = accept.split(',').next().unwrap_or("");
    if first.contains("as=Table") {
        return table::to_table(rt, &value, query.get("includeObject"));
    }
    if first.contains("as=PartialObjectMetadata") {
        return to_metadata(&value);
    }
    value
}

/// The `PartialObjectMetadata(List)` form of an object or list.
pub(crate) fn to_metadata(value: &Value) -> Value {
    let partial = |object: &Value| {
        json!({
            "apiVersion": "meta.k8s.io/v1",
            "kind": "PartialObjectMetadata",
            "metadata": object.get("metadata").cloned().unwrap_or(json!({})),
        })
    };
    match value.get("items").and_then(Value::as_array) {
        Some(items) => json!({
            "apiVersion": "meta.k8s.io/v1",
            "kind": "PartialObjectMetadataList",
            "metadata": value.get("metadata").cloned().unwrap_or(json!({})),
            "items": items.iter().map(partial).collect::<Vec<_>>(),
        }),
        None => partial(value),
    }
}

pub(crate) fn json_response(status: StatusCode, value: Value) -> Response {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(value.to_string()))
        .unwrap_or_else(|_| Response::new(Body::empty()))
}

fn text_response(status: StatusCode, text: &'static str) -> Response {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "text/plain")
        .body(Body::from(text))
        .unwrap_or_else(|_| Response::new(Body::empty()))
}

pub(crate) fn error_response(error: &ApiError) -> Response {
    let status = StatusCode::from_u16(error.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = json_response(status, error.to_status());
    if error.code == 429
        && let Ok(value) = http::HeaderValue::from_str("1")
    {
        response.headers_mut().insert(header::RETRY_AFTER, value);
    }
    response
}
