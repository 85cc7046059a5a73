//! What every kaos-rs workload controller shares on top of the process (`kaos-runtime`): the
//! reconcile skeleton (slim caches and stores, relation indexes, change-only triggers, write
//! expectations, and one converge path that writes only what changed, reverts drift and never
//! takes over objects it does not own) and the builders of what a workload runs as (pod spec
//! merge and hash, rollout status, conditions, autoscalers, disruption budgets and
//! NetworkPolicies), and the protocol checks of workloads once per rollout.

pub mod build;
pub mod cache;
pub mod conditions;
pub mod converge;
pub mod desired;
pub mod hash;
pub mod reconcile;
pub mod trigger;
pub mod verification;
pub mod wiring;

pub use build::gateway::GatewayArgs;
pub use build::settings::DataPlaneArgs;
