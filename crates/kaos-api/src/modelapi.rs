//! The `ModelAPI` kind: an OpenAI-compatible model endpoint, either a LiteLLM proxy in front of an
//! upstream provider (`Proxy`) or an Ollama server running the model in the cluster (`Hosted`).

use k8s_openapi::api::core::v1::{ConfigMapKeySelector, SecretKeySelector};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::budget::{Budget, USD_PATTERN};
use crate::common::{MAX_MODEL_ID, MAX_URL, Telemetry, WorkloadStatus};
use crate::scaling::WorkloadScaling;
use crate::workload::{WorkloadSpec, describe_workload_fields};

/// The longest ModelAPI name: its Deployment and Service `modelapi-<name>` must be a DNS label.
pub const MAX_NAME_LENGTH: u32 = 54;

/// Rules on the whole object, the only place a CEL rule can read `metadata.name`.
pub(crate) fn object_rules() -> serde_json::Value {
    serde_json::json!([
        crate::common::child_name_rule("ModelAPI", "modelapi", MAX_NAME_LENGTH),
        crate::scaling::object_rule()
    ])
}

/// The desired state of a ModelAPI.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "kaos.tools",
    version = "v1alpha1",
    kind = "ModelAPI",
    plural = "modelapis",
    singular = "modelapi",
    namespaced,
    doc = "An OpenAI-compatible model endpoint: a LiteLLM proxy (Proxy) or an in-cluster Ollama server (Hosted).",
    status = "ModelAPIStatus",
    shortname = "api",
    shortname = "apis",
    category = "kaos",
    scale = r#"{"specReplicasPath":".spec.replicas","statusReplicasPath":".status.replicas","labelSelectorPath":".status.selector"}"#,
    printcolumn = r#"{"name":"Mode","type":"string","jsonPath":".spec.mode"}"#,
    printcolumn = r#"{"name":"Ready","type":"boolean","jsonPath":".status.ready"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "self.mode != 'Proxy' || has(self.proxyConfig)",
        "message": "mode Proxy requires proxyConfig (at least proxyConfig.models)"
    },
    {
        "rule": "self.mode != 'Hosted' || has(self.hostedConfig)",
        "message": "mode Hosted requires hostedConfig (at least hostedConfig.model)"
    },
    {
        "rule": "!(has(self.proxyConfig) && has(self.hostedConfig))",
        "message": "set proxyConfig (mode Proxy) or hostedConfig (mode Hosted), not both"
    }
]))]
#[schemars(transform = describe_modelapi_fields)]
pub struct ModelAPISpec {
    /// `Proxy`: a LiteLLM gateway to an upstream API. `Hosted`: Ollama serving the model in
    /// cluster. Switching it changes the Service port (8000 for `Proxy`, 11434 for `Hosted`) and
    /// removes the LiteLLM ConfigMap that `Hosted` does not use.
    pub mode: ModelAPIMode,
    /// Settings of `Proxy` mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_config: Option<ProxyConfig>,
    /// Settings of `Hosted` mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosted_config: Option<HostedConfig>,
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

fn describe_modelapi_fields(schema: &mut schemars::Schema) {
    let container = "Overrides of the generated `model-api` container.";
    describe_workload_fields(schema, container, "modelapi");
}

/// How a ModelAPI serves models.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ModelAPIMode {
    /// A LiteLLM proxy in front of an upstream provider.
    Proxy,
    /// An Ollama server running the model in the cluster.
    Hosted,
}

impl ModelAPIMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ModelAPIMode::Proxy => "Proxy",
            ModelAPIMode::Hosted => "Hosted",
        }
    }
}

/// Settings of `Proxy` mode.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProxyConfig {
    /// Model ids agents may ask for: exact ids, `provider/*` (any id starting with `provider/`)
    /// or `*`.
    #[schemars(length(min = 1, max = 256), inner(length(min = 1, max = MAX_MODEL_ID)))]
    pub models: Vec<String>,
    /// LiteLLM provider prefix: `model: <provider>/<model>` in the generated config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub provider: Option<String>,
    /// Base URL of the upstream API (`PROXY_API_BASE`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_URL))]
    pub api_base: Option<String>,
    /// Key for the upstream API (`PROXY_API_KEY`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<ApiKey>,
    /// A complete LiteLLM config used instead of the generated one. Agents with a budget add
    /// their entries to an inline (`fromString`) config; one read from a Secret cannot be
    /// extended, and their budget is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_yaml: Option<ConfigYaml>,
    /// The budget of every Agent using this ModelAPI that sets none of its own. Unset: such
    /// agents have no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_agent_budget: Option<Budget>,
    /// Prices of models LiteLLM's cost map does not know (or that you pay differently for), so
    /// that cost limits and reported spend count them. Without a price an unknown model costs 0
    /// and an agent's cost limit says so in its `BudgetExceeded` condition.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": "self.all(p, self.exists_one(q, q.model == p.model))",
        "message": "prices must not name the same model twice"
    }]))]
    pub prices: Vec<ModelPrice>,
    /// A Redis that keeps the proxy's budget counters, so limits hold across restarts and are
    /// shared by replicas. Unset: each LiteLLM pod counts alone, from zero when it restarts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redis: Option<RedisConfig>,
}

/// The price of a model, in US dollars per million tokens.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelPrice {
    /// The model as agents name it (`spec.model`).
    #[schemars(length(min = 1, max = MAX_MODEL_ID))]
    pub model: String,
    /// Dollars per million prompt tokens, e.g. `"2.50"`.
    #[schemars(length(min = 1, max = 16), pattern(USD_PATTERN))]
    pub input_per_million_tokens: String,
    /// Dollars per million completion tokens, e.g. `"10"`.
    #[schemars(length(min = 1, max = 16), pattern(USD_PATTERN))]
    pub output_per_million_tokens: String,
}

/// A Redis server (standalone) reached from the ModelAPI's pods.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RedisConfig {
    /// Its host name or address, e.g. `redis.kaos-system.svc.cluster.local`.
    #[schemars(length(min = 1, max = 253))]
    pub host: String,
    /// Its port (default 6379).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: Option<i32>,
    /// A Secret key holding its password (`REDIS_PASSWORD`); unset: no password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_secret_ref: Option<SecretKeySelector>,
}

impl RedisConfig {
    pub fn port(&self) -> i32 {
        self.port.unwrap_or(6379)
    }
}

/// The upstream API key: a literal value or a reference. Prefer a Secret reference.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "has(self.value) != has(self.valueFrom)",
    "message": "apiKey: set exactly one of value or valueFrom"
}]))]
pub struct ApiKey {
    /// The key itself (stored in the ModelAPI; not recommended beyond development).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096))]
    pub value: Option<String>,
    /// The key from a Secret key (recommended) or a ConfigMap key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_from: Option<ApiKeySource>,
}

/// Where to read an API key from.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "has(self.secretKeyRef) != has(self.configMapKeyRef)",
    "message": "apiKey.valueFrom: set exactly one of secretKeyRef or configMapKeyRef"
}]))]
pub struct ApiKeySource {
    /// A key of a Secret in the ModelAPI's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_key_ref: Option<SecretKeySelector>,
    /// A key of a ConfigMap in the ModelAPI's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_key_ref: Option<ConfigMapKeySelector>,
}

/// A complete LiteLLM `config.yaml`, inline or from a Secret.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "has(self.fromString) != has(self.fromSecretKeyRef)",
    "message": "configYaml: set exactly one of fromString or fromSecretKeyRef"
}]))]
pub struct ConfigYaml {
    /// The config text. Every `model_list[].model_name` must be allowed by `models`. At most
    /// 256 KiB: it is stored in a ConfigMap (1 MiB) next to the ModelAPI itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 262_144))]
    pub from_string: Option<String>,
    /// A Secret key holding the config text, mounted as the config file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_secret_key_ref: Option<SecretKeySelector>,
}

/// Settings of `Hosted` mode.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HostedConfig {
    /// Ollama model pulled when the pod starts, e.g. `smollm2:135m`.
    #[schemars(length(min = 1, max = MAX_MODEL_ID))]
    pub model: String,
}

/// The observed state of a ModelAPI.
pub type ModelAPIStatus = WorkloadStatus;

impl ModelAPISpec {
    /// Whether this ModelAPI serves `model`. Proxy: an entry of `proxyConfig.models` equals it,
    /// is `*`, or is `p/*` and the model starts with `p/`. Hosted: it equals `hostedConfig.model`.
    pub fn serves(&self, model: &str) -> bool {
        match self.mode {
            ModelAPIMode::Proxy => self
                .proxy_config
                .as_ref()
                .is_some_and(|p| p.models.iter().any(|m| model_pattern_matches(m, model))),
            ModelAPIMode::Hosted => self
                .hosted_config
                .as_ref()
                .is_some_and(|h| h.model == model),
        }
    }

    /// The models this ModelAPI serves, as shown in error messages.
    pub fn supported_models(&self) -> Vec<String> {
        match self.mode {
            ModelAPIMode::Proxy => self
                .proxy_config
                .as_ref()
                .map(|p| p.models.clone())
                .unwrap_or_default(),
            ModelAPIMode::Hosted => self.hosted_config.iter().map(|h| h.model.clone()).collect(),
        }
    }
}

/// The budget that applies to an agent: its own, else its ModelAPI's `defaultAgentBudget`.
pub fn effective_budget<'a>(
    own: Option<&'a Budget>,
    model_api: Option<&'a ModelAPISpec>,
) -> Option<&'a Budget> {
    own.or_else(|| {
        model_api?
            .proxy_config
            .as_ref()?
            .default_agent_budget
            .as_ref()
    })
}

/// `*` matches every model, `p/*` every model starting with `p/`, anything else only itself.
pub fn model_pattern_matches(pattern: &str, model: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some("") => true,
        Some(prefix) if prefix.ends_with('/') => model.starts_with(prefix),
        _ => pattern == model,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_patterns() {
        assert!(model_pattern_matches("*", "anything/at-all"));
        assert!(model_pattern_matches("openai/*", "openai/gpt-4o"));
        assert!(!model_pattern_matches("openai/*", "anthropic/claude"));
        assert!(!model_pattern_matches("openai/*", "openai"));
        assert!(model_pattern_matches("gpt-4o", "gpt-4o"));
        assert!(!model_pattern_matches("gpt-4o", "gpt-4o-mini"));
        // A trailing star without a slash is not a wildcard in KAOS.
        assert!(!model_pattern_matches("gpt*", "gpt-4o"));
    }

    #[test]
    fn serves_by_mode() {
        let proxy = ModelAPISpec {
            mode: ModelAPIMode::Proxy,
            proxy_config: Some(ProxyConfig {
                models: vec!["openai/*".into(), "llama3".into()],
                ..Default::default()
            }),
            hosted_config: Some(HostedConfig {
                model: "ignored".into(),
            }),
            scaling: Default::default(),
            telemetry: None,
            workload: Default::default(),
        };
        assert!(proxy.serves("openai/gpt-4o"));
        assert!(proxy.serves("llama3"));
        assert!(!proxy.serves("ignored"));
        assert_eq!(proxy.supported_models(), vec!["openai/*", "llama3"]);

        let hosted = ModelAPISpec {
            mode: ModelAPIMode::Hosted,
            ..proxy
        };
        assert!(hosted.serves("ignored"));
        assert!(!hosted.serves("llama3"));
        assert_eq!(hosted.supported_models(), vec!["ignored"]);
    }
}
