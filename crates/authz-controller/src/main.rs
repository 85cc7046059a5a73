//! `access-controller`: wiring only. Its kinds carry no finalizer.

use std::process::ExitCode;

use access_controller::settings::Args;
use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
    let Args { runtime } = Args::parse();
    kaos_runtime::run(
        runtime,
        access_controller::ID,
        access_controller::controller::run,
    )
    .await
}
