//! An Agent bound to a MemoryStore on kaos-testkit: it waits for the store before its first
//! Deployment, then reports the store's health in `MemoryDegraded` without rolling its pods.

mod support;

use std::time::Duration;

use kaos_api::agent::{Agent, AgentPhase};
use kaos_api::memorystore::MemoryStore;
use serde_json::json;
use support::*;

fn memory_degraded(agent: &Agent) -> Option<(String, String, String)> {
    agent
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "MemoryDegraded")
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

fn memory_store(h: &Harness) {
    apply(
        h,
        "MemoryStore",
        "mem",
        json!({"storage": {"type": "local"},
               "models": {"summarization": {"modelAPI": "llm", "model": "openai/gpt-4o-mini"},
                          "embedding": {"modelAPI": "llm", "model": "openai/text-embedding-3-small"}}}),
    );
}

async fn store_ready(h: &Harness, ready: bool) {
    set_status::<MemoryStore>(
        h,
        "mem",
        ready,
        "http://memorystore-mem.default.svc.cluster.local:8080",
    )
    .await;
}

#[tokio::test]
async fn waits_for_its_store_then_reports_it_degraded_without_rolling() {
    let h = start().await;
    model_api(&h, true).await;
    apply(
        &h,
        "Agent",
        "support",
        json!({"modelAPI": "llm", "model": "openai/gpt-4o",
               "config": {"memory": {"memoryStore": "mem", "tools": "read"}}}),
    );
    let waiting = until(&h, "support", "Waiting", |a| {
        phase(a) == Some(AgentPhase::Waiting)
    })
    .await;
    assert_eq!(message(&waiting), "MemoryStore mem not found");
    assert!(h.deployments.get("agent-support").await.is_err());

    memory_store(&h);
    store_ready(&h, true).await;
    let ready = until(&h, "support", "Ready", |a| {
        phase(a) == Some(AgentPhase::Ready)
    })
    .await;
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
    let deployment = h
        .deployments
        .get("agent-support")
        .await
        .expect("deployment");
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
    store_ready(&h, false).await;
    let degraded = until(&h, "support", "degraded", |a| {
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
    assert_eq!(phase(&degraded), Some(AgentPhase::Ready));
    let after = h
        .deployments
        .get("agent-support")
        .await
        .expect("deployment");
    assert_eq!(
        after.metadata.generation, deployment.metadata.generation,
        "the Deployment is not rewritten"
    );

    // Back up, then steady: no reconcile and no write.
    store_ready(&h, true).await;
    until(&h, "support", "healthy again", |a| {
        memory_degraded(a).is_some_and(|(status, _, _)| status == "False")
    })
    .await;
    let (reconciles, writes) = idle(&h, Duration::from_secs(2)).await;
    assert_eq!((reconciles, writes), (0.0, Vec::<String>::new()));
}

#[tokio::test]
async fn a_scope_above_the_store_ceiling_fails_until_fixed_and_dropping_memory_clears_the_condition()
 {
    let h = start().await;
    model_api(&h, true).await;
    memory_store(&h);
    store_ready(&h, true).await;
    apply(
        &h,
        "Agent",
        "reader",
        json!({"modelAPI": "llm", "model": "openai/gpt-4o",
               "config": {"memory": {"memoryStore": "mem", "maxReadScope": "user"}}}),
    );
    let failed = until(&h, "reader", "Failed", |a| {
        phase(a) == Some(AgentPhase::Failed)
    })
    .await;
    assert_eq!(
        message(&failed),
        "config.memory.maxReadScope user exceeds MemoryStore mem maxReadScope agent"
    );
    apply(
        &h,
        "Agent",
        "reader",
        json!({"modelAPI": "llm", "model": "openai/gpt-4o",
               "config": {"memory": {"memoryStore": "mem", "maxReadScope": "agent"}}}),
    );
    let ready = until(&h, "reader", "Ready", |a| {
        phase(a) == Some(AgentPhase::Ready)
    })
    .await;
    assert!(memory_degraded(&ready).is_some());
    apply(
        &h,
        "Agent",
        "reader",
        json!({"modelAPI": "llm", "model": "openai/gpt-4o"}),
    );
    until(&h, "reader", "without a memory condition", |a| {
        memory_degraded(a).is_none()
            && a.status
                .as_ref()
                .is_some_and(|s| !s.linked_resources.contains_key("memorystore"))
    })
    .await;
}
