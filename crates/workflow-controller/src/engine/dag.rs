//! The step scheduler of a run, on data only: given the plan, the steps' statuses and the time,
//! it says which steps to send now (with their rendered input), which change phase, which
//! timed-out tasks to cancel, the run's phase, and when to look again. The controller does the
//! IO (A2A calls, status writes) and calls it again whenever something moved.
//!
//! The rules:
//! - a step starts once every step it depends on has `Succeeded`, and its `when` is true (false:
//!   `Skipped`); independent steps start together;
//! - a dependency that `Failed` fails the step ("dependency X failed"), one `Skipped` skips it,
//!   one `Canceled` cancels it; steps on other branches go on;
//! - a failed attempt (the agent's error, or longer than `timeoutSeconds`, default 600) is tried
//!   again while retries are left, after 5 s × 2^(attempt − 1), at most 5 min: no retry storm;
//!   a condition or template error is not retried (it would fail the same way);
//! - the run is `Running` while any step is pending or under way, else `Failed` if a step
//!   failed, else `Canceled` if one was canceled, else `Succeeded` (every step succeeded or was
//!   skipped).
//!
//! An attempt's start is the step's `startTime` for the first and its `nextAttemptTime` for the
//! next ones (set to the instant it is sent), which is what its timeout counts from.

use std::collections::HashMap;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kaos_api::workflow::{RunPhase, StepPhase, StepStatus, WorkflowStep};

use crate::a2a::Budgets;
use crate::engine::outcome::bounded_error;
use crate::engine::template::TemplateError;
use crate::engine::when::ConditionError;

/// The wait after a step's first failed attempt; it doubles with every further one.
pub const RETRY_BACKOFF_BASE: SignedDuration = SignedDuration::from_secs(5);
/// The longest wait between two attempts.
pub const RETRY_BACKOFF_MAX: SignedDuration = SignedDuration::from_mins(5);

/// Why a plan cannot run. Each names the steps involved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GraphError {
    #[error("the workflow has no steps")]
    NoSteps,
    #[error("two steps are named {step}: step names must be unique")]
    DuplicateStep { step: String },
    #[error("step {step} depends on {dependency}, which is not a step of the workflow")]
    UnknownDependency { step: String, dependency: String },
    /// `path` reads "a → b → a": a depends on b, which depends on a.
    #[error("the steps depend on each other in a cycle: {path}")]
    Cycle { path: String },
    #[error("the input of step {step}: {error}")]
    Template { step: String, error: TemplateError },
    #[error(
        "the input of step {step} reads the output of {reference}, which is not a step of the workflow"
    )]
    UnknownReference { step: String, reference: String },
    #[error(
        "the input of step {step} reads the output of {reference}, but {step} does not depend \
         on {reference} (directly or through its dependencies), so it may not have run yet"
    )]
    UnorderedReference { step: String, reference: String },
    #[error("the when of step {step}: {error}")]
    Condition { step: String, error: ConditionError },
}

/// What the controller should do now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Steps to send now, in plan order: independent ones together.
    pub dispatch: Vec<Dispatch>,
    /// Steps whose phase changes without a call to an agent.
    pub transitions: Vec<Transition>,
    /// Tasks of attempts that timed out: to cancel on their agent (best effort).
    pub cancel: Vec<CancelTask>,
    /// The run's phase once this decision is applied.
    pub phase: RunPhase,
    /// For a finished run that did not succeed: which step and why.
    pub message: Option<String>,
    /// The earliest instant something is due (a retry, a timeout): reconcile again then, if
    /// nothing else wakes the run first. Running tasks still need polling on top of this.
    pub wake_at: Option<Timestamp>,
}

/// A step attempt to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dispatch {
    pub step: String,
    pub agent_ref: String,
    /// The attempt number, 1 for the first.
    pub attempt: i32,
    /// The rendered input: the text to send.
    pub input: String,
    pub budgets: Option<Budgets>,
}

impl Dispatch {
    pub fn idempotency_key(&self, run_uid: &str) -> String {
        idempotency_key(run_uid, &self.step, self.attempt)
    }
}

/// A step's change of phase.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    pub step: String,
    pub change: Change,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Not run: its condition is false or a dependency was skipped.
    Skip { reason: String },
    /// Failed for good: its retries are used up, a dependency failed, or its condition or
    /// input could not be evaluated.
    Fail { error: String },
    /// A dependency was canceled.
    Cancel { reason: String },
    /// The attempt failed with retries left: the next one is sent at `at`.
    Retry { error: String, at: Timestamp },
}

/// The task of a timed-out attempt. Without a task id (the send never answered) the controller
/// finds it by its idempotency key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CancelTask {
    pub step: String,
    pub task_id: Option<String>,
    pub idempotency_key: Option<String>,
    pub agent_endpoint: Option<String>,
}

/// The key an attempt is sent with: the same for every send of that attempt (so a lost answer
/// is found, not sent twice), a new one for the next attempt.
pub fn idempotency_key(run_uid: &str, step: &str, attempt: i32) -> String {
    format!("{run_uid}/{step}/{attempt}")
}

/// The wait before the attempt after `failed_attempt` (1-based).
pub fn retry_backoff(failed_attempt: i32) -> SignedDuration {
    let doublings = u32::try_from(failed_attempt.saturating_sub(1)).unwrap_or(0);
    let factor = 2_i32.checked_pow(doublings.min(30)).unwrap_or(i32::MAX);
    RETRY_BACKOFF_BASE
        .checked_mul(factor)
        .map_or(RETRY_BACKOFF_MAX, |wait| wait.min(RETRY_BACKOFF_MAX))
}

/// Checks that a plan can run: unique names, known dependencies, no cycle, inputs that read
/// only steps they (transitively) depend on, conditions that compile.
pub fn validate(plan: &[WorkflowStep]) -> Result<(), GraphError> {
    Graph::new(plan).map(|_| ())
}

/// What to do next for a run of `plan` whose steps are at `steps` (a step with no status yet
/// is `Pending`), with `input` the run's input.
pub fn next(
    plan: &[WorkflowStep],
    steps: &[StepStatus],
    input: &str,
    now: Timestamp,
) -> Result<Decision, GraphError> {
    let graph = Graph::new(plan)?;
    Ok(scheduler::decide(&graph, steps, input, now))
}

impl Decision {
    /// Writes the decision into the run's step statuses (one per plan step, in plan order):
    /// transitions, and each dispatched step `Dispatching` with its attempt and idempotency
    /// key, which the controller records before it sends (so a restart re-sends the same key).
    pub fn apply(
        &self,
        plan: &[WorkflowStep],
        steps: &mut Vec<StepStatus>,
        run_uid: &str,
        now: Timestamp,
    ) {
        let mut by_name: HashMap<String, StepStatus> = steps
            .drain(..)
            .map(|step| (step.name.clone(), step))
            .collect();
        steps.extend(plan.iter().map(|step| {
            by_name
                .remove(&step.name)
                .unwrap_or_else(|| StepStatus::pending(&step.name))
        }));
        let position: HashMap<String, usize> = steps
            .iter()
            .enumerate()
            .map(|(index, step)| (step.name.clone(), index))
            .collect();

        for transition in &self.transitions {
            let Some(step) = named(steps, &position, &transition.step) else {
                continue;
            };
            match &transition.change {
                Change::Skip { .. } => finish(step, StepPhase::Skipped, now),
                Change::Cancel { .. } => finish(step, StepPhase::Canceled, now),
                Change::Fail { error } => {
                    step.error = Some(bounded_error(error));
                    finish(step, StepPhase::Failed, now);
                }
                Change::Retry { error, at } => {
                    step.phase = StepPhase::Pending;
                    step.error = Some(bounded_error(error));
                    step.next_attempt_time = Some(Time(*at));
                    step.completion_time = None;
                    step.task_id = None;
                }
            }
        }
        for dispatch in &self.dispatch {
            let Some(step) = named(steps, &position, &dispatch.step) else {
                continue;
            };
            step.phase = StepPhase::Dispatching;
            step.attempt = dispatch.attempt;
            step.idempotency_key = Some(dispatch.idempotency_key(run_uid));
            step.task_id = None;
            step.agent_endpoint = None;
            step.start_time = step.start_time.take().or(Some(Time(now)));
            // The start of a retry: what its timeout counts from.
            step.next_attempt_time = (dispatch.attempt > 1).then_some(Time(now));
            step.completion_time = None;
            step.output = None;
            step.output_truncated = false;
        }
    }
}

/// The status of the step `name`, found by its `position` in `steps`.
fn named<'a>(
    steps: &'a mut [StepStatus],
    position: &HashMap<String, usize>,
    name: &str,
) -> Option<&'a mut StepStatus> {
    position.get(name).and_then(|&index| steps.get_mut(index))
}

fn finish(step: &mut StepStatus, phase: StepPhase, now: Timestamp) {
    step.phase = phase;
    step.completion_time = Some(Time(now));
    step.next_attempt_time = None;
}

mod graph;
use graph::Graph;
mod scheduler;
#[cfg(test)]
mod tests;
