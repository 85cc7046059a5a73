//! Budgets: the limits an Agent declares on what it may use of its ModelAPI (tokens, requests,
//! cost), enforced by the LiteLLM proxy of a Proxy ModelAPI, and the usage reported back in the
//! Agent's status. docs/budgets.md is the design.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The most tokens a day or a minute limit may name (a trillion: beyond any real quota, small
/// enough for LiteLLM's integer arithmetic).
pub const MAX_TOKENS: i64 = 1_000_000_000_000;
/// The most requests a day or a minute limit may name.
pub const MAX_REQUESTS: i64 = 1_000_000_000;
/// A cost in US dollars: up to a million, with up to six decimals (LiteLLM prices tokens in
/// millionths of a dollar and less; a limit needs no finer).
pub const USD_PATTERN: &str = r"^(0|[1-9][0-9]{0,5})(\.[0-9]{1,6})?$";
/// A time of day in UTC, `HH:MM`, as LiteLLM's `daily_reset_time` accepts it.
pub const TIME_OF_DAY_PATTERN: &str = r"^([01][0-9]|2[0-3]):[0-5][0-9]$";
/// A LiteLLM `budget_duration`: a count and a unit (seconds, minutes, hours, days, months).
pub const PERIOD_PATTERN: &str = r"^[1-9][0-9]{0,3}(s|m|h|d|mo)$";

/// An agent's limits at its ModelAPI. Every limit is optional; at least one must be set. The
/// day windows start at `dailyResetTime` (UTC midnight by default); the minute windows are the
/// UTC minute. A request refused for a limit gets HTTP 429 from the proxy.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "has(self.tokensPerDay) || has(self.requestsPerDay) || has(self.tokensPerMinute) || has(self.requestsPerMinute) || has(self.cost)",
        "message": "a budget sets at least one of tokensPerDay, requestsPerDay, tokensPerMinute, requestsPerMinute or cost"
    },
    {
        "rule": "!has(self.dailyResetTime) || self.dailyResetTime == '00:00' || !has(self.tokensPerDay)",
        "message": "dailyResetTime other than 00:00 cannot be combined with tokensPerDay: LiteLLM 1.110.2 does not enforce a tokens-per-day limit until a later reset time of the day (docs/budgets.md); use 00:00 or a requestsPerDay limit",
        "fieldPath": ".dailyResetTime"
    },
    {
        "rule": "!has(self.onExceeded) || self.onExceeded != 'Suspend'",
        "message": "onExceeded: Suspend needs agents that scale to zero, which this version does not have yet; use Reject (the proxy refuses the agent's model calls until the window resets)",
        "fieldPath": ".onExceeded"
    }
]))]
pub struct Budget {
    /// Tokens (prompt and completion) per day window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_TOKENS))]
    pub tokens_per_day: Option<i64>,
    /// Model requests per day window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_REQUESTS))]
    pub requests_per_day: Option<i64>,
    /// Tokens per UTC minute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_TOKENS))]
    pub tokens_per_minute: Option<i64>,
    /// Model requests per UTC minute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_REQUESTS))]
    pub requests_per_minute: Option<i64>,
    /// When the day windows start, `HH:MM` in UTC (default `00:00`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(TIME_OF_DAY_PATTERN))]
    pub daily_reset_time: Option<String>,
    /// A limit on spend, priced by LiteLLM's cost map (or the ModelAPI's `prices`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<CostLimit>,
    /// What happens once a limit is reached: `Reject` (default) refuses the agent's model calls
    /// with 429 until the window resets, the agent stays up. `Suspend` is reserved for agents
    /// that scale to zero and refused until then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_exceeded: Option<OnExceeded>,
}

/// A limit on spend over a period.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!self.limit.matches('^[0-9]+(\\\\.[0-9]+)?$') || double(self.limit) > 0.0",
    "message": "cost.limit must be more than 0",
    "fieldPath": ".limit"
}]))]
pub struct CostLimit {
    /// The most the agent may spend per period, in US dollars, e.g. `"5"` or `"0.25"`.
    #[schemars(length(min = 1, max = 16), pattern(USD_PATTERN))]
    pub limit: String,
    /// The period: a count and a unit, `s`, `m`, `h`, `d` or `mo` (default `1d`). It starts
    /// with the first spend and restarts when it has passed, as LiteLLM's `budget_duration`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(PERIOD_PATTERN))]
    pub period: Option<String>,
}

impl CostLimit {
    pub fn period(&self) -> &str {
        self.period.as_deref().unwrap_or("1d")
    }
}

/// What happens once a limit is reached.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum OnExceeded {
    /// The proxy refuses the agent's model calls (429) until the window resets.
    #[default]
    Reject,
    /// Scale the agent to zero until the window resets (needs scale to zero: refused for now).
    Suspend,
}

impl Budget {
    /// The day window's reset time, `HH:MM` UTC.
    pub fn daily_reset_time(&self) -> &str {
        self.daily_reset_time.as_deref().unwrap_or("00:00")
    }
}

/// What an agent has used of its ModelAPI, as its ModelAPI's proxy counted it. Reported for
/// agents with a budget.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BudgetUsage {
    /// When the current day window started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_start: Option<Time>,
    /// When the current day window resets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_reset: Option<Time>,
    /// Prompt tokens in the current day window.
    #[serde(default)]
    pub prompt_tokens: i64,
    /// Completion tokens in the current day window.
    #[serde(default)]
    pub completion_tokens: i64,
    /// Tokens (prompt and completion) in the current day window.
    #[serde(default)]
    pub total_tokens: i64,
    /// Model requests answered in the current day window.
    #[serde(default)]
    pub requests: i64,
    /// Spend in the current day window, US dollars.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<String>,
    /// Totals since the agent's first request seen by this operator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifetime: Option<UsageTotals>,
    /// When the proxy's counters were last read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_time: Option<Time>,
}

/// Totals of tokens, requests and spend.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UsageTotals {
    #[serde(default)]
    pub total_tokens: i64,
    #[serde(default)]
    pub requests: i64,
    /// US dollars.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<String>,
}

/// The LiteLLM `model_list` alias of a budgeted agent: `kaos.<namespace>.<agent>`. Stable for the
/// agent's life (the counters are keyed on the entry's `model_info.id`, the Agent's UID).
pub fn alias(namespace: &str, agent: &str) -> String {
    format!("kaos.{namespace}.{agent}")
}

/// The `AGENT_IDENTITY` of a budgeted agent (sent as `x-actor` by the runtime): namespaced, so
/// two agents of one name in two namespaces are told apart.
pub fn identity(namespace: &str, agent: &str) -> String {
    format!("kaos://agent/{namespace}/{agent}")
}
