//! The results of a run and their markdown tables.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::Duration;

use serde_json::{Value, json};

use crate::workload::{Floor, Topology};

/// Whether something finished within the run's timeout.
#[derive(Clone, Debug)]
pub enum Outcome {
    Done(Duration),
    /// Not finished after `after`; `progress` says how far it got (e.g. `95/102 Ready`).
    TimedOut {
        progress: String,
        after: Duration,
    },
}

impl Outcome {
    pub fn done(&self) -> Option<Duration> {
        match self {
            Outcome::Done(d) => Some(*d),
            Outcome::TimedOut { .. } => None,
        }
    }

    /// `{"done": true, "seconds": s}` or `{"done": false, "progress": …, "after_seconds": s}`.
    fn to_json(&self) -> Value {
        match self {
            Outcome::Done(d) => json!({"done": true, "seconds": d.as_secs_f64()}),
            Outcome::TimedOut { progress, after } => json!({
                "done": false,
                "progress": progress,
                "after_seconds": after.as_secs_f64(),
            }),
        }
    }
}

/// A number as JSON has it: an infinite one (a `+Inf` histogram bucket) as the string `"+Inf"`,
/// NaN (no sample) as null.
fn number(x: f64) -> Value {
    if x.is_finite() {
        json!(x)
    } else if x.is_nan() {
        Value::Null
    } else if x > 0.0 {
        json!("+Inf")
    } else {
        json!("-Inf")
    }
}

/// The ModelAPI change (Proxy to Hosted) and what it caused.
pub struct Change {
    /// All agent Deployments carry the new `MODEL_API_URL`.
    pub outcome: Outcome,
    /// From the patch to the last agent Deployment write (audit times).
    pub last_write: Option<Duration>,
    /// Agent Deployment writes from the patch until 5 s after the last Deployment moved; None
    /// without an audit log.
    pub deployment_writes: Option<usize>,
    /// Increase of the agent Deployments' generations: the rollouts.
    pub rollouts: i64,
}

pub struct ControllerStats {
    /// Requests by verb until Ready, per resource it reconciles.
    pub requests: BTreeMap<String, f64>,
    pub latency: (f64, f64),
    /// (peak, at end) resident MiB.
    pub memory: (f64, f64),
    pub cpu: f64,
}

pub struct Report {
    pub topology: Topology,
    pub agents: usize,
    /// All resources Ready and every agent Deployment wired to its peers.
    pub converge: Outcome,
    pub floor: Floor,
    /// The agent controller's reconciles until Ready (or the timeout).
    pub reconciles: f64,
    /// The agent controller's writes until Ready, by `resource[/subresource]`; None without an
    /// audit log.
    pub writes: Option<BTreeMap<String, usize>>,
    /// The agent controller's writes until Ready from its own metrics (POST, PATCH, DELETE).
    pub metric_writes: f64,
    /// Sum of the agent Deployments' generations when Ready.
    pub rollouts: i64,
    pub idle_reconciles: f64,
    /// Writes in the idle window (Leases excluded), by `resource[/subresource]`, or by HTTP
    /// method without an audit log.
    pub idle_writes: BTreeMap<String, usize>,
    pub rss_baseline_kib: f64,
    pub rss_end_kib: f64,
    pub cached_objects: usize,
    pub change: Change,
    pub controllers: BTreeMap<String, ControllerStats>,
}

impl Report {
    /// Every figure of the run, raw (seconds, counts, KiB, MiB), as the results file keeps it:
    /// what the tables print, before rounding and division, so the tables can be made again
    /// from it (scripts/bench-report.py).
    pub fn to_json(&self) -> Value {
        let controllers: serde_json::Map<String, Value> = self
            .controllers
            .iter()
            .map(|(binary, stats)| {
                (
                    binary.clone(),
                    json!({
                        "requests_per_resource": stats.requests,
                        "reconcile_seconds_p50": number(stats.latency.0),
                        "reconcile_seconds_p99": number(stats.latency.1),
                        "peak_rss_mib": number(stats.memory.0),
                        "end_rss_mib": number(stats.memory.1),
                        "cpu_seconds": number(stats.cpu),
                    }),
                )
            })
            .collect();
        json!({
            "topology": self.topology.name(),
            "agents": self.agents,
            "converge": self.converge.to_json(),
            "floor_seconds": self.floor.total.as_secs_f64(),
            "minimal_floor_seconds": self.floor.minimal.as_secs_f64(),
            "reconciles": self.reconciles,
            "writes": self.writes,
            "metric_writes": self.metric_writes,
            "rollouts": self.rollouts,
            "idle_reconciles": self.idle_reconciles,
            "idle_writes": self.idle_writes,
            "rss_baseline_kib": self.rss_baseline_kib,
            "rss_end_kib": self.rss_end_kib,
            "cached_objects": self.cached_objects,
            "change": {
                "outcome": self.change.outcome.to_json(),
                "last_write_seconds": self.change.last_write.map(|d| d.as_secs_f64()),
                "deployment_writes": self.change.deployment_writes,
                "rollouts": self.change.rollouts,
            },
            "controllers": controllers,
        })
    }
}

fn seconds(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

fn ratio(a: Duration, floor: Duration) -> String {
    format!("{:.1}×", a.as_secs_f64() / floor.as_secs_f64().max(0.001))
}

/// A time as the tables show it: itself, its ratio to the floor and to the minimal floor.
fn against_floors(d: Duration, floor: &Floor) -> (String, String, String) {
    (seconds(d), ratio(d, floor.total), ratio(d, floor.minimal))
}

/// What the tables show instead of a time and its ratios for what did not finish in time.
fn not_converged(progress: &str, after: Duration) -> (String, String, String) {
    (
        format!(
            "not converged: {progress} after {:.0} s",
            after.as_secs_f64()
        ),
        "–".into(),
        "–".into(),
    )
}

impl Report {
    fn per_agent(&self, n: f64) -> String {
        format!("{:.2}", n / self.agents as f64)
    }

    /// Writes per agent by kind, or "n/a" and the total from the controller's metrics.
    fn agent_writes(&self) -> String {
        let Some(writes) = &self.writes else {
            return format!("n/a¹ (all: {})", self.per_agent(self.metric_writes));
        };
        let of = |target: &str| self.per_agent(writes.get(target).copied().unwrap_or(0) as f64);
        [
            "deployments",
            "services",
            "agents/status",
            "agents",
            "events",
        ]
        .map(of)
        .join(", ")
    }

    fn deployment_writes(&self) -> String {
        match &self.writes {
            Some(writes) => writes.get("deployments").copied().unwrap_or(0).to_string(),
            None => "n/a¹".into(),
        }
    }
}

pub fn markdown(reports: &[Report], idle: u64) -> String {
    let mut out = String::new();
    out.push_str(
        "| topology | agents | time to Ready | floor | ratio | minimal floor | ratio to it | reconciles / agent | writes / agent: Deployment, Service, Agent status, Agent, Events | Deployment writes / rollouts |\n\
         |---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in reports {
        let (time, ratio_text, minimal_ratio) = match &r.converge {
            Outcome::Done(d) => against_floors(*d, &r.floor),
            Outcome::TimedOut { progress, after } => not_converged(progress, *after),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {time} | {} | {ratio_text} | {} | {minimal_ratio} | {} | {} | {} / {} |",
            r.topology.name(),
            r.agents,
            seconds(r.floor.total),
            seconds(r.floor.minimal),
            r.per_agent(r.reconciles),
            r.agent_writes(),
            r.deployment_writes(),
            r.rollouts,
        );
    }
    let _ = write!(
        out,
        "\n| topology | agents | idle {idle} s: reconciles | idle {idle} s: writes | agent controller RSS / cached object | ModelAPI change: Deployment writes / rollouts | change: patch to last Deployment write | change / floor | change / minimal floor |\n\
         |---|---|---|---|---|---|---|---|---|\n"
    );
    for r in reports {
        let idle_writes: usize = r.idle_writes.values().sum();
        let idle_detail = if idle_writes == 0 {
            "0".to_string()
        } else {
            let by: Vec<String> = r
                .idle_writes
                .iter()
                .map(|(t, n)| format!("{t} {n}"))
                .collect();
            format!("{idle_writes} ({})", by.join(", "))
        };
        let per_object = (r.rss_end_kib - r.rss_baseline_kib) / (r.cached_objects.max(1) as f64);
        let change = &r.change;
        let (time, ratio_text, minimal_ratio) = match (&change.outcome, change.last_write) {
            (Outcome::Done(_), Some(t)) => against_floors(t, &r.floor),
            (Outcome::Done(moved), None) if change.deployment_writes.is_none() => (
                format!("n/a¹ (all moved {})", seconds(*moved)),
                format!("{}²", ratio(*moved, r.floor.total)),
                format!("{}²", ratio(*moved, r.floor.minimal)),
            ),
            (Outcome::Done(_), None) => ("no Deployment write".into(), "–".into(), "–".into()),
            (Outcome::TimedOut { progress, after }, _) => not_converged(progress, *after),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {:.0} | {idle_detail} | {per_object:.1} KiB ({:.1} → {:.1} MiB, {} objects) | {} / {} | {time} | {ratio_text} | {minimal_ratio} |",
            r.topology.name(),
            r.agents,
            r.idle_reconciles,
            r.rss_baseline_kib / 1024.0,
            r.rss_end_kib / 1024.0,
            r.cached_objects,
            change
                .deployment_writes
                .map_or("n/a¹".to_string(), |n| n.to_string()),
            change.rollouts,
        );
    }
    out.push_str(
        "\n| topology | agents | controller | requests by verb until Ready (per resource) | reconcile p50 / p99 | peak RSS / RSS at end | CPU |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for r in reports {
        for (binary, stats) in &r.controllers {
            let per: Vec<String> = stats
                .requests
                .iter()
                .map(|(verb, n)| format!("{verb} {n:.2}"))
                .collect();
            let _ = writeln!(
                out,
                "| {} | {} | {binary} | {} | ≤ {} s / ≤ {} s | {:.0} MiB / {:.0} MiB | {:.1} s |",
                r.topology.name(),
                r.agents,
                per.join(", "),
                stats.latency.0,
                stats.latency.1,
                stats.memory.0,
                stats.memory.1,
                stats.cpu,
            );
        }
    }
    if reports.iter().any(|r| r.writes.is_none()) {
        out.push_str(
            "\n¹ Not measured on this cluster: writes by kind and times of writes come from kaos-testkit's audit log. \
             Instead, from the controllers' own `rest_client_requests_total`: \"all\" is the agent controller's POST, PATCH and DELETE \
             per agent until Ready (every kind; PUT is left out: the controllers PUT only to renew their Lease), \
             idle writes are every controller's POST, PATCH and DELETE in the window, and requests are by HTTP method (GET = get, list and watch).\n\
             ² From the patch until every agent Deployment carried the new `MODEL_API_URL` (watched), not to the last write.\n",
        );
    }
    out
}
