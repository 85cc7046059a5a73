//! Watch caches of owned children, shared by the reconciler (to read what exists) and the
//! controller (to be triggered when a child changes). Children are watched with the controller's
//! label selector, and metadata-only where the reconciler needs no more than metadata.

use std::fmt::Debug;
use std::hash::Hash;

use futures::{Stream, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Api;
use kube::core::{ApiResource, DynamicObject, PartialObjectMeta};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

/// A stream of changed children, for `Controller::owns_stream`.
pub type ChildStream<K> = std::pin::Pin<Box<dyn Stream<Item = Result<K, watcher::Error>> + Send>>;

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

/// A cache of full objects (children whose status the reconciler reads, like Deployments, or
/// dependencies; an empty selector watches every object).
pub fn full<K>(
    client: &Client,
    namespace: Option<&str>,
    selector: &str,
) -> (Store<K>, ChildStream<K>)
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(
        writer,
        watcher(api::<K>(client, namespace), config(selector)),
    )
    .default_backoff()
    .touched_objects()
    .boxed();
    (reader, stream)
}

/// A metadata-only cache (for children the reconciler only needs to find and compare by hash).
pub fn metadata<K>(
    client: &Client,
    namespace: Option<&str>,
    selector: &str,
) -> (
    Store<PartialObjectMeta<K>>,
    ChildStream<PartialObjectMeta<K>>,
)
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(
        writer,
        watcher(
            api::<PartialObjectMeta<K>>(client, namespace),
            config(selector),
        ),
    )
    .default_backoff()
    .touched_objects()
    .boxed();
    (reader, stream)
}

/// A cache of dynamically typed objects such as Gateway API HTTPRoutes.
pub fn dynamic(
    client: &Client,
    namespace: Option<&str>,
    resource: &ApiResource,
    selector: &str,
) -> (Store<DynamicObject>, ChildStream<DynamicObject>) {
    let writer = reflector::store::Writer::new(resource.clone());
    let reader = writer.as_reader();
    let api = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, resource),
        None => Api::all_with(client.clone(), resource),
    };
    let stream = reflector::reflector(writer, watcher(api, config(selector)))
        .default_backoff()
        .touched_objects()
        .boxed();
    (reader, stream)
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

/// Metadata of every cached object, for orphan collection.
pub fn cached_metadata<K>(store: &Store<K>) -> Vec<ObjectMeta>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    store.state().iter().map(|o| o.meta().clone()).collect()
}
