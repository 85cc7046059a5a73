//! `docs/api.md` describes the CRDs the code generates: its reference region is exactly what
//! `crdgen --write-docs` renders, it names every field and every CEL rule message, and the links
//! into it from the other docs resolve.

use std::collections::BTreeSet;

use kaos_harness::repo_root;
use regex::Regex;
use serde_json::Value;

const DOC: &str = "docs/api.md";

fn document() -> String {
    std::fs::read_to_string(repo_root().join(DOC)).expect("docs/api.md is readable")
}

#[test]
fn committed_api_docs_match_the_crds() {
    let committed = document();
    let generated = kaos_api::docs::render_document(&committed)
        .unwrap_or_else(|e| panic!("{DOC}: {e}; run `{}`", kaos_api::docs::REGENERATE));
    assert!(
        committed == generated,
        "{DOC} differs from the reference generated from the CRDs: run `{}` and commit the result",
        kaos_api::docs::REGENERATE
    );
}

/// Every field path of our own types (the embedded Kubernetes types aside), and every rule.
fn fields_and_messages(
    node: &Value,
    path: &str,
    embedded: bool,
    fields: &mut Vec<String>,
    messages: &mut Vec<String>,
) {
    for rule in node
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let message = rule["message"].as_str().expect("every rule has a message");
        messages.push(message.to_string());
    }
    if let Some(Value::Object(properties)) = node.get("properties") {
        for (name, child) in properties {
            let child_path = if path.is_empty() {
                name.clone()
            } else {
                format!("{path}.{name}")
            };
            if !embedded {
                fields.push(child_path.clone());
            }
            let embedded = embedded || is_embedded(name);
            fields_and_messages(child, &child_path, embedded, fields, messages);
        }
    }
    if let Some(items) = node.get("items") {
        fields_and_messages(items, &format!("{path}[]"), embedded, fields, messages);
    }
    if let Some(values @ Value::Object(_)) = node.get("additionalProperties") {
        fields_and_messages(
            values,
            &format!("{path}{{key}}"),
            embedded,
            fields,
            messages,
        );
    }
}

fn is_embedded(name: &str) -> bool {
    kaos_api::crd::EMBEDDED_KUBERNETES_TYPES.contains(&name)
}

/// Guards against a generator that skips things: each field of our types has a row, each CEL
/// rule's message is quoted (the rows of the generated tables escape `|`).
#[test]
fn api_docs_name_every_field_and_rule_message() {
    let doc = document();
    let mut missing = Vec::new();
    for (file, crd) in kaos_api::crd::all() {
        let json = serde_json::to_value(&crd).expect("CRDs serialize");
        let schema = json
            .pointer("/spec/versions/0/schema/openAPIV3Schema")
            .expect("schema");
        let (mut fields, mut messages) = (Vec::new(), Vec::new());
        fields_and_messages(schema, "", false, &mut fields, &mut messages);
        // The smallest kind (AccessGrant) has 7.
        assert!(fields.len() >= 7, "{file}: found {} fields", fields.len());
        for field in fields {
            if !doc.contains(&format!("| `{field}` |")) {
                missing.push(format!("{file}: field {field}"));
            }
        }
        for message in messages {
            if !doc.contains(&message.replace('|', "\\|")) {
                missing.push(format!("{file}: rule message {message:?}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "{DOC} lacks:\n{}\nrun `{}`",
        missing.join("\n"),
        kaos_api::docs::REGENERATE
    );
}

/// GitHub's anchor of a heading: lower case, punctuation dropped, spaces as `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Links to `api.md#…` from the other docs and the README, and `#…` links inside it, name a
/// heading of docs/api.md (headings moved by the generator would break them silently).
#[test]
fn links_into_api_docs_resolve() {
    let doc = document();
    let anchors: BTreeSet<String> = doc
        .lines()
        .filter(|line| line.starts_with('#'))
        .map(|line| anchor(line.trim_start_matches('#')))
        .collect();
    let external = Regex::new(r"api\.md#([A-Za-z0-9_-]+)").expect("valid regex");
    let internal = Regex::new(r"\]\(#([A-Za-z0-9_-]+)\)").expect("valid regex");
    let mut sources = vec![(DOC.to_string(), doc.clone())];
    let mut files = vec![repo_root().join("README.md")];
    for entry in std::fs::read_dir(repo_root().join("docs")).expect("docs/ is readable") {
        files.push(entry.expect("readable entry").path());
    }
    for path in files {
        if path.extension().is_some_and(|e| e == "md") {
            let text = std::fs::read_to_string(&path).expect("doc is readable");
            sources.push((path.display().to_string(), text));
        }
    }
    let mut broken = Vec::new();
    for (name, text) in &sources {
        let mut targets: Vec<&str> = external
            .captures_iter(text)
            .map(|c| c.get(1).expect("group").as_str())
            .collect();
        if name == DOC {
            targets.extend(
                internal
                    .captures_iter(text)
                    .map(|c| c.get(1).expect("group").as_str()),
            );
        }
        for target in targets {
            if !anchors.contains(target) {
                broken.push(format!("{name}: #{target}"));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "links to headings {DOC} does not have:\n{}",
        broken.join("\n")
    );
}
