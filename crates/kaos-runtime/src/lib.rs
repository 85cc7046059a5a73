//! What every kaos-rs controller process shares, so none of the three binaries writes it again:
//! leader election, the admin server, controller-runtime-compatible metrics, settings, logging,
//! and the reconcile and pod-spec helpers.

pub mod backoff;
pub mod conditions;
pub mod leader;
pub mod metrics;
pub mod podspec;
pub mod process;
