//! The collector's book: per budgeted agent (by UID), its ledger, the last reading of each proxy
//! pod, and what its status shows. Shared with the reconciles, which read what to show from it,
//! and with `/metrics`, which exports it. Only the leader fills it; an agent that is deleted or
//! loses its budget leaves it at the next round.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kaos_api::budget::Budget;
use kaos_api::conditions::{
    COST, PRICE_UNKNOWN, REQUESTS_PER_DAY, REQUESTS_PER_MINUTE, SCRAPE_FAILED, SCRAPED,
    TOKENS_PER_DAY, TOKENS_PER_MINUTE, WITHIN_BUDGET,
};
use kaos_workload::conditions::ConditionStatus;
use tokio::time::Instant;

use crate::cached::CachedAgent;
use crate::conditions::{BUDGET_EXCEEDED, USAGE_REPORTED};
use crate::usage::counters::Counters;
use crate::usage::ledger::Ledger;
use crate::usage::publish::Published;
use crate::usage::verdict::Verdict;
use crate::usage::window::{DayWindow, seconds};

/// One budgeted agent.
#[derive(Debug)]
pub struct Entry {
    pub namespace: Box<str>,
    pub name: Box<str>,
    /// Which watched namespace's Controller reconciles it.
    pub source: usize,
    pub model_api: Box<str>,
    pub budget: Arc<Budget>,
    pub ledger: Ledger,
    /// When the usage its status reported when it entered the book was read (see
    /// [`crate::usage::counters::first_reading`]).
    pub reported: Option<i64>,
    pub created: Option<i64>,
    /// When a proxy pod was last read for it (the status's `observedTime`).
    pub read_at: Option<i64>,
    /// The last reading of each proxy pod (by its address's key).
    pub pods: Vec<(u64, Counters)>,
    /// What its status shows, and since when.
    pub shown: Option<Arc<Published>>,
    pub shown_at: Instant,
}

impl Entry {
    /// The entry of `agent`, budgeted with `budget` at `model_api`, resuming from its status.
    pub fn new(
        agent: &CachedAgent,
        source: usize,
        model_api: &str,
        budget: Arc<Budget>,
        window: DayWindow,
    ) -> Self {
        let meta = &agent.metadata.meta;
        let reported_usage = agent.reported_usage();
        let reported = reported_usage
            .and_then(|u| u.observed_time.as_ref())
            .map(seconds);
        Entry {
            namespace: meta.namespace.as_deref().unwrap_or_default().into(),
            name: meta.name.as_deref().unwrap_or_default().into(),
            source,
            model_api: model_api.into(),
            ledger: Ledger::resume(reported_usage, window),
            reported,
            read_at: reported,
            created: meta.creation_timestamp.as_ref().map(seconds),
            pods: Vec::new(),
            shown: shown(agent).map(Arc::new),
            shown_at: Instant::now(),
            budget,
        }
    }
}

/// What the status of `agent` shows, if it shows a usage and both its conditions.
fn shown(agent: &CachedAgent) -> Option<Published> {
    Some(Published {
        usage: agent.reported_usage()?.clone(),
        budget_exceeded: verdict(agent.kept_condition(BUDGET_EXCEEDED)?, BUDGET_EXCEEDED)?,
        usage_reported: verdict(agent.kept_condition(USAGE_REPORTED)?, USAGE_REPORTED)?,
    })
}

/// Every reason the usage conditions have.
const REASONS: [&str; 9] = [
    TOKENS_PER_DAY,
    REQUESTS_PER_DAY,
    TOKENS_PER_MINUTE,
    REQUESTS_PER_MINUTE,
    COST,
    WITHIN_BUDGET,
    PRICE_UNKNOWN,
    SCRAPED,
    SCRAPE_FAILED,
];

fn verdict(condition: &Condition, type_: &'static str) -> Option<Verdict> {
    let status = [
        ConditionStatus::True,
        ConditionStatus::False,
        ConditionStatus::Unknown,
    ]
    .into_iter()
    .find(|s| s.as_str() == condition.status)?;
    Some(Verdict {
        type_,
        status,
        reason: REASONS.iter().find(|r| **r == condition.reason)?,
        message: condition.message.clone(),
    })
}

/// The book, shared.
#[derive(Clone, Debug, Default)]
pub struct Book(Arc<Mutex<HashMap<Box<str>, Entry>>>);

impl Book {
    pub fn lock(&self) -> MutexGuard<'_, HashMap<Box<str>, Entry>> {
        // A panic while holding it leaves plain data: still usable.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What the status of the agent `uid` is to show, once the collector has decided it.
    pub fn shown(&self, uid: &str) -> Option<Arc<Published>> {
        self.lock().get(uid).and_then(|e| e.shown.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_new_entry_resumes_from_the_status_it_reported() {
        let agent: CachedAgent = serde_json::from_value(json!({
            "apiVersion": "kaos.tools/v1alpha1", "kind": "Agent",
            "metadata": {"name": "a", "namespace": "ns", "uid": "u1",
                "creationTimestamp": "2026-11-28T10:00:00Z"},
            "spec": {"modelAPI": "llm", "model": "m", "budget": {"tokensPerDay": 1000}},
            "status": {"usage": {"windowStart": "2026-11-29T00:00:00Z",
                    "windowReset": "2026-11-30T00:00:00Z", "promptTokens": 200,
                    "completionTokens": 100, "totalTokens": 300, "requests": 2, "cost": "0.0015",
                    "lifetime": {"totalTokens": 900, "requests": 6, "cost": "0.0045"},
                    "observedTime": "2026-11-29T12:00:00Z"},
                "conditions": [
                    {"type": "BudgetExceeded", "status": "False", "reason": "WithinBudget",
                        "message": "no limit of the budget is reached",
                        "lastTransitionTime": "2026-11-29T00:00:00Z"},
                    {"type": "UsageReported", "status": "True", "reason": "Scraped",
                        "message": "read", "lastTransitionTime": "2026-11-29T00:00:00Z"}]}}))
        .expect("agent");
        let budget = agent.own_budget().expect("own budget").budget.clone();
        let today = DayWindow::containing(
            "2026-11-29T13:00:00Z"
                .parse::<jiff::Timestamp>()
                .expect("time")
                .as_second(),
            "00:00",
        );
        let entry = Entry::new(&agent, 0, "llm", budget, today);
        assert_eq!((&*entry.namespace, &*entry.name), ("ns", "a"));
        assert_eq!(entry.ledger.day.total_tokens, 300);
        assert_eq!(entry.ledger.lifetime.requests, 6);
        assert!(entry.reported.is_some() && entry.created.is_some());
        let shown = entry.shown.expect("shown");
        assert_eq!(shown.usage, *agent.reported_usage().expect("usage"));
        assert_eq!(
            (shown.budget_exceeded.status, shown.budget_exceeded.reason),
            (ConditionStatus::False, WITHIN_BUDGET)
        );
        assert_eq!(shown.usage_reported.reason, SCRAPED);
    }
}
