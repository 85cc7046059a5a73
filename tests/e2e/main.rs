//! End to end: `kaos-testkit serve` and each controller binary as two processes with leader
//! election. Every replica turns ready (`/readyz` 200) once its caches sync, leader or standby;
//! the examples, a peer pair and a mesh reach Ready, then the leaders go quiet (no reconcile);
//! killing a leader hands over to its standby, which reconciles a new change within the lease
//! duration without any Ready agent leaving Ready; SIGTERM hands over in about a second; only
//! leaders' reconcile counters move. A MemoryStore waits for its two ModelAPIs, then serves the
//! agent bound to it. An AccessGrant says it is not enforced and follows what it names.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Service};
use kaos_api::agent::Agent;
use kaos_api::mcpserver::MCPServer;
use kaos_api::memorystore::MemoryStore;
use kaos_api::modelapi::ModelAPI;
use kaos_harness::processes::{
    POLL, Process, Scratch, apply_yaml, client, http_get, sample, scrape, serve_testkit,
    start_controller,
};
use kaos_harness::{EXAMPLE_CREDENTIALS, example_files, repo_root};
use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};

mod access;
mod failover;
mod memory;

const LEASE_DURATION: Duration = Duration::from_secs(3);

struct Pair {
    binary: &'static str,
    lease: &'static str,
    controller: &'static str,
    processes: Vec<Process>,
}

fn settings() -> BTreeMap<String, String> {
    [
        ("LEASE_DURATION", "3s"),
        ("RENEW_DEADLINE", "2s"),
        ("RETRY_PERIOD", "500ms"),
        ("SYSTEM_NAMESPACE", "kaos-system"),
        ("DEFAULT_AGENT_IMAGE", "kaos-agent:e2e"),
        ("DEFAULT_LITELLM_IMAGE", "litellm:e2e"),
        ("DEFAULT_OLLAMA_IMAGE", "ollama:e2e"),
        ("DEFAULT_MEMORY_SERVICE_IMAGE", "kaos-memory:e2e"),
        // The usage of BUDGETED's agent is reported within a second of its creation, long
        // before the quiet windows.
        ("USAGE_SCRAPE_INTERVAL_SECONDS", "1"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

async fn lease_holder(leases: &Api<Lease>, name: &str) -> Option<String> {
    leases
        .get_opt(name)
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .filter(|h| !h.is_empty())
}

/// Waits for a holder and returns the index of the process holding the lease.
async fn leader_of(leases: &Api<Lease>, pair: &Pair, not: Option<&str>) -> (usize, Duration) {
    let started = Instant::now();
    loop {
        if let Some(holder) = lease_holder(leases, pair.lease).await
            && Some(holder.as_str()) != not
            && let Some(i) = pair
                .processes
                .iter()
                .position(|p| holder.starts_with(&format!("{}_", p.name)))
        {
            return (i, started.elapsed());
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no leader for {}",
            pair.lease
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every kind a controller reconciles that turns Ready.
const KINDS: [&str; 4] = ["Agent", "ModelAPI", "MCPServer", "MemoryStore"];
/// The kinds never Ready on kaos-rs (it enforces neither), and the condition that says so.
const NOT_ENFORCED: [(&str, &str); 2] =
    [("AccessGrant", "Enforced"), ("ThirdPartyService", "Ready")];

fn kind_api(client: &kube::Client, kind: &str) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk("kaos.tools", "v1alpha1", kind));
    Api::default_namespaced_with(client.clone(), &resource)
}

/// The condition `type_` of an object's status.
fn condition<'a>(object: &'a DynamicObject, type_: &str) -> Option<&'a serde_json::Value> {
    object
        .data
        .pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

/// (metadata.generation, the observedGeneration of condition `type_`).
async fn condition_generation(
    api: &Api<DynamicObject>,
    name: &str,
    type_: &str,
) -> (Option<i64>, Option<i64>) {
    let Ok(object) = api.get(name).await else {
        return (None, None);
    };
    let observed = condition(&object, type_).and_then(|c| c["observedGeneration"].as_i64());
    (object.metadata.generation, observed)
}

/// Whether every workload is Ready, and every AccessGrant and ThirdPartyService says it is not
/// enforced and that what it names exists, at its current generation.
async fn all_ready(client: &kube::Client) -> Result<(), String> {
    let mut waiting = Vec::new();
    for kind in KINDS {
        for object in kind_api(client, kind)
            .list(&Default::default())
            .await
            .map_err(|e| e.to_string())?
        {
            if object.data.pointer("/status/ready") != Some(&true.into()) {
                waiting.push(format!(
                    "{kind} {:?}: {}",
                    object.metadata.name,
                    object.data.pointer("/status/message").unwrap_or(&().into())
                ));
            }
        }
    }
    for (kind, type_) in NOT_ENFORCED {
        for object in kind_api(client, kind)
            .list(&Default::default())
            .await
            .map_err(|e| e.to_string())?
        {
            let current = condition(&object, type_).is_some_and(|c| {
                c["status"] == "False"
                    && c["observedGeneration"].as_i64() == object.metadata.generation
            });
            let resolved =
                condition(&object, "ResolvedRefs").is_some_and(|c| c["status"] == "True");
            if !(current && resolved) {
                waiting.push(format!(
                    "{kind} {:?}: {:?}",
                    object.metadata.name,
                    object.data.pointer("/status/conditions")
                ));
            }
        }
    }
    if waiting.is_empty() {
        Ok(())
    } else {
        Err(waiting.join("; "))
    }
}

async fn observed_generation<K>(api: &Api<K>, name: &str) -> (Option<i64>, Option<i64>)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + serde::Serialize,
{
    let Ok(object) = api.get(name).await else {
        return (None, None);
    };
    let value = serde_json::to_value(&object).unwrap_or_default();
    (
        value
            .pointer("/metadata/generation")
            .and_then(|v| v.as_i64()),
        value
            .pointer("/status/observedGeneration")
            .and_then(|v| v.as_i64()),
    )
}

/// Polls `check` until it returns Some, for at most `timeout`; panics with `what` and where the
/// controllers' logs are.
async fn wait_until<T, F, Fut>(scratch: &Scratch, what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            started.elapsed() < timeout,
            "timed out after {timeout:?} waiting until {what}\nlogs in {}",
            scratch.0.display()
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Reconciles of every controller replica so far (all outcomes).
async fn reconciles_of(pairs: &[Pair]) -> Vec<f64> {
    let mut counts = Vec::new();
    for pair in pairs {
        for process in &pair.processes {
            let metrics = scrape(process.metrics_port).await;
            counts.push(reconciles_ending(&metrics, pair.controller, &RESULTS));
        }
    }
    counts
}

const RESULTS: [&str; 4] = ["success", "error", "requeue", "requeue_after"];

/// Reconciles of `controller` in a scrape that ended with one of `results`.
fn reconciles_ending(metrics: &str, controller: &str, results: &[&str]) -> f64 {
    results
        .iter()
        .map(|result| {
            let series = format!(
                "controller_runtime_reconcile_total{{controller=\"{controller}\",result=\"{result}\"}}"
            );
            sample(metrics, &series)
        })
        .sum()
}

/// A pair of agents that list each other and a mesh of five where everyone lists everyone.
fn peer_shapes() -> String {
    let agent = |name: &str, peers: &[String]| {
        format!(
            "---\napiVersion: kaos.tools/v1alpha1\nkind: Agent\nmetadata: {{name: {name}, namespace: default}}\nspec: {{modelAPI: llm-proxy, model: openai/gpt-4o, agentNetwork: {{access: [{}]}}}}\n",
            peers.join(", ")
        )
    };
    let mut yaml = agent("pair-a", &["pair-b".into()]) + &agent("pair-b", &["pair-a".into()]);
    let mesh: Vec<String> = (1..=5).map(|i| format!("mesh-{i}")).collect();
    for me in &mesh {
        let others: Vec<String> = mesh.iter().filter(|p| *p != me).cloned().collect();
        yaml += &agent(me, &others);
    }
    yaml
}

fn mcpserver_registry() -> String {
    let body: String = std::fs::read_to_string(
        repo_root().join("crates/mcpserver-controller/src/default-runtimes.yaml"),
    )
    .expect("registry")
    .lines()
    .map(|l| format!("    {l}\n"))
    .collect();
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: kaos-mcp-runtimes, namespace: kaos-system}}\ndata:\n  runtimes.yaml: |\n{body}"
    )
}

/// The series names of a Prometheus text exposition (histograms' `_bucket`, `_sum`, `_count`).
fn exported_series(metrics: &str) -> impl Iterator<Item = String> + '_ {
    metrics
        .lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .filter_map(|line| line.split(['{', ' ']).next())
        .map(str::to_owned)
}

/// The series the chart's Grafana dashboards and PrometheusRule query: their expressions'
/// identifiers with one of the families' prefixes.
fn charted_metrics() -> BTreeSet<String> {
    let chart = repo_root().join("charts/kaos");
    let mut sources = vec![chart.join("templates/prometheusrule.yaml")];
    for entry in std::fs::read_dir(chart.join("dashboards")).expect("charts/kaos/dashboards") {
        sources.push(entry.expect("a dashboard file").path());
    }
    const FAMILIES: [&str; 6] = [
        "controller_runtime_",
        "workqueue_",
        "leader_election_",
        "rest_client_",
        "process_",
        "kaos_",
    ];
    sources
        .iter()
        .flat_map(|path| {
            let text = std::fs::read_to_string(path)
                .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
            text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|word| FAMILIES.iter().any(|family| word.starts_with(family)))
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// An AccessGrant and a ThirdPartyService (with its client Secret) on the quickstart's agents
/// and MCP server, everything they name existing.
const ACCESS: &str = "apiVersion: v1\nkind: Secret\nmetadata: {name: github-oauth, namespace: default}\nstringData: {client-secret: s3cret}\n---\napiVersion: kaos.tools/v1alpha1\nkind: AccessGrant\nmetadata: {name: researchers, namespace: default}\nspec: {subjects: [{kind: Group, name: researchers}, {kind: Agent, name: coordinator}], resources: [{kind: Agent, name: worker}, {kind: MCPServer, name: echo-tools}]}\n---\napiVersion: kaos.tools/v1alpha1\nkind: ThirdPartyService\nmetadata: {name: github, namespace: default}\nspec: {clientID: kaos, clientSecretRef: {name: github-oauth, key: client-secret}, issuerURI: 'https://github.com', scopes: [{name: repo}], protectedResources: ['https://api.github.com'], routeRef: {name: github-egress}, access: [{agent: worker, scopes: [repo]}]}\n";

/// An agent with a budget, so that the agent controller's per-agent usage series exist (the
/// chart's dashboards and alerts query them). No proxy pod runs: its usage is reported unread.
const BUDGETED: &str = "apiVersion: kaos.tools/v1alpha1\nkind: Agent\nmetadata: {name: metered, namespace: default}\nspec: {modelAPI: llm-proxy, model: openai/gpt-4o, budget: {tokensPerDay: 100000}}\n";

/// A served kaos-testkit with the namespace `kaos-system`: its process, kubeconfig and a client.
async fn testkit_with_system_namespace(
    scratch: &Scratch,
) -> (Process, std::path::PathBuf, kube::Client) {
    let (testkit, kubeconfig) = serve_testkit(scratch, &[]);
    let client = client(&kubeconfig).await;
    apply_yaml(
        &client,
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: kaos-system}\n",
    )
    .await;
    (testkit, kubeconfig, client)
}
