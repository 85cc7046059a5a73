//! `workflow-controller`: wiring only. Runs carry a finalizer while their tasks may be in flight.

use std::process::ExitCode;

use kaos_runtime::binary::Binary;

#[tokio::main]
async fn main() -> ExitCode {
    Binary::new(
        workflow_controller::ID,
        "Runs kaos.tools AgentWorkflows: steps sent to agents over A2A, on demand or on a schedule",
    )
    .releases_finalizer::<kaos_api::workflow::AgentWorkflowRun>(
        workflow_controller::reconcile::run::RUN_FINALIZER,
    )
    .run(workflow_controller::controller::run)
    .await
}
