//! The collector's metrics, in the process's registry: per budgeted agent its day window's usage
//! and how much of each limit it used, encoded from the book when scraped (no copy per agent,
//! and an agent that leaves the book leaves `/metrics` with it); and the reads of the proxies.
//! Only the leader fills the book, so a standby exports no agent.

use kaos_runtime::metrics::{Metrics, starting_at_zero};
use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use crate::usage::book::{Book, Entry};

/// `result` of `kaos_usage_scrapes_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: String,
}

pub const SUCCESS: &str = "success";
pub const FAILURE: &str = "failure";

/// `kaos_usage_scrapes_total{result}`, and the per-agent families.
#[derive(Clone, Debug)]
pub struct UsageMetrics {
    scrapes: Family<ResultLabels, Counter>,
}

impl UsageMetrics {
    /// Registers the families in `metrics`, the per-agent ones read from `book`.
    pub fn register(metrics: &Metrics, book: &Book) -> Self {
        let scrapes = Family::default();
        metrics.register(
            "kaos_usage_scrapes",
            "Reads of a ModelAPI proxy pod's /metrics/ by the usage collector, by result (success, failure)",
            starting_at_zero(
                &scrapes,
                [SUCCESS, FAILURE].map(|r| ResultLabels { result: r.into() }),
            ),
        );
        for (name, help, gauge) in [
            (
                "kaos_agent_budget_used_ratio",
                "Share of each day or cost limit of a budgeted agent used (1 = reached), by namespace, agent and limit (tokensPerDay, requestsPerDay, cost)",
                Gauge::UsedRatio,
            ),
            (
                "kaos_agent_usage_tokens",
                "Tokens of a budgeted agent in its budget's current day window",
                Gauge::Tokens,
            ),
            (
                "kaos_agent_usage_requests",
                "Model requests of a budgeted agent in its budget's current day window",
                Gauge::Requests,
            ),
            (
                "kaos_agent_usage_cost_dollars",
                "Spend of a budgeted agent in its budget's current day window, US dollars",
                Gauge::CostDollars,
            ),
        ] {
            metrics.register(
                name,
                help,
                PerAgent {
                    book: book.clone(),
                    gauge,
                },
            );
        }
        Self { scrapes }
    }

    /// Counts one read of a proxy pod.
    pub fn scraped(&self, ok: bool) {
        let result = if ok { SUCCESS } else { FAILURE };
        self.scrapes
            .get_or_create(&ResultLabels {
                result: result.into(),
            })
            .inc();
    }
}

#[derive(Clone, Copy, Debug)]
enum Gauge {
    UsedRatio,
    Tokens,
    Requests,
    CostDollars,
}

/// A gauge with a series per agent of the book.
#[derive(Debug)]
struct PerAgent {
    book: Book,
    gauge: Gauge,
}

impl EncodeMetric for PerAgent {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let book = self.book.lock();
        for entry in book.values() {
            let agent = [("namespace", &*entry.namespace), ("agent", &*entry.name)];
            let day = &entry.ledger.day;
            match self.gauge {
                Gauge::Tokens => encoder
                    .encode_family(&agent)?
                    .encode_gauge(&day.total_tokens)?,
                Gauge::Requests => encoder.encode_family(&agent)?.encode_gauge(&day.requests)?,
                Gauge::CostDollars => encoder.encode_family(&agent)?.encode_gauge(&day.cost)?,
                Gauge::UsedRatio => {
                    for (limit, ratio) in used_ratios(entry) {
                        let labels = [agent[0], agent[1], ("limit", limit)];
                        encoder.encode_family(&labels)?.encode_gauge(&ratio)?;
                    }
                }
            }
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Gauge
    }
}

/// Usage over limit for each day or cost limit the budget sets. The cost limit's is the cost
/// period's spend, and at least 1 while the proxy refuses calls for it (a new leader does not
/// know the period's spend before).
pub fn used_ratios(entry: &Entry) -> Vec<(&'static str, f64)> {
    let (budget, ledger) = (&entry.budget, &entry.ledger);
    let mut ratios = Vec::new();
    if let Some(limit) = budget.tokens_per_day {
        ratios.push((
            "tokensPerDay",
            ledger.day.total_tokens as f64 / limit as f64,
        ));
    }
    if let Some(limit) = budget.requests_per_day {
        ratios.push(("requestsPerDay", ledger.day.requests as f64 / limit as f64));
    }
    if let Some(cost) = &budget.cost
        && let Ok(limit) = cost.limit.parse::<f64>()
        && limit > 0.0
    {
        let spent = ledger.period.map_or(0.0, |p| p.cost) / limit;
        let refused = ledger.round.added.spend_refused > 0.0;
        ratios.push(("cost", if refused { spent.max(1.0) } else { spent }));
    }
    ratios
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cached::CachedAgent;
    use crate::usage::counters::Counters;
    use crate::usage::window::DayWindow;
    use serde_json::json;

    #[test]
    fn each_budgeted_agent_is_exported_until_it_leaves_the_book() {
        let metrics = Metrics::new("agent", "kaos-agent-controller", "h", &[]);
        let book = Book::default();
        let usage = UsageMetrics::register(&metrics, &book);
        usage.scraped(true);
        let text = metrics.encode();
        assert!(
            text.contains("kaos_usage_scrapes_total{result=\"success\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("kaos_usage_scrapes_total{result=\"failure\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE kaos_agent_usage_tokens gauge"),
            "{text}"
        );
        assert!(!text.contains("kaos_agent_usage_tokens{"), "no agent yet");

        let agent: CachedAgent = serde_json::from_value(json!({
            "apiVersion": "kaos.tools/v1alpha1", "kind": "Agent",
            "metadata": {"name": "a", "namespace": "ns", "uid": "u1"},
            "spec": {"modelAPI": "llm", "model": "m", "budget": {"tokensPerDay": 400,
                "requestsPerDay": 10, "cost": {"limit": "0.002"}}}}))
        .expect("agent");
        let budget = agent.own_budget().expect("budget").budget.clone();
        let window = DayWindow::containing(0, "00:00");
        let mut entry = Entry::new(&agent, 0, "llm", budget, window);
        entry.ledger.start_round(60, window, Some("1d"));
        entry.ledger.add(
            &Counters {
                total_tokens: 300.0,
                requests: 2.0,
                spend: 0.001,
                ..Counters::default()
            },
            60,
        );
        book.lock().insert("u1".into(), entry);
        let text = metrics.encode();
        for line in [
            "kaos_agent_usage_tokens{namespace=\"ns\",agent=\"a\"} 300",
            "kaos_agent_usage_requests{namespace=\"ns\",agent=\"a\"} 2",
            "kaos_agent_usage_cost_dollars{namespace=\"ns\",agent=\"a\"} 0.001",
            "kaos_agent_budget_used_ratio{namespace=\"ns\",agent=\"a\",limit=\"tokensPerDay\"} 0.75",
            "kaos_agent_budget_used_ratio{namespace=\"ns\",agent=\"a\",limit=\"requestsPerDay\"} 0.2",
            "kaos_agent_budget_used_ratio{namespace=\"ns\",agent=\"a\",limit=\"cost\"} 0.5",
        ] {
            assert!(text.contains(line), "missing {line}:\n{text}");
        }
        book.lock().clear();
        assert!(
            !metrics.encode().contains("namespace=\"ns\""),
            "gone with the agent"
        );
    }
}
