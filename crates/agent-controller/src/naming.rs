//! What an Agent's children are called and where it is reached: the names, labels and port of
//! its workload, its endpoint, and the endpoint it offers its listers as a peer. Deterministic,
//! so known before anything is built (the resolver lists a peer not built yet at it).

use kaos_api::agent::{Agent, AgentPhase};
use kaos_workload::build::workload::{Workload, owner_of};
use kube::ResourceExt;

pub const PORT: i32 = 8000;
/// Selects every child of every Agent (the controller's watch caches).
pub const CHILD_SELECTOR: &str = "app=agent";

pub fn deployment_name(name: &str) -> String {
    format!("agent-{name}")
}

pub fn labels(name: &str) -> std::collections::BTreeMap<String, String> {
    [
        ("app".to_string(), "agent".to_string()),
        ("agent".to_string(), name.to_string()),
    ]
    .into()
}

pub fn workload(agent: &Agent) -> Workload {
    let name = agent.name_any();
    Workload {
        name: deployment_name(&name),
        namespace: agent.namespace().unwrap_or_else(|| "default".into()),
        labels: labels(&name),
        owner: owner_of(agent),
        port: PORT,
    }
}

/// The Agent's endpoint (None when not exposed). Deterministic, so known before anything is
/// built.
pub fn endpoint(agent: &Agent) -> Option<String> {
    agent.spec.exposed().then(|| workload(agent).endpoint())
}

/// The endpoint an Agent offers its listers as a peer. Once it is built, its status decides (a
/// peer that could not be built has none and is skipped, as in KAOS). Before that (not
/// reconciled yet, or waiting for its own ModelAPI or MCPServers) it is taken at the endpoint
/// its build will publish, so agents created together (a mesh, a star, a pair created before
/// their ModelAPI is ready) are built once with every peer instead of once per peer that gets
/// its endpoint.
pub fn advertised_endpoint(peer: &Agent) -> Option<String> {
    let status = peer.status.as_ref();
    advertise(
        status.map(|s| s.endpoint.clone()),
        status.and_then(|s| s.phase) == Some(AgentPhase::Waiting),
        || endpoint(peer),
    )
}

/// [`advertised_endpoint`] from the endpoint a status publishes (None: no status yet), whether
/// the status says the peer is waiting for its dependencies, and the endpoint the spec gives.
pub fn advertise(
    status_endpoint: Option<Option<String>>,
    waiting: bool,
    spec_endpoint: impl FnOnce() -> Option<String>,
) -> Option<String> {
    match status_endpoint.map(|e| e.filter(|e| !e.is_empty())) {
        Some(Some(published)) => Some(published),
        // Built, and not reachable (not exposed, or it failed).
        Some(None) if !waiting => None,
        // Not built yet.
        _ => spec_endpoint(),
    }
}
