//! KAOS's policy projection: AccessGrants and the Agents' data written into the policy
//! ConfigMap KAOS's PDP (OPA) mounts, in KAOS's format, with kaos-rs's `policy.rego` (the same
//! decisions as KAOS's; `data.kaos.authz.result`). `data`, `selector`, `configmap` and
//! `agent_view` are pure; `projector` and `jwks` do the IO.

pub mod agent_view;
pub mod configmap;
pub mod data;
pub mod jwks;
pub mod projector;
pub mod selector;
