//! The object store and the write semantics of kube-apiserver: resourceVersions, generations,
//! the status subresource, admission of custom resources, finalizers, garbage collection and the
//! watch history every watch is served from.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::apply;
use crate::error::{ApiError, ApiResult};
use crate::gc_index::GcIndex;
use crate::meta;
use crate::resources::{self, ResourceType};
use crate::schema::{FieldError, FieldErrorKind, UnknownFields};
use crate::selectors::{FieldSelector, LabelSelector};

/// Which part of an object a write addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Subresource {
    Main,
    Status,
}

/// The type of a watch event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change, as kept in the watch history.
#[derive(Debug)]
pub struct WatchEvent {
    pub resource_version: u64,
    pub storage_key: String,
    pub namespace: String,
    pub event_type: EventType,
    pub object: Value,
    /// The object before the change (for selector transitions).
    pub previous: Option<Value>,
}

/// Patch formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchType {
    Merge,
    Json,
    Strategic,
    Apply,
}

/// A patch: its format and body.
#[derive(Clone, Copy, Debug)]
pub struct Patch<'a> {
    pub kind: PatchType,
    pub body: &'a Value,
}

/// A started watch: the events to send first, then the live feed.
pub struct WatchStart {
    pub backlog: Vec<Arc<WatchEvent>>,
    pub receiver: broadcast::Receiver<Arc<WatchEvent>>,
    /// The cluster's resourceVersion when the watch started.
    pub resource_version: u64,
}

/// Options of a write request.
#[derive(Clone, Debug, Default)]
pub struct WriteOptions {
    pub field_manager: Option<String>,
    pub force: bool,
    pub dry_run: bool,
    pub unknown_fields: UnknownFields,
}

/// How dependents are treated when their owner is deleted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Propagation {
    #[default]
    Background,
    Foreground,
    Orphan,
}

/// A list request.
#[derive(Clone, Debug, Default)]
pub struct ListOptions {
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    pub limit: Option<usize>,
    pub continue_token: Option<String>,
}

struct Stored {
    object: Value,
    /// Last applied configuration per server-side-apply field manager.
    applied: BTreeMap<String, Value>,
}

struct State {
    types: Vec<Arc<ResourceType>>,
    objects: HashMap<String, BTreeMap<(String, String), Stored>>,
    resource_version: u64,
    history: VecDeque<Arc<WatchEvent>>,
    /// The newest resourceVersion no longer in the history (watches from before it get 410).
    compacted: u64,
    history_limit: usize,
    next_uid: u64,
    next_cluster_ip: u32,
    /// Tells the garbage collector when a pass can find nothing (kept by `commit`).
    gc: GcIndex,
}

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
        let state = State {
            types: resources::builtins().into_iter().map(Arc::new).collect(),
            objects: HashMap::new(),
            resource_version: 0,
            history: VecDeque::new(),
            compacted: 0,
            history_limit: history_limit.max(1),
            next_uid: 1,
            next_cluster_ip: 1,
            gc: GcIndex::default(),
        };
        let cluster = Self {
            state: Arc::new(Mutex::new(state)),
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

    pub fn get(&self, rt: &ResourceType, namespace: &str, name: &str) -> ApiResult<Value> {
        let state = self.lock();
        state
            .stored(rt, namespace, name)
            .map(|s| s.object.clone())
            .ok_or_else(|| ApiError::not_found(&rt.plural, &rt.group, name))
    }

    /// Lists objects (`namespace` empty: all namespaces) in name order, with pagination.
    pub fn list(
        &self,
        rt: &ResourceType,
        namespace: &str,
        options: &ListOptions,
    ) -> ApiResult<Value> {
        let state = self.lock();
        let continued = match &options.continue_token {
            Some(token) if !token.is_empty() => Some(decode_continue(token)?),
            _ => None,
        };
        // Every page of one list reports the first page's version, as kube-apiserver's
        // snapshot does: a watch started from the last page then replays what changed while
        // the pages were read instead of missing it.
        let list_version = match &continued {
            Some((version, _)) if *version < state.compacted => {
                return Err(ApiError::gone(
                    "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
                ));
            }
            Some((version, _)) => *version,
            None => state.resource_version,
        };
        let start_after = continued.map(|(_, after)| after);
        let mut items = Vec::new();
        let mut remaining = 0usize;
        let mut next = None;
        if let Some(objects) = state.objects.get(&rt.storage_key()) {
            for ((ns, name), stored) in objects {
                if !namespace.is_empty() && ns != namespace {
                    continue;
                }
                if start_after
                    .as_ref()
                    .is_some_and(|after| (ns, name) <= (&after.0, &after.1))
                {
                    continue;
                }
                if !options.labels.matches(&stored.object)
                    || !options.fields.matches(&stored.object)
                {
                    continue;
                }
                if options
                    .limit
                    .is_some_and(|limit| limit > 0 && items.len() >= limit)
                {
                    remaining += 1;
                    continue;
                }
                items.push(with_type(rt, stored.object.clone()));
                next = Some((ns.clone(), name.clone()));
            }
        }
        let mut metadata = json!({"resourceVersion": list_version.to_string()});
        if remaining > 0
            && let Some((ns, name)) = next
        {
            metadata["continue"] = Value::from(encode_continue(list_version, &ns, &name));
            metadata["remainingItemCount"] = Value::from(remaining);
        }
        Ok(json!({
            "apiVersion": rt.api_version(),
            "kind": format!("{}List", rt.kind),
            "metadata": metadata,
            "items": items,
        }))
    }

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
        let existing = state
            .stored(rt, namespace, name)
            .map(|s| s.object.clone())
            .ok_or_else(|| ApiError::not_found(&rt.plural, &rt.group, name))?;
        if meta::name(&object) != name && !meta::name(&object).is_empty() {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({}) does not match the name on the URL ({name})",
                meta::name(&object)
            )));
        }
        let sent_version = meta::resource_version(&object);
        // Custom resources allow no unconditional update (built-ins do).
        if sent_version.is_empty() && rt.crd.is_some() {
            let error = crate::schema::FieldError::invalid(
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

    pub fn patch(
        &self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        patch: Patch<'_>,
        sub: Subresource,
        options: &WriteOptions,
    ) -> ApiResult<Value> {
        let Patch {
            kind: patch_type,
            body,
        } = patch;
        let mut state = self.lock();
        let stored = state
            .stored(rt, namespace, name)
            .map(|s| (s.object.clone(), s.applied.clone()));
        let Some((existing, managers)) = stored else {
            if patch_type == PatchType::Apply && sub == Subresource::Main {
                let manager = apply_manager(options)?;
                let mut object = body.clone();
                let entry = managed_entry(rt, &manager, body);
                let metadata = meta::metadata_mut(&mut object);
                metadata.insert("name".into(), Value::from(name));
                metadata.insert("managedFields".into(), json!([entry]));
                let created = state.create(rt, namespace, object, options, &self.events)?;
                state.record_apply(rt, namespace, name, &manager, body.clone());
                return Ok(with_type(rt, created));
            }
            return Err(ApiError::not_found(&rt.plural, &rt.group, name));
        };
        if patch_type == PatchType::Strategic && rt.crd.is_some() {
            return Err(ApiError::unsupported_media_type(
                "application/strategic-merge-patch+json is not supported for custom resources",
            ));
        }
        let mut candidate = existing.clone();
        let mut applied_by = None;
        match patch_type {
            PatchType::Merge => crate::patch::merge_patch(&mut candidate, body),
            PatchType::Json => crate::patch::json_patch(&mut candidate, body)?,
            PatchType::Strategic => crate::patch::strategic_merge(&mut candidate, body),
            PatchType::Apply => {
                let manager = apply_manager(options)?;
                if !options.force {
                    let conflicts = apply::conflicts(body, &manager, &managers);
                    if !conflicts.is_empty() {
                        return Err(ApiError::apply_conflict(&conflicts));
                    }
                }
                let others: Vec<&Value> = managers
                    .iter()
                    .filter(|(m, _)| **m != manager)
                    .map(|(_, c)| c)
                    .collect();
                candidate = apply::apply(&existing, body, managers.get(&manager), &others);
                applied_by = Some(manager);
            }
        }
        // A patch that carries a resourceVersion is conditional on it.
        if patch_type != PatchType::Json {
            let sent = body
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str);
            if sent.is_some_and(|v| !v.is_empty() && v != meta::resource_version(&existing)) {
                return Err(ApiError::conflict(&rt.plural, &rt.group, name));
            }
        }
        meta::metadata_mut(&mut candidate).insert(
            "resourceVersion".into(),
            Value::from(meta::resource_version(&existing)),
        );
        let apply_record = applied_by.as_ref().map(|m| (m.clone(), body.clone()));
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
        let existing = state
            .stored(rt, namespace, name)
            .map(|s| s.object.clone())
            .ok_or_else(|| ApiError::not_found(&rt.plural, &rt.group, name))?;
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

fn apply_manager(options: &WriteOptions) -> ApiResult<String> {
    options
        .field_manager
        .clone()
        .filter(|m| !m.is_empty())
        .ok_or_else(|| ApiError::bad_request("PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch"))
}

/// The `managedFields` entry of a manager's applied configuration.
fn managed_entry(rt: &ResourceType, manager: &str, config: &Value) -> Value {
    let mut fields = config.clone();
    if let Some(map) = fields.as_object_mut() {
        map.remove("apiVersion");
        map.remove("kind");
    }
    json!({
        "manager": manager,
        "operation": "Apply",
        "apiVersion": rt.api_version(),
        "time": meta::now(),
        "fieldsType": "FieldsV1",
        "fieldsV1": apply::fields_v1(&fields, ""),
    })
}

/// The finalizer an owner deleted with the `Orphan` policy waits under.
const ORPHAN: &str = "orphan";
/// kube-apiserver's finalizer on a deleted CRD: it stays (Terminating) until the objects of its
/// kinds are gone, their own finalizers included.
const CRD_CLEANUP: &str = "customresourcecleanup.apiextensions.k8s.io";

/// An object being deleted without `finalizer`: its next state and event. Without any finalizer
/// left it is deleted, and the DELETED event carries its last stored state (as etcd's does).
fn without_finalizer(object: &Value, finalizer: &str) -> (Value, EventType) {
    let remaining: Vec<String> = meta::finalizers(object)
        .into_iter()
        .filter(|f| f != finalizer)
        .collect();
    if remaining.is_empty() {
        return (object.clone(), EventType::Deleted);
    }
    let mut updated = object.clone();
    meta::metadata_mut(&mut updated).insert("finalizers".into(), json!(remaining));
    (updated, EventType::Modified)
}

/// kube-apiserver keeps the label `kubernetes.io/metadata.name` of a Namespace equal to its name
/// on every write (NetworkPolicies select namespaces by it).
fn label_namespace_name(rt: &ResourceType, object: &mut Value) {
    if !(rt.group.is_empty() && rt.plural == "namespaces") {
        return;
    }
    let name = Value::from(meta::name(object));
    let metadata = meta::metadata_mut(object);
    if !metadata.get("labels").is_some_and(Value::is_object) {
        metadata.insert("labels".into(), json!({}));
    }
    metadata["labels"]["kubernetes.io/metadata.name"] = name;
}

/// Lists carry `apiVersion` and `kind` on every item (kube-apiserver's JSON does for CRs).
fn with_type(rt: &ResourceType, mut object: Value) -> Value {
    if let Some(map) = object.as_object_mut() {
        map.insert("apiVersion".into(), Value::from(rt.api_version()));
        map.insert("kind".into(), Value::from(rt.kind.clone()));
    }
    object
}

fn is_crd_type(rt: &ResourceType) -> bool {
    rt.group == "apiextensions.k8s.io" && rt.plural == "customresourcedefinitions"
}

/// A continue token: the list's version and the last key served.
fn encode_continue(version: u64, namespace: &str, name: &str) -> String {
    format!("{version}/{namespace}/{name}")
        .bytes()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn decode_continue(token: &str) -> ApiResult<(u64, (String, String))> {
    let invalid = || ApiError::bad_request("continue key is not valid");
    let bytes: Vec<u8> = (0..token.len())
        .step_by(2)
        .map(|i| {
            token
                .get(i..i + 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        })
        .collect::<Option<_>>()
        .ok_or_else(invalid)?;
    let text = String::from_utf8(bytes).map_err(|_| invalid())?;
    let (version, key) = text.split_once('/').ok_or_else(invalid)?;
    let version = version.parse().map_err(|_| invalid())?;
    let (ns, name) = key.split_once('/').ok_or_else(invalid)?;
    Ok((version, (ns.to_string(), name.to_string())))
}

/// One step of the garbage collector.
enum Collect {
    /// Delete (background) this dependent: its owners are gone or deleting in the foreground.
    Delete(Arc<ResourceType>, String, String),
    /// Release the dependents of an owner deleted with the `orphan` policy, then drop its
    /// `orphan` finalizer.
    Orphan(Arc<ResourceType>, Value),
    /// Commit an object's new state (event type, previous state): a finished foreground
    /// deletion or an empty terminating namespace going away.
    Commit(Arc<ResourceType>, Value, EventType, Value),
}

impl State {
    fn stored(&self, rt: &ResourceType, namespace: &str, name: &str) -> Option<&Stored> {
        let ns = if rt.namespaced { namespace } else { "" };
        self.objects
            .get(&rt.storage_key())?
            .get(&(ns.to_string(), name.to_string()))
    }

    fn namespace_exists(&self, namespace: &str) -> bool {
        self.objects
            .get("/namespaces")
            .is_some_and(|n| n.contains_key(&(String::new(), namespace.to_string())))
    }

    fn namespace_terminating(&self, namespace: &str) -> bool {
        self.objects
            .get("/namespaces")
            .and_then(|n| n.get(&(String::new(), namespace.to_string())))
            .is_some_and(|n| meta::is_deleting(&n.object))
    }

    /// Whether `rt` is a kind of a CRD being deleted (no new objects of it are accepted).
    fn crd_terminating(&self, rt: &ResourceType) -> bool {
        let Some(crd) = rt.crd.as_deref() else {
            return false;
        };
        self.objects
            .get("apiextensions.k8s.io/customresourcedefinitions")
            .and_then(|c| c.get(&(String::new(), crd.to_string())))
            .is_some_and(|c| meta::is_deleting(&c.object))
    }

    fn type_for_key(&self, key: &str) -> Option<Arc<ResourceType>> {
        self.types.iter().find(|t| t.storage_key() == key).cloned()
    }

    fn commit(
        &mut self,
        rt: &ResourceType,
        mut object: Value,
        event_type: EventType,
        previous: Option<Value>,
        events: &broadcast::Sender<Arc<WatchEvent>>,
    ) -> Value {
        self.resource_version += 1;
        let rv = self.resource_version;
        let namespace = if rt.namespaced {
            meta::namespace(&object).to_string()
        } else {
            String::new()
        };
        let name = meta::name(&object).to_string();
        let key = rt.storage_key();
        meta::metadata_mut(&mut object)
            .insert("resourceVersion".into(), Value::from(rv.to_string()));
        let objects = self.objects.entry(key.clone()).or_default();
        let id = (namespace.clone(), name);
        let replaced = objects.remove(&id);
        if event_type == EventType::Deleted {
            if let Some(old) = &replaced {
                self.gc.deleted(&old.object);
            }
        } else {
            self.gc
                .stored(replaced.as_ref().map(|s| &s.object), &object);
            let applied = replaced.map(|s| s.applied).unwrap_or_default();
            objects.insert(
                id,
                Stored {
                    object: object.clone(),
                    applied,
                },
            );
        }
        let event = Arc::new(WatchEvent {
            resource_version: rv,
            storage_key: key,
            namespace,
            event_type,
            object: with_type(rt, object.clone()),
            previous,
        });
        self.history.push_back(event.clone());
        while self.history.len() > self.history_limit {
            if let Some(old) = self.history.pop_front() {
                self.compacted = old.resource_version;
            }
        }
        // No receivers is fine: nobody watches yet.
        let _ = events.send(event);
        if event_type == EventType::Deleted && is_crd_type(rt) {
            let crd_name = meta::name(&object).to_string();
            self.forget_crd(&crd_name, events);
        }
        object
    }

    fn create(
        &mut self,
        rt: &ResourceType,
        namespace: &str,
        mut object: Value,
        options: &WriteOptions,
        events: &broadcast::Sender<Arc<WatchEvent>>,
    ) -> ApiResult<Value> {
        if !object.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request must be a JSON object",
            ));
        }
        if let Some(kind) = object.get("kind").and_then(Value::as_str)
            && kind != rt.kind
        {
            return Err(ApiError::bad_request(format!(
                "the kind of the object ({kind}) does not match the resource ({})",
                rt.plural
            )));
        }
        let namespace = if rt.namespaced { namespace } else { "" };
        let body_ns = meta::namespace(&object).to_string();
        if rt.namespaced && !body_ns.is_empty() && body_ns != namespace {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        if rt.namespaced && !self.namespace_exists(namespace) {
            return Err(ApiError::not_found("namespaces", "", namespace));
        }
        let mut name = meta::name(&object).to_string();
        if name.is_empty() {
            let prefix = object
                .pointer("/metadata/generateName")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            if prefix.is_empty() {
                let errors = [crate::schema::FieldError::required("metadata.name")];
                return Err(ApiError::invalid(&rt.kind, &rt.group, "", &errors));
            }
            name = format!("{prefix}{}", self.random_suffix());
        }
        if !meta::valid_name(&name) {
            return Err(ApiError::invalid(
                &rt.kind,
                &rt.group,
                &name,
                &[crate::schema::FieldError::invalid(
                    "metadata.name",
                    &Value::from(name.clone()),
                    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character".into(),
                )],
            ));
        }
        if rt.namespaced && self.namespace_terminating(namespace) {
            return Err(ApiError::namespace_terminating(
                &rt.plural, &rt.group, &name, namespace,
            ));
        }
        if self.crd_terminating(rt) {
            return Err(ApiError::crd_terminating(&rt.plural, &rt.group, &name));
        }
        if self.stored(rt, namespace, &name).is_some() {
            return Err(ApiError::already_exists(&rt.plural, &rt.group, &name));
        }
        let uid = format!("6b61_6f73-0000-4000-8000-{:012x}", self.next_uid).replace('_', "");
        self.next_uid += 1;
        {
            let metadata = meta::metadata_mut(&mut object);
            metadata.insert("name".into(), Value::from(name.clone()));
            if rt.namespaced {
                metadata.insert("namespace".into(), Value::from(namespace));
            } else {
                metadata.remove("namespace");
            }
            metadata.insert("uid".into(), Value::from(uid));
            metadata.insert("creationTimestamp".into(), Value::from(meta::now()));
            metadata.remove("deletionTimestamp");
            metadata.remove("resourceVersion");
            if rt.tracks_generation {
                metadata.insert("generation".into(), Value::from(1));
            } else {
                metadata.remove("generation");
            }
        }
        if rt.has_status
            && let Some(map) = object.as_object_mut()
        {
            map.remove("status");
        }
        if let Some(map) = object.as_object_mut() {
            map.insert("apiVersion".into(), Value::from(rt.api_version()));
            map.insert("kind".into(), Value::from(rt.kind.clone()));
        }
        self.apply_builtin_defaults(rt, &mut object);
        self.admit(rt, &mut object, None, options)?;
        if options.dry_run {
            return Ok(object);
        }
        let created = self.commit(rt, object, EventType::Added, None, events);
        if is_crd_type(rt) {
            self.establish_crd(rt, &created, events);
        }
        Ok(self
            .stored(rt, namespace, &name)
            .map(|s| s.object.clone())
            .unwrap_or(created))
    }

    fn random_suffix(&mut self) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        let mut n =
            self.next_uid.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (self.resource_version << 7);
        self.next_uid += 1;
        (0..5)
            .map(|_| {
                let c = ALPHABET[(n % ALPHABET.len() as u64) as usize] as char;
                n /= ALPHABET.len() as u64;
                c
            })
            .collect()
    }

    /// The few defaults kube-apiserver sets on built-in kinds that clients observe.
    fn apply_builtin_defaults(&mut self, rt: &ResourceType, object: &mut Value) {
        match (rt.group.as_str(), rt.plural.as_str()) {
            ("apps", "deployments") => {
                if object.pointer("/spec/replicas").is_none()
                    && let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut)
                {
                    spec.insert("replicas".into(), Value::from(1));
                }
            }
            ("", "services") => {
                if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
                    spec.entry("type")
                        .or_insert_with(|| Value::from("ClusterIP"));
                    let headless = spec.get("clusterIP").and_then(Value::as_str) == Some("None");
                    if !headless && spec.get("clusterIP").is_none() {
                        let n = self.next_cluster_ip;
                        self.next_cluster_ip += 1;
                        let ip = format!("10.96.{}.{}", (n >> 8) & 0xff, n & 0xff);
                        spec.insert("clusterIP".into(), Value::from(ip.clone()));
                        spec.insert("clusterIPs".into(), json!([ip]));
                    }
                }
            }
            ("", "namespaces") => {
                object["status"] = json!({"phase": "Active"});
                object["spec"] = json!({"finalizers": ["kubernetes"]});
            }
            _ => {}
        }
        label_namespace_name(rt, object);
    }

    fn admit(
        &self,
        rt: &ResourceType,
        object: &mut Value,
        old: Option<&Value>,
        options: &WriteOptions,
    ) -> ApiResult<()> {
        let Some(schema) = &rt.schema else {
            return Ok(());
        };
        // A CRD with a scale subresource also has its replicas checked (kube-apiserver's
        // ValidateScaleSpec/Status), at the path as the CRD spells it.
        let scale_errors = |object: &Value| -> Vec<FieldError> {
            rt.scale
                .iter()
                .flat_map(|paths| [&paths.spec_replicas, &paths.status_replicas])
                .filter_map(|pointer| {
                    let value = object.pointer(pointer)?;
                    let detail = match value.as_i64() {
                        Some(n) if n < 0 => "should be a non-negative integer".to_string(),
                        Some(n) if n > i64::from(i32::MAX) => {
                            format!("should be less than or equal to {}", i32::MAX)
                        }
                        _ => return None,
                    };
                    Some(FieldError::invalid(
                        &pointer.replace('/', "."),
                        value,
                        detail,
                    ))
                })
                .collect()
        };
        let admitted = schema.admit_with(object, old, options.unknown_fields, scale_errors);
        admitted.map_err(|errors| {
            let unknown: Vec<String> = errors
                .iter()
                .filter(|e| e.kind == FieldErrorKind::Unknown)
                .map(ToString::to_string)
                .collect();
            if unknown.is_empty() {
                ApiError::invalid(&rt.kind, &rt.group, meta::name(object), &errors)
            } else {
                // As kube-apiserver's strict decoder words it.
                ApiError::bad_request(format!(
                    "{kind} in version \"{version}\" cannot be handled as a {kind}: strict decoding error: {}",
                    unknown.join(", "),
                    kind = rt.kind,
                    version = rt.version
                ))
            }
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn finish_update(
        &mut self,
        rt: &ResourceType,
        existing: &Value,
        candidate: Value,
        sub: Subresource,
        options: &WriteOptions,
        apply_record: Option<(String, Value)>,
        events: &broadcast::Sender<Arc<WatchEvent>>,
    ) -> ApiResult<Value> {
        let mut updated = match sub {
            Subresource::Status => {
                let mut updated = existing.clone();
                match candidate.get("status") {
                    Some(status) => updated["status"] = status.clone(),
                    None => {
                        if let Some(map) = updated.as_object_mut() {
                            map.remove("status");
                        }
                    }
                }
                updated
            }
            Subresource::Main => {
                let mut updated = candidate;
                if !updated.is_object() {
                    return Err(ApiError::bad_request(
                        "the body of the request must be a JSON object",
                    ));
                }
                if rt.has_status {
                    match existing.get("status") {
                        Some(status) => updated["status"] = status.clone(),
                        None => {
                            if let Some(map) = updated.as_object_mut() {
                                map.remove("status");
                            }
                        }
                    }
                }
                let old_finalizers = meta::finalizers(existing);
                let added: Vec<String> = meta::finalizers(&updated)
                    .into_iter()
                    .filter(|f| !old_finalizers.contains(f))
                    .collect();
                if meta::is_deleting(existing) && !added.is_empty() {
                    // Worded as kube-apiserver's (Go's %#v of the added names).
                    let quoted: Vec<String> = added.iter().map(|f| format!("{f:?}")).collect();
                    let errors = [crate::schema::FieldError::forbidden(
                        "metadata.finalizers",
                        format!(
                            "no new finalizers can be added if the object is being deleted, \
                             found new finalizers []string{{{}}}",
                            quoted.join(", ")
                        ),
                    )];
                    return Err(ApiError::invalid(
                        &rt.kind,
                        &rt.group,
                        meta::name(existing),
                        &errors,
                    ));
                }
                let metadata = meta::metadata_mut(&mut updated);
                for key in [
                    "uid",
                    "creationTimestamp",
                    "deletionTimestamp",
                    "deletionGracePeriodSeconds",
                    "name",
                    "namespace",
                    "generation",
                ] {
                    match existing.pointer(&format!("/metadata/{key}")) {
                        Some(value) => metadata.insert(key.into(), value.clone()),
                        None => metadata.remove(key),
                    };
                }
                label_namespace_name(rt, &mut updated);
                updated
            }
        };
        if let Some(map) = updated.as_object_mut() {
            map.insert("apiVersion".into(), Value::from(rt.api_version()));
            map.insert("kind".into(), Value::from(rt.kind.clone()));
        }
        self.admit(rt, &mut updated, Some(existing), options)?;
        if rt.tracks_generation
            && meta::content(&updated, rt.has_status) != meta::content(existing, rt.has_status)
        {
            let generation = existing
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            meta::metadata_mut(&mut updated)
                .insert("generation".into(), Value::from(generation + 1));
        }
        let namespace = meta::namespace(existing).to_string();
        let name = meta::name(existing).to_string();
        if let Some((manager, config)) = apply_record.filter(|_| !options.dry_run) {
            self.record_apply(rt, &namespace, &name, &manager, config);
            updated["metadata"]["managedFields"] = self.managed_fields(rt, &namespace, &name);
        }
        if options.dry_run || meta::same_except_server_fields(&updated, existing) {
            // A write that changes nothing keeps the resourceVersion and sends no event.
            return Ok(existing.clone());
        }
        if meta::is_deleting(&updated) && meta::finalizers(&updated).is_empty() {
            // As kube-apiserver: the DELETED event carries the last stored state; the answer is
            // the object as written, at that state's resourceVersion.
            self.commit(
                rt,
                existing.clone(),
                EventType::Deleted,
                Some(existing.clone()),
                events,
            );
            self.collect_garbage(events);
            meta::metadata_mut(&mut updated).insert(
                "resourceVersion".into(),
                Value::from(meta::resource_version(existing)),
            );
            return Ok(updated);
        }
        let committed = self.commit(
            rt,
            updated,
            EventType::Modified,
            Some(existing.clone()),
            events,
        );
        if is_crd_type(rt) && sub == Subresource::Main {
            self.establish_crd(rt, &committed, events);
        }
        // Only deletions and owner changes can leave garbage; a full pass per write would make
        // every write cost as much as the whole store.
        if meta::is_deleting(&committed)
            || meta::owner_uids(&committed) != meta::owner_uids(existing)
        {
            self.collect_garbage(events);
        }
        Ok(self
            .stored(rt, &namespace, &name)
            .map(|s| s.object.clone())
            .unwrap_or(committed))
    }

    fn record_apply(
        &mut self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        manager: &str,
        config: Value,
    ) {
        let ns = if rt.namespaced { namespace } else { "" };
        if let Some(stored) = self
            .objects
            .get_mut(&rt.storage_key())
            .and_then(|o| o.get_mut(&(ns.to_string(), name.to_string())))
        {
            for (other, other_config) in stored.applied.iter_mut() {
                if other != manager {
                    apply::release_fields(&config, other_config, "");
                }
            }
            stored.applied.insert(manager.to_string(), config);
        }
    }

    fn managed_fields(&self, rt: &ResourceType, namespace: &str, name: &str) -> Value {
        let Some(stored) = self.stored(rt, namespace, name) else {
            return json!([]);
        };
        stored
            .applied
            .iter()
            .map(|(manager, config)| managed_entry(rt, manager, config))
            .collect()
    }

    /// Deletes or marks for deletion; returns the object's last state.
    fn delete(
        &mut self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        propagation: Propagation,
        events: &broadcast::Sender<Arc<WatchEvent>>,
    ) -> Value {
        let Some(existing) = self.stored(rt, namespace, name).map(|s| s.object.clone()) else {
            return Value::Null;
        };
        let is_namespace = rt.group.is_empty() && rt.plural == "namespaces";
        let mut finalizers = meta::finalizers(&existing);
        match propagation {
            Propagation::Foreground if !finalizers.iter().any(|f| f == "foregroundDeletion") => {
                finalizers.push("foregroundDeletion".into())
            }
            // As kube's collector: the owner waits under the `orphan` finalizer until its
            // dependents are released (collect_garbage does that at once).
            Propagation::Orphan if !finalizers.iter().any(|f| f == ORPHAN) => {
                finalizers.push(ORPHAN.into())
            }
            _ => {}
        }
        // kube-apiserver's CRD storage adds it on deletion (not at creation).
        if is_crd_type(rt) && !finalizers.iter().any(|f| f == CRD_CLEANUP) {
            finalizers.push(CRD_CLEANUP.into());
        }
        if finalizers.is_empty() && !is_namespace {
            return self.commit(
                rt,
                existing.clone(),
                EventType::Deleted,
                Some(existing),
                events,
            );
        }
        if meta::is_deleting(&existing) && finalizers == meta::finalizers(&existing) {
            return existing;
        }
        let mut marked = existing.clone();
        let metadata = meta::metadata_mut(&mut marked);
        metadata
            .entry("deletionTimestamp")
            .or_insert_with(|| Value::from(meta::now()));
        metadata.insert("deletionGracePeriodSeconds".into(), Value::from(0));
        metadata.insert("finalizers".into(), json!(finalizers));
        if is_namespace {
            marked["status"] = json!({"phase": "Terminating"});
            self.delete_namespace_contents(name, events);
        }
        if is_crd_type(rt)
            && let Some(conditions) = marked
                .pointer_mut("/status/conditions")
                .and_then(Value::as_array_mut)
            && !conditions.iter().any(|c| c["type"] == "Terminating")
        {
            conditions.push(json!({"type": "Terminating", "status": "True",
                "reason": "InstanceDeletionInProgress",
                "message": "CustomResource deletion is in progress",
                "lastTransitionTime": meta::now()}));
        }
        self.commit(rt, marked, EventType::Modified, Some(existing), events)
    }

    fn delete_namespace_contents(
        &mut self,
        namespace: &str,
        events: &broadcast::Sender<Arc<WatchEvent>>,
    ) {
        let keys: Vec<String> = self.objects.keys().cloned().collect();
        for key in keys {
            let Some(rt) = self.type_for_key(&key).filter(|t| t.namespaced) else {
                continue;
            };
            let names: Vec<String> = self.objects[&key]
                .keys()
                .filter(|(ns, _)| ns == namespace)
                .map(|(_, n)| n.clone())
                .collect();
            for name in names {
                self.delete(&rt, namespace, &name, Propagation::Background, events);
            }
        }
    }

    fn orphan_dependents(&mut self, owner_uid: &str, events: &broadcast::Sender<Arc<WatchEvent>>) {
        for (rt, object) in self.all_objects() {
            if !meta::owner_uids(&object).iter().any(|u| u == owner_uid) {
                continue;
            }
            let mut updated = object.clone();
            if let Some(refs) = updated
                .pointer_mut("/metadata/ownerReferences")
                .and_then(Value::as_array_mut)
            {
                refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(owner_uid));
            }
            self.commit(&rt, updated, EventType::Modified, Some(object), events);
        }
    }

    fn all_objects(&self) -> Vec<(Arc<ResourceType>, Value)> {
        let mut all = Vec::new();
        for (key, objects) in &self.objects {
            if let Some(rt) = self.type_for_key(key) {
                all.extend(objects.values().map(|s| (rt.clone(), s.object.clone())));
            }
        }
        all
    }

    /// The garbage collector, run synchronously after every deletion: deletes objects whose
    /// owners are all gone, finishes foreground deletions whose dependents are gone, and removes
    /// terminating namespaces that are empty. Each pass is linear in the stored objects (it runs
    /// under the store's lock), so it runs only when `GcIndex` says something can be garbage.
    fn collect_garbage(&mut self, events: &broadcast::Sender<Arc<WatchEvent>>) {
        while self.gc.take_pass() {
            let work = self.garbage();
            if work.is_empty() {
                break;
            }
            for step in work {
                match step {
                    Collect::Delete(rt, namespace, name) => {
                        self.delete(&rt, &namespace, &name, Propagation::Background, events);
                    }
                    Collect::Commit(rt, updated, event, previous) => {
                        self.commit(&rt, updated, event, Some(previous), events);
                    }
                    Collect::Orphan(rt, object) => {
                        self.orphan_dependents(meta::uid(&object), events);
                        let (next, event) = without_finalizer(&object, ORPHAN);
                        self.commit(&rt, next, event, Some(object), events);
                    }
                }
            }
        }
    }

    /// One pass of the garbage collector over a snapshot of the store: what to delete or commit.
    fn garbage(&self) -> Vec<Collect> {
        const FOREGROUND: &str = "foregroundDeletion";
        let all: Vec<(Arc<ResourceType>, &Value)> = self
            .objects
            .iter()
            .filter_map(|(key, objects)| Some((self.type_for_key(key)?, objects)))
            .flat_map(|(rt, objects)| objects.values().map(move |s| (rt.clone(), &s.object)))
            .collect();
        let live: HashSet<&str> = all.iter().map(|(_, o)| meta::uid(o)).collect();
        let in_foreground: HashSet<&str> = all
            .iter()
            .filter(|(_, o)| {
                meta::is_deleting(o) && meta::finalizers(o).iter().any(|f| f == FOREGROUND)
            })
            .map(|(_, o)| meta::uid(o))
            .collect();
        // Only dependents that block their owner's deletion hold a foreground deletion.
        let blocking: HashSet<String> = all
            .iter()
            .flat_map(|(_, o)| meta::blocking_owner_uids(o))
            .collect();
        let populated: HashSet<&str> = all
            .iter()
            .filter(|(t, _)| t.namespaced)
            .map(|(_, o)| meta::namespace(o))
            .collect();
        let mut work = Vec::new();
        for (rt, object) in &all {
            let uids = meta::owner_uids(object);
            let orphaned = !uids.is_empty() && uids.iter().all(|u| !live.contains(u.as_str()));
            let owner_in_foreground = uids.iter().any(|u| in_foreground.contains(u.as_str()));
            if (orphaned || owner_in_foreground) && !meta::is_deleting(object) {
                let (namespace, name) = (meta::namespace(object), meta::name(object));
                work.push(Collect::Delete(rt.clone(), namespace.into(), name.into()));
            }
        }
        for (rt, object) in &all {
            if !meta::is_deleting(object) {
                continue;
            }
            let is_namespace = rt.group.is_empty() && rt.plural == "namespaces";
            let finalizers = meta::finalizers(object);
            if is_namespace {
                if !populated.contains(meta::name(object)) {
                    let object = (*object).clone();
                    work.push(Collect::Commit(
                        rt.clone(),
                        object.clone(),
                        EventType::Deleted,
                        object,
                    ));
                }
            } else if is_crd_type(rt) && finalizers.iter().any(|f| f == CRD_CLEANUP) {
                // As apiextensions' finalizer: delete every object of the CRD's kinds, and
                // release the CRD once none is left (finalizers of those objects hold it).
                let crd = meta::name(object);
                let instances: Vec<(Arc<ResourceType>, &Value)> = all
                    .iter()
                    .filter(|(t, _)| t.crd.as_deref() == Some(crd))
                    .map(|(t, o)| (t.clone(), *o))
                    .collect();
                if instances.is_empty() {
                    let (next, event) = without_finalizer(object, CRD_CLEANUP);
                    work.push(Collect::Commit(rt.clone(), next, event, (*object).clone()));
                }
                for (t, instance) in instances {
                    if !meta::is_deleting(instance) {
                        let (namespace, name) = (meta::namespace(instance), meta::name(instance));
                        work.push(Collect::Delete(t, namespace.into(), name.into()));
                    }
                }
            } else if finalizers.iter().any(|f| f == ORPHAN) {
                work.push(Collect::Orphan(rt.clone(), (*object).clone()));
            } else if finalizers.iter().any(|f| f == FOREGROUND)
                && !blocking.contains(meta::uid(object))
            {
                let (next, event) = without_finalizer(object, FOREGROUND);
                work.push(Collect::Commit(rt.clone(), next, event, (*object).clone()));
            }
        }
        work
    }

    /// Serves (or stops serving) the kinds a CRD defines, and reports it in the CRD's status.
    fn establish_crd(
        &mut self,
        crd_type: &ResourceType,
        crd: &Value,
        events: &broadcast::Sender<Arc<WatchEvent>>,
    ) {
        let name = meta::name(crd).to_string();
        // Objects of versions no longer served stay stored (as in etcd) but are unreachable.
        self.types
            .retain(|t| t.crd.as_deref() != Some(name.as_str()));
        let (conditions, accepted) = match resources::from_crd(crd) {
            Ok(types) => {
                let accepted = crd.pointer("/spec/names").cloned().unwrap_or(Value::Null);
                self.types.extend(types.into_iter().map(Arc::new));
                let now = meta::now();
                (
                    json!([
                        {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": now},
                        {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": now}
                    ]),
                    accepted,
                )
            }
            Err(message) => (
                json!([{"type": "Established", "status": "False", "reason": "Invalid", "message": message, "lastTransitionTime": meta::now()}]),
                Value::Null,
            ),
        };
        let mut updated = crd.clone();
        updated["status"] = json!({
            "conditions": conditions,
            "acceptedNames": accepted,
            "storedVersions": crd.pointer("/spec/versions").and_then(Value::as_array).map(|v| {
                v.iter().filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
                    .filter_map(|v| v.get("name").cloned()).collect::<Vec<_>>()
            }),
        });
        if updated != *crd {
            self.commit(
                crd_type,
                updated,
                EventType::Modified,
                Some(crd.clone()),
                events,
            );
        }
    }

    /// Removes a CRD's kinds and all their objects (called when the CRD itself is deleted).
    fn forget_crd(&mut self, crd_name: &str, events: &broadcast::Sender<Arc<WatchEvent>>) {
        let removed: Vec<Arc<ResourceType>> = self
            .types
            .iter()
            .filter(|t| t.crd.as_deref() == Some(crd_name))
            .cloned()
            .collect();
        for rt in removed.iter() {
            let key = rt.storage_key();
            let objects: Vec<Value> = self
                .objects
                .get(&key)
                .map(|o| o.values().map(|s| s.object.clone()).collect())
                .unwrap_or_default();
            for object in objects {
                self.commit(rt, object.clone(), EventType::Deleted, Some(object), events);
            }
        }
        self.types.retain(|t| t.crd.as_deref() != Some(crd_name));
    }
}
