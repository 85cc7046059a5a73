//! `modelapi-controller`: wiring only.

use std::process::ExitCode;

use clap::Parser;
use modelapi_controller::settings::Args;

#[tokio::main]
async fn main() -> ExitCode {
    // The chart's pre-delete hook: `modelapi-controller release-finalizers` (docs/install.md).
    if let Some(code) = kaos_runtime::uninstall::main_if_asked::<kaos_api::modelapi::ModelAPI>(
        modelapi_controller::ID,
        modelapi_controller::reconcile::FINALIZER,
    )
    .await
    {
        return code;
    }
    let Args { runtime, settings } = Args::parse();
    kaos_runtime::run(runtime, modelapi_controller::ID, |rt| {
        modelapi_controller::controller::run(rt, settings)
    })
    .await
}
