//! `kaos-testkit serve`: an in-memory Kubernetes API server on loopback, for scripts and
//! out-of-process tests. Prints the kubeconfig path and serves until interrupted.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use kaos_testkit::faults::FaultConfig;
use kaos_testkit::{ApiServer, Cluster, ServeOptions, TestServer};

#[derive(Parser)]
#[command(
    name = "kaos-testkit",
    version,
    about = "An in-memory Kubernetes API server for tests"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the API over plain HTTP until interrupted.
    Serve(Serve),
}

#[derive(Parser)]
struct Serve {
    /// Address to listen on (port 0 picks a free one).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Where to write the admin kubeconfig.
    #[arg(long, default_value = "kaos-testkit.kubeconfig")]
    kubeconfig: PathBuf,
    /// Apply these manifests (files or directories of .yaml) at startup, e.g. deploy/crds/.
    #[arg(long = "apply")]
    apply: Vec<PathBuf>,
    /// Settle Deployments' status like a healthy rollout, this many milliseconds after a change.
    #[arg(long, value_name = "MS")]
    simulate_deployments: Option<u64>,
    /// Require bearer tokens and enforce RBAC (mint tokens with POST /kaos-testkit/tokens).
    #[arg(long)]
    rbac: bool,
    /// With --rbac: requests without credentials are the admin (kubectl and helm send none over
    /// plain HTTP), while token holders stay subject to RBAC.
    #[arg(long, requires = "rbac")]
    anonymous_admin: bool,
    /// Fault injection: seed of the random faults.
    #[arg(long, default_value_t = 0)]
    fault_seed: u64,
    /// Fault injection: share of requests answered 500.
    #[arg(long, default_value_t = 0.0)]
    fault_error_rate: f64,
    /// Fault injection: share of requests answered 429.
    #[arg(long, default_value_t = 0.0)]
    fault_throttle_rate: f64,
    /// Fault injection: share of updates and patches answered 409.
    #[arg(long, default_value_t = 0.0)]
    fault_conflict_rate: f64,
    /// Fault injection: cut every watch stream after this many milliseconds.
    #[arg(long, value_name = "MS")]
    fault_watch_cut_ms: Option<u64>,
    /// Fault injection: share of watch starts answered 410 Gone.
    #[arg(long, default_value_t = 0.0)]
    fault_gone_rate: f64,
    /// Fault injection: cut every watch stream after this many events.
    #[arg(long, value_name = "N")]
    fault_watch_cut_events: Option<usize>,
    /// Fault injection: added latency of every request, in milliseconds.
    #[arg(long, default_value_t = 0)]
    fault_latency_ms: u64,
    /// Fault injection: never fault the admin (the kubeconfig this writes), only other clients.
    #[arg(long)]
    fault_spare_admin: bool,
    /// Fault injection: fault only requests for this resource (plural, e.g. `deployments`);
    /// repeat for several. Every resource when not given.
    #[arg(long = "fault-resource", value_name = "RESOURCE")]
    fault_resources: Vec<String>,
    /// Keep this many changes for watches to resume from.
    #[arg(long, default_value_t = 10_000)]
    watch_history: usize,
}

#[tokio::main]
async fn main() -> ExitCode {
    let Command::Serve(args) = Cli::parse().command;
    match serve(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kaos-testkit: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(args: Serve) -> anyhow::Result<()> {
    let api = ApiServer::new(Cluster::new(args.watch_history));
    for path in &args.apply {
        kaos_testkit::manifests::apply_path(&api.cluster, path)?;
    }
    api.faults.set(FaultConfig {
        seed: args.fault_seed,
        error_rate: args.fault_error_rate,
        throttle_rate: args.fault_throttle_rate,
        conflict_rate: args.fault_conflict_rate,
        watch_cut_after: args.fault_watch_cut_ms.map(Duration::from_millis),
        gone_rate: args.fault_gone_rate,
        watch_cut_events: args.fault_watch_cut_events,
        latency: Duration::from_millis(args.fault_latency_ms),
        spare_admin: args.fault_spare_admin,
        resources: args.fault_resources,
    });
    let options = ServeOptions {
        listen: args.listen,
        simulate_deployments: args.simulate_deployments.map(Duration::from_millis),
        rbac: args.rbac,
    };
    api.auth.set_anonymous_admin(args.anonymous_admin);
    let server = TestServer::start(api, &options).await?;
    server.write_kubeconfig(&args.kubeconfig, None)?;
    println!("kaos-testkit serving {}", server.url());
    println!("kubeconfig: {}", args.kubeconfig.display());
    tokio::signal::ctrl_c().await?;
    Ok(())
}
