//! The IO side: resolves dependencies from the caches, applies the children, writes status.

use std::sync::Arc;

use kaos_api::agent::Agent;
use kaos_api::mcpserver::MCPServer;
use kaos_api::modelapi::ModelAPI;
use kaos_runtime::Runtime;
use kaos_runtime::children::apply_status;
use kaos_runtime::events::Events;
use kaos_runtime::reconciler::{
    ChildCaches, ReconcileError, reconcile_with_finalizer, retry_after_error,
};
use kaos_runtime::stores::cached;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use tokio::sync::mpsc::UnboundedSender;

use crate::build::{self, build};
use crate::resolve::resolve;
use crate::settings::Settings;
use crate::status::{Outcome, status};

pub const FINALIZER: &str = "kaos.tools/agent-finalizer";

pub struct Context {
    pub runtime: Runtime,
    pub settings: Settings,
    pub children: ChildCaches,
    pub model_apis: Store<ModelAPI>,
    pub mcp_servers: Store<MCPServer>,
    pub agents: Store<Agent>,
    /// Agents to reconcile because a peer they list changed.
    pub peer_changes: UnboundedSender<ObjectRef<Agent>>,
    pub events: Events,
}

pub async fn reconcile(agent: Arc<Agent>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    reconcile_with_finalizer(&ctx.runtime, agent, FINALIZER, |agent| apply(agent, &ctx)).await
}

pub fn error_policy(agent: Arc<Agent>, error: &ReconcileError, ctx: Arc<Context>) -> Action {
    retry_after_error(&ctx.runtime, agent.as_ref(), error)
}

/// Agents in `namespace` satisfying `predicate`, as references for the controller's queue.
pub fn agents_where(
    agents: &Store<Agent>,
    namespace: &str,
    predicate: impl Fn(&Agent) -> bool,
) -> Vec<ObjectRef<Agent>> {
    agents
        .state()
        .iter()
        .filter(|a| a.namespace().as_deref() == Some(namespace) && predicate(a))
        .map(|a| ObjectRef::from_obj(a.as_ref()))
        .collect()
}

async fn apply(agent: Arc<Agent>, ctx: &Context) -> Result<Action, ReconcileError> {
    let client = &ctx.runtime.client;
    let manager = ctx.runtime.field_manager();
    let name = agent.name_any();
    let namespace = agent.namespace().unwrap_or_default();
    // This agent may have changed its endpoint: the agents that delegate to it re-resolve.
    for lister in agents_where(&ctx.agents, &namespace, |a| a.spec.peers().contains(&name)) {
        let _ = ctx.peer_changes.send(lister);
    }
    let model_api = cached(&ctx.model_apis, &namespace, &agent.spec.model_api);
    let servers: Vec<(String, Option<Arc<MCPServer>>)> = agent
        .spec
        .mcp_servers
        .iter()
        .map(|s| (s.clone(), cached(&ctx.mcp_servers, &namespace, s)))
        .collect();
    let peers: Vec<(String, Option<Arc<Agent>>)> = agent
        .spec
        .peers()
        .iter()
        .map(|p| (p.clone(), cached(&ctx.agents, &namespace, p)))
        .collect();
    let resolved = resolve(
        &agent,
        model_api.as_deref(),
        |s| {
            servers
                .iter()
                .find(|(n, _)| n == s)
                .and_then(|(_, o)| o.as_deref())
        },
        |p| {
            peers
                .iter()
                .find(|(n, _)| n == p)
                .and_then(|(_, o)| o.as_deref())
        },
    );
    let built = resolved.map(|r| build(&agent, &r, &ctx.settings));
    if let Ok(Ok(desired)) = &built {
        let changes = ctx
            .children
            .apply(
                client,
                manager,
                &namespace,
                &agent.uid().unwrap_or_default(),
                desired.children.clone(),
            )
            .await?;
        if !changes.is_empty() {
            ctx.events
                .normal(agent.as_ref(), "Applied", changes.join(", "))
                .await;
        }
    }
    let outcome = match &built {
        Err(blocked) => Outcome::Blocked(blocked),
        Ok(Err(invalid)) => Outcome::Invalid(invalid),
        Ok(Ok(desired)) => Outcome::Built(desired),
    };
    let deployment = ctx
        .children
        .deployment(&namespace, &build::deployment_name(&name));
    let desired_status = status(
        &agent,
        outcome,
        deployment.as_deref(),
        kaos_runtime::conditions::now(),
    );
    let api: Api<Agent> = Api::namespaced(client.clone(), &namespace);
    let wrote = apply_status(&api, manager, &name, agent.status.as_ref(), &desired_status).await?;
    if wrote && desired_status.phase == Some(kaos_api::agent::AgentPhase::Failed) {
        let reason = desired_status
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .map(|c| c.reason.clone())
            .unwrap_or_default();
        ctx.events
            .warning(
                agent.as_ref(),
                &reason,
                desired_status.message.clone().unwrap_or_default(),
            )
            .await;
    }
    Ok(Action::await_change())
}

pub fn phase_of(agent: &Agent) -> Option<&'static str> {
    agent
        .status
        .as_ref()
        .and_then(|s| s.phase)
        .map(|p| p.as_str())
}
