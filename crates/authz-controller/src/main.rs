//! `authz-controller`: wiring only. AccessGrants and ThirdPartyServices carry no finalizer, so there is
//! no `release-finalizers` mode.

use std::process::ExitCode;

use kaos_runtime::binary::Binary;

#[tokio::main]
async fn main() -> ExitCode {
    Binary::new(
        authz_controller::ID,
        "Projects kaos.tools AccessGrants into KAOS's policy ConfigMap and reports their status and ThirdPartyServices'",
    )
    .run(authz_controller::controller::run)
    .await
}
