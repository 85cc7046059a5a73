//! `kaosctl dev`: kaos-testkit on loopback with the deployment simulator, the CRDs, the runtime
//! registry, the three controllers (each with its own Lease and metrics port) and some manifests.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use kaos_runtime::RuntimeArgs;
use kaos_testkit::cluster::ListOptions;
use kaos_testkit::{ApiServer, Cluster, ServeOptions, TestServer};
use serde_json::Value;
use tokio::sync::watch;

use crate::defaults::{QUICKSTART, SYSTEM_NAMESPACE, controller_settings};

/// The kinds shown, with the label of their children.
const KINDS: &[(&str, &str)] = &[
    ("modelapis", "ModelAPI"),
    ("mcpservers", "MCPServer"),
    ("agents", "Agent"),
];

pub struct Options {
    pub listen: SocketAddr,
    pub kubeconfig: PathBuf,
    /// Manifests to apply; none means the embedded quickstart.
    pub apply: Vec<PathBuf>,
}

/// A running sandbox. Dropping it stops everything.
pub struct Sandbox {
    pub server: TestServer,
    pub kubeconfig: PathBuf,
    /// (controller, metrics address)
    pub metrics: Vec<(&'static str, SocketAddr)>,
    stop: watch::Sender<bool>,
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

fn free_address() -> anyhow::Result<SocketAddr> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

fn runtime_args(metrics: SocketAddr) -> anyhow::Result<RuntimeArgs> {
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        runtime: RuntimeArgs,
    }
    let cli = <Cli as clap::Parser>::try_parse_from([
        "controller".to_string(),
        format!("--metrics-bind-address={metrics}"),
        "--health-probe-bind-address=0".into(),
        format!("--leader-election-namespace={SYSTEM_NAMESPACE}"),
    ])?;
    Ok(cli.runtime)
}

fn registry_manifest() -> String {
    let body: String = mcpserver_controller::registry::DEFAULT_RUNTIMES_YAML
        .lines()
        .map(|l| format!("    {l}\n"))
        .collect();
    format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {SYSTEM_NAMESPACE}}}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {}, namespace: {SYSTEM_NAMESPACE}}}\ndata:\n  {}: |\n{body}",
        mcpserver_controller::registry::CONFIG_MAP,
        mcpserver_controller::registry::KEY
    )
}

pub async fn start(options: &Options) -> anyhow::Result<Sandbox> {
    let api = ApiServer::new(Cluster::default());
    for (_, crd) in kaos_api::crd::all() {
        kaos_testkit::manifests::apply_object(&api.cluster, &serde_json::to_value(crd)?)?;
    }
    kaos_testkit::manifests::apply_yaml(&api.cluster, &registry_manifest())?;
    let serve = ServeOptions {
        listen: options.listen,
        simulate_deployments: Some(Duration::from_millis(300)),
        rbac: false,
    };
    let server = TestServer::start(api, &serve)
        .await
        .with_context(|| format!("cannot listen on {}", options.listen))?;
    server
        .write_kubeconfig(&options.kubeconfig, None)
        .with_context(|| format!("cannot write {}", options.kubeconfig.display()))?;

    let kubeconfig: kube::config::Kubeconfig = serde_saphyr::from_str(&server.kubeconfig(None))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    let settings = controller_settings()?;
    let (stop, stopped) = watch::channel(false);
    let stop_signal = || {
        let mut stopped = stopped.clone();
        async move {
            let _ = stopped.wait_for(|s| *s).await;
        }
    };
    let mut metrics = Vec::new();
    let address = free_address()?;
    metrics.push(("modelapi-controller", address));
    tokio::spawn(kaos_runtime::runner::run_with(
        config.clone(),
        runtime_args(address)?,
        modelapi_controller::ID,
        stop_signal(),
        {
            let settings = settings.modelapi;
            move |rt| modelapi_controller::controller::run(rt, settings)
        },
    ));
    let address = free_address()?;
    metrics.push(("mcpserver-controller", address));
    tokio::spawn(kaos_runtime::runner::run_with(
        config.clone(),
        runtime_args(address)?,
        mcpserver_controller::ID,
        stop_signal(),
        {
            let settings = settings.mcpserver;
            move |rt| mcpserver_controller::controller::run(rt, settings)
        },
    ));
    let address = free_address()?;
    metrics.push(("agent-controller", address));
    tokio::spawn(kaos_runtime::runner::run_with(
        config,
        runtime_args(address)?,
        agent_controller::ID,
        stop_signal(),
        {
            let settings = settings.agent;
            move |rt| agent_controller::controller::run(rt, settings)
        },
    ));

    if options.apply.is_empty() {
        kaos_testkit::manifests::apply_yaml(&server.api.cluster, QUICKSTART)
            .context("cannot apply the quickstart")?;
    }
    for path in &options.apply {
        kaos_testkit::manifests::apply_path(&server.api.cluster, path)?;
    }
    Ok(Sandbox {
        server,
        kubeconfig: options.kubeconfig.clone(),
        metrics,
        stop,
    })
}

/// One custom resource as the sandbox reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub phase: String,
    pub endpoint: String,
    pub message: String,
}

impl Sandbox {
    fn list(&self, group: &str, version: &str, plural: &str) -> Vec<Value> {
        let cluster = &self.server.api.cluster;
        cluster
            .resource(group, version, plural)
            .and_then(|rt| cluster.list(&rt, "", &ListOptions::default()).ok())
            .and_then(|l| l.get("items").and_then(Value::as_array).cloned())
            .unwrap_or_default()
    }

    /// Every custom resource with its phase.
    pub fn rows(&self) -> Vec<Row> {
        let text = |v: &Value, p: &str| {
            v.pointer(p)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        KINDS
            .iter()
            .flat_map(|(plural, kind)| {
                self.list("kaos.tools", "v1alpha1", plural)
                    .into_iter()
                    .map(move |o| Row {
                        kind: kind.to_string(),
                        namespace: text(&o, "/metadata/namespace"),
                        name: text(&o, "/metadata/name"),
                        phase: text(&o, "/status/phase"),
                        endpoint: text(&o, "/status/endpoint"),
                        message: text(&o, "/status/message"),
                    })
            })
            .collect()
    }

    /// The children the controllers created: (kind, namespace/name).
    pub fn children(&self) -> Vec<(String, String)> {
        let mut children = Vec::new();
        for (group, version, plural, kind) in [
            ("", "v1", "configmaps", "ConfigMap"),
            ("apps", "v1", "deployments", "Deployment"),
            ("", "v1", "services", "Service"),
        ] {
            for object in self.list(group, version, plural) {
                let app = object
                    .pointer("/metadata/labels/app")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                if ["agent", "modelapi", "mcpserver"].contains(&app) {
                    let ns = object
                        .pointer("/metadata/namespace")
                        .and_then(Value::as_str)
                        .unwrap_or("");
                    let name = object
                        .pointer("/metadata/name")
                        .and_then(Value::as_str)
                        .unwrap_or("");
                    children.push((kind.to_string(), format!("{ns}/{name}")));
                }
            }
        }
        children
    }

    /// Waits until every custom resource is Ready, printing progress; on timeout returns the
    /// resources that are not, with their messages.
    pub async fn wait_ready(&self, timeout: Duration, progress: bool) -> Result<(), Vec<Row>> {
        let started = Instant::now();
        let mut last = String::new();
        loop {
            let rows = self.rows();
            let waiting: Vec<Row> = rows
                .iter()
                .filter(|r| r.phase != "Ready")
                .cloned()
                .collect();
            if !rows.is_empty() && waiting.is_empty() {
                return Ok(());
            }
            if started.elapsed() >= timeout {
                return Err(waiting);
            }
            let line = format!(
                "waiting: {}/{} ready{}",
                rows.len() - waiting.len(),
                rows.len(),
                waiting
                    .first()
                    .map(|r| format!(
                        " ({} {}: {})",
                        r.kind,
                        r.name,
                        if r.phase.is_empty() {
                            "not reconciled yet"
                        } else {
                            &r.phase
                        }
                    ))
                    .unwrap_or_default()
            );
            if progress && line != last {
                eprintln!("{line}");
                last = line;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// The summary printed once everything is ready.
    pub fn report(&self) -> String {
        let rows = self.rows();
        let width = |f: fn(&Row) -> &str, title: &str| {
            rows.iter()
                .map(|r| f(r).len())
                .max()
                .unwrap_or(0)
                .max(title.len())
        };
        let (wk, wn, wp) = (
            width(|r| &r.kind, "KIND"),
            width(|r| &r.name, "NAME"),
            width(|r| &r.phase, "PHASE"),
        );
        let mut out = format!(
            "{:wk$}  {:wn$}  {:wp$}  ENDPOINT\n",
            "KIND", "NAME", "PHASE"
        );
        for r in &rows {
            out.push_str(&format!(
                "{:wk$}  {:wn$}  {:wp$}  {}\n",
                r.kind, r.name, r.phase, r.endpoint
            ));
        }
        out.push_str("\nchildren:\n");
        for (kind, name) in self.children() {
            out.push_str(&format!("  {kind} {name}\n"));
        }
        out.push_str("\nmetrics:\n");
        for (controller, address) in &self.metrics {
            out.push_str(&format!("  {controller}: http://{address}/metrics\n"));
        }
        out.push_str(&format!(
            "\nkubeconfig: {path}\ntry: kubectl --kubeconfig {path} get agents,modelapis,mcpservers\n",
            path = self.kubeconfig.display()
        ));
        out
    }
}
