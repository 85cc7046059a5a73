//! `authz-controller`: wiring only. AccessGrants and ThirdPartyServices carry no finalizer, so there is
//! no `release-finalizers` mode.

use std::process::ExitCode;

use kaos_runtime::binary::{Binary, NoSettings};

#[tokio::main]
async fn main() -> ExitCode {
    Binary::new(
        authz_controller::ID,
        "Reports the status of kaos.tools AccessGrants and ThirdPartyServices",
    )
    .run(|runtime, _: NoSettings| authz_controller::controller::run(runtime))
    .await
}
