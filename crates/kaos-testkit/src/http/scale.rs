//! The `/scale` subresource of Deployments and of custom resources whose CRD declares one: an
//! `autoscaling/v1` Scale whose `spec.replicas` is the object's (at the CRD's
//! `specReplicasPath`), as `kubectl scale`, HPAs and KEDA read and write it.

use http::{HeaderMap, Method, StatusCode};
use kaos_schema::FieldError;
use serde_json::{Value, json};

use super::path::{Query, Target};
use crate::cluster::{Cluster, Patch, PatchType, Subresource};
use crate::error::{ApiError, ApiResult};
use crate::resources::{ResourceType, ScalePaths};

/// GET, PATCH (merge, JSON or strategic) or PUT of `<name>/scale`.
pub fn serve(
    cluster: &Cluster,
    method: &Method,
    headers: &HeaderMap,
    body: Value,
    query: &Query,
    rt: &ResourceType,
    target: &Target,
) -> ApiResult<(StatusCode, Value)> {
    let namespace = target.namespace.as_deref().unwrap_or_default();
    let name = target.name.as_deref().unwrap_or_default();
    let Some(paths) = &rt.scale else {
        return Err(ApiError::not_found(
            &format!("{}/scale", rt.plural),
            &rt.group,
            name,
        ));
    };
    let object = cluster.get(rt, namespace, name)?;
    let current = scale_of(&object, paths);
    let wanted = match method.as_str() {
        // A custom resource without replicas has no Scale to read (writes set them).
        "GET" if paths.custom_resource && object.pointer(&paths.spec_replicas).is_none() => {
            return Err(ApiError::internal_error(format!(
                "the spec replicas field \"{}\" does not exist",
                paths.spec_replicas.replace('/', ".")
            )));
        }
        "GET" => return Ok((StatusCode::OK, current)),
        "PUT" => {
            let sent = body
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str);
            if sent.is_some_and(|v| !v.is_empty() && Some(v) != resource_version(&current)) {
                return Err(ApiError::conflict(&rt.plural, &rt.group, name));
            }
            body
        }
        "PATCH" => {
            let mut patched = current.clone();
            match super::patch_type(headers)? {
                PatchType::Json => crate::patch::json_patch(&mut patched, &body)?,
                PatchType::Apply => {
                    return Err(ApiError::unsupported_media_type(
                        "application/apply-patch+yaml is not supported on /scale",
                    ));
                }
                PatchType::Merge | PatchType::Strategic => {
                    crate::patch::merge_patch(&mut patched, &body)
                }
            }
            patched
        }
        other => {
            return Err(ApiError::method_not_allowed(format!(
                "{other} is not supported on /scale"
            )));
        }
    };
    // A Deployment's Scale is checked as a Scale; a custom resource's count is checked with the
    // resource (its schema and its scale path), as kube-apiserver does.
    let replicas = if paths.custom_resource {
        wanted
            .pointer("/spec/replicas")
            .cloned()
            .unwrap_or(json!(0))
    } else {
        json!(replicas(&wanted, name)?)
    };
    let change = at_path(&paths.spec_replicas, replicas);
    let patch = Patch {
        kind: PatchType::Merge,
        body: &change,
    };
    let updated = cluster.patch(
        rt,
        namespace,
        name,
        patch,
        Subresource::Main,
        &super::write_options(query),
    )?;
    Ok((StatusCode::OK, scale_of(&updated, paths)))
}

/// `spec.replicas` of a Scale, refused as kube-apiserver refuses it when negative.
fn replicas(scale: &Value, name: &str) -> ApiResult<i64> {
    let value = scale.pointer("/spec/replicas").cloned().unwrap_or(json!(0));
    match value.as_i64() {
        Some(n) if n >= 0 => Ok(n),
        _ => Err(ApiError::invalid(
            "Scale",
            "autoscaling",
            name,
            &[FieldError::invalid(
                "spec.replicas",
                &value,
                "must be greater than or equal to 0".into(),
            )],
        )),
    }
}

fn resource_version(object: &Value) -> Option<&str> {
    object
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
}

/// A merge patch setting the value at `pointer` (`/spec/replicas`).
fn at_path(pointer: &str, value: Value) -> Value {
    pointer
        .split('/')
        .filter(|p| !p.is_empty())
        .rev()
        .fold(value, |inner, key| json!({ key: inner }))
}

/// The Scale view of an object.
fn scale_of(object: &Value, paths: &ScalePaths) -> Value {
    let metadata = &object["metadata"];
    let selector = match &paths.label_selector {
        Some(pointer) => object.pointer(pointer).cloned().unwrap_or(json!("")),
        None => json!(
            object
                .pointer("/spec/selector/matchLabels")
                .and_then(Value::as_object)
                .map(|labels| {
                    labels
                        .iter()
                        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .unwrap_or_default()
        ),
    };
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": metadata["name"],
            "namespace": metadata["namespace"],
            "uid": metadata["uid"],
            "resourceVersion": metadata["resourceVersion"],
            "creationTimestamp": metadata["creationTimestamp"],
        },
        "spec": {"replicas": object.pointer(&paths.spec_replicas).cloned().unwrap_or(json!(if paths.custom_resource { 0 } else { 1 }))},
        "status": {
            "replicas": object.pointer(&paths.status_replicas).cloned().unwrap_or(json!(0)),
            "selector": selector,
        },
    })
}
