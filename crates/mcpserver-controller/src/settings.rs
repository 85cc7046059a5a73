//! The mcpserver-controller's flags and environment (`docs/contract.md` §3).

use kaos_workload::{DataPlaneArgs, GatewayArgs};

use crate::verification::AddressOverrides;

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
    /// Whether the controller checks each MCPServer's protocol once per rollout
    /// (`docs/readiness.md`). Off where no pod can answer (kwok nodes, `kaosctl dev`): a check
    /// that cannot succeed is retried with backoff, so such a cluster would never be quiet.
    #[arg(
        long,
        env = "PROTOCOL_CHECKS",
        default_value = "true",
        value_parser = clap::builder::BoolishValueParser::new(),
        action = clap::ArgAction::Set
    )]
    pub protocol_checks: bool,
    /// Per-request timeout of the MCP check made once per rollout (`docs/readiness.md`).
    #[arg(long, env = "PROTOCOL_CHECK_TIMEOUT_SECONDS", default_value_t = 5)]
    pub protocol_check_timeout_seconds: u64,
    /// MCP checks run at once at most, across every watched namespace.
    #[arg(long, env = "PROTOCOL_CHECKS_IN_FLIGHT", default_value_t = 8)]
    pub protocol_checks_in_flight: usize,
    /// Where this process reaches MCPServers whose Service DNS name it cannot (tests, a local
    /// sandbox): `service-host:port=host:port` entries separated by commas.
    #[arg(long, env = "MCP_ADDRESS_OVERRIDES", default_value = "")]
    pub mcp_address_overrides: AddressOverrides,
    #[command(flatten)]
    pub gateway: GatewayArgs,
    #[command(flatten)]
    pub data_plane: DataPlaneArgs,
}
