//! The MemoryStore controller against kaos-testkit with the deployment simulator. ModelAPI
//! statuses are written by the tests, as the ModelAPI controller would.

use std::time::Duration;

use clap::Parser;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kaos_api::common::Phase;
use kaos_api::memorystore::MemoryStore;
use kaos_api::modelapi::ModelAPI;
use kaos_harness::cluster::{TestCluster, eventually};
use kaos_runtime::Runtime;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use memorystore_controller::settings::Args;
use serde_json::{Value, json};

struct Harness {
    cluster: TestCluster,
    stores: Api<MemoryStore>,
    deployments: Api<Deployment>,
    _stop: tokio::sync::watch::Sender<bool>,
}

async fn start() -> Harness {
    let cluster = TestCluster::start();
    let args = Args::try_parse_from([
        "memorystore-controller",
        "--default-memory-service-image=kaos-memory:test",
    ])
    .expect("flags");
    let (runtime, stop) = Runtime::for_tests(
        cluster.client.clone(),
        memorystore_controller::ID,
        args.runtime,
    );
    tokio::spawn(memorystore_controller::controller::run(
        runtime,
        args.settings,
    ));
    Harness {
        stores: Api::default_namespaced(cluster.client.clone()),
        deployments: Api::default_namespaced(cluster.client.clone()),
        cluster,
        _stop: stop,
    }
}

fn apply(h: &Harness, kind: &str, name: &str, spec: Value) {
    let manifest = json!({"apiVersion": "kaos.tools/v1alpha1", "kind": kind,
        "metadata": {"name": name, "namespace": "default"}, "spec": spec});
    h.cluster.apply(&manifest.to_string());
}

/// A ModelAPI `name` with the status its controller would write.
async fn model_api(h: &Harness, name: &str, ready: bool, endpoint: &str) {
    apply(
        h,
        "ModelAPI",
        name,
        json!({"mode": "Proxy", "proxyConfig": {"models": ["*"]}}),
    );
    let api: Api<ModelAPI> = Api::default_namespaced(h.cluster.client.clone());
    let status = json!({"status": {"ready": ready, "phase": if ready { "Ready" } else { "Pending" },
                                   "endpoint": endpoint}});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("status");
}

fn spec(storage: Value) -> Value {
    json!({"storage": storage,
           "models": {"summarization": {"modelAPI": "llm", "model": "gpt-4o-mini"},
                      "embedding": {"modelAPI": "embedder", "model": "text-embedding-3-small"}}})
}

async fn until(h: &Harness, what: &str, check: impl Fn(&MemoryStore) -> bool) -> MemoryStore {
    eventually(what, || async {
        h.stores.get("brain").await.ok().filter(|s| check(s))
    })
    .await
}

fn message(s: &MemoryStore) -> String {
    s.status
        .as_ref()
        .and_then(|s| s.message.clone())
        .unwrap_or_default()
}

fn phase(s: &MemoryStore) -> Option<Phase> {
    s.status.as_ref().and_then(|s| s.phase)
}

fn env_value(d: &Deployment, name: &str) -> Option<String> {
    d.spec.as_ref()?.template.spec.as_ref()?.containers[0]
        .env
        .iter()
        .flatten()
        .find(|e| e.name == name)
        .and_then(|e| e.value.clone())
}

const LLM: &str = "http://modelapi-llm.default.svc.cluster.local:8000";
const EMBEDDER: &str = "http://modelapi-embedder.default.svc.cluster.local:8000";

/// Both ModelAPIs a store names, Ready.
async fn model_apis_ready(h: &Harness) {
    model_api(h, "llm", true, LLM).await;
    model_api(h, "embedder", true, EMBEDDER).await;
}

#[tokio::test]
async fn a_store_waits_for_both_model_apis_then_serves_on_its_claim() {
    let h = start().await;
    apply(&h, "MemoryStore", "brain", spec(json!({"type": "local"})));
    let waiting = until(&h, "waiting for its summarization ModelAPI", |s| {
        message(s) == "summarization ModelAPI \"llm\" not found"
    })
    .await;
    assert_eq!(phase(&waiting), Some(Phase::Pending));
    model_api(&h, "llm", true, LLM).await;
    until(&h, "waiting for its embedding ModelAPI", |s| {
        message(s) == "embedding ModelAPI \"embedder\" not found"
    })
    .await;
    model_api(&h, "embedder", false, EMBEDDER).await;
    until(&h, "waiting for the embedding ModelAPI to be ready", |s| {
        message(s) == "embedding ModelAPI \"embedder\" is not ready"
    })
    .await;
    assert!(
        h.deployments
            .get_opt("memorystore-brain")
            .await
            .expect("get")
            .is_none(),
        "nothing is created while a ModelAPI is awaited"
    );

    model_api(&h, "embedder", true, EMBEDDER).await;
    let ready = until(&h, "Ready", |s| phase(s) == Some(Phase::Ready)).await;
    let status = ready.status.expect("status");
    assert!(status.ready);
    assert_eq!(
        status.endpoint.as_deref(),
        Some("http://memorystore-brain.default.svc.cluster.local:8080")
    );
    assert_eq!(
        status.message.as_deref(),
        Some("Deployment ready replicas: 1/1")
    );
    assert!(
        ready.metadata.finalizers.is_none(),
        "no finalizer, as in KAOS"
    );
    let deployment = h
        .deployments
        .get("memorystore-brain")
        .await
        .expect("deployment");
    assert_eq!(
        env_value(&deployment, "KAOS_MEMORY_MODEL_BASE_URL").as_deref(),
        Some("http://modelapi-llm.default.svc.cluster.local:8000/v1")
    );
    let services: Api<Service> = Api::default_namespaced(h.cluster.client.clone());
    assert!(
        services
            .get_opt("memorystore-brain")
            .await
            .expect("get")
            .is_some()
    );
    let claims: Api<PersistentVolumeClaim> = Api::default_namespaced(h.cluster.client.clone());
    let claim = claims.get("memorystore-brain-data").await.expect("claim");
    assert_eq!(claim.owner_references()[0].kind, "MemoryStore");

    // Idle: no reconcile writes anything.
    let writes = h.cluster.writes_during(Duration::from_millis(600)).await;
    assert!(writes.is_empty(), "steady state writes nothing: {writes:?}");
}

#[tokio::test]
async fn a_model_api_change_reaches_the_store_and_an_unready_one_holds_it_pending() {
    let h = start().await;
    model_apis_ready(&h).await;
    apply(&h, "MemoryStore", "brain", spec(json!({"type": "local"})));
    until(&h, "Ready", |s| phase(s) == Some(Phase::Ready)).await;

    model_api(&h, "llm", true, "http://llm.elsewhere:8000").await;
    eventually("the new base URL rolls the store", || async {
        let d = h.deployments.get("memorystore-brain").await.ok()?;
        (env_value(&d, "KAOS_MEMORY_MODEL_BASE_URL").as_deref()
            == Some("http://llm.elsewhere:8000/v1"))
        .then_some(())
    })
    .await;

    model_api(&h, "embedder", false, EMBEDDER).await;
    let held = until(&h, "held Pending", |s| phase(s) == Some(Phase::Pending)).await;
    assert_eq!(
        message(&held),
        "embedding ModelAPI \"embedder\" is not ready"
    );
    assert!(
        h.deployments
            .get_opt("memorystore-brain")
            .await
            .expect("get")
            .is_some(),
        "what runs is left running while the store waits"
    );
}

#[tokio::test]
async fn the_claim_is_created_once_and_the_budget_follows_the_replicas() {
    let h = start().await;
    model_apis_ready(&h).await;
    apply(
        &h,
        "MemoryStore",
        "brain",
        spec(json!({"type": "local", "local": {"persistentVolume": {"size": "1Gi"}}})),
    );
    until(&h, "Ready", |s| phase(s) == Some(Phase::Ready)).await;
    apply(
        &h,
        "MemoryStore",
        "brain",
        spec(json!({"type": "local", "local": {"persistentVolume": {"size": "9Gi"}}})),
    );
    // Reconciled at the new generation: the claim was looked at with the new size.
    until(&h, "the new size reconciled", |s| {
        s.status.as_ref().and_then(|s| s.observed_generation) == s.metadata.generation
            && s.metadata.generation > Some(1)
    })
    .await;
    let claims: Api<PersistentVolumeClaim> = Api::default_namespaced(h.cluster.client.clone());
    let claim = claims.get("memorystore-brain-data").await.expect("claim");
    let size = claim
        .spec
        .and_then(|s| s.resources)
        .and_then(|r| r.requests)
        .and_then(|r| r.get("storage").cloned());
    assert_eq!(
        size.map(|q| q.0).as_deref(),
        Some("1Gi"),
        "a claim is never resized by us"
    );

    let budgets: Api<PodDisruptionBudget> = Api::default_namespaced(h.cluster.client.clone());
    let mut external = spec(json!({"type": "external", "external": {
        "connectionSecretRef": {"name": "pg", "key": "dsn"}}}));
    apply(&h, "MemoryStore", "brain", external.clone());
    let budget = eventually("a budget at two pods", || async {
        budgets.get_opt("memorystore-brain").await.ok().flatten()
    })
    .await;
    assert_eq!(budget.owner_references()[0].kind, "MemoryStore");
    let store = until(&h, "the missing DSN Secret reported", |s| {
        message(s).contains("pg")
    })
    .await;
    assert!(message(&store).contains("Secret"), "{}", message(&store));
    external["replicas"] = json!(1);
    apply(&h, "MemoryStore", "brain", external);
    eventually("the budget goes at one pod", || async {
        budgets
            .get_opt("memorystore-brain")
            .await
            .ok()
            .and_then(|b| b.is_none().then_some(()))
    })
    .await;
}

#[tokio::test]
async fn a_claim_of_that_name_we_do_not_own_is_never_taken_over() {
    let h = start().await;
    model_apis_ready(&h).await;
    h.cluster.apply(
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: memorystore-brain-data, namespace: default}\nspec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 3Gi}}}\n",
    );
    apply(&h, "MemoryStore", "brain", spec(json!({"type": "local"})));
    let store = until(&h, "the conflict reported", |s| {
        message(s).contains("not owned")
    })
    .await;
    assert_eq!(phase(&store), Some(Phase::Failed));
    assert!(
        message(&store).contains("PersistentVolumeClaim default/memorystore-brain-data"),
        "{}",
        message(&store)
    );
}
