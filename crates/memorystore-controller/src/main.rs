//! `memorystore-controller`: wiring only. MemoryStores carry no finalizer (as in KAOS: their
//! children go by garbage collection), so there is no `release-finalizers` mode.

use std::process::ExitCode;

use kaos_runtime::binary::Binary;

#[tokio::main]
async fn main() -> ExitCode {
    Binary::new(
        memorystore_controller::ID,
        "Reconciles kaos.tools MemoryStores into memory services",
    )
    .run(memorystore_controller::controller::run)
    .await
}
