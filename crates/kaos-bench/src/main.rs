//! `kaos-bench`: M ModelAPIs, M MCPServers and N Agents (M = N/100, at least 1) on kaos-testkit
//! with the deployment simulator and RBAC, reconciled by the three real controller binaries, the
//! Agents listing each other in one of several peer topologies. Per topology and N it reports:
//! time to Ready (and wired to the peers) against the floor (a bare client making the same child
//! and status writes), the agent controller's reconciles and writes per Agent, Deployment writes
//! against rollouts, reconciles and writes in an idle window, resident memory per cached object,
//! and what switching every ModelAPI from Proxy to Hosted costs; plus requests per resource,
//! reconcile latency, memory and CPU per controller.
//!
//!   scripts/build-static.sh target/bench agent-controller modelapi-controller mcpserver-controller kaos-testkit
//!   KAOS_BIN_DIR=$PWD/target/bench cargo run -p kaos-bench -- --agents 100 --topology star --out bench.md
//! (the driver may be a debug build: the measured processes are the release binaries it runs)

mod measure;
mod report;
mod workload;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use kaos_tests::processes::{ChartCluster, Scratch, scrape};
use kube::api::{Api, ListParams};
use kube::core::DynamicObject;
use serde_json::Value;

use measure::{AGENT_CONTROLLER, agent_deployments, controller, env_var, is_write, time};
use report::{Change, ControllerStats, Outcome, Report};
use workload::{Topology, Workload, kaos};

#[derive(Parser)]
struct Args {
    /// Agent counts to measure (repeatable); one run per count and topology.
    #[arg(long = "agents", default_values_t = [100])]
    agents: Vec<usize>,
    /// Peer topologies to measure (repeatable); all of them by default.
    #[arg(long = "topology", value_enum)]
    topologies: Vec<Topology>,
    /// Seconds of the idle window after convergence.
    #[arg(long, default_value_t = 30)]
    idle: u64,
    /// Seconds a run may wait for convergence, and again for the ModelAPI change to propagate.
    #[arg(long, default_value_t = 600)]
    timeout: u64,
    /// Concurrent requests of the loader and of the floor client.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Also write the tables to this file.
    #[arg(long)]
    out: Option<std::path::PathBuf>,
}

/// Polling interval: listing everything is cheap up to 1 000 agents.
fn poll(agents: usize) -> Duration {
    if agents <= 1000 {
        Duration::from_millis(500)
    } else {
        Duration::from_secs(5)
    }
}

/// The credential the agent controller authenticates with, as the audit log names it.
fn agent_client(cluster: &ChartCluster) -> String {
    cluster
        .controllers
        .iter()
        .find(|(b, _)| b == AGENT_CONTROLLER)
        .map(|(_, replicas)| replicas[0].client.clone())
        .unwrap_or_default()
}

/// Waits until every resource is Ready, every agent Deployment lists exactly its peers and has
/// rolled out, and every Agent's status mirrors that rollout.
async fn converge(
    cluster: &ChartCluster,
    workload: &Workload,
    started: Instant,
    timeout: Duration,
) -> anyhow::Result<Outcome> {
    let total = workload.resources();
    loop {
        let elapsed = started.elapsed();
        // Beyond 1 000 agents the gauges (refreshed every 5 s) say when a listing is worth it.
        let gauges = if workload.agents > 1000 {
            Some(measure::ready_from_metrics(cluster).await)
        } else {
            None
        };
        let ready = match gauges {
            Some(ready) if ready < total => ready,
            _ => measure::ready_count(&cluster.admin).await?,
        };
        let mut progress = format!("{ready}/{total} Ready");
        if ready == total {
            let deployments = agent_deployments(&cluster.admin).await?;
            let wired = measure::wired(workload, &deployments);
            let settled = measure::settled(&deployments, &measure::agents(&cluster.admin).await?);
            if wired == workload.agents && settled == workload.agents {
                return Ok(Outcome::Done(elapsed));
            }
            progress.push_str(&format!(
                ", {wired}/{n} wired to their peers, {settled}/{n} rolled out and observed",
                n = workload.agents
            ));
        }
        if elapsed >= timeout {
            return Ok(Outcome::TimedOut {
                progress,
                after: elapsed,
            });
        }
        tokio::time::sleep(poll(workload.agents)).await;
    }
}

/// Switches every ModelAPI to Hosted and measures until every agent Deployment's
/// `MODEL_API_URL` has moved off its ModelAPI's previous endpoint.
async fn change(
    cluster: &ChartCluster,
    workload: &Workload,
    timeout: Duration,
) -> anyhow::Result<Change> {
    let admin = &cluster.admin;
    let client = agent_client(cluster);
    let model_apis: Api<DynamicObject> =
        Api::namespaced_with(admin.clone(), "default", &kaos("ModelAPI"));
    let previous: BTreeMap<String, String> = model_apis
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(|m| {
            let endpoint = m.data.pointer("/status/endpoint").and_then(Value::as_str);
            let endpoint = endpoint.unwrap_or("").to_string();
            (m.metadata.name.unwrap_or_default(), endpoint)
        })
        .collect();
    let rollouts_before = measure::generations(&agent_deployments(admin).await?);
    let from = cluster.audit().await.len();
    workload::switch_to_hosted(admin, workload.shared).await?;
    let started = Instant::now();
    let outcome = loop {
        let elapsed = started.elapsed();
        let moved = agent_deployments(admin)
            .await?
            .iter()
            .filter(|(agent, d)| {
                let old = workload.model_api.get(agent).and_then(|m| previous.get(m));
                env_var(d, "MODEL_API_URL")
                    .is_some_and(|url| !url.is_empty() && Some(url) != old.map(String::as_str))
            })
            .count();
        if moved == workload.agents {
            break Outcome::Done(elapsed);
        }
        if elapsed >= timeout {
            break Outcome::TimedOut {
                progress: format!("{moved}/{} Deployments moved", workload.agents),
                after: elapsed,
            };
        }
        tokio::time::sleep(poll(workload.agents) / 2).await;
    };
    let deployment_writes = |records: &[Value]| -> Vec<Value> {
        records
            .iter()
            .filter(|r| is_write(r) && r["client"] == client.as_str())
            .filter(|r| r["resource"] == "deployments" && r["subresource"] == "")
            .cloned()
            .collect()
    };
    let snapshot = cluster.audit().await;
    let patched = snapshot[from..]
        .iter()
        .find(|r| is_write(r) && r["resource"] == "modelapis")
        .and_then(time);
    let last = deployment_writes(&snapshot[from..])
        .iter()
        .filter_map(time)
        .max();
    let last_write = match (patched, outcome.done(), last) {
        (Some(patched), Some(_), Some(last)) => {
            Duration::try_from(last.duration_since(patched)).ok()
        }
        _ => None,
    };
    // Stragglers: writes that come after every Deployment has moved still count.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let audit = cluster.audit().await;
    Ok(Change {
        outcome,
        last_write,
        deployment_writes: deployment_writes(&audit[from..]).len(),
        rollouts: measure::generations(&agent_deployments(admin).await?) - rollouts_before,
    })
}

/// Stops the controllers (SIGTERM, then kill after 10 s), so the floor runs on a quiet server
/// whatever the controllers were still doing.
async fn stop_controllers(cluster: &mut ChartCluster) {
    let replicas = || cluster.controllers.iter().flat_map(|(_, r)| r.iter());
    for replica in replicas() {
        replica.process.sigterm();
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    for (_, replicas) in &mut cluster.controllers {
        for replica in replicas.iter_mut() {
            while replica.process.is_running() && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let _ = replica.process.child.kill();
            let _ = replica.process.child.wait();
        }
    }
}

async fn run(topology: Topology, agents: usize, args: &Args) -> anyhow::Result<Report> {
    let workload = Workload::new(topology, agents);
    let timeout = Duration::from_secs(args.timeout);
    let scratch = Scratch::new(&format!("bench-{}-{agents}", topology.name()));
    let mut cluster = ChartCluster::start(
        &scratch,
        &["--watch-history", "200000"],
        1,
        &[("CONTROLLER_LOG_LEVEL", "warn")],
    )
    .await;
    let admin = cluster.admin.clone();
    let (agent_port, agent_pid) = controller(&cluster, AGENT_CONTROLLER);
    let client = agent_client(&cluster);
    let rss_baseline_kib = measure::baseline_rss(&cluster).await;

    let started = Instant::now();
    workload::apply_all(&admin, workload.objects(), args.concurrency)
        .await
        .context("creating the resources")?;
    let converge = converge(&cluster, &workload, started, timeout).await?;
    let audit = cluster.audit().await;
    let reconciles = measure::reconciles(&scrape(agent_port).await);
    let writes = measure::writes_by_target(&audit, Some(&client));
    let rollouts = measure::generations(&agent_deployments(&admin).await?);

    eprintln!(
        "kaos-bench: {} × {agents}: idle {} s …",
        topology.name(),
        args.idle
    );
    tokio::time::sleep(Duration::from_secs(args.idle)).await;
    let idle_audit = cluster.audit().await;
    let idle_writes = measure::writes_by_target(&idle_audit[audit.len()..], None);
    let idle_reconciles = measure::reconciles(&scrape(agent_port).await) - reconciles;
    let rss_end_kib = measure::resident_kib(agent_pid);
    let cached_objects = workload.resources()
        + agent_deployments(&admin).await?.len()
        + measure::agent_services(&admin).await?;

    let controller_clients: BTreeMap<String, String> = cluster
        .controllers
        .iter()
        .map(|(binary, replicas)| (replicas[0].client.clone(), binary.clone()))
        .collect();
    let mut controllers: BTreeMap<String, ControllerStats> = BTreeMap::new();
    for (binary, replicas) in &cluster.controllers {
        let metrics = scrape(replicas[0].process.metrics_port).await;
        let (peak, cpu) = measure::process_usage(replicas[0].process.pid());
        let resident = kaos_tests::processes::sample(&metrics, "process_resident_memory_bytes");
        controllers.insert(
            binary.clone(),
            ControllerStats {
                requests: BTreeMap::new(),
                latency: measure::quantiles(&metrics, "controller_runtime_reconcile_time_seconds"),
                memory: (peak, resident / (1024.0 * 1024.0)),
                cpu,
            },
        );
    }
    for record in &audit {
        let Some(binary) = controller_clients.get(record["client"].as_str().unwrap_or("")) else {
            continue;
        };
        let resources = if binary == AGENT_CONTROLLER {
            workload.agents
        } else {
            workload.shared
        };
        if let Some(stats) = controllers.get_mut(binary) {
            let verb = record["verb"].as_str().unwrap_or("").to_string();
            *stats.requests.entry(verb).or_default() += 1.0 / resources as f64;
        }
    }

    eprintln!(
        "kaos-bench: {} × {agents}: ModelAPI change …",
        topology.name()
    );
    let change = change(&cluster, &workload, timeout).await?;
    stop_controllers(&mut cluster).await;
    let floor = workload::floor(&admin, workload.resources(), args.concurrency).await?;
    Ok(Report {
        topology,
        agents,
        converge,
        floor,
        reconciles,
        writes,
        rollouts,
        idle_reconciles,
        idle_writes,
        rss_baseline_kib,
        rss_end_kib,
        cached_objects,
        change,
        controllers,
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = Args::parse();
    if args.topologies.is_empty() {
        args.topologies = Topology::ALL.to_vec();
    }
    let mut reports = Vec::new();
    for &agents in &args.agents {
        for &topology in &args.topologies {
            eprintln!("kaos-bench: {} × {agents} agents …", topology.name());
            match run(topology, agents, &args).await {
                Ok(report) => {
                    let time = match &report.converge {
                        Outcome::Done(d) => format!("ready in {:.1} s", d.as_secs_f64()),
                        Outcome::TimedOut { progress, after } => format!(
                            "not converged: {progress} after {:.0} s",
                            after.as_secs_f64()
                        ),
                    };
                    eprintln!(
                        "kaos-bench: {} × {agents}: {time} (floor {:.1} s)",
                        topology.name(),
                        report.floor.as_secs_f64()
                    );
                    reports.push(report);
                }
                Err(e) => eprintln!("kaos-bench: {} × {agents} failed: {e:#}", topology.name()),
            }
        }
    }
    let tables = report::markdown(&reports, args.idle);
    println!("{tables}");
    if let Some(path) = &args.out {
        std::fs::write(path, &tables).with_context(|| format!("writing {}", path.display()))?;
    }
    // convergence time against N, for the chart in docs/benchmarks.md
    let points: Vec<String> = reports
        .iter()
        .filter_map(|r| {
            let converge = r.converge.done()?;
            Some(format!(
                "{} {} {:.2} {:.2}",
                r.topology.name(),
                r.agents,
                converge.as_secs_f64(),
                r.floor.as_secs_f64()
            ))
        })
        .collect();
    eprintln!("points: {}", points.join("; "));
    Ok(())
}
