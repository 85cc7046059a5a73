//! `kaosctl`: try kaos-rs without a cluster (`dev`), see what a manifest produces (`render`),
//! print the CRDs (`crds`). Errors are one line and a hint.

use std::io::Read;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use kaosctl::render::{render, to_yaml};
use kaosctl::sandbox::{self, Options};
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
    /// Run a local sandbox: an in-memory cluster, the three controllers and the quickstart.
    Dev {
        /// Address of the sandbox's API server.
        #[arg(long, default_value = "127.0.0.1:6443")]
        listen: SocketAddr,
        /// Where to write the kubeconfig for kubectl.
        #[arg(long, default_value = "kaos-dev.kubeconfig")]
        kubeconfig: PathBuf,
        /// Manifests to apply instead of the quickstart (files or directories; repeatable).
        #[arg(long = "apply", value_name = "FILE")]
        apply: Vec<PathBuf>,
        /// Exit 0 once every resource is Ready (non-zero with the reasons on timeout).
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
    /// Print the CustomResourceDefinitions.
    Crds,
}

/// An error and what to do about it.
struct Failure {
    error: anyhow::Error,
    hint: &'static str,
}

fn fail(hint: &'static str) -> impl FnOnce(anyhow::Error) -> Failure {
    move |error| Failure { error, hint }
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
        Command::Crds => {
            let yaml = kaos_api::crd::all_yaml()
                .map_err(|e| fail("this is a bug in kaosctl")(e.into()))?;
            print!("{yaml}");
            Ok(ExitCode::SUCCESS)
        }
        Command::Render { files } => {
            let documents = read_documents(&files).map_err(fail(
                "pass existing YAML files with -f, or - for standard input",
            ))?;
            let rendered = render(&documents).map_err(fail(
                "fix the manifest; `kubectl explain` and docs/api.md describe every field",
            ))?;
            print!(
                "{}",
                to_yaml(&rendered.objects).map_err(fail("this is a bug in kaosctl"))?
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
            listen,
            kubeconfig,
            apply,
            exit_when_ready,
            timeout,
        } => {
            // Quiet by default: the sandbox reports through its table; RUST_LOG shows more.
            let level = std::env::var("RUST_LOG").unwrap_or_else(|_| "error".into());
            kaos_runtime::logging::init(kaos_runtime::settings::LogFormat::Text, Some(&level));
            let options = Options {
                listen,
                kubeconfig,
                apply,
            };
            let sandbox = sandbox::start(&options).await.map_err(fail(
                "choose another address with --listen, or check the --apply files",
            ))?;
            eprintln!(
                "kaos-rs sandbox: API server {}, controllers starting",
                sandbox.server.url()
            );
            match sandbox.wait_ready(Duration::from_secs(timeout), true).await {
                Ok(()) => println!("\nall resources are Ready\n\n{}", sandbox.report()),
                Err(waiting) => {
                    println!("\n{}", sandbox.report());
                    for row in &waiting {
                        eprintln!(
                            "kaosctl: {} {}/{} is not Ready ({}): {}",
                            row.kind, row.namespace, row.name, row.phase, row.message
                        );
                    }
                    if exit_when_ready {
                        return Err(Failure {
                            error: anyhow::anyhow!(
                                "{} resource(s) not Ready after {timeout}s",
                                waiting.len()
                            ),
                            hint: "see the messages above; raise --timeout if the machine is slow",
                        });
                    }
                }
            }
            if exit_when_ready {
                return Ok(ExitCode::SUCCESS);
            }
            eprintln!("serving until interrupted (Ctrl-C)");
            let _ = tokio::signal::ctrl_c().await;
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
