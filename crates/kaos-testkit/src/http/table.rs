//! `meta.k8s.io/v1` Table answers for `kubectl get`: the CRD's `additionalPrinterColumns` for
//! custom resources, a few familiar columns for built-ins.

use serde_json::{Value, json};

use crate::meta;
use crate::resources::ResourceType;

struct Column {
    name: String,
    kind: String,
    path: Option<String>,
}

fn columns(rt: &ResourceType) -> Vec<Column> {
    let col = |name: &str, kind: &str, path: Option<&str>| Column {
        name: name.into(),
        kind: kind.into(),
        path: path.map(String::from),
    };
    let mut columns = vec![col("Name", "string", Some(".metadata.name"))];
    if !rt.printer_columns.is_empty() {
        for c in &rt.printer_columns {
            columns.push(col(
                c.get("name").and_then(Value::as_str).unwrap_or(""),
                c.get("type").and_then(Value::as_str).unwrap_or("string"),
                c.get("jsonPath").and_then(Value::as_str),
            ));
        }
        return columns;
    }
    match (rt.group.as_str(), rt.plural.as_str()) {
        ("apps", "deployments") => columns.extend([
            col("Ready", "string", None),
            col("Up-to-date", "integer", Some(".status.updatedReplicas")),
            col("Available", "integer", Some(".status.availableReplicas")),
        ]),
        ("", "services") => columns.extend([
            col("Type", "string", Some(".spec.type")),
            col("Cluster-IP", "string", Some(".spec.clusterIP")),
        ]),
        ("", "configmaps") => columns.push(col("Data", "integer", None)),
        _ => {}
    }
    columns.push(col("Age", "date", Some(".metadata.creationTimestamp")));
    columns
}

/// Follows a simple JSONPath (`.a.b`, `.a[0].b`, `.a[?(@.k=="v")].b`: the first item whose `k`
/// is `v`, as the API server prints a column with a filter).
fn lookup<'a>(object: &'a Value, path: &str) -> Option<&'a Value> {
    let mut current = object;
    for part in segments(path.trim_start_matches('.')) {
        let (field, selector) = match part.split_once('[') {
            Some((field, rest)) => (field, Some(&rest[..rest.len().saturating_sub(1)])),
            None => (part, None),
        };
        if !field.is_empty() {
            current = current.get(field)?;
        }
        current = match selector {
            None => current,
            Some(filter) if filter.starts_with("?(") => {
                let (key, want) = filter_of(filter)?;
                current
                    .as_array()?
                    .iter()
                    .find(|item| item.get(key).and_then(Value::as_str) == Some(want))?
            }
            Some(index) => current.get(index.parse::<usize>().ok()?)?,
        };
    }
    Some(current)
}

/// The `.`-separated parts of a path, a bracket's content kept whole.
fn segments(path: &str) -> Vec<&str> {
    let (mut parts, mut start, mut depth) = (Vec::new(), 0, 0);
    for (i, c) in path.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            '.' if depth == 0 => {
                parts.push(&path[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&path[start..]);
    parts.into_iter().filter(|p| !p.is_empty()).collect()
}

/// (`k`, `v`) of a filter `?(@.k=="v")` (or with single quotes).
fn filter_of(filter: &str) -> Option<(&str, &str)> {
    let inner = filter.strip_prefix("?(@.")?.strip_suffix(')')?;
    let (key, value) = inner.split_once("==")?;
    let value = value.trim();
    let value = value
        .strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .or_else(|| value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))?;
    Some((key.trim(), value))
}

/// `5s`, `3m`, `2h`, `4d`, as kubectl prints ages.
fn age(timestamp: &str) -> String {
    let Ok(then) = timestamp.parse::<jiff::Timestamp>() else {
        return "<unknown>".into();
    };
    let seconds = (jiff::Timestamp::now().as_second() - then.as_second()).max(0);
    match seconds {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

fn cell(column: &Column, object: &Value) -> Value {
    let Some(path) = &column.path else {
        return match column.name.as_str() {
            "Ready" => {
                let ready = meta::int_at(object, "/status/readyReplicas").unwrap_or(0);
                let want = meta::int_at(object, "/spec/replicas").unwrap_or(0);
                json!(format!("{ready}/{want}"))
            }
            "Data" => json!(
                object
                    .get("data")
                    .and_then(Value::as_object)
                    .map_or(0, |d| d.len())
            ),
            _ => Value::Null,
        };
    };
    match (lookup(object, path), column.kind.as_str()) {
        (Some(Value::String(ts)), "date") => json!(age(ts)),
        (Some(value), _) => value.clone(),
        (None, _) => Value::Null,
    }
}

pub fn to_table(rt: &ResourceType, value: &Value, include_object: Option<&str>) -> Value {
    let columns = columns(rt);
    let objects: Vec<&Value> = match value.get("items").and_then(Value::as_array) {
        Some(items) => items.iter().collect(),
        None => vec![value],
    };
    let rows: Vec<Value> = objects
        .iter()
        .map(|object| {
            let cells: Vec<Value> = columns.iter().map(|c| cell(c, object)).collect();
            let embedded = match include_object {
                Some("None") => Value::Null,
                Some("Object") => (*object).clone(),
                _ => super::to_metadata(object),
            };
            json!({"cells": cells, "object": embedded})
        })
        .collect();
    let definitions: Vec<Value> = columns
        .iter()
        .map(|c| {
            // kube-apiserver types a custom resource's columns as its CRD does, and every
            // built-in column as a string.
            let kind = if rt.crd.is_some() || c.name == "Name" {
                c.kind.as_str()
            } else {
                "string"
            };
            let format = if c.name == "Name" { "name" } else { "" };
            json!({"name": c.name, "type": kind, "format": format, "description": "", "priority": 0})
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": value.pointer("/metadata/resourceVersion").cloned().unwrap_or(json!(""))},
        "columnDefinitions": definitions,
        "rows": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_column_path_follows_fields_indexes_and_a_filter() {
        let object = json!({"status": {"conditions": [
            {"type": "Ready", "reason": "DeploymentReady"},
            {"type": "BudgetExceeded", "reason": "TokensPerDay"},
        ], "list": [1, 2]}});
        let at = |path: &str| lookup(&object, path).cloned();
        assert_eq!(at(".status.list[1]"), Some(json!(2)));
        assert_eq!(
            at(r#".status.conditions[?(@.type=="BudgetExceeded")].reason"#),
            Some(json!("TokensPerDay"))
        );
        assert_eq!(
            at(".status.conditions[?(@.type=='Ready')].reason"),
            Some(json!("DeploymentReady"))
        );
        assert_eq!(at(r#".status.conditions[?(@.type=="Gone")].reason"#), None);
        assert_eq!(at(".status.missing"), None);
    }
}
