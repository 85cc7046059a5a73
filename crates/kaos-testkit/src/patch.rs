//! The three classic patch formats: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and
//! Kubernetes strategic merge patch for built-in kinds.

use serde_json::{Map, Value};

use crate::error::{ApiError, ApiResult};

pub fn merge_patch(target: &mut Value, patch: &Value) {
    json_patch::merge(target, patch);
}

/// Applies an RFC 6902 patch. As kube-apiserver's implementation does, a `test` for the value
/// `null` succeeds when the path does not exist (kube's finalizer helper relies on that).
pub fn json_patch(target: &mut Value, patch: &Value) -> ApiResult<()> {
    let ops: json_patch::Patch = serde_json::from_value(patch.clone())
        .map_err(|e| ApiError::bad_request(format!("invalid JSON patch: {e}")))?;
    for op in ops.0 {
        if let json_patch::PatchOperation::Test(test) = &op
            && test.value.is_null()
            && target
                .pointer(test.path.as_str())
                .is_none_or(Value::is_null)
        {
            continue;
        }
        json_patch::patch(target, &[op]).map_err(|e| {
            ApiError::unprocessable(format!(
                "the server rejected our request due to an error in our request: {e}"
            ))
        })?;
    }
    Ok(())
}

/// The merge key of a list field in the built-in kinds, as their `patchMergeKey` tags declare.
/// `ports` is keyed by `containerPort` in containers and by `port` in Services.
pub fn merge_key(field: &str, items: &[Value]) -> Option<&'static str> {
    Some(match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "imagePullSecrets" => "name",
        "volumeMounts" => "mountPath",
        "volumeDevices" => "devicePath",
        "hostAliases" => "ip",
        "conditions" => "type",
        "ownerReferences" => "uid",
        "topologySpreadConstraints" => "topologyKey",
        "ports" => {
            let container_ports = items.iter().any(|i| i.get("containerPort").is_some());
            if container_ports {
                "containerPort"
            } else {
                "port"
            }
        }
        _ => return None,
    })
}

/// Applies a strategic merge patch: maps merge, `null` deletes, lists with a merge key merge
/// item by item (`$patch: delete` removes one), other lists are replaced. Ordering directives
/// (`$setElementOrder/…`, `$retainKeys`) that kubectl sends are accepted and ignored.
pub fn strategic_merge(target: &mut Value, patch: &Value) {
    let Value::Object(patch_map) = patch else {
        *target = patch.clone();
        return;
    };
    if patch_map.get("$patch").and_then(Value::as_str) == Some("replace") {
        let mut replacement = patch_map.clone();
        replacement.remove("$patch");
        *target = Value::Object(replacement);
        return;
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(target_map) = target else {
        return;
    };
    for (key, value) in patch_map {
        if key.starts_with('$') {
            continue;
        }
        match value {
            Value::Null => {
                target_map.remove(key);
            }
            Value::Array(items) => match (merge_key(key, items), target_map.get_mut(key)) {
                (Some(merge_key), Some(Value::Array(existing))) => {
                    merge_keyed_list(existing, items, merge_key)
                }
                _ => {
                    let kept: Vec<Value> = items
                        .iter()
                        .filter(|i| i.get("$patch").is_none())
                        .cloned()
                        .collect();
                    target_map.insert(key.clone(), Value::Array(kept));
                }
            },
            Value::Object(_) => {
                strategic_merge(target_map.entry(key.clone()).or_insert(Value::Null), value)
            }
            scalar => {
                target_map.insert(key.clone(), scalar.clone());
            }
        }
    }
}

fn merge_keyed_list(existing: &mut Vec<Value>, patch_items: &[Value], key: &str) {
    for item in patch_items {
        let Some(id) = item.get(key) else {
            existing.push(item.clone());
            continue;
        };
        let position = existing.iter().position(|e| e.get(key) == Some(id));
        let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
        match (position, delete) {
            (Some(i), true) => {
                existing.remove(i);
            }
            (None, true) => {}
            (Some(i), false) => strategic_merge(&mut existing[i], item),
            (None, false) => existing.push(item.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strategic_merge_of_a_pod_spec() {
        let mut spec = json!({
            "containers": [{"name": "app", "image": "a:1", "env": [{"name": "A", "value": "1"}],
                            "ports": [{"containerPort": 8000, "name": "http"}]}],
            "nodeSelector": {"a": "1"},
            "tolerations": [{"key": "x"}]
        });
        strategic_merge(
            &mut spec,
            &json!({
                "$setElementOrder/containers": [{"name": "app"}, {"name": "side"}],
                "containers": [
                    {"name": "app", "env": [{"name": "B", "value": "2"}, {"name": "A", "value": "9"}]},
                    {"name": "side", "image": "s:1"}
                ],
                "nodeSelector": {"b": "2", "a": null},
                "tolerations": [{"key": "y"}]
            }),
        );
        assert_eq!(
            spec,
            json!({
                "containers": [
                    {"name": "app", "image": "a:1", "env": [{"name": "A", "value": "9"}, {"name": "B", "value": "2"}],
                     "ports": [{"containerPort": 8000, "name": "http"}]},
                    {"name": "side", "image": "s:1"}
                ],
                "nodeSelector": {"b": "2"},
                "tolerations": [{"key": "y"}]
            })
        );
        strategic_merge(
            &mut spec,
            &json!({"containers": [{"name": "side", "$patch": "delete"}]}),
        );
        assert_eq!(spec["containers"].as_array().map(Vec::len), Some(1));
    }

    #[test]
    fn json_patch_errors_are_422() {
        let mut v = json!({"a": 1});
        json_patch(
            &mut v,
            &json!([{"op": "replace", "path": "/a", "value": 2}]),
        )
        .expect("applies");
        assert_eq!(v, json!({"a": 2}));
        let err = json_patch(&mut v, &json!([{"op": "test", "path": "/a", "value": 3}]))
            .expect_err("test fails");
        assert_eq!(err.code, 422);
        assert_eq!(
            json_patch(&mut v, &json!({"not": "a list"}))
                .expect_err("bad")
                .code,
            400
        );
    }
}
