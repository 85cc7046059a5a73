//! NetworkPolicies from the dependency graph (`docs/network-policy.md`): when turned on, every
//! generated workload gets one NetworkPolicy, named as its Deployment, that denies all ingress
//! and egress of its pods except what the graph needs:
//!
//! - an Agent accepts connections only from the agents that list it, the gateway, the metrics
//!   scraper and (when its pod labels are set) the workflow controller, and may reach DNS, its
//!   ModelAPI, its MCP servers, its memory store and its peers;
//! - a ModelAPI accepts agents and memory stores (their egress picks which ModelAPI), the
//!   gateway and the scraper, and may reach DNS and its provider (addresses outside the
//!   cluster);
//! - an MCP server accepts agents, the gateway and the scraper, and may reach DNS and what its
//!   runtime's egress setting allows (outside addresses, the API server);
//! - a MemoryStore accepts agents, the gateway and the scraper, and may reach DNS, its
//!   ModelAPIs and, for external storage, its database.
//!
//! Every pod may also reach the extra egress of the settings. [`allowed_pairs`] computes the same
//! connectivity from a [`Graph`]; the tests check the built policies against it as a
//! connectivity matrix.
//!
//! Each builder takes only what one controller has in hand: the [`Workload`](crate::build::workload::Workload),
//! the workload's own references, and for an agent the names of the agents that list it.

mod build;
mod graph;
mod settings;
mod values;

#[cfg(test)]
mod matrix;
#[cfg(test)]
mod tests;

pub use build::{
    AgentDeps, Kind, Target, agent_policy, endpoint_port, mcp_server_policy, memory_store_policy,
    model_api_policy,
};
pub use graph::{AgentEdges, Graph, MemoryStoreEdges, Node, allowed_pairs};
pub use settings::NetworkPolicyArgs;
pub use values::{Cidr, ExtraEgress, Labels, McpEgress, McpEgressMap, PortSpec, Protocol};
