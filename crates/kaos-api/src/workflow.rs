//! The workflow kinds: `AgentWorkflow`, a graph of steps each sent to an Agent of the namespace
//! (run on demand or on a cron schedule), and `AgentWorkflowRun`, one execution of it.
//!
//! A run takes a snapshot of the workflow's steps when it starts (`status.plan`), so editing the
//! workflow changes the runs that start afterwards, never one under way.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{Conditions, DNS_LABEL, DNS_SUBDOMAIN, condition_list_schema};

mod run;
pub use run::{
    AgentWorkflowRun, AgentWorkflowRunSpec, AgentWorkflowRunStatus, RunPhase, RunTrigger,
    StepPhase, StepStatus,
};

/// The most steps a workflow has. With [`MAX_DEPENDENCIES`] it bounds the cost of the CEL rules
/// that check `dependsOn`, which kube-apiserver estimates from these bounds when the CRD is
/// applied: it grows as steps² × dependencies, about a ninth of the per-rule budget at 32 and 32,
/// close to all of it at 64 and 64 (measured on kube-apiserver 1.37).
pub const MAX_STEPS: u32 = 32;
/// The most entries of a step's `dependsOn`.
pub const MAX_DEPENDENCIES: u32 = 32;
/// The longest step name: a DNS label.
pub const MAX_STEP_NAME: u32 = 63;
/// The longest resource name a reference can hold (`agentRef`, `workflowRef`).
pub const MAX_REF: u32 = 253;
/// The longest input, of a workflow, a step or a run (32 KiB).
pub const MAX_INPUT: u32 = 32_768;
/// The longest `schedule`.
pub const MAX_SCHEDULE: u32 = 128;
/// The longest `timeZone`.
pub const MAX_TIME_ZONE: u32 = 64;
/// The longest `when` condition.
pub const MAX_CONDITION: u32 = 1_024;
/// The longest `timeoutSeconds` and `budgets.maxRuntimeSeconds`: a day.
pub const MAX_STEP_SECONDS: i64 = 86_400;
/// A step's time limit when `timeoutSeconds` is unset (10 minutes).
pub const DEFAULT_STEP_TIMEOUT_SECONDS: i64 = 600;
/// The most retries of a step.
pub const MAX_RETRIES: i32 = 10;
/// The most runs of each outcome a workflow keeps.
pub const MAX_HISTORY: i32 = 100;
/// Succeeded runs kept when `successfulRunsHistoryLimit` is unset.
pub const DEFAULT_SUCCESSFUL_RUNS_HISTORY_LIMIT: i32 = 3;
/// Failed runs kept when `failedRunsHistoryLimit` is unset.
pub const DEFAULT_FAILED_RUNS_HISTORY_LIMIT: i32 = 1;
/// The longest step output kept in a run's status (4 KiB); the controller cuts longer ones and
/// sets `outputTruncated`.
pub const MAX_OUTPUT: u32 = 4_096;
/// The longest step error kept in a run's status.
pub const MAX_ERROR: u32 = 1_024;
/// The time zone of `schedule` when `timeZone` is unset.
pub const DEFAULT_TIME_ZONE: &str = "UTC";

/// What `schedule` must match: five fields separated by spaces, or one of the macros.
pub const SCHEDULE_PATTERN: &str =
    "^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|[^ ]+( +[^ ]+){4})$";

/// The desired state of an AgentWorkflow: its steps, its input and when it runs.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[kube(
    group = "kaos.tools",
    version = "v1alpha1",
    kind = "AgentWorkflow",
    plural = "agentworkflows",
    singular = "agentworkflow",
    namespaced,
    doc = "A workflow of steps, each a task sent to an Agent of the namespace, ordered by their dependencies; run by creating an AgentWorkflowRun, or on a cron schedule.",
    status = "AgentWorkflowStatus",
    shortname = "awf",
    category = "kaos",
    printcolumn = r#"{"name":"Schedule","type":"string","jsonPath":".spec.schedule"}"#,
    printcolumn = r#"{"name":"Suspend","type":"boolean","jsonPath":".spec.suspend"}"#,
    printcolumn = r#"{"name":"Last Schedule","type":"date","jsonPath":".status.lastScheduleTime"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct AgentWorkflowSpec {
    /// The steps, 1 to 32. A step starts once the steps it depends on are done, so steps with
    /// no dependency between them may run at the same time. Step names are unique, and every
    /// `dependsOn` entry names a step of this list.
    #[schemars(length(min = 1, max = MAX_STEPS))]
    #[schemars(extend("x-kubernetes-validations" = [
        {
            "rule": "self.all(s, self.exists_one(t, t.name == s.name))",
            "message": "step names must be unique within a workflow",
        },
        {
            "rule": "self.all(s, !has(s.dependsOn) || s.dependsOn.all(d, self.exists(t, t.name == d)))",
            "message": "every dependsOn entry must name a step of this workflow",
        },
    ]))]
    pub steps: Vec<WorkflowStep>,
    /// The workflow's input: the text each step receives unless the step sets its own `input`. A
    /// run's `spec.input` replaces it for that run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_INPUT))]
    pub input: Option<String>,
    /// Runs the workflow on a cron schedule, read in `timeZone`: five fields separated by spaces
    /// (minute, hour, day of month, month, day of week; `0 9 * * 1-5` is 09:00 on weekdays) or
    /// one of `@yearly` (`@annually`), `@monthly`, `@weekly`, `@daily` (`@midnight`) and
    /// `@hourly`. Whether the fields themselves make sense is checked by the controller, which
    /// reports a schedule it cannot read on the `Ready` condition. Unset: the workflow runs only
    /// when an AgentWorkflowRun is created for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_SCHEDULE))]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": format!("self.matches('{SCHEDULE_PATTERN}')"),
        "message": "schedule must be a cron expression of five fields separated by spaces (minute hour day-of-month month day-of-week) or one of @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly",
    }]))]
    pub schedule: Option<String>,
    /// The time zone `schedule` is read in, an IANA name such as `Europe/Paris` or
    /// `America/New_York`. Unset: `UTC`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_TIME_ZONE))]
    pub time_zone: Option<String>,
    /// What a scheduled run does when runs of the workflow are still active: `Allow` starts it
    /// alongside them, `Forbid` skips it, `Replace` cancels the active runs and starts it.
    #[serde(default)]
    pub concurrency_policy: ConcurrencyPolicy,
    /// `true` stops the schedule: no scheduled run starts until it is `false` again. Runs
    /// already started are not affected.
    #[serde(default)]
    pub suspend: bool,
    /// Succeeded runs to keep; older ones are deleted. `0` keeps none.
    #[serde(default = "default_successful_runs_history_limit")]
    #[schemars(range(min = 0, max = MAX_HISTORY))]
    pub successful_runs_history_limit: i32,
    /// Failed runs to keep; older ones are deleted. `0` keeps none.
    #[serde(default = "default_failed_runs_history_limit")]
    #[schemars(range(min = 0, max = MAX_HISTORY))]
    pub failed_runs_history_limit: i32,
}

fn default_successful_runs_history_limit() -> i32 {
    DEFAULT_SUCCESSFUL_RUNS_HISTORY_LIMIT
}

fn default_failed_runs_history_limit() -> i32 {
    DEFAULT_FAILED_RUNS_HISTORY_LIMIT
}

/// One step: a task sent to an Agent, once the steps it depends on are done.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!has(self.dependsOn) || !(self.name in self.dependsOn)",
    "message": "a step cannot depend on itself",
    "fieldPath": ".dependsOn",
}]))]
pub struct WorkflowStep {
    /// The step's name, unique in the workflow: what `dependsOn` and a run's `status.steps` use.
    /// A DNS label (lower-case letters, digits and `-`).
    #[schemars(length(min = 1, max = MAX_STEP_NAME), pattern(DNS_LABEL))]
    pub name: String,
    /// The name of the Agent (same namespace) the step's task is sent to.
    #[schemars(length(min = 1, max = MAX_REF), pattern(DNS_SUBDOMAIN))]
    pub agent_ref: String,
    /// The text sent to the agent, a template: `{{ input }}` stands for the run's input and
    /// `{{ steps.NAME.output }}` for the output of step `NAME`, which this step must depend on.
    /// Unset: the step receives the run's input as it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_INPUT))]
    pub input: Option<String>,
    /// Names of the steps of this workflow that must be done before this step starts. A step
    /// cannot depend on itself or on a step the workflow does not have (both rejected when the
    /// workflow is applied); a longer cycle (`a` → `b` → `a`) is reported by the controller on
    /// the workflow's `Ready` condition, and the workflow does not run until it is broken.
    #[serde(default)]
    #[schemars(length(max = MAX_DEPENDENCIES), inner(length(min = 1, max = MAX_STEP_NAME)))]
    pub depends_on: Vec<String>,
    /// A CEL condition the step runs under, evaluated when it could start: `false` skips it
    /// (phase `Skipped`). It reads `input` (the run's input) and `steps`, the steps that ran by
    /// name, each with its `output` and `phase`: `steps.triage.output.startsWith('URGENT')`,
    /// `steps.lookup.phase == 'Failed'`. Unset: the step always runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_CONDITION))]
    pub when: Option<String>,
    /// Seconds an attempt may take before it fails, 1 to 86400. Unset: 600 (10 minutes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_STEP_SECONDS))]
    pub timeout_seconds: Option<i64>,
    /// Further attempts after a failed one, 0 to 10; the step fails once they are used up.
    #[serde(default)]
    #[schemars(range(min = 0, max = MAX_RETRIES))]
    pub retries: i32,
    /// Runs the step as an autonomous A2A task within these budgets: the agent accepts the task
    /// at once and works on it, and the controller follows it until it ends. Unset: a single
    /// request, which the agent answers once done (within `timeoutSeconds`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budgets: Option<StepBudgets>,
}

impl WorkflowStep {
    /// The step's time limit in seconds: `timeoutSeconds`, else [`DEFAULT_STEP_TIMEOUT_SECONDS`].
    pub fn effective_timeout_seconds(&self) -> i64 {
        self.timeout_seconds.unwrap_or(DEFAULT_STEP_TIMEOUT_SECONDS)
    }
}

/// The budgets of an autonomous step's task. An unset budget is the agent's own (its
/// `config.taskConfig`, else the runtime's default).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StepBudgets {
    /// Model round trips the task may make, 1 to 1000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000))]
    pub max_iterations: Option<i32>,
    /// Wall-clock seconds the task may run, 1 to 86400.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_STEP_SECONDS))]
    pub max_runtime_seconds: Option<i64>,
    /// Tool calls the task may make, up to 10000; `0` sets no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 10000))]
    pub max_tool_calls: Option<i32>,
}

/// What a scheduled run does when runs of the workflow are still active.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum ConcurrencyPolicy {
    /// Start it alongside the active runs.
    #[default]
    Allow,
    /// Skip it.
    Forbid,
    /// Cancel the active runs, then start it.
    Replace,
}

impl ConcurrencyPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            ConcurrencyPolicy::Allow => "Allow",
            ConcurrencyPolicy::Forbid => "Forbid",
            ConcurrencyPolicy::Replace => "Replace",
        }
    }
}

/// The observed state of an AgentWorkflow.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentWorkflowStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`: whether the workflow can run (`False`, for instance, when its steps form a
    /// cycle), with a machine-readable reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = condition_list_schema)]
    pub conditions: Conditions,
    /// A human-readable summary of the `Ready` condition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When the schedule last started a run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_schedule_time: Option<Time>,
    /// When the schedule starts the next run; unset without a schedule or while suspended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_schedule_time: Option<Time>,
    /// When a run of the workflow last succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_successful_time: Option<Time>,
    /// The names of the workflow's runs that have not finished.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub active: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_minimal_workflow_reads_with_its_defaults_and_writes_them() {
        let spec: AgentWorkflowSpec =
            serde_json::from_value(json!({"steps": [{"name": "a", "agentRef": "writer"}]}))
                .expect("reads");
        assert_eq!(spec.concurrency_policy, ConcurrencyPolicy::Allow);
        assert!(!spec.suspend);
        assert_eq!(spec.successful_runs_history_limit, 3);
        assert_eq!(spec.failed_runs_history_limit, 1);
        let step = &spec.steps[0];
        assert_eq!(step.retries, 0);
        assert!(step.depends_on.is_empty());
        assert_eq!(
            step.effective_timeout_seconds(),
            DEFAULT_STEP_TIMEOUT_SECONDS
        );
        assert_eq!(
            serde_json::to_value(&spec).expect("writes"),
            json!({"steps": [{"name": "a", "agentRef": "writer", "dependsOn": [], "retries": 0}],
                   "concurrencyPolicy": "Allow", "suspend": false,
                   "successfulRunsHistoryLimit": 3, "failedRunsHistoryLimit": 1})
        );
    }

    #[test]
    fn empty_statuses_read() {
        let status: AgentWorkflowStatus = serde_json::from_value(json!({})).expect("reads");
        assert_eq!(status, AgentWorkflowStatus::default());
        let status: AgentWorkflowRunStatus = serde_json::from_value(json!({})).expect("reads");
        assert_eq!(status, AgentWorkflowRunStatus::default());
        assert_eq!(serde_json::to_value(&status).expect("writes"), json!({}));
        let step: StepStatus = serde_json::from_value(json!({"name": "a"})).expect("reads");
        assert_eq!(step, StepStatus::pending("a"));
        assert_eq!(
            serde_json::to_value(&step).expect("writes"),
            json!({"name": "a", "phase": "Pending", "attempt": 0})
        );
    }

    #[test]
    fn a_run_defaults_to_manual() {
        let spec: AgentWorkflowRunSpec =
            serde_json::from_value(json!({"workflowRef": "daily"})).expect("reads");
        assert_eq!(spec.trigger, RunTrigger::Manual);
        assert_eq!(
            serde_json::to_value(&spec).expect("writes"),
            json!({"workflowRef": "daily", "trigger": "Manual"})
        );
    }

    #[test]
    fn phases_are_written_as_named() {
        for phase in RunPhase::ALL {
            assert_eq!(serde_json::to_value(phase).expect("writes"), phase.as_str());
        }
        for phase in StepPhase::ALL {
            assert_eq!(serde_json::to_value(phase).expect("writes"), phase.as_str());
        }
        for policy in [
            ConcurrencyPolicy::Allow,
            ConcurrencyPolicy::Forbid,
            ConcurrencyPolicy::Replace,
        ] {
            assert_eq!(
                serde_json::to_value(policy).expect("writes"),
                policy.as_str()
            );
        }
        for trigger in [RunTrigger::Manual, RunTrigger::Schedule] {
            assert_eq!(
                serde_json::to_value(trigger).expect("writes"),
                trigger.as_str()
            );
        }
        assert!(RunPhase::Canceled.is_finished() && !RunPhase::Running.is_finished());
        assert!(StepPhase::Skipped.is_finished() && !StepPhase::Dispatching.is_finished());
    }
}
