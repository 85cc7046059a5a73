//! The caches of a controller's children. kube-runtime's `Store` keys each object by an
//! `ObjectRef` (96 bytes and four strings: name, namespace, resourceVersion, uid) beside the
//! object, which holds its name and namespace already; for a child, cached as a slim view and
//! looked up only by name, that key and its table slot cost about as much as the view. A
//! [`ChildStore`] keys each child by a 64-bit digest of its namespace and name, and a lookup
//! checks the name, so a digest shared by two names (odds of ~1 in 2^64) can hide a child but
//! never return the wrong one.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, RwLock};

use kube::Resource;
use kube::runtime::watcher::Event;
use tokio::sync::watch;

type Objects<K> = HashMap<u64, Arc<K>>;

/// The read side: lookups by namespace and name, and whether the first list has arrived.
pub struct ChildStore<K> {
    objects: Arc<RwLock<Objects<K>>>,
    synced: watch::Receiver<bool>,
}

impl<K> Clone for ChildStore<K> {
    fn clone(&self) -> Self {
        ChildStore {
            objects: self.objects.clone(),
            synced: self.synced.clone(),
        }
    }
}

/// The write side, fed the watch events in order.
pub struct ChildStoreWriter<K> {
    objects: Arc<RwLock<Objects<K>>>,
    /// The objects of the list in progress; they replace the store's when it completes.
    relisted: Option<Objects<K>>,
    synced: watch::Sender<bool>,
}

/// An empty store and the writer that fills it.
pub fn child_store<K>() -> (ChildStore<K>, ChildStoreWriter<K>) {
    let objects = Arc::new(RwLock::new(HashMap::new()));
    let (synced_tx, synced) = watch::channel(false);
    (
        ChildStore {
            objects: objects.clone(),
            synced,
        },
        ChildStoreWriter {
            objects,
            relisted: None,
            synced: synced_tx,
        },
    )
}

fn key(namespace: Option<&str>, name: Option<&str>) -> u64 {
    let mut hasher = DefaultHasher::new();
    (namespace.unwrap_or_default(), name.unwrap_or_default()).hash(&mut hasher);
    hasher.finish()
}

fn key_of<K: Resource>(object: &K) -> u64 {
    let meta = object.meta();
    key(meta.namespace.as_deref(), meta.name.as_deref())
}

impl<K: Resource> ChildStore<K> {
    /// The cached child `name` in `namespace`.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<K>> {
        let objects = self.objects.read().unwrap_or_else(|e| e.into_inner());
        objects
            .get(&key(Some(namespace), Some(name)))
            .filter(|o| {
                let meta = o.meta();
                meta.name.as_deref() == Some(name)
                    && meta.namespace.as_deref().unwrap_or_default() == namespace
            })
            .cloned()
    }

    /// How many children it holds.
    pub fn len(&self) -> usize {
        self.objects.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Resolves once the first list has been stored (any number of waiters).
    pub async fn wait_until_ready(&self) {
        let mut synced = self.synced.clone();
        let _ = synced.wait_for(|synced| *synced).await;
    }
}

impl<K: Resource + Clone> ChildStoreWriter<K> {
    /// Applies one watch event, as kube-runtime's reflector does: a relist replaces the whole
    /// store when it completes (objects it no longer lists are gone).
    pub fn apply(&mut self, event: &Event<K>) {
        match event {
            Event::Apply(object) => {
                self.write()
                    .insert(key_of(object), Arc::new(object.clone()));
            }
            Event::Delete(object) => {
                self.write().remove(&key_of(object));
            }
            Event::Init => self.relisted = Some(HashMap::new()),
            Event::InitApply(object) => {
                if let Some(relisted) = &mut self.relisted {
                    relisted.insert(key_of(object), Arc::new(object.clone()));
                }
            }
            Event::InitDone => {
                if let Some(relisted) = self.relisted.take() {
                    *self.write() = relisted;
                }
                self.synced.send_replace(true);
            }
        }
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Objects<K>> {
        self.objects.write().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn cm(namespace: &str, name: &str, rv: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(namespace.into()),
                resource_version: Some(rv.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn rv(store: &ChildStore<ConfigMap>, namespace: &str, name: &str) -> Option<String> {
        store
            .get(namespace, name)
            .and_then(|c| c.metadata.resource_version.clone())
    }

    #[tokio::test]
    async fn holds_what_the_watch_says_and_a_relist_replaces_it() {
        let (store, mut writer) = child_store::<ConfigMap>();
        writer.apply(&Event::Init);
        writer.apply(&Event::InitApply(cm("ns", "a", "1")));
        writer.apply(&Event::InitApply(cm("other", "a", "2")));
        assert!(store.is_empty(), "nothing before the list completes");
        writer.apply(&Event::InitDone);
        store.wait_until_ready().await;
        assert_eq!(rv(&store, "ns", "a").as_deref(), Some("1"));
        assert_eq!(rv(&store, "other", "a").as_deref(), Some("2"));
        assert_eq!(rv(&store, "ns", "b"), None);

        writer.apply(&Event::Apply(cm("ns", "a", "3")));
        writer.apply(&Event::Apply(cm("ns", "b", "4")));
        writer.apply(&Event::Delete(cm("other", "a", "2")));
        assert_eq!(rv(&store, "ns", "a").as_deref(), Some("3"));
        assert_eq!(rv(&store, "ns", "b").as_deref(), Some("4"));
        assert_eq!(rv(&store, "other", "a"), None);

        // A relist that no longer lists b: b is gone once it completes.
        writer.apply(&Event::Init);
        writer.apply(&Event::InitApply(cm("ns", "a", "5")));
        assert_eq!(rv(&store, "ns", "b").as_deref(), Some("4"));
        writer.apply(&Event::InitDone);
        assert_eq!(rv(&store, "ns", "a").as_deref(), Some("5"));
        assert_eq!(rv(&store, "ns", "b"), None);
        assert_eq!(store.len(), 1);
    }
}
