//! What the converge tests share: the parent that owns the children, synced caches of the
//! children, and the children of one process.

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kaos_workload::cache::child_store::ChildStore;
use kaos_workload::cache::deployment_view::DeploymentView;
use kaos_workload::cache::meta_view::MetaView;
use kaos_workload::cache::{self, Watched};
use kaos_workload::converge::Children;
use kube::api::PostParams;
use kube::{Api, Client, ResourceExt};
use serde_json::json;

/// Creates the ConfigMap `parent` in `default`, the owner of every child; returns its uid.
pub async fn create_parent(client: &Client) -> String {
    let parent: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "parent"}})).expect("cm");
    Api::<ConfigMap>::default_namespaced(client.clone())
        .create(&PostParams::default(), &parent)
        .await
        .expect("parent")
        .uid()
        .expect("uid")
}

/// A cache of the children (`app=test` in `default`), driven in the background, once synced.
pub async fn synced_cache<K: Watched>(client: &Client) -> ChildStore<K> {
    let (cache, events) = cache::child_cache::<K>(client, Some("default"), "app=test");
    tokio::spawn(events.for_each(|_| async {}));
    cache.wait_until_ready().await;
    cache
}

/// The children of one process: these caches and no other kind, remembering no earlier write.
pub fn children(
    deployments: ChildStore<DeploymentView>,
    services: ChildStore<MetaView<Service>>,
    config_maps: Option<ChildStore<ConfigMap>>,
) -> Children {
    Children {
        deployments: Some(deployments),
        services: Some(services),
        config_maps,
        ..Children::default()
    }
}
