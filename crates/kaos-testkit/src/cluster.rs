//! The object store and the write semantics of kube-apiserver: resourceVersions, generations,
//! the status subresource, admission of custom resources, finalizers, garbage collection and the
//! watch history every watch is served from.
//!
//! This file is the public face, [`Cluster`]; the work is done by `State`, the store behind
//! its lock, whose parts live in `cluster/`: `types` (the values of the API), `state` (the store
//! and its lookups), `list` (pages and continue tokens), `writes` (create, update, admission and
//! `commit`), `patches`, `deletion` (finalizers and the garbage collector) and `crds`.

mod crds;
mod deletion;
mod list;
mod patches;
mod state;
mod types;
mod writes;

use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Value, json};
use tokio::sync::broadcast;

use self::list::encode_continue;
use self::patches::patched;
use self::state::{State, with_type};
pub use self::types::{
    EventType, ListOptions, Patch, PatchType, Propagation, Subresource, WatchEvent, WatchStart,
    WriteOptions,
};
use crate::error::{ApiError, ApiResult};
use crate::meta;
use crate::resources::{self, ResourceType};

/// The in-memory cluster. Cheap to clone; all clones share the same state.
#[derive(Clone)]
pub struct Cluster {
    state: Arc<Mutex<State>>,
    events: broadcast::Sender<Arc<WatchEvent>>,
}

/// Namespaces every cluster starts with.
const INITIAL_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public", "kube-node-lease"];

impl Default for Cluster {
    fn default() -> Self {
        Self::new(10_000)
    }
}

impl Cluster {
    /// A cluster with the built-in kinds and the initial namespaces; the watch history keeps the
    /// last `history_limit` changes.
    pub fn new(history_limit: usize) -> Self {
        let (events, _) = broadcast::channel(65_536);
        let cluster = Self {
            state: Arc::new(Mutex::new(State::new(history_limit))),
            events,
        };
        let namespaces = cluster
            .resource("", "v1", "namespaces")
            .expect("namespaces are built in");
        for ns in INITIAL_NAMESPACES {
            cluster
                .create(
                    &namespaces,
                    "",
                    json!({"metadata": {"name": ns}}),
                    &WriteOptions::default(),
                )
                .expect("initial namespaces are valid");
        }
        cluster
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves consistent data behind (every write commits
        // at its end), so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The served resource types.
    pub fn resource_types(&self) -> Vec<Arc<ResourceType>> {
        self.lock().types.clone()
    }

    /// The type serving `group/version/plural`, if any.
    pub fn resource(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceType>> {
        self.lock()
            .types
            .iter()
            .find(|t| t.group == group && t.version == version && t.plural == plural)
            .cloned()
    }

    /// The current resourceVersion of the whole cluster.
    pub fn resource_version(&self) -> u64 {
        self.lock().resource_version
    }

    /// The resourceVersion of the last change of an object of `group`'s `plurals` (0: none
    /// changed since the start).
    pub fn last_change(&self, group: &str, plurals: &[&str]) -> u64 {
        let state = self.lock();
        plurals
            .iter()
            .filter_map(|plural| state.changed.get(&resources::storage_key(group, plural)))
            .copied()
            .max()
            .unwrap_or(0)
    }

    /// The object as stored.
    pub fn get(&self, rt: &ResourceType, namespace: &str, name: &str) -> ApiResult<Value> {
        self.lock().existing(rt, namespace, name)
    }

    /// Lists objects (`namespace` empty: all namespaces) in name order, with pagination.
    pub fn list(
        &self,
        rt: &ResourceType,
        namespace: &str,
        options: &ListOptions,
    ) -> ApiResult<Value> {
        let state = self.lock();
        let (list_version, start_after) = state.list_start(options.continue_token.as_deref())?;
        let page = state.page(rt, namespace, options, start_after.as_ref());
        let mut metadata = json!({"resourceVersion": list_version.to_string()});
        if page.remaining > 0
            && let Some((ns, name)) = page.last
        {
            metadata["continue"] = Value::from(encode_continue(list_version, &ns, &name));
            metadata["remainingItemCount"] = Value::from(page.remaining);
        }
        Ok(json!({
            "apiVersion": rt.api_version(),
            "kind": format!("{}List", rt.kind),
            "metadata": metadata,
            "items": page.items,
        }))
    }

    /// Creates an object (named, or from its generateName); returns it as stored, or as it would
    /// be with a dry run.
    pub fn create(
        &self,
        rt: &ResourceType,
        namespace: &str,
        object: Value,
        options: &WriteOptions,
    ) -> ApiResult<Value> {
        let mut state = self.lock();
        let created = state.create(rt, namespace, object, options, &self.events)?;
        Ok(with_type(rt, created))
    }

    /// Replaces an object (PUT); `status` addresses the status subresource.
    pub fn update(
        &self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        object: Value,
        sub: Subresource,
        options: &WriteOptions,
    ) -> ApiResult<Value> {
        let mut state = self.lock();
        let existing = state.existing(rt, namespace, name)?;
        if meta::name(&object) != name && !meta::name(&object).is_empty() {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({}) does not match the name on the URL ({name})",
                meta::name(&object)
            )));
        }
        let sent_version = meta::resource_version(&object);
        // Custom resources allow no unconditional update (built-ins do).
        if sent_version.is_empty() && rt.crd.is_some() {
            let error = kaos_schema::FieldError::invalid(
                "metadata.resourceVersion",
                &Value::from(0),
                "must be specified for an update".into(),
            );
            return Err(ApiError::invalid(&rt.plural, &rt.group, name, &[error]));
        }
        if !sent_version.is_empty() && sent_version != meta::resource_version(&existing) {
            return Err(ApiError::conflict(&rt.plural, &rt.group, name));
        }
        let updated =
            state.finish_update(rt, &existing, object, sub, options, None, &self.events)?;
        Ok(with_type(rt, updated))
    }

    /// Patches an object (PATCH); a server-side apply creates it when it does not exist.
    pub fn patch(
        &self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        patch: Patch<'_>,
        sub: Subresource,
        options: &WriteOptions,
    ) -> ApiResult<Value> {
        let mut state = self.lock();
        let stored = state
            .stored(rt, namespace, name)
            .map(|s| (s.object.clone(), s.applied.clone()));
        let Some((existing, managers)) = stored else {
            if patch.kind == PatchType::Apply && sub == Subresource::Main {
                let created = state.create_by_apply(
                    rt,
                    namespace,
                    name,
                    patch.body,
                    options,
                    &self.events,
                )?;
                return Ok(with_type(rt, created));
            }
            return Err(ApiError::not_found(&rt.plural, &rt.group, name));
        };
        let (mut candidate, applied_by) = patched(rt, name, &existing, &managers, patch, options)?;
        meta::metadata_mut(&mut candidate).insert(
            "resourceVersion".into(),
            Value::from(meta::resource_version(&existing)),
        );
        let apply_record = applied_by.map(|m| (m, patch.body.clone()));
        let updated = state.finish_update(
            rt,
            &existing,
            candidate,
            sub,
            options,
            apply_record,
            &self.events,
        )?;
        Ok(with_type(rt, updated))
    }

    /// Deletes an object: removed at once, or marked with a deletionTimestamp while finalizers
    /// remain. Returns the object as it was last stored.
    pub fn delete(
        &self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        propagation: Propagation,
        preconditions: Option<&Value>,
        dry_run: bool,
    ) -> ApiResult<Value> {
        let mut state = self.lock();
        let existing = state.existing(rt, namespace, name)?;
        if let Some(pre) = preconditions {
            let uid = pre.get("uid").and_then(Value::as_str);
            let rv = pre.get("resourceVersion").and_then(Value::as_str);
            if uid.is_some_and(|u| u != meta::uid(&existing))
                || rv.is_some_and(|v| v != meta::resource_version(&existing))
            {
                return Err(ApiError::conflict(&rt.plural, &rt.group, name));
            }
        }
        if dry_run {
            return Ok(with_type(rt, existing));
        }
        let result = state.delete(rt, namespace, name, propagation, &self.events);
        state.collect_garbage(&self.events);
        Ok(with_type(rt, result))
    }

    /// Deletes every object matching the selectors; returns the list of what was deleted.
    pub fn delete_collection(
        &self,
        rt: &ResourceType,
        namespace: &str,
        options: &ListOptions,
    ) -> ApiResult<Value> {
        let list = self.list(
            rt,
            namespace,
            &ListOptions {
                limit: None,
                continue_token: None,
                ..options.clone()
            },
        )?;
        let mut state = self.lock();
        for item in list["items"].as_array().into_iter().flatten() {
            state.delete(
                rt,
                meta::namespace(item),
                meta::name(item),
                Propagation::Background,
                &self.events,
            );
        }
        state.collect_garbage(&self.events);
        Ok(list)
    }

    /// Starts a watch: the changes after `since` still in the history (or, with `since` 0,
    /// synthetic ADDED events for the current objects), then a live receiver.
    /// Fails with 410 Gone when `since` is older than the history.
    pub fn watch(&self, rt: &ResourceType, namespace: &str, since: u64) -> ApiResult<WatchStart> {
        let state = self.lock();
        let key = rt.storage_key();
        let receiver = self.events.subscribe();
        let backlog: Vec<Arc<WatchEvent>> = if since == 0 {
            state
                .objects
                .get(&key)
                .into_iter()
                .flat_map(|objects| objects.iter())
                .filter(|((ns, _), _)| namespace.is_empty() || ns == namespace)
                .map(|((ns, _), stored)| {
                    Arc::new(WatchEvent {
                        resource_version: state.resource_version,
                        storage_key: key.clone(),
                        namespace: ns.clone(),
                        event_type: EventType::Added,
                        object: stored.object.clone(),
                        previous: None,
                    })
                })
                .collect()
        } else {
            if since < state.compacted {
                return Err(ApiError::gone(format!(
                    "too old resource version: {since} ({})",
                    state.compacted + 1
                )));
            }
            state
                .history
                .iter()
                .filter(|e| e.resource_version > since && e.storage_key == key)
                .filter(|e| namespace.is_empty() || e.namespace == namespace)
                .cloned()
                .collect()
        };
        Ok(WatchStart {
            backlog,
            receiver,
            resource_version: state.resource_version,
        })
    }

    /// Forgets the watch history, so every watch from an older resourceVersion gets 410 Gone
    /// (what etcd compaction does).
    pub fn compact(&self) {
        let mut state = self.lock();
        state.compacted = state.resource_version;
        state.history.clear();
    }
}
