//! The converge path against kaos-testkit: a child is written when it differs from the cache and
//! not again while the cache catches up, a hand edit is reverted, fields of other managers
//! survive, an object we do not own is never touched, absent children go; a status is written
//! once per change and fields no longer set are removed.

use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use k8s_openapi::api::core::v1::ConfigMap;
use kaos_api::agent::{Agent, AgentStatus};
use kaos_api::common::WorkloadStatus;
use kaos_runtime::{ControllerId, Runtime, RuntimeArgs};
use kaos_testkit::{ApiServer, Cluster};
use kaos_workload::cache::child_store::child_store;
use kaos_workload::converge::{Children, Parent};
use kaos_workload::desired::{Child, ChildSet, ChildType};
use kaos_workload::reconcile::{Core, status_digest};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

mod common;

const MANAGER: &str = "kaos-test-controller";

fn writes(api: &ApiServer) -> Vec<String> {
    api.audit
        .records()
        .iter()
        .filter(|r| r.is_write())
        .map(|r| format!("{} {}", r.verb, r.path))
        .collect()
}

fn child(name: &str, data: &str, owner_uid: &str) -> ConfigMap {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "test"},
                     "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "parent", "uid": owner_uid, "controller": true}]},
        "data": {"config": data}
    }))
    .expect("configmap")
}

/// The `config` entry the children carry.
fn config(config_map: &ConfigMap) -> Option<&str> {
    config_map.data.as_ref()?.get("config").map(String::as_str)
}

struct Setup {
    api: ApiServer,
    cms: Api<ConfigMap>,
    children: Children,
    client: Client,
    uid: String,
}

/// A parent ConfigMap and the children caches, with the ConfigMap cache driven in the background.
async fn setup() -> Setup {
    let api = ApiServer::new(Cluster::default());
    let client = Client::new(api.clone().router(), "default");
    let uid = common::create_parent(&client).await;
    let config_maps = common::synced_cache::<ConfigMap>(&client).await;
    let children = common::children(child_store().0, child_store().0, Some(config_maps));
    Setup {
        api,
        cms: Api::default_namespaced(client.clone()),
        children,
        client,
        uid,
    }
}

impl Setup {
    fn parent(&self) -> Parent<'_> {
        Parent {
            namespace: "default",
            uid: &self.uid,
            field_manager: MANAGER,
            client: &self.client,
        }
    }

    async fn converge(&self, set: ChildSet) -> kaos_workload::converge::Converged {
        self.children
            .converge(&self.parent(), set)
            .await
            .expect("converge")
    }

    fn set(&self, data: &str) -> ChildSet {
        ChildSet {
            apply: vec![Child::new(child("child", data, &self.uid))],
            absent: Vec::new(),
            ..Default::default()
        }
    }

    async fn cached(&self, name: &str, check: impl Fn(&ConfigMap) -> bool) {
        let store = self.children.config_maps.as_ref().expect("store");
        for _ in 0..200 {
            if store.get("default", name).is_some_and(|c| check(&c)) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the cache never showed {name} as expected");
    }
}

#[tokio::test]
async fn a_child_is_written_once_per_change_even_before_the_cache_shows_it() {
    let s = setup().await;
    let first = s.converge(s.set("v1")).await;
    assert_eq!(first.changes, ["applied ConfigMap child"]);
    // Immediately again: the cache may not show the write yet; nothing is sent either way.
    let before = writes(&s.api);
    assert!(s.converge(s.set("v1")).await.changes.is_empty());
    s.cached("child", |_| true).await;
    assert!(s.converge(s.set("v1")).await.changes.is_empty());
    assert_eq!(
        writes(&s.api),
        before,
        "same desired state: no write at all"
    );

    assert_eq!(
        s.converge(s.set("v2")).await.changes,
        ["applied ConfigMap child"]
    );
    let stored = s.cms.get("child").await.expect("child");
    assert_eq!(config(&stored), Some("v2"));
}

#[tokio::test]
async fn a_hand_edit_is_reverted_and_another_managers_label_survives() {
    let s = setup().await;
    s.converge(s.set("v1")).await;
    s.cached("child", |_| true).await;
    let edit = json!({"metadata": {"labels": {"team": "ml"}}, "data": {"config": "hacked"}});
    s.cms
        .patch("child", &PatchParams::default(), &Patch::Merge(&edit))
        .await
        .expect("edit");
    s.cached("child", |c| config(c) == Some("hacked")).await;
    assert_eq!(
        s.converge(s.set("v1")).await.changes,
        ["applied ConfigMap child"],
        "drift is reverted"
    );
    let stored = s.cms.get("child").await.expect("child");
    assert_eq!(config(&stored), Some("v1"));
    assert_eq!(
        stored
            .metadata
            .labels
            .and_then(|l| l.get("team").cloned())
            .as_deref(),
        Some("ml"),
        "a field we do not set is kept"
    );
    s.cached("child", |c| c.labels().get("team").is_some())
        .await;
    s.cached("child", |c| config(c) == Some("v1")).await;
    assert!(
        s.converge(s.set("v1")).await.changes.is_empty(),
        "a label of another manager is not drift"
    );
}

#[tokio::test]
async fn an_object_we_do_not_own_is_reported_and_left_untouched() {
    let s = setup().await;
    let foreign: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": "child"}, "data": {"config": "theirs"}}),
    )
    .expect("cm");
    s.cms
        .create(&PostParams::default(), &foreign)
        .await
        .expect("foreign");
    let before = writes(&s.api);
    let converged = s.converge(s.set("v1")).await;
    assert!(converged.changes.is_empty());
    assert_eq!(converged.conflicts.len(), 1);
    let (reason, message) = converged.problem().expect("problem");
    assert_eq!(reason, "ChildConflict");
    assert!(
        message.contains("ConfigMap default/child already exists and is not owned"),
        "{message}"
    );
    assert_eq!(writes(&s.api), before, "nothing written");
    let stored = s.cms.get("child").await.expect("child");
    assert_eq!(config(&stored), Some("theirs"));
    assert!(stored.metadata.owner_references.is_none(), "not adopted");

    s.cms
        .delete("child", &Default::default())
        .await
        .expect("delete");
    let converged = s.converge(s.set("v1")).await;
    assert!(converged.conflicts.is_empty(), "recovers once it is gone");
    assert_eq!(converged.changes, ["applied ConfigMap child"]);
}

#[tokio::test]
async fn absent_children_are_deleted_by_name_only_when_we_control_them() {
    let s = setup().await;
    s.converge(ChildSet {
        apply: vec![
            Child::new(child("a", "1", &s.uid)),
            Child::new(child("b", "1", &s.uid)),
        ],
        absent: Vec::new(),
        ..Default::default()
    })
    .await;
    s.cached("b", |_| true).await;
    let converged = s
        .converge(ChildSet {
            apply: vec![Child::new(child("a", "1", &s.uid))],
            absent: vec![
                (ConfigMap::KIND, "b".into()),
                (ConfigMap::KIND, "parent".into()),
            ],
            ..Default::default()
        })
        .await;
    assert_eq!(converged.changes, ["deleted ConfigMap b"]);
    assert!(s.cms.get_opt("b").await.expect("get").is_none());
    assert!(
        s.cms.get_opt("parent").await.expect("get").is_some(),
        "not ours"
    );
}

/// A testkit with the CRDs and a leading controller's Core for Agents (finalizer
/// `kaos.tools/test`), with no memory of earlier writes; the last is its stop switch.
fn agent_core() -> (ApiServer, Client, Core, tokio::sync::watch::Sender<bool>) {
    let api = ApiServer::new(Cluster::default());
    let crds = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds");
    kaos_testkit::manifests::apply_path(&api.cluster, &crds).expect("CRDs");
    let client = Client::new(api.clone().router(), "default");
    #[derive(Parser)]
    struct Args {
        #[command(flatten)]
        runtime: RuntimeArgs,
    }
    let id = ControllerId {
        name: "test",
        lease: MANAGER,
        kinds: &[],
    };
    let args = Args::try_parse_from(["test"]).expect("args").runtime;
    let (runtime, stop) = Runtime::for_tests(client.clone(), id, args);
    runtime.mark_ready_when(Vec::new());
    let children = common::children(child_store().0, child_store().0, None);
    let core = Core::new(runtime, children, Some("kaos.tools/test"));
    (api, client, core, stop)
}

/// Writes `status` as a reconcile of the object read back from the server would: with the
/// digest of the status it holds. True when a write was sent.
async fn write_over_stored(core: &Core, stored: &Agent, status: &AgentStatus) -> bool {
    let digest = stored.status.as_ref().map(status_digest);
    core.write_status(stored, digest, status, None)
        .await
        .expect("status")
}

#[tokio::test]
async fn status_is_written_once_per_change_and_dropped_fields_go() {
    let (api, client, core, _stop) = agent_core();
    let agents: Api<Agent> = Api::default_namespaced(client);
    let agent: Agent =
        serde_json::from_value(json!({"apiVersion": "kaos.tools/v1alpha1", "kind": "Agent",
        "metadata": {"name": "a"}, "spec": {"modelAPI": "m", "model": "x"}}))
        .expect("agent");
    let created = agents
        .create(&PostParams::default(), &agent)
        .await
        .expect("create");

    let with_endpoint = AgentStatus {
        workload: WorkloadStatus {
            ready: true,
            endpoint: Some("http://agent-a.default.svc.cluster.local:8000".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    assert!(
        core.write_status(&created, None, &with_endpoint, None)
            .await
            .expect("status")
    );
    let before = writes(&api);
    assert!(
        !core
            .write_status(&created, None, &with_endpoint, None)
            .await
            .expect("status"),
        "the object in hand is stale (no status yet), but this write was just made"
    );
    let stored = agents.get("a").await.expect("get");
    assert_eq!(stored.status.as_ref(), Some(&with_endpoint));
    assert!(!write_over_stored(&core, &stored, &with_endpoint).await);
    assert_eq!(writes(&api), before);

    let without = AgentStatus::default();
    assert!(write_over_stored(&core, &stored, &without).await);
    let stored = agents.get("a").await.expect("get").status.expect("status");
    assert_eq!(
        stored.endpoint, None,
        "a field the controller stopped setting is removed"
    );
}

/// A new leader (no memory of writes, its Deployment cache not showing the child yet) applies a
/// Deployment the server already holds as desired: the write changes nothing and answers with
/// the version of the deployment controller's last status write. That version is not the echo
/// of our write: its event must still wake the owner (else the owner keeps the status it wrote
/// without seeing the Deployment, e.g. "ready replicas: 0/0", for good).
#[tokio::test]
async fn a_write_that_changed_nothing_does_not_claim_another_writers_version() {
    use k8s_openapi::api::apps::v1::Deployment;
    let s = setup().await;
    let deployment: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "work", "namespace": "default", "labels": {"app": "test"},
                     "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "parent",
                                          "uid": s.uid, "controller": true}]},
        "spec": {"selector": {"matchLabels": {"app": "test"}},
                 "template": {"metadata": {"labels": {"app": "test"}},
                              "spec": {"containers": [{"name": "c", "image": "i"}]}}}
    }))
    .expect("deployment");
    let set = || ChildSet {
        apply: vec![Child::new(deployment.clone())],
        ..Default::default()
    };
    // The first leader creates it; the deployment controller then reports its rollout.
    assert_eq!(s.converge(set()).await.changes, ["applied Deployment work"]);
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::default_namespaced(s.client.clone());
    let rolled_out = deployments
        .patch_status(
            "work",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"replicas": 1, "readyReplicas": 1}})),
        )
        .await
        .expect("status");
    let status_version = rolled_out.resource_version();

    // The new leader: fresh expectations, an empty Deployment cache.
    let new_leader = Children {
        expectations: Arc::default(),
        ..s.children.clone()
    };
    new_leader
        .converge(&s.parent(), set())
        .await
        .expect("converge");
    let key = ("Deployment", "default".to_string(), "work".to_string());
    assert!(
        !new_leader
            .expectations
            .is_own_write(&key, status_version.as_deref()),
        "the status write's event would be taken for the echo of a write that changed nothing"
    );
}

/// The finalizer is added in the reconcile's first pass, and a cache that does not show it yet
/// holds no later reconcile up: after this process's own write nothing is sent again; after
/// another process's (a leader since replaced), the refused write reads the server's object and
/// the reconcile goes on from it instead of failing until the watch catches up.
#[tokio::test]
async fn a_finalizer_the_cache_does_not_show_yet_holds_no_reconcile_up() {
    let (api, client, core, _stop) = agent_core();
    let agents: Api<Agent> = Api::default_namespaced(client);
    let agent: Agent = serde_json::from_value(json!({"apiVersion": "kaos.tools/v1alpha1",
        "kind": "Agent", "metadata": {"name": "a"}, "spec": {"modelAPI": "m", "model": "x"}}))
    .expect("agent");
    let cached = Arc::new(
        agents
            .create(&PostParams::default(), &agent)
            .await
            .expect("create"),
    );
    let reconcile = |core: Core, object: Arc<Agent>| async move {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let record = seen.clone();
        core.reconcile(object, |held| async move {
            *record.lock().expect("lock") = held.finalizers().to_vec();
            Ok(kube::runtime::controller::Action::await_change())
        })
        .await
        .expect("the reconcile succeeds");
        seen.lock().expect("lock").clone()
    };

    assert_eq!(
        reconcile(core.clone(), cached.clone()).await,
        ["kaos.tools/test"],
        "the work runs on the object as written, finalizer and all"
    );
    let after_first = writes(&api);
    let agent_path = "/apis/kaos.tools/v1alpha1/namespaces/default/agents";
    assert_eq!(
        after_first,
        [
            format!("create {agent_path}"),
            format!("patch {agent_path}/a")
        ]
    );

    reconcile(core.clone(), cached.clone()).await;
    assert_eq!(
        writes(&api),
        after_first,
        "the cache is behind this process's own write: nothing is sent again"
    );

    let before_new_leader = api.audit.records().len();
    let new_leader = Core::new(
        core.runtime.clone(),
        Children {
            expectations: Arc::default(),
            ..core.children.clone()
        },
        Some("kaos.tools/test"),
    );
    assert_eq!(
        reconcile(new_leader, cached).await,
        ["kaos.tools/test"],
        "a new leader on the stale cache goes on from the server's object"
    );
    let refused_then_read: Vec<_> = api.audit.records()[before_new_leader..]
        .iter()
        .map(|r| format!("{} {} {}", r.verb, r.path, r.code))
        .collect();
    assert_eq!(
        refused_then_read,
        [
            format!("patch {agent_path}/a 422"),
            format!("get {agent_path}/a 200")
        ]
    );
    let finalizers = agents.get("a").await.expect("get").finalizers().to_vec();
    assert_eq!(finalizers, ["kaos.tools/test"], "added once");
}
