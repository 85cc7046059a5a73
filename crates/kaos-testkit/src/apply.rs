//! Server-side apply, simplified: each field manager's last applied configuration is kept; a new
//! apply removes what that manager applied before and no longer applies (unless another manager
//! applied it too), then merges the new configuration in. Lists with a merge key merge item by
//! item, other lists are atomic. Fields another manager applied with a different value are
//! conflicts unless `force` is set, which moves their ownership.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::patch::merge_key;

/// A field path as SSA reports it in conflicts, e.g. `.spec.template.spec.containers[name="app"].image`.
pub type FieldPath = String;

/// Fields of `applied` that another manager applied with a different value: (manager, path).
pub fn conflicts(
    applied: &Value,
    manager: &str,
    managers: &BTreeMap<String, Value>,
) -> Vec<(String, FieldPath)> {
    let mut found = Vec::new();
    for (other, config) in managers {
        if other == manager {
            continue;
        }
        let mut paths = Vec::new();
        differing_leaves(applied, config, "", "", &mut paths);
        found.extend(paths.into_iter().map(|p| (other.clone(), p)));
    }
    found
}

fn differing_leaves(
    mine: &Value,
    theirs: &Value,
    field: &str,
    path: &str,
    out: &mut Vec<FieldPath>,
) {
    match (mine, theirs) {
        (Value::Object(a), Value::Object(b)) => {
            for (key, value) in a {
                if let Some(other) = b.get(key) {
                    differing_leaves(value, other, key, &format!("{path}.{key}"), out);
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => match merge_key(field, a) {
            Some(key) => {
                for item in a {
                    let Some(id) = item.get(key) else { continue };
                    if let Some(other) = b.iter().find(|o| o.get(key) == Some(id)) {
                        differing_leaves(item, other, "", &format!("{path}[{key}={id}]"), out);
                    }
                }
            }
            None if a != b => out.push(path.to_string()),
            None => {}
        },
        (a, b) if a != b => out.push(path.to_string()),
        _ => {}
    }
}

/// After a (forced) apply, other managers no longer own the fields `applied` set to another
/// value; fields set to the same value stay shared, as in kube's server-side apply. Maps and
/// keyed lists are compared field by field, item by item.
pub fn release_fields(applied: &Value, other_config: &mut Value, field: &str) {
    match (applied, other_config) {
        (Value::Object(mine), Value::Object(theirs)) => {
            let keys: Vec<String> = theirs.keys().cloned().collect();
            for key in keys {
                let (Some(my_value), Some(their_value)) = (mine.get(&key), theirs.get_mut(&key))
                else {
                    continue;
                };
                if is_walked(my_value, their_value, &key) {
                    release_fields(my_value, their_value, &key);
                } else if my_value != their_value {
                    theirs.remove(&key);
                }
            }
        }
        (Value::Array(mine), Value::Array(theirs)) => {
            let Some(key) = merge_key(field, theirs) else {
                return;
            };
            for item in theirs.iter_mut() {
                let id = item.get(key).cloned();
                if let Some(my_item) = mine
                    .iter()
                    .find(|m| id.is_some() && m.get(key) == id.as_ref())
                {
                    release_fields(my_item, item, "");
                }
            }
        }
        _ => {}
    }
}

/// Both maps, or both lists merged by key: ownership is per field inside them.
fn is_walked(mine: &Value, theirs: &Value, field: &str) -> bool {
    match (mine, theirs) {
        (Value::Object(_), Value::Object(_)) => true,
        (Value::Array(a), Value::Array(_)) => merge_key(field, a).is_some(),
        _ => false,
    }
}

/// The object after `manager` applies `applied` over `current`.
pub fn apply(
    current: &Value,
    applied: &Value,
    previous: Option<&Value>,
    others: &[&Value],
) -> Value {
    let mut result = current.clone();
    if let Some(previous) = previous {
        remove_unapplied(&mut result, previous, applied, others, "");
    }
    merge_applied(&mut result, applied, "");
    result
}

/// Removes from `target` what `previous` set and `now` does not, unless one of `others` sets it.
fn remove_unapplied(
    target: &mut Value,
    previous: &Value,
    now: &Value,
    others: &[&Value],
    field: &str,
) {
    match (target, previous) {
        (Value::Object(target), Value::Object(previous)) => {
            for (key, prev_value) in previous {
                let now_value = now.get(key);
                let other_values: Vec<&Value> = others.iter().filter_map(|o| o.get(key)).collect();
                match now_value {
                    None if other_values.is_empty() => {
                        target.remove(key);
                    }
                    None => {}
                    Some(now_value) => {
                        if let Some(child) = target.get_mut(key) {
                            remove_unapplied(child, prev_value, now_value, &other_values, key);
                        }
                    }
                }
            }
        }
        (Value::Array(target), Value::Array(previous)) => {
            let Some(key) = merge_key(field, previous) else {
                return;
            };
            let now_items = now.as_array().map(Vec::as_slice).unwrap_or_default();
            for prev_item in previous {
                let Some(id) = prev_item.get(key) else {
                    continue;
                };
                let find = |items: &[Value]| items.iter().find(|i| i.get(key) == Some(id)).cloned();
                let still_applied = find(now_items);
                let other_items: Vec<Value> = others
                    .iter()
                    .filter_map(|o| o.as_array().and_then(|a| find(a)))
                    .collect();
                match still_applied {
                    None if other_items.is_empty() => target.retain(|i| i.get(key) != Some(id)),
                    None => {}
                    Some(now_item) => {
                        if let Some(t) = target.iter_mut().find(|i| i.get(key) == Some(id)) {
                            let refs: Vec<&Value> = other_items.iter().collect();
                            remove_unapplied(t, prev_item, &now_item, &refs, "");
                        }
                    }
                }
            }
        }
        _ => {}
    }
}

fn merge_applied(target: &mut Value, applied: &Value, field: &str) {
    match (target, applied) {
        (Value::Object(target), Value::Object(applied)) => {
            for (key, value) in applied {
                match target.get_mut(key) {
                    Some(existing) => merge_applied(existing, value, key),
                    None => {
                        target.insert(key.clone(), value.clone());
                    }
                }
            }
        }
        (Value::Array(target), Value::Array(applied)) if merge_key(field, applied).is_some() => {
            let key = merge_key(field, applied).unwrap_or("name");
            *target = merge_keyed(std::mem::take(target), applied, key);
        }
        (target, applied) => *target = applied.clone(),
    }
}

/// Merges an applied keyed list into the live one in the order kube's structured-merge-diff
/// gives: live items keep their places, items both lists hold follow the applied order, and
/// new items come where the applied list puts them, after the live items before them.
fn merge_keyed(live: Vec<Value>, applied: &[Value], key: &str) -> Vec<Value> {
    let live_ids: Vec<Option<Value>> = live.iter().map(|i| i.get(key).cloned()).collect();
    let applied_ids: Vec<Option<Value>> = applied.iter().map(|i| i.get(key).cloned()).collect();
    let is_applied = |id: &Option<Value>| id.is_some() && applied_ids.contains(id);
    let mut shared: std::collections::VecDeque<Value> = applied_ids
        .iter()
        .filter(|id| live_ids.contains(id))
        .flatten()
        .cloned()
        .collect();
    let mut next_shared = shared.pop_front();
    let mut pool: Vec<Option<Value>> = live.into_iter().map(Some).collect();
    let mut merged_ids: Vec<Option<Value>> = Vec::new();
    let mut out = Vec::with_capacity(pool.len() + applied.len());
    let (mut l, mut r) = (0, 0);
    while l < pool.len() || r < applied.len() {
        if l < pool.len() && r < applied.len() {
            if live_ids[l].is_some() && live_ids[l] == applied_ids[r] {
                let mut item = pool[l].take().unwrap_or(Value::Null);
                merge_applied(&mut item, &applied[r], "");
                out.push(item);
                merged_ids.push(applied_ids[r].clone());
                (l, r) = (l + 1, r + 1);
                next_shared = shared.pop_front();
                continue;
            }
            // A shared item, but not the one due now: it comes in the applied order.
            if is_applied(&live_ids[l])
                && next_shared.is_some()
                && next_shared.as_ref() != live_ids[l].as_ref()
            {
                l += 1;
                continue;
            }
        }
        if l < pool.len() {
            if !is_applied(&live_ids[l]) {
                out.extend(pool[l].take());
                l += 1;
                continue;
            }
            if merged_ids.contains(&live_ids[l]) {
                l += 1;
                continue;
            }
        }
        if r < applied.len() {
            let id = &applied_ids[r];
            let live_item = live_ids
                .iter()
                .position(|i| id.is_some() && i == id)
                .and_then(|p| pool[p].take());
            let mut item = live_item.unwrap_or(Value::Null);
            merge_applied(&mut item, &applied[r], "");
            out.push(item);
            merged_ids.push(id.clone());
            if next_shared.is_some() && next_shared.as_ref() == id.as_ref() {
                next_shared = shared.pop_front();
            }
            r += 1;
        }
    }
    out
}

/// `fieldsV1` of a managed-fields entry: the set of fields a configuration sets.
pub fn fields_v1(config: &Value, field: &str) -> Value {
    match config {
        Value::Object(map) => {
            let mut out = Map::new();
            for (key, value) in map {
                out.insert(format!("f:{key}"), fields_v1(value, key));
            }
            Value::Object(out)
        }
        Value::Array(items) => match merge_key(field, items) {
            Some(key) => {
                let mut out = Map::new();
                for item in items {
                    if let Some(id) = item.get(key) {
                        let mut set = fields_v1(item, "");
                        if let Value::Object(m) = &mut set {
                            m.insert(".".into(), json!({}));
                        }
                        out.insert(format!("k:{}", json!({key: id})), set);
                    }
                }
                Value::Object(out)
            }
            None => json!({}),
        },
        _ => json!({}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_managers_share_an_object() {
        let current = json!({"data": {"user": "kept"}});
        let a1 = json!({"data": {"a": "1", "b": "1"}});
        let after_a1 = apply(&current, &a1, None, &[]);
        assert_eq!(
            after_a1,
            json!({"data": {"user": "kept", "a": "1", "b": "1"}})
        );

        let a2 = json!({"data": {"a": "2"}});
        let after_a2 = apply(&after_a1, &a2, Some(&a1), &[]);
        assert_eq!(
            after_a2,
            json!({"data": {"user": "kept", "a": "2"}}),
            "b is no longer applied"
        );

        // Another manager applying the same field keeps it alive when the first drops it.
        let b = json!({"data": {"a": "2"}});
        let after_a3 = apply(&after_a2, &json!({"data": {}}), Some(&a2), &[&b]);
        assert_eq!(after_a3, json!({"data": {"user": "kept", "a": "2"}}));
    }

    #[test]
    fn keyed_lists_merge_and_drop_items() {
        let current = json!({"spec": {"containers": [{"name": "app", "image": "a:1"}, {"name": "user-sidecar"}]}});
        let previous =
            json!({"spec": {"containers": [{"name": "app", "image": "a:1"}, {"name": "old"}]}});
        let now = json!({"spec": {"containers": [{"name": "app", "image": "a:2"}]}});
        let mut with_old = current.clone();
        with_old["spec"]["containers"]
            .as_array_mut()
            .expect("list")
            .push(json!({"name": "old"}));
        assert_eq!(
            apply(&with_old, &now, Some(&previous), &[]),
            json!({"spec": {"containers": [{"name": "app", "image": "a:2"}, {"name": "user-sidecar"}]}})
        );
    }

    #[test]
    fn keyed_lists_keep_the_applied_order() {
        let current = json!({"env": [{"name": "A"}, {"name": "Z"}, {"name": "user"}]});
        let previous = json!({"env": [{"name": "A"}, {"name": "Z"}]});
        let now = json!({"env": [{"name": "A"}, {"name": "M"}, {"name": "Z"}]});
        assert_eq!(
            apply(&current, &now, Some(&previous), &[]),
            json!({"env": [{"name": "A"}, {"name": "M"}, {"name": "Z"}, {"name": "user"}]})
        );
    }

    #[test]
    fn conflicts_and_forced_release() {
        let mut managers = BTreeMap::new();
        managers.insert("a".to_string(), json!({"data": {"x": "1", "y": "1"}}));
        let b = json!({"data": {"x": "2", "y": "1", "z": "1"}});
        assert_eq!(
            conflicts(&b, "b", &managers),
            vec![("a".to_string(), ".data.x".to_string())]
        );
        let mut a = managers.remove("a").expect("a");
        release_fields(&b, &mut a, "");
        assert_eq!(a, json!({"data": {"y": "1"}}), "y is shared: same value");
    }

    #[test]
    fn fields_v1_lists_set_fields() {
        let config = json!({"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}});
        assert_eq!(
            fields_v1(&config, ""),
            json!({"f:metadata": {"f:labels": {"f:app": {}}},
                   "f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:name": {}, "f:image": {}}}}})
        );
    }
}
