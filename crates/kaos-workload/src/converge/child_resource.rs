//! What converge needs of each child type: its kind, its API, its cache in [`Children`], what
//! that cache keeps and how it is compared.

use std::fmt::Debug;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Secret, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::api::Api;
use kube::core::DynamicObject;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::Children;
use crate::build::gateway::http_route_resource;
use crate::cache::child_store::ChildStore;
use crate::cache::deployment_view::DeploymentView;
use crate::cache::meta_view::MetaView;
use crate::cache::packed::Labelled;
use crate::converge::ownership::{stamp_desired_hash, stamp_with};
use crate::desired::ChildKind;
use crate::hash::secret_hash;

/// What converge needs of a child type: its kind, its API, its cache in [`Children`], what that
/// cache keeps and how it is compared.
pub trait ChildResource:
    Resource<DynamicType: Eq + std::hash::Hash + Clone>
    + Clone
    + Serialize
    + DeserializeOwned
    + Debug
    + Send
    + Sync
    + 'static
{
    /// What the cache keeps of this kind.
    type Cached: Resource<DynamicType = Self::DynamicType>
        + Labelled
        + Clone
        + Serialize
        + Debug
        + Send
        + Sync
        + 'static;
    /// Its kind, as the builders' sets, the write memory and the changes name it.
    const KIND: ChildKind;
    /// Whether the cache keeps the whole object, so drift is read from it (else only its
    /// metadata, and its spec's drift from its content version).
    const CACHED_WHOLE: bool;
    /// Whether an existing child is left as it is: written once, never updated (a claim's
    /// size cannot shrink and may not grow on its storage class; the data is the user's).
    const CREATE_ONLY: bool = false;
    /// Fields (JSON pointers) the controller owns whole: what another manager added to them is
    /// drift too, and is removed. Server-side apply keeps what other managers own, so a drifted
    /// child's fields are first replaced by a JSON patch (tested against the version read).
    const OWNED_WHOLE: &'static [&'static str] = &[];
    /// What moves whenever the object's content changes: the resourceVersion, unless the kind
    /// has a generation (which status writes leave alone).
    fn content_version(meta: &ObjectMeta) -> Option<String> {
        meta.resource_version.clone()
    }
    /// Stamps the desired object with the hash of its content (see `children`).
    fn stamp(desired: &mut Self) -> String {
        stamp_desired_hash(desired)
    }
    /// Its API in `namespace` (a typed kind's: `namespaced_api!()`).
    fn api(client: &kube::Client, namespace: &str) -> Api<Self>;
    /// The controller's cache of this kind; None when it has no children of this kind.
    fn store(children: &Children) -> Option<&ChildStore<Self::Cached>>;
}

/// [`ChildResource::api`] of a typed kind (its type knows its group, version and plural);
/// only the HTTPRoute, a `DynamicObject`, needs its `ApiResource` spelled out.
macro_rules! namespaced_api {
    () => {
        fn api(client: &kube::Client, namespace: &str) -> Api<Self> {
            Api::namespaced(client.clone(), namespace)
        }
    };
}

impl ChildResource for Deployment {
    const KIND: ChildKind = ChildKind::Deployment;
    type Cached = DeploymentView;
    const CACHED_WHOLE: bool = false;
    fn content_version(meta: &ObjectMeta) -> Option<String> {
        meta.generation.map(|g| g.to_string())
    }
    namespaced_api!();
    fn store(children: &Children) -> Option<&ChildStore<Self::Cached>> {
        Some(&children.deployments)
    }
}

impl ChildResource for Service {
    const KIND: ChildKind = ChildKind::Service;
    type Cached = MetaView<Service>;
    const CACHED_WHOLE: bool = false;
    /// The Service is the workload's address: a port or selector entry a user adds (or changes,
    /// which apply alone would turn into two ports of one name) would send callers elsewhere.
    /// Labels and annotations users add stay (docs/reconcile.md).
    const OWNED_WHOLE: &'static [&'static str] = &["/spec/type", "/spec/ports", "/spec/selector"];
    namespaced_api!();
    fn store(children: &Children) -> Option<&ChildStore<Self::Cached>> {
        Some(&children.services)
    }
}

impl ChildResource for ConfigMap {
    const KIND: ChildKind = ChildKind::ConfigMap;
    type Cached = ConfigMap;
    const CACHED_WHOLE: bool = true;
    namespaced_api!();
    fn store(children: &Children) -> Option<&ChildStore<Self::Cached>> {
        children.config_maps.as_ref()
    }
}

impl ChildResource for Secret {
    const KIND: ChildKind = ChildKind::Secret;
    type Cached = MetaView<Secret>;
    const CACHED_WHOLE: bool = false;
    /// One-way: the stamp is on the object, its content is a secret.
    fn stamp(desired: &mut Self) -> String {
        stamp_with(desired, secret_hash)
    }
    namespaced_api!();
    fn store(children: &Children) -> Option<&ChildStore<Self::Cached>> {
        children.secrets.as_ref()
    }
}

impl ChildResource for DynamicObject {
    const KIND: ChildKind = ChildKind::HttpRoute;
    type Cached = DynamicObject;
    const CACHED_WHOLE: bool = true;
    fn api(client: &kube::Client, namespace: &str) -> Api<Self> {
        Api::namespaced_with(client.clone(), namespace, &http_route_resource())
    }
    fn store(children: &Children) -> Option<&ChildStore<Self::Cached>> {
        children.routes.as_ref()
    }
}

impl ChildResource for PersistentVolumeClaim {
    const KIND: ChildKind = ChildKind::PersistentVolumeClaim;
    type Cached = MetaView<PersistentVolumeClaim>;
    const CACHED_WHOLE: bool = false;
    const CREATE_ONLY: bool = true;
    namespaced_api!();
    fn store(children: &Children) -> Option<&ChildStore<Self::Cached>> {
        children.claims.as_ref()
    }
}

impl ChildResource for PodDisruptionBudget {
    const KIND: ChildKind = ChildKind::PodDisruptionBudget;
    type Cached = MetaView<PodDisruptionBudget>;
    const CACHED_WHOLE: bool = false;
    /// Its spec moves the generation; the disruption controller's status writes do not.
    fn content_version(meta: &ObjectMeta) -> Option<String> {
        meta.generation.map(|g| g.to_string())
    }
    namespaced_api!();
    fn store(children: &Children) -> Option<&ChildStore<Self::Cached>> {
        children.disruption_budgets.as_ref()
    }
}

impl ChildResource for HorizontalPodAutoscaler {
    const KIND: ChildKind = ChildKind::HorizontalPodAutoscaler;
    type Cached = HorizontalPodAutoscaler;
    const CACHED_WHOLE: bool = true;
    namespaced_api!();
    fn store(children: &Children) -> Option<&ChildStore<Self::Cached>> {
        children.autoscalers.as_ref()
    }
}

impl ChildResource for NetworkPolicy {
    const KIND: ChildKind = ChildKind::NetworkPolicy;
    type Cached = MetaView<NetworkPolicy>;
    const CACHED_WHOLE: bool = false;
    namespaced_api!();
    fn store(children: &Children) -> Option<&ChildStore<Self::Cached>> {
        children.network_policies.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::desired::Child;

    /// A desired child's kind (in converge's messages) is its type's `KIND` (the key of its
    /// write memory), and no two types share one: a Secret and a ConfigMap of one name under
    /// one key would each take the other's write as its own.
    #[test]
    fn each_child_is_of_its_types_kind() {
        let route = DynamicObject::new("r", &http_route_resource());
        let kinds = [
            (Child::Deployment(Box::default()), Deployment::KIND),
            (Child::Service(Box::default()), Service::KIND),
            (Child::ConfigMap(Box::default()), ConfigMap::KIND),
            (Child::Secret(Box::default()), Secret::KIND),
            (Child::HttpRoute(Box::new(route)), DynamicObject::KIND),
            (
                Child::PersistentVolumeClaim(Box::default()),
                PersistentVolumeClaim::KIND,
            ),
            (
                Child::PodDisruptionBudget(Box::default()),
                PodDisruptionBudget::KIND,
            ),
            (
                Child::HorizontalPodAutoscaler(Box::default()),
                HorizontalPodAutoscaler::KIND,
            ),
            (Child::NetworkPolicy(Box::default()), NetworkPolicy::KIND),
        ];
        let distinct: std::collections::HashSet<_> = kinds.iter().map(|(_, k)| *k).collect();
        assert_eq!(
            distinct.len(),
            kinds.len(),
            "every type has a kind of its own"
        );
        for (child, kind) in kinds {
            assert_eq!(child.kind(), kind);
        }
    }
}
