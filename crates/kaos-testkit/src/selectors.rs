//! Label and field selectors of list and watch requests.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::error::{ApiError, ApiResult};

#[derive(Clone, Debug, PartialEq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, BTreeSet<String>),
    NotIn(String, BTreeSet<String>),
    Exists(String),
    DoesNotExist(String),
}

/// A parsed label selector (`a=b,c!=d,e in (x,y),f notin (z),g,!h`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LabelSelector(Vec<Requirement>);

impl LabelSelector {
    pub fn parse(text: &str) -> ApiResult<Self> {
        let mut requirements = Vec::new();
        for term in split_terms(text) {
            let term = term.trim();
            if term.is_empty() {
                continue;
            }
            requirements.push(parse_term(term).ok_or_else(|| {
                ApiError::bad_request(format!(
                    "unable to parse requirement: invalid label selector term {term:?}"
                ))
            })?);
        }
        Ok(Self(requirements))
    }

    pub fn matches(&self, object: &Value) -> bool {
        let labels = object
            .pointer("/metadata/labels")
            .and_then(Value::as_object);
        let get = |key: &str| labels.and_then(|l| l.get(key)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => get(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => get(k) != Some(v.as_str()),
            Requirement::In(k, set) => get(k).is_some_and(|v| set.contains(v)),
            Requirement::NotIn(k, set) => get(k).is_none_or(|v| !set.contains(v)),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::DoesNotExist(k) => get(k).is_none(),
        })
    }
}

/// Splits on commas that are not inside a parenthesised value set.
fn split_terms(text: &str) -> Vec<&str> {
    let mut terms = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                terms.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    terms.push(&text[start..]);
    terms
}

fn parse_term(term: &str) -> Option<Requirement> {
    if let Some(key) = term.strip_prefix('!') {
        return Some(Requirement::DoesNotExist(key.trim().to_string()));
    }
    for (op, ctor) in [(" notin ", false), (" in ", true)] {
        if let Some((key, rest)) = term.split_once(op) {
            let inner = rest.trim().strip_prefix('(')?.strip_suffix(')')?;
            let set = inner
                .split(',')
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
                .collect();
            let key = key.trim().to_string();
            return Some(if ctor {
                Requirement::In(key, set)
            } else {
                Requirement::NotIn(key, set)
            });
        }
    }
    if let Some((k, v)) = term.split_once("!=") {
        return Some(Requirement::NotEquals(k.trim().into(), v.trim().into()));
    }
    if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
        return Some(Requirement::Equals(k.trim().into(), v.trim().into()));
    }
    let valid = term
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c));
    valid.then(|| Requirement::Exists(term.to_string()))
}

/// A parsed field selector; kube-apiserver supports `metadata.name` and `metadata.namespace` on
/// every kind.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    pub fn parse(text: &str) -> ApiResult<Self> {
        let mut terms = Vec::new();
        for term in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let (field, equal, value) = if let Some((f, v)) = term.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                (f, true, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid field selector: {term:?}"
                )));
            };
            if !matches!(field, "metadata.name" | "metadata.namespace") {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {field}"
                )));
            }
            terms.push((field.to_string(), equal, value.to_string()));
        }
        Ok(Self(terms))
    }

    pub fn matches(&self, object: &Value) -> bool {
        self.0.iter().all(|(field, equal, value)| {
            let pointer = format!("/{}", field.replace('.', "/"));
            let actual = object
                .pointer(&pointer)
                .and_then(Value::as_str)
                .unwrap_or("");
            (actual == value) == *equal
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"name": "n1", "namespace": "ns", "labels": labels}})
    }

    #[test]
    fn label_selector_operators() {
        let o = obj(json!({"app": "agent", "tier": "web"}));
        let yes = [
            "app=agent",
            "app==agent",
            "app!=model",
            "tier in (web, api)",
            "tier notin (db)",
            "app",
            "!missing",
            "app=agent,tier in (web)",
            "",
        ];
        let no = [
            "app=model",
            "app!=agent",
            "tier in (db)",
            "tier notin (web,x)",
            "missing",
            "!app",
        ];
        for s in yes {
            assert!(
                LabelSelector::parse(s).expect(s).matches(&o),
                "{s} should match"
            );
        }
        for s in no {
            assert!(
                !LabelSelector::parse(s).expect(s).matches(&o),
                "{s} should not match"
            );
        }
        assert!(LabelSelector::parse("a in b").is_err());
    }

    #[test]
    fn field_selector() {
        let o = obj(json!({}));
        assert!(
            FieldSelector::parse("metadata.name=n1")
                .expect("parses")
                .matches(&o)
        );
        assert!(
            FieldSelector::parse("metadata.namespace!=other")
                .expect("parses")
                .matches(&o)
        );
        assert!(
            !FieldSelector::parse("metadata.name=n2")
                .expect("parses")
                .matches(&o)
        );
        assert_eq!(
            FieldSelector::parse("spec.x=1")
                .expect_err("unsupported")
                .code,
            400
        );
    }
}
