//! `mcpserver-controller`: wiring only.

use std::process::ExitCode;

use clap::Parser;
use mcpserver_controller::settings::Args;

#[tokio::main]
async fn main() -> ExitCode {
    let Args { runtime, settings } = Args::parse();
    kaos_runtime::run(runtime, mcpserver_controller::ID, |rt| {
        mcpserver_controller::controller::run(rt, settings)
    })
    .await
}
