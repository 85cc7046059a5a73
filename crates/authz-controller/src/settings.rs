//! The authz-controller's flags and environment: the shared ones only.

use clap::Parser;
use kaos_runtime::RuntimeArgs;

#[derive(Parser, Debug, Clone)]
#[command(
    name = "authz-controller",
    version,
    about = "Reports the status of kaos.tools AccessGrants and ThirdPartyServices"
)]
pub struct Args {
    #[command(flatten)]
    pub runtime: RuntimeArgs,
}
