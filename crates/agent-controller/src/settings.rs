//! The agent-controller's flags and environment (`docs/contract.md` §3).

use clap::Parser;
use kaos_runtime::{DataPlaneArgs, GatewayArgs, RuntimeArgs};

#[derive(Parser, Debug, Clone)]
#[command(
    name = "agent-controller",
    version,
    after_help = "`agent-controller release-finalizers` stops the controller and removes its finalizer \
                  from every resource (the chart's uninstall hook; see its --help)",
    about = "Reconciles kaos.tools Agents and wires them to their ModelAPI, MCPServers and peers"
)]
pub struct Args {
    #[command(flatten)]
    pub runtime: RuntimeArgs,
    #[command(flatten)]
    pub settings: Settings,
}

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
}
