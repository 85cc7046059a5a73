//! Children cached without their spec (Deployments as `DeploymentView`, Services as metadata)
//! against kaos-testkit: a status change costs nothing; a hand edit is restored after one read;
//! another manager's field costs one read and survives; a restarted process reads each child
//! once and writes nothing.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use kaos_testkit::{ApiServer, Cluster};
use kaos_workload::cache::child_store::ChildStore;
use kaos_workload::cache::deployment_view::DeploymentView;
use kaos_workload::cache::meta_view::MetaView;
use kaos_workload::converge::{Children, Parent};
use kaos_workload::desired::{Child, ChildSet};
use kube::api::{Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

mod common;

const MANAGER: &str = "kaos-test-controller";

struct Setup {
    api: ApiServer,
    client: Client,
    deployments: Api<Deployment>,
    services: Api<Service>,
    deployment_cache: ChildStore<DeploymentView>,
    service_cache: ChildStore<MetaView<Service>>,
    uid: String,
}

async fn setup() -> Setup {
    let api = ApiServer::new(Cluster::default());
    let client = Client::new(api.clone().router(), "default");
    let uid = common::create_parent(&client).await;
    let deployment_cache = common::synced_cache::<DeploymentView>(&client).await;
    let service_cache = common::synced_cache::<MetaView<Service>>(&client).await;
    Setup {
        deployments: Api::default_namespaced(client.clone()),
        services: Api::default_namespaced(client.clone()),
        api,
        client,
        deployment_cache,
        service_cache,
        uid,
    }
}

impl Setup {
    /// The children of one process: a new call is a restarted process (same caches, nothing
    /// remembered).
    fn process(&self) -> Children {
        common::children(
            self.deployment_cache.clone(),
            self.service_cache.clone(),
            None,
        )
    }

    fn metadata(&self) -> Value {
        json!({"name": "child", "namespace": "default", "labels": {"app": "test", "tier": "child"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "parent",
                "uid": self.uid, "controller": true}]})
    }

    fn set(&self, image: &str) -> ChildSet {
        let deployment: Deployment = serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": self.metadata(),
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "test"}},
                "template": {"metadata": {"labels": {"app": "test"}},
                    "spec": {"containers": [{"name": "main", "image": image}]}}}
        }))
        .expect("deployment");
        let service: Service = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Service", "metadata": self.metadata(),
            "spec": {"selector": {"app": "test"}, "ports": [{"name": "http", "port": 8000}]}
        }))
        .expect("service");
        ChildSet {
            apply: vec![Child::new(deployment), Child::new(service)],
            absent: Vec::new(),
            ..Default::default()
        }
    }

    async fn converge(&self, children: &Children, image: &str) -> Vec<String> {
        let parent = Parent {
            namespace: "default",
            uid: &self.uid,
            field_manager: MANAGER,
            client: &self.client,
        };
        children
            .converge(&parent, self.set(image))
            .await
            .expect("converge")
            .changes
    }

    /// The requests sent for the children since the last call (verb and resource).
    fn requests(&self) -> Vec<String> {
        let records = self.api.audit.records();
        self.api.audit.clear();
        records
            .iter()
            .filter(|r| r.name == "child" && r.verb != "watch" && r.verb != "list")
            .map(|r| format!("{} {}", r.verb, r.resource))
            .collect()
    }

    /// Waits until the caches show the children's current resourceVersions.
    async fn caught_up(&self) {
        let deployment = self.deployments.get("child").await.expect("deployment");
        let service = self.services.get("child").await.expect("service");
        self.api.audit.clear();
        for _ in 0..300 {
            let d = self.deployment_cache.get("default", "child");
            let s = self.service_cache.get("default", "child");
            if d.is_some_and(|d| d.resource_version() == deployment.resource_version())
                && s.is_some_and(|s| s.resource_version() == service.resource_version())
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the caches never caught up");
    }

    async fn image(&self) -> String {
        let stored = self.deployments.get("child").await.expect("deployment");
        self.api.audit.clear();
        stored
            .spec
            .expect("spec")
            .template
            .spec
            .expect("pod")
            .containers[0]
            .image
            .clone()
            .expect("image")
    }
}

#[tokio::test]
async fn a_status_change_costs_nothing_and_a_hand_edit_is_restored_after_one_read() {
    let s = setup().await;
    let children = s.process();
    assert_eq!(
        s.converge(&children, "app:1").await,
        ["applied Deployment child", "applied Service child"]
    );
    s.caught_up().await;
    assert!(s.converge(&children, "app:1").await.is_empty());
    assert!(s.requests().is_empty(), "the cache vouches for both");

    let status = json!({"status": {"replicas": 1, "readyReplicas": 1, "observedGeneration": 1}});
    s.deployments
        .patch_status("child", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("status");
    s.caught_up().await;
    assert!(s.converge(&children, "app:1").await.is_empty());
    assert!(s.requests().is_empty(), "a status change is no drift");

    let edit = json!({"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "evil:1"}]}}}});
    s.deployments
        .patch("child", &PatchParams::default(), &Patch::Strategic(&edit))
        .await
        .expect("edit");
    let selector = json!({"spec": {"selector": {"app": "other"}}});
    s.services
        .patch("child", &PatchParams::default(), &Patch::Merge(&selector))
        .await
        .expect("edit");
    s.caught_up().await;
    assert_eq!(
        s.converge(&children, "app:1").await,
        ["applied Deployment child", "applied Service child"]
    );
    assert_eq!(
        s.requests(),
        [
            "get deployments",
            "patch deployments",
            "get services",
            "patch services"
        ],
        "each edited child is read once, then restored"
    );
    assert_eq!(s.image().await, "app:1");
    let service = s.services.get("child").await.expect("service");
    assert_eq!(
        service.spec.and_then(|s| s.selector),
        Some([("app".to_string(), "test".to_string())].into())
    );
    s.caught_up().await;
    assert!(s.converge(&children, "app:1").await.is_empty());
    assert!(s.requests().is_empty());
}

#[tokio::test]
async fn another_managers_field_costs_one_read_and_survives() {
    let s = setup().await;
    let children = s.process();
    s.converge(&children, "app:1").await;
    s.caught_up().await;
    let theirs = json!({"spec": {"template": {"metadata": {"annotations": {"team": "ml"}}}}});
    s.deployments
        .patch("child", &PatchParams::default(), &Patch::Merge(&theirs))
        .await
        .expect("annotate");
    s.caught_up().await;
    assert!(s.converge(&children, "app:1").await.is_empty());
    assert_eq!(s.requests(), ["get deployments"], "read once, not written");
    assert!(s.converge(&children, "app:1").await.is_empty());
    assert!(s.requests().is_empty(), "and not read again");
}

#[tokio::test]
async fn a_restarted_process_reads_each_child_once_and_writes_nothing() {
    let s = setup().await;
    s.converge(&s.process(), "app:1").await;
    s.caught_up().await;
    let restarted = s.process();
    assert!(s.converge(&restarted, "app:1").await.is_empty());
    assert_eq!(s.requests(), ["get deployments", "get services"]);
    assert!(s.converge(&restarted, "app:1").await.is_empty());
    assert!(s.requests().is_empty());
    assert_eq!(
        s.converge(&restarted, "app:2").await,
        ["applied Deployment child"],
        "a new desired state is written without a read"
    );
    assert_eq!(s.requests(), ["patch deployments"]);
    assert_eq!(s.image().await, "app:2");
}

#[tokio::test]
async fn a_label_changed_by_hand_is_restored_and_one_added_by_another_survives() {
    let s = setup().await;
    let children = s.process();
    s.converge(&children, "app:1").await;
    s.caught_up().await;
    s.requests();

    let added = json!({"metadata": {"labels": {"team": "search"}, "annotations": {"note": "x"}}});
    s.services
        .patch("child", &PatchParams::default(), &Patch::Merge(&added))
        .await
        .expect("label");
    s.caught_up().await;
    assert!(s.converge(&children, "app:1").await.is_empty());
    assert_eq!(
        s.requests(),
        ["get services"],
        "a label of another is no drift"
    );

    // Our labels stay ours: the cache shows the change, so no read is needed.
    let changed = json!({"metadata": {"labels": {"tier": "other"}}});
    s.services
        .patch("child", &PatchParams::default(), &Patch::Merge(&changed))
        .await
        .expect("label");
    s.caught_up().await;
    assert_eq!(
        s.converge(&children, "app:1").await,
        ["applied Service child"]
    );
    assert_eq!(s.requests(), ["patch services"]);
    let labels = s
        .services
        .get("child")
        .await
        .expect("service")
        .metadata
        .labels;
    assert_eq!(
        labels,
        Some(
            [("app", "test"), ("team", "search"), ("tier", "child")]
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .into()
        )
    );
}
