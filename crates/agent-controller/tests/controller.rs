//! The Agent controller against kaos-testkit with the deployment simulator.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use kaos_api::agent::AgentPhase;
use kaos_api::mcpserver::MCPServer;
use kaos_api::modelapi::ModelAPI;
use kaos_harness::cluster::eventually;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::json;
use support::*;

#[tokio::test]
async fn waits_for_an_unready_model_api_and_becomes_ready_after_it() {
    let h = start().await;
    model_api(&h, false).await;
    apply(
        &h,
        "Agent",
        "worker",
        json!({"modelAPI": "llm", "model": "openai/gpt-4o"}),
    );
    let waiting = until(&h, "worker", "Waiting", |a| {
        phase(a) == Some(AgentPhase::Waiting)
    })
    .await;
    assert_eq!(message(&waiting), "ModelAPI llm is not ready");
    let dependencies = waiting
        .status
        .as_ref()
        .expect("status")
        .conditions
        .iter()
        .find(|c| c.type_ == "DependenciesReady")
        .cloned()
        .expect("condition");
    assert_eq!(
        (dependencies.status.as_str(), dependencies.reason.as_str()),
        ("False", "ModelAPINotReady")
    );
    assert!(
        h.deployments.get("agent-worker").await.is_err(),
        "nothing deployed while waiting"
    );

    // What a waiting agent reads of an unready ModelAPI is its readiness: a new endpoint
    // published on the way to Ready wakes no waiting agent.
    set_status::<ModelAPI>(&h, "llm", false, "http://modelapi-llm.default.svc:8000").await;
    let (woken, writes) = idle(&h, Duration::from_secs(2)).await;
    assert_eq!(
        (woken, writes),
        (0.0, Vec::<String>::new()),
        "an unready ModelAPI's new endpoint wakes no waiting agent"
    );

    model_api_turns_ready(&h).await;
    let ready = until(&h, "worker", "Ready", |a| {
        phase(a) == Some(AgentPhase::Ready)
    })
    .await;
    let status = ready.status.expect("status");
    assert_eq!(
        status.endpoint.as_deref(),
        Some("http://agent-worker.default.svc.cluster.local:8000")
    );
    assert_eq!(
        status.linked_resources.get("modelapi").map(String::as_str),
        Some("llm")
    );
    let env = env_of(&h.deployments.get("agent-worker").await.expect("deployment"));
    assert!(env.contains(&(
        "MODEL_API_URL".to_string(),
        "http://modelapi-llm.default.svc.cluster.local:8000".to_string()
    )));
}

#[tokio::test]
async fn a_missing_mcp_server_fails_and_recovers_when_created() {
    let h = start().await;
    model_api(&h, true).await;
    apply(
        &h,
        "Agent",
        "tooled",
        json!({"modelAPI": "llm", "model": "openai/gpt-4o", "mcpServers": ["tools"]}),
    );
    let failed = until(&h, "tooled", "Failed", |a| {
        phase(a) == Some(AgentPhase::Failed)
    })
    .await;
    assert!(
        message(&failed).starts_with("Failed to resolve MCPServer tools"),
        "{}",
        message(&failed)
    );
    apply(
        &h,
        "MCPServer",
        "tools",
        json!({"runtime": "python-string"}),
    );
    set_status::<MCPServer>(
        &h,
        "tools",
        true,
        "http://mcpserver-tools.default.svc.cluster.local:8000",
    )
    .await;
    until(&h, "tooled", "Ready", |a| {
        phase(a) == Some(AgentPhase::Ready)
    })
    .await;
    let env = env_of(&h.deployments.get("agent-tooled").await.expect("deployment"));
    assert!(env.contains(&("MCP_SERVERS".to_string(), "tools".to_string())));
    assert!(env.contains(&(
        "MCP_SERVER_tools_URL".to_string(),
        "http://mcpserver-tools.default.svc.cluster.local:8000".to_string()
    )));
}

#[tokio::test]
async fn an_unsupported_model_fails_with_the_supported_list() {
    let h = start().await;
    model_api(&h, true).await;
    apply(
        &h,
        "Agent",
        "picky",
        json!({"modelAPI": "llm", "model": "anthropic/claude"}),
    );
    let failed = until(&h, "picky", "Failed", |a| {
        phase(a) == Some(AgentPhase::Failed)
    })
    .await;
    assert_eq!(
        message(&failed),
        "model anthropic/claude not found in models list of ModelAPI llm: [openai/*]"
    );
}

#[tokio::test]
async fn a_coordinator_learns_its_peer_once_the_peer_has_an_endpoint() {
    let h = start().await;
    model_api(&h, true).await;
    apply(
        &h,
        "Agent",
        "coordinator",
        json!({"modelAPI": "llm", "model": "openai/gpt-4o", "agentNetwork": {"access": ["research-bot"]}}),
    );
    until(&h, "coordinator", "Ready", |a| {
        phase(a) == Some(AgentPhase::Ready)
    })
    .await;
    let before = env_of(
        &h.deployments
            .get("agent-coordinator")
            .await
            .expect("deployment"),
    );
    assert!(
        !before.iter().any(|(n, _)| n == "PEER_AGENTS"),
        "the peer does not exist yet"
    );
    // The peer is created later; the coordinator is never edited.
    apply(
        &h,
        "Agent",
        "research-bot",
        json!({"modelAPI": "llm", "model": "openai/gpt-4o"}),
    );
    eventually("the coordinator knows its peer", || async {
        let env = env_of(&h.deployments.get("agent-coordinator").await.ok()?);
        env.contains(&("PEER_AGENTS".to_string(), "research-bot".to_string()))
            .then_some(())
    })
    .await;
    let env = env_of(
        &h.deployments
            .get("agent-coordinator")
            .await
            .expect("deployment"),
    );
    assert!(env.contains(&(
        "PEER_AGENT_RESEARCH_BOT_CARD_URL".to_string(),
        "http://agent-research-bot.default.svc.cluster.local:8000".to_string()
    )));
}

#[tokio::test]
async fn a_peer_that_cannot_be_built_is_not_listed() {
    let h = start().await;
    model_api(&h, true).await;
    apply(
        &h,
        "Agent",
        "broken",
        json!({"modelAPI": "missing", "model": "openai/gpt-4o"}),
    );
    apply(
        &h,
        "Agent",
        "lead",
        json!({"modelAPI": "llm", "model": "openai/gpt-4o", "agentNetwork": {"access": ["broken"]}}),
    );
    until(&h, "broken", "Failed", |a| {
        phase(a) == Some(AgentPhase::Failed)
    })
    .await;
    until(&h, "lead", "Ready", |a| phase(a) == Some(AgentPhase::Ready)).await;
    eventually("the lead does not list its failed peer", || async {
        let env = env_of(&h.deployments.get("agent-lead").await.ok()?);
        (!env.iter().any(|(n, _)| n.starts_with("PEER_AGENT"))).then_some(())
    })
    .await;
}

#[tokio::test]
async fn editing_instructions_rolls_once_and_expose_false_removes_the_service() {
    let h = start().await;
    model_api(&h, true).await;
    apply(
        &h,
        "Agent",
        "a",
        json!({"modelAPI": "llm", "model": "openai/gpt-4o", "config": {"instructions": "v1"}}),
    );
    until(&h, "a", "Ready", |a| phase(a) == Some(AgentPhase::Ready)).await;
    let before = h
        .deployments
        .get("agent-a")
        .await
        .expect("deployment")
        .metadata
        .generation
        .unwrap_or(0);
    let patch = json!({"spec": {"config": {"instructions": "v2"}}});
    h.agents
        .patch("a", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch");
    until(&h, "a", "observed at generation 2", |a| {
        a.status.as_ref().and_then(|s| s.observed_generation) == Some(2)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = h.deployments.get("agent-a").await.expect("deployment");
    assert_eq!(
        after.metadata.generation,
        Some(before + 1),
        "rolled once and only once"
    );
    assert!(env_of(&after).contains(&("AGENT_INSTRUCTIONS".to_string(), "v2".to_string())));

    let hide = json!({"spec": {"agentNetwork": {"expose": false}}});
    h.agents
        .patch("a", &PatchParams::default(), &Patch::Merge(&hide))
        .await
        .expect("patch");
    let services: Api<Service> = Api::default_namespaced(h.cluster.client.clone());
    eventually("the Service is gone", || async {
        services.get("agent-a").await.is_err().then_some(())
    })
    .await;
    until(&h, "a", "without an endpoint", |a| {
        a.status.as_ref().is_some_and(|s| s.endpoint.is_none())
    })
    .await;
}

#[tokio::test]
async fn deletion_removes_children_and_idle_makes_no_writes() {
    let h = start().await;
    model_api(&h, true).await;
    apply(
        &h,
        "Agent",
        "stay",
        json!({"modelAPI": "llm", "model": "openai/gpt-4o", "agentNetwork": {"access": ["gone"]}}),
    );
    apply(
        &h,
        "Agent",
        "gone",
        json!({"modelAPI": "llm", "model": "openai/gpt-4o"}),
    );
    until(&h, "stay", "Ready", |a| phase(a) == Some(AgentPhase::Ready)).await;
    until(&h, "gone", "Ready", |a| phase(a) == Some(AgentPhase::Ready)).await;
    h.agents
        .delete("gone", &DeleteParams::default())
        .await
        .expect("delete");
    let services: Api<Service> = Api::default_namespaced(h.cluster.client.clone());
    eventually("the agent and its children are gone", || async {
        let gone = h.agents.get("gone").await.is_err()
            && h.deployments.get("agent-gone").await.is_err()
            && services.get("agent-gone").await.is_err();
        gone.then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let writes = h.cluster.writes_during(Duration::from_secs(10)).await;
    assert!(writes.is_empty(), "writes while idle: {writes:?}");
}

#[tokio::test]
async fn a_claimed_security_id_fails_the_newer_agent_until_the_holder_goes() {
    let h = start().await;
    model_api(&h, true).await;
    let spec = json!({"modelAPI": "llm", "model": "openai/gpt-4o", "security": {"id": "support"}});
    apply(&h, "Agent", "a-old", spec.clone());
    until(&h, "a-old", "Ready", |a| {
        phase(a) == Some(AgentPhase::Ready)
    })
    .await;
    apply(&h, "Agent", "b-new", spec);
    let failed = until(&h, "b-new", "Failed", |a| {
        phase(a) == Some(AgentPhase::Failed)
    })
    .await;
    assert_eq!(
        message(&failed),
        "security.id \"support\" already in use by default/a-old"
    );
    assert!(
        h.deployments
            .get_opt("agent-b-new")
            .await
            .expect("get")
            .is_none(),
        "the loser creates nothing"
    );
    h.agents
        .delete("a-old", &DeleteParams::default())
        .await
        .expect("delete");
    until(&h, "b-new", "Ready once the holder is gone", |a| {
        phase(a) == Some(AgentPhase::Ready)
    })
    .await;
}
