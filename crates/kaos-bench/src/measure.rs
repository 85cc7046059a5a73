//! What a run reads: readiness and wiring from the API, the controllers' `/metrics`, their
//! processes' /proc, and the testkit's audit log (on kaos-testkit only).

use std::collections::{BTreeMap, BTreeSet};
use std::str::FromStr;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kaos_harness::processes::{sample, scrape};
use kube::api::{Api, ListParams};
use kube::core::DynamicObject;
use serde_json::Value;

use crate::cluster::Cluster;
use crate::workload::{AGENT_CONTROLLER, KINDS, Workload, deployments, kaos, kinds_of, services};

/// The metrics port and pid of a controller binary.
pub fn controller(cluster: &Cluster, binary: &str) -> (u16, u32) {
    let process = cluster.controller(binary).process;
    (process.metrics_port, process.pid())
}

/// Resources Ready, from the controllers' own `kaos_resources` gauges (updated every 5 s): cheap
/// to poll at 10 000 resources, unlike listing them all.
pub async fn ready_from_metrics(cluster: &Cluster) -> usize {
    let mut ready = 0.0;
    for controller in cluster.controllers() {
        let kinds = kinds_of(controller.binary);
        if kinds.is_empty() {
            continue;
        }
        let metrics = scrape(controller.process.metrics_port).await;
        for kind in kinds {
            ready += sample(
                &metrics,
                &format!("kaos_resources{{kind=\"{kind}\",phase=\"Ready\"}}"),
            );
        }
    }
    ready as usize
}

/// Resources Ready, by listing them.
pub async fn ready_count(client: &kube::Client, namespace: &str) -> anyhow::Result<usize> {
    let mut ready = 0;
    for kind in KINDS {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &kaos(kind));
        ready += api
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|o| o.data.pointer("/status/ready") == Some(&Value::Bool(true)))
            .count();
    }
    Ok(ready)
}

/// The agent controller's Deployments, with the Agent owning each.
pub async fn agent_deployments(
    client: &kube::Client,
    namespace: &str,
) -> anyhow::Result<Vec<(String, DynamicObject)>> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &deployments());
    let list = api.list(&ListParams::default().labels("app=agent")).await?;
    Ok(list
        .items
        .into_iter()
        .filter_map(|d| Some((agent_of(&d)?, d)))
        .collect())
}

/// The Agent a Deployment belongs to.
pub fn agent_of(deployment: &DynamicObject) -> Option<String> {
    let owners = deployment.metadata.owner_references.as_ref()?;
    Some(owners.iter().find(|o| o.kind == "Agent")?.name.clone())
}

pub async fn agent_services(client: &kube::Client, namespace: &str) -> anyhow::Result<usize> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &services());
    Ok(api
        .list_metadata(&ListParams::default().labels("app=agent"))
        .await?
        .items
        .len())
}

/// The value of an environment variable of any container of a Deployment.
pub fn env_var<'a>(deployment: &'a DynamicObject, name: &str) -> Option<&'a str> {
    deployment
        .data
        .pointer("/spec/template/spec/containers")?
        .as_array()?
        .iter()
        .flat_map(|c| c["env"].as_array().into_iter().flatten())
        .find(|e| e["name"] == name)?["value"]
        .as_str()
}

/// Agent Deployments whose `PEER_AGENTS` lists exactly the Agent's peers.
pub fn wired(workload: &Workload, deployments: &[(String, DynamicObject)]) -> usize {
    deployments
        .iter()
        .filter(|(agent, d)| {
            let listed: BTreeSet<String> = env_var(d, "PEER_AGENTS")
                .unwrap_or("")
                .split(',')
                .filter(|p| !p.is_empty())
                .map(str::to_string)
                .collect();
            workload.peers.get(agent) == Some(&listed)
        })
        .count()
}

/// The Agents, by name.
pub async fn agents(
    client: &kube::Client,
    namespace: &str,
) -> anyhow::Result<BTreeMap<String, DynamicObject>> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &kaos("Agent"));
    Ok(api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(|a| (a.metadata.name.clone().unwrap_or_default(), a))
        .collect())
}

/// Agent Deployments that have finished their last rollout and whose Agent's status already
/// mirrors it: until then a rollout in flight still owes the controllers a reconcile and a
/// status write, which would otherwise land in the idle window.
pub fn settled(
    deployments: &[(String, DynamicObject)],
    agents: &BTreeMap<String, DynamicObject>,
) -> usize {
    // Condition times to the second: the mirror and the Deployment may format them differently.
    let conditions = |status: Option<&Value>| -> Vec<(String, String, String)> {
        let list = status.and_then(|s| s["conditions"].as_array().cloned());
        list.unwrap_or_default()
            .iter()
            .map(|c| {
                let time = c["lastUpdateTime"].as_str().unwrap_or("");
                let status = c["status"].as_str().unwrap_or("");
                let kind = c["type"].as_str().unwrap_or("");
                (kind.into(), status.into(), time.chars().take(19).collect())
            })
            .collect()
    };
    deployments
        .iter()
        .filter(|(agent, d)| {
            let status = d.data.get("status");
            let observed = status.and_then(|s| s["observedGeneration"].as_i64());
            let mirror = agents
                .get(agent)
                .and_then(|a| a.data.pointer("/status/deployment"));
            observed.is_some()
                && observed == d.metadata.generation
                && conditions(status) == conditions(mirror)
        })
        .count()
}

/// Sum of `metadata.generation` over Deployments: the rollouts (1 at creation, +1 per change).
pub fn generations(deployments: &[(String, DynamicObject)]) -> i64 {
    deployments
        .iter()
        .map(|(_, d)| d.metadata.generation.unwrap_or(0))
        .sum()
}

/// `controller_runtime_reconcile_total` summed over its `result` labels.
pub fn reconciles(metrics: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("controller_runtime_reconcile_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// `rest_client_requests_total` (every request a controller sent, Leases included) summed by
/// HTTP method: how requests are counted where there is no audit log.
pub fn requests_by_method(metrics: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in metrics
        .lines()
        .filter(|l| l.starts_with("rest_client_requests_total{"))
    {
        let method = line
            .split("method=\"")
            .nth(1)
            .and_then(|m| m.split('"').next());
        let value = line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok());
        if let (Some(method), Some(value)) = (method, value) {
            *out.entry(method.to_string()).or_default() += value;
        }
    }
    out
}

/// Writes other than Lease renewals, from [`requests_by_method`]: POST, PATCH and DELETE. The
/// controllers send PUT only to renew their Lease (its one POST comes at startup), so leaving
/// PUT out leaves out exactly the Lease writes, as the audit-log figures do.
pub fn writes_from_metrics(by_method: &BTreeMap<String, f64>) -> f64 {
    ["POST", "PATCH", "DELETE"]
        .iter()
        .filter_map(|m| by_method.get(*m))
        .sum()
}

/// p50 and p99 from a Prometheus histogram's cumulative buckets.
pub fn quantiles(metrics: &str, family: &str) -> (f64, f64) {
    let mut buckets: Vec<(f64, f64)> = metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{family}_bucket{{")))
        .filter_map(|l| {
            let le = l.split("le=\"").nth(1)?.split('"').next()?;
            let bound = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((bound, l.rsplit(' ').next()?.parse().ok()?))
        })
        .collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total = buckets.last().map_or(0.0, |b| b.1);
    let at = |q: f64| {
        buckets
            .iter()
            .find(|(_, count)| *count >= q * total)
            .map_or(f64::NAN, |(bound, _)| *bound)
    };
    (at(0.5), at(0.99))
}

fn status_kib(pid: u32, field: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0.0)
}

/// Resident memory of a process now, in KiB.
pub fn resident_kib(pid: u32) -> f64 {
    status_kib(pid, "VmRSS:")
}

/// (peak resident MiB, CPU seconds) of a process from /proc.
pub fn process_usage(pid: u32) -> (f64, f64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i - 3)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (
        status_kib(pid, "VmHWM:") / 1024.0,
        (ticks(14) + ticks(15)) / 100.0,
    )
}

/// The agent controller's resident memory before any workload: once it leads (its watches then
/// run, on empty collections) and has settled.
pub async fn baseline_rss(cluster: &Cluster) -> f64 {
    let (port, pid) = controller(cluster, AGENT_CONTROLLER);
    for _ in 0..300 {
        let metrics = scrape(port).await;
        if sample(&metrics, "leader_election_master_status{") == 1.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    resident_kib(pid)
}

pub fn is_write(record: &Value) -> bool {
    matches!(
        record["verb"].as_str(),
        Some("create" | "update" | "patch" | "delete" | "deletecollection")
    )
}

/// `resource` or `resource/subresource`.
pub fn target(record: &Value) -> String {
    let resource = record["resource"].as_str().unwrap_or("");
    match record["subresource"].as_str().unwrap_or("") {
        "" => resource.to_string(),
        sub => format!("{resource}/{sub}"),
    }
}

pub fn time(record: &Value) -> Option<Timestamp> {
    Timestamp::from_str(record["time"].as_str()?).ok()
}

/// Writes by `resource[/subresource]` (Leases excluded), from `client` if given.
pub fn writes_by_target(records: &[Value], client: Option<&str>) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for record in records.iter().filter(|r| is_write(r)) {
        if client.is_some_and(|c| record["client"] != c) || record["resource"] == "leases" {
            continue;
        }
        *out.entry(target(record)).or_default() += 1;
    }
    out
}
