//! `modelapi-controller`: wiring only.

use std::process::ExitCode;

use kaos_runtime::binary::Binary;

#[tokio::main]
async fn main() -> ExitCode {
    Binary::new(
        modelapi_controller::ID,
        "Reconciles kaos.tools ModelAPIs into LiteLLM proxies and Ollama servers",
    )
    .releases_finalizer::<kaos_api::modelapi::ModelAPI>(modelapi_controller::reconcile::FINALIZER)
    .run(modelapi_controller::controller::run)
    .await
}
