//! Status conditions (`metav1.Condition`) whose `lastTransitionTime` moves only when the status
//! flips, so rewriting the same conditions is a no-op.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// A condition's desired state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConditionUpdate<'a> {
    pub type_: &'a str,
    pub status: bool,
    /// CamelCase, machine-readable.
    pub reason: &'a str,
    pub message: String,
}

/// Sets a condition in `conditions`, keeping its `lastTransitionTime` unless the status flips.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    update: ConditionUpdate<'_>,
    generation: Option<i64>,
    now: Time,
) {
    let status = if update.status {
        ConditionStatus::True
    } else {
        ConditionStatus::False
    };
    let ConditionUpdate {
        type_,
        reason,
        message,
        ..
    } = update;
    set_condition_status(conditions, type_, status, reason, message, generation, now);
}

/// A condition's status, for the conditions that can also be `Unknown` (the rest take a bool:
/// [`ConditionUpdate`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

impl ConditionStatus {
    pub const fn as_str(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        }
    }
}

/// [`set_condition`] with any of the three statuses.
pub fn set_condition_status(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: ConditionStatus,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: Time,
) {
    let status = status.as_str();
    let existing = conditions.iter().position(|c| c.type_ == type_);
    let last_transition_time = match existing.map(|i| &conditions[i]) {
        Some(c) if c.status == status => c.last_transition_time.clone(),
        _ => now,
    };
    let condition = Condition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message,
        observed_generation: generation,
        last_transition_time,
    };
    match existing {
        Some(i) => conditions[i] = condition,
        None => conditions.push(condition),
    }
}

/// Removes a condition type (for conditions that only apply in some modes).
pub fn remove_condition(conditions: &mut Vec<Condition>, type_: &str) {
    conditions.retain(|c| c.type_ != type_);
}

/// The current time, truncated to seconds as Kubernetes stores condition times.
pub fn now() -> Time {
    let seconds = jiff::Timestamp::now().as_second();
    Time(jiff::Timestamp::from_second(seconds).unwrap_or_else(|_| jiff::Timestamp::now()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(second: i64) -> Time {
        Time(jiff::Timestamp::from_second(second).expect("valid"))
    }

    #[test]
    fn transition_time_moves_only_when_status_flips() {
        let mut conditions = Vec::new();
        let ready = |status, reason: &'static str| ConditionUpdate {
            type_: "Ready",
            status,
            reason,
            message: format!("{reason} message"),
        };
        set_condition(&mut conditions, ready(false, "Pending"), Some(1), at(100));
        assert_eq!(conditions[0].last_transition_time, at(100));
        set_condition(
            &mut conditions,
            ready(false, "StillPending"),
            Some(2),
            at(200),
        );
        assert_eq!(
            conditions[0].last_transition_time,
            at(100),
            "same status keeps the time"
        );
        assert_eq!(conditions[0].reason, "StillPending");
        assert_eq!(conditions[0].observed_generation, Some(2));
        set_condition(&mut conditions, ready(true, "Ready"), Some(2), at(300));
        assert_eq!(conditions[0].last_transition_time, at(300));
        assert_eq!(conditions[0].status, "True");
        set_condition(
            &mut conditions,
            ConditionUpdate {
                type_: "DependenciesReady",
                status: true,
                reason: "Resolved",
                message: String::new(),
            },
            Some(2),
            at(300),
        );
        assert_eq!(conditions.len(), 2);
        remove_condition(&mut conditions, "DependenciesReady");
        assert_eq!(conditions.len(), 1);
    }

    #[test]
    fn unknown_is_a_status_of_its_own() {
        let mut conditions = Vec::new();
        let set = |conditions: &mut Vec<Condition>, status, second| {
            set_condition_status(
                conditions,
                "Priced",
                status,
                "Why",
                String::new(),
                None,
                at(second),
            )
        };
        set(&mut conditions, ConditionStatus::False, 100);
        set(&mut conditions, ConditionStatus::Unknown, 200);
        assert_eq!(
            (
                conditions[0].status.as_str(),
                &conditions[0].last_transition_time
            ),
            ("Unknown", &at(200))
        );
        set(&mut conditions, ConditionStatus::Unknown, 300);
        assert_eq!(conditions[0].last_transition_time, at(200), "unchanged");
    }
}
