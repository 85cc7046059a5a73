//! What converging did: the writes, the children whose name another object holds, and the
//! references the pods make to objects that do not exist.

use std::fmt;

use crate::converge::references::Missing;

use super::ChildKind;

/// A child's name is taken by an object this parent does not control.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    pub kind: ChildKind,
    pub namespace: String,
    pub name: String,
    /// `Kind/name` of its controller, if it has one.
    pub owner: Option<String>,
}

impl fmt::Display for Conflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let owner = match &self.owner {
            Some(owner) => format!("it is controlled by {owner}"),
            None => "it has no controller".to_string(),
        };
        write!(
            f,
            "{} {}/{} already exists and is not owned by this resource ({owner}); \
             delete or rename it and the resource recovers by itself",
            self.kind.as_str(),
            self.namespace,
            self.name
        )
    }
}

/// The `Ready` reason of a parent whose child name is taken by an object it does not own.
pub const CHILD_CONFLICT: &str = "ChildConflict";

/// What converging did.
#[derive(Clone, Debug, Default)]
pub struct Converged {
    /// A line per write, for the Normal event.
    pub changes: Vec<String>,
    pub conflicts: Vec<Conflict>,
    /// Secrets and ConfigMaps (or keys) the Deployment's pods read that do not exist: the
    /// Deployment is written all the same (its pods start once they appear).
    pub missing: Vec<Missing>,
}

impl Converged {
    /// For the status: `(ChildConflict, message)` when a child could not be written, else the
    /// first missing reference's reason (`SecretNotFound`, …) and every one's message.
    pub fn problem(&self) -> Option<(&'static str, String)> {
        if !self.conflicts.is_empty() {
            let messages: Vec<String> = self.conflicts.iter().map(|c| c.to_string()).collect();
            return Some((CHILD_CONFLICT, messages.join("; ")));
        }
        let first = self.missing.first()?;
        let messages: Vec<String> = self.missing.iter().map(|m| m.to_string()).collect();
        Some((first.reason(), messages.join("; ")))
    }
}
