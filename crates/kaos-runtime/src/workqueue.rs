//! controller-runtime's `workqueue_*` metrics for a kube-runtime Controller.
//!
//! kube-runtime's scheduler keeps its queue to itself, so the queue is observed from outside:
//! every trigger that reaches the Controller (the primary's watch, its children's owner
//! references, the dependency triggers, a new leader's full resync) is an *add* of the object's
//! key into a pending map that keeps the time of the first add, as client-go's dirty set does;
//! adds of a key already pending are merged (the scheduler merges them too). A reconcile
//! *starting* takes its key out of the map: the time since the first add is the queue duration.
//! A requeue (an error's retry, or a reconcile that asked to run again later) is a *retry*;
//! kube-runtime keeps its due time, so when it comes due and starts it counts as an add with no
//! queue duration. The map holds pending objects only: a key leaves it when its reconcile starts
//! or when the Controller finds the object gone from its cache.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::metric_families::Buckets;

/// client-go's workqueue buckets (`prometheus.ExponentialBuckets(10e-9, 10, 12)`): 10 ns to
/// 1000 s, each ten times the last.
pub const WORKQUEUE_BUCKETS: &[f64] = &[
    1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 0.1, 1.0, 10.0, 100.0, 1000.0,
];

/// controller-runtime labels every workqueue family with the queue's `name` and its
/// `controller`, both the controller's name.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabels {
    pub name: String,
    pub controller: String,
}

/// `workqueue_depth` also has `priority` (empty: controller-runtime's queue without priorities).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DepthLabels {
    pub name: String,
    pub controller: String,
    pub priority: String,
}

#[derive(Default)]
struct State {
    /// Objects waiting for a reconcile, with the time of their first add.
    pending: HashMap<String, Instant>,
    /// Reconciles running now, by ticket, with their start.
    running: HashMap<u64, Instant>,
    next_ticket: u64,
}

/// The queue of one controller: counters and histograms updated per event, the time-based
/// gauges computed when scraped.
pub struct WorkQueue {
    labels: QueueLabels,
    state: Mutex<State>,
    adds: Counter,
    depth: Gauge,
    retries: Counter,
    queue_duration: Histogram,
    work_duration: Histogram,
}

/// A reconcile in progress; hand it back to [`WorkQueue::done`].
#[derive(Debug)]
pub struct Ticket(u64);

impl WorkQueue {
    /// Registers the `workqueue_*` families of `controller` in `registry`, every one with its
    /// label set created (value 0).
    pub fn register(controller: &str, registry: &mut Registry) -> Arc<Self> {
        let labels = QueueLabels {
            name: controller.to_string(),
            controller: controller.to_string(),
        };
        let adds = Family::<QueueLabels, Counter>::default();
        let retries = Family::<QueueLabels, Counter>::default();
        let depth = Family::<DepthLabels, Gauge>::default();
        let queue_duration =
            Family::<QueueLabels, Histogram, _>::new_with_constructor(Buckets(WORKQUEUE_BUCKETS));
        let work_duration =
            Family::<QueueLabels, Histogram, _>::new_with_constructor(Buckets(WORKQUEUE_BUCKETS));
        registry.register(
            "workqueue_adds",
            "Total number of adds handled by workqueue",
            adds.clone(),
        );
        registry.register(
            "workqueue_depth",
            "Current depth of workqueue by workqueue and priority",
            depth.clone(),
        );
        registry.register(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            queue_duration.clone(),
        );
        registry.register(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes.",
            work_duration.clone(),
        );
        registry.register(
            "workqueue_retries",
            "Total number of retries handled by workqueue",
            retries.clone(),
        );
        let queue = Arc::new(Self {
            adds: adds.get_or_create(&labels).clone(),
            retries: retries.get_or_create(&labels).clone(),
            depth: depth
                .get_or_create(&DepthLabels {
                    name: labels.name.clone(),
                    controller: labels.controller.clone(),
                    priority: String::new(),
                })
                .clone(),
            queue_duration: queue_duration.get_or_create(&labels).clone(),
            work_duration: work_duration.get_or_create(&labels).clone(),
            labels,
            state: Mutex::default(),
        });
        registry.register_collector(Box::new(RunningCollector(queue.clone())));
        queue
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // The state stays consistent even if a holder panicked: every update is one statement.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `key` entered the queue; merged with an add that is still pending.
    pub fn add(&self, key: &str) {
        self.add_at(key, Instant::now());
    }

    fn add_at(&self, key: &str, now: Instant) {
        let mut state = self.state();
        if state.pending.contains_key(key) {
            return;
        }
        state.pending.insert(key.to_string(), now);
        self.adds.inc();
        self.depth.set(state.pending.len() as i64);
    }

    /// `key` left the queue without a reconcile (the Controller found it gone from its cache,
    /// or this replica does not lead).
    pub fn forget(&self, key: &str) {
        let mut state = self.state();
        if state.pending.remove(key).is_some() {
            self.depth.set(state.pending.len() as i64);
        }
    }

    /// A reconcile of `key` starts.
    pub fn started(&self, key: &str) -> Ticket {
        self.started_at(key, Instant::now())
    }

    fn started_at(&self, key: &str, now: Instant) -> Ticket {
        let mut state = self.state();
        match state.pending.remove(key) {
            Some(since) => {
                self.queue_duration
                    .observe(now.saturating_duration_since(since).as_secs_f64());
                self.depth.set(state.pending.len() as i64);
            }
            // A requeue that came due: kube-runtime added it without telling us when it was due.
            None => {
                self.adds.inc();
            }
        }
        let ticket = state.next_ticket;
        state.next_ticket += 1;
        state.running.insert(ticket, now);
        Ticket(ticket)
    }

    /// The reconcile of `ticket` finished; `requeued` when it runs again later (an error's
    /// retry or a requeue it asked for).
    pub fn done(&self, ticket: Ticket, requeued: bool) {
        self.done_at(ticket, requeued, Instant::now());
    }

    fn done_at(&self, ticket: Ticket, requeued: bool, now: Instant) {
        let started = self.state().running.remove(&ticket.0);
        if let Some(started) = started {
            self.work_duration
                .observe(now.saturating_duration_since(started).as_secs_f64());
        }
        if requeued {
            self.retries.inc();
        }
    }

    /// Seconds of work in progress (summed over running reconciles) and of the longest one.
    fn running(&self, now: Instant) -> (f64, f64) {
        let state = self.state();
        state
            .running
            .values()
            .fold((0.0, 0.0), |(sum, max), started| {
                let secs = now.saturating_duration_since(*started).as_secs_f64();
                (sum + secs, f64::max(max, secs))
            })
    }

    /// Objects waiting now (`workqueue_depth`).
    pub fn depth(&self) -> usize {
        self.state().pending.len()
    }
}

/// `workqueue_unfinished_work_seconds` and `workqueue_longest_running_processor_seconds`,
/// computed at scrape time (client-go refreshes them every 500 ms).
#[derive(Debug)]
struct RunningCollector(Arc<WorkQueue>);

impl std::fmt::Debug for WorkQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkQueue")
            .field("name", &self.labels.name)
            .finish_non_exhaustive()
    }
}

impl Collector for RunningCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let (unfinished, longest) = self.0.running(Instant::now());
        for (name, help, value) in [
            (
                "workqueue_unfinished_work_seconds",
                "How many seconds of work has been done that is in progress and hasn't been observed by work_duration. Large values indicate stuck threads. One can deduce the number of stuck threads by observing the rate at which this increases.",
                unfinished,
            ),
            (
                "workqueue_longest_running_processor_seconds",
                "How many seconds has the longest running processor for workqueue been running.",
                longest,
            ),
        ] {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            ConstGauge::new(value).encode(family.encode_family(&self.0.labels)?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn queue() -> (Arc<WorkQueue>, Registry) {
        let mut registry = Registry::default();
        (WorkQueue::register("agent", &mut registry), registry)
    }

    fn text(registry: &Registry) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry).expect("encodes");
        text
    }

    fn value(text: &str, series: &str) -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {series} in\n{text}"))
    }

    const L: &str = "{name=\"agent\",controller=\"agent\"}";

    /// The value of `family` for the test queue (labels `L`).
    fn queue_value(text: &str, family: &str) -> f64 {
        value(text, &format!("{family}{L}"))
    }

    #[test]
    fn every_family_has_controller_runtimes_names_and_labels_from_the_start() {
        let (_, registry) = queue();
        let text = text(&registry);
        for series in [
            format!("workqueue_adds_total{L} 0"),
            "workqueue_depth{name=\"agent\",controller=\"agent\",priority=\"\"} 0".to_string(),
            format!("workqueue_retries_total{L} 0"),
            "workqueue_queue_duration_seconds_bucket{le=\"1e-8\",name=\"agent\",controller=\"agent\"} 0"
                .to_string(),
            "workqueue_work_duration_seconds_bucket{le=\"1000.0\",name=\"agent\",controller=\"agent\"} 0"
                .to_string(),
            format!("workqueue_unfinished_work_seconds{L} 0"),
            format!("workqueue_longest_running_processor_seconds{L} 0"),
        ] {
            assert!(text.contains(&series), "missing {series}:\n{text}");
        }
    }

    #[test]
    fn adds_of_a_pending_object_merge_and_its_start_measures_the_wait() {
        let (queue, registry) = queue();
        let t0 = Instant::now();
        queue.add_at("ns/a", t0);
        queue.add_at("ns/a", t0 + Duration::from_millis(100));
        queue.add_at("ns/b", t0 + Duration::from_millis(200));
        assert_eq!(queue.depth(), 2);
        let text = text(&registry);
        assert_eq!(queue_value(&text, "workqueue_adds_total"), 2.0);

        // a waited from its first add: 1.5 s, not 1.4 s.
        let ticket = queue.started_at("ns/a", t0 + Duration::from_millis(1500));
        assert_eq!(queue.depth(), 1);
        let text = self::text(&registry);
        assert_eq!(
            queue_value(&text, "workqueue_queue_duration_seconds_sum"),
            1.5
        );
        assert_eq!(
            value(
                &text,
                "workqueue_queue_duration_seconds_bucket{le=\"1.0\",name=\"agent\",controller=\"agent\"}"
            ),
            0.0
        );
        assert_eq!(
            value(
                &text,
                "workqueue_queue_duration_seconds_bucket{le=\"10.0\",name=\"agent\",controller=\"agent\"}"
            ),
            1.0
        );

        // An add while a's reconcile runs is a new pending add (it runs again afterwards).
        queue.add_at("ns/a", t0 + Duration::from_secs(2));
        assert_eq!(queue.depth(), 2);
        queue.done_at(ticket, false, t0 + Duration::from_secs(4));
        let text = self::text(&registry);
        assert_eq!(queue_value(&text, "workqueue_adds_total"), 3.0);
        assert_eq!(
            queue_value(&text, "workqueue_work_duration_seconds_sum"),
            2.5
        );
        assert_eq!(
            queue_value(&text, "workqueue_work_duration_seconds_count"),
            1.0
        );
        assert_eq!(queue_value(&text, "workqueue_retries_total"), 0.0);
    }

    #[test]
    fn a_requeue_is_a_retry_then_an_add_when_it_starts() {
        let (queue, registry) = queue();
        let t0 = Instant::now();
        queue.add_at("ns/a", t0);
        let first = queue.started_at("ns/a", t0);
        queue.done_at(first, true, t0 + Duration::from_millis(10));
        assert_eq!(
            queue.depth(),
            0,
            "a requeue waits in kube-runtime, not in the queue"
        );
        let again = queue.started_at("ns/a", t0 + Duration::from_secs(1));
        queue.done_at(again, false, t0 + Duration::from_secs(2));
        let text = text(&registry);
        assert_eq!(queue_value(&text, "workqueue_retries_total"), 1.0);
        assert_eq!(queue_value(&text, "workqueue_adds_total"), 2.0);
        assert_eq!(
            queue_value(&text, "workqueue_queue_duration_seconds_count"),
            1.0,
            "the requeue's due time is unknown: no queue duration"
        );
        assert_eq!(
            queue_value(&text, "workqueue_work_duration_seconds_count"),
            2.0
        );
    }

    #[test]
    fn forgotten_objects_leave_the_queue() {
        let (queue, registry) = queue();
        queue.add("ns/gone");
        queue.forget("ns/gone");
        queue.forget("ns/never-added");
        assert_eq!(queue.depth(), 0);
        let text = text(&registry);
        assert!(
            text.contains("workqueue_depth{name=\"agent\",controller=\"agent\",priority=\"\"} 0")
        );
        assert_eq!(
            queue_value(&text, "workqueue_queue_duration_seconds_count"),
            0.0
        );
    }

    #[test]
    fn running_reconciles_are_unfinished_work_and_the_longest_one() {
        let (queue, _) = queue();
        let t0 = Instant::now();
        let a = queue.started_at("ns/a", t0);
        let b = queue.started_at("ns/b", t0 + Duration::from_secs(2));
        let now = t0 + Duration::from_secs(5);
        assert_eq!(queue.running(now), (8.0, 5.0));
        queue.done_at(a, false, now);
        assert_eq!(queue.running(now), (3.0, 3.0));
        queue.done_at(b, false, now);
        assert_eq!(queue.running(now), (0.0, 0.0));
    }

    #[test]
    fn memory_follows_pending_and_running_objects_only() {
        let (queue, _) = queue();
        for round in 0..1000 {
            let key = format!("ns/{}", round % 10);
            queue.add(&key);
            let ticket = queue.started(&key);
            queue.done(ticket, false);
        }
        let state = queue.state();
        assert!(state.pending.is_empty() && state.running.is_empty());
    }
}
