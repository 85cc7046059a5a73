//! The NetworkPolicy of one agent (`docs/network-policy.md`): what it may reach comes from its
//! spec and what the caches show of its dependencies (a ModelAPI's port from its endpoint), who
//! may reach it from the relation index (the agents that list it).

use k8s_openapi::api::networking::v1::NetworkPolicy;
use kaos_api::agent::Agent;
use kaos_api::mcpserver::{CUSTOM_RUNTIME, MCPServer};
use kaos_api::memorystore::MemoryStore;
use kaos_api::modelapi::ModelAPI;
use kaos_workload::build::network_policy::{AgentDeps, NetworkPolicyArgs, Target, agent_policy};
use kube::ResourceExt;

use crate::naming::{PORT, workload};

/// What the caches hold of an agent's dependencies.
pub struct Cached<'a> {
    pub model_api: Option<&'a ModelAPI>,
    pub mcp_server: &'a (dyn Fn(&str) -> Option<&'a MCPServer> + Sync),
    pub memory_store: Option<&'a MemoryStore>,
}

/// The agent's policy, or None when policies are off in its namespace.
pub fn policy(
    agent: &Agent,
    listers: &[String],
    cached: &Cached<'_>,
    args: &NetworkPolicyArgs,
) -> Option<NetworkPolicy> {
    if !args.applies_to(&agent.namespace().unwrap_or_default()) {
        return None;
    }
    let spec = &agent.spec;
    let deps = AgentDeps {
        // Its Service port is its pods' (8000 for LiteLLM, 11434 for Ollama).
        model_api: Some(Target::from_endpoint(
            spec.model_api.clone(),
            cached
                .model_api
                .and_then(|m| m.status.as_ref()?.endpoint.as_deref()),
        )),
        mcp_servers: spec
            .mcp_servers
            .iter()
            .map(|name| match (cached.mcp_server)(name) {
                // A custom image serves on the ports it declares: any of its pods' ports.
                Some(s) if s.spec.runtime == CUSTOM_RUNTIME => Target::any_port(name.clone()),
                Some(s) => Target::from_endpoint(
                    name.clone(),
                    s.status.as_ref().and_then(|st| st.endpoint.as_deref()),
                ),
                None => Target::any_port(name.clone()),
            })
            .collect(),
        peers: spec
            .peers()
            .iter()
            .map(|p| Target::new(p.clone(), PORT))
            .collect(),
        memory_store: spec
            .config
            .as_ref()
            .and_then(|c| c.memory.as_ref())
            .and_then(|m| m.bound_store())
            .map(|name| {
                Target::from_endpoint(
                    name.to_string(),
                    cached
                        .memory_store
                        .and_then(|s| s.status.as_ref()?.endpoint.as_deref()),
                )
            }),
    };
    Some(agent_policy(&workload(agent), &deps, listers, args))
}
