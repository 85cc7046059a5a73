//! Prometheus metrics with controller-runtime's names, labels and buckets, so the dashboards
//! operator users already have work; every family exists from startup.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Metric, Registry};

pub use crate::metric_families::{Buckets, starting_at_zero};

use crate::process::ProcessCollector;
use crate::workqueue::{Ticket, WorkQueue};

/// controller-runtime's reconcile-time buckets (seconds).
pub const RECONCILE_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0,
];

/// Outcomes of a reconcile, as controller-runtime labels them.
pub const RESULTS: &[&str] = &["success", "error", "requeue", "requeue_after"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    pub controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub controller: String,
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StepLabels {
    pub controller: String,
    pub step: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NameLabels {
    pub name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub code: String,
    pub method: String,
    pub host: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabels {
    pub kind: String,
    pub phase: String,
}

/// The metrics of one controller process.
pub struct Metrics {
    controller: String,
    registry: Registry,
    reconcile_total: Family<ResultLabels, Counter>,
    reconcile_errors: Family<ControllerLabels, Counter>,
    reconcile_errors_by_step: Family<StepLabels, Counter>,
    reconcile_time: Family<ControllerLabels, Histogram, Buckets>,
    max_concurrent: Family<ControllerLabels, Gauge>,
    active_workers: Family<ControllerLabels, Gauge>,
    leader_status: Family<NameLabels, Gauge>,
    rest_requests: Family<RequestLabels, Counter>,
    resources: Family<ResourceLabels, Gauge>,
    /// Kinds and phases of `kaos_resources`.
    kinds: Vec<(String, Vec<String>)>,
    /// Whether this process leads, as far as `kaos_resources` goes: only the leader exports
    /// them, so a sum over replicas counts each resource once. Held while the family changes.
    resources_leading: Mutex<bool>,
    /// `resources_leading` as it changes, sent after the change: a phase tracker that counts on
    /// this signal finds the family open to its counts (see `track_phases`).
    leading_exported: tokio::sync::watch::Sender<bool>,
    /// controller-runtime's `workqueue_*` families.
    pub workqueue: Arc<WorkQueue>,
    /// The families a controller adds of its own (see [`Metrics::register`]).
    extra: Arc<ExtraFamilies>,
}

/// A controller's own families, encoded with the process's on every scrape: the registry is
/// built before the controller starts, so they join it through this collector.
#[derive(Debug, Default)]
struct ExtraFamilies(Mutex<Vec<ExtraFamily>>);

#[derive(Debug)]
struct ExtraFamily {
    name: String,
    help: String,
    metric: Box<dyn Metric>,
}

impl Collector for ExtraFamilies {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let families = self.0.lock().unwrap_or_else(|e| e.into_inner());
        for family in families.iter() {
            let metric = encoder.encode_descriptor(
                &family.name,
                &family.help,
                None,
                family.metric.metric_type(),
            )?;
            family.metric.encode(metric)?;
        }
        Ok(())
    }
}

impl Metrics {
    /// Registers every family and creates its label sets, so a scrape right after startup shows
    /// them all. `kinds` lists each custom-resource kind with its phases for `kaos_resources`,
    /// which only a leader exports (see [`Metrics::set_leader`]).
    pub fn new(controller: &str, lease: &str, api_host: &str, kinds: &[(&str, &[&str])]) -> Self {
        let mut registry = Registry::default();
        let workqueue = WorkQueue::register(controller, &mut registry);
        let metrics = Self {
            controller: controller.to_string(),
            reconcile_total: Family::default(),
            reconcile_errors: Family::default(),
            reconcile_errors_by_step: Family::default(),
            reconcile_time: Family::new_with_constructor(Buckets(RECONCILE_BUCKETS)),
            max_concurrent: Family::default(),
            active_workers: Family::default(),
            leader_status: Family::default(),
            rest_requests: Family::default(),
            resources: Family::default(),
            kinds: kinds
                .iter()
                .map(|(kind, phases)| {
                    (
                        kind.to_string(),
                        phases.iter().map(|p| p.to_string()).collect(),
                    )
                })
                .collect(),
            resources_leading: Mutex::new(false),
            leading_exported: tokio::sync::watch::Sender::new(false),
            workqueue,
            extra: Arc::default(),
            registry: Registry::default(),
        };
        let this_controller = || {
            [ControllerLabels {
                controller: controller.to_string(),
            }]
        };
        let results = RESULTS.iter().map(|result| ResultLabels {
            controller: controller.to_string(),
            result: result.to_string(),
        });
        let steps = crate::error::Step::ALL.iter().map(|step| StepLabels {
            controller: controller.to_string(),
            step: step.metric_label().to_string(),
        });
        let this_lease = [NameLabels {
            name: lease.to_string(),
        }];
        let successful_gets = [RequestLabels {
            code: "200".into(),
            method: "GET".into(),
            host: api_host.to_string(),
        }];
        registry.register(
            "controller_runtime_reconcile",
            "Total number of reconciliations per controller",
            starting_at_zero(&metrics.reconcile_total, results),
        );
        registry.register(
            "controller_runtime_reconcile_errors",
            "Total number of reconciliation errors per controller",
            starting_at_zero(&metrics.reconcile_errors, this_controller()),
        );
        registry.register(
            "kaos_reconcile_errors",
            "Reconcile errors per controller and the step that failed (apply_child, patch_status, ...)",
            starting_at_zero(&metrics.reconcile_errors_by_step, steps),
        );
        registry.register(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            starting_at_zero(&metrics.reconcile_time, this_controller()),
        );
        registry.register(
            "controller_runtime_max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller",
            starting_at_zero(&metrics.max_concurrent, this_controller()),
        );
        registry.register(
            "controller_runtime_active_workers",
            "Number of currently used workers per controller",
            starting_at_zero(&metrics.active_workers, this_controller()),
        );
        registry.register(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease.",
            starting_at_zero(&metrics.leader_status, this_lease),
        );
        registry.register(
            "rest_client_requests",
            "Number of HTTP requests, partitioned by status code, method, and host.",
            starting_at_zero(&metrics.rest_requests, successful_gets),
        );
        // Only a leader exports it (see `set_leader`): no label set yet.
        registry.register(
            "kaos_resources",
            "Number of KAOS custom resources by kind and phase",
            metrics.resources.clone(),
        );
        registry.register_collector(Box::new(ProcessCollector));
        registry.register_collector(Box::new(metrics.extra.clone()));
        Self {
            registry,
            ..metrics
        }
    }

    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Adds a family of a controller's own to this process's `/metrics` (e.g. the workflow
    /// controller's run and step counts), as [`Registry::register`] would before startup.
    pub fn register(&self, name: &str, help: &str, metric: impl Metric) {
        self.extra
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(ExtraFamily {
                name: name.to_string(),
                help: help.to_string(),
                metric: Box::new(metric),
            });
    }

    /// The OpenMetrics text of every family.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }

    fn labels(&self) -> ControllerLabels {
        ControllerLabels {
            controller: self.controller.clone(),
        }
    }

    pub fn set_max_concurrent_reconciles(&self, n: u16) {
        self.max_concurrent
            .get_or_create(&self.labels())
            .set(i64::from(n));
    }

    /// Reports whether this process leads. A leader exports `kaos_resources` (every kind and
    /// phase at 0 until counted); a standby exports none, so alerts and dashboards that sum
    /// them over the replicas count each resource once.
    pub fn set_leader(&self, lease: &str, leading: bool) {
        self.leader_status
            .get_or_create(&NameLabels {
                name: lease.to_string(),
            })
            .set(i64::from(leading));
        let mut resources_leading = self
            .resources_leading
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if leading && !*resources_leading {
            for (kind, phases) in &self.kinds {
                for phase in phases {
                    drop(self.resources.get_or_create(&ResourceLabels {
                        kind: kind.clone(),
                        phase: phase.clone(),
                    }));
                }
            }
        } else if !leading {
            self.resources.clear();
        }
        *resources_leading = leading;
        drop(resources_leading);
        self.leading_exported
            .send_if_modified(|exported| std::mem::replace(exported, leading) != leading);
    }

    /// Changes of whether this process exports `kaos_resources`, each sent once
    /// [`Metrics::set_leader`] has opened or cleared the family.
    pub fn leading_exported(&self) -> tokio::sync::watch::Receiver<bool> {
        self.leading_exported.subscribe()
    }

    /// Counts a failed reconcile by the step that failed.
    pub fn record_error_step(&self, step: &str) {
        self.reconcile_errors_by_step
            .get_or_create(&StepLabels {
                controller: self.controller.clone(),
                step: step.to_string(),
            })
            .inc();
    }

    /// Starts timing one reconcile of `key` (`namespace/name`), taking it out of the work
    /// queue; finish it with [`ReconcileTimer::finish`].
    pub fn reconcile_started(&self, key: &str) -> ReconcileTimer<'_> {
        self.active_workers.get_or_create(&self.labels()).inc();
        ReconcileTimer {
            metrics: self,
            started: Instant::now(),
            ticket: Some(self.workqueue.started(key)),
        }
    }

    pub fn record_request(&self, code: u16, method: &str, host: &str) {
        self.rest_requests
            .get_or_create(&RequestLabels {
                code: code.to_string(),
                method: method.to_string(),
                host: host.to_string(),
            })
            .inc();
    }

    pub fn record_request_error(&self, method: &str, host: &str) {
        self.rest_requests
            .get_or_create(&RequestLabels {
                code: "<error>".into(),
                method: method.to_string(),
                host: host.to_string(),
            })
            .inc();
    }

    /// Sets `kaos_resources{kind, phase}` from counts (phases missing from `counts` become 0),
    /// if this process leads (a standby exports none).
    pub fn set_resource_counts(&self, kind: &str, phases: &[&str], counts: &[(String, i64)]) {
        let leading = self
            .resources_leading
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if !*leading {
            return;
        }
        for phase in phases {
            let count = counts
                .iter()
                .find(|(p, _)| p == phase)
                .map_or(0, |(_, c)| *c);
            self.resources
                .get_or_create(&ResourceLabels {
                    kind: kind.into(),
                    phase: phase.to_string(),
                })
                .set(count);
        }
    }
}

/// The outcome of a reconcile, for the `result` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Success,
    Error,
    Requeue,
    RequeueAfter,
}

/// Times a reconcile and counts it when finished (or as an error if dropped unfinished).
pub struct ReconcileTimer<'a> {
    metrics: &'a Metrics,
    started: Instant,
    /// Taken when recorded.
    ticket: Option<Ticket>,
}

impl ReconcileTimer<'_> {
    pub fn finish(mut self, outcome: Outcome) -> Duration {
        self.record(outcome)
    }

    fn record(&mut self, outcome: Outcome) -> Duration {
        let elapsed = self.started.elapsed();
        let metrics = self.metrics;
        if let Some(ticket) = self.ticket.take() {
            // Errors and requeues run again later: client-go counts both as retries.
            let requeued = matches!(outcome, Outcome::Error | Outcome::RequeueAfter);
            metrics.workqueue.done(ticket, requeued);
        }
        let labels = metrics.labels();
        metrics.active_workers.get_or_create(&labels).dec();
        metrics
            .reconcile_time
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
        let result = match outcome {
            Outcome::Success => "success",
            Outcome::Error => "error",
            Outcome::Requeue => "requeue",
            Outcome::RequeueAfter => "requeue_after",
        };
        metrics
            .reconcile_total
            .get_or_create(&ResultLabels {
                controller: metrics.controller.clone(),
                result: result.into(),
            })
            .inc();
        if outcome == Outcome::Error {
            metrics.reconcile_errors.get_or_create(&labels).inc();
        }
        elapsed
    }
}

impl Drop for ReconcileTimer<'_> {
    fn drop(&mut self) {
        if self.ticket.is_some() {
            self.record(Outcome::Error);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_is_present_from_startup() {
        let metrics = Metrics::new(
            "agent",
            "kaos-agent-controller",
            "10.0.0.1:443",
            &[("Agent", &["Pending", "Ready"])],
        );
        let text = metrics.encode();
        for family in [
            "controller_runtime_reconcile_total{controller=\"agent\",result=\"success\"} 0",
            "controller_runtime_reconcile_total{controller=\"agent\",result=\"requeue_after\"} 0",
            "controller_runtime_reconcile_errors_total{controller=\"agent\"} 0",
            "controller_runtime_reconcile_time_seconds_bucket{le=\"0.005\",controller=\"agent\"} 0",
            "controller_runtime_reconcile_time_seconds_bucket{le=\"60.0\",controller=\"agent\"} 0",
            "controller_runtime_max_concurrent_reconciles{controller=\"agent\"} 0",
            "controller_runtime_active_workers{controller=\"agent\"} 0",
            "leader_election_master_status{name=\"kaos-agent-controller\"} 0",
            "rest_client_requests_total{code=\"200\",method=\"GET\",host=\"10.0.0.1:443\"} 0",
            "workqueue_adds_total{name=\"agent\",controller=\"agent\"} 0",
            "workqueue_depth{name=\"agent\",controller=\"agent\",priority=\"\"} 0",
            "process_resident_memory_bytes ",
            "process_cpu_seconds_total ",
            "process_open_fds ",
            "process_start_time_seconds ",
        ] {
            assert!(text.contains(family), "missing {family}:\n{text}");
        }
    }

    #[test]
    fn a_controller_adds_families_of_its_own_after_startup() {
        let metrics = Metrics::new("workflow", "lease", "h", &[]);
        let runs: Family<NameLabels, Counter> = Family::default();
        metrics.register("kaos_workflow_runs", "Runs finished", runs.clone());
        runs.get_or_create(&NameLabels { name: "a".into() }).inc();
        let text = metrics.encode();
        assert!(
            text.contains("# HELP kaos_workflow_runs Runs finished"),
            "{text}"
        );
        assert!(
            text.contains("kaos_workflow_runs_total{name=\"a\"} 1"),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn reconciles_are_counted_by_outcome() {
        let metrics = Metrics::new("mcp", "lease", "h", &[]);
        metrics.reconcile_started("ns/a").finish(Outcome::Success);
        metrics.reconcile_started("ns/a").finish(Outcome::Error);
        drop(metrics.reconcile_started("ns/b"));
        let text = metrics.encode();
        assert!(
            text.contains(
                "controller_runtime_reconcile_total{controller=\"mcp\",result=\"success\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "controller_runtime_reconcile_total{controller=\"mcp\",result=\"error\"} 2"
            ),
            "{text}"
        );
        assert!(
            text.contains("controller_runtime_reconcile_errors_total{controller=\"mcp\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("controller_runtime_reconcile_time_seconds_count{controller=\"mcp\"} 3"),
            "{text}"
        );
        assert!(
            text.contains("controller_runtime_active_workers{controller=\"mcp\"} 0"),
            "{text}"
        );
        // The same reconciles are the queue's work; both errors run again.
        assert!(
            text.contains(
                "workqueue_work_duration_seconds_count{name=\"mcp\",controller=\"mcp\"} 3"
            ),
            "{text}"
        );
        assert!(
            text.contains("workqueue_retries_total{name=\"mcp\",controller=\"mcp\"} 2"),
            "{text}"
        );
    }

    #[test]
    fn only_the_leader_exports_resource_counts() {
        let metrics = Metrics::new("agent", "lease", "h", &[("Agent", &["Ready", "Failed"])]);
        let failed = "kaos_resources{kind=\"Agent\",phase=\"Failed\"}";
        let counts = [("Failed".to_string(), 2)];
        metrics.set_resource_counts("Agent", &["Ready", "Failed"], &counts);
        assert!(
            !metrics.encode().contains("kaos_resources{"),
            "a standby exports none"
        );

        metrics.set_leader("lease", true);
        let text = metrics.encode();
        assert!(
            text.contains(&format!("{failed} 0")),
            "every phase from the moment it leads:\n{text}"
        );
        metrics.set_resource_counts("Agent", &["Ready", "Failed"], &counts);
        let text = metrics.encode();
        assert!(text.contains(&format!("{failed} 2")), "{text}");
        assert!(
            text.contains("kaos_resources{kind=\"Agent\",phase=\"Ready\"} 0"),
            "{text}"
        );

        metrics.set_leader("lease", false);
        let text = metrics.encode();
        assert!(
            !text.contains("kaos_resources{"),
            "cleared when leadership is lost:\n{text}"
        );
        assert!(
            text.contains("leader_election_master_status{name=\"lease\"} 0"),
            "{text}"
        );
    }
}
