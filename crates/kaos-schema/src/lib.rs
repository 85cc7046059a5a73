//! Admission of custom resources against a CRD's `openAPIV3Schema`, in kube-apiserver's order:
//! prune unknown fields (or reject them under `fieldValidation=Strict`), apply defaults, validate
//! the structural schema, then evaluate the `x-kubernetes-validations` CEL rules.
//!
//! Error texts follow kube-apiserver's `field.Error` formatting so tests can assert on the
//! messages users will see from a real cluster.
//!
//! Used by kaos-testkit (every custom resource it stores), by `kaosctl render` (the manifests it
//! reads) and by the repository's tests (the examples and the CRDs' validation rules).

mod error;
mod prune_default;
mod structural;

pub use error::{FieldError, FieldErrorKind};

use kube_cel::{CompiledSchema, Validator, compile_schema};
use serde_json::Value;

/// A version's `openAPIV3Schema`, ready to admit objects.
pub struct CrdSchema {
    schema: Value,
    cel: CompiledSchema,
    validator: Validator,
}

/// How to treat fields the schema does not declare.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum UnknownFields {
    /// Drop them silently (kube-apiserver's default for custom resources).
    #[default]
    Prune,
    /// Reject the object (`fieldValidation=Strict`).
    Reject,
}

impl CrdSchema {
    /// Prepares `schema` (an `openAPIV3Schema`); CEL rules are compiled once here.
    pub fn new(schema: Value) -> Self {
        let cel = compile_schema(&schema);
        Self {
            schema,
            cel,
            validator: Validator::new(),
        }
    }

    /// Reads the schema of `version` out of a CustomResourceDefinition given as JSON.
    pub fn from_crd(crd: &Value, version: &str) -> Option<Self> {
        let versions = crd.pointer("/spec/versions")?.as_array()?;
        let served = versions
            .iter()
            .find(|v| v.get("name").and_then(Value::as_str) == Some(version))?;
        Some(Self::new(
            served.pointer("/schema/openAPIV3Schema")?.clone(),
        ))
    }

    /// The `openAPIV3Schema` this admits against.
    pub fn raw(&self) -> &Value {
        &self.schema
    }

    /// Admits `object` as kube-apiserver would: on success `object` is pruned and defaulted.
    /// `old` is the stored object on updates (for transition rules).
    pub fn admit(
        &self,
        object: &mut Value,
        old: Option<&Value>,
        unknown: UnknownFields,
    ) -> Result<(), Vec<FieldError>> {
        self.admit_with(object, old, unknown, |_| Vec::new())
    }

    /// [`Self::admit`] with the checks of the resource's own kind (`extra`: a CRD's scale
    /// paths), reported where kube-apiserver reports them: after the schema's, before CEL's.
    pub fn admit_with(
        &self,
        object: &mut Value,
        old: Option<&Value>,
        unknown: UnknownFields,
        extra: impl FnOnce(&Value) -> Vec<FieldError>,
    ) -> Result<(), Vec<FieldError>> {
        let mut errors = Vec::new();
        let unknown_paths = prune_default::prune(&self.schema, object, "");
        if unknown == UnknownFields::Reject {
            errors.extend(unknown_paths.into_iter().map(FieldError::unknown));
        }
        prune_default::apply_defaults(&self.schema, object);
        structural::validate(&self.schema, object, "", &mut errors);
        errors.extend(extra(object));
        // As kube-apiserver: CEL rules run unless a blocking error was found, which one more
        // error then reports.
        if errors.iter().any(FieldError::blocks_cel) {
            errors.push(FieldError::cel_skipped());
        } else if let Err(failures) = self.validator.validate_compiled(&self.cel, object, old) {
            let failures = failures.into_vec().into_iter();
            errors.extend(failures.map(|e| FieldError::from_cel(e, object, &self.schema)));
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }
}

/// The path of `key` inside the field at `path`, as kube-apiserver prints it (`spec.replicas`).
fn child_path(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// Whether a boolean keyword of a schema (`nullable`, `x-kubernetes-preserve-unknown-fields`) is
/// set.
fn flag(schema: &Value, name: &str) -> bool {
    schema.get(name).and_then(Value::as_bool).unwrap_or(false)
}
