//! `AgentWorkflowRun`: one execution of an AgentWorkflow, the steps it follows (a snapshot of
//! the workflow's when it started) and how each went.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{MAX_ERROR, MAX_INPUT, MAX_OUTPUT, MAX_REF, MAX_STEPS, WorkflowStep};
use crate::common::{Conditions, DNS_SUBDOMAIN, condition_list_schema};

/// The desired state of an AgentWorkflowRun: the workflow to run and its input. It cannot be
/// changed once the run is created.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "kaos.tools",
    version = "v1alpha1",
    kind = "AgentWorkflowRun",
    plural = "agentworkflowruns",
    singular = "agentworkflowrun",
    namespaced,
    doc = "One run of an AgentWorkflow: the steps as they were when it started, and how each went. Created by the schedule, or by hand to run a workflow now; it cannot be changed once created.",
    status = "AgentWorkflowRunStatus",
    shortname = "awfr",
    category = "kaos",
    printcolumn = r#"{"name":"Workflow","type":"string","jsonPath":".spec.workflowRef"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Trigger","type":"string","jsonPath":".spec.trigger"}"#,
    printcolumn = r#"{"name":"Started","type":"date","jsonPath":".status.startTime"}"#,
    printcolumn = r#"{"name":"Completed","type":"date","jsonPath":".status.completionTime"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "self == oldSelf",
    "message": "the spec of a run cannot be changed: create a new AgentWorkflowRun instead",
}]))]
pub struct AgentWorkflowRunSpec {
    /// The name of the AgentWorkflow (same namespace) to run.
    #[schemars(length(min = 1, max = MAX_REF), pattern(DNS_SUBDOMAIN))]
    pub workflow_ref: String,
    /// The input of this run, in place of the workflow's `input`. Unset: the workflow's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_INPUT))]
    pub input: Option<String>,
    /// What started the run: `Manual` (created by a user or a tool) or `Schedule` (created by
    /// the controller for the workflow's `schedule`).
    #[serde(default)]
    pub trigger: RunTrigger,
    /// For a `Schedule` run, the instant of the schedule it stands for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled_time: Option<Time>,
}

/// What started a run.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum RunTrigger {
    /// Created by a user or a tool.
    #[default]
    Manual,
    /// Created by the controller for the workflow's schedule.
    Schedule,
}

impl RunTrigger {
    pub fn as_str(self) -> &'static str {
        match self {
            RunTrigger::Manual => "Manual",
            RunTrigger::Schedule => "Schedule",
        }
    }
}

/// The observed state of an AgentWorkflowRun.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentWorkflowRunStatus {
    /// `Pending` until the run starts, `Running`, then `Succeeded` (every step succeeded or was
    /// skipped), `Failed` (a step failed after its retries, or the run could not go on; `message`
    /// says why) or `Canceled` (stopped before it finished, e.g. replaced by a newer scheduled
    /// run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<RunPhase>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The `metadata.generation` of the workflow that `plan` was taken from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow_generation: Option<i64>,
    /// The workflow's steps as they were when the run started: the run follows them, whatever
    /// is changed in the workflow afterwards.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_STEPS))]
    pub plan: Vec<WorkflowStep>,
    /// The input the run used: its `spec.input`, else the workflow's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_INPUT))]
    pub input: Option<String>,
    /// How each step of the plan went.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_STEPS))]
    pub steps: Vec<StepStatus>,
    /// When the run started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When the run finished (`Succeeded`, `Failed` or `Canceled`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// `Ready` and the run's other conditions, with machine-readable reasons.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = condition_list_schema)]
    pub conditions: Conditions,
    /// A human-readable summary of the phase, e.g. which step failed and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The phase of a run: `Pending` (created, not started yet), `Running`, then `Succeeded` (every
/// step succeeded or was skipped), `Failed` (a step failed after its retries, or the run could
/// not go on; `message` says why) or `Canceled` (stopped before it finished, e.g. replaced by a
/// newer scheduled run).
// No doc comments on the variants: with them the optional `status.phase` would lose its own
// description in the CRD.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum RunPhase {
    Pending,
    Running,
    Succeeded,
    Failed,
    Canceled,
}

impl RunPhase {
    pub const ALL: [RunPhase; 5] = [
        RunPhase::Pending,
        RunPhase::Running,
        RunPhase::Succeeded,
        RunPhase::Failed,
        RunPhase::Canceled,
    ];

    /// Every phase's name, in the order of [`RunPhase::ALL`] (the `kaos_resources` metric's phases).
    pub const NAMES: [&'static str; 5] = {
        let mut names = [""; 5];
        let mut i = 0;
        while i < 5 {
            names[i] = Self::ALL[i].as_str();
            i += 1;
        }
        names
    };

    pub const fn as_str(self) -> &'static str {
        match self {
            RunPhase::Pending => "Pending",
            RunPhase::Running => "Running",
            RunPhase::Succeeded => "Succeeded",
            RunPhase::Failed => "Failed",
            RunPhase::Canceled => "Canceled",
        }
    }

    /// Whether the run is over: `Succeeded`, `Failed` or `Canceled`.
    pub fn is_finished(self) -> bool {
        matches!(
            self,
            RunPhase::Succeeded | RunPhase::Failed | RunPhase::Canceled
        )
    }
}

/// How one step of a run went.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StepStatus {
    /// The step's name in the plan.
    pub name: String,
    /// `Pending` (waiting for its dependencies or its next attempt), `Dispatching` (being sent),
    /// `Running`, then `Succeeded`, `Failed`, `Skipped` (not run, e.g. because its `when`
    /// condition was false) or `Canceled`.
    #[serde(default)]
    pub phase: StepPhase,
    /// The current attempt: 0 before the first is sent, then 1, 2, … (at most `retries` + 1).
    #[serde(default)]
    pub attempt: i32,
    /// The idempotency key the current attempt was, or is about to be, sent with (in the task's
    /// metadata, `kaos.tools/idempotency-key`). It is recorded before the attempt is sent, so
    /// that when the answer is lost (a controller restart, say) the agent's task can be found
    /// again instead of being sent twice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// The agent's id of the current attempt's task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// The agent endpoint the current attempt was sent to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_endpoint: Option<String>,
    /// When the step's first attempt was sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When the step finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// After a failed attempt, when the next may be sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_attempt_time: Option<Time>,
    /// The agent's answer, cut to its first 4096 characters (see `outputTruncated`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_OUTPUT))]
    pub output: Option<String>,
    /// True when `output` was cut.
    #[serde(default, skip_serializing_if = "is_false")]
    pub output_truncated: bool,
    /// Why the last attempt failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_ERROR))]
    pub error: Option<String>,
}

fn is_false(value: &bool) -> bool {
    !*value
}

impl StepStatus {
    /// A step not sent yet.
    pub fn pending(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            phase: StepPhase::Pending,
            attempt: 0,
            idempotency_key: None,
            task_id: None,
            agent_endpoint: None,
            start_time: None,
            completion_time: None,
            next_attempt_time: None,
            output: None,
            output_truncated: false,
            error: None,
        }
    }
}

/// The phase of a step of a run.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum StepPhase {
    /// Waiting for the steps it depends on, or for its next attempt.
    #[default]
    Pending,
    /// The attempt is being sent to the agent.
    Dispatching,
    /// The agent is working on it.
    Running,
    /// The agent answered.
    Succeeded,
    /// The last attempt failed and no retry is left.
    Failed,
    /// Not run, e.g. because its `when` condition was false.
    Skipped,
    /// Stopped with its run.
    Canceled,
}

impl StepPhase {
    pub const ALL: [StepPhase; 7] = [
        StepPhase::Pending,
        StepPhase::Dispatching,
        StepPhase::Running,
        StepPhase::Succeeded,
        StepPhase::Failed,
        StepPhase::Skipped,
        StepPhase::Canceled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            StepPhase::Pending => "Pending",
            StepPhase::Dispatching => "Dispatching",
            StepPhase::Running => "Running",
            StepPhase::Succeeded => "Succeeded",
            StepPhase::Failed => "Failed",
            StepPhase::Skipped => "Skipped",
            StepPhase::Canceled => "Canceled",
        }
    }

    /// Whether the step is over: `Succeeded`, `Failed`, `Skipped` or `Canceled`.
    pub fn is_finished(self) -> bool {
        matches!(
            self,
            StepPhase::Succeeded | StepPhase::Failed | StepPhase::Skipped | StepPhase::Canceled
        )
    }
}
