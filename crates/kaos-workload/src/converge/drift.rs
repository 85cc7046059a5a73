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

/// Whether `observed` holds `desired` and nothing more at the top of each of `pointers`: a list
/// of the same length (its items matched as in [`covers`]), a map with the same keys, an equal
/// value. Fields the desired object leaves out are not compared.
pub fn holds_whole(observed: &Value, desired: &Value, pointers: &[&str]) -> bool {
    pointers.iter().all(|pointer| {
        let Some(want) = desired.pointer(pointer).filter(|v| !v.is_null()) else {
            return true;
        };
        let got = observed.pointer(pointer).unwrap_or(&Value::Null);
        let same_size = match (got, want) {
            (Value::Array(o), Value::Array(d)) => o.len() == d.len(),
            (Value::Object(o), Value::Object(d)) => o.len() == d.len(),
            _ => true,
        };
        same_size && covers(got, want)
    })
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
    fn a_field_owned_whole_holds_nothing_more() {
        let owned = ["/spec/ports", "/spec/selector", "/spec/type"];
        let desired = json!({"spec": {"type": "ClusterIP", "selector": {"app": "a"},
            "ports": [{"name": "http", "port": 8000}]}});
        let observed = json!({"spec": {"type": "ClusterIP", "clusterIP": "10.0.0.1",
            "selector": {"app": "a"}, "ports": [{"name": "http", "port": 8000, "protocol": "TCP"}]}});
        assert!(
            holds_whole(&observed, &desired, &owned),
            "server defaults are not drift"
        );
        let mut added = observed.clone();
        added["spec"]["ports"]
            .as_array_mut()
            .expect("ports")
            .push(json!({"name": "extra", "port": 9090}));
        assert!(!holds_whole(&added, &desired, &owned), "a port added");
        let mut changed = observed.clone();
        changed["spec"]["ports"][0]["port"] = json!(9000);
        assert!(!holds_whole(&changed, &desired, &owned), "a port changed");
        let mut selector = observed.clone();
        selector["spec"]["selector"]["extra"] = json!("x");
        assert!(
            !holds_whole(&selector, &desired, &owned),
            "a selector key added"
        );
        let mut typed = observed;
        typed["spec"]["type"] = json!("NodePort");
        assert!(!holds_whole(&typed, &desired, &owned), "another type");
        assert!(
            holds_whole(&json!({}), &json!({}), &owned),
            "nothing desired there"
        );
    }

    #[test]
    fn numbers_compare_by_value() {
        assert!(covers(&json!({"port": 8000.0}), &json!({"port": 8000})));
    }
}
