//! What a budgeted agent's status shows of its usage, and when a new one is written: a change of
//! a condition, or a new day window, at once; new counts at most once per status interval; the
//! same usage and conditions never (a round that read the same counts writes nothing).

use std::time::Duration;

use kaos_api::budget::BudgetUsage;

use crate::usage::verdict::Verdict;

/// The usage and the two conditions a budgeted agent's status shows.
#[derive(Clone, Debug, PartialEq)]
pub struct Published {
    pub usage: BudgetUsage,
    pub budget_exceeded: Verdict,
    pub usage_reported: Verdict,
}

impl Published {
    fn conditions_differ(&self, other: &Published) -> bool {
        self.budget_exceeded != other.budget_exceeded || self.usage_reported != other.usage_reported
    }

    fn window_differs(&self, other: &Published) -> bool {
        self.usage.window_start != other.usage.window_start
    }

    /// Whether the counts differ (not the time they were read at).
    fn counts_differ(&self, other: &Published) -> bool {
        let counts = |p: &Published| BudgetUsage {
            observed_time: None,
            ..p.usage.clone()
        };
        counts(self) != counts(other)
    }
}

/// Whether `candidate` is to be written now, `shown` being what the status shows, written
/// `since` ago, and `interval` the least time between two writes of new counts.
pub fn due(
    shown: Option<&Published>,
    candidate: &Published,
    since: Duration,
    interval: Duration,
) -> bool {
    let Some(shown) = shown else {
        return true;
    };
    candidate.conditions_differ(shown)
        || candidate.window_differs(shown)
        || (candidate.counts_differ(shown) && since >= interval)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::usage::verdict::{budget_exceeded, usage_reported};
    use crate::usage::window::time;
    use kaos_api::budget::Budget;
    use kaos_workload::conditions::ConditionStatus;

    fn published(tokens: i64, observed: i64, failure: Option<&str>) -> Published {
        let mut ledger = crate::usage::ledger::Ledger::resume(
            None,
            crate::usage::window::DayWindow {
                start: 0,
                reset: 86_400,
            },
        );
        ledger.day.total_tokens = tokens;
        Published {
            usage: BudgetUsage {
                total_tokens: tokens,
                observed_time: Some(time(observed)),
                ..ledger.usage(Some(observed))
            },
            budget_exceeded: budget_exceeded(
                &Budget {
                    tokens_per_day: Some(1000),
                    ..Budget::default()
                },
                &ledger,
                "llm",
            ),
            usage_reported: usage_reported(failure, "llm"),
        }
    }

    const FIVE_MINUTES: Duration = Duration::from_secs(300);

    #[test]
    fn new_counts_wait_for_the_interval_conditions_do_not() {
        let shown = published(100, 0, None);
        let (soon, later) = (Duration::from_secs(60), FIVE_MINUTES);
        assert!(due(None, &shown, soon, FIVE_MINUTES), "nothing shown yet");
        // The same counts read again: never, however long ago.
        assert!(!due(
            Some(&shown),
            &published(100, 60, None),
            later,
            FIVE_MINUTES
        ));
        // New counts: once the interval has passed.
        assert!(!due(
            Some(&shown),
            &published(400, 60, None),
            soon,
            FIVE_MINUTES
        ));
        assert!(due(
            Some(&shown),
            &published(400, 300, None),
            later,
            FIVE_MINUTES
        ));
        // A condition that changes: at once.
        let exceeded = published(1200, 60, None);
        assert_eq!(exceeded.budget_exceeded.status, ConditionStatus::True);
        assert!(due(Some(&shown), &exceeded, soon, FIVE_MINUTES));
        assert!(due(
            Some(&shown),
            &published(100, 60, Some("refused")),
            soon,
            FIVE_MINUTES
        ));
        // A new day window: at once.
        let mut tomorrow = published(0, 86_400, None);
        tomorrow.usage.window_start = Some(time(86_400));
        assert!(due(Some(&shown), &tomorrow, soon, FIVE_MINUTES));
    }
}
