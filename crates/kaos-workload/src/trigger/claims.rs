//! Who holds each `security.id` of a kind. An explicit id is a shared logical identity
//! (`kaos://<kind>/<id>`), so two resources of a kind must not claim one: as in KAOS, the oldest
//! resource not being deleted holds it (creation time, then namespace, then name) and any other
//! claimant fails with [`SECURITY_ID_CONFLICT`] until the holder goes.
//!
//! Kept from the primary watch events (one index for every watched namespace: ids are
//! cluster-wide), so a check costs a lookup of the id's claimants, never a scan; each event
//! returns the claimants whose verdict may have changed, for the controller to reconcile.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use futures::stream::BoxStream;
use kaos_api::common::Security;
use kube::Resource;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::Event;
use tokio::sync::mpsc;

use crate::desired::Problem;
use crate::trigger::index::Name;
use crate::trigger::index::name_of;

/// The `Ready` reason of a resource whose `security.id` an older resource holds.
pub const SECURITY_ID_CONFLICT: &str = "SecurityIdConflict";

/// A kind whose resources may claim a `security.id`.
pub trait SecurityIdentity {
    /// The id it claims, if any.
    fn security_id(&self) -> Option<&str>;
}

/// The id a `security` block claims (an empty one claims none).
pub fn claimed(security: Option<&Security>) -> Option<&str> {
    security
        .and_then(|s| s.id.as_deref())
        .filter(|id| !id.is_empty())
}

macro_rules! security_of_spec {
    ($($kind:ty),*) => {$(
        impl SecurityIdentity for $kind {
            fn security_id(&self) -> Option<&str> {
                claimed(self.spec.workload.security.as_ref())
            }
        }
    )*};
}

security_of_spec!(
    kaos_api::agent::Agent,
    kaos_api::modelapi::ModelAPI,
    kaos_api::mcpserver::MCPServer,
    kaos_api::memorystore::MemoryStore
);

/// A claimant, ordered as KAOS picks the holder: oldest first, then namespace, then name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Claimant {
    created: Option<jiff::Timestamp>,
    name: Name,
}

#[derive(Debug, Default)]
pub struct SecurityIds {
    claimants: HashMap<String, BTreeSet<Claimant>>,
    /// Each claimant's id, to drop its claim when it changes or goes.
    claims: HashMap<Name, (String, Claimant)>,
}

impl SecurityIds {
    /// Records the event's object (a resource being deleted claims nothing) and returns the
    /// resources to look at again: every claimant of each id whose claimants changed.
    pub fn observe<K: Resource + SecurityIdentity>(&mut self, event: &Event<K>) -> Vec<Name> {
        if self.claims.is_empty() {
            // The common case, no resource with an id: nothing to record or release.
            let claims_one = match event {
                Event::Apply(object) | Event::InitApply(object) => object.security_id().is_some(),
                _ => false,
            };
            if !claims_one {
                return Vec::new();
            }
        }
        let mut touched: Vec<String> = Vec::new();
        match event {
            Event::Apply(object) | Event::InitApply(object) => {
                let name = name_of(object);
                let meta = object.meta();
                let wanted = object
                    .security_id()
                    .filter(|_| meta.deletion_timestamp.is_none())
                    .map(|id| {
                        let created = meta.creation_timestamp.as_ref().map(|t| t.0);
                        (
                            id.to_string(),
                            Claimant {
                                created,
                                name: name.clone(),
                            },
                        )
                    });
                if self.claims.get(&name) != wanted.as_ref() {
                    touched.extend(self.release(&name));
                    if let Some((id, claimant)) = wanted {
                        self.claimants
                            .entry(id.clone())
                            .or_default()
                            .insert(claimant.clone());
                        self.claims.insert(name, (id.clone(), claimant));
                        touched.push(id);
                    }
                }
            }
            Event::Delete(object) => touched.extend(self.release(&name_of(object))),
            Event::Init | Event::InitDone => {}
        }
        self.claimants_of(touched)
    }

    /// After a relist of `scope` (one namespace, or every one when None): releases the claims
    /// of the resources in it the relist did not show (deleted while the watch was down, so no
    /// delete event came), and returns the claimants to look at again.
    pub fn release_unlisted(&mut self, scope: Option<&str>, listed: &HashSet<Name>) -> Vec<Name> {
        let gone: Vec<Name> = self
            .claims
            .keys()
            .filter(|name| scope.is_none_or(|ns| name.0 == ns) && !listed.contains(*name))
            .cloned()
            .collect();
        let mut touched: Vec<String> = gone.iter().filter_map(|n| self.release(n)).collect();
        touched.sort();
        self.claimants_of(touched)
    }

    /// Every claimant of the ids `touched` (sorted), to look at again.
    fn claimants_of(&self, mut touched: Vec<String>) -> Vec<Name> {
        touched.dedup();
        touched
            .iter()
            .flat_map(|id| self.claimants.get(id).into_iter().flatten())
            .map(|c| c.name.clone())
            .collect()
    }

    fn release(&mut self, name: &Name) -> Option<String> {
        let (id, claimant) = self.claims.remove(name)?;
        if let Some(set) = self.claimants.get_mut(&id) {
            set.remove(&claimant);
            if set.is_empty() {
                self.claimants.remove(&id);
            }
        }
        Some(id)
    }

    /// Why `object` may not use its `security.id`: the reason and a message naming the holder
    /// (KAOS's wording), or None when it holds it or claims none.
    pub fn conflict<K: Resource + SecurityIdentity>(
        &self,
        object: &K,
    ) -> Option<(&'static str, String)> {
        let id = object.security_id()?;
        let holder = self.claimants.get(id)?.first()?;
        let (namespace, name) = &holder.name;
        (holder.name != name_of(object)).then(|| {
            (
                SECURITY_ID_CONFLICT,
                format!("security.id \"{id}\" already in use by {namespace}/{name}"),
            )
        })
    }
}

/// The index a controller shares between its namespaces' Controllers and its reconciles.
pub type SharedSecurityIds = Arc<Mutex<SecurityIds>>;

/// Where to send a resource to look at again: the Controller of its namespace (one per watched
/// namespace, or one for all), since an id's claimants may be in any of them.
struct Rechecks<K: Resource<DynamicType = ()>> {
    senders: HashMap<Option<String>, mpsc::UnboundedSender<ObjectRef<K>>>,
}

impl<K: Resource<DynamicType = ()>> Rechecks<K> {
    fn send(&self, (namespace, name): Name) {
        let sender = self
            .senders
            .get(&Some(namespace.clone()))
            .or_else(|| self.senders.get(&None));
        if let Some(sender) = sender {
            let _ = sender.send(ObjectRef::new(&name).within(&namespace));
        }
    }
}

/// The `security.id` wiring of a controller: one index for all its namespaces, a watch hook and
/// a stream of resources to look at again per namespace's Controller.
pub struct Claims<K: Resource<DynamicType = ()>> {
    pub ids: SharedSecurityIds,
    rechecks: Arc<Rechecks<K>>,
    streams: HashMap<Option<String>, BoxStream<'static, ObjectRef<K>>>,
}

impl<K: Resource<DynamicType = ()> + SecurityIdentity + Send + Sync + 'static> Claims<K> {
    pub fn new(namespaces: &[Option<String>]) -> Self {
        let (mut senders, mut streams) = (HashMap::new(), HashMap::new());
        for namespace in namespaces {
            let (tx, rx) = mpsc::unbounded_channel();
            senders.insert(namespace.clone(), tx);
            let stream =
                futures::stream::unfold(
                    rx,
                    |mut rx| async move { rx.recv().await.map(|r| (r, rx)) },
                );
            streams.insert(namespace.clone(), stream.boxed());
        }
        Self {
            ids: SharedSecurityIds::default(),
            rechecks: Arc::new(Rechecks { senders }),
            streams,
        }
    }

    /// For the Controller of `namespace`: the watch hook that keeps the index (for `wire`'s
    /// `on_event`), and the resources whose verdict may have changed (for `reconcile_on`).
    pub fn for_namespace(
        &mut self,
        namespace: &Option<String>,
    ) -> (
        impl FnMut(&Event<K>) + Send + 'static,
        BoxStream<'static, ObjectRef<K>>,
    ) {
        let (ids, rechecks) = (self.ids.clone(), self.rechecks.clone());
        let scope = namespace.clone();
        // The resources a relist of this namespace shows, to release the claims of the others.
        let mut relisted: Option<HashSet<Name>> = None;
        let track = move |event: &Event<K>| {
            let mut ids = ids.lock().unwrap_or_else(|e| e.into_inner());
            let touched = match event {
                Event::Init => {
                    relisted = Some(HashSet::new());
                    Vec::new()
                }
                Event::InitApply(object) => {
                    if let Some(listed) = &mut relisted {
                        listed.insert(name_of(object));
                    }
                    ids.observe(event)
                }
                Event::InitDone => match relisted.take() {
                    Some(listed) => ids.release_unlisted(scope.as_deref(), &listed),
                    None => Vec::new(),
                },
                _ => ids.observe(event),
            };
            drop(ids);
            touched.into_iter().for_each(|name| rechecks.send(name));
        };
        let stream = self
            .streams
            .remove(namespace)
            .unwrap_or_else(|| futures::stream::empty().boxed());
        (track, stream)
    }
}

/// `build()`, unless another resource holds `object`'s `security.id`: as in KAOS, a claimed id
/// comes first and the resource does nothing else.
pub fn build_unless_claimed<K: Resource + SecurityIdentity, D>(
    ids: &SharedSecurityIds,
    object: &K,
    build: impl FnOnce() -> Result<D, Problem>,
) -> Result<D, Problem> {
    match conflict_of(ids, object) {
        Some((reason, message)) => Err(Problem::failed(reason, message)),
        None => build(),
    }
}

/// The conflict of `object`, if any (see [`SecurityIds::conflict`]).
pub fn conflict_of<K: Resource + SecurityIdentity>(
    ids: &SharedSecurityIds,
    object: &K,
) -> Option<(&'static str, String)> {
    ids.lock()
        .unwrap_or_else(|e| e.into_inner())
        .conflict(object)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kaos_api::mcpserver::MCPServer;
    use serde_json::json;

    fn server(namespace: &str, name: &str, created: &str, id: Option<&str>) -> MCPServer {
        let mut spec = json!({"runtime": "custom", "container": {"image": "x"}});
        if let Some(id) = id {
            spec["security"] = json!({"id": id});
        }
        serde_json::from_value(
            json!({"apiVersion": "kaos.tools/v1alpha1", "kind": "MCPServer",
            "metadata": {"name": name, "namespace": namespace, "creationTimestamp": created},
            "spec": spec}),
        )
        .expect("MCPServer")
    }

    fn names(touched: Vec<Name>) -> Vec<String> {
        touched
            .into_iter()
            .map(|(n, m)| format!("{n}/{m}"))
            .collect()
    }

    #[test]
    fn the_oldest_claimant_holds_an_id_and_the_next_takes_over_when_it_goes() {
        let mut ids = SecurityIds::default();
        let old = server("b", "old", "2026-01-01T00:00:00Z", Some("tools"));
        let new = server("a", "new", "2026-02-01T00:00:00Z", Some("tools"));
        assert_eq!(names(ids.observe(&Event::Apply(new.clone()))), ["a/new"]);
        assert_eq!(ids.conflict(&new), None, "alone, it holds the id");
        assert_eq!(
            names(ids.observe(&Event::Apply(old.clone()))),
            ["b/old", "a/new"],
            "both are looked at again"
        );
        assert_eq!(ids.conflict(&old), None, "older, whatever the namespace");
        assert_eq!(
            ids.conflict(&new),
            Some((
                SECURITY_ID_CONFLICT,
                "security.id \"tools\" already in use by b/old".to_string()
            ))
        );
        assert!(
            ids.observe(&Event::Apply(old.clone())).is_empty(),
            "no change: nothing to look at"
        );
        assert_eq!(names(ids.observe(&Event::Delete(old))), ["a/new"]);
        assert_eq!(ids.conflict(&new), None, "the next oldest takes over");
    }

    #[test]
    fn a_relist_releases_the_claim_of_a_holder_deleted_while_the_watch_was_down() {
        let mut ids = SecurityIds::default();
        let old = server("a", "old", "2026-01-01T00:00:00Z", Some("x"));
        let new = server("b", "new", "2026-02-01T00:00:00Z", Some("x"));
        ids.observe(&Event::Apply(old));
        ids.observe(&Event::Apply(new.clone()));
        assert!(ids.conflict(&new).is_some());
        let listed: HashSet<Name> = [("b".to_string(), "new".to_string())].into();
        assert!(
            ids.release_unlisted(Some("b"), &listed).is_empty(),
            "a relist of namespace b says nothing of namespace a"
        );
        assert!(ids.conflict(&new).is_some());
        assert_eq!(names(ids.release_unlisted(None, &listed)), ["b/new"]);
        assert_eq!(
            ids.conflict(&new),
            None,
            "the holder is gone: the next takes over"
        );
    }

    #[test]
    fn same_time_ties_go_by_namespace_then_name_and_deleting_or_dropping_the_id_releases_it() {
        let mut ids = SecurityIds::default();
        let at = "2026-01-01T00:00:00Z";
        let b = server("ns", "b", at, Some("x"));
        let a = server("ns", "a", at, Some("x"));
        ids.observe(&Event::Apply(b.clone()));
        ids.observe(&Event::Apply(a.clone()));
        assert!(ids.conflict(&a).is_none() && ids.conflict(&b).is_some());
        let mut deleting = a.clone();
        deleting.metadata.deletion_timestamp = deleting.metadata.creation_timestamp.clone();
        assert_eq!(names(ids.observe(&Event::Apply(deleting))), ["ns/b"]);
        assert!(
            ids.conflict(&b).is_none(),
            "a resource being deleted holds nothing"
        );
        let without = server("ns", "b", at, None);
        ids.observe(&Event::Apply(without.clone()));
        assert!(ids.conflict(&without).is_none() && ids.claimants.is_empty());
    }
}
