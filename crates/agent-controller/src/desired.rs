//! An Agent's desired state from what is known of its dependencies, in the contract's order:
//! resolve them (the ModelAPI, the model, the MCP servers, the peers), bind its MemoryStore,
//! build the children, fence them with the NetworkPolicy, suspend them (`spec.suspend`). Pure:
//! the reconcile passes what its caches hold, `kaosctl render` what the manifests hold.

use kaos_api::agent::Agent;
use kaos_api::mcpserver::MCPServer;
use kaos_api::memorystore::MemoryStore;
use kaos_api::modelapi::ModelAPI;
use kaos_workload::desired::{Desired, Problem};

use crate::build::build;
use crate::conditions::dependencies_resolved;
use crate::network;
use crate::resolve::{bind_memory, resolve};
use crate::settings::Settings;
use crate::suspension::suspend;

/// What an Agent reads of other resources.
pub struct Inputs<'a> {
    /// Its ModelAPI, if it exists.
    pub model_api: Option<&'a ModelAPI>,
    /// An MCPServer of its namespace, by name.
    pub mcp_server: &'a (dyn Fn(&str) -> Option<&'a MCPServer> + Sync),
    /// The endpoint a peer offers (`naming::advertised_endpoint`), by name.
    pub peer_endpoint: &'a (dyn Fn(&str) -> Option<String> + Sync),
    /// Whether a peer is suspended (`spec.suspend`), by name.
    pub peer_suspended: &'a (dyn Fn(&str) -> bool + Sync),
    /// The MemoryStore it binds to, if it exists.
    pub memory_store: Option<&'a MemoryStore>,
    /// Whether its Deployment exists (a first one waits for its MemoryStore).
    pub deployed: bool,
    /// The other agents that list it as a peer: its NetworkPolicy admits them.
    pub listers: &'a [String],
    /// The AgentWorkflowRuns with a step sent, or being sent, to it: they wake it from a
    /// suspension (`suspension`).
    pub pins: &'a [String],
}

/// What `agent` should have in the cluster, or why it waits or can have nothing.
pub fn desired(
    agent: &Agent,
    inputs: &Inputs<'_>,
    settings: &Settings,
) -> Result<Desired, Problem> {
    let mut resolved = resolve(
        agent,
        inputs.model_api,
        inputs.mcp_server,
        inputs.peer_endpoint,
    )?;
    resolved.memory = bind_memory(agent, inputs.memory_store, !inputs.deployed)?;
    let mut desired = build(agent, &resolved, settings)?;
    let cached = network::Cached {
        model_api: inputs.model_api,
        mcp_server: inputs.mcp_server,
        memory_store: inputs.memory_store,
    };
    let policy = network::policy(
        agent,
        inputs.listers,
        &cached,
        &settings.data_plane.network_policy,
    );
    desired.workload = desired.workload.fenced(policy);
    let suspended_peers: Vec<&str> = agent
        .spec
        .peers()
        .iter()
        .map(String::as_str)
        .filter(|peer| (inputs.peer_suspended)(peer))
        .collect();
    desired
        .conditions
        .insert(0, dependencies_resolved(&suspended_peers));
    suspend(agent, inputs.pins, &mut desired);
    Ok(desired)
}
