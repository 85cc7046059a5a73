//! Pieces shared by the three kinds: container overrides, gateway routes, telemetry and the
//! status fields every kind reports.

use k8s_openapi::api::apps::v1::DeploymentCondition;
use k8s_openapi::api::core::v1::{ContainerPort, EnvVar, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The API group of every kind in this crate.
pub const GROUP: &str = "kaos.tools";
/// The only served version.
pub const VERSION: &str = "v1alpha1";

/// The pattern a `gatewayRoute.timeout` must match: one to four `<number><unit>` pairs.
pub const TIMEOUT_PATTERN: &str = "^([0-9]+(h|m|s|ms)){1,4}$";

/// A DNS-1123 label: what a resource name in a namespace must be, and what the names of its
/// children are built from.
pub const DNS_LABEL: &str = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
/// A DNS-1123 subdomain (ServiceAccount names).
pub const DNS_SUBDOMAIN: &str =
    "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
/// The rule on a workload kind's `metadata.name`: its children are named `<prefix>-<name>`, and a
/// Service name is a DNS-1035 label (at most 63 of lowercase letters, digits and '-'), so the name
/// must fit in what is left and hold no '.' (which the API server allows in a custom resource's
/// name, a DNS subdomain, but refuses in a Service's). Both checks are plain string functions, so
/// the rule's cost is small whatever the name.
pub(crate) fn child_name_rule(kind: &str, prefix: &str, max_length: u32) -> serde_json::Value {
    serde_json::json!({
        "rule": format!("self.metadata.name.size() <= {max_length} && !self.metadata.name.contains('.')"),
        "message": format!("metadata.name must be a DNS label of at most {max_length} characters (lowercase letters, digits and '-', no '.'): the {kind}'s Deployment and Service are named {prefix}-<name>, a DNS-1035 label of at most 63"),
    })
}
/// An environment variable name every shell and runtime can read.
pub const ENV_VAR_NAME: &str = "^[A-Za-z_][A-Za-z0-9_]*$";
/// Text passed to the pods as an environment variable: Linux refuses a single `NAME=value`
/// string over 128 KiB (MAX_ARG_STRLEN), so such fields stop at 64 KiB.
pub const MAX_ENV_TEXT: u32 = 65_536;
/// A model id (`gpt-4o`, `openai/*`, `hf.co/org/model:tag`).
pub const MAX_MODEL_ID: u32 = 256;
/// A URL (API bases, OTLP endpoints).
pub const MAX_URL: u32 = 2_048;

pub(crate) fn default_true() -> bool {
    true
}

/// Shorthand overrides for the generated main container. Every field is honoured for every kind.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerOverride {
    /// Container image; replaces the operator's default image for this kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub image: Option<String>,
    /// Entrypoint; replaces the image's (or the runtime's) command.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(max = MAX_ENV_TEXT)))]
    pub command: Vec<String>,
    /// Arguments; replace the generated arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256), inner(length(max = MAX_ENV_TEXT)))]
    pub args: Vec<String>,
    /// Compute resources (requests and limits) of the main container, in Kubernetes' quantity
    /// syntax (`500m`, `1Gi`, `2`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = quantity_values)]
    pub resources: Option<ResourceRequirements>,
    /// Extra environment variables, placed right after the generated identity variables. An
    /// entry named like a generated variable replaces that variable's value where it stands, so
    /// no name appears twice. Names are ones every shell and runtime can read; a value stops at
    /// 64 KiB, as Linux refuses a single environment string over 128 KiB.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256), transform = bounded_env_items)]
    pub env: Vec<EnvVar>,
    /// Ports of the main container, added to the generated one (`http`: 8000, or 11434 for a
    /// Hosted ModelAPI). A port with the generated one's name or number replaces it and must
    /// keep its number: the Service and the probes use it. `kaos mcp deploy` writes
    /// `[{containerPort: 8000, name: http}]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub ports: Vec<ContainerPort>,
}

/// Kubernetes' quantity syntax (`500m`, `1Gi`, `2`), as controller-gen writes it into CRDs: a
/// typo fails at apply time instead of when the Deployment is written.
pub const QUANTITY: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

/// Adds the quantity pattern to `limits` and `requests` of the embedded ResourceRequirements.
fn quantity_values(schema: &mut schemars::Schema) {
    for map in ["limits", "requests"] {
        let value = schema
            .get_mut("properties")
            .and_then(|p| p.get_mut(map))
            .and_then(|m| m.get_mut("additionalProperties"))
            .and_then(serde_json::Value::as_object_mut);
        if let Some(value) = value {
            value.insert("pattern".into(), QUANTITY.into());
        }
    }
}

/// Bounds the embedded `EnvVar` schema: a name a shell can read, a value that fits in a pod's
/// environment (see [`MAX_ENV_TEXT`]).
fn bounded_env_items(schema: &mut schemars::Schema) {
    let Some(properties) = schema
        .get_mut("items")
        .and_then(|items| items.get_mut("properties"))
        .and_then(serde_json::Value::as_object_mut)
    else {
        return;
    };
    if let Some(name) = properties
        .get_mut("name")
        .and_then(serde_json::Value::as_object_mut)
    {
        name.insert("pattern".into(), ENV_VAR_NAME.into());
        name.insert("maxLength".into(), 256.into());
    }
    if let Some(value) = properties
        .get_mut("value")
        .and_then(serde_json::Value::as_object_mut)
    {
        value.insert("maxLength".into(), MAX_ENV_TEXT.into());
    }
}

/// Gateway API routing settings for the HTTPRoute the operator creates when the gateway is enabled.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GatewayRoute {
    /// Request timeout of the route, a duration of one to four `<number><h|m|s|ms>` parts such
    /// as `30s`, `5m`, `1h30m` or `500ms`. `0s` sets no timeout. Unset: the operator's per-kind
    /// default (`GATEWAY_DEFAULT_AGENT_TIMEOUT`, `GATEWAY_DEFAULT_MODELAPI_TIMEOUT`,
    /// `GATEWAY_DEFAULT_MCP_TIMEOUT`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": "self.matches('^([0-9]+(h|m|s|ms)){1,4}$')",
        "message": "timeout must be a duration such as 30s, 5m, 1h30m or 500ms (0s sets no timeout)"
    }]))]
    pub timeout: Option<String>,
}

/// OpenTelemetry settings; merged with the operator's `DEFAULT_TELEMETRY_*` settings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Telemetry {
    /// Turns OpenTelemetry traces, metrics and log correlation on.
    #[serde(default)]
    pub enabled: bool,
    /// OTLP gRPC endpoint, for instance `http://otel-collector.observability:4317`. Unset: the
    /// operator's default endpoint (`DEFAULT_TELEMETRY_ENDPOINT`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_URL))]
    pub endpoint: Option<String>,
}

/// The pattern of a `security.id`: lower-case letters and digits, with `.`, `_` and `-` inside.
pub const SECURITY_ID: &str = "^[a-z0-9]([a-z0-9._-]*[a-z0-9])?$";

/// Identity settings of a resource.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Security {
    /// A stable logical id: the resource's identity becomes `kaos://<kind>/<id>` instead of
    /// `kaos://<kind>/<namespace>/<name>` (an Agent's `AGENT_IDENTITY`), so it survives a move
    /// or a rename. Unique per kind in the cluster: the oldest resource claiming an id holds it,
    /// and any other fails (`SecurityIdConflict`) until the holder goes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), pattern(SECURITY_ID))]
    pub id: Option<String>,
}

/// A mirror of the owned Deployment's status.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentStatus {
    /// The Deployment's `status.replicas`.
    #[serde(default)]
    pub replicas: i32,
    /// The Deployment's `status.readyReplicas`.
    #[serde(default)]
    pub ready_replicas: i32,
    /// The Deployment's `status.availableReplicas`.
    #[serde(default)]
    pub available_replicas: i32,
    /// The Deployment's `status.updatedReplicas`.
    #[serde(default)]
    pub updated_replicas: i32,
    /// The Deployment's `status.conditions`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<DeploymentCondition>,
}

/// The owned Deployment as a workload's status shows it: its own status, its pods now and asked
/// for, and their selector (what a scale subresource reads). Flattened into the status of Agent,
/// ModelAPI, MCPServer and MemoryStore.
// Flattened: the scale subresource reads `.status.replicas` and `.status.selector`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScaleStatus {
    /// The owned Deployment's status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment: Option<DeploymentStatus>,
    /// Pods of the Deployment now (`status.replicas` of its scale subresource).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Pods the Deployment is asked for: `spec.replicas`, or the autoscaler's choice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_replicas: Option<i32>,
    /// The label selector of the pods, for the scale subresource (`kubectl scale`, KEDA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
}

/// The observed state: phase, readiness, endpoint and the owned Deployment's status (the
/// status of ModelAPI and MemoryStore, which add nothing of their own).
// Flattened into an Agent's and an MCPServer's status, which add a field each. `P` is the
// kind's phase: `Phase`, or an Agent's, which can also wait.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadStatus<P = Phase> {
    // The phase enum's own comment is the schema's description of `status.phase`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<P>,
    /// True when the Deployment has at least one ready replica.
    #[serde(default)]
    pub ready: bool,
    /// Base URL of the resource's Service, `http://<service>.<namespace>.svc.cluster.local:<port>`
    /// (no path).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// A human-readable summary of the phase, e.g. `Deployment ready replicas: 1/1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// `deployment`, `replicas`, `desiredReplicas` and `selector`.
    #[serde(flatten)]
    pub scale: ScaleStatus,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready` and kind-specific conditions, with machine-readable reasons.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = condition_list_schema)]
    pub conditions: Conditions,
}

/// The lifecycle phase of a ModelAPI, MCPServer or MemoryStore; `Failed` says what to fix in
/// `message` and the `Ready` condition.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum Phase {
    #[default]
    Pending,
    Ready,
    Failed,
}

impl Phase {
    pub const ALL: [Phase; 3] = [Phase::Pending, Phase::Ready, Phase::Failed];

    /// Every phase's name, in the order of [`Phase::ALL`] (the `kaos_resources` metric's phases).
    pub const NAMES: [&'static str; 3] = {
        let mut names = [""; 3];
        let mut i = 0;
        while i < 3 {
            names[i] = Self::ALL[i].as_str();
            i += 1;
        }
        names
    };

    pub const fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Ready => "Ready",
            Phase::Failed => "Failed",
        }
    }
}

/// Status conditions, a list keyed by `type` as Kubernetes conventions ask.
pub(crate) type Conditions = Vec<Condition>;

/// Schema transform for condition lists: a map keyed by `type`, so server-side apply merges them.
pub(crate) fn condition_list_schema(schema: &mut schemars::Schema) {
    schema.insert("x-kubernetes-list-type".into(), "map".into());
    schema.insert(
        "x-kubernetes-list-map-keys".into(),
        serde_json::json!(["type"]),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flattened_scale_fields_stay_where_they_were_in_the_json() {
        let json = r#"{"ready":true,"message":"up","deployment":{"replicas":2,"readyReplicas":2,"availableReplicas":2,"updatedReplicas":2},"replicas":2,"desiredReplicas":3,"selector":"app=a","observedGeneration":4}"#;
        let status: WorkloadStatus = serde_json::from_str(json).expect("status");
        assert_eq!(status.scale.desired_replicas, Some(3));
        assert_eq!(status.scale.selector.as_deref(), Some("app=a"));
        assert_eq!(serde_json::to_string(&status).expect("json"), json);
    }
}
