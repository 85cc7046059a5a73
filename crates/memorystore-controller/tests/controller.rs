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
use kaos_harness::cluster::TestCluster;
use kaos_harness::controller::ControllerTest;
use kaos_harness::deployments::env_value;
use kaos_harness::fixtures::*;
use kaos_harness::status::Phased;
use kube::ResourceExt;
use memorystore_controller::settings::Args;

fn start() -> ControllerTest {
    let args = Args::try_parse_from([
        "memorystore-controller",
        "--default-memory-service-image=kaos-memory:test",
    ])
    .expect("flags");
    ControllerTest::start(
        TestCluster::start(),
        memorystore_controller::ID,
        args.runtime,
        |runtime| memorystore_controller::controller::run(runtime, args.settings),
    )
}

/// The store under test: `brain`, summarizing on ModelAPI `llm` and embedding on `embedder`.
fn brain() -> MemoryStore {
    MemoryStore::test("brain")
        .summarization("llm", "gpt-4o-mini")
        .embedding("embedder", "text-embedding-3-small")
}

async fn until(
    cluster: &TestCluster,
    what: &str,
    check: impl Fn(&MemoryStore) -> bool,
) -> MemoryStore {
    cluster.until("brain", what, check).await
}

/// Both ModelAPIs the store names, Ready.
async fn model_apis_ready(cluster: &TestCluster) {
    for name in ["llm", "embedder"] {
        cluster
            .apply_with_status(&ModelAPI::test(name).ready())
            .await;
    }
}

#[tokio::test]
async fn a_store_waits_for_both_model_apis_then_serves_on_its_claim() {
    let h = start();
    h.apply(&brain());
    let waiting = until(&h, "waiting for its summarization ModelAPI", |s| {
        s.message() == "summarization ModelAPI \"llm\" not found"
    })
    .await;
    assert_eq!(waiting.phase(), Some(Phase::Pending));
    h.apply_with_status(&ModelAPI::test("llm").ready()).await;
    until(&h, "waiting for its embedding ModelAPI", |s| {
        s.message() == "embedding ModelAPI \"embedder\" not found"
    })
    .await;
    let embedder = ModelAPI::test("embedder");
    h.apply_with_status(&embedder.clone().pending()).await;
    until(&h, "waiting for the embedding ModelAPI to be ready", |s| {
        s.message() == "embedding ModelAPI \"embedder\" is not ready"
    })
    .await;
    assert!(
        h.get_opt::<Deployment>("memorystore-brain").await.is_none(),
        "nothing is created while a ModelAPI is awaited"
    );

    h.apply_with_status(&embedder.ready()).await;
    let ready = h.until_phase::<MemoryStore>("brain", Phase::Ready).await;
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
    let deployment = h.get::<Deployment>("memorystore-brain").await;
    assert_eq!(
        env_value(&deployment, "KAOS_MEMORY_MODEL_BASE_URL").as_deref(),
        Some("http://modelapi-llm.default.svc.cluster.local:8000/v1")
    );
    assert!(h.get_opt::<Service>("memorystore-brain").await.is_some());
    let claim = h
        .get::<PersistentVolumeClaim>("memorystore-brain-data")
        .await;
    assert_eq!(claim.owner_references()[0].kind, "MemoryStore");

    // Idle: no reconcile writes anything.
    h.assert_no_writes_during(Duration::from_millis(600)).await;
}

#[tokio::test]
async fn a_model_api_change_reaches_the_store_and_an_unready_one_holds_it_pending() {
    let h = start();
    model_apis_ready(&h).await;
    h.apply(&brain());
    h.until_phase::<MemoryStore>("brain", Phase::Ready).await;

    let moved = ModelAPI::test("llm").ready_at("http://llm.elsewhere:8000");
    h.apply_with_status(&moved).await;
    h.until(
        "memorystore-brain",
        "rolled to the new base URL",
        |d: &Deployment| {
            env_value(d, "KAOS_MEMORY_MODEL_BASE_URL").as_deref()
                == Some("http://llm.elsewhere:8000/v1")
        },
    )
    .await;

    h.apply_with_status(&ModelAPI::test("embedder").pending())
        .await;
    let held = h.until_phase::<MemoryStore>("brain", Phase::Pending).await;
    assert_eq!(
        held.message(),
        "embedding ModelAPI \"embedder\" is not ready"
    );
    assert!(
        h.get_opt::<Deployment>("memorystore-brain").await.is_some(),
        "what runs is left running while the store waits"
    );
}

#[tokio::test]
async fn the_claim_is_created_once_and_the_budget_follows_the_replicas() {
    let h = start();
    model_apis_ready(&h).await;
    h.apply(&brain().persistent_volume("1Gi"));
    h.until_phase::<MemoryStore>("brain", Phase::Ready).await;
    h.apply(&brain().persistent_volume("9Gi"));
    // Reconciled at the new generation: the claim was looked at with the new size.
    until(&h, "the new size reconciled", |s| {
        s.status.as_ref().and_then(|s| s.observed_generation) == s.metadata.generation
            && s.metadata.generation > Some(1)
    })
    .await;
    let claim = h
        .get::<PersistentVolumeClaim>("memorystore-brain-data")
        .await;
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

    let external = brain().external("pg", "dsn");
    h.apply(&external);
    let budget = h
        .until(
            "memorystore-brain",
            "made at two pods",
            |_: &PodDisruptionBudget| true,
        )
        .await;
    assert_eq!(budget.owner_references()[0].kind, "MemoryStore");
    let store = until(&h, "the missing DSN Secret reported", |s| {
        s.message().contains("pg")
    })
    .await;
    assert!(store.message().contains("Secret"), "{}", store.message());
    h.apply(&external.replicas(1));
    h.until_gone::<PodDisruptionBudget>("memorystore-brain")
        .await;
}

#[tokio::test]
async fn a_claim_of_that_name_we_do_not_own_is_never_taken_over() {
    let h = start();
    model_apis_ready(&h).await;
    h.apply_yaml(
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: memorystore-brain-data, namespace: default}\nspec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 3Gi}}}\n",
    );
    h.apply(&brain());
    let store = until(&h, "the conflict reported", |s| {
        s.message().contains("not owned")
    })
    .await;
    assert_eq!(store.phase(), Some(Phase::Failed));
    assert!(
        store
            .message()
            .contains("PersistentVolumeClaim default/memorystore-brain-data"),
        "{}",
        store.message()
    );
}
