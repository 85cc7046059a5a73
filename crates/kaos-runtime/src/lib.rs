//! The life of a kaos-rs controller process, whatever it reconciles: leader election on a Lease,
//! the admin server (`/healthz`, `/readyz`, `/metrics` with controller-runtime's metric names,
//! optionally over TLS behind TokenReview/SubjectAccessReview), the API client, settings,
//! logging, events, the error backoff and the uninstall hook. It knows no kaos.tools kind: the
//! reconcile skeleton and the workload builders live in `kaos-workload`.

pub mod admin;
pub mod backoff;
pub mod binary;
pub mod client;
pub mod error;
pub mod events;
pub mod leader;
pub mod logging;
pub mod metric_families;
pub mod metrics;
pub mod metrics_auth;
pub mod metrics_tls;
pub mod process;
pub mod runner;
pub mod settings;
pub mod uninstall;
pub mod workqueue;

pub use runner::{ControllerId, Runtime, run};
pub use settings::RuntimeArgs;
