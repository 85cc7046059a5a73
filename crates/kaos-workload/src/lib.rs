//! What every kaos-rs workload controller shares on top of the process (`kaos-runtime`): the
//! reconcile skeleton (slim caches and stores, relation indexes, change-only triggers, write
//! expectations, and one converge path that writes only what changed, reverts drift and never
//! takes over objects it does not own) and the builders of what a workload runs as (pod spec
//! merge and hash, rollout status, conditions, autoscalers, disruption budgets and
//! NetworkPolicies).

pub mod child_changes;
pub mod child_store;
pub mod children;
pub mod compact;
pub mod conditions;
pub mod container;
pub mod converge;
pub mod deployment_view;
pub mod desired;
pub mod drift;
pub mod expectations;
pub mod gateway;
pub mod identity;
pub mod index;
pub mod meta_view;
pub mod network_policy;
pub mod packed;
pub mod pod_security;
pub mod podspec;
pub mod reconciler;
pub mod references;
pub mod relist;
pub mod rollout;
pub mod scaling;
pub mod settings;
pub mod stores;
pub mod triggers;
pub mod view;
pub mod wiring;
pub mod workload;

pub use gateway::GatewayArgs;
pub use settings::DataPlaneArgs;
