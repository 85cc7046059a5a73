//! `modelapi-controller`: wiring only.

use std::process::ExitCode;

use clap::Parser;
use modelapi_controller::settings::Args;

#[tokio::main]
async fn main() -> ExitCode {
    let Args { runtime, settings } = Args::parse();
    kaos_runtime::run(runtime, modelapi_controller::ID, |rt| {
        modelapi_controller::controller::run(rt, settings)
    })
    .await
}
