//! kaos-testkit: an in-memory Kubernetes API server for kaos-rs tests and the local sandbox.
//!
//! One core ([`Cluster`]: objects, resourceVersions, watch history and kube-apiserver's write
//! semantics) served by an axum router ([`ApiServer`]) that is a `tower::Service`, so it runs
//! in-process under `kube::Client::new(api.router(), "default")`, or over plain HTTP on loopback
//! ([`TestServer`]) for kubectl and separate processes. See `docs/testkit.md`.

mod apply;
pub mod auth;
pub mod cluster;
pub mod error;
pub mod faults;
mod gc_index;
pub mod http;
pub mod manifests;
mod meta;
mod patch;
pub mod ports;
mod rbac_server;
pub mod resources;
pub mod selectors;
pub mod server;
pub mod simulator;

pub use cluster::Cluster;
pub use http::ApiServer;
pub use ports::free_port;
pub use server::{ServeOptions, TestServer};
