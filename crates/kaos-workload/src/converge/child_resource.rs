//! What converge needs of each child type: its API, what its cache keeps and how it is
//! compared. Its name and where its cache is kept are its row in `child_kinds.rs`.

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

use crate::build::gateway::http_route_resource;
use crate::cache;
use crate::cache::deployment_view::DeploymentView;
use crate::cache::meta_view::MetaView;
use crate::cache::packed::Labelled;
use crate::converge::ownership::{stamp_desired_hash, stamp_with};
#[cfg(doc)]
use crate::desired::ChildKind;
use crate::desired::ChildType;
use crate::hash::secret_hash;

/// What converge needs of a child type: its API, what its cache keeps and how it is compared.
pub trait ChildResource:
    ChildType + Resource<DynamicType: Eq + std::hash::Hash + Clone + Debug> + DeserializeOwned
{
    /// What the cache keeps of this kind.
    type Cached: Resource<DynamicType = Self::DynamicType>
        + Labelled
        + Clone
        + Serialize
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static;
    /// Whether a change of its status alone wakes no reconcile (see [`ChildKind`]).
    const STATUS_IS_NOISE: bool = false;
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
    /// Fills in, only when it is written, what the desired object leaves out of the comparison
    /// (`live`: the cached child, if any): a Deployment's replicas when an autoscaler owns them.
    fn carry_live(&mut self, _live: Option<&Self::Cached>, _autoscaled: Option<i32>) {}
    /// Its API in `namespace`, to write it (a typed kind's: `typed_api!()`).
    fn api(client: &kube::Client, namespace: &str) -> Api<Self>;
    /// The API its cache watches, in `namespace` (all when None).
    fn watch_api(client: &kube::Client, namespace: Option<&str>) -> Api<Self::Cached>;
    /// The kind's dynamic type, for the owner triggers of its cache.
    fn dynamic_type() -> Self::DynamicType;
}

/// [`ChildResource`]'s APIs of a typed kind (its type knows its group, version and plural);
/// only the HTTPRoute, a `DynamicObject`, needs its `ApiResource` spelled out.
macro_rules! typed_api {
    () => {
        fn api(client: &kube::Client, namespace: &str) -> Api<Self> {
            Api::namespaced(client.clone(), namespace)
        }
        fn watch_api(client: &kube::Client, namespace: Option<&str>) -> Api<Self::Cached> {
            cache::api(client, namespace)
        }
        fn dynamic_type() -> Self::DynamicType {}
    };
}

impl ChildResource for Deployment {
    type Cached = DeploymentView;
    const CACHED_WHOLE: bool = false;
    fn content_version(meta: &ObjectMeta) -> Option<String> {
        meta.generation.map(|g| g.to_string())
    }
    /// An autoscaler's replicas: the live value (at creation, the initial one). A live
    /// Deployment at zero (a suspended agent resumed) starts at the initial one: an autoscaler
    /// never scales up from zero.
    fn carry_live(&mut self, live: Option<&DeploymentView>, autoscaled: Option<i32>) {
        if let (Some(initial), Some(spec)) = (autoscaled, self.spec.as_mut()) {
            let live = live.map(DeploymentView::replicas).filter(|r| *r > 0);
            spec.replicas = Some(live.unwrap_or(initial));
        }
    }
    typed_api!();
}

impl ChildResource for Service {
    type Cached = MetaView<Service>;
    const CACHED_WHOLE: bool = false;
    /// The Service is the workload's address: a port or selector entry a user adds (or changes,
    /// which apply alone would turn into two ports of one name) would send callers elsewhere.
    /// Labels and annotations users add stay (docs/reconcile.md).
    const OWNED_WHOLE: &'static [&'static str] = &["/spec/type", "/spec/ports", "/spec/selector"];
    typed_api!();
}

impl ChildResource for ConfigMap {
    type Cached = ConfigMap;
    const CACHED_WHOLE: bool = true;
    typed_api!();
}

impl ChildResource for Secret {
    type Cached = MetaView<Secret>;
    const CACHED_WHOLE: bool = false;
    /// One-way: the stamp is on the object, its content is a secret.
    fn stamp(desired: &mut Self) -> String {
        stamp_with(desired, secret_hash)
    }
    typed_api!();
}

impl ChildResource for DynamicObject {
    type Cached = DynamicObject;
    const CACHED_WHOLE: bool = true;
    fn api(client: &kube::Client, namespace: &str) -> Api<Self> {
        Api::namespaced_with(client.clone(), namespace, &http_route_resource())
    }
    fn watch_api(client: &kube::Client, namespace: Option<&str>) -> Api<Self> {
        match namespace {
            Some(namespace) => Self::api(client, namespace),
            None => Api::all_with(client.clone(), &http_route_resource()),
        }
    }
    fn dynamic_type() -> Self::DynamicType {
        http_route_resource()
    }
}

impl ChildResource for PersistentVolumeClaim {
    type Cached = MetaView<PersistentVolumeClaim>;
    const CACHED_WHOLE: bool = false;
    const CREATE_ONLY: bool = true;
    typed_api!();
}

impl ChildResource for PodDisruptionBudget {
    type Cached = MetaView<PodDisruptionBudget>;
    const CACHED_WHOLE: bool = false;
    const STATUS_IS_NOISE: bool = true;
    /// Its spec moves the generation; the disruption controller's status writes do not.
    fn content_version(meta: &ObjectMeta) -> Option<String> {
        meta.generation.map(|g| g.to_string())
    }
    typed_api!();
}

impl ChildResource for HorizontalPodAutoscaler {
    type Cached = HorizontalPodAutoscaler;
    const CACHED_WHOLE: bool = true;
    const STATUS_IS_NOISE: bool = true;
    typed_api!();
}

impl ChildResource for NetworkPolicy {
    type Cached = MetaView<NetworkPolicy>;
    const CACHED_WHOLE: bool = false;
    typed_api!();
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
            (Child::new(Deployment::default()), Deployment::KIND),
            (Child::new(Service::default()), Service::KIND),
            (Child::new(ConfigMap::default()), ConfigMap::KIND),
            (Child::new(Secret::default()), Secret::KIND),
            (Child::new(route), DynamicObject::KIND),
            (
                Child::new(PersistentVolumeClaim::default()),
                PersistentVolumeClaim::KIND,
            ),
            (
                Child::new(PodDisruptionBudget::default()),
                PodDisruptionBudget::KIND,
            ),
            (
                Child::new(HorizontalPodAutoscaler::default()),
                HorizontalPodAutoscaler::KIND,
            ),
            (Child::new(NetworkPolicy::default()), NetworkPolicy::KIND),
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
        assert!(PodDisruptionBudget::KIND.status_is_noise());
        assert!(!Deployment::KIND.status_is_noise());
    }
}
