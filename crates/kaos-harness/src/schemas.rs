//! The admission of kaos.tools manifests against the CRDs the code generates.

use std::collections::BTreeMap;

use kaos_schema::{CrdSchema, FieldError, UnknownFields};
use serde_json::Value;

/// The admission schema of each kind, from the CRDs the code generates.
pub struct Schemas {
    by_kind: BTreeMap<String, CrdSchema>,
}

impl Default for Schemas {
    fn default() -> Self {
        let by_kind = kaos_api::crd::all()
            .into_iter()
            .map(|(_, crd)| {
                let kind = crd.spec.names.kind.clone();
                let json = serde_json::to_value(crd).expect("CRDs serialize");
                let schema =
                    CrdSchema::from_crd(&json, "v1alpha1").expect("every CRD serves v1alpha1");
                (kind, schema)
            })
            .collect();
        Self { by_kind }
    }
}

impl Schemas {
    /// Admits a manifest of any kaos.tools kind with strict field validation, as
    /// `kubectl apply --server-side` does; returns the stored (defaulted) object.
    pub fn admit(&self, manifest: &Value) -> Result<Value, Vec<String>> {
        let kind = manifest.get("kind").and_then(Value::as_str);
        let schema = kind
            .and_then(|k| self.by_kind.get(k))
            .unwrap_or_else(|| panic!("not a kaos.tools kind: {kind:?}"));
        let mut object = manifest.clone();
        schema
            .admit(&mut object, None, UnknownFields::Reject)
            .map(|()| object)
            .map_err(|errors| errors.iter().map(FieldError::to_string).collect())
    }
}
