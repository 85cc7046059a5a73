//! `kaos-bench`: M ModelAPIs, M MCPServers and N Agents (M = N/100, at least 1) on kaos-testkit
//! with the deployment simulator and RBAC, reconciled by the three real controller binaries.
//! Reports time to Ready, API requests per resource by verb, writes in an idle window, reconcile
//! latency, memory and CPU, and the floor: a bare client making the same child and status writes.
//! Time to Ready is polled by listing every 0.5 s up to 1 000 agents; beyond, the controllers'
//! `kaos_resources` gauges (refreshed every 5 s) decide when to list, so it is exact to ~5 s.
//!
//!   scripts/build-static.sh target/bench agent-controller modelapi-controller mcpserver-controller kaos-testkit
//!   KAOS_BIN_DIR=$PWD/target/bench cargo run -p kaos-bench -- --agents 100 --agents 1000 --agents 10000
//! (the driver may be a debug build: the measured processes are the release binaries it runs)

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use futures::{StreamExt, stream};
use kaos_tests::processes::{ChartCluster, Scratch, sample, scrape};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::{Value, json};

#[derive(Parser)]
struct Args {
    /// Agent counts to measure, one run each.
    #[arg(long = "agents", default_values_t = [100])]
    agents: Vec<usize>,
    /// Seconds of the idle window after convergence.
    #[arg(long, default_value_t = 60)]
    idle: u64,
    /// Concurrent requests of the loader and of the floor client.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
}

struct Report {
    agents: usize,
    shared: usize,
    converge: Duration,
    floor: Duration,
    requests: BTreeMap<String, BTreeMap<String, u64>>,
    idle_writes: usize,
    latency: BTreeMap<String, (f64, f64)>,
    memory: BTreeMap<String, (f64, f64)>,
    cpu: BTreeMap<String, f64>,
}

fn kaos(kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk("kaos.tools", "v1alpha1", kind))
}

fn objects(agents: usize, shared: usize) -> Vec<(ApiResource, Value)> {
    let mut out = Vec::new();
    for i in 0..shared {
        out.push((kaos("ModelAPI"), json!({"apiVersion": "kaos.tools/v1alpha1", "kind": "ModelAPI", "metadata": {"name": format!("llm-{i}")},
            "spec": {"mode": "Proxy", "proxyConfig": {"models": ["*"]}}})));
        out.push((kaos("MCPServer"), json!({"apiVersion": "kaos.tools/v1alpha1", "kind": "MCPServer", "metadata": {"name": format!("tools-{i}")},
            "spec": {"runtime": "python-string", "params": "x = 1"}})));
    }
    for i in 0..agents {
        let dependency = i % shared;
        out.push((kaos("Agent"), json!({"apiVersion": "kaos.tools/v1alpha1", "kind": "Agent", "metadata": {"name": format!("agent-{i}")},
            "spec": {"modelAPI": format!("llm-{dependency}"), "model": "gpt-4o", "mcpServers": [format!("tools-{dependency}")],
                     "config": {"instructions": "benchmark"}}})));
    }
    out
}

async fn apply_all(
    client: &kube::Client,
    objects: Vec<(ApiResource, Value)>,
    concurrency: usize,
) -> anyhow::Result<()> {
    let results: Vec<anyhow::Result<()>> = stream::iter(objects)
        .map(|(resource, object)| {
            let client = client.clone();
            async move {
                let api: Api<DynamicObject> = Api::namespaced_with(client, "default", &resource);
                let name = object["metadata"]["name"]
                    .as_str()
                    .unwrap_or("")
                    .to_string();
                api.patch(
                    &name,
                    &PatchParams::apply("kaos-bench").force(),
                    &Patch::Apply(&object),
                )
                .await?;
                Ok(())
            }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    results.into_iter().collect()
}

/// Resources Ready, from the controllers' own `kaos_resources` gauges (updated every 5 s): cheap
/// to poll at 10 000 resources, unlike listing them all.
async fn ready_from_metrics(cluster: &ChartCluster) -> usize {
    let mut ready = 0.0;
    for (binary, replicas) in &cluster.controllers {
        let kind = match binary.as_str() {
            "agent-controller" => "Agent",
            "modelapi-controller" => "ModelAPI",
            _ => "MCPServer",
        };
        let metrics = scrape(replicas[0].process.metrics_port).await;
        ready += sample(
            &metrics,
            &format!("kaos_resources{{kind=\"{kind}\",phase=\"Ready\"}}"),
        );
    }
    ready as usize
}

/// Resources Ready, by listing them (the exact check once the gauges say all are).
async fn ready_count(client: &kube::Client) -> anyhow::Result<usize> {
    let mut ready = 0;
    for kind in ["Agent", "ModelAPI", "MCPServer"] {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &kaos(kind));
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

/// p50 and p99 from a Prometheus histogram's cumulative buckets.
fn quantiles(metrics: &str, family: &str) -> (f64, f64) {
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

/// (peak resident MiB, CPU seconds) of a process from /proc.
fn process_usage(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let peak_kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0.0);
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
    (peak_kb / 1024.0, (ticks(14) + ticks(15)) / 100.0)
}

/// The floor: the child and status writes the controllers make, sent by a bare client.
async fn floor(
    client: &kube::Client,
    agents: usize,
    shared: usize,
    concurrency: usize,
) -> anyhow::Result<Duration> {
    let deployments = ApiResource::from_gvk(&GroupVersionKind::gvk("apps", "v1", "Deployment"));
    let services = ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "Service"));
    let mut writes = Vec::new();
    for i in 0..(agents + 2 * shared) {
        let name = format!("floor-{i}");
        writes.push((deployments.clone(), json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": {"app": "floor"}},
            "spec": {"selector": {"matchLabels": {"app": name}}, "template": {"metadata": {"labels": {"app": name}},
                     "spec": {"containers": [{"name": "c", "image": "i", "env": [{"name": "A", "value": "1"}]}]}}}})));
        writes.push((
            services.clone(),
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"selector": {"app": name}, "ports": [{"name": "http", "port": 8000}]}}),
        ));
    }
    let started = Instant::now();
    apply_all(client, writes, concurrency).await?;
    // Two status writes per resource (Pending, then Ready), as the controllers make.
    let statuses: Vec<(usize, u32)> = (0..(agents + 2 * shared))
        .flat_map(|i| [(i, 0), (i, 1)])
        .collect();
    let results: Vec<Result<DynamicObject, kube::Error>> = stream::iter(statuses)
        .map(|(i, round)| {
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), "default", &deployments);
            async move {
                let body = json!({"status": {"observedGeneration": 1, "replicas": round}});
                api.patch_status(
                    &format!("floor-{i}"),
                    &PatchParams::default(),
                    &Patch::Merge(&body),
                )
                .await
            }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    for r in results {
        r?;
    }
    Ok(started.elapsed())
}

async fn run(agents: usize, args: &Args) -> anyhow::Result<Report> {
    let shared = (agents / 100).max(1);
    let scratch = Scratch::new(&format!("bench-{agents}"));
    let cluster = ChartCluster::start(
        &scratch,
        &["--watch-history", "200000"],
        1,
        &[("CONTROLLER_LOG_LEVEL", "warn")],
    )
    .await;
    let admin = cluster.admin.clone();
    let started = Instant::now();
    apply_all(&admin, objects(agents, shared), args.concurrency)
        .await
        .context("creating the resources")?;
    let total = agents + 2 * shared;
    let mut converge;
    loop {
        converge = started.elapsed();
        // Listing everything every half second is cheap up to 1 000 agents; beyond, the gauges
        // say when a (costly) listing is worth it.
        let worth_listing = agents <= 1000 || ready_from_metrics(&cluster).await >= total;
        if worth_listing && ready_count(&admin).await? == total {
            break;
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(3600),
            "not converged within an hour"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let idle_from = cluster.audit().await.len();
    tokio::time::sleep(Duration::from_secs(args.idle)).await;
    let audit = cluster.audit().await;
    let writes = |r: &&Value| {
        matches!(
            r["verb"].as_str(),
            Some("create" | "update" | "patch" | "delete")
        )
    };
    let controller_clients: BTreeMap<String, String> = cluster
        .controllers
        .iter()
        .flat_map(|(binary, replicas)| {
            replicas
                .iter()
                .map(move |r| (r.client.clone(), binary.clone()))
        })
        .collect();
    let idle_writes = audit[idle_from..]
        .iter()
        .filter(writes)
        .filter(|r| controller_clients.contains_key(r["client"].as_str().unwrap_or("")))
        .filter(|r| r["resource"] != "leases")
        .count();
    let mut requests: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    for record in &audit[..idle_from] {
        if let Some(binary) = controller_clients.get(record["client"].as_str().unwrap_or("")) {
            *requests
                .entry(binary.clone())
                .or_default()
                .entry(record["verb"].as_str().unwrap_or("").to_string())
                .or_default() += 1;
        }
    }
    let mut latency = BTreeMap::new();
    let mut memory = BTreeMap::new();
    let mut cpu = BTreeMap::new();
    for (binary, replicas) in &cluster.controllers {
        let metrics = scrape(replicas[0].process.metrics_port).await;
        latency.insert(
            binary.clone(),
            quantiles(&metrics, "controller_runtime_reconcile_time_seconds"),
        );
        let (peak, seconds) = process_usage(replicas[0].process.pid());
        let resident = sample(&metrics, "process_resident_memory_bytes") / (1024.0 * 1024.0);
        memory.insert(binary.clone(), (peak, resident));
        cpu.insert(binary.clone(), seconds);
    }
    let floor = floor(&admin, agents, shared, args.concurrency).await?;
    Ok(Report {
        agents,
        shared,
        converge,
        floor,
        requests,
        idle_writes,
        latency,
        memory,
        cpu,
    })
}

fn markdown(reports: &[Report], idle: u64) -> String {
    let mut out = String::from(
        "| agents | ModelAPIs + MCPServers | time to Ready | floor | ratio | idle writes | \n|---|---|---|---|---|---|\n",
    );
    for r in reports {
        out.push_str(&format!(
            "| {} | {} + {} | {:.1} s | {:.1} s | {:.1}× | {} in {idle} s |\n",
            r.agents,
            r.shared,
            r.shared,
            r.converge.as_secs_f64(),
            r.floor.as_secs_f64(),
            r.converge.as_secs_f64() / r.floor.as_secs_f64().max(0.001),
            r.idle_writes
        ));
    }
    out.push_str("\n| agents | controller | requests by verb (per resource) | reconcile p50 / p99 | peak RSS / RSS at end | CPU |\n|---|---|---|---|---|---|\n");
    for r in reports {
        let resources = |binary: &str| {
            if binary == "agent-controller" {
                r.agents
            } else {
                r.shared
            }
        };
        for (binary, verbs) in &r.requests {
            let per: Vec<String> = verbs
                .iter()
                .map(|(v, n)| format!("{v} {:.2}", *n as f64 / resources(binary) as f64))
                .collect();
            let (p50, p99) = r.latency.get(binary).copied().unwrap_or_default();
            let (peak, end) = r.memory.get(binary).copied().unwrap_or_default();
            out.push_str(&format!(
                "| {} | {binary} | {} | ≤ {p50} s / ≤ {p99} s | {peak:.0} MiB / {end:.0} MiB | {:.1} s |\n",
                r.agents, per.join(", "), r.cpu.get(binary).copied().unwrap_or_default()
            ));
        }
    }
    out
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut reports = Vec::new();
    for &agents in &args.agents {
        eprintln!("kaos-bench: {agents} agents …");
        let report = run(agents, &args).await?;
        eprintln!(
            "kaos-bench: {agents} agents ready in {:.1} s (floor {:.1} s)",
            report.converge.as_secs_f64(),
            report.floor.as_secs_f64()
        );
        reports.push(report);
    }
    println!("{}", markdown(&reports, args.idle));
    // convergence time against N, for the chart in docs/benchmarks.md
    let points: Vec<String> = reports
        .iter()
        .map(|r| {
            format!(
                "{} {:.2} {:.2}",
                r.agents,
                r.converge.as_secs_f64(),
                r.floor.as_secs_f64()
            )
        })
        .collect();
    eprintln!("points: {}", points.join("; "));
    Ok(())
}
