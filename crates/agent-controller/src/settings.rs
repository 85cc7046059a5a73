//! The agent-controller's flags and environment (`docs/contract.md` §3).

use kaos_workload::{DataPlaneArgs, GatewayArgs};

use crate::usage::settings::UsageSettings;

/// The binary's flags: every controller process's, then [`Settings`].
pub type Args = kaos_runtime::binary::Args<Settings>;

#[derive(clap::Args, Debug, Clone, Default, PartialEq)]
pub struct Settings {
    /// Agent runtime image of Agents without `spec.container.image`.
    #[arg(long, env = "DEFAULT_AGENT_IMAGE")]
    pub default_agent_image: Option<String>,
    /// HTTPRoute request timeout of Agents without `spec.gatewayRoute.timeout`.
    #[arg(
        long = "gateway-default-agent-timeout",
        env = "GATEWAY_DEFAULT_AGENT_TIMEOUT",
        default_value = "120s"
    )]
    pub gateway_default_timeout: String,
    #[command(flatten)]
    pub gateway: GatewayArgs,
    #[command(flatten)]
    pub data_plane: DataPlaneArgs,
    #[command(flatten)]
    pub usage: UsageSettings,
}
