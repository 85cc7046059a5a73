//! The `Agent` kind: an agent runtime wired to a ModelAPI, MCP servers and peer agents.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::budget::{Budget, BudgetUsage};
use crate::common::{
    DNS_LABEL, MAX_ENV_TEXT, MAX_MODEL_ID, Phase, Telemetry, WorkloadStatus, default_true,
};
use crate::mcpserver;
use crate::memorystore::{self, ReadScope};
use crate::modelapi;
use crate::scaling::WorkloadScaling;
use crate::workload::{WorkloadSpec, describe_fields, describe_workload_fields};

/// The longest Agent name: its Deployment and Service `agent-<name>` must be a DNS label (63).
pub const MAX_NAME_LENGTH: u32 = 57;

/// Rules on the whole object, the only place a CEL rule can read `metadata.name`.
pub(crate) fn object_rules() -> serde_json::Value {
    serde_json::json!([
        crate::common::child_name_rule("Agent", "agent", MAX_NAME_LENGTH),
        {
            "rule": "!has(self.spec.agentNetwork) || !has(self.spec.agentNetwork.access) || !(self.metadata.name in self.spec.agentNetwork.access)",
            "message": "an agent cannot list itself in agentNetwork.access",
            "fieldPath": ".spec.agentNetwork.access",
        },
        crate::scaling::object_rule(),
    ])
}

/// The desired state of an Agent.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "kaos.tools",
    version = "v1alpha1",
    kind = "Agent",
    plural = "agents",
    singular = "agent",
    namespaced,
    doc = "An AI agent: a Deployment of the agent runtime wired to a ModelAPI, MCPServers and peer Agents.",
    status = "AgentStatus",
    shortname = "agent",
    shortname = "agents",
    category = "kaos",
    scale = r#"{"specReplicasPath":".spec.replicas","statusReplicasPath":".status.replicas","labelSelectorPath":".status.selector"}"#,
    printcolumn = r#"{"name":"ModelAPI","type":"string","jsonPath":".spec.modelAPI"}"#,
    printcolumn = r#"{"name":"Model","type":"string","jsonPath":".spec.model"}"#,
    printcolumn = r#"{"name":"Ready","type":"boolean","jsonPath":".status.ready"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Tokens","type":"integer","jsonPath":".status.usage.totalTokens","description":"Tokens used in the budget's current day window"}"#,
    printcolumn = r#"{"name":"Budget","type":"string","jsonPath":".status.conditions[?(@.type==\"BudgetExceeded\")].reason","description":"WithinBudget, or the limit reached"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = describe_agent_fields)]
pub struct AgentSpec {
    /// Name of the ModelAPI (same namespace) this agent talks to; its `status.endpoint` becomes
    /// `MODEL_API_URL`.
    #[serde(rename = "modelAPI")]
    #[schemars(length(min = 1, max = modelapi::MAX_NAME_LENGTH), pattern(DNS_LABEL))]
    pub model_api: String,
    /// Model id, passed as `MODEL_NAME`; must be served by the ModelAPI.
    #[schemars(length(min = 1, max = MAX_MODEL_ID))]
    pub model: String,
    /// Names of MCPServers (same namespace) whose tools this agent may use (`MCP_SERVERS`,
    /// `MCP_SERVER_<name>_URL`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 64),
        inner(length(min = 1, max = mcpserver::MAX_NAME_LENGTH), pattern(DNS_LABEL))
    )]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": "self.all(s, self.exists_one(t, t == s))",
        "message": "mcpServers must not name the same MCPServer twice"
    }]))]
    pub mcp_servers: Vec<String>,
    /// Agent-to-agent networking.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_network: Option<AgentNetwork>,
    /// Runtime configuration of the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<AgentConfig>,
    /// Limits on the agent's use of its ModelAPI (tokens, requests, cost), enforced by a Proxy
    /// ModelAPI's LiteLLM: the agent gets a model alias of its own (`MODEL_NAME`
    /// `kaos.<namespace>.<name>`) carrying the limits. Unset: the ModelAPI's `defaultAgentBudget`,
    /// if any, else no limit (the shared model entry, as KAOS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
    /// Wait for the ModelAPI and MCPServers to be ready before creating the Deployment; `false`
    /// creates it anyway.
    #[serde(default = "default_true")]
    pub wait_for_dependencies: bool,
    /// Scale the agent to zero pods, keeping its Service, HTTPRoute, NetworkPolicy and the rest
    /// of its children (`status.phase: Suspended`); `false` (or removing it) resumes it at its
    /// `replicas` or autoscaling. While suspended it has no autoscaler, and a workflow step sent
    /// to it wakes it to one pod for as long as steps run on it. An agent without a MemoryStore
    /// loses its in-pod memory (sessions, history) at zero. An autonomous agent stops its goal
    /// while suspended: suspending is the user's explicit choice (docs/scaling.md).
    #[serde(default, skip_serializing_if = "is_false")]
    pub suspend: bool,
    /// `replicas`, `autoscaling` and `podDisruptionBudget`.
    #[serde(flatten)]
    pub scaling: WorkloadScaling,
    /// `container`, `podSpec`, `gatewayRoute` and `security`.
    #[serde(flatten)]
    pub workload: WorkloadSpec,
}

fn is_false(value: &bool) -> bool {
    !*value
}

fn describe_agent_fields(schema: &mut schemars::Schema) {
    describe_workload_fields(
        schema,
        "Overrides of the generated `agent` container.",
        "agent",
    );
}

/// Agent-to-agent (A2A) networking.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentNetwork {
    /// Create the Service (and HTTPRoute) and publish `status.endpoint`.
    #[serde(default = "default_true")]
    pub expose: bool,
    /// Peer Agents (same namespace) this agent may delegate to (`PEER_AGENTS`,
    /// `PEER_AGENT_<NAME>_CARD_URL`). A peer whose status has no endpoint (not exposed, or it
    /// could not be built) is skipped until it has one; a peer not reconciled yet is listed at the
    /// endpoint it will publish, so agents created together are not rolled once per peer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 128),
        inner(length(min = 1, max = MAX_NAME_LENGTH), pattern(DNS_LABEL))
    )]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": "self.all(a, self.exists_one(b, b == a))",
        "message": "access must not name the same agent twice"
    }]))]
    pub access: Vec<String>,
}

impl Default for AgentNetwork {
    fn default() -> Self {
        Self {
            expose: true,
            access: Vec::new(),
        }
    }
}

/// Runtime configuration of an agent.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentConfig {
    /// Agent card text (`AGENT_DESCRIPTION`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096))]
    pub description: Option<String>,
    /// Instructions given to the model with every request (`AGENT_INSTRUCTIONS`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_ENV_TEXT))]
    pub instructions: Option<String>,
    /// A system prompt kept in the conversation history, unlike `instructions`
    /// (`AGENT_SYSTEM_PROMPT`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_ENV_TEXT))]
    pub system_prompt: Option<String>,
    /// Maximum reasoning steps per request (`AGENTIC_LOOP_MAX_STEPS`).
    #[serde(default = "default_loop_steps")]
    #[schemars(range(min = 1, max = 20))]
    pub reasoning_loop_max_steps: i32,
    /// How the runtime asks the model for tool calls (`TOOL_CALL_MODE`): `auto` (the runtime's
    /// default) picks per model, `native` uses the provider's tool-calling API, `string` parses
    /// tool calls out of plain text for models without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_mode: Option<ToolCallMode>,
    /// Conversation memory. Its defaults apply when it is present; without it no `MEMORY_*`
    /// variables are set and the runtime uses its own defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryConfig>,
    /// A goal the agent pursues on its own from start-up, in iterations
    /// (`AUTONOMOUS_*`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autonomous: Option<AutonomousConfig>,
    /// Budgets of each task (an A2A task, or an autonomous iteration) (`TASK_MAX_*`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_config: Option<TaskConfig>,
    /// OpenTelemetry settings, merged with the operator's `DEFAULT_TELEMETRY_*` defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub telemetry: Option<Telemetry>,
}

/// How the runtime asks the model for tool calls.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ToolCallMode {
    Auto,
    Native,
    String,
}

impl ToolCallMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ToolCallMode::Auto => "auto",
            ToolCallMode::Native => "native",
            ToolCallMode::String => "string",
        }
    }
}

/// A goal the agent works on by itself, started when the pod starts.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AutonomousConfig {
    /// What to achieve (`AUTONOMOUS_GOAL`); empty: no autonomous loop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_ENV_TEXT))]
    pub goal: Option<String>,
    /// Pause between iterations in seconds (`AUTONOMOUS_INTERVAL_SECONDS`; the runtime's
    /// default is 0, no pause).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 3600))]
    pub interval_seconds: Option<i32>,
    /// Time limit of one iteration in seconds (`AUTONOMOUS_MAX_ITER_RUNTIME_SECONDS`; the
    /// runtime's default is 60, 0 is unlimited).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 86400))]
    pub max_iter_runtime_seconds: Option<i32>,
}

/// Budgets of a task; 0 is unlimited, unset is the runtime's default.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskConfig {
    /// Model round trips per task (`TASK_MAX_ITERATIONS`; runtime default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1000))]
    pub max_iterations: Option<i32>,
    /// Wall-clock seconds per task (`TASK_MAX_RUNTIME_SECONDS`; runtime default 300).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 86400))]
    pub max_runtime_seconds: Option<i32>,
    /// Tool calls per task (`TASK_MAX_TOOL_CALLS`; runtime default 50).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 10000))]
    pub max_tool_calls: Option<i32>,
}

fn default_loop_steps() -> i32 {
    5
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            description: None,
            instructions: None,
            system_prompt: None,
            reasoning_loop_max_steps: default_loop_steps(),
            tool_call_mode: None,
            memory: None,
            autonomous: None,
            task_config: None,
            telemetry: None,
        }
    }
}

/// Conversation memory of an agent: in the pod (`local`), or in a MemoryStore (`remote`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "!has(self.type) || self.type != 'remote' || has(self.memoryStore)", "message": "type 'remote' requires memoryStore to be set"},
    {"rule": "!has(self.type) || self.type != 'local' || !has(self.memoryStore)", "message": "type 'local' must not set memoryStore"},
    {"rule": "!has(self.tools) || has(self.memoryStore)", "message": "tools requires memoryStore to be set"},
    {"rule": "!has(self.maxReadScope) || self.maxReadScope == 'session' || has(self.memoryStore)", "message": "non-session maxReadScope requires memoryStore to be set"},
]))]
pub struct MemoryConfig {
    /// `MEMORY_ENABLED`.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// `MEMORY_TYPE`. Unset: `remote` when `memoryStore` is set, else `local`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub memory_type: Option<MemoryType>,
    /// A MemoryStore (same namespace) that keeps this agent's memory across pods and restarts
    /// (`MEMORY_STORE_ENDPOINT`). The agent waits for it before its first Deployment; later, while
    /// it is not ready, the agent keeps serving and reports `MemoryDegraded`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = memorystore::MAX_NAME_LENGTH), pattern(DNS_LABEL))]
    pub memory_store: Option<String>,
    /// How far automatic recall and the `search_memory` tool may read (`MEMORY_MAX_READ_SCOPE`):
    /// this `session`, everything this `agent` saw, or everything of the `user`. At most the
    /// MemoryStore's `maxReadScope`. Unset: the store's ceiling, or `session` without a store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_read_scope: Option<ReadScope>,
    /// Memory tools offered to the model (`MEMORY_TOOLS`): `all`, `read` (`search_memory`) or
    /// `write` (`save_memory`). Unset: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<MemoryTools>,
    /// What a request does when the store fails (`MEMORY_FAILURE_MODE`): `soft` carries on
    /// without long-term memory, `strict` fails. Unset: the store's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_mode: Option<memorystore::FailureMode>,
    /// Client-side settings of the remote memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_params: Option<MemoryClientParams>,
    /// Messages kept in the model's context (`MEMORY_CONTEXT_LIMIT`).
    #[serde(default = "default_context_limit")]
    #[schemars(range(min = 1, max = 100))]
    pub context_limit: i32,
    /// Sessions kept in memory (`MEMORY_MAX_SESSIONS`).
    #[serde(default = "default_max_sessions")]
    #[schemars(range(min = 1, max = 100000))]
    pub max_sessions: i32,
    /// Events kept per session (`MEMORY_MAX_SESSION_EVENTS`).
    #[serde(default = "default_max_session_events")]
    #[schemars(range(min = 1, max = 10000))]
    pub max_session_events: i32,
}

fn default_context_limit() -> i32 {
    6
}
fn default_max_sessions() -> i32 {
    1000
}
fn default_max_session_events() -> i32 {
    500
}

impl Default for MemoryConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            memory_type: None,
            memory_store: None,
            max_read_scope: None,
            tools: None,
            failure_mode: None,
            client_params: None,
            context_limit: default_context_limit(),
            max_sessions: default_max_sessions(),
            max_session_events: default_max_session_events(),
        }
    }
}

impl MemoryConfig {
    /// The backend in use: the `type` set, else `remote` exactly when a store is named.
    pub fn effective_type(&self) -> MemoryType {
        self.memory_type.unwrap_or(if self.memory_store.is_some() {
            MemoryType::Remote
        } else {
            MemoryType::Local
        })
    }

    /// The MemoryStore this agent binds to (only for the `remote` type).
    pub fn bound_store(&self) -> Option<&str> {
        match self.effective_type() {
            MemoryType::Remote => self.memory_store.as_deref(),
            MemoryType::Local => None,
        }
    }
}

/// Memory backend of an agent.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum MemoryType {
    /// In-process memory of each pod.
    #[default]
    Local,
    /// A MemoryStore service shared by the agent's pods.
    Remote,
}

impl MemoryType {
    pub fn as_str(self) -> &'static str {
        match self {
            MemoryType::Local => "local",
            MemoryType::Remote => "remote",
        }
    }
}

/// The memory tools offered to the model.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum MemoryTools {
    All,
    Read,
    Write,
}

impl MemoryTools {
    pub fn as_str(self) -> &'static str {
        match self {
            MemoryTools::All => "all",
            MemoryTools::Read => "read",
            MemoryTools::Write => "write",
        }
    }
}

/// Client-side settings of remote memory.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemoryClientParams {
    /// Tokens of short-term history sent with a request (`MEMORY_SHORT_TERM_TOKEN_BUDGET`;
    /// 0 or unset: the runtime's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub token_budget: Option<i32>,
    /// Summarise older history instead of dropping it (`MEMORY_ROLLING_SUMMARY`; runtime
    /// default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolling_summary: Option<bool>,
}

/// The lifecycle phase of an Agent. `Waiting`: the ModelAPI or an MCPServer is not ready yet
/// (or, before the first Deployment, the MemoryStore);
/// `Failed`: something is missing or unsupported, as `message` and the `Ready` condition say;
/// `Suspended`: `spec.suspend` scaled it to zero pods (the `Suspended` condition says more).
// This comment, not one on `WorkloadStatus::phase`, is the schema's description of `status.phase`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum AgentPhase {
    #[default]
    Pending,
    Ready,
    Failed,
    /// Waiting for the ModelAPI, an MCPServer or (before the first Deployment) the MemoryStore.
    Waiting,
    /// Scaled to zero by `spec.suspend` (and not woken by a workflow step).
    Suspended,
}

/// A workload's phase as an Agent's (which adds `Waiting`).
impl From<Phase> for AgentPhase {
    fn from(phase: Phase) -> Self {
        match phase {
            Phase::Pending => AgentPhase::Pending,
            Phase::Ready => AgentPhase::Ready,
            Phase::Failed => AgentPhase::Failed,
        }
    }
}

impl AgentPhase {
    pub const ALL: [AgentPhase; 5] = [
        AgentPhase::Pending,
        AgentPhase::Ready,
        AgentPhase::Failed,
        AgentPhase::Waiting,
        AgentPhase::Suspended,
    ];

    /// Every phase's name, in the order of [`AgentPhase::ALL`] (the `kaos_resources` metric's phases).
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
            AgentPhase::Pending => "Pending",
            AgentPhase::Ready => "Ready",
            AgentPhase::Failed => "Failed",
            AgentPhase::Waiting => "Waiting",
            AgentPhase::Suspended => "Suspended",
        }
    }
}

/// The observed state of an Agent.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = describe_agent_status_fields)]
pub struct AgentStatus {
    /// `phase` (which can be `Waiting`), `ready`, `endpoint`, `message`, the Deployment's
    /// scale, `observedGeneration` and `conditions`, as every workload kind reports them; the
    /// schema's words on `endpoint` and `conditions` are the Agent's own (see below).
    #[serde(flatten)]
    pub workload: WorkloadStatus<AgentPhase>,
    /// The resources this agent is wired to, e.g. `{"modelapi": "<spec.modelAPI>"}`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub linked_resources: BTreeMap<String, String>,
    /// What the agent used of its ModelAPI, as its proxy counted it (agents with a budget).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<BudgetUsage>,
}

/// What `endpoint` and `conditions` mean for an Agent, in its schema.
fn describe_agent_status_fields(schema: &mut schemars::Schema) {
    describe_fields(
        schema,
        &[
            (
                "endpoint",
                "Base URL of the agent's Service, `http://<service>.<namespace>.svc.cluster.local:<port>` (no path); empty when not exposed.",
            ),
            (
                "conditions",
                "`Ready`, `DependenciesReady`, (with a MemoryStore) `MemoryDegraded` and (with `spec.suspend`) `Suspended`, with machine-readable reasons.",
            ),
        ],
    );
}

/// A workload's status, linked to nothing.
impl From<WorkloadStatus<AgentPhase>> for AgentStatus {
    fn from(workload: WorkloadStatus<AgentPhase>) -> Self {
        AgentStatus {
            workload,
            linked_resources: BTreeMap::new(),
            usage: None,
        }
    }
}

/// An Agent's status reads as a workload's (`status.ready`, `status.endpoint`, …).
impl std::ops::Deref for AgentStatus {
    type Target = WorkloadStatus<AgentPhase>;

    fn deref(&self) -> &WorkloadStatus<AgentPhase> {
        &self.workload
    }
}

impl AgentSpec {
    /// Whether the agent gets a Service, an HTTPRoute and an endpoint (`agentNetwork.expose`).
    pub fn exposed(&self) -> bool {
        self.agent_network.as_ref().is_none_or(|n| n.expose)
    }

    /// Peer agents this agent may delegate to.
    pub fn peers(&self) -> &[String] {
        self.agent_network
            .as_ref()
            .map_or(&[][..], |n| n.access.as_slice())
    }
}
