//! `agent-controller`: wiring only.

use std::process::ExitCode;

use agent_controller::settings::Args;
use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
    // The chart's pre-delete hook: `agent-controller release-finalizers` (docs/install.md).
    if let Some(code) = kaos_runtime::uninstall::main_if_asked::<kaos_api::agent::Agent>(
        agent_controller::ID,
        agent_controller::reconcile::FINALIZER,
    )
    .await
    {
        return code;
    }
    let Args { runtime, settings } = Args::parse();
    kaos_runtime::run(runtime, agent_controller::ID, |rt| {
        agent_controller::controller::run(rt, settings)
    })
    .await
}
