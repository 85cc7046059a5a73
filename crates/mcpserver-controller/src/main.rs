//! `mcpserver-controller`: wiring only.

use std::process::ExitCode;

use kaos_runtime::binary::Binary;

#[tokio::main]
async fn main() -> ExitCode {
    Binary::new(
        mcpserver_controller::ID,
        "Reconciles kaos.tools MCPServers from the MCP runtime registry",
    )
    .releases_finalizer::<kaos_api::mcpserver::MCPServer>(
        mcpserver_controller::reconcile::FINALIZER,
    )
    .run(mcpserver_controller::controller::run)
    .await
}
