//! The library behind `kaosctl`: `dev` (the controllers against a sandbox or a cluster), manifest rendering,
//! `migrate` (from the KAOS Go operator) and `workflow` (run an AgentWorkflow now, list its runs).

pub mod defaults;
pub mod dev;
pub mod failure;
pub mod kubeconfig;
pub mod migrate;
pub mod render;
pub mod workflow;
