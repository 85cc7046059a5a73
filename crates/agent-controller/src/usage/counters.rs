//! What one proxy pod's counters say about each budgeted agent of its ModelAPI, and what they
//! added since the last reading of the same pod. The counters only grow while the process lives:
//! a reading lower than the last one, or a new process start time, is a restarted pod, whose new
//! value is all new.

use crate::usage::exposition::{Family, Sample};

/// One agent's counters in one pod (LiteLLM's are floats, tokens included).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Counters {
    pub prompt_tokens: f64,
    pub completion_tokens: f64,
    pub total_tokens: f64,
    pub requests: f64,
    /// US dollars.
    pub spend: f64,
    /// Calls refused for a rate limit (HTTP 429 with the agent's `model_id`).
    pub rate_limited: f64,
    /// Calls refused for the spend limit (no `model_id`, the agent's alias).
    pub spend_refused: f64,
}

impl Counters {
    /// The growth from `last` to `self`, each counter that went down (a restart) counted whole.
    pub fn since(&self, last: &Counters) -> Counters {
        let grown = |now: f64, before: f64| if now < before { now } else { now - before };
        Counters {
            prompt_tokens: grown(self.prompt_tokens, last.prompt_tokens),
            completion_tokens: grown(self.completion_tokens, last.completion_tokens),
            total_tokens: grown(self.total_tokens, last.total_tokens),
            requests: grown(self.requests, last.requests),
            spend: grown(self.spend, last.spend),
            rate_limited: grown(self.rate_limited, last.rate_limited),
            spend_refused: grown(self.spend_refused, last.spend_refused),
        }
    }

    pub fn is_zero(&self) -> bool {
        *self == Counters::default()
    }
}

/// Which budgeted agent a sample is about, by its `model_id` (the agent's UID) or, for a
/// refusal the router made before choosing an entry, its `requested_model` (the alias).
pub trait Agents {
    fn by_uid(&self, model_id: &str) -> Option<usize>;
    fn by_alias(&self, requested_model: &str) -> Option<usize>;
}

/// One pod's reading: its process start and each agent's counters (indexed as [`Agents`] numbers
/// them), summed over the series LiteLLM splits them into (client address, user agent, ...).
#[derive(Clone, Debug, PartialEq)]
pub struct PodReading {
    pub started: Option<f64>,
    pub agents: Vec<Counters>,
}

impl PodReading {
    pub fn new(agents: usize) -> Self {
        Self {
            started: None,
            agents: vec![Counters::default(); agents],
        }
    }

    /// Adds one sample, if it is about an agent of `agents`.
    pub fn add(&mut self, sample: &Sample<'_>, agents: &impl Agents) {
        if sample.family == Family::ProcessStart {
            self.started = Some(sample.value);
            return;
        }
        let agent = match sample.family {
            Family::Failed if sample.model_id.is_empty() => agents.by_alias(sample.requested_model),
            _ => agents.by_uid(sample.model_id),
        };
        let Some(counters) = agent.and_then(|i| self.agents.get_mut(i)) else {
            return;
        };
        let value = sample.value;
        match sample.family {
            Family::PromptTokens => counters.prompt_tokens += value,
            Family::CompletionTokens => counters.completion_tokens += value,
            Family::TotalTokens => counters.total_tokens += value,
            Family::Requests => counters.requests += value,
            Family::Spend => counters.spend += value,
            // A rate limit's refusal names the entry; the budget's names only the alias.
            Family::Failed if !sample.model_id.is_empty() && sample.exception_status == "429" => {
                counters.rate_limited += value
            }
            Family::Failed
                if sample.model_id.is_empty() && sample.exception_class == "ValueError" =>
            {
                counters.spend_refused += value
            }
            Family::Failed | Family::ProcessStart => {}
        }
    }
}

/// How the first reading of a pod counts for an agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FirstReading {
    /// All of it is new: the day window's and the lifetime's.
    Whole,
    /// New to the lifetime, but some may be from an earlier day window: the window keeps none.
    LifetimeOnly,
    /// Maybe counted already: only the base the next readings are compared with.
    Base,
}

/// How the first reading of a pod counts for an agent whose status reported usage read at
/// `reported` (Unix seconds), the pod's process having started at `pod_started`, in the day
/// window that started at `window_start`, the agent created at `created`. A pod started after the
/// report counted nothing the report has. Without a report nothing of the agent was counted, and
/// what the pod counted is the window's when the pod or the agent began in the window.
pub fn first_reading(
    reported: Option<i64>,
    pod_started: Option<f64>,
    window_start: i64,
    created: Option<i64>,
) -> FirstReading {
    let started_after = |t: i64| pod_started.is_some_and(|s| s >= t as f64);
    match reported {
        Some(reported) if started_after(reported + 1) => FirstReading::Whole,
        Some(_) => FirstReading::Base,
        None if started_after(window_start) || created.is_some_and(|c| c >= window_start) => {
            FirstReading::Whole
        }
        None => FirstReading::LifetimeOnly,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::usage::exposition::sample;

    struct Two;

    impl Agents for Two {
        fn by_uid(&self, model_id: &str) -> Option<usize> {
            ["uid-worker", "uid-spender"]
                .iter()
                .position(|u| *u == model_id)
        }
        fn by_alias(&self, alias: &str) -> Option<usize> {
            ["kaos.demo.worker", "kaos.demo.spender"]
                .iter()
                .position(|a| *a == alias)
        }
    }

    fn read(text: &str) -> PodReading {
        let mut reading = PodReading::new(2);
        for line in text.lines() {
            if let Some(s) = sample(line) {
                reading.add(&s, &Two);
            }
        }
        reading
    }

    #[test]
    fn a_pod_reading_of_the_real_output_sums_each_agents_series() {
        let reading = read(include_str!(
            "../../tests/fixtures/litellm-1.110.2-metrics.txt"
        ));
        assert!(reading.started.is_some());
        let worker = reading.agents[0];
        assert_eq!(
            (
                worker.prompt_tokens,
                worker.completion_tokens,
                worker.total_tokens,
                worker.requests,
                worker.rate_limited,
                worker.spend_refused
            ),
            (300.0, 150.0, 450.0, 3.0, 2.0, 0.0)
        );
        let spender = reading.agents[1];
        assert_eq!((spender.requests, spender.spend_refused), (3.0, 1.0));
        assert!((spender.spend - 0.00225).abs() < 1e-12);
        // The series of one agent are summed whatever their other labels (two agent pods).
        let two_clients = read(
            "litellm_total_tokens_metric_total{client_ip=\"10.0.0.1\",model_id=\"uid-worker\"} 150.0\n\
             litellm_total_tokens_metric_total{client_ip=\"10.0.0.2\",model_id=\"uid-worker\"} 300.0\n\
             litellm_total_tokens_metric_total{model_id=\"uid-other\"} 900.0\n",
        );
        assert_eq!(two_clients.agents[0].total_tokens, 450.0);
        assert_eq!(two_clients.agents[1], Counters::default());
    }

    fn tokens(total: f64) -> Counters {
        Counters {
            total_tokens: total,
            requests: total / 150.0,
            ..Counters::default()
        }
    }

    #[test]
    fn growth_since_the_last_reading_and_a_restart_counted_whole() {
        let last = tokens(450.0);
        assert_eq!(tokens(600.0).since(&last), tokens(150.0));
        assert_eq!(tokens(450.0).since(&last), tokens(0.0));
        // Lower than before: the pod restarted, its new count is all new.
        assert_eq!(tokens(150.0).since(&last), tokens(150.0));
    }

    #[test]
    fn a_first_reading_counts_whole_only_when_nothing_of_it_can_have_been_counted() {
        let window = 1_000;
        // A report read at 500: a pod started later counted nothing of it; an older one may have.
        assert_eq!(
            first_reading(Some(500), Some(600.0), window, None),
            FirstReading::Whole
        );
        assert_eq!(
            first_reading(Some(500), Some(400.0), window, None),
            FirstReading::Base
        );
        assert_eq!(
            first_reading(Some(500), None, window, None),
            FirstReading::Base
        );
        // Nothing reported: new to the lifetime; to the window when the pod or the agent is.
        assert_eq!(
            first_reading(None, Some(1_200.0), window, None),
            FirstReading::Whole
        );
        assert_eq!(
            first_reading(None, Some(10.0), window, Some(1_100)),
            FirstReading::Whole
        );
        assert_eq!(
            first_reading(None, Some(10.0), window, Some(900)),
            FirstReading::LifetimeOnly
        );
        assert_eq!(
            first_reading(None, None, window, None),
            FirstReading::LifetimeOnly
        );
    }
}
