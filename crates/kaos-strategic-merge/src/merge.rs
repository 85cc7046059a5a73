//! The merge itself: maps field by field, lists by their strategy (`lists`), and the patch
//! directives, in apimachinery's order (`$patch`, then `$retainKeys`, then `$setElementOrder`
//! with its list, then `$deleteFromPrimitiveList`, then the fields).

use std::fmt;

use serde_json::{Map, Value};

use crate::lists::{ListStrategy, list_strategy};
use crate::order::set_element_order;

const PATCH: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ELEMENT_ORDER: &str = "$setElementOrder/";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList/";

/// Why a patch cannot be merged. `path` locates the offending part from the merge's root
/// (`containers[1].env[0]`; empty for the root itself).
#[derive(Clone, Debug, PartialEq)]
pub enum MergeError {
    /// An item of a list merged by `key` (or one it deletes) lacks the key.
    MissingKey {
        path: String,
        key: &'static str,
        item: Value,
    },
    /// `$patch` is none of `replace` and `delete`.
    UnknownDirective {
        path: String,
        directive: Value,
        item: Value,
    },
    /// `$patch: merge` in a list, which Kubernetes refuses too.
    MergeDirectiveInList { path: String },
    /// `$retainKeys` is not a list of names, or the patch sets a field it does not name.
    BadRetainKeys { path: String },
    /// A `$setElementOrder/…` or `$deleteFromPrimitiveList/…` directive, or the list it is about,
    /// that is not a list: `value`.
    NotAList {
        path: String,
        directive: String,
        value: Value,
    },
}

impl fmt::Display for MergeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = |path: &str| {
            if path.is_empty() {
                String::new()
            } else {
                format!("{path}: ")
            }
        };
        match self {
            Self::MissingKey { path, key, .. } => write!(f, "{}no merge key {key}", at(path)),
            Self::UnknownDirective {
                path, directive, ..
            } => write!(f, "{}unknown $patch {directive}", at(path)),
            Self::MergeDirectiveInList { path } => {
                write!(f, "{}$patch: merge is not supported in a list", at(path))
            }
            Self::BadRetainKeys { path } => write!(f, "{}invalid $retainKeys", at(path)),
            Self::NotAList {
                path, directive, ..
            } => write!(f, "{}{directive} is not a list", at(path)),
        }
    }
}

impl std::error::Error for MergeError {}

/// One step of a path: a field, or an item of a list.
#[derive(Clone, Copy)]
enum Step<'a> {
    Field(&'a str),
    Item(usize),
}

/// Where the merge is: the steps from the object's root, the first `root` of them being where
/// the merge started.
struct Path<'a> {
    steps: Vec<Step<'a>>,
    root: usize,
}

impl<'a> Path<'a> {
    fn fields(&self) -> Vec<&'a str> {
        self.steps
            .iter()
            .filter_map(|s| match s {
                Step::Field(f) => Some(*f),
                Step::Item(_) => None,
            })
            .collect()
    }

    fn shown(&self) -> String {
        let mut out = String::new();
        for step in &self.steps[self.root..] {
            match step {
                Step::Field(f) if out.is_empty() => out.push_str(f),
                Step::Field(f) => {
                    out.push('.');
                    out.push_str(f);
                }
                Step::Item(i) => out.push_str(&format!("[{i}]")),
            }
        }
        out
    }

    fn within<T>(&mut self, step: Step<'a>, f: impl FnOnce(&mut Self) -> T) -> T {
        self.steps.push(step);
        let out = f(self);
        self.steps.pop();
        out
    }
}

/// Merges `patch` into `target`, which stands at `at` in its kind (the field names from the
/// object's root: `&[]` for a whole object, `&["spec"]` for a PodSpec of its own).
pub fn merge<'a>(target: &mut Value, patch: &'a Value, at: &[&'a str]) -> Result<(), MergeError> {
    let mut path = Path {
        steps: at.iter().map(|f| Step::Field(f)).collect(),
        root: at.len(),
    };
    match (target, patch) {
        (Value::Object(target), Value::Object(patch)) => merge_map(target, patch, &mut path),
        (target, patch) => {
            *target = clean(patch).unwrap_or(Value::Null);
            Ok(())
        }
    }
}

fn merge_map<'a>(
    target: &mut Map<String, Value>,
    patch: &'a Map<String, Value>,
    path: &mut Path<'a>,
) -> Result<(), MergeError> {
    if let Some(directive) = patch.get(PATCH) {
        match directive.as_str() {
            Some("replace") => {
                if let Value::Object(replacement) = strip(&Value::Object(patch.clone())) {
                    *target = replacement;
                }
            }
            Some("delete") => target.clear(),
            _ => {
                return Err(MergeError::UnknownDirective {
                    path: path.shown(),
                    directive: directive.clone(),
                    item: Value::Object(patch.clone()),
                });
            }
        }
        return Ok(());
    }
    if let Some(retained) = patch.get(RETAIN_KEYS) {
        retain_keys(target, patch, retained, path)?;
    }
    let mut ordered = Vec::new();
    for (key, order) in patch {
        if let Some(list) = key.strip_prefix(SET_ELEMENT_ORDER) {
            path.within(Step::Field(list), |path| {
                order_list(target, patch, list, key, order, path)
            })?;
            ordered.push(list);
        }
    }
    for (key, values) in patch {
        if let Some(list) = key.strip_prefix(DELETE_FROM_PRIMITIVE_LIST) {
            let Value::Array(values) = values else {
                return Err(MergeError::NotAList {
                    path: path.shown(),
                    directive: key.clone(),
                    value: values.clone(),
                });
            };
            if let Some(Value::Array(live)) = target.get_mut(list) {
                live.retain(|v| !values.contains(v));
            }
        }
    }
    for (key, value) in patch {
        if key.starts_with('$') || ordered.contains(&key.as_str()) {
            continue;
        }
        path.within(Step::Field(key), |path| {
            merge_field(target, key, value, path)
        })?;
    }
    Ok(())
}

/// `$retainKeys`: the fields it does not name are cleared, and the patch may set no other.
fn retain_keys(
    target: &mut Map<String, Value>,
    patch: &Map<String, Value>,
    retained: &Value,
    path: &Path<'_>,
) -> Result<(), MergeError> {
    let bad = || MergeError::BadRetainKeys { path: path.shown() };
    let Value::Array(retained) = retained else {
        return Err(bad());
    };
    let names: Vec<&str> = retained.iter().filter_map(Value::as_str).collect();
    if names.len() != retained.len() {
        return Err(bad());
    }
    let set_elsewhere = patch
        .iter()
        .any(|(k, v)| !k.starts_with('$') && !v.is_null() && !names.contains(&k.as_str()));
    if set_elsewhere {
        return Err(bad());
    }
    target.retain(|k, _| names.contains(&k.as_str()));
    Ok(())
}

/// `$setElementOrder/<list>` and the patch's `<list>`: merged, then put in the directive's order.
fn order_list<'a>(
    target: &mut Map<String, Value>,
    patch: &'a Map<String, Value>,
    list: &str,
    directive: &str,
    order: &Value,
    path: &mut Path<'a>,
) -> Result<(), MergeError> {
    let not_a_list = |path: &Path<'_>, value: &Value| MergeError::NotAList {
        path: path.shown(),
        directive: directive.to_string(),
        value: value.clone(),
    };
    let Value::Array(order) = order else {
        return Err(not_a_list(path, order));
    };
    let live = match target.get(list) {
        Some(Value::Array(live)) => Some(live.clone()),
        Some(other) => return Err(not_a_list(path, other)),
        None => None,
    };
    let merged = match (live.clone(), patch.get(list)) {
        (None, None) => return Ok(()),
        (Some(live), None) => live,
        (None, Some(Value::Array(items))) => items.iter().filter_map(clean).collect(),
        (Some(mut live), Some(Value::Array(items))) => {
            merge_list(&mut live, items, path)?;
            live
        }
        (_, Some(other)) => return Err(not_a_list(path, other)),
    };
    let key = match list_strategy(&path.fields()) {
        ListStrategy::MergeByKey(key) => Some(key),
        ListStrategy::MergeValues => None,
        ListStrategy::Replace => {
            target.insert(list.to_string(), Value::Array(merged));
            return Ok(());
        }
    };
    let live = live.unwrap_or_default();
    let ordered = set_element_order(merged, order, &live, key);
    target.insert(list.to_string(), Value::Array(ordered));
    Ok(())
}

fn merge_field<'a>(
    target: &mut Map<String, Value>,
    key: &str,
    value: &'a Value,
    path: &mut Path<'a>,
) -> Result<(), MergeError> {
    match (target.get_mut(key), value) {
        (_, Value::Null) => {
            target.remove(key);
        }
        (Some(Value::Object(live)), Value::Object(patch)) => merge_map(live, patch, path)?,
        (Some(Value::Array(live)), Value::Array(items)) => merge_list(live, items, path)?,
        (_, value) => match clean(value) {
            Some(value) => {
                target.insert(key.to_string(), value);
            }
            None => {
                target.remove(key);
            }
        },
    }
    Ok(())
}

fn merge_list<'a>(
    live: &mut Vec<Value>,
    items: &'a [Value],
    path: &mut Path<'a>,
) -> Result<(), MergeError> {
    match list_strategy(&path.fields()) {
        ListStrategy::Replace => *live = items.iter().map(strip).collect(),
        ListStrategy::MergeValues => {
            let before = live.clone();
            let items: Vec<Value> = items.iter().map(strip).collect();
            for item in &items {
                if !live.contains(item) {
                    live.push(item.clone());
                }
            }
            *live = set_element_order(std::mem::take(live), &items, &before, None);
        }
        ListStrategy::MergeByKey(key) => merge_keyed(live, items, key, path)?,
    }
    Ok(())
}

/// A list merged by `key`: `$patch: delete` items remove theirs, a `$patch: replace` item makes
/// the other items the list, then each item merges into the live one with its key or is added,
/// and the list takes apimachinery's order (`mergeSlice` ends in `normalizeElementOrder` with the
/// patch's order): the patch's items in the patch's order, each live item it does not name kept
/// before them only where the live list had it before them. So a patch naming only a new
/// container puts it first.
fn merge_keyed<'a>(
    live: &mut Vec<Value>,
    items: &'a [Value],
    key: &'static str,
    path: &mut Path<'a>,
) -> Result<(), MergeError> {
    let missing = |path: &Path<'_>, item: &Value| MergeError::MissingKey {
        path: path.shown(),
        key,
        item: item.clone(),
    };
    let mut merging = Vec::with_capacity(items.len());
    let mut replace = false;
    for (index, item) in items.iter().enumerate() {
        path.within(Step::Item(index), |path| {
            let Value::Object(fields) = item else {
                return Err(missing(path, item));
            };
            match fields.get(PATCH) {
                None => merging.push((index, fields)),
                Some(directive) => match directive.as_str() {
                    Some("delete") => {
                        let id = fields.get(key).ok_or_else(|| missing(path, item))?;
                        live.retain(|l| l.get(key) != Some(id));
                    }
                    Some("replace") => replace = true,
                    Some("merge") => {
                        return Err(MergeError::MergeDirectiveInList { path: path.shown() });
                    }
                    _ => {
                        return Err(MergeError::UnknownDirective {
                            path: path.shown(),
                            directive: directive.clone(),
                            item: item.clone(),
                        });
                    }
                },
            }
            Ok(())
        })?;
    }
    if replace {
        *live = merging
            .iter()
            .map(|(index, _)| strip(&items[*index]))
            .collect();
        return Ok(());
    }
    let before = live.clone();
    for &(index, fields) in &merging {
        path.within(Step::Item(index), |path| {
            let item = &items[index];
            let id = fields.get(key).ok_or_else(|| missing(path, item))?;
            match live.iter_mut().find(|l| l.get(key) == Some(id)) {
                Some(Value::Object(existing)) => merge_map(existing, fields, path)?,
                Some(other) => *other = strip(item),
                None => live.push(strip(item)),
            }
            Ok(())
        })?;
    }
    let order: Vec<Value> = merging
        .iter()
        .map(|(index, _)| items[*index].clone())
        .collect();
    *live = set_element_order(std::mem::take(live), &order, &before, Some(key));
    Ok(())
}

/// A patch value for a field the live object lacks (or holds with another type): its
/// directives and null fields are dropped, and a map carrying `$patch` is dropped whole, as
/// apimachinery's `removeDirectives` and `discardNullValuesFromPatch` do.
fn clean(value: &Value) -> Option<Value> {
    match value {
        Value::Object(map) if map.contains_key(PATCH) => None,
        Value::Object(map) => Some(Value::Object(
            map.iter()
                .filter(|(k, v)| !k.starts_with('$') && !v.is_null())
                .filter_map(|(k, v)| clean(v).map(|v| (k.clone(), v)))
                .collect(),
        )),
        Value::Array(items) => Some(Value::Array(items.iter().filter_map(clean).collect())),
        scalar => Some(scalar.clone()),
    }
}

/// A patch value kube-apiserver takes as sent (a new list item, a replaced list, a `$patch:
/// replace` map) and its typed storage then reads: fields named like directives and null fields
/// are dropped.
fn strip(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, v)| !k.starts_with('$') && !v.is_null())
                .map(|(k, v)| (k.clone(), strip(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(strip).collect()),
        scalar => scalar.clone(),
    }
}
