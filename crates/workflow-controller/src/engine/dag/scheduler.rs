//! One pass of the rules over the steps' statuses: what to send, skip, fail, retry or cancel.

use std::collections::{BTreeMap, HashMap};

use jiff::{SignedDuration, Timestamp};
use kaos_api::workflow::{RunPhase, StepPhase, StepStatus, WorkflowStep};

use crate::a2a::Budgets;
use crate::engine::template::{self};
use crate::engine::when::StepOutcome;

use super::graph::Graph;
use super::{CancelTask, Change, Decision, Dispatch, Transition, retry_backoff};

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

/// Runs the rules over every step, dependencies first.
pub(super) fn decide<'p>(
    graph: &Graph<'p>,
    steps: &'p [StepStatus],
    input: &str,
    now: Timestamp,
) -> Decision {
    let plan = graph.plan;
    let statuses: HashMap<&str, &StepStatus> = steps
        .iter()
        .map(|step| (step.name.as_str(), step))
        .collect();
    let mut scheduler = Scheduler {
        graph,
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
    scheduler.into_decision()
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
            let reason = format!("dependency {canceled} was canceled");
            return self.settle(index, Change::Cancel { reason }, StepPhase::Canceled);
        }
        if let Some(skipped) = with_phase(StepPhase::Skipped) {
            let reason = format!("dependency {skipped} was skipped");
            return self.settle(index, Change::Skip { reason }, StepPhase::Skipped);
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
pub(super) fn has_retries_left(step: &WorkflowStep, status: &StepStatus) -> bool {
    status.attempt >= 1 && status.attempt <= step.retries
}

pub(super) fn attempt_start(status: &StepStatus) -> Option<Timestamp> {
    let retry_start = status
        .next_attempt_time
        .as_ref()
        .filter(|_| status.attempt > 1);
    retry_start
        .or(status.start_time.as_ref())
        .map(|time| time.0)
}
