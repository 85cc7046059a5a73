//! What every kaos-rs controller process shares, so none of the three binaries writes it again:
//! leader election, the admin server, controller-runtime-compatible metrics, settings, logging,
//! and the reconcile skeleton: slim caches, relation indexes, change-only triggers, and one
//! converge path that writes only what changed.

pub mod admin;
pub mod backoff;
pub mod child_store;
pub mod children;
pub mod client;
pub mod compact;
pub mod conditions;
pub mod converge;
pub mod deployment_view;
pub mod drift;
pub mod error;
pub mod events;
pub mod expectations;
pub mod identity;
pub mod index;
pub mod leader;
pub mod logging;
pub mod meta_view;
pub mod metrics;
pub mod metrics_auth;
pub mod metrics_tls;
pub mod network_policy;
pub mod packed;
pub mod pod_security;
pub mod podspec;
pub mod process;
pub mod reconciler;
pub mod references;
pub mod relist;
pub mod rollout;
pub mod runner;
pub mod scaling;
pub mod settings;
pub mod stores;
pub mod triggers;
pub mod uninstall;
pub mod view;
pub mod workload;
pub mod workqueue;

pub use runner::{ControllerId, Runtime, run};
pub use settings::{DataPlaneArgs, GatewayArgs, RuntimeArgs};
