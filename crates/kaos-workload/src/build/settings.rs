//! The operator settings of `docs/contract.md` §3 that every workload controller reads: the
//! defaults of the pods they generate.

use clap::{ArgAction, Args};

use crate::build::network_policy::NetworkPolicyArgs;
use crate::build::pod_security::PodSecurity;

/// Defaults applied to the pods the controllers create.
#[derive(Args, Clone, Debug, Default, PartialEq)]
pub struct DataPlaneArgs {
    /// Telemetry for components that do not set `telemetry.enabled`.
    #[arg(long, env = "DEFAULT_TELEMETRY_ENABLED", action = ArgAction::Set)]
    pub default_telemetry_enabled: Option<bool>,
    /// OTLP endpoint for components that do not set one.
    #[arg(long, env = "DEFAULT_TELEMETRY_ENDPOINT")]
    pub default_telemetry_endpoint: Option<String>,
    /// Log level of the pods (`TRACE`, `DEBUG`, `INFO`, `WARNING`, `ERROR`).
    #[arg(long, env = "DEFAULT_LOG_LEVEL")]
    pub default_log_level: Option<String>,
    /// Security of the generated pods: `restricted` (the Pod Security Standard) or `baseline`
    /// (no security context, for images that need root or a writable root filesystem).
    #[arg(long, env = "POD_SECURITY", value_enum, default_value_t)]
    pub pod_security: PodSecurity,
    /// NetworkPolicies from the dependency graph (`docs/network-policy.md`).
    #[command(flatten)]
    pub network_policy: NetworkPolicyArgs,
}
