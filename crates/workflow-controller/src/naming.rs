//! The names the controller gives: a scheduled run's name, derived from its fire time so that
//! creating it twice (a restart, a new leader) finds the first one, and the label that ties a
//! run to its workflow.

use jiff::Timestamp;
use kaos_workload::hash::stable_hash;

/// The label every run of a workflow carries: the workflow's name, or a digest of it when the
/// name is too long for a label value (`kubectl get awfr -l kaos.tools/workflow=daily`).
pub const WORKFLOW_LABEL: &str = "kaos.tools/workflow";

/// The longest object name (a DNS subdomain).
const MAX_NAME: usize = 253;
/// The longest label value.
const MAX_LABEL_VALUE: usize = 63;

/// The name of the run the schedule starts at `fire_time`: `<workflow>-<unix minutes>`, the
/// workflow's name cut so that the whole fits in 253 characters.
pub fn scheduled_run_name(workflow: &str, fire_time: Timestamp) -> String {
    let suffix = format!("-{}", fire_time.as_second().div_euclid(60));
    let room = MAX_NAME.saturating_sub(suffix.len());
    format!("{}{suffix}", dns_prefix(workflow, room))
}

/// The value of [`WORKFLOW_LABEL`] for `workflow`: its name when it fits (a workflow name is a
/// DNS subdomain, which is a valid label value up to 63 characters), else its first characters
/// and a digest of the whole.
pub fn workflow_label_value(workflow: &str) -> String {
    if workflow.len() <= MAX_LABEL_VALUE {
        return workflow.to_string();
    }
    let digest = stable_hash(&workflow);
    let digest = &digest[..digest.len().min(16)];
    let room = MAX_LABEL_VALUE - digest.len() - 1;
    format!("{}-{digest}", dns_prefix(workflow, room))
}

/// At most `room` bytes of `name` (ASCII, as DNS names are), ending in a letter or digit.
fn dns_prefix(name: &str, room: usize) -> &str {
    let mut end = name.len().min(room);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    name[..end].trim_end_matches(|c: char| !c.is_ascii_alphanumeric())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scheduled_run_is_named_by_its_minute() {
        let at: Timestamp = "2025-06-01T10:05:00Z".parse().expect("an instant");
        assert_eq!(scheduled_run_name("daily", at), "daily-29146205");
        let long = format!("{}.{}", "a".repeat(243), "b".repeat(9));
        let name = scheduled_run_name(&long, at);
        assert_eq!(name.len(), 252);
        assert!(name.ends_with("aaa-29146205"), "no dangling dot: {name}");
    }

    #[test]
    fn a_long_workflow_name_is_labelled_by_a_digest() {
        assert_eq!(workflow_label_value("daily"), "daily");
        let long = "w".repeat(100);
        let value = workflow_label_value(&long);
        assert!(value.len() <= 63, "{value}");
        assert_ne!(value, workflow_label_value(&"w".repeat(101)));
        assert!(value.starts_with("www") && !value.ends_with('-'), "{value}");
    }
}
