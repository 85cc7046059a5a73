//! The memorystore-controller's flags and environment.

use kaos_workload::{DataPlaneArgs, GatewayArgs};

/// The binary's flags: every controller process's, then [`Settings`].
pub type Args = kaos_runtime::binary::Args<Settings>;

/// What the pure builder needs to know about the operator's configuration.
#[derive(clap::Args, Debug, Clone, Default, PartialEq)]
pub struct Settings {
    /// Memory service image of MemoryStores without `spec.container.image` (KAOS's
    /// `DEFAULT_MEMORY_SERVICE_IMAGE`).
    #[arg(long, env = "DEFAULT_MEMORY_SERVICE_IMAGE")]
    pub default_memory_service_image: Option<String>,
    /// HTTPRoute request timeout of MemoryStores without `spec.gatewayRoute.timeout`.
    #[arg(
        long = "gateway-default-memory-timeout",
        env = "GATEWAY_DEFAULT_MEMORY_TIMEOUT",
        default_value = "30s"
    )]
    pub gateway_default_timeout: String,
    #[command(flatten)]
    pub gateway: GatewayArgs,
    #[command(flatten)]
    pub data_plane: DataPlaneArgs,
}
