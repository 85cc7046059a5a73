//! The reference part of `docs/api.md`, rendered from the CRDs of [`crate::crd::all`]: for each
//! kind its names, scope and printer columns, then a table of every field of `spec` and `status`
//! with its type, default, description (the Rust doc comment) and validation (enum, bounds,
//! pattern and the CEL rules that sit on it).
//!
//! The rest of `docs/api.md` is hand-written; the generated part sits between [`BEGIN`] and
//! [`END`], and `crdgen --write-docs docs/api.md` rewrites only that region ([`splice`]).
//!
//! Fields of the embedded Kubernetes types (`podSpec`, `env`, `resources`, key selectors,
//! conditions) are Kubernetes' own and documented by `kubectl explain`: below such a field only
//! the ones kaos constrains further are listed. A schema keyword the renderer does not know is an
//! error, so nothing in the CRDs goes undocumented silently.

use std::fmt::Write as _;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Map, Value};

use crate::crd::EMBEDDED_KUBERNETES_TYPES;

mod cells;
use cells::{cell, code, code_list, table, text, type_of, validation_of, yes_no};

/// The command that regenerates the reference in `docs/api.md`.
pub const REGENERATE: &str = "cargo run -p kaos-api --bin crdgen -- --write-docs docs/api.md";

/// The line that opens the generated region of `docs/api.md`.
pub const BEGIN: &str = "<!-- BEGIN GENERATED: crdgen --write-docs (edit the doc comments in crates/kaos-api, not this) -->";
/// The line that closes it.
pub const END: &str = "<!-- END GENERATED -->";

/// Schema keywords that say nothing a reader of the reference needs: `nullable` (every optional
/// field may be null), the root's `title` (the kind).
const IGNORED: &[&str] = &["nullable", "title"];

/// Keywords that constrain a value. Below an embedded Kubernetes type, a field is listed only
/// when it carries one of these: upstream schemas carry none, so these are kaos' additions.
const CONSTRAINTS: &[&str] = &[
    "enum",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "pattern",
    "x-kubernetes-validations",
];

/// Keywords that shape the rows themselves (types, children) rather than a row's validation.
const STRUCTURE: &[&str] = &[
    "type",
    "format",
    "description",
    "default",
    "properties",
    "required",
    "items",
    "additionalProperties",
    "x-kubernetes-int-or-string",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
];

/// `document` with its generated region replaced by the reference of the current CRDs.
pub fn render_document(document: &str) -> Result<String, String> {
    splice(document, &reference()?)
}

/// `document` with the text between the [`BEGIN`] and [`END`] lines replaced by `generated`.
pub fn splice(document: &str, generated: &str) -> Result<String, String> {
    let begin = document
        .find(BEGIN)
        .ok_or_else(|| format!("no `{BEGIN}` line"))?;
    let after_begin = begin + BEGIN.len();
    let end = document[after_begin..]
        .find(END)
        .map(|i| after_begin + i)
        .ok_or_else(|| format!("no `{END}` line after `{BEGIN}`"))?;
    if document.matches(BEGIN).count() > 1 || document.matches(END).count() > 1 {
        return Err(format!("more than one `{BEGIN}` or `{END}` line"));
    }
    let mut out = String::with_capacity(document.len() + generated.len());
    out.push_str(&document[..after_begin]);
    out.push('\n');
    out.push_str(generated.trim_end_matches('\n'));
    out.push('\n');
    out.push_str(&document[end..]);
    Ok(out)
}

/// The reference of every kind, in install order.
pub fn reference() -> Result<String, String> {
    let mut out = String::new();
    out.push_str(&format!(
        "<!-- Generated from the CRDs by `{REGENERATE}`; tests/api_docs.rs fails when it drifts. -->\n"
    ));
    out.push_str(concat!(
        "\nThe field tables below are generated from the CRDs; a description is the field's doc ",
        "comment in `crates/kaos-api`, which `kubectl explain` shows too. A path names a field ",
        "from the object's root: `[]` stands for every item of a list, `{key}` for every value ",
        "of a map. *required* means the field must be set when its parent is. The validation ",
        "column lists what the API server checks: allowed values, bounds (lengths in ",
        "characters), patterns, and the CEL rules (`x-kubernetes-validations`) with the message ",
        "a violation gets. Fields of the embedded Kubernetes types (`podSpec`, `env`, ",
        "`resources`, key selectors, conditions) are validated in full but listed only where ",
        "kaos constrains them further; `kubectl explain pod.spec` documents the rest.\n",
    ));
    for (_, crd) in crate::crd::all() {
        out.push('\n');
        render_kind(&mut out, &crd)?;
    }
    Ok(out)
}

fn render_kind(out: &mut String, crd: &CustomResourceDefinition) -> Result<(), String> {
    let spec = &crd.spec;
    let names = &spec.names;
    let kind = &names.kind;
    for version in &spec.versions {
        let schema = version
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .ok_or_else(|| format!("{kind} {} has no schema", version.name))?;
        let schema = serde_json::to_value(schema).map_err(|e| e.to_string())?;
        let root = schema
            .as_object()
            .ok_or_else(|| format!("{kind}: the schema is not an object"))?;

        let _ = writeln!(out, "## {kind}\n");
        if let Some(description) = root.get("description").and_then(Value::as_str) {
            let _ = writeln!(out, "{}\n", text(description));
        }
        let _ = writeln!(
            out,
            "- API version `{}/{}`, kind `{kind}`: {} (plural `{}`, singular `{}`)",
            spec.group,
            version.name,
            spec.scope.to_lowercase(),
            names.plural,
            names.singular.as_deref().unwrap_or(""),
        );
        if let Some(short) = names.short_names.as_ref().filter(|s| !s.is_empty()) {
            let _ = writeln!(out, "- Short names: {}", code_list(short));
        }
        if let Some(categories) = names.categories.as_ref().filter(|c| !c.is_empty()) {
            let _ = writeln!(out, "- Categories: {}", code_list(categories));
        }
        let mut subresources = Vec::new();
        if let Some(s) = &version.subresources {
            if s.status.is_some() {
                subresources.push("status".to_string());
            }
            if s.scale.is_some() {
                subresources.push("scale".to_string());
            }
        }
        if !subresources.is_empty() {
            let _ = writeln!(out, "- Subresources: {}", code_list(&subresources));
        }
        let _ = writeln!(
            out,
            "- Served: {}, storage version: {}",
            yes_no(version.served),
            yes_no(version.storage)
        );
        if let Some(columns) = version
            .additional_printer_columns
            .as_ref()
            .filter(|c| !c.is_empty())
        {
            let _ = writeln!(out, "\n`kubectl get {}` shows:\n", names.plural);
            let rows = columns.iter().map(|column| {
                [
                    cell(&column.name),
                    cell(&column.type_),
                    code(&column.json_path),
                ]
            });
            table(out, ["column", "type", "JSON path"], rows);
        }
        if let Some(rules) = root.get("x-kubernetes-validations") {
            let _ = writeln!(
                out,
                "\nRules on the whole object (the only place a rule can read `metadata.name`):\n"
            );
            let rows = rules.as_array().into_iter().flatten().map(|rule| {
                let field = rule
                    .get("fieldPath")
                    .and_then(Value::as_str)
                    .map_or_else(|| "the object".to_string(), code);
                [
                    code(str_of(rule, "rule")),
                    code(str_of(rule, "message")),
                    field,
                ]
            });
            table(out, ["rule", "message", "reported at"], rows);
        }
        let unknown: Vec<&String> = root
            .keys()
            .filter(|k| {
                !IGNORED.contains(&k.as_str())
                    && !["description", "type", "properties", "required"].contains(&k.as_str())
                    && k.as_str() != "x-kubernetes-validations"
            })
            .collect();
        if !unknown.is_empty() {
            return Err(format!("{kind}: cannot document {unknown:?} on the root"));
        }

        let required = required_of(root);
        for (name, child) in sorted_properties(root) {
            let _ = writeln!(out, "\n### {kind} {name}\n");
            let mut rows = Vec::new();
            walk(
                child,
                name,
                required.contains(&name),
                Embedded::No,
                &mut rows,
            )
            .map_err(|e| format!("{kind}: {e}"))?;
            let rows = rows.into_iter().map(|row| {
                [
                    code(&row.path),
                    cell(&row.type_),
                    if row.required { "yes" } else { "" }.to_string(),
                    row.default.as_deref().map_or_else(String::new, code),
                    row.description,
                    row.validation.join("<br>"),
                ]
            });
            let titles = [
                "field",
                "type",
                "required",
                "default",
                "description",
                "validation",
            ];
            table(out, titles, rows);
        }
    }
    Ok(())
}

/// Where a schema node sits relative to the embedded Kubernetes types.
#[derive(Clone, Copy, PartialEq)]
enum Embedded {
    /// One of ours.
    No,
    /// The property that holds a Kubernetes type (its description is ours).
    Root,
    /// Inside a Kubernetes type.
    Inside,
}

struct Row {
    path: String,
    type_: String,
    required: bool,
    default: Option<String>,
    description: String,
    validation: Vec<String>,
}

/// Appends the rows of `node` (at `path`) and of everything below it.
fn walk(
    node: &Value,
    path: &str,
    required: bool,
    embedded: Embedded,
    rows: &mut Vec<Row>,
) -> Result<(), String> {
    let map = node
        .as_object()
        .ok_or_else(|| format!("{path}: the schema is not an object"))?;
    if let Some(key) = map.keys().find(|k| {
        !IGNORED.contains(&k.as_str())
            && !CONSTRAINTS.contains(&k.as_str())
            && !STRUCTURE.contains(&k.as_str())
    }) {
        return Err(format!(
            "{path}: crdgen --write-docs does not know how to document `{key}`"
        ));
    }
    let constrained = map.keys().any(|k| CONSTRAINTS.contains(&k.as_str()));
    let is_container = path.ends_with("[]") || path.ends_with("{key}");
    // A list's items or a map's values get a row only when they say more than their type.
    let listed = match embedded {
        Embedded::Inside => constrained,
        _ if is_container => constrained || map.contains_key("description"),
        _ => true,
    };
    if listed {
        let mut description = map
            .get("description")
            .and_then(Value::as_str)
            .map(text)
            .unwrap_or_default();
        if embedded == Embedded::Root {
            if !description.is_empty() {
                description.push(' ');
            }
            description.push_str(
                "*A Kubernetes type: `kubectl explain` documents its fields; they are listed here only where kaos adds a constraint.*",
            );
        }
        rows.push(Row {
            path: path.to_string(),
            type_: type_of(map),
            required,
            default: map.get("default").map(|d| match d {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            }),
            description,
            validation: validation_of(map, path)?,
        });
    }

    let inside = if embedded == Embedded::No {
        Embedded::No
    } else {
        Embedded::Inside
    };
    let required_children = required_of(map);
    for (name, child) in sorted_properties(map) {
        let child_embedded =
            if embedded == Embedded::No && EMBEDDED_KUBERNETES_TYPES.contains(&name) {
                Embedded::Root
            } else {
                inside
            };
        walk(
            child,
            &format!("{path}.{name}"),
            required_children.contains(&name),
            child_embedded,
            rows,
        )?;
    }
    if let Some(items) = map.get("items") {
        walk(items, &format!("{path}[]"), false, inside, rows)?;
    }
    if let Some(values @ Value::Object(_)) = map.get("additionalProperties") {
        walk(values, &format!("{path}{{key}}"), false, inside, rows)?;
    }
    Ok(())
}

fn sorted_properties(map: &Map<String, Value>) -> Vec<(&str, &Value)> {
    let mut properties: Vec<(&str, &Value)> = map
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.as_str(), v))
        .collect();
    properties.sort_by_key(|(name, _)| *name);
    properties
}

fn required_of(map: &Map<String, Value>) -> Vec<&str> {
    map.get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

fn str_of<'a>(value: &'a Value, key: &str) -> &'a str {
    value.get(key).and_then(Value::as_str).unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splice_replaces_only_the_region() {
        let doc = format!("intro\n{BEGIN}\nold\nlines\n{END}\noutro\n");
        let spliced = splice(&doc, "new\n").expect("markers present");
        assert_eq!(spliced, format!("intro\n{BEGIN}\nnew\n{END}\noutro\n"));
        assert_eq!(splice(&spliced, "new").expect("idempotent"), spliced);
        assert!(splice("no markers", "x").is_err());
        assert!(splice(&format!("{BEGIN}\n{BEGIN}\n{END}"), "x").is_err());
    }

    #[test]
    fn the_reference_renders() {
        let reference = reference().expect("every keyword of the CRDs is documented");
        assert!(reference.contains("## Agent\n"));
        assert!(reference.contains("| `spec.container.env[].name` |"));
        for constraint in [
            "at most 64 items",
            "length 1 to 57",
            "1 to 20",
            "one of `Proxy`, `Hosted`",
            "pattern `^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`",
            "list type `map` keyed by `type`",
            "rule `has(self.value) != has(self.valueFrom)`",
        ] {
            assert!(reference.contains(constraint), "renders {constraint}");
        }
    }
}
