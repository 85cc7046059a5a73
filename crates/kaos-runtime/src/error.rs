//! The error of a reconcile: which step failed, on which object, and the API's answer. The step
//! is the category that logs, the Warning event's reason and the error metric's label share.

use std::fmt;

/// The step of a reconcile that can fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    AddFinalizer,
    RemoveFinalizer,
    ReadChild,
    ApplyChild,
    DeleteOrphan,
    PatchStatus,
}

impl Step {
    pub const ALL: [Step; 6] = [
        Step::AddFinalizer,
        Step::RemoveFinalizer,
        Step::ReadChild,
        Step::ApplyChild,
        Step::DeleteOrphan,
        Step::PatchStatus,
    ];

    /// The metric label and log field, e.g. `apply_child`.
    pub fn metric_label(self) -> &'static str {
        match self {
            Step::AddFinalizer => "add_finalizer",
            Step::RemoveFinalizer => "remove_finalizer",
            Step::ReadChild => "read_child",
            Step::ApplyChild => "apply_child",
            Step::DeleteOrphan => "delete_orphan",
            Step::PatchStatus => "patch_status",
        }
    }

    /// The reason of the Warning event, e.g. `ApplyChildFailed`.
    pub fn event_reason(self) -> &'static str {
        match self {
            Step::AddFinalizer => "AddFinalizerFailed",
            Step::RemoveFinalizer => "RemoveFinalizerFailed",
            Step::ReadChild => "ReadChildFailed",
            Step::ApplyChild => "ApplyChildFailed",
            Step::DeleteOrphan => "DeleteOrphanFailed",
            Step::PatchStatus => "PatchStatusFailed",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub struct ReconcileError {
    pub step: Step,
    /// The object the step wrote, e.g. `Deployment agent-a`.
    pub target: String,
    #[source]
    pub source: kube::Error,
}

impl fmt::Display for ReconcileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.step.metric_label(),
            self.target,
            self.source
        )
    }
}

impl ReconcileError {
    pub fn new(step: Step, target: impl Into<String>, source: kube::Error) -> Self {
        Self {
            step,
            target: target.into(),
            source,
        }
    }

    /// A write based on a cache that had not caught up (409, or a failed JSON-patch test): the
    /// retry reads the newer object, nothing to warn about.
    pub fn is_conflict(&self) -> bool {
        match &self.source {
            kube::Error::Api(status) => {
                status.is_conflict()
                    || (status.is_invalid()
                        && matches!(self.step, Step::AddFinalizer | Step::RemoveFinalizer))
            }
            _ => false,
        }
    }

    /// The namespace is being deleted: creating in it is refused until it is gone.
    pub fn is_namespace_terminating(&self) -> bool {
        matches!(&self.source, kube::Error::Api(s) if s.is_forbidden()
            && s.message.contains("being terminated"))
    }
}

/// Tags a kube call's error with the step and target.
pub trait StepExt<T> {
    fn step(self, step: Step, target: impl FnOnce() -> String) -> Result<T, ReconcileError>;
}

impl<T> StepExt<T> for Result<T, kube::Error> {
    fn step(self, step: Step, target: impl FnOnce() -> String) -> Result<T, ReconcileError> {
        self.map_err(|e| ReconcileError::new(step, target(), e))
    }
}
