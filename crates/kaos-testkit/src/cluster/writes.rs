//! How a write becomes a stored object: creation (names, uids, defaults), updates of the main
//! resource and of the status, server-side apply's records, admission by the schema, and
//! `commit`, the one place the store and the watch history change.

use std::sync::Arc;

use kaos_schema::{FieldError, FieldErrorKind};
use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::crds::is_crd_type;
use super::state::{State, Stored, with_type};
use super::{EventType, Subresource, WatchEvent, WriteOptions};
use crate::apply;
use crate::error::{ApiError, ApiResult};
use crate::meta;
use crate::resources::ResourceType;

impl State {
    /// Stores `object` (or removes it, for `Deleted`) at the next resourceVersion, records the
    /// change in the watch history and sends it to the watches; returns the object as stored.
    pub(super) fn commit(
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
        self.store(&key, (namespace.clone(), name), &object, event_type);
        self.changed.insert(key.clone(), rv);
        let event = Arc::new(WatchEvent {
            resource_version: rv,
            storage_key: key,
            namespace,
            event_type,
            object: with_type(rt, object.clone()),
            previous,
        });
        self.publish(event, events);
        if event_type == EventType::Deleted && is_crd_type(rt) {
            let crd_name = meta::name(&object).to_string();
            self.forget_crd(&crd_name, events);
        }
        object
    }

    /// Puts `object` in the store at `key`/`id`, or takes what is there out for `Deleted`,
    /// keeping the garbage collector's index and the object's applied configurations.
    fn store(&mut self, key: &str, id: (String, String), object: &Value, event_type: EventType) {
        let objects = self.objects.entry(key.to_string()).or_default();
        let replaced = objects.remove(&id);
        if event_type == EventType::Deleted {
            if let Some(old) = &replaced {
                self.gc.deleted(&old.object);
            }
        } else {
            self.gc.stored(replaced.as_ref().map(|s| &s.object), object);
            let applied = replaced.map(|s| s.applied).unwrap_or_default();
            objects.insert(
                id,
                Stored {
                    object: object.clone(),
                    applied,
                },
            );
        }
    }

    /// Appends `event` to the watch history, forgetting the oldest beyond its limit, and sends
    /// it to the live watches.
    fn publish(&mut self, event: Arc<WatchEvent>, events: &broadcast::Sender<Arc<WatchEvent>>) {
        self.history.push_back(event.clone());
        while self.history.len() > self.history_limit {
            if let Some(old) = self.history.pop_front() {
                self.compacted = old.resource_version;
            }
        }
        // No receivers is fine: nobody watches yet.
        let _ = events.send(event);
    }

    /// Creates an object: checks the request, names and stamps it, sets defaults, admits it and
    /// commits it (unless a dry run); returns it as stored.
    pub(super) fn create(
        &mut self,
        rt: &ResourceType,
        namespace: &str,
        mut object: Value,
        options: &WriteOptions,
        events: &broadcast::Sender<Arc<WatchEvent>>,
    ) -> ApiResult<Value> {
        let namespace = if rt.namespaced { namespace } else { "" };
        self.check_create_body(rt, namespace, &object)?;
        let name = self.creation_name(rt, &object)?;
        self.check_create_allowed(rt, namespace, &name)?;
        self.stamp_new_object(rt, namespace, &name, &mut object);
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

    /// Rejects a body that does not fit the create request: not an object, another kind,
    /// another namespace, or a namespace that does not exist.
    fn check_create_body(
        &self,
        rt: &ResourceType,
        namespace: &str,
        object: &Value,
    ) -> ApiResult<()> {
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
        let body_ns = meta::namespace(object).to_string();
        if rt.namespaced && !body_ns.is_empty() && body_ns != namespace {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        if rt.namespaced && !self.namespace_exists(namespace) {
            return Err(ApiError::not_found("namespaces", "", namespace));
        }
        Ok(())
    }

    /// The new object's name: its own, or one made from its `generateName`; checked to be valid.
    fn creation_name(&mut self, rt: &ResourceType, object: &Value) -> ApiResult<String> {
        let mut name = meta::name(object).to_string();
        if name.is_empty() {
            let prefix = object
                .pointer("/metadata/generateName")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            if prefix.is_empty() {
                let errors = [kaos_schema::FieldError::required("metadata.name")];
                return Err(ApiError::invalid(&rt.kind, &rt.group, "", &errors));
            }
            name = format!("{prefix}{}", self.random_suffix());
        }
        if !meta::valid_name(&name) {
            return Err(ApiError::invalid(
                &rt.kind,
                &rt.group,
                &name,
                &[kaos_schema::FieldError::invalid(
                    "metadata.name",
                    &Value::from(name.clone()),
                    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character".into(),
                )],
            ));
        }
        Ok(name)
    }

    /// Refuses a create into a terminating namespace, of a terminating CRD's kind, or over an
    /// existing object.
    fn check_create_allowed(
        &self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
    ) -> ApiResult<()> {
        if rt.namespaced && self.namespace_terminating(namespace) {
            return Err(ApiError::namespace_terminating(
                &rt.plural, &rt.group, name, namespace,
            ));
        }
        if self.crd_terminating(rt) {
            return Err(ApiError::crd_terminating(&rt.plural, &rt.group, name));
        }
        if self.stored(rt, namespace, name).is_some() {
            return Err(ApiError::already_exists(&rt.plural, &rt.group, name));
        }
        Ok(())
    }

    /// Sets what the server owns on a new object: name, namespace, a fresh uid, the creation
    /// time, generation 1; drops what a client cannot set (the status) and sets the type.
    fn stamp_new_object(
        &mut self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        object: &mut Value,
    ) {
        let uid = format!("6b61_6f73-0000-4000-8000-{:012x}", self.next_uid).replace('_', "");
        self.next_uid += 1;
        {
            let metadata = meta::metadata_mut(object);
            metadata.insert("name".into(), Value::from(name));
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
    }

    /// The random part of a name made from `generateName`, from kube's alphabet.
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

    /// Admits a custom resource by its CRD's schema (prunes, defaults, validates); built-ins
    /// have none. Errors are answered as kube-apiserver words them.
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

    /// Writes `candidate` (a PUT's body or a patched copy) over `existing`, or only its status
    /// for the status subresource; `apply_record` is the server-side apply to record.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn finish_update(
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
                set_status(&mut updated, candidate.get("status"));
                updated
            }
            Subresource::Main => main_update(rt, existing, candidate)?,
        };
        if let Some(map) = updated.as_object_mut() {
            map.insert("apiVersion".into(), Value::from(rt.api_version()));
            map.insert("kind".into(), Value::from(rt.kind.clone()));
        }
        self.admit(rt, &mut updated, Some(existing), options)?;
        bump_generation(rt, existing, &mut updated);
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
            return Ok(self.delete_released(rt, existing, updated, events));
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

    /// Deletes an object being deleted whose last finalizer an update removed; returns the
    /// answer to that update.
    fn delete_released(
        &mut self,
        rt: &ResourceType,
        existing: &Value,
        mut updated: Value,
        events: &broadcast::Sender<Arc<WatchEvent>>,
    ) -> Value {
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
        updated
    }

    /// Records `config` as `manager`'s last applied configuration; the other managers release
    /// the fields it sets to other values.
    pub(super) fn record_apply(
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

    /// The `managedFields` of a stored object: one entry per apply manager.
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
}

/// The main resource as a PUT or patch leaves it: the client's object, with the status and the
/// metadata the server owns kept as stored.
fn main_update(rt: &ResourceType, existing: &Value, candidate: Value) -> ApiResult<Value> {
    let mut updated = candidate;
    if !updated.is_object() {
        return Err(ApiError::bad_request(
            "the body of the request must be a JSON object",
        ));
    }
    if rt.has_status {
        set_status(&mut updated, existing.get("status"));
    }
    check_no_new_finalizers(rt, existing, &updated)?;
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
    Ok(updated)
}

/// Sets an object's status to `status`, or removes it.
fn set_status(object: &mut Value, status: Option<&Value>) {
    match status {
        Some(status) => object["status"] = status.clone(),
        None => {
            if let Some(map) = object.as_object_mut() {
                map.remove("status");
            }
        }
    }
}

/// Refuses finalizers added to an object being deleted.
fn check_no_new_finalizers(rt: &ResourceType, existing: &Value, updated: &Value) -> ApiResult<()> {
    let old_finalizers = meta::finalizers(existing);
    let added: Vec<String> = meta::finalizers(updated)
        .into_iter()
        .filter(|f| !old_finalizers.contains(f))
        .collect();
    if meta::is_deleting(existing) && !added.is_empty() {
        // Worded as kube-apiserver's (Go's %#v of the added names).
        let quoted: Vec<String> = added.iter().map(|f| format!("{f:?}")).collect();
        let errors = [kaos_schema::FieldError::forbidden(
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
    Ok(())
}

/// Raises the generation when the object's content (its status aside) changed.
fn bump_generation(rt: &ResourceType, existing: &Value, updated: &mut Value) {
    if rt.tracks_generation
        && meta::content(updated, rt.has_status) != meta::content(existing, rt.has_status)
    {
        let generation = existing
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        meta::metadata_mut(updated).insert("generation".into(), Value::from(generation + 1));
    }
}

/// The `managedFields` entry of a manager's applied configuration.
pub(super) fn managed_entry(rt: &ResourceType, manager: &str, config: &Value) -> Value {
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
