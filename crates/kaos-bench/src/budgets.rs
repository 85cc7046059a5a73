//! `--budgets`: what reading budgeted agents' usage costs (docs/budgets.md, "Usage in the
//! status"). N Agents (no peers), every one budgeted through its ModelAPI's
//! `defaultAgentBudget`, on kaos-testkit with the real controller binaries; the agent
//! controller reads each ModelAPI's `/metrics/` from a [`fake_proxy`] (by
//! `USAGE_ADDRESS_OVERRIDES`) whose counters grow by one call per agent per second. It measures
//! the time until every Agent's status shows its usage, then two windows:
//! - **growing**: every agent's counters change at every scrape. The status of each may be
//!   written at most once per `USAGE_STATUS_INTERVAL_SECONDS`, so the agent controller's
//!   `agents/status` writes are expected at no more than N per status interval;
//! - **still**: the counters stop; after one status interval for the last counts, nothing is
//!   written at all, though the proxies are still read every scrape interval.
//!
//! For each: the agent controller's writes by resource, the scrapes and bytes the proxies
//! served, and the agent controller's CPU seconds; plus its peak resident memory.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context;
use kaos_harness::processes::Scratch;
use kube::api::{Api, ListParams};
use kube::core::DynamicObject;
use serde_json::{Value, json};

use crate::cluster::Cluster;
use crate::fake_proxy::{self, Shared};
use crate::measure::{self, process_usage};
use crate::workload::{AGENT_CONTROLLER, Topology, Workload, kaos};

/// How a budget run is set up: the collector's two intervals and the windows' length.
#[derive(clap::Args, Clone, Debug)]
pub struct BudgetArgs {
    /// Seconds between two reads of the proxies (`USAGE_SCRAPE_INTERVAL_SECONDS`).
    #[arg(long, default_value_t = 60)]
    pub usage_scrape_seconds: u64,
    /// Least seconds between two usage writes of an agent (`USAGE_STATUS_INTERVAL_SECONDS`).
    #[arg(long, default_value_t = 300)]
    pub usage_status_seconds: u64,
    /// Seconds of each window (growing, still); by default two status intervals.
    #[arg(long)]
    pub window_seconds: Option<u64>,
}

/// One budget run's figures, as the raw results file keeps them.
pub async fn run(agents: usize, budget: &BudgetArgs, timeout: Duration) -> anyhow::Result<Value> {
    let workload = Workload::new(Topology::None, agents);
    let window = Duration::from_secs(
        budget
            .window_seconds
            .unwrap_or(2 * budget.usage_status_seconds),
    );
    let shared = Arc::new(Shared::default());
    let addresses = fake_proxy::start(&shared, workload.shared).await?;
    let overrides = addresses
        .iter()
        .enumerate()
        .map(|(i, address)| format!("default/llm-{i}={address}"))
        .collect::<Vec<_>>()
        .join(",");
    let (scrape, status) = (
        budget.usage_scrape_seconds.to_string(),
        budget.usage_status_seconds.to_string(),
    );
    let scratch = Scratch::new(&format!("bench-budgets-{agents}"));
    let mut cluster = Cluster::testkit_with(
        &scratch,
        &[
            ("USAGE_ADDRESS_OVERRIDES", &overrides),
            ("USAGE_SCRAPE_INTERVAL_SECONDS", &scrape),
            ("USAGE_STATUS_INTERVAL_SECONDS", &status),
        ],
    )
    .await;
    // The counts read last are still owed to the status when the counters stop: a status
    // interval and two reads later they have landed, and the still window starts.
    let settle = Duration::from_secs(budget.usage_status_seconds + 2 * budget.usage_scrape_seconds);
    let result = measure_run(&cluster, &workload, &shared, (window, settle), timeout).await;
    cluster.stop_controllers().await;
    result.map(|mut figures| {
        figures["settings"] = json!({
            "usage_scrape_seconds": budget.usage_scrape_seconds,
            "usage_status_seconds": budget.usage_status_seconds,
            "window_seconds": window.as_secs(),
            "settle_seconds": settle.as_secs(),
        });
        figures
    })
}

/// Every ModelAPI budgets its agents: a daily token limit far above what the run spends, so no
/// agent is ever refused and only the counts change.
fn budgeted(workload: &Workload) -> Vec<(kube::core::ApiResource, Value)> {
    let mut objects = workload.objects();
    for (resource, object) in &mut objects {
        if resource.kind == "ModelAPI" {
            object["spec"]["proxyConfig"]["defaultAgentBudget"] =
                json!({"tokensPerDay": 1_000_000_000_000i64});
        }
    }
    objects
}

async fn measure_run(
    cluster: &Cluster,
    workload: &Workload,
    shared: &Arc<Shared>,
    (window, settle): (Duration, Duration),
    timeout: Duration,
) -> anyhow::Result<Value> {
    let (admin, namespace) = (&cluster.admin, cluster.namespace.as_str());
    let client = (cluster.controller(AGENT_CONTROLLER).audit_client)
        .context("a budget run needs the testkit's audit log")?;
    let (_, pid) = measure::controller(cluster, AGENT_CONTROLLER);
    let started = Instant::now();
    let uids = crate::workload::apply_all(admin, namespace, budgeted(workload), 16)
        .await
        .context("creating the resources")?;
    // What each proxy serves: the agents of its ModelAPI, by uid and alias.
    {
        let mut served = shared.agents.lock().expect("agents");
        *served = vec![Vec::new(); workload.shared];
        for ((kind, name), uid) in &uids {
            if kind == "Agent" {
                let index: usize = workload.model_api[name]
                    .trim_start_matches("llm-")
                    .parse()?;
                served[index].push((uid.clone(), format!("kaos.{namespace}.{name}")));
            }
        }
    }
    shared.grow(true);
    let shown = wait_for_usage(admin, namespace, workload.agents, started, timeout).await?;
    eprintln!(
        "kaos-bench: budgets × {}: every usage shown after {:.1} s",
        workload.agents,
        shown.as_secs_f64()
    );
    let growing = measure_window(cluster, client, pid, shared, window).await?;
    shared.grow(false);
    tokio::time::sleep(settle).await;
    let still = measure_window(cluster, client, pid, shared, window).await?;
    let (peak_rss_mib, _) = process_usage(pid);
    Ok(json!({
        "agents": workload.agents,
        "model_apis": workload.shared,
        "usage_shown_seconds": shown.as_secs_f64(),
        "growing": growing,
        "still": still,
        "agent_controller_peak_rss_mib": peak_rss_mib,
    }))
}

/// Waits until every Agent's status shows its usage (`status.usage.observedTime`).
async fn wait_for_usage(
    admin: &kube::Client,
    namespace: &str,
    agents: usize,
    started: Instant,
    timeout: Duration,
) -> anyhow::Result<Duration> {
    let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), namespace, &kaos("Agent"));
    loop {
        let shown = api
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|a| a.data.pointer("/status/usage/observedTime").is_some())
            .count();
        if shown == agents {
            return Ok(started.elapsed());
        }
        anyhow::ensure!(
            started.elapsed() < timeout,
            "{shown}/{agents} Agents show their usage after {:.0} s",
            started.elapsed().as_secs_f64()
        );
        tokio::time::sleep(Duration::from_secs(if agents > 1000 { 5 } else { 1 })).await;
    }
}

/// One window: the agent controller's writes by resource (from the testkit's audit log), every
/// client's writes, the scrapes and bytes the proxies served and the agent controller's CPU.
async fn measure_window(
    cluster: &Cluster,
    client: &str,
    pid: u32,
    shared: &Shared,
    window: Duration,
) -> anyhow::Result<Value> {
    let from = cluster.audit().await.map_or(0, |a| a.len());
    let (scrapes, bytes) = (
        shared.scrapes.load(Ordering::Relaxed),
        shared.bytes.load(Ordering::Relaxed),
    );
    let (_, cpu) = process_usage(pid);
    tokio::time::sleep(window).await;
    let audit = cluster.audit().await.context("the testkit's audit log")?;
    let (_, cpu_after) = process_usage(pid);
    let ours = measure::writes_by_target(&audit[from..], Some(client));
    let all: BTreeMap<String, usize> = measure::writes_by_target(&audit[from..], None);
    let status_writes = ours.get("agents/status").copied().unwrap_or(0);
    Ok(json!({
        "seconds": window.as_secs_f64(),
        "agent_status_writes": status_writes,
        "agent_status_writes_per_second": status_writes as f64 / window.as_secs_f64(),
        "agent_controller_writes": ours,
        "all_writes": all,
        "scrapes": shared.scrapes.load(Ordering::Relaxed) - scrapes,
        "scraped_bytes": shared.bytes.load(Ordering::Relaxed) - bytes,
        "agent_controller_cpu_seconds": cpu_after - cpu,
    }))
}
