//! The mcpserver-controller's flags and environment (`docs/contract.md` §3).

use clap::Parser;
use kaos_runtime::{DataPlaneArgs, GatewayArgs, RuntimeArgs};

#[derive(Parser, Debug, Clone)]
#[command(
    name = "mcpserver-controller",
    version,
    after_help = "`mcpserver-controller release-finalizers` stops the controller and removes its finalizer \
                  from every resource (the chart's uninstall hook; see its --help)",
    about = "Reconciles kaos.tools MCPServers from the MCP runtime registry"
)]
pub struct Args {
    #[command(flatten)]
    pub runtime: RuntimeArgs,
    #[command(flatten)]
    pub settings: Settings,
}

#[derive(clap::Args, Debug, Clone, Default, PartialEq)]
pub struct Settings {
    /// Namespace of the runtime registry ConfigMap `kaos-mcp-runtimes` (the operator's namespace).
    #[arg(long, env = "SYSTEM_NAMESPACE", default_value = "kaos-system")]
    pub system_namespace: String,
    /// HTTPRoute request timeout of MCPServers without `spec.gatewayRoute.timeout`.
    #[arg(
        long = "gateway-default-mcp-timeout",
        env = "GATEWAY_DEFAULT_MCP_TIMEOUT",
        default_value = "30s"
    )]
    pub gateway_default_timeout: String,
    #[command(flatten)]
    pub gateway: GatewayArgs,
    #[command(flatten)]
    pub data_plane: DataPlaneArgs,
}
