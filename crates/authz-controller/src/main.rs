//! `authz-controller`: wiring only. Its kinds carry no finalizer.

use std::process::ExitCode;

use authz_controller::settings::Args;
use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
    let Args { runtime } = Args::parse();
    kaos_runtime::run(
        runtime,
        authz_controller::ID,
        authz_controller::controller::run,
    )
    .await
}
