//! Slim watch caches. Every object is stripped of what no controller reads (managedFields, the
//! last-applied annotation) before it enters a store, and each cache hands out its event stream
//! *after* the store has applied the event (a relist's events after the store swapped it in, see
//! [`after_relists`]), so indexes and triggers built on the stream always see a store at least
//! as new as the event.
//!
//! A watch error ends at its cache ([`without_errors`]): it is logged, and the watcher retries
//! after its own backoff. None reaches a Controller, whose triggers are every cache it polls.

pub mod child_store;
pub mod compact;
pub mod deployment_view;
pub mod meta_view;
pub mod packed;
pub mod relist;
pub mod view;

use std::fmt::Debug;
use std::hash::Hash;
use std::pin::Pin;

use futures::{Stream, StreamExt, TryStreamExt};
use k8s_openapi::NamespaceResourceScope;
use kube::api::Api;
use kube::core::ApiResource;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

use crate::cache::child_store::{ChildStore, child_store};
use crate::cache::relist::after_relists;

/// The watch events of one cache, delivered after the store applied them. It yields no errors
/// (see [`without_errors`]); the type is fallible because kube-runtime's Controller takes it so.
pub type Events<K> = Pin<Box<dyn Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send>>;

/// The annotation `kubectl apply` (client side) stores a whole copy of the object in.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Drops what no controller reads, so a cached object costs its content and no more.
pub fn slim<K: Resource>(object: &mut K) {
    let meta = object.meta_mut();
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
        if annotations.is_empty() {
            meta.annotations = None;
        }
    }
}

/// An API handle for `namespace`, or for all namespaces when None.
pub fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

fn config(selector: &str) -> watcher::Config {
    let config = watcher::Config::default().any_semantic();
    if selector.is_empty() {
        config
    } else {
        config.labels(selector)
    }
}

/// A namespaced kind the caches can watch and keep.
pub trait Watched:
    Resource<Scope = NamespaceResourceScope, DynamicType: CacheKey> + Object
{
}

impl<K> Watched for K where
    K: Resource<Scope = NamespaceResourceScope, DynamicType: CacheKey> + Object
{
}

/// What a cached object is: cloned, decoded, printed and shared between tasks.
pub trait Object: Clone + DeserializeOwned + Debug + Send + Sync + 'static {}

impl<K: Clone + DeserializeOwned + Debug + Send + Sync + 'static> Object for K {}

/// What a store keys its objects by, besides their name (their kind's dynamic type).
pub trait CacheKey: Default + Eq + Hash + Clone + Send + Sync {}

impl<T: Default + Eq + Hash + Clone + Send + Sync> CacheKey for T {}

/// A slim cache of `K` in `namespace` (all when None) selected by `selector` (everything when
/// empty), and its events. The store fills only while the events are polled.
pub fn cache<K>(client: &Client, namespace: Option<&str>, selector: &str) -> (Store<K>, Events<K>)
where
    K: Watched,
{
    let (reader, mut writer) = reflector::store();
    let events = watch(api::<K>(client, namespace), selector, move |event| {
        writer.apply_watcher_event(event)
    });
    (reader, events)
}

/// A slim cache of a controller's children of kind `K` (see [`ChildStore`]) in `namespace` (all
/// when None) selected by `selector`, and its events. The store fills only while the events
/// are polled.
pub fn child_cache<K>(
    client: &Client,
    namespace: Option<&str>,
    selector: &str,
) -> (ChildStore<K>, Events<K>)
where
    K: Watched,
{
    watch_children(api::<K>(client, namespace), selector)
}

/// A slim cache of the children `api` lists, selected by `selector`, and its events.
pub fn watch_children<K>(api: Api<K>, selector: &str) -> (ChildStore<K>, Events<K>)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (store, mut writer) = child_store();
    (
        store,
        watch(api, selector, move |event| writer.apply(event)),
    )
}

/// The slim events of a watch on `api` selected by `selector`, each handed to `store` first.
fn watch<K>(
    api: Api<K>,
    selector: &str,
    mut store: impl FnMut(&watcher::Event<K>) + Send + 'static,
) -> Events<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    // The resource (`deployments`, `agents`) names the cache in the logs.
    let resource = api
        .resource_url()
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .to_string();
    let events = watcher(api, config(selector))
        .default_backoff()
        .modify(slim::<K>)
        .inspect_ok(move |event| store(event));
    without_errors(after_relists(events), resource).boxed()
}

/// Logs each watch error of the cache of `resource` and passes only the events on. The watcher
/// retries on its own, after its backoff (0.8 s doubling to 30 s, reset by the next event).
///
/// Why here: a Controller polls every trigger stream it is given (the primary's cache, each
/// child cache, the dependency caches behind `reconcile_on`) as one merged stream, and after
/// any error kube-runtime pauses *that whole stream* for its trigger backoff, which only an
/// event passed through resets. Our triggers pass changes only, so under repeated watch
/// errors the pause grew to 30–60 s, and while paused no cache of the process was polled:
/// every store went stale and no change woke a reconcile (the chaos test's stalls).
pub fn without_errors<K, S>(
    events: S,
    resource: String,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send
where
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
    K: Send,
{
    events.filter_map(move |event| {
        let event = match event {
            Ok(event) => Some(Ok(event)),
            Err(error) => {
                tracing::warn!(%resource, "watch failed, retrying after a backoff: {error}");
                None
            }
        };
        futures::future::ready(event)
    })
}

/// Whether the cluster serves `resource` (e.g. the Gateway API is installed).
pub async fn served(client: &Client, resource: &ApiResource) -> bool {
    match client.list_api_group_resources(&resource.api_version).await {
        Ok(list) => list.resources.iter().any(|r| r.name == resource.plural),
        Err(_) => false,
    }
}

/// The cached object `name` in `namespace`.
pub fn cached<K>(store: &Store<K>, namespace: &str, name: &str) -> Option<std::sync::Arc<K>>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Default + Eq + Hash + Clone,
{
    store.get(&ObjectRef::new(name).within(namespace))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta};

    #[test]
    fn slim_drops_managed_fields_and_last_applied_only() {
        let mut object = ConfigMap {
            metadata: ObjectMeta {
                name: Some("c".into()),
                managed_fields: Some(vec![ManagedFieldsEntry::default()]),
                annotations: Some(
                    [
                        (LAST_APPLIED.to_string(), "{...}".to_string()),
                        ("keep".to_string(), "me".to_string()),
                    ]
                    .into(),
                ),
                ..Default::default()
            },
            ..Default::default()
        };
        slim(&mut object);
        assert_eq!(object.metadata.managed_fields, None);
        assert_eq!(
            object.metadata.annotations,
            Some([("keep".to_string(), "me".to_string())].into())
        );
    }
}
