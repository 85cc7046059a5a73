//! What a workflow's schedule asks for now, on data only: whether a fire time is due, and what
//! the concurrency policy makes of it given the runs still active. Only the latest missed fire
//! time counts (as a CronJob's); a fire time that is skipped is still recorded as the last one,
//! so it is not owed again on every reconcile.

use jiff::Timestamp;
use kaos_api::workflow::ConcurrencyPolicy;

use crate::schedule::cron::{Schedule, ScheduleError};

/// What to do about the fire time that is due.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FireAction {
    /// Start a run for it.
    Start,
    /// Delete these active runs (their tasks are canceled), then start a run.
    Replace { runs: Vec<String> },
    /// Start nothing, for this reason.
    Skip { reason: String },
}

/// A fire time that is due.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fire {
    pub time: Timestamp,
    /// More than `schedule::MAX_MISSED` fire times went by without a run.
    pub too_many_missed: bool,
    pub action: FireAction,
}

/// The schedule's view of now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleState {
    pub fire: Option<Fire>,
    /// The next fire time after now.
    pub next: Option<Timestamp>,
}

/// The workflow's situation, as far as the schedule goes.
#[derive(Debug, Clone, Copy)]
pub struct Situation<'a> {
    /// When the schedule last fired, else when the workflow was created.
    pub last: Timestamp,
    pub now: Timestamp,
    pub policy: ConcurrencyPolicy,
    /// The workflow's unfinished runs (the run of the due fire time itself left out).
    pub active: &'a [String],
    /// Why the workflow cannot run now (its `Ready` message), if it cannot.
    pub not_ready: Option<&'a str>,
}

pub fn evaluate(
    schedule: &Schedule,
    situation: Situation<'_>,
) -> Result<ScheduleState, ScheduleError> {
    let next = schedule.next_after(situation.now)?;
    let Some(due) = schedule.due(situation.last, situation.now)? else {
        return Ok(ScheduleState {
            fire: None,
            next: Some(next),
        });
    };
    let action = if let Some(problem) = situation.not_ready {
        FireAction::Skip {
            reason: format!("the workflow is not Ready: {problem}"),
        }
    } else if situation.active.is_empty() {
        FireAction::Start
    } else {
        match situation.policy {
            ConcurrencyPolicy::Allow => FireAction::Start,
            ConcurrencyPolicy::Forbid => FireAction::Skip {
                reason: format!(
                    "concurrencyPolicy is Forbid and {} still active",
                    runs_phrase(situation.active)
                ),
            },
            ConcurrencyPolicy::Replace => FireAction::Replace {
                runs: situation.active.to_vec(),
            },
        }
    };
    Ok(ScheduleState {
        fire: Some(Fire {
            time: due.time,
            too_many_missed: due.too_many_missed(),
            action,
        }),
        next: Some(next),
    })
}

/// "run a is" / "runs a, b are".
pub fn runs_phrase(runs: &[String]) -> String {
    let verb = if runs.len() == 1 { "is" } else { "are" };
    format!("{} {verb}", runs_named(runs))
}

/// "run a" / "runs a, b".
pub fn runs_named(runs: &[String]) -> String {
    match runs {
        [run] => format!("run {run}"),
        runs => format!("runs {}", runs.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(instant: &str) -> Timestamp {
        instant.parse().expect("an instant")
    }

    fn situation<'a>(policy: ConcurrencyPolicy, active: &'a [String], now: &str) -> Situation<'a> {
        Situation {
            last: at("2025-06-01T10:00:00Z"),
            now: at(now),
            policy,
            active,
            not_ready: None,
        }
    }

    #[test]
    fn nothing_is_due_between_fire_times() -> Result<(), ScheduleError> {
        let schedule = Schedule::parse("*/5 * * * *", None)?;
        let state = evaluate(
            &schedule,
            situation(ConcurrencyPolicy::Allow, &[], "2025-06-01T10:04:00Z"),
        )?;
        assert_eq!(state.fire, None);
        assert_eq!(state.next, Some(at("2025-06-01T10:05:00Z")));
        Ok(())
    }

    #[test]
    fn the_policy_decides_what_a_due_fire_does_with_active_runs() -> Result<(), ScheduleError> {
        let schedule = Schedule::parse("*/5 * * * *", None)?;
        let active = ["old".to_string()];
        let action = |policy| -> Result<FireAction, ScheduleError> {
            let state = evaluate(
                &schedule,
                situation(policy, &active, "2025-06-01T10:05:30Z"),
            )?;
            let fire = state.fire.expect("due");
            assert_eq!(fire.time, at("2025-06-01T10:05:00Z"));
            assert_eq!(state.next, Some(at("2025-06-01T10:10:00Z")));
            Ok(fire.action)
        };
        assert_eq!(action(ConcurrencyPolicy::Allow)?, FireAction::Start);
        assert_eq!(
            action(ConcurrencyPolicy::Forbid)?,
            FireAction::Skip {
                reason: "concurrencyPolicy is Forbid and run old is still active".into()
            }
        );
        assert_eq!(
            action(ConcurrencyPolicy::Replace)?,
            FireAction::Replace {
                runs: vec!["old".into()]
            }
        );
        let idle = evaluate(
            &schedule,
            situation(ConcurrencyPolicy::Forbid, &[], "2025-06-01T10:05:30Z"),
        )?;
        assert_eq!(idle.fire.map(|fire| fire.action), Some(FireAction::Start));
        Ok(())
    }

    #[test]
    fn a_workflow_that_cannot_run_skips_the_fire() -> Result<(), ScheduleError> {
        let schedule = Schedule::parse("*/5 * * * *", None)?;
        let mut situation = situation(ConcurrencyPolicy::Allow, &[], "2025-06-01T10:05:00Z");
        situation.not_ready = Some("Agent x not found");
        let fire = evaluate(&schedule, situation)?.fire.expect("due");
        assert_eq!(
            fire.action,
            FireAction::Skip {
                reason: "the workflow is not Ready: Agent x not found".into()
            }
        );
        Ok(())
    }
}
