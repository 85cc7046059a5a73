//! Metrics that only the leader exports or moves: a standby Runtime exports no `kaos_resources`
//! (so alerts summing them over replicas count each resource once) and queues nothing.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::Parser;
use k8s_openapi::api::core::v1::ConfigMap;
use kaos_runtime::{ControllerId, Runtime, RuntimeArgs};
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::reflector;
use kube::runtime::watcher::Event;
use tokio::sync::watch;

const PHASES: &[&str] = &["Ready", "Failed"];
const ID: ControllerId = ControllerId {
    name: "agent",
    lease: "kaos-agent-controller",
    kinds: &[("Agent", PHASES)],
};

fn object(name: &str, phase: &str) -> ConfigMap {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "default", "labels": {"phase": phase}}
    }))
    .expect("object")
}

fn phase_of(object: &ConfigMap) -> Option<&'static str> {
    match object.labels().get("phase").map(String::as_str) {
        Some("Failed") => Some("Failed"),
        Some("Ready") => Some("Ready"),
        _ => None,
    }
}

fn runtime(leading: watch::Receiver<bool>) -> (Runtime, watch::Sender<bool>) {
    #[derive(Parser)]
    struct Args {
        #[command(flatten)]
        runtime: RuntimeArgs,
    }
    let args = Args::try_parse_from(["test"]).expect("args").runtime;
    // Nothing here talks to an API server.
    let config = kube::Config::new("http://127.0.0.1:9".parse().expect("url"));
    let client = kube::Client::try_from(config).expect("client");
    Runtime::for_tests_with_leader(client, ID, args, leading)
}

/// Polls `metrics` until `check` holds (the phase tracker runs on its own task). The tests run
/// on tokio's paused clock, so the 2 s bound is virtual time: well under the tracker's 5 s tick
/// however loaded the machine is.
async fn until(runtime: &Runtime, what: &str, check: impl Fn(&str) -> bool) {
    for _ in 0..200 {
        if check(&runtime.metrics.encode()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{what}:\n{}", runtime.metrics.encode());
}

#[tokio::test(start_paused = true)]
async fn only_the_leader_exports_resource_counts() {
    let (leading_tx, leading) = watch::channel(false);
    let (runtime, _stop) = runtime(leading);
    let (store, mut writer) = reflector::store::<ConfigMap>();
    for (name, phase) in [("a", "Failed"), ("b", "Failed"), ("c", "Ready")] {
        writer.apply_watcher_event(&Event::Apply(object(name, phase)));
    }
    runtime.track_phases("Agent", move |count| {
        for object in store.state() {
            count(phase_of(&object));
        }
    });

    // A standby: its caches are as full as the leader's, but it exports no counts.
    tokio::time::sleep(Duration::from_millis(100)).await;
    until(&runtime, "the standby reports it does not lead", |m| {
        m.contains("leader_election_master_status{name=\"kaos-agent-controller\"} 0")
    })
    .await;
    assert!(
        !runtime.metrics.encode().contains("kaos_resources"),
        "a standby exports kaos_resources:\n{}",
        runtime.metrics.encode()
    );

    // Leading: the counts appear at once, not after the 5 s tick.
    leading_tx.send_replace(true);
    until(&runtime, "the leader exports the counts", |m| {
        m.contains("kaos_resources{kind=\"Agent\",phase=\"Failed\"} 2")
            && m.contains("kaos_resources{kind=\"Agent\",phase=\"Ready\"} 1")
    })
    .await;

    // No longer leading: the series go, so the next leader's are the only ones.
    leading_tx.send_replace(false);
    until(&runtime, "the series are cleared", |m| {
        !m.contains("kaos_resources")
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_standby_queues_and_reconciles_nothing() {
    let (_leading_tx, leading) = watch::channel(false);
    let (runtime, _stop) = runtime(leading);
    runtime.enqueued("default/a");
    let ran = AtomicBool::new(false);
    let result = runtime
        .reconcile("default/a", async {
            ran.store(true, Ordering::SeqCst);
            Err::<Action, ()>(())
        })
        .await;
    assert_eq!(result, Ok(Action::await_change()));
    assert!(!ran.load(Ordering::SeqCst), "a standby ran a reconcile");
    let metrics = runtime.metrics.encode();
    for series in [
        "workqueue_adds_total{name=\"agent\",controller=\"agent\"} 0",
        "workqueue_depth{name=\"agent\",controller=\"agent\",priority=\"\"} 0",
        "workqueue_work_duration_seconds_count{name=\"agent\",controller=\"agent\"} 0",
    ] {
        assert!(metrics.contains(series), "missing {series}:\n{metrics}");
    }
}
