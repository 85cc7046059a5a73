//! kaos-testkit: the pieces of an in-memory Kubernetes API server that kaos-rs tests rest on.
//!
//! Today it holds the custom-resource admission the API server applies to every write:
//! pruning of unknown fields, defaulting, structural validation and CEL
//! `x-kubernetes-validations` (see [`schema`]). See `docs/testkit.md` for what it covers.

pub mod schema;
