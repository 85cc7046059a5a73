//! The scheduler's rules, case by case.

use super::*;
use crate::engine::outcome::{record_failure, record_sent, record_success};
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
        let decision = next(&self.plan, &self.steps, &self.input, self.now).expect("a valid plan");
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
        validate(&[with_input(step("a", &[]), "{{ steps.a.result }}")]).map_err(|e| e.to_string()),
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
