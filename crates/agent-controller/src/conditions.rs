//! The conditions an Agent's status shows, by type, and the ones every dependency resolve sets.

use kaos_workload::conditions::ConditionUpdate;

/// Whether the ModelAPI, the model, the MCP servers, the peers and the MemoryStore resolved:
/// False, naming the first that did not and why.
pub const DEPENDENCIES_READY: &str = "DependenciesReady";
pub const READY: &str = "Ready";
/// Set while the agent is built with a MemoryStore binding: True while the store is missing or
/// not ready (the agent serves with short-term memory only), removed without a binding.
pub const MEMORY_DEGRADED: &str = "MemoryDegraded";
/// Every condition the agent controller sets (the cache keeps only their transition times).
pub const OWN_CONDITIONS: [&str; 3] = [DEPENDENCIES_READY, READY, MEMORY_DEGRADED];

/// `DependenciesReady` once every dependency resolved.
pub fn dependencies_resolved() -> ConditionUpdate<'static> {
    ConditionUpdate {
        type_: DEPENDENCIES_READY,
        status: true,
        reason: "Resolved",
        message: "the ModelAPI and MCPServers are available".into(),
    }
}
