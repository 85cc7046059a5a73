//! The conditions of a budgeted agent, from its budget and its ledger: `BudgetExceeded` (True
//! with the limit reached as its reason, Unknown when a cost limit cannot be judged, else False)
//! and `UsageReported`. Their messages carry limits and times, never the counts, which change
//! every round: a condition that changes is written at once, the counts are rate-limited.

use kaos_api::budget::Budget;
use kaos_api::conditions::{
    BUDGET_EXCEEDED, COST, PRICE_UNKNOWN, REQUESTS_PER_DAY, REQUESTS_PER_MINUTE, SCRAPE_FAILED,
    SCRAPED, TOKENS_PER_DAY, TOKENS_PER_MINUTE, USAGE_REPORTED, WITHIN_BUDGET,
};
use kaos_workload::conditions::ConditionStatus;

use crate::usage::ledger::Ledger;
use crate::usage::window::time;

/// A condition as the collector decides it.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    pub type_: &'static str,
    pub status: ConditionStatus,
    pub reason: &'static str,
    pub message: String,
}

/// `BudgetExceeded` of an agent of ModelAPI `model_api`. The day limits are judged from the
/// day window's counts; the cost limit from the cost period's spend or a refusal for it in the
/// last round; the minute limits from refusals (HTTP 429) in the last round, the usage of which
/// says which limit when both are set.
pub fn budget_exceeded(budget: &Budget, ledger: &Ledger, model_api: &str) -> Verdict {
    let reached = |reason, message: String| Verdict {
        type_: BUDGET_EXCEEDED,
        status: ConditionStatus::True,
        reason,
        message,
    };
    let resets = time(ledger.window.reset).0;
    let refused_until_reset = format!(
        "the proxy refuses the agent's model calls (HTTP 429) until the day window resets at {resets}"
    );
    if let Some(limit) = budget.tokens_per_day
        && ledger.day.total_tokens >= limit
    {
        return reached(
            TOKENS_PER_DAY,
            format!("the tokensPerDay limit ({limit}) is reached: {refused_until_reset}"),
        );
    }
    if let Some(limit) = budget.requests_per_day
        && ledger.day.requests >= limit
    {
        return reached(
            REQUESTS_PER_DAY,
            format!("the requestsPerDay limit ({limit}) is reached: {refused_until_reset}"),
        );
    }
    let round = &ledger.round.added;
    if let Some(cost) = &budget.cost {
        let limit: f64 = cost.limit.parse().unwrap_or(f64::INFINITY);
        let spent = ledger.period.map_or(0.0, |p| p.cost);
        if round.spend_refused > 0.0 || spent >= limit {
            return reached(
                COST,
                format!(
                    "the cost limit (${} per {}) is reached: the proxy refuses the agent's model calls (HTTP 429) until the period, which began with its first spend, has passed",
                    cost.limit,
                    cost.period()
                ),
            );
        }
    }
    if round.rate_limited > 0.0 {
        let minutes = ledger.round.seconds.max(60) as f64 / 60.0;
        let minute = match (budget.tokens_per_minute, budget.requests_per_minute) {
            (Some(tokens), None) => Some((TOKENS_PER_MINUTE, "tokensPerMinute", tokens)),
            (None, Some(requests)) => Some((REQUESTS_PER_MINUTE, "requestsPerMinute", requests)),
            // Both: the one the last round's usage came closer to.
            (Some(tokens), Some(requests)) => {
                let of_tokens = round.total_tokens / minutes / tokens as f64;
                let of_requests = round.requests / minutes / requests as f64;
                Some(if of_tokens >= of_requests {
                    (TOKENS_PER_MINUTE, "tokensPerMinute", tokens)
                } else {
                    (REQUESTS_PER_MINUTE, "requestsPerMinute", requests)
                })
            }
            // Refused by the provider, not for a limit of the budget.
            (None, None) => None,
        };
        if let Some((reason, field, limit)) = minute {
            return reached(
                reason,
                format!(
                    "the proxy refused the agent's model calls (HTTP 429) in the last interval for its {field} limit ({limit}); they pass again from the next UTC minute"
                ),
            );
        }
    }
    if budget.cost.is_some() && ledger.lifetime.requests > 0 && ledger.lifetime.cost <= 0.0 {
        return Verdict {
            type_: BUDGET_EXCEEDED,
            status: ConditionStatus::Unknown,
            reason: PRICE_UNKNOWN,
            message: format!(
                "the agent has a cost limit but its model calls cost 0: LiteLLM has no price for its model, so the limit can never be reached; set spec.proxyConfig.prices on ModelAPI {model_api}"
            ),
        };
    }
    Verdict {
        type_: BUDGET_EXCEEDED,
        status: ConditionStatus::False,
        reason: WITHIN_BUDGET,
        message: "no limit of the budget is reached".into(),
    }
}

/// `UsageReported`: read from every ready pod of the ModelAPI's proxy, or why not.
pub fn usage_reported(failure: Option<&str>, model_api: &str) -> Verdict {
    match failure {
        None => Verdict {
            type_: USAGE_REPORTED,
            status: ConditionStatus::True,
            reason: SCRAPED,
            message: format!("the usage is read from the LiteLLM proxy of ModelAPI {model_api}"),
        },
        Some(why) => Verdict {
            type_: USAGE_REPORTED,
            status: ConditionStatus::False,
            reason: SCRAPE_FAILED,
            message: why.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::usage::counters::Counters;
    use crate::usage::window::DayWindow;
    use kaos_api::budget::CostLimit;

    const WINDOW: DayWindow = DayWindow {
        start: 20_000 * 86_400,
        reset: 20_001 * 86_400,
    };

    fn ledger(added: Counters, seconds: i64) -> Ledger {
        let mut ledger = Ledger::resume(None, WINDOW);
        let now = WINDOW.start + 100;
        ledger.start_round(now - seconds, WINDOW, Some("1d"));
        ledger.start_round(now, WINDOW, Some("1d"));
        ledger.add(&added, now);
        ledger
    }

    fn used(tokens: f64, requests: f64, spend: f64) -> Counters {
        Counters {
            total_tokens: tokens,
            requests,
            spend,
            ..Counters::default()
        }
    }

    fn verdict(budget: &Budget, ledger: &Ledger) -> (ConditionStatus, &'static str, String) {
        let v = budget_exceeded(budget, ledger, "llm");
        (v.status, v.reason, v.message)
    }

    #[test]
    fn day_limits_are_reached_at_their_count() {
        let budget = Budget {
            tokens_per_day: Some(400),
            requests_per_day: Some(10),
            ..Budget::default()
        };
        let (status, reason, _) = verdict(&budget, &ledger(used(300.0, 2.0, 0.0), 60));
        assert_eq!((status, reason), (ConditionStatus::False, WITHIN_BUDGET));
        let (status, reason, message) = verdict(&budget, &ledger(used(450.0, 3.0, 0.0), 60));
        assert_eq!((status, reason), (ConditionStatus::True, TOKENS_PER_DAY));
        assert_eq!(
            message,
            "the tokensPerDay limit (400) is reached: the proxy refuses the agent's model calls (HTTP 429) until the day window resets at 2024-10-05T00:00:00Z"
        );
        let (_, reason, _) = verdict(&budget, &ledger(used(150.0, 10.0, 0.0), 60));
        assert_eq!(reason, REQUESTS_PER_DAY);
    }

    #[test]
    fn the_cost_limit_by_the_periods_spend_or_a_refusal_and_an_unknown_price() {
        let budget = Budget {
            cost: Some(CostLimit {
                limit: "0.002".into(),
                period: None,
            }),
            ..Budget::default()
        };
        let (_, reason, message) = verdict(&budget, &ledger(used(450.0, 3.0, 0.00225), 60));
        assert_eq!(reason, COST);
        assert!(
            message.starts_with("the cost limit ($0.002 per 1d) is reached"),
            "{message}"
        );
        // Refused for spend while the period's spend is unknown here (a restarted controller).
        let refused = Counters {
            spend_refused: 1.0,
            ..Counters::default()
        };
        assert_eq!(verdict(&budget, &ledger(refused, 60)).1, COST);
        // Calls made and nothing spent: the model has no price.
        let (status, reason, message) = verdict(&budget, &ledger(used(450.0, 3.0, 0.0), 60));
        assert_eq!((status, reason), (ConditionStatus::Unknown, PRICE_UNKNOWN));
        assert!(
            message.ends_with("set spec.proxyConfig.prices on ModelAPI llm"),
            "{message}"
        );
        assert_eq!(
            verdict(&budget, &ledger(used(0.0, 0.0, 0.0), 60)).1,
            WITHIN_BUDGET,
            "no call yet"
        );
    }

    #[test]
    fn minute_limits_from_refusals_in_the_last_round() {
        let refused = |tokens, requests| Counters {
            rate_limited: 2.0,
            ..used(tokens, requests, 0.0)
        };
        let tokens = Budget {
            tokens_per_minute: Some(1000),
            ..Budget::default()
        };
        assert_eq!(
            verdict(&tokens, &ledger(refused(1000.0, 2.0), 60)).1,
            TOKENS_PER_MINUTE
        );
        let requests = Budget {
            requests_per_minute: Some(2),
            ..Budget::default()
        };
        let (_, reason, message) = verdict(&requests, &ledger(refused(300.0, 2.0), 60));
        assert_eq!(reason, REQUESTS_PER_MINUTE);
        assert!(
            message.contains("its requestsPerMinute limit (2)"),
            "{message}"
        );
        // Both set: the one the round's usage came closer to (2 requests of 2, 300 tokens of 1000).
        let both = Budget {
            tokens_per_minute: Some(1000),
            requests_per_minute: Some(2),
            ..Budget::default()
        };
        assert_eq!(
            verdict(&both, &ledger(refused(300.0, 2.0), 60)).1,
            REQUESTS_PER_MINUTE
        );
        assert_eq!(
            verdict(&both, &ledger(refused(1200.0, 1.0), 60)).1,
            TOKENS_PER_MINUTE
        );
        // No minute limit: a provider's 429, not the budget's.
        let day = Budget {
            tokens_per_day: Some(10_000),
            ..Budget::default()
        };
        assert_eq!(
            verdict(&day, &ledger(refused(300.0, 2.0), 60)).1,
            WITHIN_BUDGET
        );
        // Without a refusal in the last round, a minute limit is not reached.
        assert_eq!(
            verdict(&tokens, &ledger(used(5000.0, 5.0, 0.0), 60)).1,
            WITHIN_BUDGET
        );
    }

    #[test]
    fn usage_reported_says_where_it_failed() {
        let ok = usage_reported(None, "llm");
        assert_eq!((ok.status, ok.reason), (ConditionStatus::True, SCRAPED));
        let failed = usage_reported(Some("10.0.0.7:8000 refused"), "llm");
        assert_eq!(
            (failed.status, failed.reason, failed.message.as_str()),
            (
                ConditionStatus::False,
                SCRAPE_FAILED,
                "10.0.0.7:8000 refused"
            )
        );
    }
}
