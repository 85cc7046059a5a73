//! Which events of a child wake its owner: every change but the echo of this process's own
//! write (the object exactly as that write left it shows nothing new) and but a child shown
//! again unchanged (a relist after the watch broke shows every child; what it shows as it was
//! wakes no one). A child deleted wakes its owner, whether the watch reported it or a relist no
//! longer shows it (deleted while the watch was down: no event comes for it, so the owner is
//! named from what the child last showed). Either way the expectations forget it: creating it
//! again is not pending.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::marker::PhantomData;
use std::sync::Arc;

use futures::{Stream, TryStreamExt};
use kube::Resource;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::Event;
use serde::Serialize;

use crate::converge::expectations::Expectations;
use crate::desired::ChildKind;
use crate::trigger::Relist;

/// What a child last showed, and whom to wake if it vanishes.
struct Shown {
    /// Its content but the status for kinds whose status is noise, its resourceVersion
    /// otherwise (a digest).
    state: u64,
    namespace: Box<str>,
    name: Box<str>,
    /// Its controlling owner of the controller's kind.
    owner: Option<Box<str>>,
}

/// The children of one kind whose events their owners (of kind `K`) must look at.
pub struct ChildChanges<K> {
    kind: ChildKind,
    expectations: Arc<Expectations>,
    seen: HashMap<u64, Shown>,
    relist: Relist<u64>,
    owner_kind: PhantomData<fn() -> K>,
}

impl<K: Resource<DynamicType = ()>> ChildChanges<K> {
    pub fn new(kind: ChildKind, expectations: Arc<Expectations>) -> Self {
        Self {
            kind,
            expectations,
            seen: HashMap::new(),
            relist: Relist::default(),
            owner_kind: PhantomData,
        }
    }

    /// The child of `event` if its owner is to look at it, and the owners of the children a
    /// relist ending with `event` no longer shows.
    pub fn observe<C: Resource + Serialize>(
        &mut self,
        event: Event<C>,
    ) -> (Option<C>, Vec<ObjectRef<K>>) {
        match event {
            Event::Apply(child) | Event::InitApply(child) => {
                let id = self.id(&child);
                self.relist.shows(&id);
                let meta = child.meta();
                let version = meta.resource_version.as_deref();
                let shown = Shown {
                    state: if self.kind.status_is_noise() {
                        content_digest(&child)
                    } else {
                        digest(&version)
                    },
                    namespace: meta.namespace.as_deref().unwrap_or_default().into(),
                    name: meta.name.as_deref().unwrap_or_default().into(),
                    owner: controller_of::<K>(meta),
                };
                let state = shown.state;
                let news = self.seen.insert(id, shown).is_none_or(|s| s.state != state);
                let own_write = self.expectations.is_own_write(&self.key(&child), version);
                ((news && !own_write).then_some(child), Vec::new())
            }
            Event::Delete(child) => {
                self.seen.remove(&self.id(&child));
                self.expectations.forget(&self.key(&child));
                (Some(child), Vec::new())
            }
            Event::Init => {
                self.relist.start();
                (None, Vec::new())
            }
            Event::InitDone => {
                let vanished = self.relist.end(&mut self.seen);
                let owners = vanished
                    .into_iter()
                    .filter_map(|(_, shown)| {
                        let key = (
                            self.kind.as_str(),
                            shown.namespace.into(),
                            shown.name.into(),
                        );
                        self.expectations.forget(&key);
                        let owner = shown.owner?;
                        Some(ObjectRef::new(&owner).within(&key.1))
                    })
                    .collect();
                (None, owners)
            }
        }
    }

    fn key<C: Resource>(&self, child: &C) -> (&'static str, String, String) {
        let meta = child.meta();
        (
            self.kind.as_str(),
            meta.namespace.clone().unwrap_or_default(),
            meta.name.clone().unwrap_or_default(),
        )
    }

    fn id<C: Resource>(&self, child: &C) -> u64 {
        let meta = child.meta();
        digest(&(&meta.namespace, &meta.name))
    }
}

/// The children of `events` their owners must look at; the owners of children a relist no
/// longer shows go to `vanished`.
pub fn child_changes<K, C>(
    events: crate::cache::Events<C>,
    mut changes: ChildChanges<K>,
    mut vanished: impl FnMut(Vec<ObjectRef<K>>) + Send + 'static,
) -> impl Stream<Item = Result<C, kube::runtime::watcher::Error>> + Send + 'static
where
    K: Resource<DynamicType = ()> + 'static,
    C: Resource + Serialize + Send + 'static,
{
    events.try_filter_map(move |event| {
        let (changed, owners) = changes.observe(event);
        if !owners.is_empty() {
            vanished(owners);
        }
        futures::future::ready(Ok(changed))
    })
}

/// The name of the owner of kind `K` that controls the child.
fn controller_of<K: Resource<DynamicType = ()>>(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Option<Box<str>> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|r| {
            r.controller == Some(true)
                && r.kind == K::kind(&())
                && r.api_version == K::api_version(&())
        })
        .map(|r| r.name.as_str().into())
}

fn digest<T: Hash>(value: &T) -> u64 {
    let mut hasher = DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

/// A digest of what a child holds but its status and the versions any write moves.
fn content_digest<C: Serialize>(child: &C) -> u64 {
    let mut value = serde_json::to_value(child).unwrap_or_default();
    if let Some(object) = value.as_object_mut() {
        object.remove("status");
        if let Some(meta) = object.get_mut("metadata").and_then(|m| m.as_object_mut()) {
            meta.remove("resourceVersion");
            meta.remove("managedFields");
        }
    }
    digest(&value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::converge::expectations::Verdict;
    use crate::desired::ChildType;
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::ResourceExt;
    use serde_json::json;

    /// The child `name` at `rv`, controlled by the Deployment `owner` (the owner kind of these
    /// tests).
    fn child(name: &str, rv: &str, owner: &str) -> ConfigMap {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv,
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": owner,
                                     "uid": "u", "controller": true}]},
        }))
        .expect("configmap")
    }

    fn changes(expectations: &Arc<Expectations>) -> ChildChanges<Deployment> {
        ChildChanges::new(ConfigMap::KIND, expectations.clone())
    }

    /// The resourceVersion of the child passed on, if any.
    fn passed(changes: &mut ChildChanges<Deployment>, event: Event<ConfigMap>) -> Option<String> {
        let (child, vanished) = changes.observe(event);
        assert!(vanished.is_empty());
        child.map(|c| c.resource_version().unwrap_or_default())
    }

    #[test]
    fn the_echo_of_our_own_write_wakes_no_owner() {
        let expectations = Arc::<Expectations>::default();
        let key = ("ConfigMap", "ns".to_string(), "a".to_string());
        expectations.wrote(key.clone(), "h".into(), None, Some("5".into()), None);
        let mut changes = changes(&expectations);
        assert_eq!(
            passed(&mut changes, Event::Apply(child("a", "5", "o"))),
            None
        );
        assert_eq!(
            passed(&mut changes, Event::Apply(child("a", "6", "o"))).as_deref(),
            Some("6"),
            "another's change wakes it"
        );
        assert_eq!(
            passed(&mut changes, Event::Delete(child("a", "6", "o"))).as_deref(),
            Some("6"),
            "so does the deletion"
        );
        assert_eq!(
            expectations.verdict(&key, "h", None),
            Verdict::Unknown,
            "a deleted child is forgotten"
        );
    }

    #[test]
    fn a_relist_wakes_the_owners_of_what_changed_or_vanished_only() {
        let expectations = Arc::<Expectations>::default();
        let mut changes = changes(&expectations);
        for (name, owner) in [("same", "o1"), ("changed", "o2"), ("gone", "o3")] {
            assert!(passed(&mut changes, Event::Apply(child(name, "1", owner))).is_some());
        }
        let gone = ("ConfigMap", "ns".to_string(), "gone".to_string());
        expectations.wrote(gone.clone(), "h".into(), None, None, None);

        assert_eq!(passed(&mut changes, Event::Init), None);
        assert_eq!(
            passed(&mut changes, Event::InitApply(child("same", "1", "o1"))),
            None
        );
        assert_eq!(
            passed(&mut changes, Event::InitApply(child("changed", "2", "o2"))).as_deref(),
            Some("2")
        );
        let (child, vanished) = changes.observe::<ConfigMap>(Event::InitDone);
        assert!(child.is_none());
        assert_eq!(vanished, [ObjectRef::new("o3").within("ns")]);
        assert_eq!(
            expectations.verdict(&gone, "h", None),
            Verdict::Unknown,
            "what vanished is forgotten: creating it again is not pending"
        );
        let (_, vanished) = changes.observe::<ConfigMap>(Event::InitDone);
        assert!(vanished.is_empty(), "outside a relist nothing vanishes");
    }
}
