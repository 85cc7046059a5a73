//! The child and status helpers against kaos-testkit: writes happen only when the desired state
//! changes, fields other managers set survive, orphans go, status fields no longer set are removed.

use k8s_openapi::api::core::v1::ConfigMap;
use kaos_api::agent::{Agent, AgentStatus};
use kaos_runtime::children::{apply_if_changed, apply_status, delete_orphans};
use kaos_testkit::{ApiServer, Cluster};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

const MANAGER: &str = "kaos-test-controller";

fn writes(api: &ApiServer) -> usize {
    api.audit.records().iter().filter(|r| r.is_write()).count()
}

fn child(data: &str, owner_uid: &str) -> ConfigMap {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "child", "namespace": "default",
                     "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "parent", "uid": owner_uid, "controller": true}]},
        "data": {"config": data}
    }))
    .expect("configmap")
}

#[tokio::test]
async fn children_are_written_only_when_their_desired_state_changes() {
    let api = ApiServer::new(Cluster::default());
    let client = Client::new(api.clone().router(), "default");
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    let parent: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "parent"}})).expect("cm");
    let parent = cms
        .create(&PostParams::default(), &parent)
        .await
        .expect("parent");
    let uid = parent.uid().expect("uid");

    assert!(
        apply_if_changed(&cms, MANAGER, None, child("v1", &uid))
            .await
            .expect("apply")
    );
    let observed = cms.get("child").await.expect("child");
    let before = writes(&api);
    assert!(
        !apply_if_changed(&cms, MANAGER, Some(&observed.metadata), child("v1", &uid))
            .await
            .expect("apply")
    );
    assert_eq!(
        writes(&api),
        before,
        "same desired state: no request at all"
    );

    // A label a user adds survives the controller's next apply.
    let label = json!({"metadata": {"labels": {"team": "ml"}}});
    cms.patch("child", &PatchParams::default(), &Patch::Merge(&label))
        .await
        .expect("user label");
    let observed = cms.get("child").await.expect("child");
    assert!(
        apply_if_changed(&cms, MANAGER, Some(&observed.metadata), child("v2", &uid))
            .await
            .expect("apply")
    );
    let updated = cms.get("child").await.expect("child");
    assert_eq!(updated.data.as_ref().expect("data")["config"], "v2");
    assert_eq!(updated.labels().get("team").map(String::as_str), Some("ml"));

    // Orphans: children of this owner not in the keep list are deleted.
    let all = cms.list(&Default::default()).await.expect("list");
    let metas: Vec<_> = all.items.iter().map(|c| c.metadata.clone()).collect();
    assert!(
        delete_orphans(&cms, &metas, &uid, &["child"])
            .await
            .expect("nothing to delete")
            .is_empty()
    );
    assert_eq!(
        delete_orphans(&cms, &metas, &uid, &[])
            .await
            .expect("deleted"),
        ["child"]
    );
    assert!(cms.get("child").await.is_err());
    assert!(cms.get("parent").await.is_ok(), "not a child of itself");
}

#[tokio::test]
async fn status_is_written_only_when_it_changes_and_dropped_fields_go() {
    let api = ApiServer::new(Cluster::default());
    let crds = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds");
    kaos_testkit::manifests::apply_path(&api.cluster, &crds).expect("CRDs");
    let client = Client::new(api.clone().router(), "default");
    let agents: Api<Agent> = Api::default_namespaced(client);
    let agent: Agent =
        serde_json::from_value(json!({"apiVersion": "kaos.tools/v1alpha1", "kind": "Agent",
        "metadata": {"name": "a"}, "spec": {"modelAPI": "m", "model": "x"}}))
        .expect("agent");
    agents
        .create(&PostParams::default(), &agent)
        .await
        .expect("create");

    let with_endpoint = AgentStatus {
        ready: true,
        endpoint: Some("http://agent-a.default.svc.cluster.local:8000".into()),
        ..Default::default()
    };
    assert!(
        apply_status(&agents, MANAGER, "a", None, &with_endpoint)
            .await
            .expect("status")
    );
    let stored = agents.get("a").await.expect("get").status.expect("status");
    assert_eq!(stored, with_endpoint);
    let before = writes(&api);
    assert!(
        !apply_status(&agents, MANAGER, "a", Some(&stored), &with_endpoint)
            .await
            .expect("status")
    );
    assert_eq!(writes(&api), before);

    let without = AgentStatus {
        ready: false,
        ..Default::default()
    };
    assert!(
        apply_status(&agents, MANAGER, "a", Some(&stored), &without)
            .await
            .expect("status")
    );
    let stored = agents.get("a").await.expect("get").status.expect("status");
    assert_eq!(
        stored.endpoint, None,
        "a field the controller stopped setting is removed"
    );
}
