//! How one schema node reads in the reference's tables: its type, its validation (enum,
//! bounds, pattern, list and map types, CEL rules), and text made safe for a table cell.

use std::fmt::Write as _;

use serde_json::{Map, Value};

use super::str_of;

/// `string`, `integer (int32)`, `[]string`, `map[string]string`, `object`, `int-or-string`, …
pub(super) fn type_of(map: &Map<String, Value>) -> String {
    if map.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
        return "int-or-string".into();
    }
    let type_ = map.get("type").and_then(Value::as_str).unwrap_or("any");
    match type_ {
        "array" => {
            let items = map.get("items").and_then(Value::as_object);
            format!("[]{}", items.map_or_else(|| "any".into(), type_of))
        }
        "object" => match map.get("additionalProperties") {
            Some(Value::Object(values)) if !map.contains_key("properties") => {
                format!("map[string]{}", type_of(values))
            }
            _ => "object".into(),
        },
        other => match map.get("format").and_then(Value::as_str) {
            Some(format) => format!("{other} ({format})"),
            None => other.into(),
        },
    }
}

/// The constraints of one node, one entry each, in a fixed order.
pub(super) fn validation_of(map: &Map<String, Value>, path: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    if let Some(values) = map.get("enum").and_then(Value::as_array) {
        let values: Vec<String> = values
            .iter()
            .map(|v| match v {
                Value::String(s) => code(s),
                other => code(&other.to_string()),
            })
            .collect();
        out.push(format!("one of {}", values.join(", ")));
    }
    let bound = |key: &str| map.get(key).map(number);
    // OpenAPI v3.0: `exclusiveMinimum` and `exclusiveMaximum` are flags on the bounds.
    let exclusive = |key: &str| map.get(key) == Some(&Value::Bool(true));
    if exclusive("exclusiveMinimum") || exclusive("exclusiveMaximum") {
        // (bound, its exclusive flag, the word when exclusive, the word when not)
        let words = [
            ("minimum", "exclusiveMinimum", "greater than", "at least"),
            ("maximum", "exclusiveMaximum", "less than", "at most"),
        ];
        for (key, exclusive_key, strict, inclusive) in words {
            if let Some(value) = bound(key) {
                let word = if exclusive(exclusive_key) {
                    strict
                } else {
                    inclusive
                };
                out.push(format!("{word} {value}"));
            }
        }
    } else {
        out.extend(range(bound("minimum"), bound("maximum"), "", ""));
    }
    out.extend(range(bound("minLength"), bound("maxLength"), "length ", ""));
    out.extend(range(bound("minItems"), bound("maxItems"), "", " items"));
    out.extend(range(
        bound("minProperties"),
        bound("maxProperties"),
        "",
        " entries",
    ));
    if let Some(pattern) = map.get("pattern").and_then(Value::as_str) {
        out.push(format!("pattern {}", code(pattern)));
    }
    if let Some(list_type) = map.get("x-kubernetes-list-type").and_then(Value::as_str) {
        let keys = map
            .get("x-kubernetes-list-map-keys")
            .and_then(Value::as_array)
            .map(|keys| {
                let keys: Vec<String> = keys.iter().filter_map(Value::as_str).map(code).collect();
                format!(" keyed by {}", keys.join(", "))
            })
            .unwrap_or_default();
        out.push(format!("list type {}{keys}", code(list_type)));
    }
    if let Some(map_type) = map.get("x-kubernetes-map-type").and_then(Value::as_str) {
        out.push(format!("map type {}", code(map_type)));
    }
    if map.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
        out.push("unknown fields kept".into());
    }
    for rule in map
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let rule_map = rule
            .as_object()
            .ok_or_else(|| format!("{path}: a validation rule is not an object"))?;
        if let Some(key) = rule_map
            .keys()
            .find(|k| !["rule", "message", "fieldPath", "reason"].contains(&k.as_str()))
        {
            return Err(format!(
                "{path}: crdgen --write-docs does not know how to document `{key}` of a rule"
            ));
        }
        let mut entry = format!(
            "rule {}: {}",
            code(str_of(rule, "rule")),
            code(str_of(rule, "message"))
        );
        if let Some(field) = rule.get("fieldPath").and_then(Value::as_str) {
            let _ = write!(entry, " (at {})", code(field));
        }
        if let Some(reason) = rule.get("reason").and_then(Value::as_str) {
            let _ = write!(entry, " (reason {})", code(reason));
        }
        out.push(entry);
    }
    Ok(out)
}

/// "length 1 to 57", "at most 64 items"; nothing without a bound.
fn range(low: Option<String>, high: Option<String>, before: &str, after: &str) -> Option<String> {
    let bounds = match (low, high) {
        (Some(l), Some(h)) => format!("{l} to {h}"),
        (Some(l), None) => format!("at least {l}"),
        (None, Some(h)) => format!("at most {h}"),
        (None, None) => return None,
    };
    Some(format!("{before}{bounds}{after}"))
}

/// A bound as written by people: `20`, not `20.0`.
fn number(value: &Value) -> String {
    match value.as_f64() {
        Some(f) if f.fract() == 0.0 && f.abs() < 1e15 => format!("{}", f as i64),
        _ => value.to_string(),
    }
}

pub(super) fn yes_no(flag: bool) -> &'static str {
    if flag { "yes" } else { "no" }
}

pub(super) fn code_list(items: &[String]) -> String {
    items.iter().map(|s| code(s)).collect::<Vec<_>>().join(", ")
}

/// `text` as a code span that survives a table cell: pipes escaped, a fence longer than any run
/// of backticks inside.
pub(super) fn code(text: &str) -> String {
    let text = text.replace('\n', " ").replace('|', "\\|");
    let longest_run = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest_run + 1);
    let pad = if text.starts_with('`') || text.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{text}{pad}{fence}")
}

/// A markdown table: the title row, the separator, then a row per entry of `rows` (each cell
/// already made safe for a table).
pub(super) fn table<const N: usize>(
    out: &mut String,
    titles: [&str; N],
    rows: impl IntoIterator<Item = [String; N]>,
) {
    let _ = writeln!(out, "| {} |", titles.join(" | "));
    let _ = writeln!(out, "|{}", "---|".repeat(N));
    for row in rows {
        let _ = writeln!(out, "| {} |", row.join(" | "));
    }
}

/// Plain text for a table cell.
pub(super) fn cell(text: &str) -> String {
    text.replace('\n', " ").replace('|', "\\|")
}

/// A doc comment as one table cell: on one line, pipes escaped, and `<`, `>` outside code spans
/// escaped so that `<name>` is not taken for an HTML tag.
pub(super) fn text(description: &str) -> String {
    let mut out = String::with_capacity(description.len());
    let mut in_code = false;
    for c in description.chars() {
        match c {
            '`' => {
                in_code = !in_code;
                out.push(c);
            }
            '\n' => out.push(' '),
            '|' => out.push_str("\\|"),
            '<' if !in_code => out.push_str("&lt;"),
            '>' if !in_code => out.push_str("&gt;"),
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_escape_pipes_and_tags() {
        assert_eq!(code("a || b"), "`a \\|\\| b`");
        assert_eq!(code("x `y`"), "`` x `y` ``");
        assert_eq!(text("`<a>` or <b>\nc|d"), "`<a>` or &lt;b&gt; c\\|d");
    }
}
