//! The AgentWorkflow controller: runs workflows' steps, each a task sent to an agent over A2A, in
//! the order of their dependencies, on demand (an AgentWorkflowRun) or on a cron schedule.
//!
//! The engine is pure (`dag`, `template`, `condition`, `schedule`, `outcome`) but for the A2A
//! client (`a2a`); the reconciles (`reconcile_workflow`, `reconcile_run`) do the Kubernetes and
//! agent IO on top, and `controller` wires them into one process.

pub mod a2a;
pub mod agents;
pub mod cancellation;
pub mod clock;
pub mod condition;
pub mod context;
pub mod controller;
pub mod dag;
pub mod dispatcher;
pub mod endpoints;
pub mod history;
pub mod metrics;
pub mod naming;
pub mod outcome;
pub mod polling;
pub mod reconcile_run;
pub mod reconcile_workflow;
pub mod relations;
pub mod run_progress;
pub mod schedule;
pub mod scheduling;
pub mod settings;
pub mod template;
pub mod validation;

use kaos_runtime::ControllerId;

pub const ID: ControllerId = ControllerId {
    name: "workflow",
    lease: "kaos-workflow-controller",
    kinds: &[
        ("AgentWorkflow", controller::WORKFLOW_PHASES),
        ("AgentWorkflowRun", controller::RUN_PHASES),
    ],
};
