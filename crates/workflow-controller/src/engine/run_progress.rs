//! One run's progress, on data only: how a run starts (a snapshot of its workflow), and how it
//! moves on from its steps' statuses once the tasks in flight have been looked at: which steps
//! to send (to which endpoint), which wait for their agent, which fail because their agent does
//! not exist, which timed-out tasks to cancel, the run's phase, and when to look again.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kaos_api::workflow::{
    AgentWorkflow, AgentWorkflowRun, AgentWorkflowRunStatus, RunPhase, StepPhase, StepStatus,
    WorkflowStep,
};

use crate::a2a::Budgets;
use crate::a2a::StepSend;
use crate::engine::dag::{self, CancelTask, Decision};
use crate::engine::outcome::record_failure;
use crate::engine::template;
use crate::engine::wake::{send_woken, waking};

/// How long a step may stay `Dispatching` with no task on its agent before it is sent again:
/// the agent makes its task the moment it reads the request, so an older one was never
/// received (the process that sent it stopped first).
pub const DISPATCH_GRACE: SignedDuration = SignedDuration::from_secs(10);

/// What a step reads of its agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentState {
    Missing,
    NotReady,
    /// Suspended (`spec.suspend`) and not ready: a step is dispatched to it all the same, which
    /// wakes it (its agent controller keeps an agent with a step in flight at one pod), and is
    /// sent once it is ready; the attempt's time limit counts the wake.
    Asleep,
    Ready {
        endpoint: String,
    },
}

/// What the reconcile does after the status is written.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Progress {
    pub sends: Vec<StepSend>,
    /// Tasks of timed-out attempts, to cancel (best effort).
    pub cancels: Vec<CancelTask>,
    /// When to look again if nothing else wakes the run (a retry, a timeout, a wait's end).
    pub wake_at: Option<Timestamp>,
}

/// The status a run starts with: its workflow's steps as they are now, its input, every step
/// pending; `Failed` when the workflow is missing or its steps cannot run.
pub fn start(
    run: &AgentWorkflowRun,
    workflow: Option<&AgentWorkflow>,
    now: Timestamp,
) -> AgentWorkflowRunStatus {
    let failed = |message: String| AgentWorkflowRunStatus {
        phase: Some(RunPhase::Failed),
        observed_generation: run.metadata.generation,
        start_time: Some(Time(now)),
        completion_time: Some(Time(now)),
        message: Some(message),
        ..AgentWorkflowRunStatus::default()
    };
    let Some(workflow) = workflow else {
        return failed(format!("AgentWorkflow {} not found", run.spec.workflow_ref));
    };
    if let Err(error) = dag::validate(&workflow.spec.steps) {
        return failed(error.to_string());
    }
    AgentWorkflowRunStatus {
        phase: Some(RunPhase::Running),
        observed_generation: run.metadata.generation,
        workflow_generation: workflow.metadata.generation,
        plan: workflow.spec.steps.clone(),
        input: run
            .spec
            .input
            .clone()
            .or_else(|| workflow.spec.input.clone()),
        steps: workflow
            .spec
            .steps
            .iter()
            .map(|step| StepStatus::pending(&step.name))
            .collect(),
        start_time: Some(Time(now)),
        ..AgentWorkflowRunStatus::default()
    }
}

/// Moves a running run on: decides (`dag::next`), resolves each step to send to its agent, and
/// applies it all to `status`, settling in the same pass what a refused step entails (a retry,
/// its dependents). `status` must be running, with its in-flight steps already looked at.
pub fn advance(
    status: &mut AgentWorkflowRunStatus,
    run_uid: &str,
    now: Timestamp,
    agent: impl Fn(&str) -> AgentState,
) -> Progress {
    let mut progress = Progress::default();
    let input = status.input.clone().unwrap_or_default();
    let plan = status.plan.clone();
    progress
        .sends
        .extend(send_woken(status, &plan, now, &agent));
    let mut waiting: Vec<(String, String)> = Vec::new();
    // A refused step changes what the scheduler sees; each pass settles at least one step.
    for _ in 0..=plan.len() {
        let mut decision = match dag::next(&plan, &status.steps, &input, now) {
            Ok(decision) => decision,
            Err(error) => {
                finish(status, RunPhase::Failed, Some(error.to_string()), now);
                return progress;
            }
        };
        let mut refused: Vec<(String, String)> = Vec::new();
        let mut ready: Vec<(String, String)> = Vec::new();
        waiting.clear();
        decision
            .dispatch
            .retain(|dispatch| match agent(&dispatch.agent_ref) {
                AgentState::Ready { endpoint } => {
                    ready.push((dispatch.step.clone(), endpoint));
                    true
                }
                // Dispatched without an endpoint: the step in flight is the wake.
                AgentState::Asleep => true,
                AgentState::Missing => {
                    refused.push((
                        dispatch.step.clone(),
                        format!("Agent {} not found", dispatch.agent_ref),
                    ));
                    true
                }
                AgentState::NotReady => {
                    let step = step_named(&status.steps, &dispatch.step);
                    let since = step
                        .and_then(|step| step.next_attempt_time.as_ref())
                        .map_or(now, |time| time.0);
                    let timeout = plan
                        .iter()
                        .find(|planned| planned.name == dispatch.step)
                        .map_or(
                            kaos_api::workflow::DEFAULT_STEP_TIMEOUT_SECONDS,
                            |planned| planned.effective_timeout_seconds(),
                        );
                    let deadline = since
                        .checked_add(SignedDuration::from_secs(timeout.max(1)))
                        .unwrap_or(Timestamp::MAX);
                    if now >= deadline {
                        refused.push((
                            dispatch.step.clone(),
                            format!(
                                "Agent {} was not ready within {timeout}s",
                                dispatch.agent_ref
                            ),
                        ));
                        true
                    } else {
                        progress.wake_at = earliest(progress.wake_at, deadline);
                        waiting.push((dispatch.step.clone(), dispatch.agent_ref.clone()));
                        false
                    }
                }
            });
        apply(&plan, status, &decision, run_uid, now);
        for (step, _) in &waiting {
            // A step that waits for its agent from the start: when it became runnable, which
            // its time limit counts from (a retry's counts from its `nextAttemptTime`).
            if let Some(step) = step_named_mut(&mut status.steps, step)
                && step.next_attempt_time.is_none()
            {
                step.next_attempt_time = Some(Time(now));
            }
        }
        for (step, endpoint) in ready {
            if let Some(send) = record_endpoint(status, &plan, &decision, &step, &endpoint) {
                progress.sends.push(send);
            }
        }
        for (step, error) in &refused {
            if let Some(step) = step_named_mut(&mut status.steps, step) {
                record_failure(step, error, now);
            }
        }
        progress.cancels.extend(decision.cancel.iter().cloned());
        progress.wake_at = decision
            .wake_at
            .map_or(progress.wake_at, |at| earliest(progress.wake_at, at));
        if refused.is_empty() {
            let message = decision
                .message
                .clone()
                .or_else(|| waiting_message(&waiting, &waking(status, &plan)));
            if decision.phase.is_finished() {
                finish(status, decision.phase, message, now);
                progress.wake_at = None;
            } else {
                status.phase = Some(decision.phase);
                status.message = message;
            }
            return progress;
        }
    }
    progress
}

/// Writes `decision` into the steps, as `Decision::apply` does.
fn apply(
    plan: &[WorkflowStep],
    status: &mut AgentWorkflowRunStatus,
    decision: &Decision,
    run_uid: &str,
    now: Timestamp,
) {
    decision.apply(plan, &mut status.steps, run_uid, now);
}

/// Records where a dispatched step goes, and what to send it.
fn record_endpoint(
    status: &mut AgentWorkflowRunStatus,
    plan: &[WorkflowStep],
    decision: &Decision,
    step: &str,
    endpoint: &str,
) -> Option<StepSend> {
    let dispatch = decision.dispatch.iter().find(|d| d.step == step)?;
    let planned = plan.iter().find(|p| p.name == step)?;
    let status_step = step_named_mut(&mut status.steps, step)?;
    status_step.agent_endpoint = Some(endpoint.to_string());
    Some(StepSend {
        step: step.to_string(),
        idempotency_key: status_step.idempotency_key.clone()?,
        endpoint: endpoint.to_string(),
        text: dispatch.input.clone(),
        budgets: dispatch.budgets,
        timeout: step_timeout(planned),
    })
}

/// The send of a step that is `Dispatching` again (its first send never reached the agent):
/// the same key, endpoint and input (its dependencies' outputs have not changed since).
pub fn resend(status: &AgentWorkflowRunStatus, step: &str) -> Result<StepSend, String> {
    let planned = status
        .plan
        .iter()
        .find(|planned| planned.name == step)
        .ok_or_else(|| format!("step {step} is not in the plan"))?;
    let current =
        step_named(&status.steps, step).ok_or_else(|| format!("step {step} has no status"))?;
    let (Some(key), Some(endpoint)) = (&current.idempotency_key, &current.agent_endpoint) else {
        return Err(format!("step {step} has no idempotency key or endpoint"));
    };
    let input = status.input.as_deref().unwrap_or_default();
    let text = template::render_step_input(planned.input.as_deref(), input, |name| {
        step_named(&status.steps, name).and_then(|step| step.output.as_deref())
    })
    .map_err(|error| format!("its input: {error}"))?;
    Ok(StepSend {
        step: step.to_string(),
        idempotency_key: key.clone(),
        endpoint: endpoint.clone(),
        text,
        budgets: planned.budgets.as_ref().map(Budgets::from),
        timeout: step_timeout(planned),
    })
}

/// When a step's current attempt was sent (the first: its `startTime`; a retry: its
/// `nextAttemptTime`).
pub fn attempt_sent_at(step: &StepStatus) -> Option<Timestamp> {
    let retry = step.next_attempt_time.as_ref().filter(|_| step.attempt > 1);
    retry.or(step.start_time.as_ref()).map(|time| time.0)
}

/// Whether any step is under way (sent, or being sent).
pub fn in_flight(status: &AgentWorkflowRunStatus) -> bool {
    status
        .steps
        .iter()
        .any(|step| matches!(step.phase, StepPhase::Dispatching | StepPhase::Running))
}

/// The steps that finished between `before` and `after`, with how long each ran (from its
/// first send), for the metrics.
pub fn newly_finished(
    before: &AgentWorkflowRunStatus,
    after: &AgentWorkflowRunStatus,
) -> Vec<(StepPhase, Option<f64>)> {
    after
        .steps
        .iter()
        .filter(|step| step.phase.is_finished())
        .filter(|step| {
            !step_named(&before.steps, &step.name).is_some_and(|was| was.phase.is_finished())
        })
        .map(|step| {
            let ran = match (&step.start_time, &step.completion_time) {
                (Some(start), Some(end)) if step.attempt > 0 => {
                    Some(end.0.duration_since(start.0).as_secs_f64())
                }
                _ => None,
            };
            (step.phase, ran)
        })
        .collect()
}

fn finish(
    status: &mut AgentWorkflowRunStatus,
    phase: RunPhase,
    message: Option<String>,
    now: Timestamp,
) {
    status.phase = Some(phase);
    status.message = message;
    status.completion_time = status.completion_time.take().or(Some(Time(now)));
}

fn waiting_message(waiting: &[(String, String)], waking: &[(String, String)]) -> Option<String> {
    let parts: Vec<String> = waiting
        .iter()
        .map(|(step, agent)| format!("step {step} is waiting for Agent {agent} to be ready"))
        .chain(waking.iter().map(|(step, agent)| {
            format!("step {step} is waking Agent {agent} (suspended) and is sent once it is ready")
        }))
        .collect();
    (!parts.is_empty()).then(|| parts.join("; "))
}

fn step_timeout(step: &WorkflowStep) -> Duration {
    Duration::from_secs(
        u64::try_from(step.effective_timeout_seconds())
            .unwrap_or(1)
            .max(1),
    )
}

fn earliest(current: Option<Timestamp>, at: Timestamp) -> Option<Timestamp> {
    Some(current.map_or(at, |current| current.min(at)))
}

pub fn step_named<'s>(steps: &'s [StepStatus], name: &str) -> Option<&'s StepStatus> {
    steps.iter().find(|step| step.name == name)
}

pub fn step_named_mut<'s>(steps: &'s mut [StepStatus], name: &str) -> Option<&'s mut StepStatus> {
    steps.iter_mut().find(|step| step.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::outcome::{record_sent, record_success};
    use serde_json::json;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_750_000_000 + second).expect("an instant")
    }

    fn run_of(workflow: serde_json::Value) -> (AgentWorkflowRun, AgentWorkflow) {
        let run: AgentWorkflowRun = serde_json::from_value(json!({
            "apiVersion": "kaos.tools/v1alpha1", "kind": "AgentWorkflowRun",
            "metadata": {"name": "r", "namespace": "ns", "uid": "uid", "generation": 1},
            "spec": {"workflowRef": "wf"}}))
        .expect("a run");
        let workflow: AgentWorkflow = serde_json::from_value(json!({
            "apiVersion": "kaos.tools/v1alpha1", "kind": "AgentWorkflow",
            "metadata": {"name": "wf", "namespace": "ns", "generation": 4},
            "spec": workflow}))
        .expect("a workflow");
        (run, workflow)
    }

    fn ready(agent: &str) -> AgentState {
        AgentState::Ready {
            endpoint: format!("http://{agent}:8000"),
        }
    }

    #[test]
    fn a_run_starts_from_a_snapshot_or_fails_saying_why() {
        let (run, workflow) =
            run_of(json!({"steps": [{"name": "a", "agentRef": "x"}], "input": "hi"}));
        let status = start(&run, Some(&workflow), at(0));
        assert_eq!(status.phase, Some(RunPhase::Running));
        assert_eq!(status.workflow_generation, Some(4));
        assert_eq!(status.input.as_deref(), Some("hi"));
        assert_eq!(status.steps, [StepStatus::pending("a")]);

        let missing = start(&run, None, at(0));
        assert_eq!(missing.phase, Some(RunPhase::Failed));
        assert_eq!(
            missing.message.as_deref(),
            Some("AgentWorkflow wf not found")
        );
        let (_, cyclic) = run_of(json!({"steps": [
            {"name": "a", "agentRef": "x", "dependsOn": ["b"]},
            {"name": "b", "agentRef": "x", "dependsOn": ["a"]}]}));
        let invalid = start(&run, Some(&cyclic), at(0));
        assert_eq!(
            invalid.message.as_deref(),
            Some("the steps depend on each other in a cycle: a → b → a")
        );
    }

    #[test]
    fn ready_steps_are_sent_with_their_endpoint_recorded_first() {
        let (run, workflow) = run_of(json!({"steps": [
            {"name": "a", "agentRef": "x"}, {"name": "b", "agentRef": "y", "dependsOn": ["a"],
             "input": "{{ steps.a.output }}!"}], "input": "go"}));
        let mut status = start(&run, Some(&workflow), at(0));
        let progress = advance(&mut status, "uid", at(0), ready);
        assert_eq!(progress.sends.len(), 1);
        assert_eq!(progress.sends[0].idempotency_key, "uid/a/1");
        assert_eq!(progress.sends[0].text, "go");
        assert_eq!(status.steps[0].phase, StepPhase::Dispatching);
        assert_eq!(
            status.steps[0].agent_endpoint.as_deref(),
            Some("http://x:8000")
        );
        assert_eq!(
            resend(&status, "a").map(|send| send.text),
            Ok("go".to_string())
        );

        record_sent(&mut status.steps[0], "t1", "http://x:8000");
        record_success(&mut status.steps[0], "A", at(3));
        let progress = advance(&mut status, "uid", at(3), ready);
        assert_eq!(progress.sends[0].text, "A!");
        assert_eq!(
            resend(&status, "b").map(|send| send.text),
            Ok("A!".to_string())
        );
    }

    #[test]
    fn a_missing_agent_fails_the_attempt_and_retries_apply() {
        let (run, workflow) = run_of(json!({"steps": [
            {"name": "a", "agentRef": "ghost", "retries": 1}, {"name": "b", "agentRef": "x", "dependsOn": ["a"]}]}));
        let mut status = start(&run, Some(&workflow), at(0));
        let progress = advance(&mut status, "uid", at(0), |_| AgentState::Missing);
        assert!(progress.sends.is_empty());
        assert_eq!(status.steps[0].phase, StepPhase::Pending, "retried later");
        assert_eq!(
            status.steps[0].error.as_deref(),
            Some("Agent ghost not found")
        );
        assert_eq!(progress.wake_at, Some(at(5)));

        let progress = advance(&mut status, "uid", at(5), |_| AgentState::Missing);
        assert!(progress.sends.is_empty());
        assert_eq!(status.phase, Some(RunPhase::Failed));
        assert_eq!(status.steps[1].phase, StepPhase::Failed);
        assert_eq!(
            status.message.as_deref(),
            Some("step a failed: Agent ghost not found")
        );
        assert_eq!(status.completion_time, Some(Time(at(5))));
    }

    #[test]
    fn a_step_waits_for_its_agent_within_its_timeout() {
        let (run, workflow) =
            run_of(json!({"steps": [{"name": "a", "agentRef": "x", "timeoutSeconds": 30}]}));
        let mut status = start(&run, Some(&workflow), at(0));
        let progress = advance(&mut status, "uid", at(0), |_| AgentState::NotReady);
        assert!(progress.sends.is_empty());
        assert_eq!(status.steps[0].phase, StepPhase::Pending);
        assert_eq!(status.phase, Some(RunPhase::Running));
        assert_eq!(
            status.message.as_deref(),
            Some("step a is waiting for Agent x to be ready")
        );
        assert_eq!(progress.wake_at, Some(at(30)));
        // Ready in time: sent, and the wait is forgotten.
        let mut early = status.clone();
        let progress = advance(&mut early, "uid", at(10), ready);
        assert_eq!(progress.sends.len(), 1);
        assert_eq!(early.steps[0].next_attempt_time, None);
        assert_eq!(early.message, None);
        // Not ready in time: the step fails.
        let progress = advance(&mut status, "uid", at(30), |_| AgentState::NotReady);
        assert!(progress.sends.is_empty());
        assert_eq!(status.phase, Some(RunPhase::Failed));
        assert_eq!(
            status.message.as_deref(),
            Some("step a failed: Agent x was not ready within 30s")
        );
    }

    #[test]
    fn a_step_wakes_a_suspended_agent_and_its_time_limit_counts_the_wake() {
        let (run, workflow) =
            run_of(json!({"steps": [{"name": "a", "agentRef": "x", "timeoutSeconds": 30}]}));
        let mut status = start(&run, Some(&workflow), at(0));
        let progress = advance(&mut status, "uid", at(0), |_| AgentState::Asleep);
        // Dispatched (which pins, so wakes, its agent), not sent: no endpoint yet.
        assert!(progress.sends.is_empty());
        assert_eq!(status.steps[0].phase, StepPhase::Dispatching);
        assert_eq!(status.steps[0].idempotency_key.as_deref(), Some("uid/a/1"));
        assert_eq!(status.steps[0].agent_endpoint, None);
        assert_eq!(
            status.message.as_deref(),
            Some("step a is waking Agent x (suspended) and is sent once it is ready")
        );
        // Still asleep: nothing new.
        let mut later = status.clone();
        let progress = advance(&mut later, "uid", at(5), |_| AgentState::Asleep);
        assert!(progress.sends.is_empty());
        assert_eq!(later, status);

        // Awake at 12 s: sent with the attempt's key, its limit still ending at 30 s.
        let mut woken = status.clone();
        let progress = advance(&mut woken, "uid", at(12), ready);
        assert_eq!(progress.sends.len(), 1);
        assert_eq!(progress.sends[0].idempotency_key, "uid/a/1");
        assert_eq!(progress.sends[0].endpoint, "http://x:8000");
        assert_eq!(
            woken.steps[0].agent_endpoint.as_deref(),
            Some("http://x:8000")
        );
        assert_eq!(woken.message, None);
        assert_eq!(progress.wake_at, Some(at(30)));

        // Not awake within the limit: the attempt timed out.
        let progress = advance(&mut status, "uid", at(30), |_| AgentState::Asleep);
        assert!(progress.sends.is_empty());
        assert_eq!(status.phase, Some(RunPhase::Failed));
        assert_eq!(
            status.message.as_deref(),
            Some("step a failed: attempt 1 timed out after 30s")
        );
    }

    #[test]
    fn a_waking_step_whose_agent_goes_fails_its_attempt() {
        let (run, workflow) = run_of(json!({"steps": [{"name": "a", "agentRef": "x"}]}));
        let mut status = start(&run, Some(&workflow), at(0));
        advance(&mut status, "uid", at(0), |_| AgentState::Asleep);
        advance(&mut status, "uid", at(3), |_| AgentState::Missing);
        assert_eq!(status.phase, Some(RunPhase::Failed));
        assert_eq!(
            status.message.as_deref(),
            Some("step a failed: Agent x not found")
        );
    }

    #[test]
    fn finished_steps_are_reported_once() {
        let (run, workflow) = run_of(json!({"steps": [{"name": "a", "agentRef": "x"}]}));
        let mut before = start(&run, Some(&workflow), at(0));
        advance(&mut before, "uid", at(0), ready);
        let mut after = before.clone();
        record_sent(&mut after.steps[0], "t", "http://x:8000");
        record_success(&mut after.steps[0], "ok", at(7));
        advance(&mut after, "uid", at(7), ready);
        assert_eq!(after.phase, Some(RunPhase::Succeeded));
        assert_eq!(
            newly_finished(&before, &after),
            [(StepPhase::Succeeded, Some(7.0))]
        );
        assert!(newly_finished(&after, &after).is_empty());
        assert!(!in_flight(&after) && in_flight(&before));
    }
}
