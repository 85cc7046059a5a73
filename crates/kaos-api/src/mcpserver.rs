//! The `MCPServer` kind: a Model Context Protocol tool server started from the operator's runtime
//! registry (or from a custom image).

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{DNS_LABEL, DNS_SUBDOMAIN, MAX_ENV_TEXT, Telemetry, WorkloadStatus};
use crate::scaling::WorkloadScaling;
use crate::workload::{WorkloadSpec, describe_workload_fields};

/// The longest MCPServer name: its Deployment and Service `mcpserver-<name>` must be a DNS label.
pub const MAX_NAME_LENGTH: u32 = 53;

/// Rules on the whole object, the only place a CEL rule can read `metadata.name`.
pub(crate) fn object_rules() -> serde_json::Value {
    serde_json::json!([
        crate::common::child_name_rule("MCPServer", "mcpserver", MAX_NAME_LENGTH),
        crate::scaling::object_rule()
    ])
}

/// The runtime name that takes image, command and args from `spec.container`.
pub const CUSTOM_RUNTIME: &str = "custom";

/// The desired state of an MCPServer.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "kaos.tools",
    version = "v1alpha1",
    kind = "MCPServer",
    plural = "mcpservers",
    singular = "mcpserver",
    namespaced,
    doc = "A Model Context Protocol tool server, started from the operator runtime registry or a custom image.",
    status = "MCPServerStatus",
    shortname = "mcp",
    shortname = "mcps",
    category = "kaos",
    scale = r#"{"specReplicasPath":".spec.replicas","statusReplicasPath":".status.replicas","labelSelectorPath":".status.selector"}"#,
    printcolumn = r#"{"name":"Runtime","type":"string","jsonPath":".spec.runtime"}"#,
    printcolumn = r#"{"name":"Ready","type":"boolean","jsonPath":".status.ready"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Tools","type":"string","jsonPath":".status.availableTools"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "self.runtime != 'custom' || (has(self.container) && has(self.container.image) && self.container.image != '')",
    "message": "runtime custom requires container.image (the MCP server image to run)"
}]))]
#[schemars(transform = describe_mcpserver_fields)]
pub struct MCPServerSpec {
    /// A runtime of the operator's registry (ConfigMap `kaos-mcp-runtimes`, key `runtimes.yaml`,
    /// in the operator's namespace) such as `python-string`, `kubernetes` or `slack`; or `custom`,
    /// which runs `container.image`.
    #[schemars(length(min = 1, max = 63), pattern(DNS_LABEL))]
    pub runtime: String,
    /// Handed to the runtime through its `paramsEnvVar` (for `python-string`, the Python source
    /// of the tools, in `MCP_TOOLS_STRING`); in `MCP_PARAMS` for a runtime without one (such as
    /// `kubernetes`, whose params are YAML) and for `custom` images.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_ENV_TEXT))]
    pub params: Option<String>,
    /// Service account of the server's pods (e.g. for the `kubernetes` runtime). Unset: the
    /// namespace's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), pattern(DNS_SUBDOMAIN))]
    pub service_account_name: Option<String>,
    /// `replicas`, `autoscaling` and `podDisruptionBudget`.
    #[serde(flatten)]
    pub scaling: WorkloadScaling,
    /// OpenTelemetry settings, merged with the operator's `DEFAULT_TELEMETRY_*` defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub telemetry: Option<Telemetry>,
    /// `container`, `podSpec`, `gatewayRoute` and `security`.
    #[serde(flatten)]
    pub workload: WorkloadSpec,
}

fn describe_mcpserver_fields(schema: &mut schemars::Schema) {
    let container =
        "Overrides of the generated `mcp-server` container; `image` is required for `custom`.";
    describe_workload_fields(schema, container, "mcpserver");
}

/// The observed state of an MCPServer.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MCPServerStatus {
    /// `phase`, `ready`, `endpoint`, `message`, the Deployment's scale, `observedGeneration`
    /// and `conditions`, as every workload kind reports them.
    #[serde(flatten)]
    pub workload: WorkloadStatus,
    /// Tool names the server offers, as its MCP tools/list answered the controller's check of
    /// its latest available rollout (condition `ProtocolVerified`); empty before a check succeeds
    /// or when the server requires credentials.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub available_tools: Vec<String>,
    /// Who answered that check: the `serverInfo` and the protocol revision of the server's MCP
    /// initialize answer; absent before a check succeeds or when the server requires
    /// credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_info: Option<McpServerInfo>,
}

/// The MCP server's own description of itself, from its initialize answer (each text at most
/// 253 characters).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct McpServerInfo {
    /// `serverInfo.name`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// `serverInfo.version`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    /// The protocol revision the server chose (`protocolVersion`), e.g. `2025-06-18`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub protocol_version: String,
}

/// A workload's status, with no tools listed.
impl From<WorkloadStatus> for MCPServerStatus {
    fn from(workload: WorkloadStatus) -> Self {
        MCPServerStatus {
            workload,
            available_tools: Vec::new(),
            server_info: None,
        }
    }
}

/// An MCPServer's status reads as a workload's (`status.ready`, `status.endpoint`, …).
impl std::ops::Deref for MCPServerStatus {
    type Target = WorkloadStatus;

    fn deref(&self) -> &WorkloadStatus {
        &self.workload
    }
}
