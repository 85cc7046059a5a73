//! Structural validation of a (pruned, defaulted) object: types, required, enum, numeric bounds,
//! string length and pattern, list and map sizes. Formats are not checked, as in kube-apiserver
//! for most of them.

use serde_json::Value;

use crate::error::{FieldError, json_type_name};
use crate::{child_path, flag};

pub(super) fn validate(schema: &Value, value: &Value, path: &str, errors: &mut Vec<FieldError>) {
    if value.is_null() {
        if !flag(schema, "nullable") && schema.get("type").is_some() {
            errors.push(FieldError::type_invalid(path, value, type_of(schema)));
        }
        return;
    }
    if !type_matches(schema, value) {
        errors.push(FieldError::type_invalid(path, value, type_of(schema)));
        return;
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        errors.push(FieldError::not_supported(path, value, allowed));
    }
    match value {
        Value::Number(n) => {
            check_number(schema, path, value, n.as_f64().unwrap_or(f64::NAN), errors)
        }
        Value::String(s) => check_string(schema, path, value, s, errors),
        Value::Array(items) => {
            check_count(
                schema,
                path,
                items.len(),
                "minItems",
                "maxItems",
                "items",
                errors,
            );
            if let Some(item_schema) = schema.get("items") {
                for (index, item) in items.iter().enumerate() {
                    validate(item_schema, item, &format!("{path}[{index}]"), errors);
                }
            }
        }
        Value::Object(map) => {
            let count = map.len();
            check_count(
                schema,
                path,
                count,
                "minProperties",
                "maxProperties",
                "properties",
                errors,
            );
            for required in schema
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
            {
                if !map.contains_key(required) {
                    errors.push(FieldError::required(&child_path(path, required)));
                }
            }
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            for (key, child) in map {
                let child_schema = properties.and_then(|p| p.get(key)).or(additional);
                if let Some(child_schema) = child_schema {
                    validate(child_schema, child, &child_path(path, key), errors);
                }
            }
        }
        Value::Bool(_) | Value::Null => {}
    }
}

fn type_of(schema: &Value) -> &str {
    if flag(schema, "x-kubernetes-int-or-string") {
        return "integer,string";
    }
    schema.get("type").and_then(Value::as_str).unwrap_or("any")
}

fn type_matches(schema: &Value, value: &Value) -> bool {
    if flag(schema, "x-kubernetes-int-or-string") {
        return value.is_string() || value.is_i64() || value.is_u64();
    }
    match schema.get("type").and_then(Value::as_str) {
        None => true,
        Some("integer") => value.is_i64() || value.is_u64(),
        Some("number") => value.is_number(),
        Some(other) => json_type_name(value) == other,
    }
}

fn check_number(schema: &Value, path: &str, value: &Value, n: f64, errors: &mut Vec<FieldError>) {
    let exclusive = |name| flag(schema, name);
    if let Some(min) = schema.get("minimum").and_then(Value::as_f64) {
        let (bad, words) = if exclusive("exclusiveMinimum") {
            (n <= min, "greater than")
        } else {
            (n < min, "greater than or equal to")
        };
        if bad {
            let detail = format!("{path} in body should be {words} {}", number_text(min));
            errors.push(FieldError::invalid(path, value, detail));
        }
    }
    if let Some(max) = schema.get("maximum").and_then(Value::as_f64) {
        let (bad, words) = if exclusive("exclusiveMaximum") {
            (n >= max, "less than")
        } else {
            (n > max, "less than or equal to")
        };
        if bad {
            let detail = format!("{path} in body should be {words} {}", number_text(max));
            errors.push(FieldError::invalid(path, value, detail));
        }
    }
}

/// Bounds print as integers when they are whole (`1`, not `1.0`), as kube-apiserver prints them.
fn number_text(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        n.to_string()
    }
}

/// As kube-apiserver (go-openapi): maxLength, then minLength, then pattern; the first failure is
/// the only one reported.
fn check_string(schema: &Value, path: &str, value: &Value, s: &str, errors: &mut Vec<FieldError>) {
    let chars = s.chars().count() as u64;
    if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
        && chars > max
    {
        errors.push(FieldError::too_long(path, max));
        return;
    }
    if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
        && chars < min
    {
        let detail = format!("{path} in body should be at least {min} chars long");
        errors.push(FieldError::invalid(path, value, detail));
        return;
    }
    if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
        match regex::Regex::new(pattern) {
            Ok(re) if re.is_match(s) => {}
            Ok(_) => {
                let detail = format!("{path} in body should match '{pattern}'");
                errors.push(FieldError::invalid(path, value, detail));
            }
            Err(e) => {
                let detail = format!("the schema's pattern '{pattern}' does not compile: {e}");
                errors.push(FieldError::invalid(path, value, detail));
            }
        }
    }
}

fn check_count(
    schema: &Value,
    path: &str,
    count: usize,
    min_key: &str,
    max_key: &str,
    noun: &str,
    errors: &mut Vec<FieldError>,
) {
    let count = count as u64;
    let shown = Value::from(count);
    if let Some(min) = schema.get(min_key).and_then(Value::as_u64)
        && count < min
    {
        let detail = format!("{path} in body should have at least {min} {noun}");
        errors.push(FieldError::invalid(path, &shown, detail));
    }
    if let Some(max) = schema.get(max_key).and_then(Value::as_u64)
        && count > max
    {
        // kube-apiserver reports a long list as TooMany (checked against it); maps keep Invalid.
        if noun == "items" {
            errors.push(FieldError::too_many(path, count, max));
        } else {
            let detail = format!("{path} in body should have at most {max} {noun}");
            errors.push(FieldError::invalid(path, &shown, detail));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn errors_of(schema: Value, value: Value) -> Vec<String> {
        let mut errors = Vec::new();
        validate(&schema, &value, "", &mut errors);
        errors.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn reports_like_kube_apiserver() {
        let schema = json!({
            "type": "object",
            "required": ["spec"],
            "properties": {"spec": {
                "type": "object",
                "required": ["mode"],
                "properties": {
                    "mode": {"type": "string", "enum": ["Proxy", "Hosted"]},
                    "steps": {"type": "integer", "minimum": 1.0, "maximum": 20.0},
                    "models": {"type": "array", "minItems": 1, "items": {"type": "string"}},
                    "timeout": {"type": "string", "pattern": "^[0-9]+s$"},
                    "port": {"x-kubernetes-int-or-string": true},
                    "note": {"type": "string", "nullable": true}
                }
            }}
        });
        let ok = json!({"spec": {"mode": "Proxy", "steps": 5, "models": ["a"], "timeout": "3s",
                                 "port": "http", "note": null}});
        assert!(errors_of(schema.clone(), ok).is_empty());
        let bad = json!({"spec": {"mode": "Local", "steps": 21, "models": [], "timeout": "3x",
                                  "port": true}});
        assert_eq!(
            errors_of(schema.clone(), bad),
            vec![
                r#"spec.mode: Unsupported value: "Local": supported values: "Proxy", "Hosted""#,
                "spec.models: Invalid value: 0: spec.models in body should have at least 1 items",
                r#"spec.port: Invalid value: "boolean": spec.port in body must be of type integer,string: "boolean""#,
                "spec.steps: Invalid value: 21: spec.steps in body should be less than or equal to 20",
                r#"spec.timeout: Invalid value: "3x": spec.timeout in body should match '^[0-9]+s$'"#,
            ]
        );
        assert_eq!(
            errors_of(schema.clone(), json!({"spec": {}})),
            vec!["spec.mode: Required value"]
        );
        assert_eq!(
            errors_of(schema, json!({"spec": {"mode": "Proxy", "steps": "five"}})),
            vec![
                r#"spec.steps: Invalid value: "string": spec.steps in body must be of type integer: "string""#
            ]
        );
    }
}
