//! `kaos-bench`: M ModelAPIs, M MCPServers and N Agents (M = N/100, at least 1) on kaos-testkit
//! with the deployment simulator and RBAC, reconciled by the real controller binaries, the
//! Agents listing each other in one of several peer topologies. Per topology and N it reports:
//! time to Ready (and wired to the peers) against the floor (a bare client writing the same final
//! objects: the primaries, their children and their statuses) and the earlier minimal floor, the
//! agent controller's reconciles and writes per Agent, Deployment writes against rollouts,
//! reconciles and writes in an idle window, resident memory per cached object, and what switching
//! every ModelAPI from Proxy to Hosted costs; plus requests per resource, reconcile latency,
//! memory and CPU per controller.
//!
//! Every figure goes, unrounded, into a raw results file (`--results DIR`, by default
//! docs/benchmarks/results) stamped with the commit, binaries, toolchain, machine, date, command
//! line and load average (`provenance`); scripts/bench-report.py generates docs/benchmarks.md's
//! current figures and docs/benchmarks.svg from those files.
//!
//!   scripts/build-static.sh target/bench agent-controller modelapi-controller mcpserver-controller memorystore-controller authz-controller workflow-controller kaos-testkit
//!   KAOS_BIN_DIR=$PWD/target/bench cargo run -p kaos-bench -- --agents 100 --topology star --out bench.md
//! (the driver may be a debug build: the measured processes are the release binaries it runs)
//!
//! `--kubeconfig PATH` runs the same workloads on any cluster instead (e.g. the real plane of
//! `scripts/control-plane up DIR`, with `DIR/kubeconfig`), as that kubeconfig's user
//! (cluster-admin): it installs the CRDs and the MCP runtime registry if missing, starts the
//! controller binaries out of cluster with that kubeconfig and the chart's environment,
//! runs each workload in a fresh namespace `kaos-bench-<topology>-<N>` and its floor in
//! `kaos-bench-<topology>-<N>-floor`, and deletes both at the end. Without the testkit's audit
//! log, writes by kind and the ModelAPI change's Deployment writes are reported as n/a; requests
//! are counted from the controllers' own `rest_client_requests_total` (by HTTP method) and
//! writes as its POST, PATCH and DELETE.
//!
//!   KAOS_BIN_DIR=$PWD/target/bench cargo run -p kaos-bench -- --kubeconfig /tmp/plane/kubeconfig --agents 1000 --topology none

mod budgets;
mod cluster;
mod fake_proxy;
mod measure;
mod provenance;
mod report;
mod results;
mod workload;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use futures::StreamExt;
use kaos_harness::processes::{Scratch, scrape};
use kube::api::{Api, ListParams};
use kube::core::DynamicObject;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher;
use serde_json::{Value, json};

use cluster::Cluster;
use measure::{agent_deployments, controller, env_var, is_write, time};
use report::{Change, ControllerStats, Outcome, Report};
use results::Results;
use workload::{AGENT_CONTROLLER, Topology, Workload, kaos, kinds_of};

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
    /// Where the raw results file goes: `<DIR>/<date>-<short commit>-<label>.json`, rewritten
    /// after each run. docs/benchmarks.md's current figures are generated from the files in
    /// docs/benchmarks/results (scripts/bench-report.py).
    #[arg(long, value_name = "DIR", default_value_os_t = kaos_harness::repo_root().join("docs/benchmarks/results"))]
    results: std::path::PathBuf,
    /// The results file's label (letters, digits, `-`); by default the agent counts and
    /// topologies, e.g. `1000-none-pairs-mesh`.
    #[arg(long)]
    label: Option<String>,
    /// A note kept in the results file's stamp and shown with its figures.
    #[arg(long)]
    note: Option<String>,
    /// Run on the cluster of this kubeconfig (cluster-admin) instead of a kaos-testkit started
    /// for each run; each run uses a fresh namespace, deleted at the end.
    #[arg(long, value_name = "PATH")]
    kubeconfig: Option<std::path::PathBuf>,
    /// Measure what reading budgeted agents' usage costs instead (`budgets`: every agent
    /// budgeted, no peers, on kaos-testkit only); raw results in `<DIR>/budgets`.
    #[arg(long)]
    budgets: bool,
    #[command(flatten)]
    budget: budgets::BudgetArgs,
}

/// Polling interval: listing everything is cheap up to 1 000 agents.
fn poll(agents: usize) -> Duration {
    if agents <= 1000 {
        Duration::from_millis(500)
    } else {
        Duration::from_secs(5)
    }
}

/// Waits until every resource is Ready, every agent Deployment lists exactly its peers and has
/// rolled out, and every Agent's status mirrors that rollout.
async fn converge(
    cluster: &Cluster,
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
            _ => measure::ready_count(&cluster.admin, &cluster.namespace).await?,
        };
        let mut progress = format!("{ready}/{total} Ready");
        if ready == total {
            let (admin, namespace) = (&cluster.admin, &cluster.namespace);
            let deployments = agent_deployments(admin, namespace).await?;
            let wired = measure::wired(workload, &deployments);
            let settled = measure::settled(&deployments, &measure::agents(admin, namespace).await?);
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
    cluster: &Cluster,
    workload: &Workload,
    timeout: Duration,
) -> anyhow::Result<Change> {
    let (admin, namespace) = (&cluster.admin, cluster.namespace.as_str());
    let agent_client = cluster.controller(AGENT_CONTROLLER).audit_client;
    let model_apis: Api<DynamicObject> =
        Api::namespaced_with(admin.clone(), namespace, &kaos("ModelAPI"));
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
    let rollouts_before = measure::generations(&agent_deployments(admin, namespace).await?);
    // Watched, not listed again and again: at 10 000 agents each listing of every Deployment
    // would cost the server more than the change itself.
    let deployments: Api<DynamicObject> =
        Api::namespaced_with(admin.clone(), namespace, &workload::deployments());
    // Watch errors are retried with the watcher's backoff: they delay, never end, the measurement.
    let mut events = watcher::watcher(deployments, watcher::Config::default().labels("app=agent"))
        .default_backoff()
        .filter_map(|event| async move { event.ok() })
        .boxed();
    let mut urls: BTreeMap<String, String> = BTreeMap::new();
    while let Some(event) = events.next().await {
        match event {
            watcher::Event::InitApply(d) => {
                if let Some(agent) = measure::agent_of(&d) {
                    urls.insert(
                        agent,
                        env_var(&d, "MODEL_API_URL").unwrap_or("").to_string(),
                    );
                }
            }
            watcher::Event::InitDone => break,
            _ => {}
        }
    }
    let moved_from_previous = |agent: &str, url: &str| {
        let old = workload.model_api.get(agent).and_then(|m| previous.get(m));
        !url.is_empty() && Some(url) != old.map(String::as_str)
    };
    let from = cluster.audit().await.map_or(0, |a| a.len());
    workload::switch_to_hosted(admin, namespace, workload.shared).await?;
    let started = Instant::now();
    let outcome = loop {
        let moved = urls
            .iter()
            .filter(|(a, u)| moved_from_previous(a, u))
            .count();
        if moved == workload.agents {
            break Outcome::Done(started.elapsed());
        }
        let remaining = timeout.saturating_sub(started.elapsed());
        match tokio::time::timeout(remaining, events.next()).await {
            Ok(Some(watcher::Event::Apply(d) | watcher::Event::InitApply(d))) => {
                if let Some(agent) = measure::agent_of(&d) {
                    urls.insert(
                        agent,
                        env_var(&d, "MODEL_API_URL").unwrap_or("").to_string(),
                    );
                }
            }
            Ok(Some(_)) => {}
            Ok(None) => anyhow::bail!("the Deployment watch ended"),
            Err(_) => {
                break Outcome::TimedOut {
                    progress: format!("{moved}/{} Deployments moved", workload.agents),
                    after: started.elapsed(),
                };
            }
        }
    };
    drop(events);
    let deployment_writes = |records: &[Value]| -> Vec<Value> {
        records
            .iter()
            .filter(|r| is_write(r) && r["client"].as_str() == agent_client)
            .filter(|r| r["resource"] == "deployments" && r["subresource"] == "")
            .cloned()
            .collect()
    };
    let last_write = match cluster.audit().await {
        Some(snapshot) => {
            let patched = snapshot[from..]
                .iter()
                .find(|r| is_write(r) && r["resource"] == "modelapis")
                .and_then(time);
            let last = deployment_writes(&snapshot[from..])
                .iter()
                .filter_map(time)
                .max();
            match (patched, outcome.done(), last) {
                (Some(patched), Some(_), Some(last)) => {
                    Duration::try_from(last.duration_since(patched)).ok()
                }
                _ => None,
            }
        }
        None => None,
    };
    // Stragglers: writes that come after every Deployment has moved still count.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let deployment_writes = cluster
        .audit()
        .await
        .map(|audit| deployment_writes(&audit[from..]).len());
    Ok(Change {
        outcome,
        last_write,
        deployment_writes,
        rollouts: measure::generations(&agent_deployments(admin, namespace).await?)
            - rollouts_before,
    })
}

async fn run(topology: Topology, agents: usize, args: &Args) -> anyhow::Result<Report> {
    let workload = Workload::new(topology, agents);
    let timeout = Duration::from_secs(args.timeout);
    let run_name = format!("bench-{}-{agents}", topology.name());
    let scratch = Scratch::new(&run_name);
    let mut cluster = match &args.kubeconfig {
        Some(kubeconfig) => {
            Cluster::existing(&scratch, kubeconfig, &format!("kaos-{run_name}")).await?
        }
        None => Cluster::testkit(&scratch).await,
    };
    let result = measure_run(&mut cluster, &workload, topology, args, timeout).await;
    cluster.stop_controllers().await;
    cluster.clean_up().await?;
    result
}

async fn measure_run(
    cluster: &mut Cluster,
    workload: &Workload,
    topology: Topology,
    args: &Args,
    timeout: Duration,
) -> anyhow::Result<Report> {
    let agents = workload.agents;
    let (admin, namespace) = (cluster.admin.clone(), cluster.namespace.clone());
    let (agent_port, agent_pid) = controller(cluster, AGENT_CONTROLLER);
    let agent_client = cluster
        .controller(AGENT_CONTROLLER)
        .audit_client
        .map(str::to_string);
    let rss_baseline_kib = measure::baseline_rss(cluster).await;
    // Where there is no audit log, requests are the controllers' own counts from here on.
    let mut requests_before = BTreeMap::new();
    for c in cluster.controllers() {
        let metrics = scrape(c.process.metrics_port).await;
        requests_before.insert(c.binary.to_string(), measure::requests_by_method(&metrics));
    }
    let requests_since = |before: &BTreeMap<String, f64>, metrics: &str| {
        let mut now = measure::requests_by_method(metrics);
        for (method, n) in before {
            *now.entry(method.clone()).or_default() -= n;
        }
        now
    };

    let started = Instant::now();
    workload::apply_all(&admin, &namespace, workload.objects(), args.concurrency)
        .await
        .context("creating the resources")?;
    let converge = converge(cluster, workload, started, timeout).await?;
    let audit = cluster.audit().await;
    let agent_metrics = scrape(agent_port).await;
    let reconciles = measure::reconciles(&agent_metrics);
    let writes = audit
        .as_ref()
        .map(|audit| measure::writes_by_target(audit, agent_client.as_deref()));
    let metric_writes = measure::writes_from_metrics(&requests_since(
        &requests_before[AGENT_CONTROLLER],
        &agent_metrics,
    ));
    let rollouts = measure::generations(&agent_deployments(&admin, &namespace).await?);
    // Every controller's metrics when Ready (its request counts, used without an audit log).
    let mut metrics_at_ready = BTreeMap::new();
    for c in cluster.controllers() {
        let metrics = scrape(c.process.metrics_port).await;
        metrics_at_ready.insert(c.binary.to_string(), metrics);
    }

    let final_objects = workload::FinalObjects::read(&admin, &namespace, workload)
        .await
        .context("reading the final objects for the floor")?;

    eprintln!(
        "kaos-bench: {} × {agents}: idle {} s …",
        topology.name(),
        args.idle
    );
    tokio::time::sleep(Duration::from_secs(args.idle)).await;
    let idle_reconciles = measure::reconciles(&scrape(agent_port).await) - reconciles;
    let idle_writes = match (&audit, cluster.audit().await) {
        (Some(audit), Some(idle_audit)) => {
            measure::writes_by_target(&idle_audit[audit.len()..], None)
        }
        // Without an audit log: every controller's POST, PATCH and DELETE in the window.
        _ => {
            let mut by_method = BTreeMap::new();
            for c in cluster.controllers() {
                let now = scrape(c.process.metrics_port).await;
                let before = measure::requests_by_method(&metrics_at_ready[c.binary]);
                for (method, n) in requests_since(&before, &now) {
                    if ["POST", "PATCH", "DELETE"].contains(&method.as_str()) && n > 0.0 {
                        by_method.insert(method, n as usize);
                    }
                }
            }
            by_method
        }
    };
    let rss_end_kib = measure::resident_kib(agent_pid);
    let cached_objects = workload.resources()
        + agent_deployments(&admin, &namespace).await?.len()
        + measure::agent_services(&admin, &namespace).await?;

    let mut controllers: BTreeMap<String, ControllerStats> = BTreeMap::new();
    for c in cluster.controllers() {
        // Per resource of its kinds: a controller with none in the run (the memorystore and
        // authz controllers) only idles, and stays out of the table.
        let resources = kinds_of(c.binary)
            .iter()
            .map(|kind| workload.count(kind))
            .sum::<usize>() as f64;
        if resources == 0.0 {
            continue;
        }
        let metrics = scrape(c.process.metrics_port).await;
        let (peak, cpu) = measure::process_usage(c.process.pid());
        let resident = kaos_harness::processes::sample(&metrics, "process_resident_memory_bytes");
        // By verb from the audit log, else by HTTP method from the controller's own counts.
        let requests = match (&audit, c.audit_client) {
            (Some(audit), Some(client)) => {
                let mut by_verb: BTreeMap<String, f64> = BTreeMap::new();
                for record in audit.iter().filter(|r| r["client"] == client) {
                    let verb = record["verb"].as_str().unwrap_or("").to_string();
                    *by_verb.entry(verb).or_default() += 1.0 / resources;
                }
                by_verb
            }
            _ => requests_since(&requests_before[c.binary], &metrics_at_ready[c.binary])
                .into_iter()
                .map(|(method, n)| (method, n / resources))
                .collect(),
        };
        controllers.insert(
            c.binary.to_string(),
            ControllerStats {
                requests,
                latency: measure::quantiles(&metrics, "controller_runtime_reconcile_time_seconds"),
                memory: (peak, resident / (1024.0 * 1024.0)),
                cpu,
            },
        );
    }

    eprintln!(
        "kaos-bench: {} × {agents}: ModelAPI change …",
        topology.name()
    );
    let change = change(cluster, workload, timeout).await?;
    cluster.stop_controllers().await;
    let floor_namespace = cluster.floor_namespace().await?;
    let floor = workload::floor(
        &admin,
        &namespace,
        &floor_namespace,
        &final_objects,
        args.concurrency,
    )
    .await?;
    Ok(Report {
        topology,
        agents,
        converge,
        floor,
        reconciles,
        writes,
        metric_writes,
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
    if args.budgets {
        anyhow::ensure!(
            args.kubeconfig.is_none() && args.topologies.is_empty(),
            "--budgets runs on kaos-testkit, without peers: no --kubeconfig, no --topology"
        );
        args.results = args.results.join("budgets");
        args.label.get_or_insert_with(|| {
            let counts = args.agents.iter().map(usize::to_string);
            std::iter::once("budgets".to_string())
                .chain(counts)
                .collect::<Vec<_>>()
                .join("-")
        });
        return run_budgets(&args).await;
    }
    if args.topologies.is_empty() {
        args.topologies = Topology::ALL.to_vec();
    }
    let mut results = Results::new(&args)?;
    let mut reports = Vec::new();
    for &agents in &args.agents {
        for &topology in &args.topologies {
            eprintln!("kaos-bench: {} × {agents} agents …", topology.name());
            let stamp = json!({
                "started": provenance::now(),
                "load_average_start": provenance::load_average(),
            });
            let started = Instant::now();
            let outcome = run(topology, agents, &args).await;
            let mut entry = match &outcome {
                Ok(report) => report.to_json(),
                Err(e) => {
                    json!({"topology": topology.name(), "agents": agents, "error": format!("{e:#}")})
                }
            };
            entry["started"] = stamp["started"].clone();
            entry["wall_seconds"] = json!(started.elapsed().as_secs_f64());
            entry["load_average_start"] = stamp["load_average_start"].clone();
            entry["load_average_end"] = provenance::load_average();
            results.push(entry)?;
            match outcome {
                Ok(report) => {
                    let time = match &report.converge {
                        Outcome::Done(d) => format!("ready in {:.1} s", d.as_secs_f64()),
                        Outcome::TimedOut { progress, after } => format!(
                            "not converged: {progress} after {:.0} s",
                            after.as_secs_f64()
                        ),
                    };
                    eprintln!(
                        "kaos-bench: {} × {agents}: {time} (floor {:.1} s, minimal floor {:.1} s)",
                        topology.name(),
                        report.floor.total.as_secs_f64(),
                        report.floor.minimal.as_secs_f64()
                    );
                    reports.push(report);
                }
                Err(e) => eprintln!("kaos-bench: {} × {agents} failed: {e:#}", topology.name()),
            }
        }
    }
    results.finish()?;
    let tables = report::markdown(&reports, args.idle);
    println!("{tables}");
    if let Some(path) = &args.out {
        std::fs::write(path, &tables).with_context(|| format!("writing {}", path.display()))?;
    }
    eprintln!(
        "kaos-bench: raw results in {} (docs: python3 scripts/bench-report.py)",
        results.path.display()
    );
    Ok(())
}

/// `--budgets`: one budget run per agent count, each into the raw results file.
async fn run_budgets(args: &Args) -> anyhow::Result<()> {
    let mut results = Results::new(args)?;
    for &agents in &args.agents {
        eprintln!("kaos-bench: budgets × {agents} agents …");
        let (started, load) = (provenance::now(), provenance::load_average());
        let clock = Instant::now();
        let timeout = Duration::from_secs(args.timeout);
        let mut entry = match budgets::run(agents, &args.budget, timeout).await {
            Ok(figures) => figures,
            Err(e) => json!({"agents": agents, "error": format!("{e:#}")}),
        };
        entry["started"] = json!(started);
        entry["wall_seconds"] = json!(clock.elapsed().as_secs_f64());
        entry["load_average_start"] = load;
        entry["load_average_end"] = provenance::load_average();
        eprintln!("kaos-bench: budgets × {agents}: {entry:#}");
        results.push(entry)?;
    }
    results.finish()?;
    eprintln!("kaos-bench: raw results in {}", results.path.display());
    Ok(())
}
