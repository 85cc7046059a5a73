//! The three classic patch formats: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and
//! Kubernetes strategic merge patch for built-in kinds (the one implementation in
//! `kaos_strategic_merge`, which the operator's podSpec merge uses too).

use kaos_strategic_merge::MergeError;
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

/// The merge key of a list known by its field name only, for server-side apply (`apply`): the
/// key of the lists of that name in the strategic merge's table
/// ([`kaos_strategic_merge::MERGED_LISTS`]); `ports` is keyed by `containerPort` in containers
/// and by `port` in Services.
pub fn merge_key(field: &str, items: &[Value]) -> Option<&'static str> {
    kaos_strategic_merge::merge_key_by_name(field, items)
}

/// Applies a strategic merge patch to a built-in object, with the merge the operator uses for
/// `spec.podSpec` (`kaos_strategic_merge`: Kubernetes' merge keys, `$patch`, `$retainKeys`,
/// `$setElementOrder`, `$deleteFromPrimitiveList`). A patch that cannot be merged gets
/// kube-apiserver's answer: 400 for a body that is no JSON object or a malformed
/// `$retainKeys`, else 500 with apimachinery's message.
pub fn strategic_merge(target: &mut Value, patch: &Value) -> ApiResult<()> {
    if patch.is_null() {
        return Ok(());
    }
    if !patch.is_object() {
        return Err(ApiError::bad_request(format!(
            "json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
            json_type(patch)
        )));
    }
    kaos_strategic_merge::merge(target, patch, &[]).map_err(|e| match e {
        MergeError::MissingKey { key, item, .. } => unknown_error(format!(
            "map: {} does not contain declared merge key: {key}",
            go_value(&item)
        )),
        MergeError::UnknownDirective {
            directive, item, ..
        } => unknown_error(format!(
            "unknown patch type: {} in map: {}",
            go_value(&directive),
            go_value(&item)
        )),
        MergeError::MergeDirectiveInList { .. } => {
            unknown_error("merging lists cannot yet be specified in the patch".into())
        }
        MergeError::BadRetainKeys { .. } => {
            ApiError::bad_request("invalid patch format of retainKeys")
        }
        MergeError::NotAList { value, .. } => unknown_error(format!(
            "expected a []interface {{}}, but received a {}",
            go_type(&value)
        )),
    })
}

/// kube-apiserver's answer to an error that is no API status: 500, no reason, the error's text.
fn unknown_error(message: String) -> ApiError {
    ApiError {
        code: 500,
        reason: "",
        message,
        details: Value::Object(Map::new()),
    }
}

/// The JSON type name `encoding/json` uses in an unmarshal error.
fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Array(_) => "array",
        Value::String(_) => "string",
        Value::Number(_) => "number",
        Value::Bool(_) => "bool",
        Value::Object(_) => "object",
        Value::Null => "null",
    }
}

/// The Go type a decoded JSON value has in kube-apiserver.
fn go_type(value: &Value) -> &'static str {
    match value {
        Value::Object(_) => "map[string]interface {}",
        Value::Array(_) => "[]interface {}",
        Value::String(_) => "string",
        Value::Number(n) if n.is_f64() => "float64",
        Value::Number(_) => "int64",
        Value::Bool(_) => "bool",
        Value::Null => "<nil>",
    }
}

/// A decoded JSON value as Go's `%v` prints it (maps with sorted keys: `map[a:1 b:[x y]]`).
fn go_value(value: &Value) -> String {
    match value {
        Value::Null => "<nil>".into(),
        Value::String(s) => s.clone(),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(go_value).collect();
            format!("[{}]", items.join(" "))
        }
        Value::Object(map) => {
            let mut fields: Vec<(&String, &Value)> = map.iter().collect();
            fields.sort_by_key(|(k, _)| *k);
            let fields: Vec<String> = fields
                .into_iter()
                .map(|(k, v)| format!("{k}:{}", go_value(v)))
                .collect();
            format!("map[{}]", fields.join(" "))
        }
        scalar => scalar.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strategic_merge_of_a_deployment() {
        let mut deployment = json!({"spec": {"template": {"spec": {
            "containers": [{"name": "app", "image": "a:1", "env": [{"name": "A", "value": "1"}],
                            "ports": [{"containerPort": 8000, "name": "http"}]}],
            "nodeSelector": {"a": "1"},
            "tolerations": [{"key": "x"}]
        }}}});
        strategic_merge(
            &mut deployment,
            &json!({"spec": {"template": {"spec": {
                "$setElementOrder/containers": [{"name": "side"}, {"name": "app"}],
                "containers": [
                    {"name": "app", "env": [{"name": "B", "value": "2"}, {"name": "A", "value": "9"}]},
                    {"name": "side", "image": "s:1"}
                ],
                "nodeSelector": {"b": "2", "a": null},
                "tolerations": [{"key": "y"}]
            }}}}),
        )
        .expect("merges");
        assert_eq!(
            deployment["spec"]["template"]["spec"],
            json!({
                "containers": [
                    {"name": "side", "image": "s:1"},
                    {"name": "app", "image": "a:1", "env": [{"name": "B", "value": "2"}, {"name": "A", "value": "9"}],
                     "ports": [{"containerPort": 8000, "name": "http"}]}
                ],
                "nodeSelector": {"b": "2"},
                "tolerations": [{"key": "y"}]
            })
        );
        strategic_merge(
            &mut deployment,
            &json!({"spec": {"template": {"spec": {"containers": [{"name": "side", "$patch": "delete"}]}}}}),
        )
        .expect("merges");
        let containers = &deployment["spec"]["template"]["spec"]["containers"];
        assert_eq!(containers.as_array().map(Vec::len), Some(1));
    }

    /// What kube-apiserver answers to a patch it cannot merge (checked against apimachinery's
    /// `StrategicMergeMapPatch` and kube-apiserver's error handling).
    #[test]
    fn unmergeable_patches_get_kube_apiservers_answers() {
        let live = json!({"spec": {"containers": [{"name": "app"}]}});
        let cases = [
            (
                json!({"spec": {"containers": [{"image": "x", "ports": [80]}]}}),
                500,
                "map: map[image:x ports:[80]] does not contain declared merge key: name",
            ),
            (
                json!({"spec": {"$patch": "merge"}}),
                500,
                "unknown patch type: merge in map: map[$patch:merge]",
            ),
            (
                json!({"spec": {"containers": [{"name": "app", "$patch": "merge"}]}}),
                500,
                "merging lists cannot yet be specified in the patch",
            ),
            (
                json!({"spec": {"$retainKeys": ["containers"], "volumes": []}}),
                400,
                "invalid patch format of retainKeys",
            ),
            (
                json!({"spec": {"$setElementOrder/containers": {"name": "app"}}}),
                500,
                "expected a []interface {}, but received a map[string]interface {}",
            ),
            (
                json!([{"op": "add"}]),
                400,
                "json: cannot unmarshal array into Go value of type map[string]interface {}",
            ),
        ];
        for (patch, code, message) in cases {
            let err = strategic_merge(&mut live.clone(), &patch).expect_err("refused");
            assert_eq!((err.code, err.message.as_str()), (code, message), "{patch}");
        }
        let mut unchanged = live.clone();
        strategic_merge(&mut unchanged, &Value::Null).expect("a null patch changes nothing");
        assert_eq!(unchanged, live);
    }

    #[test]
    fn server_side_apply_keys_lists_by_the_same_table() {
        assert_eq!(merge_key("env", &[]), Some("name"));
        assert_eq!(
            merge_key("ports", &[json!({"containerPort": 80})]),
            Some("containerPort")
        );
        assert_eq!(merge_key("ports", &[json!({"port": 80})]), Some("port"));
        assert_eq!(merge_key("conditions", &[]), Some("type"));
        assert_eq!(merge_key("tolerations", &[]), None);
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
