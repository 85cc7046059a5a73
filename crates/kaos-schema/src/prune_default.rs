//! Pruning and defaulting, the two rewrites kube-apiserver makes to a custom resource before it
//! validates it.

use serde_json::Value;

use crate::{child_path, flag};

/// Root fields every object keeps whatever its schema says (metadata is validated separately).
const ROOT_FIELDS: &[&str] = &["apiVersion", "kind", "metadata"];

/// Removes fields the schema does not declare and nulls the schema does not allow; returns the
/// paths of removed unknown fields (what `fieldValidation=Strict` rejects).
pub(super) fn prune(schema: &Value, value: &mut Value, path: &str) -> Vec<String> {
    let mut unknown = Vec::new();
    prune_into(schema, value, path, &mut unknown);
    unknown
}

fn prune_into(schema: &Value, value: &mut Value, path: &str, unknown: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            let keep_unknown = flag(schema, "x-kubernetes-preserve-unknown-fields");
            let keys: Vec<String> = map.keys().cloned().collect();
            for key in keys {
                if path.is_empty() && ROOT_FIELDS.contains(&key.as_str()) {
                    continue;
                }
                let child_schema = properties.and_then(|p| p.get(&key)).or(additional);
                match child_schema {
                    Some(child_schema) => {
                        let child_path = child_path(path, &key);
                        let drop_null = map.get(&key).is_some_and(Value::is_null)
                            && !flag(child_schema, "nullable");
                        if drop_null {
                            map.remove(&key);
                        } else if let Some(child) = map.get_mut(&key) {
                            prune_into(child_schema, child, &child_path, unknown);
                        }
                    }
                    None if keep_unknown => {}
                    None => {
                        map.remove(&key);
                        unknown.push(child_path(path, &key));
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (index, item) in items.iter_mut().enumerate() {
                    prune_into(item_schema, item, &format!("{path}[{index}]"), unknown);
                }
            }
        }
        _ => {}
    }
}

/// Sets every missing property that has a `default` in the schema, inside objects that exist.
pub(super) fn apply_defaults(schema: &Value, value: &mut Value) {
    match value {
        Value::Object(map) => {
            if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
                for (key, child_schema) in properties {
                    if !map.contains_key(key)
                        && let Some(default) = child_schema.get("default")
                    {
                        map.insert(key.clone(), default.clone());
                    }
                    if let Some(child) = map.get_mut(key) {
                        apply_defaults(child_schema, child);
                    }
                }
            }
            if let Some(additional) = schema.get("additionalProperties").filter(|a| a.is_object()) {
                for child in map.values_mut() {
                    apply_defaults(additional, child);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for item in items {
                    apply_defaults(item_schema, item);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "properties": {
                        "a": {"type": "integer", "default": 5},
                        "nested": {
                            "type": "object", "nullable": true,
                            "properties": {"flag": {"type": "boolean", "default": true}}
                        },
                        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "list": {"type": "array", "items": {
                            "type": "object", "properties": {"n": {"type": "string", "default": "x"}}
                        }}
                    }
                }
            }
        })
    }

    #[test]
    fn prunes_unknown_fields_and_reports_their_paths() {
        let mut obj = json!({
            "apiVersion": "v", "kind": "K", "metadata": {"name": "n"}, "extra": 1,
            "spec": {"a": 1, "bogus": true, "labels": {"any": "thing"}, "free": {"kept": 1},
                     "list": [{"n": "y", "zzz": 0}]}
        });
        let unknown = prune(&schema(), &mut obj, "");
        assert_eq!(unknown, vec!["extra", "spec.bogus", "spec.list[0].zzz"]);
        assert_eq!(
            obj,
            json!({"apiVersion": "v", "kind": "K", "metadata": {"name": "n"},
                   "spec": {"a": 1, "labels": {"any": "thing"}, "free": {"kept": 1}, "list": [{"n": "y"}]}})
        );
    }

    #[test]
    fn drops_nulls_unless_nullable() {
        let mut obj = json!({"spec": {"a": null, "nested": null}});
        prune(&schema(), &mut obj, "");
        assert_eq!(obj, json!({"spec": {"nested": null}}));
    }

    #[test]
    fn defaults_only_inside_existing_objects() {
        let mut obj = json!({"spec": {"list": [{}]}});
        apply_defaults(&schema(), &mut obj);
        // `nested` is absent, so its `flag` default does not create it.
        assert_eq!(obj, json!({"spec": {"a": 5, "list": [{"n": "x"}]}}));
        let mut obj = json!({"spec": {"a": 1, "nested": {}}});
        apply_defaults(&schema(), &mut obj);
        assert_eq!(obj, json!({"spec": {"a": 1, "nested": {"flag": true}}}));
    }
}
