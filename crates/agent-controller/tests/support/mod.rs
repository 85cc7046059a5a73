//! The Agent controller on kaos-testkit with the deployment simulator, shared by the controller
//! test files. ModelAPI and MCPServer statuses are written by the tests, as their controllers
//! would.
#![allow(dead_code)]

use std::time::Duration;

use agent_controller::settings::Args;
use clap::Parser;
use k8s_openapi::api::apps::v1::Deployment;
use kaos_api::agent::{Agent, AgentPhase};
use kaos_api::modelapi::ModelAPI;
use kaos_harness::cluster::{TestCluster, eventually};
use kaos_runtime::Runtime;
use kube::api::{Patch, PatchParams};
use kube::{Api, Resource};
use serde_json::{Value, json};

pub struct Harness {
    pub runtime: Runtime,
    pub cluster: TestCluster,
    pub agents: Api<Agent>,
    pub deployments: Api<Deployment>,
    pub _stop: tokio::sync::watch::Sender<bool>,
}

pub async fn start() -> Harness {
    start_with(&[]).await
}

/// The controller with `flags` added to its defaults.
pub async fn start_with(flags: &[&str]) -> Harness {
    let cluster = TestCluster::start();
    let mut argv = vec!["agent-controller", "--default-agent-image=kaos-agent:test"];
    argv.extend(flags);
    let args = Args::try_parse_from(argv).expect("flags");
    let (runtime, stop) =
        Runtime::for_tests(cluster.client.clone(), agent_controller::ID, args.runtime);
    tokio::spawn(agent_controller::controller::run(
        runtime.clone(),
        args.settings,
    ));
    let agents = Api::default_namespaced(cluster.client.clone());
    let deployments = Api::default_namespaced(cluster.client.clone());
    Harness {
        runtime,
        cluster,
        agents,
        deployments,
        _stop: stop,
    }
}

pub fn apply(h: &Harness, kind: &str, name: &str, spec: Value) {
    let manifest = json!({"apiVersion": "kaos.tools/v1alpha1", "kind": kind, "metadata": {"name": name, "namespace": "default"}, "spec": spec});
    h.cluster.apply(&manifest.to_string());
}

/// Writes a dependency's status as its own controller would.
pub async fn set_status<K>(h: &Harness, name: &str, ready: bool, endpoint: &str)
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::default_namespaced(h.cluster.client.clone());
    let status = json!({"status": {"ready": ready, "phase": if ready { "Ready" } else { "Pending" }, "endpoint": endpoint}});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("status");
}

pub async fn model_api(h: &Harness, ready: bool) {
    apply(
        h,
        "ModelAPI",
        "llm",
        json!({"mode": "Proxy", "proxyConfig": {"models": ["openai/*"]}}),
    );
    set_status::<ModelAPI>(
        h,
        "llm",
        ready,
        "http://modelapi-llm.default.svc.cluster.local:8000",
    )
    .await;
}

/// Marks the ModelAPI `llm` Ready at its Service URL.
pub async fn model_api_turns_ready(h: &Harness) {
    set_status::<ModelAPI>(
        h,
        "llm",
        true,
        "http://modelapi-llm.default.svc.cluster.local:8000",
    )
    .await;
}

pub async fn until(h: &Harness, name: &str, what: &str, check: impl Fn(&Agent) -> bool) -> Agent {
    eventually(&format!("{name} is {what}"), || async {
        h.agents.get(name).await.ok().filter(|a| check(a))
    })
    .await
}

pub fn phase(a: &Agent) -> Option<AgentPhase> {
    a.status.as_ref().and_then(|s| s.phase)
}

pub fn message(a: &Agent) -> String {
    a.status
        .as_ref()
        .and_then(|s| s.message.clone())
        .unwrap_or_default()
}

pub fn env_of(d: &Deployment) -> Vec<(String, String)> {
    d.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .map(|p| p.containers[0].env.clone().unwrap_or_default())
        .unwrap_or_default()
        .into_iter()
        .map(|e| (e.name, e.value.unwrap_or_default()))
        .collect()
}

/// Reconciles this controller has run so far (every outcome), from its metrics.
pub fn reconciles(h: &Harness) -> f64 {
    h.runtime
        .metrics
        .encode()
        .lines()
        .filter(|l| l.starts_with("controller_runtime_reconcile_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Waits `window` and returns the reconciles and the writes made meanwhile.
pub async fn idle(h: &Harness, window: Duration) -> (f64, Vec<String>) {
    let before = reconciles(h);
    let writes = h.cluster.writes_during(window).await;
    (reconciles(h) - before, writes)
}
