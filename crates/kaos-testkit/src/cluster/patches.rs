//! Patches: what a patch of each format, server-side apply included, makes of the stored object
//! (the candidate `finish_update` then writes), and server-side apply's create.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::state::State;
use super::writes::managed_entry;
use super::{Patch, PatchType, WatchEvent, WriteOptions};
use crate::apply;
use crate::error::{ApiError, ApiResult};
use crate::meta;
use crate::resources::ResourceType;

impl State {
    /// Server-side apply to an object that does not exist: creates it, owned by the manager.
    pub(super) fn create_by_apply(
        &mut self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        body: &Value,
        options: &WriteOptions,
        events: &broadcast::Sender<Arc<WatchEvent>>,
    ) -> ApiResult<Value> {
        let manager = apply_manager(options)?;
        let mut object = body.clone();
        let entry = managed_entry(rt, &manager, body);
        let metadata = meta::metadata_mut(&mut object);
        metadata.insert("name".into(), Value::from(name));
        metadata.insert("managedFields".into(), json!([entry]));
        let created = self.create(rt, namespace, object, options, events)?;
        self.record_apply(rt, namespace, name, &manager, body.clone());
        Ok(created)
    }
}

/// The object a patch makes of `existing` (before admission), and the field manager when the
/// patch is a server-side apply.
pub(super) fn patched(
    rt: &ResourceType,
    name: &str,
    existing: &Value,
    managers: &BTreeMap<String, Value>,
    patch: Patch<'_>,
    options: &WriteOptions,
) -> ApiResult<(Value, Option<String>)> {
    let Patch { kind, body } = patch;
    if kind == PatchType::Strategic && rt.crd.is_some() {
        return Err(ApiError::unsupported_media_type(
            "application/strategic-merge-patch+json is not supported for custom resources",
        ));
    }
    let mut candidate = existing.clone();
    let mut applied_by = None;
    match kind {
        PatchType::Merge => crate::patch::merge_patch(&mut candidate, body),
        PatchType::Json => crate::patch::json_patch(&mut candidate, body)?,
        PatchType::Strategic => crate::patch::strategic_merge(&mut candidate, body)?,
        PatchType::Apply => {
            let manager = apply_manager(options)?;
            if !options.force {
                let conflicts = apply::conflicts(body, &manager, managers);
                if !conflicts.is_empty() {
                    return Err(ApiError::apply_conflict(&conflicts));
                }
            }
            let others: Vec<&Value> = managers
                .iter()
                .filter(|(m, _)| **m != manager)
                .map(|(_, c)| c)
                .collect();
            candidate = apply::apply(existing, body, managers.get(&manager), &others);
            applied_by = Some(manager);
        }
    }
    // A patch that carries a resourceVersion is conditional on it.
    if kind != PatchType::Json {
        let sent = body
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str);
        if sent.is_some_and(|v| !v.is_empty() && v != meta::resource_version(existing)) {
            return Err(ApiError::conflict(&rt.plural, &rt.group, name));
        }
    }
    Ok((candidate, applied_by))
}

/// The field manager of a server-side apply, which must name one.
fn apply_manager(options: &WriteOptions) -> ApiResult<String> {
    options
        .field_manager
        .clone()
        .filter(|m| !m.is_empty())
        .ok_or_else(|| ApiError::bad_request("PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch"))
}
