//! The `Agent` kind: an agent runtime wired to a ModelAPI, MCP servers and peer agents.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodSpec;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{
    Conditions, ContainerOverride, DNS_LABEL, DeploymentStatus, GatewayRoute, MAX_ENV_TEXT,
    MAX_MODEL_ID, Telemetry, condition_list_schema, default_true,
};
use crate::mcpserver;
use crate::modelapi;

/// The longest Agent name: its Deployment and Service `agent-<name>` must be a DNS label (63).
pub const MAX_NAME_LENGTH: u32 = 57;

/// Rules on the whole object, the only place a CEL rule can read `metadata.name`.
pub(crate) fn object_rules() -> serde_json::Value {
    serde_json::json!([
        {
            "rule": format!("self.metadata.name.size() <= {MAX_NAME_LENGTH}"),
            "message": format!("metadata.name must be at most {MAX_NAME_LENGTH} characters: the agent's Deployment and Service are named agent-<name>, at most 63"),
        },
        {
            "rule": "!has(self.spec.agentNetwork) || !has(self.spec.agentNetwork.access) || !(self.metadata.name in self.spec.agentNetwork.access)",
            "message": "an agent cannot list itself in agentNetwork.access",
            "fieldPath": ".spec.agentNetwork.access",
        },
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
    printcolumn = r#"{"name":"ModelAPI","type":"string","jsonPath":".spec.modelAPI"}"#,
    printcolumn = r#"{"name":"Model","type":"string","jsonPath":".spec.model"}"#,
    printcolumn = r#"{"name":"Ready","type":"boolean","jsonPath":".status.ready"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
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
    /// Wait for the ModelAPI and MCPServers to be ready before creating the Deployment; `false`
    /// creates it anyway.
    #[serde(default = "default_true")]
    pub wait_for_dependencies: bool,
    /// Number of pods. Unset: 1 at creation, then left alone so an HPA or `kubectl scale` can own it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub replicas: Option<i32>,
    /// Gateway API route settings, used only when the operator runs with
    /// `GATEWAY_API_ENABLED=true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway_route: Option<GatewayRoute>,
    /// Overrides of the generated `agent` container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<ContainerOverride>,
    /// A pod spec merged over the generated one with strategic-merge semantics.
    // Boxed: inline, a PodSpec is 1.4 KiB of every cached object, set or not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_spec: Option<Box<PodSpec>>,
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
    /// System prompt (`AGENT_INSTRUCTIONS`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_ENV_TEXT))]
    pub instructions: Option<String>,
    /// Maximum reasoning steps per request (`AGENTIC_LOOP_MAX_STEPS`).
    #[serde(default = "default_loop_steps")]
    #[schemars(range(min = 1, max = 20))]
    pub reasoning_loop_max_steps: i32,
    /// Conversation memory. Its defaults apply when it is present; without it no `MEMORY_*`
    /// variables are set and the runtime uses its own defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryConfig>,
    /// OpenTelemetry settings, merged with the operator's `DEFAULT_TELEMETRY_*` defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub telemetry: Option<Telemetry>,
}

fn default_loop_steps() -> i32 {
    5
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            description: None,
            instructions: None,
            reasoning_loop_max_steps: default_loop_steps(),
            memory: None,
            telemetry: None,
        }
    }
}

/// Conversation memory of an agent.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemoryConfig {
    /// `MEMORY_ENABLED`.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// `MEMORY_TYPE`.
    #[serde(default, rename = "type")]
    pub memory_type: MemoryType,
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
            memory_type: MemoryType::Local,
            context_limit: default_context_limit(),
            max_sessions: default_max_sessions(),
            max_session_events: default_max_session_events(),
        }
    }
}

/// Memory backend of an agent.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum MemoryType {
    /// In-process memory of each pod.
    #[default]
    #[serde(rename = "local")]
    Local,
}

impl MemoryType {
    pub fn as_str(self) -> &'static str {
        match self {
            MemoryType::Local => "local",
        }
    }
}

/// The lifecycle phase of an Agent. `Waiting`: the ModelAPI or an MCPServer is not ready yet;
/// `Failed`: something is missing or unsupported, as `message` and the `Ready` condition say.
// This comment, not one on `AgentStatus::phase`, is the schema's description of `status.phase`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum AgentPhase {
    #[default]
    Pending,
    Ready,
    Failed,
    /// Waiting for the ModelAPI or an MCPServer to become ready.
    Waiting,
}

impl AgentPhase {
    pub const ALL: [AgentPhase; 4] = [
        AgentPhase::Pending,
        AgentPhase::Ready,
        AgentPhase::Failed,
        AgentPhase::Waiting,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            AgentPhase::Pending => "Pending",
            AgentPhase::Ready => "Ready",
            AgentPhase::Failed => "Failed",
            AgentPhase::Waiting => "Waiting",
        }
    }
}

/// The observed state of an Agent.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<AgentPhase>,
    /// True when the Deployment has at least one ready replica.
    #[serde(default)]
    pub ready: bool,
    /// Base URL of the agent's Service, `http://<service>.<namespace>.svc.cluster.local:<port>`
    /// (no path); empty when not exposed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// The resources this agent is wired to, e.g. `{"modelapi": "<spec.modelAPI>"}`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub linked_resources: BTreeMap<String, String>,
    /// A human-readable summary of the phase, e.g. `Deployment ready replicas: 1/1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The owned Deployment's status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment: Option<DeploymentStatus>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready` and `DependenciesReady`, with machine-readable reasons.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = condition_list_schema)]
    pub conditions: Conditions,
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
