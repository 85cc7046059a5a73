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

use std::collections::{BTreeMap, BTreeSet, HashMap};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kaos_api::workflow::{RunPhase, StepPhase, StepStatus, WorkflowStep};

use crate::a2a::Budgets;
use crate::condition::{Condition, ConditionError, StepOutcome};
use crate::outcome::bounded_error;
use crate::template::{self, TemplateError};

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
    let statuses: HashMap<&str, &StepStatus> = steps
        .iter()
        .map(|step| (step.name.as_str(), step))
        .collect();
    let mut scheduler = Scheduler {
        graph: &graph,
        statuses,
        input,
        now,
        projected: vec![StepPhase::Pending; plan.len()],
        errors: vec![None; plan.len()],
        dispatch: Vec::new(),
        transitions: Vec::new(),
        cancel: Vec::new(),
        wake_at: None,
    };
    for &index in &graph.order {
        scheduler.decide(index);
    }
    Ok(scheduler.into_decision())
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
            let Some(step) = position
                .get(&transition.step)
                .and_then(|&index| steps.get_mut(index))
            else {
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
            let Some(step) = position
                .get(&dispatch.step)
                .and_then(|&index| steps.get_mut(index))
            else {
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

fn finish(step: &mut StepStatus, phase: StepPhase, now: Timestamp) {
    step.phase = phase;
    step.completion_time = Some(Time(now));
    step.next_attempt_time = None;
}

/// A validated plan: names, the order to look at steps in (dependencies first), and what each
/// step depends on, directly or not.
struct Graph<'p> {
    plan: &'p [WorkflowStep],
    index: HashMap<&'p str, usize>,
    order: Vec<usize>,
    ancestors: Vec<BTreeSet<usize>>,
    conditions: Vec<Option<Condition>>,
}

impl<'p> Graph<'p> {
    fn new(plan: &'p [WorkflowStep]) -> Result<Self, GraphError> {
        if plan.is_empty() {
            return Err(GraphError::NoSteps);
        }
        let mut index = HashMap::new();
        for (position, step) in plan.iter().enumerate() {
            if index.insert(step.name.as_str(), position).is_some() {
                return Err(GraphError::DuplicateStep {
                    step: step.name.clone(),
                });
            }
        }
        for step in plan {
            if let Some(dependency) = step
                .depends_on
                .iter()
                .find(|dependency| !index.contains_key(dependency.as_str()))
            {
                return Err(GraphError::UnknownDependency {
                    step: step.name.clone(),
                    dependency: dependency.clone(),
                });
            }
        }
        let dependencies: Vec<Vec<usize>> = plan
            .iter()
            .map(|step| {
                step.depends_on
                    .iter()
                    .filter_map(|dependency| index.get(dependency.as_str()).copied())
                    .collect()
            })
            .collect();
        let order = topological_order(plan, &dependencies)?;
        let mut ancestors = vec![BTreeSet::new(); plan.len()];
        for &step in &order {
            let mut all = BTreeSet::new();
            for &dependency in &dependencies[step] {
                all.insert(dependency);
                all.extend(ancestors[dependency].iter().copied());
            }
            ancestors[step] = all;
        }

        for (position, step) in plan.iter().enumerate() {
            let Some(input) = &step.input else { continue };
            let references = template::references(input).map_err(|error| GraphError::Template {
                step: step.name.clone(),
                error,
            })?;
            for reference in references {
                match index.get(reference.as_str()) {
                    None => {
                        return Err(GraphError::UnknownReference {
                            step: step.name.clone(),
                            reference,
                        });
                    }
                    Some(referenced) if !ancestors[position].contains(referenced) => {
                        return Err(GraphError::UnorderedReference {
                            step: step.name.clone(),
                            reference,
                        });
                    }
                    Some(_) => {}
                }
            }
        }
        let conditions = plan
            .iter()
            .map(|step| {
                step.when
                    .as_deref()
                    .map(Condition::compile)
                    .transpose()
                    .map_err(|error| GraphError::Condition {
                        step: step.name.clone(),
                        error,
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;

        Ok(Self {
            plan,
            index,
            order,
            ancestors,
            conditions,
        })
    }
}

/// Dependencies before dependents (depth first, in plan order), or the first cycle found.
fn topological_order(
    plan: &[WorkflowStep],
    dependencies: &[Vec<usize>],
) -> Result<Vec<usize>, GraphError> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Unvisited,
        OnPath,
        Done,
    }
    struct Walk<'a> {
        plan: &'a [WorkflowStep],
        dependencies: &'a [Vec<usize>],
        marks: Vec<Mark>,
        path: Vec<usize>,
        order: Vec<usize>,
    }
    impl Walk<'_> {
        fn visit(&mut self, step: usize) -> Result<(), GraphError> {
            match self.marks[step] {
                Mark::Done => return Ok(()),
                Mark::OnPath => {
                    let start = self
                        .path
                        .iter()
                        .position(|&on_path| on_path == step)
                        .unwrap_or(0);
                    let names: Vec<&str> = self.path[start..]
                        .iter()
                        .chain(std::iter::once(&step))
                        .map(|&index| self.plan[index].name.as_str())
                        .collect();
                    return Err(GraphError::Cycle {
                        path: names.join(" → "),
                    });
                }
                Mark::Unvisited => {}
            }
            self.marks[step] = Mark::OnPath;
            self.path.push(step);
            for position in 0..self.dependencies[step].len() {
                self.visit(self.dependencies[step][position])?;
            }
            self.path.pop();
            self.marks[step] = Mark::Done;
            self.order.push(step);
            Ok(())
        }
    }
    let mut walk = Walk {
        plan,
        dependencies,
        marks: vec![Mark::Unvisited; plan.len()],
        path: Vec::new(),
        order: Vec::with_capacity(plan.len()),
    };
    for step in 0..plan.len() {
        walk.visit(step)?;
    }
    Ok(walk.order)
}

/// One pass over the steps, dependencies first, each step's phase projected as the decision
/// leaves it, so that a failure reaches every dependent in the same decision.
struct Scheduler<'g, 'p> {
    graph: &'g Graph<'p>,
    statuses: HashMap<&'p str, &'p StepStatus>,
    input: &'g str,
    now: Timestamp,
    projected: Vec<StepPhase>,
    errors: Vec<Option<String>>,
    dispatch: Vec<Dispatch>,
    transitions: Vec<Transition>,
    cancel: Vec<CancelTask>,
    wake_at: Option<Timestamp>,
}

impl<'p> Scheduler<'_, 'p> {
    fn decide(&mut self, index: usize) {
        let step = &self.graph.plan[index];
        let pending = StepStatus::pending(&step.name);
        let status = self
            .statuses
            .get(step.name.as_str())
            .copied()
            .unwrap_or(&pending);
        self.errors[index] = status.error.clone();
        self.projected[index] = match status.phase {
            StepPhase::Succeeded | StepPhase::Skipped | StepPhase::Canceled => status.phase,
            StepPhase::Failed if has_retries_left(step, status) => {
                let failed_at = status
                    .completion_time
                    .as_ref()
                    .map_or(self.now, |time| time.0);
                let error = status
                    .error
                    .clone()
                    .unwrap_or_else(|| format!("attempt {} failed", status.attempt));
                self.retry(index, status, error, failed_at)
            }
            StepPhase::Failed => StepPhase::Failed,
            StepPhase::Dispatching | StepPhase::Running => self.watch_timeout(index, status),
            StepPhase::Pending => match status.next_attempt_time.as_ref() {
                Some(next_attempt) if status.attempt >= 1 && next_attempt.0 > self.now => {
                    self.wake(next_attempt.0);
                    StepPhase::Pending
                }
                _ => self.start(index, status),
            },
        };
    }

    /// A step not under way: start it, settle it from its dependencies, or let it wait.
    fn start(&mut self, index: usize, status: &StepStatus) -> StepPhase {
        let step = &self.graph.plan[index];
        let dependencies: Vec<usize> = step
            .depends_on
            .iter()
            .filter_map(|name| self.graph.index.get(name.as_str()).copied())
            .collect();
        let with_phase = |phase: StepPhase| {
            dependencies
                .iter()
                .find(|&&dependency| self.projected[dependency] == phase)
                .map(|&dependency| self.graph.plan[dependency].name.clone())
        };
        if let Some(failed) = with_phase(StepPhase::Failed) {
            return self.fail(index, format!("dependency {failed} failed"));
        }
        if let Some(canceled) = with_phase(StepPhase::Canceled) {
            return self.settle(
                index,
                Change::Cancel {
                    reason: format!("dependency {canceled} was canceled"),
                },
                StepPhase::Canceled,
            );
        }
        if let Some(skipped) = with_phase(StepPhase::Skipped) {
            return self.settle(
                index,
                Change::Skip {
                    reason: format!("dependency {skipped} was skipped"),
                },
                StepPhase::Skipped,
            );
        }
        if dependencies
            .iter()
            .any(|&dependency| self.projected[dependency] != StepPhase::Succeeded)
        {
            return StepPhase::Pending;
        }

        let outcomes = self.ancestor_outcomes(index);
        if let Some(condition) = &self.graph.conditions[index] {
            match condition.evaluate(self.input, &outcomes) {
                Ok(true) => {}
                Ok(false) => {
                    return self.settle(
                        index,
                        Change::Skip {
                            reason: format!("its condition `{}` is false", condition.expression()),
                        },
                        StepPhase::Skipped,
                    );
                }
                Err(error) => return self.fail(index, error.to_string()),
            }
        }
        let rendered = template::render_step_input(step.input.as_deref(), self.input, |name| {
            outcomes.get(name).map(|outcome| outcome.output.as_str())
        });
        match rendered {
            Ok(input) => {
                self.dispatch.push(Dispatch {
                    step: step.name.clone(),
                    agent_ref: step.agent_ref.clone(),
                    attempt: status.attempt.saturating_add(1),
                    input,
                    budgets: step.budgets.as_ref().map(Budgets::from),
                });
                StepPhase::Dispatching
            }
            Err(error) => self.fail(index, format!("its input: {error}")),
        }
    }

    /// What a step's condition and input may read: the steps it depends on, directly or not
    /// (all succeeded when it starts). Other steps are left out: whether they have run yet
    /// depends on timing.
    fn ancestor_outcomes(&self, index: usize) -> BTreeMap<String, StepOutcome> {
        self.graph.ancestors[index]
            .iter()
            .map(|&ancestor| {
                let name = &self.graph.plan[ancestor].name;
                let output = self
                    .statuses
                    .get(name.as_str())
                    .and_then(|status| status.output.clone())
                    .unwrap_or_default();
                let outcome = StepOutcome {
                    output,
                    phase: self.projected[ancestor].as_str().to_string(),
                };
                (name.clone(), outcome)
            })
            .collect()
    }

    /// A step under way: still within its time, or timed out (a failed attempt).
    fn watch_timeout(&mut self, index: usize, status: &StepStatus) -> StepPhase {
        let step = &self.graph.plan[index];
        let seconds = step.effective_timeout_seconds().max(1);
        let started = attempt_start(status).unwrap_or(self.now);
        let deadline = started
            .checked_add(SignedDuration::from_secs(seconds))
            .unwrap_or(Timestamp::MAX);
        if self.now < deadline {
            self.wake(deadline);
            return status.phase;
        }
        self.cancel.push(CancelTask {
            step: step.name.clone(),
            task_id: status.task_id.clone(),
            idempotency_key: status.idempotency_key.clone(),
            agent_endpoint: status.agent_endpoint.clone(),
        });
        let error = format!("attempt {} timed out after {seconds}s", status.attempt);
        if has_retries_left(step, status) {
            self.retry(index, status, error, self.now)
        } else {
            self.fail(index, error)
        }
    }

    fn retry(
        &mut self,
        index: usize,
        status: &StepStatus,
        error: String,
        failed_at: Timestamp,
    ) -> StepPhase {
        let at = failed_at
            .checked_add(retry_backoff(status.attempt))
            .unwrap_or(Timestamp::MAX);
        self.wake(at);
        self.errors[index] = Some(error.clone());
        self.settle(index, Change::Retry { error, at }, StepPhase::Pending)
    }

    fn fail(&mut self, index: usize, error: String) -> StepPhase {
        self.errors[index] = Some(error.clone());
        self.settle(index, Change::Fail { error }, StepPhase::Failed)
    }

    fn settle(&mut self, index: usize, change: Change, phase: StepPhase) -> StepPhase {
        self.transitions.push(Transition {
            step: self.graph.plan[index].name.clone(),
            change,
        });
        phase
    }

    fn wake(&mut self, at: Timestamp) {
        self.wake_at = Some(self.wake_at.map_or(at, |earliest| earliest.min(at)));
    }

    fn into_decision(mut self) -> Decision {
        let active = self.projected.iter().any(|phase| {
            matches!(
                phase,
                StepPhase::Pending | StepPhase::Dispatching | StepPhase::Running
            )
        });
        // The first failed or canceled step in dependency order is a cause, not a consequence.
        let first = |phase: StepPhase| {
            self.graph
                .order
                .iter()
                .copied()
                .find(|&index| self.projected[index] == phase)
        };
        let (phase, message) = if active {
            (RunPhase::Running, None)
        } else if let Some(failed) = first(StepPhase::Failed) {
            let name = &self.graph.plan[failed].name;
            let message = match &self.errors[failed] {
                Some(error) => format!("step {name} failed: {error}"),
                None => format!("step {name} failed"),
            };
            (RunPhase::Failed, Some(message))
        } else if let Some(canceled) = first(StepPhase::Canceled) {
            let name = &self.graph.plan[canceled].name;
            (
                RunPhase::Canceled,
                Some(format!("step {name} was canceled")),
            )
        } else {
            (RunPhase::Succeeded, None)
        };
        // Dispatch in plan order, as the user listed the steps.
        let plan_position = |name: &str| self.graph.index.get(name).copied().unwrap_or(0);
        self.dispatch
            .sort_by_key(|dispatch| plan_position(&dispatch.step));
        Decision {
            dispatch: self.dispatch,
            transitions: self.transitions,
            cancel: self.cancel,
            phase,
            message,
            wake_at: if active { self.wake_at } else { None },
        }
    }
}

/// Whether the step's failed attempt may be followed by another: attempts are numbered from 1,
/// and a step has `retries` + 1 of them. A step that failed before any attempt (a dependency,
/// its condition, its input) has attempt 0 and is not retried.
fn has_retries_left(step: &WorkflowStep, status: &StepStatus) -> bool {
    status.attempt >= 1 && status.attempt <= step.retries
}

fn attempt_start(status: &StepStatus) -> Option<Timestamp> {
    let retry_start = status
        .next_attempt_time
        .as_ref()
        .filter(|_| status.attempt > 1);
    retry_start
        .or(status.start_time.as_ref())
        .map(|time| time.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::{record_failure, record_sent, record_success};
    use kaos_api::workflow::StepBudgets;

    const RUN: &str = "run-uid";

    fn t0() -> Timestamp {
        "2025-06-01T10:00:00Z".parse().expect("an instant")
    }

    fn secs(seconds: i64) -> SignedDuration {
        SignedDuration::from_secs(seconds)
    }

    fn step(name: &str, depends_on: &[&str]) -> WorkflowStep {
        WorkflowStep {
            name: name.to_string(),
            agent_ref: format!("agent-{name}"),
            input: None,
            depends_on: depends_on.iter().map(|d| d.to_string()).collect(),
            when: None,
            timeout_seconds: None,
            retries: 0,
            budgets: None,
        }
    }

    fn with_input(mut step: WorkflowStep, input: &str) -> WorkflowStep {
        step.input = Some(input.to_string());
        step
    }

    fn with_when(mut step: WorkflowStep, when: &str) -> WorkflowStep {
        step.when = Some(when.to_string());
        step
    }

    fn with_retries(mut step: WorkflowStep, retries: i32) -> WorkflowStep {
        step.retries = retries;
        step
    }

    /// A run driven as the controller will: decide, apply, "send" what is dispatched.
    struct Run {
        plan: Vec<WorkflowStep>,
        steps: Vec<StepStatus>,
        input: String,
        now: Timestamp,
    }

    impl Run {
        fn new(plan: Vec<WorkflowStep>) -> Self {
            Self {
                plan,
                steps: Vec::new(),
                input: "the input".to_string(),
                now: t0(),
            }
        }

        /// One reconcile: the decision, applied, its dispatches accepted by the agents.
        fn reconcile(&mut self) -> Decision {
            let decision =
                next(&self.plan, &self.steps, &self.input, self.now).expect("a valid plan");
            decision.apply(&self.plan, &mut self.steps, RUN, self.now);
            for dispatch in &decision.dispatch {
                let task_id = format!("task-{}-{}", dispatch.step, dispatch.attempt);
                record_sent(self.step(&dispatch.step), &task_id, "http://agent:8000");
            }
            decision
        }

        fn step(&mut self, name: &str) -> &mut StepStatus {
            self.steps
                .iter_mut()
                .find(|step| step.name == name)
                .expect("a step of the plan")
        }

        fn phase(&self, name: &str) -> StepPhase {
            self.steps
                .iter()
                .find(|step| step.name == name)
                .map_or(StepPhase::Pending, |step| step.phase)
        }

        fn succeed(&mut self, name: &str, output: &str) {
            let now = self.now;
            record_success(self.step(name), output, now);
        }

        fn fail(&mut self, name: &str, error: &str) {
            let now = self.now;
            record_failure(self.step(name), error, now);
        }

        fn advance(&mut self, by: SignedDuration) {
            self.now = self.now.checked_add(by).expect("a later instant");
        }
    }

    fn names(decision: &Decision) -> Vec<&str> {
        decision.dispatch.iter().map(|d| d.step.as_str()).collect()
    }

    #[test]
    fn linear_steps_run_in_order_each_reading_the_last_output() {
        let mut run = Run::new(vec![
            step("a", &[]),
            with_input(step("b", &["a"]), "Improve: {{ steps.a.output }}"),
            with_input(
                step("c", &["b"]),
                "{{input}} / {{ steps.a.output }} / {{ steps.b.output }}",
            ),
        ]);
        let first = run.reconcile();
        assert_eq!(names(&first), ["a"]);
        assert_eq!(first.dispatch[0].input, "the input");
        assert_eq!(first.dispatch[0].agent_ref, "agent-a");
        assert_eq!(first.phase, RunPhase::Running);
        assert_eq!(run.phase("b"), StepPhase::Pending);
        // Nothing new while a runs.
        assert!(run.reconcile().dispatch.is_empty());

        run.succeed("a", "draft");
        let second = run.reconcile();
        assert_eq!(names(&second), ["b"]);
        assert_eq!(second.dispatch[0].input, "Improve: draft");

        run.succeed("b", "better");
        let third = run.reconcile();
        assert_eq!(third.dispatch[0].input, "the input / draft / better");

        run.succeed("c", "done");
        let last = run.reconcile();
        assert!(last.dispatch.is_empty());
        assert_eq!(last.phase, RunPhase::Succeeded);
        assert_eq!(last.message, None);
        assert_eq!(last.wake_at, None);
    }

    #[test]
    fn a_diamond_runs_its_middle_steps_together() {
        let mut run = Run::new(vec![
            step("a", &[]),
            step("b", &["a"]),
            step("c", &["a"]),
            with_input(
                step("d", &["b", "c"]),
                "{{ steps.b.output }}+{{ steps.c.output }}",
            ),
        ]);
        assert_eq!(names(&run.reconcile()), ["a"]);
        run.succeed("a", "A");
        assert_eq!(names(&run.reconcile()), ["b", "c"]);
        run.succeed("c", "C");
        assert!(run.reconcile().dispatch.is_empty(), "d waits for b");
        run.succeed("b", "B");
        let decision = run.reconcile();
        assert_eq!(names(&decision), ["d"]);
        assert_eq!(decision.dispatch[0].input, "B+C");
    }

    #[test]
    fn independent_roots_start_together() {
        let mut run = Run::new(vec![step("x", &[]), step("y", &[]), step("z", &["x", "y"])]);
        assert_eq!(names(&run.reconcile()), ["x", "y"]);
    }

    #[test]
    fn a_false_condition_skips_the_step_and_its_dependents() {
        let mut run = Run::new(vec![
            step("triage", &[]),
            with_when(
                step("escalate", &["triage"]),
                "steps.triage.output.startsWith('URGENT')",
            ),
            step("page", &["escalate"]),
            with_when(
                step("log", &["triage"]),
                "steps.triage.phase == 'Succeeded'",
            ),
        ]);
        run.reconcile();
        run.succeed("triage", "all fine");
        let decision = run.reconcile();
        assert_eq!(names(&decision), ["log"]);
        assert_eq!(
            decision.transitions,
            [
                Transition {
                    step: "escalate".into(),
                    change: Change::Skip {
                        reason: "its condition `steps.triage.output.startsWith('URGENT')` is false"
                            .into()
                    },
                },
                Transition {
                    step: "page".into(),
                    change: Change::Skip {
                        reason: "dependency escalate was skipped".into()
                    },
                },
            ]
        );
        assert_eq!(run.phase("escalate"), StepPhase::Skipped);
        assert_eq!(run.phase("page"), StepPhase::Skipped);
        run.succeed("log", "logged");
        assert_eq!(run.reconcile().phase, RunPhase::Succeeded);
    }

    #[test]
    fn a_condition_reads_the_run_input() {
        let mut run = Run::new(vec![with_when(step("a", &[]), "input == 'go'")]);
        run.input = "stop".to_string();
        let decision = run.reconcile();
        assert!(decision.dispatch.is_empty());
        assert_eq!(decision.phase, RunPhase::Succeeded);
        assert_eq!(run.phase("a"), StepPhase::Skipped);
    }

    #[test]
    fn a_condition_that_cannot_be_evaluated_fails_the_step_without_retry() {
        let mut run = Run::new(vec![with_retries(
            with_when(step("a", &[]), "input + 1 == 2"),
            3,
        )]);
        let decision = run.reconcile();
        assert_eq!(decision.phase, RunPhase::Failed);
        let error = run.step("a").error.clone().unwrap_or_default();
        assert!(
            error.starts_with("condition `input + 1 == 2` could not be evaluated"),
            "{error}"
        );
        assert_eq!(run.step("a").attempt, 0);
        assert_eq!(run.reconcile().transitions, [], "settled, not retried");
    }

    #[test]
    fn a_failure_fails_its_dependents_while_other_branches_finish() {
        let mut run = Run::new(vec![
            step("a", &[]),
            step("b", &["a"]),
            step("c", &["b"]),
            step("other", &[]),
        ]);
        assert_eq!(names(&run.reconcile()), ["a", "other"]);
        run.fail("a", "the agent's task task-a-1 failed: model unavailable");
        let decision = run.reconcile();
        assert_eq!(
            decision.transitions,
            [
                Transition {
                    step: "b".into(),
                    change: Change::Fail {
                        error: "dependency a failed".into()
                    }
                },
                Transition {
                    step: "c".into(),
                    change: Change::Fail {
                        error: "dependency b failed".into()
                    }
                },
            ]
        );
        assert_eq!(decision.phase, RunPhase::Running, "other still runs");
        assert_eq!(run.step("c").error.as_deref(), Some("dependency b failed"));

        run.succeed("other", "ok");
        let decision = run.reconcile();
        assert_eq!(decision.phase, RunPhase::Failed);
        assert_eq!(
            decision.message.as_deref(),
            Some("step a failed: the agent's task task-a-1 failed: model unavailable")
        );
    }

    #[test]
    fn a_failed_attempt_is_retried_with_backoff_then_succeeds() {
        let mut run = Run::new(vec![with_retries(step("a", &[]), 2), step("b", &["a"])]);
        run.reconcile();
        assert_eq!(
            run.step("a").idempotency_key.as_deref(),
            Some("run-uid/a/1")
        );

        run.fail("a", "boom");
        let decision = run.reconcile();
        let first_retry = t0() + secs(5);
        assert_eq!(
            decision.transitions,
            [Transition {
                step: "a".into(),
                change: Change::Retry {
                    error: "boom".into(),
                    at: first_retry
                }
            }]
        );
        assert_eq!(decision.phase, RunPhase::Running);
        assert_eq!(decision.wake_at, Some(first_retry));
        assert_eq!(run.phase("a"), StepPhase::Pending);
        assert_eq!(
            run.phase("b"),
            StepPhase::Pending,
            "b waits, it does not fail"
        );

        run.advance(secs(4));
        let early = run.reconcile();
        assert!(early.dispatch.is_empty());
        assert_eq!(early.wake_at, Some(first_retry));

        run.advance(secs(1));
        let second = run.reconcile();
        assert_eq!(names(&second), ["a"]);
        assert_eq!(second.dispatch[0].attempt, 2);
        assert_eq!(
            run.step("a").idempotency_key.as_deref(),
            Some("run-uid/a/2")
        );
        assert_eq!(
            run.step("a").start_time,
            Some(Time(t0())),
            "the step's first start"
        );

        run.advance(secs(1));
        run.fail("a", "boom again");
        let decision = run.reconcile();
        // 10 s after the second failure.
        assert_eq!(decision.wake_at, Some(run.now + secs(10)));

        run.advance(secs(10));
        assert_eq!(run.reconcile().dispatch[0].attempt, 3);
        run.succeed("a", "finally");
        assert_eq!(names(&run.reconcile()), ["b"]);
        assert_eq!(run.step("a").error, None);
    }

    #[test]
    fn a_step_fails_once_its_retries_are_used_up() {
        let mut run = Run::new(vec![with_retries(step("a", &[]), 1)]);
        run.reconcile();
        run.fail("a", "first");
        run.reconcile();
        run.advance(secs(5));
        assert_eq!(run.reconcile().dispatch[0].attempt, 2);
        run.fail("a", "second");
        let decision = run.reconcile();
        assert_eq!(decision.transitions, []);
        assert_eq!(decision.phase, RunPhase::Failed);
        assert_eq!(decision.message.as_deref(), Some("step a failed: second"));
        assert_eq!(decision.wake_at, None);
        assert_eq!(run.step("a").attempt, 2);
    }

    #[test]
    fn backoff_doubles_from_5s_up_to_5min() {
        let waits: Vec<i64> = (1..=9)
            .map(|attempt| retry_backoff(attempt).as_secs())
            .collect();
        assert_eq!(waits, [5, 10, 20, 40, 80, 160, 300, 300, 300]);
        assert_eq!(retry_backoff(i32::MAX), RETRY_BACKOFF_MAX);
        assert_eq!(retry_backoff(0), RETRY_BACKOFF_BASE);
    }

    #[test]
    fn an_attempt_past_its_timeout_fails_and_its_task_is_canceled() {
        let mut limited = with_retries(step("a", &[]), 1);
        limited.timeout_seconds = Some(30);
        let mut run = Run::new(vec![limited, step("b", &[])]);
        run.reconcile();
        run.advance(secs(10));
        let waiting = run.reconcile();
        assert_eq!(waiting.wake_at, Some(t0() + secs(30)));
        assert!(waiting.cancel.is_empty());

        run.advance(secs(20));
        let timed_out = run.reconcile();
        assert_eq!(
            timed_out.cancel,
            [CancelTask {
                step: "a".into(),
                task_id: Some("task-a-1".into()),
                idempotency_key: Some("run-uid/a/1".into()),
                agent_endpoint: Some("http://agent:8000".into()),
            }]
        );
        assert_eq!(
            timed_out.transitions,
            [Transition {
                step: "a".into(),
                change: Change::Retry {
                    error: "attempt 1 timed out after 30s".into(),
                    at: run.now + secs(5)
                }
            }]
        );

        // The retry's 30 s count from when it is sent, not from the step's start.
        run.advance(secs(5));
        assert_eq!(run.reconcile().dispatch[0].attempt, 2);
        let sent = run.now;
        run.advance(secs(29));
        assert!(run.reconcile().cancel.is_empty());
        assert_eq!(run.reconcile().wake_at, Some(sent + secs(30)));
        run.advance(secs(1));
        let failed = run.reconcile();
        assert_eq!(failed.cancel.len(), 1);
        assert_eq!(
            failed.transitions,
            [Transition {
                step: "a".into(),
                change: Change::Fail {
                    error: "attempt 2 timed out after 30s".into()
                }
            }]
        );
        assert_eq!(failed.phase, RunPhase::Running, "b still runs");
    }

    #[test]
    fn the_default_timeout_is_ten_minutes_and_covers_a_send_never_answered() {
        let mut run = Run::new(vec![step("a", &[])]);
        let decision = next(&run.plan, &run.steps, "", run.now).expect("valid");
        decision.apply(&run.plan, &mut run.steps, RUN, run.now);
        // Dispatching: the controller never learned the task id.
        assert_eq!(run.phase("a"), StepPhase::Dispatching);
        assert_eq!(run.reconcile().wake_at, Some(t0() + secs(600)));
        run.advance(secs(600));
        let decision = run.reconcile();
        assert_eq!(decision.cancel[0].task_id, None);
        assert_eq!(
            decision.cancel[0].idempotency_key.as_deref(),
            Some("run-uid/a/1")
        );
        assert_eq!(decision.phase, RunPhase::Failed);
    }

    #[test]
    fn a_canceled_dependency_cancels_its_dependents_and_the_run() {
        let mut run = Run::new(vec![step("a", &[]), step("b", &["a"])]);
        run.reconcile();
        run.step("a").phase = StepPhase::Canceled;
        let decision = run.reconcile();
        assert_eq!(run.phase("b"), StepPhase::Canceled);
        assert_eq!(decision.phase, RunPhase::Canceled);
        assert_eq!(decision.message.as_deref(), Some("step a was canceled"));
    }

    #[test]
    fn budgets_travel_with_the_dispatch() {
        let mut bounded = step("a", &[]);
        bounded.budgets = Some(StepBudgets {
            max_iterations: Some(5),
            max_runtime_seconds: None,
            max_tool_calls: Some(0),
        });
        let decision = next(&[bounded], &[], "", t0()).expect("valid");
        assert_eq!(
            decision.dispatch[0].budgets,
            Some(Budgets {
                max_iterations: Some(5),
                max_runtime_seconds: None,
                max_tool_calls: Some(0),
            })
        );
    }

    #[test]
    fn apply_keeps_one_status_per_step_in_plan_order() {
        let plan = vec![step("a", &[]), step("b", &["a"])];
        let mut steps = vec![StepStatus::pending("b"), StepStatus::pending("gone")];
        let decision = next(&plan, &steps, "", t0()).expect("valid");
        decision.apply(&plan, &mut steps, RUN, t0());
        let names: Vec<&str> = steps.iter().map(|step| step.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(steps[0].phase, StepPhase::Dispatching);
        assert_eq!(steps[0].attempt, 1);
        assert_eq!(steps[0].start_time, Some(Time(t0())));
    }

    #[test]
    fn validation_names_cycles_with_their_path() {
        let cycle = |plan: Vec<WorkflowStep>| validate(&plan).map_err(|error| error.to_string());
        assert_eq!(
            cycle(vec![step("a", &["b"]), step("b", &["a"])]),
            Err("the steps depend on each other in a cycle: a → b → a".to_string())
        );
        assert_eq!(
            cycle(vec![
                step("start", &[]),
                step("a", &["start", "c"]),
                step("b", &["a"]),
                step("c", &["b"]),
            ]),
            Err("the steps depend on each other in a cycle: a → c → b → a".to_string())
        );
        assert_eq!(
            validate(&[step("a", &["a"])]),
            Err(GraphError::Cycle {
                path: "a → a".into()
            })
        );
        assert!(next(&[step("a", &["b"]), step("b", &["a"])], &[], "", t0()).is_err());
    }

    #[test]
    fn validation_names_bad_references() {
        assert_eq!(
            validate(&[step("a", &["ghost"])]).map_err(|e| e.to_string()),
            Err("step a depends on ghost, which is not a step of the workflow".to_string())
        );
        assert_eq!(
            validate(&[step("a", &[]), step("a", &[])]),
            Err(GraphError::DuplicateStep { step: "a".into() })
        );
        assert_eq!(validate(&[]), Err(GraphError::NoSteps));
        assert_eq!(
            validate(&[
                step("a", &[]),
                with_input(step("b", &[]), "{{ steps.a.output }}")
            ])
            .map_err(|e| e.to_string()),
            Err(
                "the input of step b reads the output of a, but b does not depend on a \
                 (directly or through its dependencies), so it may not have run yet"
                    .to_string()
            )
        );
        assert_eq!(
            validate(&[with_input(step("a", &[]), "{{ steps.nobody.output }}")]),
            Err(GraphError::UnknownReference {
                step: "a".into(),
                reference: "nobody".into()
            })
        );
        assert_eq!(
            validate(&[with_input(step("a", &[]), "{{ steps.a.result }}")])
                .map_err(|e| e.to_string()),
            Err(
                "the input of step a: unknown template expression `{{ steps.a.result }}`: only \
                 `{{ input }}` and `{{ steps.NAME.output }}` are supported"
                    .to_string()
            )
        );
        let error = validate(&[with_when(step("a", &[]), "input ==")]).expect_err("bad CEL");
        assert!(
            error
                .to_string()
                .starts_with("the when of step a: invalid condition `input ==`"),
            "{error}"
        );
        // Reading a step two hops up is fine.
        assert_eq!(
            validate(&[
                step("a", &[]),
                step("b", &["a"]),
                with_input(step("c", &["b"]), "{{ steps.a.output }}"),
            ]),
            Ok(())
        );
    }
}
