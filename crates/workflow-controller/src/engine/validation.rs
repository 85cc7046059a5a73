//! Whether a workflow can run, as its `Ready` condition says: its steps form a valid graph, its
//! schedule (when set) can be read, and every agent its steps name exists. Each problem says
//! what to fix.

use kaos_api::workflow::AgentWorkflowSpec;

use crate::engine::dag;
use crate::schedule::cron::Schedule;

pub use kaos_api::conditions::READY;
/// The `Ready=True` reason: the graph, the schedule and the agents named are all fine.
pub const VALID: &str = "Valid";
/// The `Ready=False` reason for a cycle, an unknown dependency, or an input or condition that
/// cannot be read.
pub const INVALID_GRAPH: &str = "InvalidGraph";
/// The `Ready=False` reason for a cron expression or time zone that cannot be read.
pub const INVALID_SCHEDULE: &str = "InvalidSchedule";
/// The `Ready=False` reason for a step naming an Agent that does not exist.
pub const AGENT_NOT_FOUND: &str = "AgentNotFound";

/// Why a workflow is not Ready.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub reason: &'static str,
    pub message: String,
}

/// What validation found: the schedule, read, and the first problem, if any.
#[derive(Debug, Clone)]
pub struct Validity {
    pub schedule: Option<Schedule>,
    pub problem: Option<Problem>,
}

impl Validity {
    pub fn is_ready(&self) -> bool {
        self.problem.is_none()
    }

    /// The `Ready` condition's reason and message.
    pub fn reason_and_message(&self, spec: &AgentWorkflowSpec) -> (&'static str, String) {
        match &self.problem {
            Some(problem) => (problem.reason, problem.message.clone()),
            None => (VALID, ready_message(spec, self.schedule.is_some())),
        }
    }
}

/// Checks `spec`; `agent_exists` says whether an Agent of the workflow's namespace exists.
pub fn validate(
    spec: &AgentWorkflowSpec,
    namespace: &str,
    agent_exists: impl Fn(&str) -> bool,
) -> Validity {
    let schedule = spec
        .schedule
        .as_deref()
        .map(|expression| Schedule::parse(expression, spec.time_zone.as_deref()))
        .transpose();
    let graph = dag::validate(&spec.steps);
    let problem = if let Err(error) = &graph {
        Some(Problem {
            reason: INVALID_GRAPH,
            message: format!("{error}; fix spec.steps"),
        })
    } else if let Err(error) = &schedule {
        Some(Problem {
            reason: INVALID_SCHEDULE,
            message: format!("{error}; fix spec.schedule or spec.timeZone"),
        })
    } else {
        missing_agents(spec, namespace, agent_exists)
    };
    Validity {
        schedule: schedule.ok().flatten(),
        problem,
    }
}

fn missing_agents(
    spec: &AgentWorkflowSpec,
    namespace: &str,
    agent_exists: impl Fn(&str) -> bool,
) -> Option<Problem> {
    let mut missing: Vec<&str> = spec
        .steps
        .iter()
        .map(|step| step.agent_ref.as_str())
        .filter(|agent| !agent_exists(agent))
        .collect();
    missing.sort_unstable();
    missing.dedup();
    let message = match missing.as_slice() {
        [] => return None,
        [agent] => format!(
            "Agent {agent} not found in namespace {namespace}: create it, or fix the agentRef of the steps that name it"
        ),
        agents => format!(
            "Agents {} not found in namespace {namespace}: create them, or fix the agentRef of the steps that name them",
            agents.join(", ")
        ),
    };
    Some(Problem {
        reason: AGENT_NOT_FOUND,
        message,
    })
}

fn ready_message(spec: &AgentWorkflowSpec, scheduled: bool) -> String {
    let steps = match spec.steps.len() {
        1 => "1 step".to_string(),
        n => format!("{n} steps"),
    };
    match (&spec.schedule, scheduled) {
        (Some(schedule), true) if spec.suspend => {
            format!("{steps}; schedule {schedule:?} suspended")
        }
        (Some(schedule), true) => format!(
            "{steps}; runs on schedule {schedule:?} in {}",
            spec.time_zone
                .as_deref()
                .unwrap_or(kaos_api::workflow::DEFAULT_TIME_ZONE)
        ),
        _ => format!("{steps}; runs when an AgentWorkflowRun names it"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(value: serde_json::Value) -> AgentWorkflowSpec {
        serde_json::from_value(value).expect("a workflow spec")
    }

    /// The message of the problem `validity` reports, which must have `reason`.
    fn problem_message(validity: Validity, reason: &str) -> String {
        let problem = validity.problem.expect("a problem");
        assert_eq!(problem.reason, reason);
        problem.message
    }

    #[test]
    fn a_cycle_is_named_with_its_path() {
        let validity = validate(
            &spec(json!({"steps": [
                {"name": "a", "agentRef": "x", "dependsOn": ["b"]},
                {"name": "b", "agentRef": "x", "dependsOn": ["a"]}]})),
            "ns",
            |_| true,
        );
        let problem = validity.problem.expect("a problem");
        assert_eq!(problem.reason, INVALID_GRAPH);
        assert_eq!(
            problem.message,
            "the steps depend on each other in a cycle: a → b → a; fix spec.steps"
        );
    }

    #[test]
    fn a_bad_schedule_and_missing_agents_say_what_to_fix() {
        let bad = validate(
            &spec(json!({"steps": [{"name": "a", "agentRef": "x"}], "schedule": "61 * * * *"})),
            "ns",
            |_| true,
        );
        let message = problem_message(bad, INVALID_SCHEDULE);
        assert!(
            message.starts_with("invalid schedule \"61 * * * *\""),
            "{message}"
        );
        assert!(message.ends_with("fix spec.schedule or spec.timeZone"));

        let missing = validate(
            &spec(
                json!({"steps": [{"name": "a", "agentRef": "y"}, {"name": "b", "agentRef": "x"},
                                    {"name": "c", "agentRef": "y"}, {"name": "d", "agentRef": "z"}]}),
            ),
            "team",
            |agent| agent == "z",
        );
        let message = problem_message(missing, AGENT_NOT_FOUND);
        assert!(
            message.starts_with("Agents x, y not found in namespace team: create them"),
            "{message}"
        );
    }

    #[test]
    fn a_valid_workflow_says_how_it_runs() {
        let scheduled = spec(json!({"steps": [{"name": "a", "agentRef": "x"}],
                                    "schedule": "@daily", "timeZone": "Europe/Paris"}));
        let validity = validate(&scheduled, "ns", |_| true);
        assert!(validity.is_ready() && validity.schedule.is_some());
        assert_eq!(
            validity.reason_and_message(&scheduled),
            (
                VALID,
                "1 step; runs on schedule \"@daily\" in Europe/Paris".to_string()
            )
        );
    }
}
