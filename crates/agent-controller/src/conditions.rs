//! The conditions an Agent's status shows, by type, and the ones every dependency resolve sets.

use kaos_api::conditions::RESOLVED;
use kaos_workload::conditions::ConditionUpdate;

pub use kaos_api::conditions::{DEPENDENCIES_READY, MEMORY_DEGRADED, READY};

/// Every condition the agent controller sets (the cache keeps only their transition times).
pub const OWN_CONDITIONS: [&str; 3] = [DEPENDENCIES_READY, READY, MEMORY_DEGRADED];

/// `DependenciesReady` once every dependency resolved.
pub fn dependencies_resolved() -> ConditionUpdate<'static> {
    ConditionUpdate {
        type_: DEPENDENCIES_READY,
        status: true,
        reason: RESOLVED,
        message: "the ModelAPI and MCPServers are available".into(),
    }
}
