//! Helpers shared by the repository-level tests and the controllers' tests.

pub mod cluster;
pub mod processes;

use std::path::{Path, PathBuf};

use kaos_schema::{CrdSchema, FieldError, UnknownFields};
use serde_json::Value;

/// The repository root (this crate lives in `<root>/tests`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate sits inside the repository")
        .to_path_buf()
}

/// The manifests in `examples/`, sorted.
pub fn example_files() -> Vec<PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(repo_root().join("examples"))
        .expect("examples/ exists")
        .map(|e| e.expect("readable entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    files.sort();
    files
}

/// Every YAML document of a file, as JSON values (empty documents skipped).
pub fn yaml_documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text)
        .unwrap_or_else(|e| panic!("{} is not valid YAML: {e}", path.display()));
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

/// The admission schema of each kind, from the CRDs the code generates.
pub struct Schemas {
    by_kind: std::collections::BTreeMap<String, CrdSchema>,
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

/// The Secrets the examples read keys from (`openai-credentials` of the quickstart's ModelAPI,
/// `weather-credentials` of the custom MCPServer, `github-oauth` of the ThirdPartyService), as a
/// user creates them before applying the examples (placeholder keys: no test calls a provider).
pub const EXAMPLE_CREDENTIALS: &str = "apiVersion: v1\nkind: Secret\nmetadata: {name: openai-credentials, namespace: default}\nstringData: {api-key: sk-test}\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: weather-credentials, namespace: default}\nstringData: {api-key: test}\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: github-oauth, namespace: default}\nstringData: {client-secret: test}\n";
