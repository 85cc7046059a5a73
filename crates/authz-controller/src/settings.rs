//! The authz-controller's flags and environment: the shared ones only.

/// The binary's flags: every controller process's only.
pub type Args = kaos_runtime::binary::Args<kaos_runtime::binary::NoSettings>;
