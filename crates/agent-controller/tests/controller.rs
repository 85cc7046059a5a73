//! The Agent controller against kaos-testkit with the deployment simulator.

mod support;

use std::time::{Duration, SystemTime};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use kaos_api::agent::{Agent, AgentPhase};
use kaos_api::mcpserver::MCPServer;
use kaos_harness::cluster::eventually;
use kaos_harness::deployments::{env_of, env_value};
use kaos_harness::fixtures::*;
use kaos_harness::status::{Conditioned, Phased};
use serde_json::json;
use support::{llm, reaction_to, start};

/// The ModelAPI `llm`'s path.
const LLM: &str = "/apis/kaos.tools/v1alpha1/namespaces/default/modelapis/llm";

#[tokio::test]
async fn waits_for_an_unready_model_api_and_becomes_ready_after_it() {
    let h = start();
    h.apply_with_status(&llm().pending()).await;
    h.apply(&Agent::test("worker"));
    let waiting = h.until_phase::<Agent>("worker", AgentPhase::Waiting).await;
    assert_eq!(waiting.message(), "ModelAPI llm is not ready");
    let dependencies = waiting.condition("DependenciesReady").expect("condition");
    assert_eq!(
        (dependencies.status.as_str(), dependencies.reason.as_str()),
        ("False", "ModelAPINotReady")
    );
    assert!(
        h.get_opt::<Deployment>("agent-worker").await.is_none(),
        "nothing deployed while waiting"
    );

    // What a waiting agent reads of an unready ModelAPI is its readiness: a new endpoint
    // published on the way to Ready wakes no waiting agent.
    // Fenced: the controller was delivered the ModelAPI's change and has done all it queued.
    let moved = llm().pending_at("http://modelapi-llm.default.svc:8000");
    let (woken, writes) = reaction_to(&h, h.write_status(&moved)).await;
    assert_eq!(
        (woken, writes),
        (0.0, vec![format!("patch {LLM}/status")]),
        "an unready ModelAPI's new endpoint wakes no waiting agent"
    );

    h.write_status(&llm().ready()).await;
    let ready = h.until_phase::<Agent>("worker", AgentPhase::Ready).await;
    let status = ready.status.expect("status");
    assert_eq!(
        status.endpoint.as_deref(),
        Some("http://agent-worker.default.svc.cluster.local:8000")
    );
    assert_eq!(
        status.linked_resources.get("modelapi").map(String::as_str),
        Some("llm")
    );
    let deployment = h.get::<Deployment>("agent-worker").await;
    assert_eq!(
        env_value(&deployment, "MODEL_API_URL").as_deref(),
        Some("http://modelapi-llm.default.svc.cluster.local:8000")
    );
}

#[tokio::test]
async fn a_missing_mcp_server_fails_and_recovers_when_created() {
    let h = start();
    h.apply_with_status(&llm().ready()).await;
    h.apply(&Agent::test("tooled").mcp_servers(["tools"]));
    let failed = h.until_phase::<Agent>("tooled", AgentPhase::Failed).await;
    assert!(
        failed
            .message()
            .starts_with("Failed to resolve MCPServer tools"),
        "{}",
        failed.message()
    );
    let tools = MCPServer::test("tools").ready();
    h.apply_with_status(&tools).await;
    h.until_phase::<Agent>("tooled", AgentPhase::Ready).await;
    let deployment = h.get::<Deployment>("agent-tooled").await;
    assert_eq!(
        env_value(&deployment, "MCP_SERVERS").as_deref(),
        Some("tools")
    );
    assert_eq!(
        env_value(&deployment, "MCP_SERVER_tools_URL").as_deref(),
        Some("http://mcpserver-tools.default.svc.cluster.local:8000")
    );
}

#[tokio::test]
async fn an_unsupported_model_fails_with_the_supported_list() {
    let h = start();
    h.apply_with_status(&llm().ready()).await;
    h.apply(&Agent::test("picky").model("anthropic/claude"));
    let failed = h.until_phase::<Agent>("picky", AgentPhase::Failed).await;
    assert_eq!(
        failed.message(),
        "model anthropic/claude not found in models list of ModelAPI llm: [openai/*]"
    );
}

#[tokio::test]
async fn a_coordinator_learns_its_peer_once_the_peer_has_an_endpoint() {
    let h = start();
    h.apply_with_status(&llm().ready()).await;
    h.apply(&Agent::test("coordinator").peers(["research-bot"]));
    h.until_phase::<Agent>("coordinator", AgentPhase::Ready)
        .await;
    let before = env_of(&h.get::<Deployment>("agent-coordinator").await);
    assert!(
        !before.iter().any(|(n, _)| n == "PEER_AGENTS"),
        "the peer does not exist yet"
    );
    // The peer is created later; the coordinator is never edited.
    h.apply(&Agent::test("research-bot"));
    eventually("the coordinator knows its peer", || async {
        let deployment = h.get_opt::<Deployment>("agent-coordinator").await?;
        (env_value(&deployment, "PEER_AGENTS").as_deref() == Some("research-bot")).then_some(())
    })
    .await;
    let deployment = h.get::<Deployment>("agent-coordinator").await;
    assert_eq!(
        env_value(&deployment, "PEER_AGENT_RESEARCH_BOT_CARD_URL").as_deref(),
        Some("http://agent-research-bot.default.svc.cluster.local:8000")
    );
}

#[tokio::test]
async fn a_peer_that_cannot_be_built_is_not_listed() {
    let h = start();
    h.apply_with_status(&llm().ready()).await;
    h.apply(&Agent::test("broken").model_api("missing"));
    h.apply(&Agent::test("lead").peers(["broken"]));
    h.until_phase::<Agent>("broken", AgentPhase::Failed).await;
    h.until_phase::<Agent>("lead", AgentPhase::Ready).await;
    eventually("the lead does not list its failed peer", || async {
        let env = env_of(&h.get_opt::<Deployment>("agent-lead").await?);
        (!env.iter().any(|(n, _)| n.starts_with("PEER_AGENT"))).then_some(())
    })
    .await;
}

#[tokio::test]
async fn editing_instructions_rolls_once_and_expose_false_removes_the_service() {
    let h = start();
    h.apply_with_status(&llm().ready()).await;
    h.apply(&Agent::test("a").instructions("v1"));
    h.until_phase::<Agent>("a", AgentPhase::Ready).await;
    let before = h
        .get::<Deployment>("agent-a")
        .await
        .metadata
        .generation
        .unwrap_or(0);
    let from = SystemTime::now();
    let patch = json!({"spec": {"config": {"instructions": "v2"}}});
    h.merge_patch::<Agent>("a", patch).await;
    h.until("a", "observed at generation 2", |a: &Agent| {
        a.status.as_ref().and_then(|s| s.observed_generation) == Some(2)
    })
    .await;
    // Fenced: the roll's rollout was simulated and every change since was handled.
    h.caught_up().await;
    let after = h.get::<Deployment>("agent-a").await;
    assert_eq!(
        after.metadata.generation,
        Some(before + 1),
        "rolled once and only once"
    );
    let writes = h.writes_since(from);
    let rolls: Vec<&String> = writes
        .iter()
        .filter(|w| w.ends_with("/deployments/agent-a"))
        .collect();
    assert_eq!(rolls.len(), 1, "one Deployment write: {writes:?}");
    assert_eq!(
        env_value(&after, "AGENT_INSTRUCTIONS").as_deref(),
        Some("v2")
    );

    let hide = json!({"spec": {"agentNetwork": {"expose": false}}});
    h.merge_patch::<Agent>("a", hide).await;
    h.until_gone::<Service>("agent-a").await;
    h.until("a", "without an endpoint", |a: &Agent| {
        a.status.as_ref().is_some_and(|s| s.endpoint.is_none())
    })
    .await;
}

#[tokio::test]
async fn deletion_removes_children_and_idle_makes_no_writes() {
    let h = start();
    h.apply_with_status(&llm().ready()).await;
    h.apply(&Agent::test("stay").peers(["gone"]));
    h.apply(&Agent::test("gone"));
    h.until_phase::<Agent>("stay", AgentPhase::Ready).await;
    h.until_phase::<Agent>("gone", AgentPhase::Ready).await;
    h.delete::<Agent>("gone").await;
    h.until_gone_with_workload::<Agent>("gone").await;
    // Fenced: the deletion and everything it caused were handled (the peer's roll without it).
    h.caught_up().await;
    // The sleep in it is the idle window being measured, after the fence.
    h.assert_no_writes_during(Duration::from_secs(10)).await;
}

#[tokio::test]
async fn a_claimed_security_id_fails_the_newer_agent_until_the_holder_goes() {
    let h = start();
    h.apply_with_status(&llm().ready()).await;
    h.apply(&Agent::test("a-old").security_id("support"));
    h.until_phase::<Agent>("a-old", AgentPhase::Ready).await;
    h.apply(&Agent::test("b-new").security_id("support"));
    let failed = h.until_phase::<Agent>("b-new", AgentPhase::Failed).await;
    assert_eq!(
        failed.message(),
        "security.id \"support\" already in use by default/a-old"
    );
    assert!(
        h.get_opt::<Deployment>("agent-b-new").await.is_none(),
        "the loser creates nothing"
    );
    h.delete::<Agent>("a-old").await;
    h.until("b-new", "Ready once the holder is gone", |a: &Agent| {
        a.phase() == Some(AgentPhase::Ready)
    })
    .await;
}
