//! The pure builders of what a workload runs as: its identity and the children every kind
//! shares (`workload`), the main container (`container`), the pod spec with the user's merge and
//! the security defaults (`podspec`, `pod_security`), replicas, autoscaler and disruption budget
//! (`scaling`), the Gateway API route (`gateway`), the status a rollout makes (`status_report`)
//! and the operator settings with the pods' defaults
//! (`settings`). No IO: `tests/architecture.rs` keeps it so.

pub mod container;
pub mod gateway;
pub mod network_policy;
pub mod pod_security;
pub mod podspec;
pub mod scaling;
pub mod settings;
pub mod status_report;
pub mod workload;
