//! Why a builder cannot turn a spec into children: the reason of the status condition and the
//! message telling the user what to fix. Every workload controller's `build` returns it, and its
//! status shows it (phase Failed) while the children already running are left as they are.

/// A spec the controller cannot turn into children: a condition reason and what to fix.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct BuildError {
    pub reason: &'static str,
    pub message: String,
}

impl BuildError {
    pub fn new(reason: &'static str, message: String) -> Self {
        Self { reason, message }
    }
}
