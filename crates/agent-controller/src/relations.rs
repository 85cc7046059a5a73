//! What an Agent depends on, and what of each dependency it reads. The index is kept from the
//! Agent watch events; the projections decide which dependency changes reach the dependents.
//!
//! An Agent that waits for its dependencies (`waitForDependencies`, the default) reads nothing
//! of an unready ModelAPI or MCPServer but its readiness, so its edges to them are the
//! `*_AWAITED` relations, whose projections hide the endpoint until the dependency is ready: a
//! ModelAPI that publishes its endpoint on the way to Ready wakes its waiting agents once, not
//! twice.

use kaos_api::mcpserver::MCPServer;
use kaos_api::memorystore::{MemoryStore, ReadScope};
use kaos_api::modelapi::ModelAPI;
use kaos_workload::trigger::index::Relation;
use kube::ResourceExt;

use crate::cached::CachedAgent;

pub const MODEL_API: Relation = "modelapi";
pub const MODEL_API_AWAITED: Relation = "modelapi-awaited";
pub const MCP_SERVER: Relation = "mcpserver";
pub const MCP_SERVER_AWAITED: Relation = "mcpserver-awaited";
pub const PEER: Relation = "peer";
pub const MEMORY_STORE: Relation = "memorystore";

/// The edges of an Agent: its ModelAPI, its MCPServers, its peers, its MemoryStore. A self-listing agent has no
/// edge to itself: it reads its own endpoint from its spec, so its status writes need not wake it.
pub fn edges(agent: &CachedAgent) -> Vec<(Relation, String)> {
    let spec = agent.spec();
    let own = agent.name_any();
    let (model_api, mcp_server) = if spec.wait_for_dependencies {
        (MODEL_API_AWAITED, MCP_SERVER_AWAITED)
    } else {
        (MODEL_API, MCP_SERVER)
    };
    let mut edges = vec![(model_api, spec.model_api.clone())];
    edges.extend(spec.mcp_servers.iter().map(|s| (mcp_server, s.clone())));
    edges.extend(
        spec.peers()
            .iter()
            .filter(|p| **p != own)
            .map(|p| (PEER, p.clone())),
    );
    let store = spec
        .config
        .as_ref()
        .and_then(|c| c.memory.as_ref())
        .and_then(|m| m.bound_store());
    edges.extend(store.map(|s| (MEMORY_STORE, s.to_string())));
    edges
}

/// What an Agent reads of its ModelAPI: readiness, endpoint and the models it serves.
pub type ModelApiView = (bool, Option<String>, Vec<String>);

pub fn model_api_view(m: &ModelAPI) -> ModelApiView {
    let status = m.status.clone().unwrap_or_default();
    (status.ready, status.endpoint, m.spec.supported_models())
}

/// What an Agent waiting for its ModelAPI reads of it: its readiness, and the rest once ready.
pub fn awaited_model_api_view(m: &ModelAPI) -> ModelApiView {
    awaited(model_api_view(m))
}

/// What an Agent reads of an MCPServer: readiness and endpoint.
pub type McpServerView = (bool, Option<String>);

pub fn mcp_server_view(s: &MCPServer) -> McpServerView {
    let status = s.status.clone().unwrap_or_default().workload;
    (status.ready, status.endpoint)
}

/// What an Agent waiting for an MCPServer reads of it: its readiness, and its endpoint once ready.
pub fn awaited_mcp_server_view(s: &MCPServer) -> McpServerView {
    let (ready, endpoint) = mcp_server_view(s);
    (ready, endpoint.filter(|_| ready))
}

fn awaited((ready, endpoint, models): ModelApiView) -> ModelApiView {
    if ready {
        (ready, endpoint, models)
    } else {
        (false, None, Vec::new())
    }
}

/// What an Agent reads of its MemoryStore: readiness and the read ceiling (its endpoint follows
/// from its name).
pub type MemoryStoreView = (bool, ReadScope);

pub fn memory_store_view(s: &MemoryStore) -> MemoryStoreView {
    let ready = s.status.as_ref().is_some_and(|s| s.ready);
    (ready, s.spec.effective_max_read_scope())
}

/// What an Agent reads of a peer: the endpoint it advertises (so a peer's first status, which
/// publishes the endpoint it was already taken at, wakes no lister) and whether it is suspended
/// (its listers' `DependenciesReady` names it).
pub fn peer_view(a: &CachedAgent) -> (Option<String>, bool) {
    (a.advertised_endpoint(), a.suspended())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn model_api(status: serde_json::Value) -> ModelAPI {
        serde_json::from_value(
            json!({"apiVersion": "kaos.tools/v1alpha1", "kind": "ModelAPI",
            "metadata": {"name": "llm", "namespace": "ns"},
            "spec": {"mode": "Proxy", "proxyConfig": {"models": ["m"]}},
            "status": status}),
        )
        .expect("ModelAPI")
    }

    #[test]
    fn a_waiting_agent_sees_an_unready_model_api_only_as_unready() {
        let created = model_api(json!({}));
        let endpoint = model_api(json!({"endpoint": "http://modelapi-llm.ns:8000"}));
        let ready = model_api(json!({"ready": true, "endpoint": "http://modelapi-llm.ns:8000"}));
        assert_ne!(model_api_view(&created), model_api_view(&endpoint));
        assert_eq!(
            awaited_model_api_view(&created),
            awaited_model_api_view(&endpoint)
        );
        assert_ne!(
            awaited_model_api_view(&endpoint),
            awaited_model_api_view(&ready)
        );
        assert_eq!(awaited_model_api_view(&ready), model_api_view(&ready));
    }

    #[test]
    fn waiting_chooses_the_awaited_edges() {
        let agent = |wait: bool| -> CachedAgent {
            serde_json::from_value(json!({"apiVersion": "kaos.tools/v1alpha1", "kind": "Agent",
                "metadata": {"name": "a", "namespace": "ns"},
                "spec": {"modelAPI": "llm", "model": "m", "mcpServers": ["tools"],
                    "waitForDependencies": wait, "agentNetwork": {"access": ["a", "b"]}}}))
            .expect("Agent")
        };
        assert_eq!(
            edges(&agent(true)),
            [
                (MODEL_API_AWAITED, "llm".to_string()),
                (MCP_SERVER_AWAITED, "tools".to_string()),
                (PEER, "b".to_string())
            ]
        );
        assert_eq!(
            edges(&agent(false)),
            [
                (MODEL_API, "llm".to_string()),
                (MCP_SERVER, "tools".to_string()),
                (PEER, "b".to_string())
            ]
        );
    }
}
