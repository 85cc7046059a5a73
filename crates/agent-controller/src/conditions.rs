//! The conditions an Agent's status shows, by type, and the ones every dependency resolve sets.

use kaos_api::conditions::RESOLVED;
use kaos_workload::conditions::ConditionUpdate;

pub use kaos_api::conditions::{
    BUDGET_EXCEEDED, DEPENDENCIES_READY, MEMORY_DEGRADED, READY, USAGE_REPORTED,
};

/// The conditions the agent controller sets on every reconcile (the cache keeps only their
/// transition times).
pub const OWN_CONDITIONS: [&str; 3] = [DEPENDENCIES_READY, READY, MEMORY_DEGRADED];

/// The conditions of an agent with a budget, set from what the usage collector read (the cache
/// keeps them whole: a reconcile before the collector's next report carries them unchanged).
pub const USAGE_CONDITIONS: [&str; 2] = [BUDGET_EXCEEDED, USAGE_REPORTED];

/// `DependenciesReady` once every dependency resolved.
pub fn dependencies_resolved() -> ConditionUpdate<'static> {
    ConditionUpdate {
        type_: DEPENDENCIES_READY,
        status: true,
        reason: RESOLVED,
        message: "the ModelAPI and MCPServers are available".into(),
    }
}
