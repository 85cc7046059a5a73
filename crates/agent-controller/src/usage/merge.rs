//! What one round's readings of a ModelAPI's proxy pods add to its budgeted agents: each pod's
//! growth since its last reading (a restart's count whole, a first reading as
//! [`first_reading`] says), the pods no longer listed forgotten, the conditions decided, and
//! what each agent's status is to show next (`publish::due`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kaos_api::budget::Budget;
use tokio::time::Instant;

use crate::cached::CachedAgent;
use crate::usage::book::Book;
use crate::usage::counters::{Agents, FirstReading, PodReading, first_reading};
use crate::usage::endpoints::{Pod, Pods};
use crate::usage::publish::{Published, due};
use crate::usage::verdict::{budget_exceeded, usage_reported};
use crate::usage::window::DayWindow;

/// A budgeted agent found in a round.
pub struct Budgeted {
    pub agent: Arc<CachedAgent>,
    pub uid: String,
    pub name: String,
    pub budget: Arc<Budget>,
}

/// The budgeted agents of one ModelAPI, and its pods (or why none can be read).
pub struct Group {
    pub source: usize,
    pub namespace: String,
    pub model_api: String,
    pub agents: Vec<Budgeted>,
    pub pods: Result<Pods, String>,
}

/// Adds one ModelAPI's readings to its agents' ledgers, at `now` (Unix seconds, and the clock's
/// instant); the agents whose status is to show something new.
pub fn merge(
    book: &Book,
    starts: &Mutex<HashMap<u64, f64>>,
    group: &Group,
    readings: &[(&Pod, Result<PodReading, String>)],
    (now, clock): (i64, Instant),
    interval: Duration,
) -> Vec<String> {
    let model_api = &group.model_api;
    let failure = match &group.pods {
        Err(why) => Some(why.clone()),
        Ok(pods) if pods.ready.is_empty() => Some(format!(
            "ModelAPI {model_api} has no ready pod to read the usage from (the EndpointSlices of Service modelapi-{model_api})"
        )),
        Ok(_) => readings.iter().find_map(|(pod, reading)| {
            let why = reading.as_ref().err()?;
            Some(format!(
                "could not read the usage of ModelAPI {model_api} from {}/metrics/: {why}",
                pod.describe()
            ))
        }),
    };
    // Each pod read, with whether its process restarted since it was read last.
    let read: Vec<(u64, &PodReading, bool)> = {
        let mut starts = lock(starts);
        readings
            .iter()
            .filter_map(|(pod, reading)| {
                let reading = reading.as_ref().ok()?;
                let key = pod.key();
                let restarted = match (reading.started, starts.get(&key)) {
                    (Some(now), Some(before)) => now != *before,
                    _ => false,
                };
                if let Some(started) = reading.started {
                    starts.insert(key, started);
                }
                Some((key, reading, restarted))
            })
            .collect()
    };
    let mut book = book.lock();
    let mut wake = Vec::new();
    for (i, agent) in group.agents.iter().enumerate() {
        let Some(entry) = book.get_mut(agent.uid.as_str()) else {
            continue;
        };
        let budget = agent.budget.clone();
        let window = DayWindow::containing(now, budget.daily_reset_time());
        let period = budget.cost.as_ref().map(|c| c.period());
        entry.ledger.start_round(now, window, period);
        for (key, reading, restarted) in &read {
            let Some(counters) = reading.agents.get(i) else {
                continue;
            };
            match entry.pods.iter_mut().find(|(k, _)| k == key) {
                Some((_, last)) => {
                    let added = if *restarted {
                        *counters
                    } else {
                        counters.since(last)
                    };
                    entry.ledger.add(&added, now);
                    *last = *counters;
                }
                None => {
                    match first_reading(
                        entry.reported,
                        reading.started,
                        window.start,
                        entry.created,
                    ) {
                        FirstReading::Whole => entry.ledger.add(counters, now),
                        FirstReading::LifetimeOnly => entry.ledger.add_to_lifetime(counters),
                        FirstReading::Base => {}
                    }
                    entry.pods.push((*key, *counters));
                }
            }
            entry.read_at = Some(now);
        }
        // A pod no longer listed is gone: so is its last reading.
        if let Ok(pods) = &group.pods {
            entry.pods.retain(|(key, _)| pods.listed.contains(key));
        }
        let candidate = Published {
            usage: entry.ledger.usage(entry.read_at),
            budget_exceeded: budget_exceeded(&budget, &entry.ledger, model_api),
            usage_reported: usage_reported(failure.as_deref(), model_api),
        };
        if due(
            entry.shown.as_deref(),
            &candidate,
            clock.saturating_duration_since(entry.shown_at),
            interval,
        ) {
            entry.shown = Some(Arc::new(candidate));
            entry.shown_at = clock;
            wake.push(agent.name.clone());
        }
    }
    wake
}

/// Which agent of a group a sample is about: by UID, or by the alias
/// `kaos.<namespace>.<name>` (`kaos_api::budget::alias`) for a refusal without one.
pub struct Lookup<'a> {
    alias_prefix: String,
    uids: HashMap<&'a str, usize>,
    names: HashMap<&'a str, usize>,
}

impl<'a> Lookup<'a> {
    pub fn of(group: &'a Group) -> Self {
        Lookup {
            alias_prefix: kaos_api::budget::alias(&group.namespace, ""),
            uids: group
                .agents
                .iter()
                .enumerate()
                .map(|(i, a)| (a.uid.as_str(), i))
                .collect(),
            names: group
                .agents
                .iter()
                .enumerate()
                .map(|(i, a)| (a.name.as_str(), i))
                .collect(),
        }
    }
}

impl Agents for Lookup<'_> {
    fn by_uid(&self, model_id: &str) -> Option<usize> {
        self.uids.get(model_id).copied()
    }

    fn by_alias(&self, requested_model: &str) -> Option<usize> {
        let name = requested_model.strip_prefix(self.alias_prefix.as_str())?;
        self.names.get(name).copied()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding it leaves plain data: still usable.
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::usage::book::Entry;
    use crate::usage::counters::Counters;
    use kaos_api::conditions::{SCRAPE_FAILED, SCRAPED, TOKENS_PER_DAY, WITHIN_BUDGET};
    use serde_json::json;

    const DAY_START: i64 = 20_000 * 86_400;
    const T0: i64 = DAY_START + 3_600;
    const FIVE_MINUTES: Duration = Duration::from_secs(300);

    fn group(listed: &[&Pod]) -> Group {
        let agent: CachedAgent = serde_json::from_value(json!({
            "apiVersion": "kaos.tools/v1alpha1", "kind": "Agent",
            "metadata": {"name": "worker", "namespace": "demo", "uid": "uid-worker",
                "creationTimestamp": "2024-10-03T00:59:50Z"},
            "spec": {"modelAPI": "llm", "model": "m", "budget": {"tokensPerDay": 400}}}))
        .expect("agent");
        let budget = agent.own_budget().expect("budget").budget.clone();
        Group {
            source: 0,
            namespace: "demo".into(),
            model_api: "llm".into(),
            agents: vec![Budgeted {
                agent: Arc::new(agent),
                uid: "uid-worker".into(),
                name: "worker".into(),
                budget,
            }],
            pods: Ok(Pods {
                ready: listed.iter().map(|p| (*p).clone()).collect(),
                listed: listed.iter().map(|p| p.key()).collect(),
            }),
        }
    }

    fn pod(address: &str) -> Pod {
        Pod {
            address: address.into(),
            name: None,
        }
    }

    fn reading(started: i64, tokens: f64, rate_limited: f64) -> Result<PodReading, String> {
        Ok(PodReading {
            started: Some(started as f64),
            agents: vec![Counters {
                total_tokens: tokens,
                requests: tokens / 150.0,
                rate_limited,
                ..Counters::default()
            }],
        })
    }

    /// What the status shows: total tokens, BudgetExceeded's and UsageReported's reasons.
    fn shown(book: &Book) -> (i64, &'static str, &'static str) {
        let shown = book.shown("uid-worker").expect("shown");
        (
            shown.usage.total_tokens,
            shown.budget_exceeded.reason,
            shown.usage_reported.reason,
        )
    }

    #[test]
    fn rounds_add_growth_count_restarts_forget_gone_pods_and_write_counts_at_most_every_interval() {
        let (a, b) = (pod("10.0.0.1:8000"), pod("10.0.0.2:8000"));
        let (book, starts) = (Book::default(), Mutex::default());
        let both = group(&[&a, &b]);
        let agent = &both.agents[0];
        let window = DayWindow::containing(T0, "00:00");
        book.lock().insert(
            "uid-worker".into(),
            Entry::new(&agent.agent, 0, "llm", agent.budget.clone(), window),
        );
        let start = book.lock()["uid-worker"].shown_at;
        // A round `at` seconds since T0, the clock as far on.
        let round = |group: &Group, readings: &[(&Pod, Result<PodReading, String>)], at: i64| {
            let clock = start + Duration::from_secs(at as u64);
            merge(
                &book,
                &starts,
                group,
                readings,
                (T0 + at, clock),
                FIVE_MINUTES,
            )
        };
        let only_a = group(&[&a]);

        // The first reading of a pod of a new agent counts whole, and is shown at once.
        let wake = round(&only_a, &[(&a, reading(T0 - 100, 150.0, 0.0))], 0);
        assert_eq!(wake, ["worker"]);
        assert_eq!(shown(&book), (150, WITHIN_BUDGET, SCRAPED));
        // Growth: counted, but new counts wait for the status interval.
        let wake = round(&only_a, &[(&a, reading(T0 - 100, 300.0, 0.0))], 60);
        assert!(wake.is_empty());
        assert_eq!(shown(&book).0, 150);
        // The limit reached: a condition that changes is shown at once, with the counts.
        let wake = round(&only_a, &[(&a, reading(T0 - 100, 450.0, 1.0))], 120);
        assert_eq!(wake, ["worker"]);
        assert_eq!(shown(&book), (450, TOKENS_PER_DAY, SCRAPED));
        // Pod a restarted (a new start time, its count lower): its count is new; pod b appears,
        // started in the window: its count is new too. Nothing to show before the interval.
        let readings = [
            (&a, reading(T0 + 170, 150.0, 0.0)),
            (&b, reading(T0 + 175, 150.0, 0.0)),
        ];
        assert!(round(&both, &readings, 180).is_empty());
        assert_eq!(
            book.lock()["uid-worker"].ledger.day.total_tokens,
            750,
            "450 + 150 + 150"
        );
        // Pod a is gone, pod b cannot be read: the failure is shown at once, and what a kept
        // of pod a is forgotten.
        let only_b = group(&[&b]);
        let wake = round(&only_b, &[(&b, Err("connection refused".to_string()))], 500);
        assert_eq!(wake, ["worker"]);
        let failed = book.shown("uid-worker").expect("shown");
        assert_eq!(
            (failed.usage.total_tokens, failed.usage_reported.reason),
            (750, SCRAPE_FAILED)
        );
        assert_eq!(
            failed.usage_reported.message,
            "could not read the usage of ModelAPI llm from 10.0.0.2:8000/metrics/: connection refused"
        );
        assert_eq!(book.lock()["uid-worker"].pods.len(), 1);
        // Read again: its growth since its last reading, shown with the recovered condition.
        let wake = round(&only_b, &[(&b, reading(T0 + 175, 300.0, 0.0))], 560);
        assert_eq!(wake, ["worker"]);
        assert_eq!(shown(&book), (900, TOKENS_PER_DAY, SCRAPED));
        // The same counts again, long after: nothing new to show.
        let wake = round(&only_b, &[(&b, reading(T0 + 175, 300.0, 0.0))], 1200);
        assert!(wake.is_empty());
    }

    #[test]
    fn a_round_finds_an_agent_by_uid_or_by_alias() {
        let group = group(&[]);
        let lookup = Lookup::of(&group);
        assert_eq!(lookup.by_uid("uid-worker"), Some(0));
        assert_eq!(lookup.by_uid("other"), None);
        assert_eq!(lookup.by_alias("kaos.demo.worker"), Some(0));
        assert_eq!(lookup.by_alias("kaos.other.worker"), None);
        assert_eq!(lookup.by_alias("gpt-4o"), None);
    }
}
