//! Pieces shared by the three kinds: container overrides, gateway routes, telemetry and the
//! status fields every kind reports.

use k8s_openapi::api::apps::v1::DeploymentCondition;
use k8s_openapi::api::core::v1::{EnvVar, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The API group of every kind in this crate.
pub const GROUP: &str = "kaos.tools";
/// The only served version.
pub const VERSION: &str = "v1alpha1";

/// The pattern a `gatewayRoute.timeout` must match: one to four `<number><unit>` pairs.
pub const TIMEOUT_PATTERN: &str = "^([0-9]+(h|m|s|ms)){1,4}$";

pub(crate) fn default_true() -> bool {
    true
}

/// Shorthand overrides for the generated main container. Every field is honoured for every kind.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerOverride {
    /// Container image; replaces the operator's default image for this kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Entrypoint; replaces the image's (or the runtime's) command.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// Arguments; replace the generated arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Compute resources of the main container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Extra environment variables. An entry named like a generated variable replaces that
    /// variable's value where it stands, so no name appears twice.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
}

/// Gateway API routing settings for the HTTPRoute the operator creates when the gateway is enabled.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GatewayRoute {
    /// Request timeout of the route, a Go duration such as `30s`, `5m` or `1h30m`. `0s` sets no
    /// timeout. Unset: the operator's per-kind default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
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
    /// Turns traces, metrics and log correlation on.
    #[serde(default)]
    pub enabled: bool,
    /// OTLP gRPC endpoint, for instance `http://otel-collector.observability:4317`. Unset: the
    /// operator's default endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
}

/// A mirror of the owned Deployment's status.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentStatus {
    #[serde(default)]
    pub replicas: i32,
    #[serde(default)]
    pub ready_replicas: i32,
    #[serde(default)]
    pub available_replicas: i32,
    #[serde(default)]
    pub updated_replicas: i32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<DeploymentCondition>,
}

/// The lifecycle phase of a ModelAPI or MCPServer.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum Phase {
    #[default]
    Pending,
    Ready,
    Failed,
}

impl Phase {
    pub const ALL: [Phase; 3] = [Phase::Pending, Phase::Ready, Phase::Failed];

    pub fn as_str(self) -> &'static str {
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
