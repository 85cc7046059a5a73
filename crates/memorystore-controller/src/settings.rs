//! The memorystore-controller's flags and environment.

use clap::Parser;
use kaos_runtime::{DataPlaneArgs, GatewayArgs, RuntimeArgs};

#[derive(Parser, Debug, Clone)]
#[command(
    name = "memorystore-controller",
    version,
    about = "Reconciles kaos.tools MemoryStores into memory services"
)]
pub struct Args {
    #[command(flatten)]
    pub runtime: RuntimeArgs,
    #[command(flatten)]
    pub settings: Settings,
}

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
