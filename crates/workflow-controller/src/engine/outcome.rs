//! How an attempt ended, written into its step's status: the controller reads the agent's task
//! and records it here; `dag::next` then decides what follows (a retry, the dependents). Outputs
//! and errors are cut to what the run's status holds (`MAX_OUTPUT`, `MAX_ERROR` characters).

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kaos_api::workflow::{MAX_ERROR, MAX_OUTPUT, StepPhase, StepStatus};

use crate::a2a::{Task, TaskState};

/// `output` cut to its first `max_chars` characters (so on a character boundary), and whether
/// it was cut.
pub fn truncate_output(output: &str, max_chars: usize) -> (String, bool) {
    match output.char_indices().nth(max_chars) {
        Some((end, _)) => (output[..end].to_string(), true),
        None => (output.to_string(), false),
    }
}

/// An error message short enough for a step's status, marked with `…` when cut.
pub fn bounded_error(error: &str) -> String {
    let limit = MAX_ERROR as usize;
    match error.char_indices().nth(limit) {
        Some(_) => {
            let (kept, _) = truncate_output(error, limit - 1);
            format!("{kept}…")
        }
        None => error.to_string(),
    }
}

/// The attempt's task was accepted by the agent: the step runs.
pub fn record_sent(step: &mut StepStatus, task_id: &str, agent_endpoint: &str) {
    step.phase = StepPhase::Running;
    step.task_id = Some(task_id.to_string());
    step.agent_endpoint = Some(agent_endpoint.to_string());
}

/// The attempt succeeded with `output`.
pub fn record_success(step: &mut StepStatus, output: &str, now: Timestamp) {
    let (output, truncated) = truncate_output(output, MAX_OUTPUT as usize);
    step.phase = StepPhase::Succeeded;
    step.output = Some(output);
    step.output_truncated = truncated;
    step.error = None;
    step.completion_time = Some(Time(now));
    step.next_attempt_time = None;
}

/// The attempt failed: the step reads `Failed` until `dag::next` turns it into a retry when
/// it has retries left.
pub fn record_failure(step: &mut StepStatus, error: &str, now: Timestamp) {
    step.phase = StepPhase::Failed;
    step.error = Some(bounded_error(error));
    step.completion_time = Some(Time(now));
}

/// What the agent's task says of the attempt, recorded; `false` while it is still working (the
/// step keeps running). A task that waits for input fails the attempt: a workflow has nobody to
/// answer, so the controller should also cancel that task.
pub fn record_task(step: &mut StepStatus, task: &Task, now: Timestamp) -> bool {
    match &task.state {
        TaskState::Completed => record_success(step, &task.output, now),
        TaskState::Failed => record_failure(
            step,
            &format!(
                "the agent's task {} failed: {}",
                task.id,
                task.message.as_deref().unwrap_or("no reason given")
            ),
            now,
        ),
        TaskState::Canceled => record_failure(
            step,
            &format!("the agent's task {} was canceled", task.id),
            now,
        ),
        TaskState::InputRequired => record_failure(
            step,
            &format!(
                "the agent's task {} asks for input, which a workflow step cannot give",
                task.id
            ),
            now,
        ),
        TaskState::Submitted | TaskState::Working | TaskState::Other(_) => return false,
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Timestamp {
        "2025-06-01T10:00:00Z".parse().expect("an instant")
    }

    fn task(state: TaskState, output: &str, message: Option<&str>) -> Task {
        Task {
            id: "task_1".to_string(),
            state,
            message: message.map(str::to_string),
            output: output.to_string(),
            idempotency_key: None,
        }
    }

    #[test]
    fn truncates_on_a_character_boundary() {
        assert_eq!(truncate_output("short", 4096), ("short".to_string(), false));
        assert_eq!(truncate_output("", 0), (String::new(), false));
        assert_eq!(truncate_output("abc", 3), ("abc".to_string(), false));
        assert_eq!(truncate_output("abcd", 3), ("abc".to_string(), true));
        // Multi-byte characters are kept whole: 4096 characters, not bytes.
        let long = "é".repeat(5000);
        let (kept, truncated) = truncate_output(&long, 4096);
        assert!(truncated);
        assert_eq!(kept.chars().count(), 4096);
        assert_eq!(kept.len(), 8192);
        let (kept, truncated) = truncate_output("a🦀b", 2);
        assert_eq!((kept.as_str(), truncated), ("a🦀", true));
    }

    #[test]
    fn errors_are_bounded_and_marked() {
        assert_eq!(bounded_error("boom"), "boom");
        let long = bounded_error(&"x".repeat(5000));
        assert_eq!(long.chars().count(), MAX_ERROR as usize);
        assert!(long.ends_with('…'));
        let exact = "y".repeat(MAX_ERROR as usize);
        assert_eq!(bounded_error(&exact), exact);
    }

    #[test]
    fn a_completed_task_succeeds_the_step_with_its_output_cut() {
        let mut step = StepStatus::pending("a");
        record_sent(&mut step, "task_1", "http://agent-a.ns:8000");
        assert_eq!(step.phase, StepPhase::Running);
        assert!(!record_task(
            &mut step,
            &task(TaskState::Working, "", None),
            now()
        ));
        assert_eq!(step.phase, StepPhase::Running);

        let output = "o".repeat(MAX_OUTPUT as usize + 10);
        assert!(record_task(
            &mut step,
            &task(TaskState::Completed, &output, None),
            now()
        ));
        assert_eq!(step.phase, StepPhase::Succeeded);
        assert_eq!(
            step.output.as_ref().map(String::len),
            Some(MAX_OUTPUT as usize)
        );
        assert!(step.output_truncated);
        assert_eq!(step.completion_time, Some(Time(now())));
    }

    #[test]
    fn failed_canceled_and_input_required_tasks_fail_the_attempt() {
        for (state, message, error) in [
            (
                TaskState::Failed,
                Some("model unavailable"),
                "the agent's task task_1 failed: model unavailable",
            ),
            (
                TaskState::Failed,
                None,
                "the agent's task task_1 failed: no reason given",
            ),
            (
                TaskState::Canceled,
                None,
                "the agent's task task_1 was canceled",
            ),
            (
                TaskState::InputRequired,
                None,
                "the agent's task task_1 asks for input, which a workflow step cannot give",
            ),
        ] {
            let mut step = StepStatus::pending("a");
            assert!(record_task(&mut step, &task(state, "", message), now()));
            assert_eq!(step.phase, StepPhase::Failed);
            assert_eq!(step.error.as_deref(), Some(error));
        }
    }
}
