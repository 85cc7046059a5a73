//! The reconciles of the two kinds: an AgentWorkflow's (`workflow`: validation, scheduled runs,
//! history) and an AgentWorkflowRun's (`run`: its steps, from its status).

pub mod run;
pub mod workflow;
