//! The modelapi-controller's flags and environment (`docs/contract.md` §3).

use kaos_workload::verification::overrides::AddressOverrides;
use kaos_workload::verification::settings::ProtocolCheckArgs;
use kaos_workload::{DataPlaneArgs, GatewayArgs};

/// The binary's flags: every controller process's, then [`Settings`].
pub type Args = kaos_runtime::binary::Args<Settings>;

/// What the pure builder needs to know about the operator's configuration.
#[derive(clap::Args, Debug, Clone, Default, PartialEq)]
pub struct Settings {
    /// LiteLLM image of Proxy ModelAPIs without `spec.container.image`.
    #[arg(long, env = "DEFAULT_LITELLM_IMAGE")]
    pub default_litellm_image: Option<String>,
    /// Ollama image of Hosted ModelAPIs without `spec.container.image`.
    #[arg(long, env = "DEFAULT_OLLAMA_IMAGE")]
    pub default_ollama_image: Option<String>,
    /// HTTPRoute request timeout of ModelAPIs without `spec.gatewayRoute.timeout`.
    #[arg(
        long = "gateway-default-modelapi-timeout",
        env = "GATEWAY_DEFAULT_MODELAPI_TIMEOUT",
        default_value = "120s"
    )]
    pub gateway_default_timeout: String,
    /// Add LiteLLM's Prometheus callback to generated configs, so Proxy pods serve `/metrics/`
    /// (the chart sets it with `workloadMonitoring`). A user's own `configYaml` is left as
    /// written.
    #[arg(
        long,
        env = "LITELLM_PROMETHEUS_METRICS",
        default_value_t = false,
        action = clap::ArgAction::Set
    )]
    pub litellm_prometheus_metrics: bool,
    // The model check of each ModelAPI once per rollout (`docs/readiness.md`).
    #[command(flatten)]
    pub protocol: ProtocolCheckArgs,
    /// Where this process reaches ModelAPIs whose Service DNS name it cannot (tests, a local
    /// sandbox): `service-host:port=host:port` entries separated by commas.
    #[arg(long, env = "MODELAPI_ADDRESS_OVERRIDES", default_value = "")]
    pub modelapi_address_overrides: AddressOverrides,
    #[command(flatten)]
    pub gateway: GatewayArgs,
    #[command(flatten)]
    pub data_plane: DataPlaneArgs,
}
