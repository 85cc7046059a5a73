//! Small helpers over object metadata held as JSON.

use serde_json::{Map, Value};

pub fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// The string at `pointer` (a JSON pointer such as `/metadata/name`), or `""` when there is none.
pub fn str_at<'a>(object: &'a Value, pointer: &str) -> &'a str {
    object
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// The integer at `pointer`, if there is one.
pub fn int_at(object: &Value, pointer: &str) -> Option<i64> {
    object.pointer(pointer).and_then(Value::as_i64)
}

/// The strings of a JSON array (anything else in it skipped); none when it is not an array.
pub fn strings(value: Option<&Value>) -> Vec<String> {
    value
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

pub fn name(object: &Value) -> &str {
    str_at(object, "/metadata/name")
}

pub fn namespace(object: &Value) -> &str {
    str_at(object, "/metadata/namespace")
}

pub fn uid(object: &Value) -> &str {
    str_at(object, "/metadata/uid")
}

pub fn resource_version(object: &Value) -> &str {
    str_at(object, "/metadata/resourceVersion")
}

pub fn finalizers(object: &Value) -> Vec<String> {
    strings(object.pointer("/metadata/finalizers"))
}

pub fn is_deleting(object: &Value) -> bool {
    object
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
}

pub fn owner_uids(object: &Value) -> Vec<String> {
    object
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map(|refs| {
            refs.iter()
                .filter_map(|r| r.get("uid").and_then(Value::as_str))
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

/// The owners whose deletion this object blocks (`blockOwnerDeletion: true`).
pub fn blocking_owner_uids(object: &Value) -> Vec<String> {
    object
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map(|refs| {
            refs.iter()
                .filter(|r| r.get("blockOwnerDeletion").and_then(Value::as_bool) == Some(true))
                .filter_map(|r| r.get("uid").and_then(Value::as_str))
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

/// The metadata map of an object, created if missing.
pub fn metadata_mut(object: &mut Value) -> &mut Map<String, Value> {
    if !object.get("metadata").is_some_and(Value::is_object) {
        object["metadata"] = Value::Object(Map::new());
    }
    object
        .get_mut("metadata")
        .and_then(Value::as_object_mut)
        .expect("metadata was just made an object")
}

/// The object without `metadata` (and without `status` when `drop_status`): what a generation
/// bump compares.
pub fn content(object: &Value, drop_status: bool) -> Value {
    let mut copy = object.clone();
    if let Some(map) = copy.as_object_mut() {
        map.remove("metadata");
        if drop_status {
            map.remove("status");
        }
    }
    copy
}

/// Same object ignoring the fields the server maintains on every write.
pub fn same_except_server_fields(a: &Value, b: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("resourceVersion");
            m.remove("managedFields");
        }
        v
    };
    strip(a) == strip(b)
}

/// A DNS-1123 subdomain, the rule for most object names.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|part| {
            !part.is_empty()
                && part
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(valid_name("agent-worker"));
        assert!(valid_name("kaos.tools"));
        assert!(!valid_name("Agent"));
        assert!(!valid_name("-a"));
        assert!(!valid_name(""));
        assert!(!valid_name("a..b"));
    }
}
