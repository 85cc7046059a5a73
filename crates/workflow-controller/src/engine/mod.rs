//! The workflow engine, on data only (no IO: `tests/architecture.rs` keeps it so): a workflow's
//! validation (`validation`), a run's step graph and scheduler (`dag`), a step's `when`
//! expression (`when`, CEL) and input template (`template`), how an attempt ended (`outcome`)
//! and how a run moves on from its steps' statuses (`run_progress`), waking suspended agents
//! (`wake`).

pub mod dag;
pub mod outcome;
pub mod run_progress;
pub mod template;
pub mod validation;
pub mod wake;
pub mod when;
