//! Whether an observed object still holds everything the controller wants in it.
//!
//! The observed object has more than we sent (defaults, status, fields of other managers), so the
//! question is "does it cover the desired one", not equality: every field we set must be there
//! with our value. Lists of named items (containers, env, ports, volumes) are matched by `name`
//! and owner references by `uid`, so an entry another tool appended is not drift; other lists
//! must be equal. Pure, on JSON values.

use serde_json::Value;

/// Whether `observed` holds every field of `desired` with the same value.
pub fn covers(observed: &Value, desired: &Value) -> bool {
    match (observed, desired) {
        (_, Value::Null) => true,
        (Value::Object(o), Value::Object(d)) => d.iter().all(|(key, want)| match o.get(key) {
            Some(got) => covers(got, want),
            // kube-apiserver stores no empty list or map: absent is what it keeps of them.
            None => is_empty(want),
        }),
        (Value::Array(o), Value::Array(d)) => match list_key(d) {
            Some(key) => d.iter().all(|want| {
                o.iter()
                    .find(|got| got.get(key) == want.get(key))
                    .is_some_and(|got| covers(got, want))
            }),
            None => o.len() == d.len() && o.iter().zip(d).all(|(got, want)| covers(got, want)),
        },
        (Value::Number(o), Value::Number(d)) => o.as_f64() == d.as_f64(),
        (o, d) => o == d,
    }
}

fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

/// The key that identifies items of a list, when every item has it.
fn list_key(items: &[Value]) -> Option<&'static str> {
    ["uid", "name"]
        .into_iter()
        .find(|key| !items.is_empty() && items.iter().all(|i| i.get(key).is_some()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_and_other_fields_are_not_drift() {
        let desired = json!({"spec": {"replicas": 1, "template": {"spec": {"containers": [
            {"name": "agent", "image": "a:1", "env": [{"name": "A", "value": "1"}]}]}}}});
        let observed = json!({"spec": {"replicas": 1, "revisionHistoryLimit": 10, "template": {"spec": {
            "dnsPolicy": "ClusterFirst",
            "containers": [{"name": "agent", "image": "a:1", "imagePullPolicy": "IfNotPresent",
                "env": [{"name": "A", "value": "1"}, {"name": "INJECTED", "value": "x"}]},
                {"name": "sidecar", "image": "s"}]}}}, "status": {"readyReplicas": 1}});
        assert!(covers(&observed, &desired));
    }

    #[test]
    fn a_changed_or_missing_field_is_drift() {
        let desired = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "agent", "image": "a:1", "env": [{"name": "A", "value": "1"}]}]}}}});
        let edited = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "agent", "image": "a:2", "env": [{"name": "A", "value": "1"}]}]}}}});
        let env_removed = json!({"spec": {"template": {"spec": {"containers": [{"name": "agent", "image": "a:1"}]}}}});
        assert!(!covers(&edited, &desired));
        assert!(!covers(&env_removed, &desired));
        assert!(!covers(&json!({}), &desired));
    }

    #[test]
    fn unnamed_lists_must_be_equal() {
        let desired = json!({"args": ["--port", "8000"]});
        assert!(covers(&json!({"args": ["--port", "8000"]}), &desired));
        assert!(!covers(
            &json!({"args": ["--port", "8000", "-v"]}),
            &desired
        ));
        assert!(!covers(&json!({"args": ["--port"]}), &desired));
    }

    #[test]
    fn owner_references_match_by_uid() {
        let desired = json!({"metadata": {"ownerReferences": [{"uid": "u1", "controller": true}]}});
        let observed = json!({"metadata": {"ownerReferences": [
            {"uid": "other", "controller": false}, {"uid": "u1", "controller": true}]}});
        assert!(covers(&observed, &desired));
        assert!(!covers(
            &json!({"metadata": {"ownerReferences": []}}),
            &desired
        ));
    }

    #[test]
    fn an_empty_list_or_map_the_server_dropped_is_not_drift() {
        let desired = json!({"spec": {"env": [], "selector": {}, "args": ["a"]}});
        assert!(covers(&json!({"spec": {"args": ["a"]}}), &desired));
        assert!(
            !covers(&json!({"spec": {}}), &desired),
            "a non-empty list is still required"
        );
    }

    #[test]
    fn numbers_compare_by_value() {
        assert!(covers(&json!({"port": 8000.0}), &json!({"port": 8000})));
    }
}
