//! `memorystore-controller`: wiring only. MemoryStores carry no finalizer (as in KAOS: their
//! children go by garbage collection), so there is no `release-finalizers` mode to run.

use std::process::ExitCode;

use clap::Parser;
use memorystore_controller::settings::Args;

#[tokio::main]
async fn main() -> ExitCode {
    let Args { runtime, settings } = Args::parse();
    kaos_runtime::run(runtime, memorystore_controller::ID, |rt| {
        memorystore_controller::controller::run(rt, settings)
    })
    .await
}
