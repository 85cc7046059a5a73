//! The AgentWorkflow engine: runs a workflow's steps, each a task sent to an agent over A2A, in
//! the order of their dependencies. All of it is pure but the A2A client: the controller that
//! reconciles AgentWorkflows and AgentWorkflowRuns does the Kubernetes IO on top.

pub mod a2a;
pub mod condition;
pub mod dag;
pub mod outcome;
pub mod schedule;
pub mod template;
