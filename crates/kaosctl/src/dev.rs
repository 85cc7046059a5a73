//! `kaosctl dev`: the controllers in-process (each with its own Lease and metrics port)
//! against a cluster, some manifests applied, and a report once every resource is Ready.
//!
//! One skeleton, two cluster sources: a sandbox (kaos-testkit on loopback with the deployment
//! simulator, the CRDs and the MCP runtime registry) or an existing cluster from a kubeconfig,
//! as kubebuilder's `make run` runs a manager against the current cluster. Everything after the
//! source (prerequisites, controllers, manifests, readiness, report) goes through a
//! `kube::Client`, whichever the source.

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kaos_api::workflow::AgentWorkflowRunStatus;
use kaos_runtime::{ControllerId, Runtime, RuntimeArgs};
use kaos_testkit::{ApiServer, ServeOptions, TestServer};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::discovery::{ApiCapabilities, Scope};
use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::defaults::{
    QUICKSTART, SANDBOX_CREDENTIALS, SYSTEM_NAMESPACE, controller_settings, workflow_settings,
};
use crate::workflow::steps_summary;

/// When a custom resource has settled, for [`Dev::wait_ready`].
#[derive(Clone, Copy)]
enum Settled {
    /// Once `status.phase` is Ready: the kinds with a workload.
    WhenReady,
    /// Once its controller has written this condition for the current generation. AccessGrants
    /// and ThirdPartyServices are never Ready (kaos-rs enforces neither): the condition saying so
    /// is all there is to wait for, and its reason stands in for their phase.
    WhenWritten(&'static str),
    /// Once this condition is True for the current generation: AgentWorkflows, whose `Ready`
    /// says whether they can run (False: a cycle, a bad schedule, a missing agent; its reason
    /// stands in for their phase).
    WhenTrue(&'static str),
    /// Never waited for, only shown with their steps: AgentWorkflowRuns, which come (by hand, by
    /// the schedule) and go (history limits) whatever was applied.
    Shown,
}

/// The custom resources reported: (plural, kind, when it has settled).
const KINDS: &[(&str, &str, Settled)] = &[
    ("modelapis", "ModelAPI", Settled::WhenReady),
    ("mcpservers", "MCPServer", Settled::WhenReady),
    ("memorystores", "MemoryStore", Settled::WhenReady),
    ("agents", "Agent", Settled::WhenReady),
    (
        "accessgrants",
        "AccessGrant",
        Settled::WhenWritten(authz_controller::status::ENFORCED),
    ),
    (
        "thirdpartyservices",
        "ThirdPartyService",
        Settled::WhenWritten(authz_controller::status::READY),
    ),
    (
        "agentworkflows",
        "AgentWorkflow",
        Settled::WhenTrue(workflow_controller::validation::READY),
    ),
    ("agentworkflowruns", RUN_KIND, Settled::Shown),
];

const RUN_KIND: &str = "AgentWorkflowRun";

/// Whether rows of `kind` are only shown, never waited for.
fn shown_only(kind: &str) -> bool {
    KINDS
        .iter()
        .any(|(_, k, settled)| *k == kind && matches!(settled, Settled::Shown))
}

/// A controller running in-process until the stop signal, and where its metrics are served.
struct RunningController {
    name: &'static str,
    metrics: SocketAddr,
    task: JoinHandle<anyhow::Result<()>>,
}

/// The field manager of everything `kaosctl dev` applies.
const FIELD_MANAGER: &str = "kaosctl";

/// Where the controllers run.
pub enum Cluster {
    /// kaos-testkit on `listen`; its kubeconfig (for kubectl) written to `write_kubeconfig`.
    Sandbox {
        listen: SocketAddr,
        write_kubeconfig: PathBuf,
    },
    /// The cluster (and namespace) of a kubeconfig's current context. `install_crds` installs
    /// or updates the CRDs, and creates the MCP runtime registry if it is missing; without it a
    /// cluster lacking either is an error.
    Existing {
        kubeconfig: PathBuf,
        install_crds: bool,
    },
}

pub struct Options {
    pub cluster: Cluster,
    /// Manifests to apply (files or directories). None: the quickstart in a sandbox, nothing on
    /// an existing cluster (whose resources are the user's).
    pub apply: Vec<PathBuf>,
    /// Where the workflow controller sends the steps of these agents, in place of their
    /// Services (whose DNS names do not resolve outside a cluster).
    pub agent_addresses: Vec<AgentAddress>,
}

/// `--agent-address`: where the workflow controller reaches an agent, e.g. an agent runtime
/// on a local port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentAddress {
    /// None: the namespace manifests without one go to (the sandbox's `default`, or the
    /// kubeconfig context's).
    pub namespace: Option<String>,
    pub name: String,
    /// `host:port`.
    pub address: String,
}

impl std::str::FromStr for AgentAddress {
    type Err = String;

    /// `NAME=HOST:PORT` or `NAMESPACE/NAME=HOST:PORT`.
    fn from_str(text: &str) -> Result<Self, String> {
        let expected = "expected NAME=HOST:PORT or NAMESPACE/NAME=HOST:PORT";
        let (agent, address) = text
            .split_once('=')
            .ok_or_else(|| format!("no `=` ({expected})"))?;
        let (namespace, name) = match agent.trim().split_once('/') {
            Some((namespace, name)) => (Some(namespace.to_string()), name.to_string()),
            None => (None, agent.trim().to_string()),
        };
        let address = address.trim().to_string();
        // The workflow controller's own reading of AGENT_ADDRESS_OVERRIDES checks the rest.
        let entry = format!(
            "{}/{name}={address}",
            namespace.as_deref().unwrap_or("default")
        );
        workflow_controller::endpoints::AddressOverrides::parse(&entry)
            .map_err(|error| format!("{} ({expected})", error.reason))?;
        Ok(Self {
            namespace,
            name,
            address,
        })
    }
}

/// The workflow controller's AGENT_ADDRESS_OVERRIDES for `addresses`, bare names in
/// `default_namespace`.
fn address_overrides(addresses: &[AgentAddress], default_namespace: &str) -> Vec<String> {
    addresses
        .iter()
        .map(|a| {
            let namespace = a.namespace.as_deref().unwrap_or(default_namespace);
            format!("{namespace}/{}={}", a.name, a.address)
        })
        .collect()
}

/// Why [`start`] failed, and what to do about it.
#[derive(Debug)]
pub struct StartError {
    pub error: anyhow::Error,
    pub hint: String,
}

fn hint(hint: impl Into<String>) -> impl FnOnce(anyhow::Error) -> StartError {
    move |error| StartError {
        error,
        hint: hint.into(),
    }
}

/// The controllers running against a cluster. Dropping it stops them without waiting; [`Dev::stop`]
/// waits for them to hand their Leases over.
pub struct Dev {
    pub client: kube::Client,
    /// The API server's URL.
    pub server: String,
    /// The sandbox's API server; None on an existing cluster.
    pub testkit: Option<TestServer>,
    /// The kubeconfig for kubectl: the one written for the sandbox, or the one given.
    pub kubeconfig: PathBuf,
    /// Where the controllers' Leases are.
    pub lease_namespace: String,
    /// (controller, metrics address)
    pub metrics: Vec<(&'static str, SocketAddr)>,
    /// The workflow controller's agent address overrides, `namespace/agent=host:port`.
    pub agent_addresses: Vec<String>,
    /// The custom resources applied, as (kind, namespace, name): what [`Dev::wait_ready`] waits
    /// for. Empty when nothing was applied: then every custom resource in the cluster.
    applied: BTreeSet<(String, String, String)>,
    stop: watch::Sender<bool>,
    controllers: Vec<JoinHandle<anyhow::Result<()>>>,
}

impl Drop for Dev {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// A free loopback address below the kernel's ephemeral range: a port the kernel picked with
/// `bind(0)` can be handed to another program's outgoing connection before the controller
/// binds it.
fn free_address() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], kaos_testkit::ports::free_port()))
}

fn runtime_args(metrics: SocketAddr, lease_namespace: &str) -> anyhow::Result<RuntimeArgs> {
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        runtime: RuntimeArgs,
    }
    let cli = <Cli as clap::Parser>::try_parse_from([
        "controller".to_string(),
        format!("--metrics-bind-address={metrics}"),
        "--health-probe-bind-address=0".into(),
        format!("--leader-election-namespace={lease_namespace}"),
    ])?;
    Ok(cli.runtime)
}

/// The MCP runtime registry the chart installs: the `kaos-system` Namespace and its ConfigMap.
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

fn documents(text: &str) -> anyhow::Result<Vec<Value>> {
    let documents: Vec<Value> = serde_saphyr::from_multiple(text).context("invalid YAML")?;
    Ok(documents.into_iter().filter(|d| !d.is_null()).collect())
}

/// The documents of manifest files and directories (their `.yaml`/`.yml` files, sorted).
fn read_manifests(paths: &[PathBuf]) -> anyhow::Result<Vec<Value>> {
    let mut out = Vec::new();
    for path in paths {
        if path.is_dir() {
            let files = kaos_testkit::manifests::yaml_files(path)?;
            out.extend(read_manifests(&files)?);
        } else {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            out.extend(documents(&text).with_context(|| format!("in {}", path.display()))?);
        }
    }
    Ok(out)
}

/// The sandbox's API server, with the CRDs and the registry, serving on `listen`.
async fn start_sandbox(listen: SocketAddr) -> anyhow::Result<TestServer> {
    let api = ApiServer::new(kaos_testkit::Cluster::default());
    for (_, crd) in kaos_api::crd::all() {
        kaos_testkit::manifests::apply_object(&api.cluster, &serde_json::to_value(crd)?)?;
    }
    kaos_testkit::manifests::apply_yaml(&api.cluster, &registry_manifest())?;
    let serve = ServeOptions {
        listen,
        simulate_deployments: Some(Duration::from_millis(300)),
        rbac: false,
    };
    TestServer::start(api, &serve)
        .await
        .with_context(|| format!("cannot listen on {listen}"))
}

async fn config_from(kubeconfig: kube::config::Kubeconfig) -> anyhow::Result<kube::Config> {
    Ok(kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?)
}

/// What the controllers need from a cluster and what `--install-crds` installs: the CRDs and the
/// MCP runtime registry. Returns what is missing (empty when all is there).
async fn missing_prerequisites(client: &kube::Client) -> anyhow::Result<Vec<String>> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut missing = Vec::new();
    for (_, crd) in kaos_api::crd::all() {
        let name = crd.metadata.name.unwrap_or_default();
        if crds.get_opt(&name).await?.is_none() {
            missing.push(format!("CRD {name}"));
        }
    }
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), SYSTEM_NAMESPACE);
    let registry = mcpserver_controller::registry::CONFIG_MAP;
    if config_maps.get_opt(registry).await?.is_none() {
        missing.push(format!(
            "the MCP runtime registry (ConfigMap {SYSTEM_NAMESPACE}/{registry})"
        ));
    }
    Ok(missing)
}

/// Server-side applies the CRDs (install or update) and waits until they are served, then
/// creates the registry if it is missing (one the chart installed is left alone).
async fn install_prerequisites(client: &kube::Client) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let apply = PatchParams::apply(FIELD_MANAGER).force();
    let mut names = Vec::new();
    for (_, crd) in kaos_api::crd::all() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        crds.patch(&name, &apply, &Patch::Apply(&crd))
            .await
            .with_context(|| format!("cannot apply CRD {name}"))?;
        names.push(name);
    }
    let started = Instant::now();
    for name in names {
        loop {
            let crd = crds.get(&name).await?;
            let established = crd.status.and_then(|s| s.conditions).is_some_and(|c| {
                c.iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            });
            if established {
                break;
            }
            anyhow::ensure!(
                started.elapsed() < Duration::from_secs(60),
                "CRD {name} is not Established after 60 s"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), SYSTEM_NAMESPACE);
    if config_maps
        .get_opt(mcpserver_controller::registry::CONFIG_MAP)
        .await?
        .is_none()
    {
        apply_documents(client, documents(&registry_manifest())?).await?;
    }
    Ok(())
}

/// Server-side applies documents in order (Namespaces first), namespaced ones without a
/// namespace into the client's default namespace. Returns the custom resources among them.
async fn apply_documents(
    client: &kube::Client,
    mut documents: Vec<Value>,
) -> anyhow::Result<BTreeSet<(String, String, String)>> {
    documents.sort_by_key(|d| d["kind"] != "Namespace");
    let mut kinds: HashMap<GroupVersionKind, (ApiResource, ApiCapabilities)> = HashMap::new();
    let mut applied = BTreeSet::new();
    for document in documents {
        let object: DynamicObject =
            serde_json::from_value(document).context("not a Kubernetes object")?;
        let types = object
            .types
            .clone()
            .context("an object without apiVersion or kind")?;
        let (group, version) = types
            .api_version
            .rsplit_once('/')
            .unwrap_or(("", &types.api_version));
        let gvk = GroupVersionKind::gvk(group, version, &types.kind);
        if !kinds.contains_key(&gvk) {
            let found = kube::discovery::pinned_kind(client, &gvk)
                .await
                .with_context(|| {
                    format!(
                        "the cluster does not serve {} {}",
                        types.api_version, types.kind
                    )
                })?;
            kinds.insert(gvk.clone(), found);
        }
        let (resource, capabilities) = &kinds[&gvk];
        let name = object
            .metadata
            .name
            .clone()
            .context("an object without a name")?;
        let namespace = object
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| client.default_namespace().to_string());
        let api: Api<DynamicObject> = match capabilities.scope {
            Scope::Namespaced => Api::namespaced_with(client.clone(), &namespace, resource),
            Scope::Cluster => Api::all_with(client.clone(), resource),
        };
        api.patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&object),
        )
        .await
        .with_context(|| format!("cannot apply {} {name}", types.kind))?;
        let waited =
            KINDS.iter().any(|(_, kind, _)| *kind == types.kind) && !shown_only(&types.kind);
        if waited && group == "kaos.tools" {
            applied.insert((types.kind.clone(), namespace, name));
        }
    }
    Ok(applied)
}

/// Starts the controllers in-process, as their binaries would run, with their Leases in
/// `lease_namespace`.
fn start_controllers(
    config: kube::Config,
    lease_namespace: &str,
    agent_addresses: &[String],
    stop: &watch::Sender<bool>,
) -> anyhow::Result<Vec<RunningController>> {
    let settings = controller_settings()?;
    let workflow = workflow_settings(&agent_addresses.join(","))?;
    let (modelapi, mcpserver, memorystore, agent) = (
        settings.modelapi,
        settings.mcpserver,
        settings.memorystore,
        settings.agent,
    );
    let start = |name, id| Start {
        name,
        id,
        config: config.clone(),
        lease_namespace,
        stop,
    };
    Ok(vec![
        start("modelapi-controller", modelapi_controller::ID)
            .spawn(move |rt| modelapi_controller::controller::run(rt, modelapi))?,
        start("mcpserver-controller", mcpserver_controller::ID)
            .spawn(move |rt| mcpserver_controller::controller::run(rt, mcpserver))?,
        start("memorystore-controller", memorystore_controller::ID)
            .spawn(move |rt| memorystore_controller::controller::run(rt, memorystore))?,
        start("agent-controller", agent_controller::ID)
            .spawn(move |rt| agent_controller::controller::run(rt, agent))?,
        start("authz-controller", authz_controller::ID).spawn(authz_controller::controller::run)?,
        start("workflow-controller", workflow_controller::ID)
            .spawn(move |rt| workflow_controller::controller::run(rt, workflow))?,
    ])
}

/// One controller to start in-process.
struct Start<'a> {
    name: &'static str,
    id: ControllerId,
    config: kube::Config,
    lease_namespace: &'a str,
    stop: &'a watch::Sender<bool>,
}

impl Start<'_> {
    /// Runs `controller` on its own task until `stop` turns true.
    fn spawn<F, Fut>(self, controller: F) -> anyhow::Result<RunningController>
    where
        F: FnOnce(Runtime) -> Fut + Send + 'static,
        Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        let mut stopped = self.stop.subscribe();
        let stop_signal = async move {
            let _ = stopped.wait_for(|s| *s).await;
        };
        let metrics = free_address();
        let task = tokio::spawn(kaos_runtime::runner::run_with(
            self.config,
            runtime_args(metrics, self.lease_namespace)?,
            self.id,
            stop_signal,
            controller,
        ));
        Ok(RunningController {
            name: self.name,
            metrics,
            task,
        })
    }
}

pub async fn start(options: &Options) -> Result<Dev, StartError> {
    let (config, testkit, kubeconfig) = match &options.cluster {
        Cluster::Sandbox {
            listen,
            write_kubeconfig,
        } => {
            let server = start_sandbox(*listen)
                .await
                .map_err(hint("choose another address with --listen"))?;
            server
                .write_kubeconfig(write_kubeconfig, None)
                .with_context(|| format!("cannot write {}", write_kubeconfig.display()))
                .map_err(hint("choose another path with --write-kubeconfig"))?;
            let config =
                async { config_from(serde_saphyr::from_str(&server.kubeconfig(None))?).await }
                    .await
                    .map_err(hint("this is a bug in kaosctl"))?;
            (config, Some(server), write_kubeconfig.clone())
        }
        Cluster::Existing { kubeconfig, .. } => {
            let config = async {
                let file = kube::config::Kubeconfig::read_from(kubeconfig)?;
                config_from(file).await
            }
            .await
            .with_context(|| format!("cannot use kubeconfig {}", kubeconfig.display()))
            .map_err(hint(
                "pass a kubeconfig kubectl can use (its current context names the cluster)",
            ))?;
            (config, None, kubeconfig.clone())
        }
    };
    let server = config
        .cluster_url
        .to_string()
        .trim_end_matches('/')
        .to_string();
    let client = kube::Client::try_from(config.clone())
        .map_err(|e| hint("this is a bug in kaosctl")(e.into()))?;
    // A sandbox keeps the chart's layout (Leases beside the registry in kaos-system); on a
    // cluster of one's own the Leases go where the kubeconfig points, like the resources.
    let lease_namespace = match &options.cluster {
        Cluster::Sandbox { .. } => SYSTEM_NAMESPACE.to_string(),
        Cluster::Existing { .. } => client.default_namespace().to_string(),
    };
    if let Cluster::Existing { install_crds, .. } = &options.cluster {
        let reach = format!(
            "check that the cluster answers: kubectl --kubeconfig {} get nodes",
            kubeconfig.display()
        );
        if *install_crds {
            install_prerequisites(&client)
                .await
                .with_context(|| format!("cannot install the CRDs on {server}"))
                .map_err(hint(reach))?;
        } else {
            let missing = missing_prerequisites(&client)
                .await
                .with_context(|| format!("cannot read the CRDs of {server}"))
                .map_err(hint(reach))?;
            if !missing.is_empty() {
                return Err(StartError {
                    error: anyhow::anyhow!("{server} lacks {}", missing.join(", ")),
                    hint: "add --install-crds to install them (the CRDs of `kaosctl crds`, server-side applied, and the default registry)".into(),
                });
            }
        }
    }

    let agent_addresses = address_overrides(&options.agent_addresses, client.default_namespace());
    let (stop, _) = watch::channel(false);
    let running = start_controllers(config, &lease_namespace, &agent_addresses, &stop)
        .map_err(hint("this is a bug in kaosctl"))?;
    let metrics = running.iter().map(|c| (c.name, c.metrics)).collect();
    let controllers = running.into_iter().map(|c| c.task).collect();
    let manifests = if options.apply.is_empty() && testkit.is_some() {
        documents(&format!("{SANDBOX_CREDENTIALS}---\n{QUICKSTART}"))
            .map_err(hint("this is a bug in kaosctl"))?
    } else {
        read_manifests(&options.apply).map_err(hint("pass existing YAML files with --apply"))?
    };
    let applied = apply_documents(&client, manifests)
        .await
        .map_err(hint(
            "check the --apply files (`kubectl apply --dry-run=server -f FILE` shows the server's answer)",
        ))?;
    Ok(Dev {
        client,
        server,
        testkit,
        kubeconfig,
        lease_namespace,
        metrics,
        agent_addresses,
        applied,
        stop,
        controllers,
    })
}

/// One custom resource as `kaosctl dev` reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// `status.phase`; for the kinds without one, the reason of the condition they settle on.
    pub phase: String,
    pub endpoint: String,
    pub message: String,
    /// For an AgentWorkflowRun, each step's phase: `a Succeeded, b Running`.
    pub steps: String,
    /// Whether [`Dev::wait_ready`] has nothing more to wait for.
    pub settled: bool,
}

fn text(v: &Value, pointer: &str) -> String {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

/// The condition `type_` of an object's status.
fn condition<'a>(object: &'a Value, type_: &str) -> Option<&'a Value> {
    object
        .pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

/// A custom resource as a row: its phase, or for the kinds without one the condition it settles
/// on (written for its current generation), with the unresolved references as the message.
fn row(kind: &str, settled: Settled, object: &Value) -> Row {
    let mut steps = String::new();
    let (phase, message, settled) = match settled {
        Settled::WhenReady => {
            let phase = text(object, "/status/phase");
            let ready = phase == "Ready";
            (phase, text(object, "/status/message"), ready)
        }
        Settled::WhenWritten(type_) => {
            let written = condition(object, type_);
            let current = written.is_some_and(|c| {
                c.get("observedGeneration") == object.pointer("/metadata/generation")
            });
            let resolved = condition(object, authz_controller::status::RESOLVED_REFS)
                .filter(|c| c["status"] == "False");
            let message = resolved
                .or(written)
                .map_or("", |c| c["message"].as_str().unwrap_or_default());
            (
                written
                    .map_or("", |c| c["reason"].as_str().unwrap_or_default())
                    .into(),
                message.into(),
                current,
            )
        }
        Settled::WhenTrue(type_) => {
            let current = condition(object, type_)
                .filter(|c| c.get("observedGeneration") == object.pointer("/metadata/generation"));
            let ready = current.is_some_and(|c| c["status"] == "True");
            let phase = match current {
                None => "",
                Some(_) if ready => "Ready",
                Some(c) => c["reason"].as_str().unwrap_or("NotReady"),
            };
            let message = current.map_or("", |c| c["message"].as_str().unwrap_or_default());
            (phase.into(), message.into(), ready)
        }
        Settled::Shown => {
            let status: Option<AgentWorkflowRunStatus> = object
                .get("status")
                .and_then(|s| serde_json::from_value(s.clone()).ok());
            steps = status.as_ref().map(steps_summary).unwrap_or_default();
            let phase = text(object, "/status/phase");
            let phase = if phase.is_empty() {
                "Pending".into()
            } else {
                phase
            };
            (phase, text(object, "/status/message"), true)
        }
    };
    Row {
        kind: kind.to_string(),
        namespace: text(object, "/metadata/namespace"),
        name: text(object, "/metadata/name"),
        phase,
        endpoint: text(object, "/status/endpoint"),
        message,
        steps,
        settled,
    }
}

/// A run in one line: `NAME  PHASE  a Succeeded, b Running`, with the reason when it failed
/// or was canceled.
fn run_line(r: &Row) -> String {
    let mut line = format!("{}  {}", r.name, r.phase);
    if !r.steps.is_empty() {
        line.push_str(&format!("  {}", r.steps));
    }
    if matches!(r.phase.as_str(), "Failed" | "Canceled") && !r.message.is_empty() {
        line.push_str(&format!("  ({})", r.message));
    }
    line
}

/// Follows the runs for `kaosctl dev`'s output: a line for each run that appeared or changed
/// since the last look.
#[derive(Default)]
pub struct RunFollower {
    seen: HashMap<(String, String), String>,
}

impl RunFollower {
    /// `run NAMESPACE/NAME  PHASE  a Succeeded, b Running` for each run new or changed since
    /// the last call (none when the runs cannot be listed now: the next call catches up).
    pub async fn changes(&mut self, dev: &Dev) -> Vec<String> {
        let Ok(rows) = dev.rows().await else {
            return Vec::new();
        };
        let mut lines = Vec::new();
        let mut seen = HashMap::new();
        for r in rows.iter().filter(|r| r.kind == RUN_KIND) {
            let key = (r.namespace.clone(), r.name.clone());
            let line = run_line(r);
            if self.seen.get(&key) != Some(&line) {
                lines.push(format!("run {}/{line}", r.namespace));
            }
            seen.insert(key, line);
        }
        self.seen = seen;
        lines
    }
}

impl Dev {
    /// Every custom resource in the cluster, with its phase.
    pub async fn rows(&self) -> anyhow::Result<Vec<Row>> {
        let mut rows = Vec::new();
        for (_, kind, settled) in KINDS {
            let resource =
                ApiResource::from_gvk(&GroupVersionKind::gvk("kaos.tools", "v1alpha1", kind));
            let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &resource);
            for object in api.list(&ListParams::default()).await?.items {
                rows.push(row(kind, *settled, &serde_json::to_value(object)?));
            }
        }
        Ok(rows)
    }

    /// The children the controllers created: (kind, namespace/name).
    pub async fn children(&self) -> anyhow::Result<Vec<(String, String)>> {
        let mut children = Vec::new();
        let labelled =
            ListParams::default().labels("app in (agent,modelapi,mcpserver,memorystore)");
        for (group, version, kind) in [
            ("", "v1", "ConfigMap"),
            ("apps", "v1", "Deployment"),
            ("", "v1", "Service"),
            ("", "v1", "PersistentVolumeClaim"),
            ("policy", "v1", "PodDisruptionBudget"),
        ] {
            let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
            let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &resource);
            for object in api.list_metadata(&labelled).await?.items {
                let namespace = object.metadata.namespace.unwrap_or_default();
                let name = object.metadata.name.unwrap_or_default();
                children.push((kind.to_string(), format!("{namespace}/{name}")));
            }
        }
        Ok(children)
    }

    fn tracked(&self, row: &Row) -> bool {
        self.applied.is_empty()
            || self
                .applied
                .contains(&(row.kind.clone(), row.namespace.clone(), row.name.clone()))
    }

    /// Waits until every applied custom resource (every one, if none was applied) has settled
    /// (Ready; AccessGrants and ThirdPartyServices reconciled), printing progress; on timeout
    /// returns those that have not, with their messages.
    pub async fn wait_ready(&self, timeout: Duration, progress: bool) -> Result<(), Vec<Row>> {
        let started = Instant::now();
        let mut last = String::new();
        loop {
            let (line, waiting) = match self.rows().await {
                Ok(rows) => {
                    let rows: Vec<Row> = rows
                        .into_iter()
                        .filter(|r| self.tracked(r) && !shown_only(&r.kind))
                        .collect();
                    let waiting: Vec<Row> = rows.iter().filter(|r| !r.settled).cloned().collect();
                    if waiting.is_empty() && rows.len() >= self.applied.len() {
                        return Ok(());
                    }
                    let first = waiting.first().map(|r| {
                        let phase = if r.phase.is_empty() {
                            "not reconciled yet"
                        } else {
                            &r.phase
                        };
                        format!(" ({} {}: {phase})", r.kind, r.name)
                    });
                    let ready = rows.len() - waiting.len();
                    let line = format!(
                        "waiting: {ready}/{} ready{}",
                        rows.len(),
                        first.unwrap_or_default()
                    );
                    (line, waiting)
                }
                Err(e) => (format!("waiting: cannot list the resources: {e}"), vec![]),
            };
            if started.elapsed() >= timeout {
                return Err(waiting);
            }
            if progress && line != last {
                eprintln!("{line}");
                last = line;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// The summary: every custom resource, the runs with their steps, the children, the metrics
    /// URLs, the agent addresses and the kubeconfig.
    pub async fn report(&self) -> String {
        let (runs, rows): (Vec<Row>, Vec<Row>) = self
            .rows()
            .await
            .unwrap_or_default()
            .into_iter()
            .partition(|r| shown_only(&r.kind));
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
            let line = format!(
                "{:wk$}  {:wn$}  {:wp$}  {}",
                r.kind, r.name, r.phase, r.endpoint
            );
            // No endpoint (AccessGrants, ThirdPartyServices, what is not Ready): no padding.
            out.push_str(line.trim_end());
            out.push('\n');
        }
        if !runs.is_empty() {
            out.push_str("\nruns:\n");
            for r in &runs {
                out.push_str(&format!("  {}\n", run_line(r)));
            }
        }
        out.push_str("\nchildren:\n");
        for (kind, name) in self.children().await.unwrap_or_default() {
            out.push_str(&format!("  {kind} {name}\n"));
        }
        out.push_str("\nmetrics:\n");
        for (controller, address) in &self.metrics {
            out.push_str(&format!("  {controller}: http://{address}/metrics\n"));
        }
        if !self.agent_addresses.is_empty() {
            out.push_str("\nagent addresses (workflow steps go there):\n");
            for address in &self.agent_addresses {
                out.push_str(&format!("  {address}\n"));
            }
        }
        out.push_str(&format!(
            "\nkubeconfig: {path}\ntry: kubectl --kubeconfig {path} get agents,modelapis,mcpservers,memorystores,accessgrants,thirdpartyservices,agentworkflows,agentworkflowruns\n",
            path = self.kubeconfig.display()
        ));
        out
    }

    /// Stops the controllers and waits (up to 10 s) until they have released their Leases, so
    /// the next run on the same cluster leads at once.
    pub async fn stop(mut self) {
        let _ = self.stop.send(true);
        let controllers = std::mem::take(&mut self.controllers);
        let _ = tokio::time::timeout(
            Duration::from_secs(10),
            futures::future::join_all(controllers),
        )
        .await;
    }
}
