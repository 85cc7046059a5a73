//! The test harness of kaos-rs, shared by the repository-level tests (`tests/`), the
//! controllers' tests and the benchmark:
//!
//! - [`cluster`]: an in-process kaos-testkit cluster to apply objects to and wait on;
//! - [`controller`]: a controller run in-process against it;
//! - [`fence`] (on [`watch_tap`]): waiting until that controller has caught up with every change, before a test
//!   asserts that nothing else happened;
//! - [`fixtures`]: typed test objects (`Agent::test("a").peers(["b"])`) and the statuses their
//!   controllers would write;
//! - [`status`] and [`deployments`]: reading what the controllers wrote;
//! - [`built`]: asserting what every controller's pure builder writes the same way;
//! - [`processes`]: the real binaries as separate processes (kaos-testkit served on loopback,
//!   the controllers, the chart's rendering under its RBAC);
//! - here: the repository's files (its root, the examples) and their admission against the CRDs.

pub mod built;
pub mod cluster;
pub mod controller;
pub mod deployments;
pub mod fence;
pub mod fixtures;
pub mod local_process;
pub mod processes;
mod schemas;
pub mod status;
pub mod watch_tap;

pub use schemas::Schemas;

use std::path::{Path, PathBuf};

use serde_json::Value;

/// The repository root (this crate lives in `<root>/crates/kaos-harness`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("the harness crate sits two levels inside the repository")
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

/// The Secrets the examples read keys from (`openai-credentials` of the quickstart's ModelAPI,
/// `weather-credentials` of the custom MCPServer, `github-oauth` of the ThirdPartyService), as a
/// user creates them before applying the examples (placeholder keys: no test calls a provider).
pub const EXAMPLE_CREDENTIALS: &str = "apiVersion: v1\nkind: Secret\nmetadata: {name: openai-credentials, namespace: default}\nstringData: {api-key: sk-test}\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: weather-credentials, namespace: default}\nstringData: {api-key: test}\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: github-oauth, namespace: default}\nstringData: {client-secret: test}\n";
