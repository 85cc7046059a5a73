//! `agent-controller`: wiring only.

use std::process::ExitCode;

use agent_controller::settings::Args;
use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
    let Args { runtime, settings } = Args::parse();
    kaos_runtime::run(runtime, agent_controller::ID, |rt| {
        agent_controller::controller::run(rt, settings)
    })
    .await
}
