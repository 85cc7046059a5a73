//! `workflow-controller`: wiring only.

use std::process::ExitCode;

use clap::Parser;
use workflow_controller::settings::Args;

#[tokio::main]
async fn main() -> ExitCode {
    // The chart's pre-delete hook: `workflow-controller release-finalizers` (runs carry
    // a finalizer while their tasks may be in flight).
    if let Some(code) =
        kaos_runtime::uninstall::main_if_asked::<kaos_api::workflow::AgentWorkflowRun>(
            workflow_controller::ID,
            workflow_controller::reconcile_run::RUN_FINALIZER,
        )
        .await
    {
        return code;
    }
    let Args { runtime, settings } = Args::parse();
    kaos_runtime::run(runtime, workflow_controller::ID, |rt| {
        workflow_controller::controller::run(rt, settings)
    })
    .await
}
