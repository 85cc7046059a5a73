//! The conditions an Agent's status shows, by type, and the ones every dependency resolve sets.

use kaos_api::conditions::RESOLVED;
use kaos_workload::conditions::ConditionUpdate;

pub use kaos_api::conditions::{
    BUDGET_EXCEEDED, DEPENDENCIES_READY, MEMORY_DEGRADED, READY, SUSPENDED, USAGE_REPORTED,
};

/// The conditions the agent controller sets on every reconcile (the cache keeps only their
/// transition times).
pub const OWN_CONDITIONS: [&str; 4] = [DEPENDENCIES_READY, READY, MEMORY_DEGRADED, SUSPENDED];

/// The conditions of an agent with a budget, set from what the usage collector read (the cache
/// keeps them whole: a reconcile before the collector's next report carries them unchanged).
pub const USAGE_CONDITIONS: [&str; 2] = [BUDGET_EXCEEDED, USAGE_REPORTED];

/// `DependenciesReady` once every dependency resolved; the `suspended` peers are named (a
/// delegation to one fails until it is resumed), but do not make the agent unready: it serves
/// whatever does not need them.
pub fn dependencies_resolved(suspended_peers: &[&str]) -> ConditionUpdate<'static> {
    let mut message = String::from("the ModelAPI and MCPServers are available");
    if !suspended_peers.is_empty() {
        let (noun, verb) = match suspended_peers.len() {
            1 => ("peer", "is"),
            _ => ("peers", "are"),
        };
        message.push_str(&format!(
            "; {noun} {} {verb} suspended (spec.suspend): delegations to {} fail until resumed",
            suspended_peers.join(", "),
            if suspended_peers.len() == 1 {
                "it"
            } else {
                "them"
            },
        ));
    }
    ConditionUpdate {
        type_: DEPENDENCIES_READY,
        status: true,
        reason: RESOLVED,
        message,
    }
}
