//! `agent-controller`: wiring only.

use std::process::ExitCode;

use kaos_runtime::binary::Binary;

#[tokio::main]
async fn main() -> ExitCode {
    Binary::new(
        agent_controller::ID,
        "Reconciles kaos.tools Agents and wires them to their ModelAPI, MCPServers and peers",
    )
    .releases_finalizer::<kaos_api::agent::Agent>(agent_controller::reconcile::FINALIZER)
    .run(agent_controller::controller::run)
    .await
}
