//! What an Agent depends on, and what of each dependency it reads. The index is kept from the
//! Agent watch events; the projections decide which dependency changes reach the dependents.

use kaos_api::mcpserver::MCPServer;
use kaos_api::modelapi::ModelAPI;
use kaos_runtime::index::Relation;
use kube::ResourceExt;

use crate::cached::CachedAgent;

pub const MODEL_API: Relation = "modelapi";
pub const MCP_SERVER: Relation = "mcpserver";
pub const PEER: Relation = "peer";

/// The edges of an Agent: its ModelAPI, its MCPServers, its peers. A self-listing agent has no
/// edge to itself: it reads its own endpoint from its spec, so its status writes need not wake it.
pub fn edges(agent: &CachedAgent) -> Vec<(Relation, String)> {
    let spec = &agent.spec;
    let own = agent.name_any();
    let mut edges = vec![(MODEL_API, spec.model_api.clone())];
    edges.extend(spec.mcp_servers.iter().map(|s| (MCP_SERVER, s.clone())));
    edges.extend(
        spec.peers()
            .iter()
            .filter(|p| **p != own)
            .map(|p| (PEER, p.clone())),
    );
    edges
}

/// What an Agent reads of its ModelAPI: readiness, endpoint and the models it serves.
pub fn model_api_view(m: &ModelAPI) -> (bool, Option<String>, Vec<String>) {
    let status = m.status.clone().unwrap_or_default();
    (status.ready, status.endpoint, m.spec.supported_models())
}

/// What an Agent reads of an MCPServer: readiness and endpoint.
pub fn mcp_server_view(s: &MCPServer) -> (bool, Option<String>) {
    let status = s.status.clone().unwrap_or_default();
    (status.ready, status.endpoint)
}

/// What an Agent reads of a peer: the endpoint it advertises (so a peer's first status, which
/// publishes the endpoint it was already taken at, wakes no lister).
pub fn peer_view(a: &CachedAgent) -> Option<String> {
    a.advertised_endpoint()
}
