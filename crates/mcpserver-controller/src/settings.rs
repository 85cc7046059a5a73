//! The mcpserver-controller's flags and environment (`docs/contract.md` §3).

use kaos_workload::verification::overrides::AddressOverrides;
use kaos_workload::verification::settings::ProtocolCheckArgs;
use kaos_workload::{DataPlaneArgs, GatewayArgs};

/// The binary's flags: every controller process's, then [`Settings`].
pub type Args = kaos_runtime::binary::Args<Settings>;

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
    // The MCP check of each server once per rollout (`docs/readiness.md`).
    #[command(flatten)]
    pub protocol: ProtocolCheckArgs,
    /// Where this process reaches MCPServers whose Service DNS name it cannot (tests, a local
    /// sandbox): `service-host:port=host:port` entries separated by commas.
    #[arg(long, env = "MCP_ADDRESS_OVERRIDES", default_value = "")]
    pub mcp_address_overrides: AddressOverrides,
    #[command(flatten)]
    pub gateway: GatewayArgs,
    #[command(flatten)]
    pub data_plane: DataPlaneArgs,
}
