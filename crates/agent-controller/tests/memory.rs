//! An Agent bound to a MemoryStore on kaos-testkit: it waits for the store before its first
//! Deployment, then reports the store's health in `MemoryDegraded` without rolling its pods.

mod support;

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use kaos_api::agent::{Agent, AgentPhase, MemoryTools};
use kaos_api::memorystore::{MemoryStore, ReadScope};
use kaos_harness::deployments::env_of;
use kaos_harness::fixtures::*;
use kaos_harness::status::{Conditioned, Phased};
use support::{llm, start};

fn memory_degraded(agent: &Agent) -> Option<(String, String, String)> {
    agent.condition_state("MemoryDegraded")
}

#[tokio::test]
async fn waits_for_its_store_then_reports_it_degraded_without_rolling() {
    let h = start();
    h.apply_with_status(&llm().ready()).await;
    let support = Agent::test("support")
        .memory_store("mem")
        .memory_tools(MemoryTools::Read);
    h.apply(&support);
    let waiting = h.until_phase::<Agent>("support", AgentPhase::Waiting).await;
    assert_eq!(waiting.message(), "MemoryStore mem not found");
    assert!(h.get_opt::<Deployment>("agent-support").await.is_none());

    h.apply_with_status(&MemoryStore::test("mem").ready()).await;
    let ready = h.until_phase::<Agent>("support", AgentPhase::Ready).await;
    assert_eq!(
        memory_degraded(&ready),
        Some((
            "False".into(),
            "MemoryHealthy".into(),
            "MemoryStore mem is ready".into()
        ))
    );
    let status = ready.status.clone().expect("status");
    assert_eq!(
        status
            .linked_resources
            .get("memorystore")
            .map(String::as_str),
        Some("mem")
    );
    let deployment = h.get::<Deployment>("agent-support").await;
    let env = env_of(&deployment);
    for expected in [
        ("MEMORY_TYPE", "remote"),
        (
            "MEMORY_STORE_ENDPOINT",
            "http://memorystore-mem.default.svc.cluster.local:8080",
        ),
        ("MEMORY_MAX_READ_SCOPE", "agent"),
        ("MEMORY_TOOLS", "read"),
        ("AGENT_IDENTITY", "kaos://agent/default/support"),
    ] {
        assert!(
            env.contains(&(expected.0.to_string(), expected.1.to_string())),
            "{expected:?} in {env:?}"
        );
    }

    // The store goes down: the agent stays up and says so, and its pods are not rolled.
    h.write_status(&MemoryStore::test("mem").pending()).await;
    let degraded = h
        .until("support", "degraded", |a: &Agent| {
            memory_degraded(a).is_some_and(|(status, _, _)| status == "True")
        })
        .await;
    assert_eq!(
        memory_degraded(&degraded),
        Some((
            "True".into(),
            "MemoryStoreNotReady".into(),
            "MemoryStore mem is not ready".into()
        ))
    );
    assert_eq!(degraded.phase(), Some(AgentPhase::Ready));
    let after = h.get::<Deployment>("agent-support").await;
    assert_eq!(
        after.metadata.generation, deployment.metadata.generation,
        "the Deployment is not rewritten"
    );

    // Back up, then steady: no reconcile and no write.
    h.write_status(&MemoryStore::test("mem").ready()).await;
    h.until("support", "healthy again", |a: &Agent| {
        memory_degraded(a).is_some_and(|(status, _, _)| status == "False")
    })
    .await;
    let (reconciles, writes) = h.idle(Duration::from_secs(2)).await;
    assert_eq!((reconciles, writes), (0.0, Vec::<String>::new()));
}

#[tokio::test]
async fn a_scope_above_the_store_ceiling_fails_until_fixed_and_dropping_memory_clears_the_condition()
 {
    let h = start();
    h.apply_with_status(&llm().ready()).await;
    h.apply_with_status(&MemoryStore::test("mem").ready()).await;
    let reader = |scope| {
        Agent::test("reader")
            .memory_store("mem")
            .memory_read_scope(scope)
    };
    h.apply(&reader(ReadScope::User));
    let failed = h.until_phase::<Agent>("reader", AgentPhase::Failed).await;
    assert_eq!(
        failed.message(),
        "config.memory.maxReadScope user exceeds MemoryStore mem maxReadScope agent"
    );
    h.apply(&reader(ReadScope::Agent));
    let ready = h.until_phase::<Agent>("reader", AgentPhase::Ready).await;
    assert!(memory_degraded(&ready).is_some());
    h.apply(&Agent::test("reader"));
    h.until("reader", "without a memory condition", |a: &Agent| {
        memory_degraded(a).is_none()
            && a.status
                .as_ref()
                .is_some_and(|s| !s.linked_resources.contains_key("memorystore"))
    })
    .await;
}
