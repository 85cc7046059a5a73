//! The AgentWorkflow controller: runs workflows' steps, each a task sent to an agent over A2A, in
//! the order of their dependencies, on demand (an AgentWorkflowRun) or on a cron schedule.
//!
//! The engine (`engine`: the step graph, `when`, templates, outcomes, a run's progress) and the
//! schedule (`schedule`: cron, concurrency policy, history) are pure; `a2a` is the protocol
//! (its types and client), `agents` the sends and polls of tasks, `reconcile` the two kinds'
//! reconciles doing the Kubernetes and agent IO on top, and `controller` wires them into one
//! process.

pub mod a2a;
pub mod agents;
pub mod clock;
pub mod context;
pub mod controller;
pub mod engine;
pub mod metrics;
pub mod naming;
pub mod reconcile;
pub mod relations;
pub mod schedule;
pub mod settings;

use kaos_runtime::ControllerId;

pub const ID: ControllerId = ControllerId {
    name: "workflow",
    lease: "kaos-workflow-controller",
    kinds: &[
        ("AgentWorkflow", controller::WORKFLOW_PHASES),
        ("AgentWorkflowRun", controller::RUN_PHASES),
    ],
};
