//! Change-only triggers: which watch events mean "reconcile again".
//!
//! A parent is reconciled when its spec changes or it is being deleted (its own status and
//! finalizer writes do not count: [`spec_or_deletion`]), when its status changes by another
//! writer's hand (the status is the controller's: it is put back), and when something it reads
//! from another object changes. [`ChangeTracker`] keeps, per object, a hash of just what dependents
//! read (a ModelAPI's readiness and endpoint, a peer's endpoint, …) and reports an object only
//! when that projection changed, appeared or disappeared.

pub mod child_changes;
pub mod claims;
pub mod debounce;
pub mod index;

use std::collections::{HashMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};

use kube::Resource;
use kube::runtime::watcher::Event;

use std::sync::{Arc, Mutex};

use futures::{Stream, StreamExt, stream};
use kube::runtime::reflector::ObjectRef;

use crate::cache::Events;
use crate::converge::expectations::Expectations;
use crate::reconcile::{Primary, status_key};
use crate::trigger::index::{Name, Relation, RelationIndex, name_of};

/// The primary's predicate: its generation (spec changes), whether it is being deleted, and its
/// labels and annotations (which users set to ask for a change). Status and finalizer writes
/// leave it unchanged.
pub fn spec_or_deletion<K: Resource>(object: &K) -> Option<u64> {
    let meta = object.meta();
    Some(hash_of(&(
        meta.generation,
        meta.deletion_timestamp.is_some(),
        &meta.labels,
        &meta.annotations,
    )))
}

/// Passes the primaries to reconcile: an object whose [`spec_or_deletion`] changed since it was
/// last passed, or that is new, or whose status changed in a write that is not this process's
/// own (`status_writes` knows the versions its status writes returned). Like kube-runtime's
/// `predicate_filter`, which keys its memory by a copy of each object's name, namespace and uid
/// and keeps it for an hour after the object is gone; here the key is a digest of those,
/// forgotten with the object.
pub struct PrimaryChanges {
    /// Per object: its [`spec_or_deletion`] and its status digest when last seen.
    seen: HashMap<u64, (u64, Option<u64>)>,
    relist: Relist<u64>,
    status_writes: Arc<Expectations>,
}

impl PrimaryChanges {
    pub fn new(status_writes: Arc<Expectations>) -> Self {
        Self {
            seen: HashMap::new(),
            relist: Relist::default(),
            status_writes,
        }
    }

    /// The object of `event` if it is to be reconciled.
    pub fn pass<K: Primary>(&mut self, event: Event<K>) -> Option<K> {
        match event {
            Event::Init => {
                self.relist.start();
                None
            }
            Event::InitApply(object) => {
                let key = object_key(&object);
                self.relist.shows(&key);
                self.changed(key, object)
            }
            Event::Apply(object) => self.changed(object_key(&object), object),
            Event::InitDone => {
                self.relist.end(&mut self.seen);
                None
            }
            // Its deletion was passed when it got its deletionTimestamp.
            Event::Delete(object) => {
                self.seen.remove(&object_key(&object));
                None
            }
        }
    }

    fn changed<K: Primary>(&mut self, key: u64, object: K) -> Option<K> {
        let spec = spec_or_deletion(&object)?;
        let status = object.status_digest();
        let Some((seen_spec, seen_status)) = self.seen.insert(key, (spec, status)) else {
            return Some(object);
        };
        let foreign_status = seen_status != status
            && !self.status_writes.is_own_write(
                &status_key(&object),
                object.meta().resource_version.as_deref(),
            );
        (seen_spec != spec || foreign_status).then_some(object)
    }
}

/// A digest of an object's namespace, name and uid (a recreated object is another one).
fn object_key<K: Resource>(object: &K) -> u64 {
    let meta = object.meta();
    hash_of(&(&meta.namespace, &meta.name, &meta.uid))
}

fn hash_of<T: Hash>(value: &T) -> u64 {
    let mut hasher = DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

/// What one relist shows: at its end, the objects known before and not shown were deleted
/// while the watch was down (no delete event came for them).
pub struct Relist<T>(Option<HashSet<T>>);

impl<T> Default for Relist<T> {
    fn default() -> Self {
        Self(None)
    }
}

impl<T: Hash + Eq + Clone> Relist<T> {
    /// A relist begins (`Init`).
    pub fn start(&mut self) {
        self.0 = Some(HashSet::new());
    }

    /// The relist shows `key` (`InitApply`).
    pub fn shows(&mut self, key: &T) {
        if let Some(shown) = &mut self.0 {
            shown.insert(key.clone());
        }
    }

    /// The relist ends (`InitDone`): removes from `known` what it did not show and returns it
    /// (nothing outside a relist).
    pub fn end<V>(&mut self, known: &mut HashMap<T, V>) -> Vec<(T, V)> {
        let Some(shown) = self.0.take() else {
            return Vec::new();
        };
        let gone: Vec<T> = known
            .keys()
            .filter(|key| !shown.contains(*key))
            .cloned()
            .collect();
        gone.into_iter()
            .filter_map(|key| known.remove(&key).map(|value| (key, value)))
            .collect()
    }
}

/// Remembers a projection's hash per object and reports the objects whose projection changed.
pub struct ChangeTracker<K, P> {
    project: fn(&K) -> P,
    seen: HashMap<Name, u64>,
    relist: Relist<Name>,
}

impl<K: Resource, P: Hash> ChangeTracker<K, P> {
    pub fn new(project: fn(&K) -> P) -> Self {
        Self {
            project,
            seen: HashMap::new(),
            relist: Relist::default(),
        }
    }

    /// The objects whose projection this event changed (appeared, changed or disappeared).
    /// A relist that no longer contains an object reports it as gone.
    pub fn observe(&mut self, event: &Event<K>) -> Vec<Name> {
        match event {
            Event::Init => {
                self.relist.start();
                Vec::new()
            }
            Event::InitApply(object) => {
                let name = name_of(object);
                self.relist.shows(&name);
                self.update(name, object)
            }
            Event::InitDone => {
                let gone = self.relist.end(&mut self.seen);
                gone.into_iter().map(|(name, _)| name).collect()
            }
            Event::Apply(object) => self.update(name_of(object), object),
            Event::Delete(object) => {
                let name = name_of(object);
                match self.seen.remove(&name) {
                    Some(_) => vec![name],
                    None => Vec::new(),
                }
            }
        }
    }

    fn update(&mut self, name: Name, object: &K) -> Vec<Name> {
        let hash = hash_of(&(self.project)(object));
        match self.seen.insert(name.clone(), hash) {
            Some(previous) if previous == hash => Vec::new(),
            _ => vec![name],
        }
    }
}

/// A relation and what its dependents read of a `D`.
pub type View<D, P> = (Relation, fn(&D) -> P);

/// The objects of kind `K` to reconcile when what they read of a `D` changed: for each
/// relation, the dependents (in `index`) by that relation of the objects whose view for it
/// changed. Work per event is proportional to those dependents.
pub fn dependents_of<K, D, P, const N: usize>(
    events: Events<D>,
    views: [View<D, P>; N],
    index: Arc<Mutex<RelationIndex>>,
) -> impl Stream<Item = ObjectRef<K>> + Send + 'static
where
    K: Resource<DynamicType = ()> + 'static,
    D: Resource + Send + 'static,
    P: Hash + 'static,
{
    let mut trackers = views.map(|(relation, view)| (relation, ChangeTracker::new(view)));
    events.flat_map(move |event| {
        let Ok(event) = event else {
            return stream::iter(Vec::new());
        };
        let index = index.lock().unwrap_or_else(|e| e.into_inner());
        let mut dependents: Vec<ObjectRef<K>> = Vec::new();
        for (relation, changes) in &mut trackers {
            for (namespace, name) in changes.observe(&event) {
                dependents.extend(
                    index
                        .dependents(relation, &namespace, &name)
                        .into_iter()
                        .map(|dependent| ObjectRef::new(&dependent).within(&namespace)),
                );
            }
        }
        stream::iter(dependents)
    })
}

/// The items sent on `rx`, as a trigger stream (for `reconcile_on`).
pub fn receive<T: Send + 'static>(
    rx: tokio::sync::mpsc::UnboundedReceiver<T>,
) -> impl Stream<Item = T> + Send + 'static {
    stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|r| (r, rx)) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kaos_api::common::Phase;
    use kaos_api::modelapi::{ModelAPI, ModelAPIStatus};

    fn cm(name: &str, endpoint: &str, other: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            data: Some(
                [
                    ("endpoint".to_string(), endpoint.to_string()),
                    ("other".to_string(), other.to_string()),
                ]
                .into(),
            ),
            ..Default::default()
        }
    }

    fn endpoint(c: &ConfigMap) -> Option<String> {
        c.data.as_ref()?.get("endpoint").cloned()
    }

    fn n(name: &str) -> Name {
        ("default".into(), name.into())
    }

    #[test]
    fn only_a_change_of_the_projection_is_reported() {
        let mut t = ChangeTracker::new(endpoint);
        assert_eq!(t.observe(&Event::Apply(cm("a", "e1", "x"))), [n("a")]);
        assert!(t.observe(&Event::Apply(cm("a", "e1", "y"))).is_empty());
        assert_eq!(t.observe(&Event::Apply(cm("a", "e2", "y"))), [n("a")]);
        assert_eq!(t.observe(&Event::Delete(cm("a", "e2", "y"))), [n("a")]);
        assert!(t.observe(&Event::Delete(cm("a", "e2", "y"))).is_empty());
    }

    #[test]
    fn a_relist_reports_what_vanished_and_not_what_stayed() {
        let mut t = ChangeTracker::new(endpoint);
        t.observe(&Event::Apply(cm("a", "e", "")));
        t.observe(&Event::Apply(cm("b", "e", "")));
        assert!(t.observe(&Event::Init).is_empty());
        assert!(t.observe(&Event::InitApply(cm("a", "e", ""))).is_empty());
        assert_eq!(t.observe(&Event::InitDone), [n("b")]);
    }

    /// A ModelAPI (a kind with a status) at this generation, uid and resourceVersion.
    fn primary(generation: i64, uid: &str, version: &str) -> ModelAPI {
        let spec = serde_json::from_value(
            serde_json::json!({"mode": "Hosted", "hostedConfig": {"model": "m"}}),
        )
        .expect("a ModelAPI spec");
        let mut object = ModelAPI::new("a", spec);
        object.metadata = ObjectMeta {
            name: Some("a".into()),
            namespace: Some("ns".into()),
            uid: Some(uid.into()),
            generation: Some(generation),
            resource_version: Some(version.into()),
            ..Default::default()
        };
        object
    }

    fn with_phase(mut object: ModelAPI, phase: Phase) -> ModelAPI {
        object.status = Some(ModelAPIStatus {
            phase: Some(phase),
            ..Default::default()
        });
        object
    }

    #[test]
    fn primaries_pass_when_new_or_changed_and_are_forgotten_when_gone() {
        let mut changes = PrimaryChanges::new(Arc::default());
        let object = |generation, uid: &str| primary(generation, uid, "1");
        assert!(changes.pass(Event::Apply(object(1, "u1"))).is_some(), "new");
        assert!(
            changes.pass(Event::Apply(object(1, "u1"))).is_none(),
            "same spec"
        );
        assert!(
            changes.pass(Event::Apply(object(2, "u1"))).is_some(),
            "new spec"
        );
        assert!(
            changes.pass(Event::Apply(object(2, "u2"))).is_some(),
            "recreated"
        );
        assert!(changes.pass(Event::Delete(object(2, "u2"))).is_none());
        assert!(
            changes.pass(Event::Apply(object(2, "u2"))).is_some(),
            "forgotten"
        );
        // A relist passes nothing unchanged and forgets what it no longer lists.
        assert!(changes.pass(Event::<ModelAPI>::Init).is_none());
        assert!(changes.pass(Event::InitApply(object(2, "u2"))).is_none());
        assert!(changes.pass(Event::<ModelAPI>::InitDone).is_none());
        assert_eq!(changes.seen.len(), 1, "u1 was not relisted");
    }

    #[test]
    fn a_status_written_by_another_hand_passes_and_our_own_does_not() {
        let writes = Arc::<Expectations>::default();
        let mut changes = PrimaryChanges::new(writes.clone());
        let ready = with_phase(primary(1, "u", "1"), Phase::Ready);
        assert!(changes.pass(Event::Apply(ready.clone())).is_some(), "new");
        // Our own status write: the version it returned.
        let key = status_key(&ready);
        writes.wrote(key, "h".into(), Some("1"), Some("2".into()), None);
        let ours = with_phase(primary(1, "u", "2"), Phase::Pending);
        assert!(changes.pass(Event::Apply(ours)).is_none(), "our own write");
        // A user's: another version, another status.
        let theirs = with_phase(primary(1, "u", "3"), Phase::Failed);
        assert!(changes.pass(Event::Apply(theirs)).is_some(), "put back");
        // Another writer's change that leaves the status as it was is no news.
        let label = with_phase(primary(1, "u", "4"), Phase::Failed);
        assert!(changes.pass(Event::Apply(label)).is_none());
    }

    #[test]
    fn the_primary_predicate_ignores_status_and_finalizers() {
        let mut a = cm("a", "e", "");
        a.metadata.generation = Some(1);
        let before = spec_or_deletion(&a);
        a.metadata.finalizers = Some(vec!["f".into()]);
        a.metadata.resource_version = Some("9".into());
        assert_eq!(spec_or_deletion(&a), before);
        a.metadata.generation = Some(2);
        assert_ne!(spec_or_deletion(&a), before);
    }
}
