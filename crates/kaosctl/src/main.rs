//! `kaosctl`: try kaos-rs without a cluster or against one (`dev`), see what a manifest produces
//! (`render`), run a workflow now (`workflow run`), print the CRDs (`crds`). Errors are one line
//! and a hint.

use std::io::Read;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use kaosctl::defaults::SANDBOX_KUBECONFIG;
use kaosctl::dev::{self, AgentAddress, Cluster, Options, RunFollower};
use kaosctl::failure::Failure;
use kaosctl::render::{render, to_yaml};
use kaosctl::{migrate, workflow};
use serde_json::Value;

#[derive(Parser)]
#[command(
    name = "kaosctl",
    version,
    about = "kaos-rs: Kubernetes agents without a cluster, and what manifests produce"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the controllers locally: against a sandbox (an in-memory cluster, with the
    /// quickstart), or with --kubeconfig against an existing cluster.
    Dev {
        /// Run against the cluster of this kubeconfig (its current context) instead of a
        /// sandbox; the controllers' Leases and manifests without a namespace go to the
        /// context's namespace (or `default`).
        #[arg(long, value_name = "PATH")]
        kubeconfig: Option<PathBuf>,
        /// With --kubeconfig: install (or update) the CRDs, and the MCP runtime registry if
        /// missing, instead of stopping when the cluster lacks them.
        #[arg(long, requires = "kubeconfig")]
        install_crds: bool,
        /// Address of the sandbox's API server.
        #[arg(long, default_value = "127.0.0.1:6443", conflicts_with = "kubeconfig")]
        listen: SocketAddr,
        /// Where to write the sandbox's kubeconfig for kubectl.
        #[arg(
            long,
            value_name = "PATH",
            default_value = SANDBOX_KUBECONFIG,
            conflicts_with = "kubeconfig"
        )]
        write_kubeconfig: PathBuf,
        /// Manifests to apply (files or directories; repeatable). Default: the quickstart in
        /// a sandbox, nothing on an existing cluster.
        #[arg(long = "apply", value_name = "FILE")]
        apply: Vec<PathBuf>,
        /// Where workflow steps reach an agent instead of its Service, whose DNS name does not
        /// resolve here: an agent runtime on a local port, say (repeatable). A bare NAME is in
        /// the namespace manifests without one go to (`default`, or the kubeconfig context's).
        #[arg(long = "agent-address", value_name = "[NAMESPACE/]NAME=HOST:PORT")]
        agent_addresses: Vec<AgentAddress>,
        /// Exit 0 once every applied resource is Ready, or for AccessGrants and
        /// ThirdPartyServices (never Ready: kaos-rs enforces neither) reconciled (non-zero with
        /// the reasons on timeout). AgentWorkflowRuns are shown, not waited for.
        #[arg(long)]
        exit_when_ready: bool,
        /// Seconds to wait for readiness.
        #[arg(long, default_value_t = 120)]
        timeout: u64,
    },
    /// Print, as YAML, every object the controllers would create for the resources in FILE.
    Render {
        /// Manifest files (`-` for standard input; repeatable).
        #[arg(short = 'f', long = "filename", required = true)]
        files: Vec<String>,
    },
    /// Run AgentWorkflows and see their runs, on the sandbox or a cluster.
    Workflow {
        #[command(subcommand)]
        command: WorkflowCommand,
    },
    /// Print the CustomResourceDefinitions.
    Crds,
    /// Move a cluster from the KAOS Go operator to kaos-rs: print the plan, stop KAOS (with
    /// --scale-down-kaos), let the chart adopt KAOS's CRDs (Helm's ownership label and
    /// annotations; spec and resources untouched) and print the next commands. With --check:
    /// read-only, non-zero until the migration is complete.
    Migrate(migrate::Options),
}

/// Where `kaosctl workflow` finds the workflow.
#[derive(clap::Args)]
struct WorkflowTarget {
    /// The AgentWorkflow.
    name: String,
    /// Its namespace. Default: the kubeconfig context's (or `default`).
    #[arg(long, short = 'n')]
    namespace: Option<String>,
    /// The cluster of this kubeconfig (its current context). Default: the sandbox's
    /// (kaos-dev.kubeconfig, when in the current directory), else $KUBECONFIG or ~/.kube/config.
    #[arg(long, value_name = "PATH")]
    kubeconfig: Option<PathBuf>,
}

#[derive(Subcommand)]
enum WorkflowCommand {
    /// Run the workflow now: create an AgentWorkflowRun of it (trigger Manual) and print its
    /// name.
    Run {
        #[command(flatten)]
        target: WorkflowTarget,
        /// The run's input, in place of the workflow's `spec.input` (`{{ input }}` in steps).
        #[arg(long)]
        input: Option<String>,
    },
    /// List the workflow's runs, oldest first: phase, trigger, start, completion, steps.
    Runs {
        #[command(flatten)]
        target: WorkflowTarget,
    },
}

fn read_documents(files: &[String]) -> anyhow::Result<Vec<Value>> {
    let mut documents = Vec::new();
    for file in files {
        let text = if file == "-" {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .context("cannot read standard input")?;
            text
        } else {
            std::fs::read_to_string(file).with_context(|| format!("cannot read {file}"))?
        };
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text)
            .with_context(|| format!("{file} is not valid YAML"))?;
        documents.extend(docs.into_iter().filter(|d| !d.is_null()));
    }
    Ok(documents)
}

async fn run(command: Command) -> Result<ExitCode, Failure> {
    match command {
        Command::Workflow { command } => match command {
            WorkflowCommand::Run { target, input } => {
                let cluster = workflow::connect(target.kubeconfig.as_deref()).await?;
                let namespace = workflow::namespace_of(&cluster, target.namespace.as_deref());
                let run = workflow::run(&cluster, &namespace, &target.name, input).await?;
                println!("{run}");
                eprintln!(
                    "follow it: kaosctl workflow runs {} -n {namespace}{}",
                    target.name,
                    cluster
                        .kubeconfig
                        .as_ref()
                        .filter(|_| target.kubeconfig.is_some())
                        .map_or(String::new(), |p| format!(" --kubeconfig {}", p.display()))
                );
                Ok(ExitCode::SUCCESS)
            }
            WorkflowCommand::Runs { target } => {
                let cluster = workflow::connect(target.kubeconfig.as_deref()).await?;
                let namespace = workflow::namespace_of(&cluster, target.namespace.as_deref());
                print!(
                    "{}",
                    workflow::runs(&cluster, &namespace, &target.name).await?
                );
                Ok(ExitCode::SUCCESS)
            }
        },
        Command::Crds => {
            let yaml = kaos_api::crd::all_yaml()
                .map_err(|e| Failure::hint("this is a bug in kaosctl")(e.into()))?;
            print!("{yaml}");
            Ok(ExitCode::SUCCESS)
        }
        Command::Migrate(options) => {
            let (client, server) = migrate::connect(options.kubeconfig.as_deref()).await?;
            if options.check {
                let findings = migrate::check(&client, &server, &options).await?;
                println!(
                    "Checking the migration of {server} to kaos-rs (Helm release {} in namespace {})",
                    options.release, options.namespace
                );
                for finding in &findings {
                    let mark = if finding.ok { "ok  " } else { "FAIL" };
                    println!("  {mark} {}", finding.what);
                }
                let failed = findings.iter().filter(|f| !f.ok).count();
                if failed == 0 {
                    println!("\nthe migration is complete: kaos-rs reconciles every resource");
                    return Ok(ExitCode::SUCCESS);
                }
                return Err(Failure::new(
                    anyhow::anyhow!("{failed} check(s) failed"),
                    "see FAIL above; docs/install.md (Migrating from KAOS) says what each means",
                ));
            }
            let survey = migrate::survey(&client, &server, &options).await?;
            println!("{}", migrate::describe(&survey, &options));
            let done = migrate::migrate(&client, &survey, &options).await?;
            print!("{done}");
            Ok(ExitCode::SUCCESS)
        }
        Command::Render { files } => {
            let documents = read_documents(&files).map_err(Failure::hint(
                "pass existing YAML files with -f, or - for standard input",
            ))?;
            let rendered = render(&documents).map_err(Failure::hint(
                "fix the manifest; `kubectl explain` and docs/api.md describe every field",
            ))?;
            for note in &rendered.notes {
                println!("# {note}");
            }
            print!(
                "{}",
                to_yaml(&rendered.objects).map_err(Failure::hint("this is a bug in kaosctl"))?
            );
            if rendered.problems.is_empty() {
                Ok(ExitCode::SUCCESS)
            } else {
                for problem in &rendered.problems {
                    eprintln!("kaosctl: {problem}");
                }
                Ok(ExitCode::FAILURE)
            }
        }
        Command::Dev {
            kubeconfig,
            install_crds,
            listen,
            write_kubeconfig,
            apply,
            agent_addresses,
            exit_when_ready,
            timeout,
        } => {
            // Quiet by default: `dev` reports through its table; RUST_LOG shows more.
            let level = std::env::var("RUST_LOG").unwrap_or_else(|_| "error".into());
            kaos_runtime::logging::init(kaos_runtime::settings::LogFormat::Text, Some(&level));
            let cluster = match kubeconfig {
                Some(kubeconfig) => Cluster::Existing {
                    kubeconfig,
                    install_crds,
                },
                None => Cluster::Sandbox {
                    listen,
                    write_kubeconfig,
                },
            };
            let dev = dev::start(&Options {
                cluster,
                apply,
                agent_addresses,
            })
            .await?;
            if dev.testkit.is_some() {
                eprintln!(
                    "kaos-rs sandbox: API server {}, controllers starting",
                    dev.server
                );
            } else {
                eprintln!(
                    "kaos-rs dev: controllers starting against {} (Leases in namespace {}: the kubeconfig context's, or default)",
                    dev.server, dev.lease_namespace
                );
            }
            let waited = tokio::select! {
                waited = dev.wait_ready(Duration::from_secs(timeout), true) => waited,
                _ = tokio::signal::ctrl_c() => {
                    eprintln!("interrupted: stopping the controllers");
                    dev.stop().await;
                    return Ok(ExitCode::from(130));
                }
            };
            match waited {
                Ok(()) => println!("\nall resources are Ready\n\n{}", dev.report().await),
                Err(waiting) => {
                    println!("\n{}", dev.report().await);
                    for row in &waiting {
                        eprintln!(
                            "kaosctl: {} {}/{} is not Ready ({}): {}",
                            row.kind, row.namespace, row.name, row.phase, row.message
                        );
                    }
                    if exit_when_ready {
                        dev.stop().await;
                        return Err(Failure::new(
                            anyhow::anyhow!(
                                "{} resource(s) not Ready after {timeout}s",
                                waiting.len()
                            ),
                            "see the messages above; raise --timeout if the machine is slow",
                        ));
                    }
                }
            }
            if !exit_when_ready {
                eprintln!("running until interrupted (Ctrl-C); runs are shown as they change");
                // The runs the report showed are not shown again until they change.
                let mut runs = RunFollower::default();
                runs.changes(&dev).await;
                let follow = async {
                    loop {
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        for line in runs.changes(&dev).await {
                            println!("{line}");
                        }
                    }
                };
                tokio::select! {
                    () = follow => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
                eprintln!("stopping the controllers");
            }
            dev.stop().await;
            Ok(ExitCode::SUCCESS)
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli.command).await {
        Ok(code) => code,
        Err(Failure { error, hint }) => {
            eprintln!("kaosctl: {error:#}");
            eprintln!("hint: {hint}");
            ExitCode::FAILURE
        }
    }
}
