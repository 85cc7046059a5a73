//! Deletion: finalizers and propagation policies, namespaces taking their contents with them,
//! orphaning, and the garbage collector that finishes what finalizers held back.

use std::collections::HashSet;
use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::crds::is_crd_type;
use super::state::State;
use super::{EventType, Propagation, WatchEvent};
use crate::meta;
use crate::resources::ResourceType;

/// The finalizer an owner deleted with the `Orphan` policy waits under.
const ORPHAN: &str = "orphan";
/// The finalizer an owner deleted with the `Foreground` policy waits under until its blocking
/// dependents are gone.
const FOREGROUND: &str = "foregroundDeletion";
/// kube-apiserver's finalizer on a deleted CRD: it stays (Terminating) until the objects of its
/// kinds are gone, their own finalizers included.
const CRD_CLEANUP: &str = "customresourcecleanup.apiextensions.k8s.io";

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
    /// Deletes or marks for deletion; returns the object's last state.
    pub(super) fn delete(
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
        let finalizers = deletion_finalizers(rt, &existing, propagation);
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
        let mut marked = marked_for_deletion(&existing, finalizers);
        if is_namespace {
            marked["status"] = json!({"phase": "Terminating"});
            self.delete_namespace_contents(name, events);
        }
        if is_crd_type(rt) {
            add_terminating_condition(&mut marked);
        }
        self.commit(rt, marked, EventType::Modified, Some(existing), events)
    }

    /// Deletes (in the background) every object in a namespace being deleted.
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

    /// Drops `owner_uid` from the ownerReferences of every object that names it.
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

    /// Copies of every stored object of a served type, with its type.
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
    pub(super) fn collect_garbage(&mut self, events: &broadcast::Sender<Arc<WatchEvent>>) {
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
        let all: Vec<(Arc<ResourceType>, &Value)> = self
            .objects
            .iter()
            .filter_map(|(key, objects)| Some((self.type_for_key(key)?, objects)))
            .flat_map(|(rt, objects)| objects.values().map(move |s| (rt.clone(), &s.object)))
            .collect();
        let mut work = dependents_to_delete(&all);
        work.extend(deletions_to_finish(&all));
        work
    }
}

/// The finalizers an object is deleted under: its own, the one its propagation policy waits
/// under, and a CRD's cleanup.
fn deletion_finalizers(
    rt: &ResourceType,
    existing: &Value,
    propagation: Propagation,
) -> Vec<String> {
    let mut finalizers = meta::finalizers(existing);
    match propagation {
        Propagation::Foreground if !finalizers.iter().any(|f| f == FOREGROUND) => {
            finalizers.push(FOREGROUND.into())
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
    finalizers
}

/// `existing` marked as being deleted under `finalizers` (a deletionTimestamp already set stays).
fn marked_for_deletion(existing: &Value, finalizers: Vec<String>) -> Value {
    let mut marked = existing.clone();
    let metadata = meta::metadata_mut(&mut marked);
    metadata
        .entry("deletionTimestamp")
        .or_insert_with(|| Value::from(meta::now()));
    metadata.insert("deletionGracePeriodSeconds".into(), Value::from(0));
    metadata.insert("finalizers".into(), json!(finalizers));
    marked
}

/// Reports on a deleted CRD that its objects are being deleted (its `Terminating` condition).
fn add_terminating_condition(crd: &mut Value) {
    if let Some(conditions) = crd
        .pointer_mut("/status/conditions")
        .and_then(Value::as_array_mut)
        && !conditions.iter().any(|c| c["type"] == "Terminating")
    {
        conditions.push(json!({"type": "Terminating", "status": "True",
            "reason": "InstanceDeletionInProgress",
            "message": "CustomResource deletion is in progress",
            "lastTransitionTime": meta::now()}));
    }
}

/// Dependents to delete: those whose owners are all gone or one of them is being deleted in the
/// foreground.
fn dependents_to_delete(all: &[(Arc<ResourceType>, &Value)]) -> Vec<Collect> {
    let live: HashSet<&str> = all.iter().map(|(_, o)| meta::uid(o)).collect();
    let in_foreground: HashSet<&str> = all
        .iter()
        .filter(|(_, o)| {
            meta::is_deleting(o) && meta::finalizers(o).iter().any(|f| f == FOREGROUND)
        })
        .map(|(_, o)| meta::uid(o))
        .collect();
    let mut work = Vec::new();
    for (rt, object) in all {
        let uids = meta::owner_uids(object);
        let orphaned = !uids.is_empty() && uids.iter().all(|u| !live.contains(u.as_str()));
        let owner_in_foreground = uids.iter().any(|u| in_foreground.contains(u.as_str()));
        if (orphaned || owner_in_foreground) && !meta::is_deleting(object) {
            let (namespace, name) = (meta::namespace(object), meta::name(object));
            work.push(Collect::Delete(rt.clone(), namespace.into(), name.into()));
        }
    }
    work
}

/// Deletions the collector finishes: empty terminating namespaces, CRDs' cleanup, owners
/// orphaning their dependents, and foreground deletions no dependent blocks any more.
fn deletions_to_finish(all: &[(Arc<ResourceType>, &Value)]) -> Vec<Collect> {
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
    for (rt, object) in all {
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
            work.extend(crd_cleanup(rt, object, all));
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

/// As apiextensions' finalizer: delete every object of the CRD's kinds, and release the CRD
/// once none is left (finalizers of those objects hold it).
fn crd_cleanup(
    crd_type: &Arc<ResourceType>,
    crd: &Value,
    all: &[(Arc<ResourceType>, &Value)],
) -> Vec<Collect> {
    let name = meta::name(crd);
    let instances: Vec<(Arc<ResourceType>, &Value)> = all
        .iter()
        .filter(|(t, _)| t.crd.as_deref() == Some(name))
        .map(|(t, o)| (t.clone(), *o))
        .collect();
    let mut work = Vec::new();
    if instances.is_empty() {
        let (next, event) = without_finalizer(crd, CRD_CLEANUP);
        work.push(Collect::Commit(crd_type.clone(), next, event, crd.clone()));
    }
    for (t, instance) in instances {
        if !meta::is_deleting(instance) {
            let (namespace, name) = (meta::namespace(instance), meta::name(instance));
            work.push(Collect::Delete(t, namespace.into(), name.into()));
        }
    }
    work
}

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
