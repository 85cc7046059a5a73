//! Field errors worded as kube-apiserver words them (`k8s.io/apimachinery/pkg/util/validation/field`).

use std::fmt;

use serde_json::Value;

/// What is wrong with a field; maps to the `reason` of a Status cause.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FieldErrorKind {
    Required,
    /// A value outside the declared enum; carries the supported values.
    NotSupported(Vec<Value>),
    Invalid,
    TypeInvalid,
    /// A field the schema does not declare (only reported under strict field validation).
    Unknown,
    /// A change that is not allowed (e.g. a new finalizer on an object being deleted).
    Forbidden,
    /// A string over its `maxLength` (the value is not printed back).
    TooLong {
        max: u64,
    },
    /// A list over its `maxItems`.
    TooMany {
        count: u64,
        max: u64,
    },
}

/// One rejected field.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldError {
    /// Dotted path as kube-apiserver prints it, e.g. `spec.config.memory.contextLimit`.
    pub path: String,
    pub kind: FieldErrorKind,
    /// The offending value (absent for Required and Unknown).
    pub value: Option<Value>,
    /// The detail after the value, e.g. `should be greater than or equal to 1`.
    pub detail: String,
}

impl FieldError {
    // `required`, `invalid` and `forbidden` are public: kaos-testkit reports its own checks
    // (object names, scale paths, finalizers) in the same words.

    /// A required field that is absent.
    pub fn required(path: &str) -> Self {
        Self {
            path: path.to_string(),
            kind: FieldErrorKind::Required,
            value: None,
            detail: String::new(),
        }
    }

    /// A value that breaks a rule, `detail` saying which.
    pub fn invalid(path: &str, value: &Value, detail: String) -> Self {
        Self {
            path: path.to_string(),
            kind: FieldErrorKind::Invalid,
            value: Some(value.clone()),
            detail,
        }
    }

    pub(crate) fn too_long(path: &str, max: u64) -> Self {
        Self {
            path: path.to_string(),
            kind: FieldErrorKind::TooLong { max },
            value: None,
            detail: String::new(),
        }
    }

    pub(crate) fn too_many(path: &str, count: u64, max: u64) -> Self {
        Self {
            path: path.to_string(),
            kind: FieldErrorKind::TooMany { count, max },
            value: None,
            detail: String::new(),
        }
    }

    /// A change that is not allowed, `detail` saying why.
    pub fn forbidden(path: &str, detail: String) -> Self {
        Self {
            path: path.to_string(),
            kind: FieldErrorKind::Forbidden,
            value: None,
            detail,
        }
    }

    pub(crate) fn type_invalid(path: &str, value: &Value, expected: &str) -> Self {
        Self {
            path: path.to_string(),
            kind: FieldErrorKind::TypeInvalid,
            value: Some(Value::String(json_type_name(value).to_string())),
            detail: format!(
                "{path} in body must be of type {expected}: \"{}\"",
                json_type_name(value)
            ),
        }
    }

    pub(crate) fn not_supported(path: &str, value: &Value, supported: &[Value]) -> Self {
        Self {
            path: path.to_string(),
            kind: FieldErrorKind::NotSupported(supported.to_vec()),
            value: Some(value.clone()),
            detail: String::new(),
        }
    }

    pub(crate) fn unknown(path: String) -> Self {
        Self {
            path,
            kind: FieldErrorKind::Unknown,
            value: None,
            detail: String::new(),
        }
    }

    /// A failed CEL rule. kube-apiserver prints the value of the scalar a rule is declared on,
    /// and none for an object or a list, nor for a rule that points its error elsewhere with a
    /// `fieldPath` (the value would be its object's); a rule on the whole object has no path
    /// (`<nil>`), and a `fieldPath` is printed without its leading dot.
    pub(crate) fn from_cel(
        error: kube_cel::ValidationError,
        object: &Value,
        schema: &Value,
    ) -> Self {
        let declared_here = schema_at(schema, &error.field_path)
            .and_then(|s| s.get("x-kubernetes-validations"))
            .and_then(Value::as_array)
            .is_some_and(|rules| rules.iter().any(|r| r["rule"] == error.rule.as_str()));
        let value = lookup(object, &error.field_path)
            .filter(|v| declared_here && !v.is_object() && !v.is_array())
            .cloned();
        let path = match error.field_path.trim_start_matches('.') {
            "" => "<nil>".to_string(),
            path => path.to_string(),
        };
        Self {
            path,
            kind: FieldErrorKind::Invalid,
            value,
            detail: error.message,
        }
    }

    /// What kube-apiserver adds instead of evaluating the CEL rules when a blocking error
    /// (required, unsupported or mistyped value) was found.
    pub(crate) fn cel_skipped() -> Self {
        Self {
            path: "<nil>".into(),
            kind: FieldErrorKind::Invalid,
            value: Some(Value::Null),
            detail: "some validation rules were not checked because the object was invalid; \
                     correct the existing errors to complete validation"
                .into(),
        }
    }

    /// Whether this error stops kube-apiserver from evaluating CEL rules.
    pub(crate) fn blocks_cel(&self) -> bool {
        matches!(
            self.kind,
            FieldErrorKind::Required
                | FieldErrorKind::NotSupported(_)
                | FieldErrorKind::TypeInvalid
                | FieldErrorKind::TooLong { .. }
                | FieldErrorKind::TooMany { .. }
        )
    }

    /// The `reason` of this error in a Status cause, as kube-apiserver sets it.
    pub fn reason(&self) -> &'static str {
        match self.kind {
            FieldErrorKind::Required => "FieldValueRequired",
            FieldErrorKind::NotSupported(_) => "FieldValueNotSupported",
            FieldErrorKind::Invalid => "FieldValueInvalid",
            FieldErrorKind::TypeInvalid => "FieldValueTypeInvalid",
            FieldErrorKind::Unknown => "FieldValueInvalid",
            FieldErrorKind::Forbidden => "FieldValueForbidden",
            FieldErrorKind::TooLong { .. } => "FieldValueTooLong",
            FieldErrorKind::TooMany { .. } => "FieldValueTooMany",
        }
    }
}

impl FieldError {
    /// The error without its field path: the `message` of a Status cause (whose `field` holds
    /// the path).
    pub fn detail_message(&self) -> String {
        let value = self.value.as_ref().map(render_value).unwrap_or_default();
        match &self.kind {
            FieldErrorKind::Required => "Required value".to_string(),
            FieldErrorKind::Forbidden => format!("Forbidden: {}", self.detail),
            FieldErrorKind::TooLong { max } => {
                format!("Too long: may not be more than {max} bytes")
            }
            FieldErrorKind::TooMany { count, max } => {
                format!("Too many: {count}: must have at most {max} items")
            }
            FieldErrorKind::Unknown => format!("unknown field \"{}\"", self.path),
            FieldErrorKind::NotSupported(supported) => {
                let list: Vec<String> = supported.iter().map(render_value).collect();
                format!(
                    "Unsupported value: {value}: supported values: {}",
                    list.join(", ")
                )
            }
            FieldErrorKind::Invalid | FieldErrorKind::TypeInvalid if self.value.is_none() => {
                format!("Invalid value: {}", self.detail)
            }
            FieldErrorKind::Invalid | FieldErrorKind::TypeInvalid => {
                format!("Invalid value: {value}: {}", self.detail)
            }
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            FieldErrorKind::Unknown => f.write_str(&self.detail_message()),
            _ => write!(f, "{}: {}", self.path, self.detail_message()),
        }
    }
}

/// The value at a field path as CEL reports it (`spec.a.b`, `spec.list[2].c`).
/// The schema node of the value at `path` (`spec.items[0].name`).
fn schema_at<'a>(schema: &'a Value, path: &str) -> Option<&'a Value> {
    let mut current = schema;
    for part in path.split('.').filter(|p| !p.is_empty()) {
        let (field, indices) = part.split_once('[').unwrap_or((part, ""));
        if !field.is_empty() {
            current = current.get("properties")?.get(field)?;
        }
        for _ in indices.split('[').filter(|i| !i.is_empty()) {
            current = current.get("items")?;
        }
    }
    Some(current)
}

fn lookup<'a>(object: &'a Value, path: &str) -> Option<&'a Value> {
    let mut current = object;
    for part in path.split('.').filter(|p| !p.is_empty()) {
        let (field, indices) = part.split_once('[').unwrap_or((part, ""));
        if !field.is_empty() {
            current = current.get(field)?;
        }
        for index in indices.split('[').filter(|i| !i.is_empty()) {
            current = current.get(index.trim_end_matches(']').parse::<usize>().ok()?)?;
        }
    }
    Some(current)
}

fn render_value(value: &Value) -> String {
    match value {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

pub(crate) fn json_type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}
