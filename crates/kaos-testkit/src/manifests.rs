//! Loading YAML manifests straight into a cluster (what `kubectl apply -f` does, without HTTP).

use std::path::Path;

use anyhow::{Context, bail};
use serde_json::Value;

use crate::cluster::{Cluster, Patch, PatchType, Subresource, WriteOptions};
use crate::meta;

/// The field manager of objects applied from files.
pub const FIELD_MANAGER: &str = "kaos-testkit-apply";

/// Applies every document of a YAML file, or of every `.yaml`/`.yml` file in a directory (in name
/// order). Returns how many objects were applied.
pub fn apply_path(cluster: &Cluster, path: &Path) -> anyhow::Result<usize> {
    if path.is_dir() {
        let mut count = 0;
        for file in yaml_files(path)? {
            count += apply_path(cluster, &file)?;
        }
        return Ok(count);
    }
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    apply_yaml(cluster, &text).with_context(|| format!("cannot apply {}", path.display()))
}

/// The `.yaml`/`.yml` files of a directory, in name order.
pub fn yaml_files(directory: &Path) -> anyhow::Result<Vec<std::path::PathBuf>> {
    let mut files: Vec<_> = std::fs::read_dir(directory)
        .with_context(|| format!("cannot read {}", directory.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    files.sort();
    Ok(files)
}

/// Applies every document of a YAML stream with server-side apply.
pub fn apply_yaml(cluster: &Cluster, text: &str) -> anyhow::Result<usize> {
    let documents: Vec<Value> = serde_saphyr::from_multiple(text).context("invalid YAML")?;
    let mut count = 0;
    for document in documents.into_iter().filter(|d| !d.is_null()) {
        apply_object(cluster, &document)?;
        count += 1;
    }
    Ok(count)
}

/// Server-side applies one object, in its namespace (or `default`).
pub fn apply_object(cluster: &Cluster, object: &Value) -> anyhow::Result<Value> {
    let api_version = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    let kind = object.get("kind").and_then(Value::as_str).unwrap_or("");
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let Some(rt) = cluster
        .resource_types()
        .into_iter()
        .find(|t| t.group == group && t.version == version && t.kind == kind)
    else {
        bail!("no resource serves {kind} in {api_version} (install its CRD first)");
    };
    let name = meta::name(object);
    let namespace = object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("default");
    let options = WriteOptions {
        field_manager: Some(FIELD_MANAGER.into()),
        force: true,
        ..WriteOptions::default()
    };
    let patch = Patch {
        kind: PatchType::Apply,
        body: object,
    };
    cluster
        .patch(&rt, namespace, name, patch, Subresource::Main, &options)
        .map_err(|e| anyhow::anyhow!("{kind} {name}: {}", e.message))
}
