//! `mcpserver-controller`: wiring only.

use std::process::ExitCode;

use clap::Parser;
use mcpserver_controller::settings::Args;

#[tokio::main]
async fn main() -> ExitCode {
    // The chart's pre-delete hook: `mcpserver-controller release-finalizers` (docs/install.md).
    if let Some(code) = kaos_runtime::uninstall::main_if_asked::<kaos_api::mcpserver::MCPServer>(
        mcpserver_controller::ID,
        mcpserver_controller::reconcile::FINALIZER,
    )
    .await
    {
        return code;
    }
    let Args { runtime, settings } = Args::parse();
    kaos_runtime::run(runtime, mcpserver_controller::ID, |rt| {
        mcpserver_controller::controller::run(rt, settings)
    })
    .await
}
