//! One budgeted agent's usage as the collector keeps it between rounds: the day window's counts,
//! the lifetime totals, the cost period's spend and what the last round saw (refusals, growth).
//! A new leader (or a restarted controller) resumes the day window and the lifetime from the
//! usage the status reports, so a restart does not zero them.

use kaos_api::budget::{BudgetUsage, UsageTotals};

use crate::usage::counters::Counters;
use crate::usage::window::{DayWindow, period_end, seconds, time};

/// Counts of tokens, requests and spend.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Tally {
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub total_tokens: i64,
    pub requests: i64,
    /// US dollars.
    pub cost: f64,
}

impl Tally {
    fn add(&mut self, added: &Counters) {
        self.prompt_tokens += whole(added.prompt_tokens);
        self.completion_tokens += whole(added.completion_tokens);
        self.total_tokens += whole(added.total_tokens);
        self.requests += whole(added.requests);
        self.cost += added.spend;
    }
}

/// A counter's value as a count (LiteLLM's are floats).
fn whole(value: f64) -> i64 {
    value.round() as i64
}

/// The spend since the cost period began.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Period {
    pub start: i64,
    pub cost: f64,
}

/// What the last round added.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Round {
    pub added: Counters,
    /// Seconds since the round before (0 for the first).
    pub seconds: i64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Ledger {
    pub window: DayWindow,
    pub day: Tally,
    /// Since the agent's first usage the operator counted (tokens, requests and cost only).
    pub lifetime: Tally,
    pub period: Option<Period>,
    pub round: Round,
    /// When the last round ran.
    pub at: Option<i64>,
}

impl Ledger {
    /// The ledger of an agent whose status reports `reported`: the day counts carried when the
    /// report is of `window`, the lifetime totals always.
    pub fn resume(reported: Option<&BudgetUsage>, window: DayWindow) -> Self {
        let mut ledger = Ledger {
            window,
            day: Tally::default(),
            lifetime: Tally::default(),
            period: None,
            round: Round::default(),
            at: None,
        };
        let Some(reported) = reported else {
            return ledger;
        };
        if reported.window_start.as_ref().map(seconds) == Some(window.start) {
            ledger.day = Tally {
                prompt_tokens: reported.prompt_tokens,
                completion_tokens: reported.completion_tokens,
                total_tokens: reported.total_tokens,
                requests: reported.requests,
                cost: dollars_of(reported.cost.as_deref()),
            };
        }
        if let Some(lifetime) = &reported.lifetime {
            ledger.lifetime = Tally {
                total_tokens: lifetime.total_tokens,
                requests: lifetime.requests,
                cost: dollars_of(lifetime.cost.as_deref()),
                ..Tally::default()
            };
        }
        ledger
    }

    /// Starts a round at `now`, in the day window `window`: a new window counts from zero, and a
    /// cost period of `period` that has passed ends.
    pub fn start_round(&mut self, now: i64, window: DayWindow, period: Option<&str>) {
        if window != self.window {
            self.window = window;
            self.day = Tally::default();
        }
        if let (Some(running), Some(period)) = (self.period, period)
            && period_end(running.start, period).is_none_or(|end| now >= end)
        {
            self.period = None;
        }
        self.round = Round {
            added: Counters::default(),
            seconds: self.at.map_or(0, |at| (now - at).max(0)),
        };
        self.at = Some(now);
    }

    /// Adds what a pod's counters grew by in this round.
    pub fn add(&mut self, added: &Counters, now: i64) {
        self.day.add(added);
        self.lifetime.add(added);
        if added.spend > 0.0 {
            let period = self.period.get_or_insert(Period {
                start: now,
                cost: 0.0,
            });
            period.cost += added.spend;
        }
        let round = &mut self.round.added;
        round.prompt_tokens += added.prompt_tokens;
        round.completion_tokens += added.completion_tokens;
        round.total_tokens += added.total_tokens;
        round.requests += added.requests;
        round.spend += added.spend;
        round.rate_limited += added.rate_limited;
        round.spend_refused += added.spend_refused;
    }

    /// Adds what is new to the lifetime but may belong to an earlier day window (see
    /// [`crate::usage::counters::FirstReading::LifetimeOnly`]).
    pub fn add_to_lifetime(&mut self, added: &Counters) {
        self.lifetime.add(added);
    }

    /// The usage the status reports, the proxy's counters read last at `observed`.
    pub fn usage(&self, observed: Option<i64>) -> BudgetUsage {
        BudgetUsage {
            window_start: Some(time(self.window.start)),
            window_reset: Some(time(self.window.reset)),
            prompt_tokens: self.day.prompt_tokens,
            completion_tokens: self.day.completion_tokens,
            total_tokens: self.day.total_tokens,
            requests: self.day.requests,
            cost: Some(dollars(self.day.cost)),
            lifetime: Some(UsageTotals {
                total_tokens: self.lifetime.total_tokens,
                requests: self.lifetime.requests,
                cost: Some(dollars(self.lifetime.cost)),
            }),
            observed_time: observed.map(time),
        }
    }
}

/// US dollars as the status writes them: up to six decimals, no trailing zeros (`"0.00225"`,
/// `"0"`, `"12.5"`).
pub fn dollars(value: f64) -> String {
    let text = format!("{:.6}", value.max(0.0));
    let text = text.trim_end_matches('0').trim_end_matches('.');
    text.to_string()
}

/// A dollar amount the status wrote (0 when absent or unreadable).
fn dollars_of(text: Option<&str>) -> f64 {
    text.and_then(|t| t.parse().ok())
        .filter(|v: &f64| v.is_finite())
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: DayWindow = DayWindow {
        start: 1_000 * 86_400,
        reset: 1_001 * 86_400,
    };

    fn call() -> Counters {
        Counters {
            prompt_tokens: 100.0,
            completion_tokens: 50.0,
            total_tokens: 150.0,
            requests: 1.0,
            spend: 0.00075,
            ..Counters::default()
        }
    }

    #[test]
    fn the_day_and_the_lifetime_count_and_a_new_window_starts_from_zero() {
        let mut ledger = Ledger::resume(None, WINDOW);
        let now = WINDOW.start + 60;
        ledger.start_round(now, WINDOW, Some("1d"));
        ledger.add(&call(), now);
        ledger.add(&call(), now);
        let usage = ledger.usage(Some(now));
        assert_eq!(
            (
                usage.prompt_tokens,
                usage.completion_tokens,
                usage.total_tokens,
                usage.requests
            ),
            (200, 100, 300, 2)
        );
        assert_eq!(usage.cost.as_deref(), Some("0.0015"));
        assert_eq!(usage.window_reset, Some(time(WINDOW.reset)));
        assert_eq!(ledger.round.added.requests, 2.0);

        let tomorrow = DayWindow {
            start: WINDOW.reset,
            reset: WINDOW.reset + 86_400,
        };
        ledger.start_round(WINDOW.reset + 5, tomorrow, Some("1d"));
        assert_eq!(ledger.round.seconds, WINDOW.reset + 5 - now);
        assert_eq!(
            ledger.round.added,
            Counters::default(),
            "a round starts empty"
        );
        let usage = ledger.usage(Some(WINDOW.reset + 5));
        assert_eq!((usage.total_tokens, usage.cost.as_deref()), (0, Some("0")));
        let lifetime = usage.lifetime.expect("lifetime");
        assert_eq!(
            (
                lifetime.total_tokens,
                lifetime.requests,
                lifetime.cost.as_deref()
            ),
            (300, 2, Some("0.0015"))
        );
    }

    #[test]
    fn a_restart_resumes_the_same_window_and_the_lifetime() {
        let mut ledger = Ledger::resume(None, WINDOW);
        ledger.start_round(WINDOW.start + 1, WINDOW, None);
        ledger.add(&call(), WINDOW.start + 1);
        let reported = ledger.usage(Some(WINDOW.start + 1));
        assert_eq!(Ledger::resume(Some(&reported), WINDOW).day, ledger.day);
        assert_eq!(
            Ledger::resume(Some(&reported), WINDOW)
                .lifetime
                .total_tokens,
            150
        );
        // Reported in yesterday's window: today starts from zero, the lifetime goes on.
        let later = DayWindow {
            start: WINDOW.reset,
            reset: WINDOW.reset + 86_400,
        };
        let resumed = Ledger::resume(Some(&reported), later);
        assert_eq!(resumed.day, Tally::default());
        assert_eq!(resumed.lifetime.requests, 1);
        assert!((resumed.lifetime.cost - 0.00075).abs() < 1e-12);
    }

    #[test]
    fn the_cost_period_starts_with_the_first_spend_and_ends_after_its_length() {
        let mut ledger = Ledger::resume(None, WINDOW);
        let t0 = WINDOW.start + 10;
        ledger.start_round(t0, WINDOW, Some("1h"));
        assert_eq!(ledger.period, None);
        ledger.add(&call(), t0);
        ledger.start_round(t0 + 3599, WINDOW, Some("1h"));
        ledger.add(&call(), t0 + 3599);
        assert_eq!(
            ledger.period.map(|p| (p.start, (p.cost * 1e5).round())),
            Some((t0, 150.0))
        );
        ledger.start_round(t0 + 3600, WINDOW, Some("1h"));
        assert_eq!(ledger.period, None, "the hour has passed");
    }

    #[test]
    fn dollars_have_six_decimals_at_most() {
        assert_eq!(dollars(0.0022500000000000003), "0.00225");
        assert_eq!(dollars(0.0), "0");
        assert_eq!(dollars(12.5), "12.5");
        assert_eq!(dollars(3.0), "3");
        assert_eq!(dollars(0.0000004), "0");
        assert_eq!(dollars_of(Some("0.00225")), 0.00225);
        assert_eq!(dollars_of(Some("oops")), 0.0);
    }
}
