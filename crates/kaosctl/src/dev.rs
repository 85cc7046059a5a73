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
use kaos_runtime::{ControllerId, Runtime, RuntimeArgs};
use kaos_testkit::{ApiServer, ServeOptions, TestServer};
use kube::api::{Api, Patch, PatchParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::discovery::{ApiCapabilities, Scope};
use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::defaults::{
    QUICKSTART, SANDBOX_CREDENTIALS, SYSTEM_NAMESPACE, controller_settings, workflow_settings,
};
use crate::failure::Failure;
use crate::kubeconfig;

mod report;
pub use report::{Row, RunFollower};

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
        Settled::WhenTrue(workflow_controller::engine::validation::READY),
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
        workflow_controller::agents::endpoints::AddressOverrides::parse(&entry)
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
        // The sandbox runs no PDP: KAOS's security plane stays off (grants: AuthorizationDisabled).
        start("authz-controller", authz_controller::ID).spawn(|rt| {
            authz_controller::controller::run(rt, authz_controller::settings::Security::default())
        })?,
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

pub async fn start(options: &Options) -> Result<Dev, Failure> {
    let (config, testkit, kubeconfig) = match &options.cluster {
        Cluster::Sandbox {
            listen,
            write_kubeconfig,
        } => {
            let server = start_sandbox(*listen)
                .await
                .map_err(Failure::hint("choose another address with --listen"))?;
            server
                .write_kubeconfig(write_kubeconfig, None)
                .with_context(|| format!("cannot write {}", write_kubeconfig.display()))
                .map_err(Failure::hint("choose another path with --write-kubeconfig"))?;
            let config = async {
                let file = serde_saphyr::from_str(&server.kubeconfig(None))?;
                anyhow::Ok(kube::Config::from_custom_kubeconfig(file, &Default::default()).await?)
            }
            .await
            .map_err(Failure::hint("this is a bug in kaosctl"))?;
            (config, Some(server), write_kubeconfig.clone())
        }
        Cluster::Existing { kubeconfig, .. } => (
            kubeconfig::read(kubeconfig).await?,
            None,
            kubeconfig.clone(),
        ),
    };
    let (client, server) = kubeconfig::client(config.clone())
        .map_err(|e| Failure::new(e, "this is a bug in kaosctl"))?;
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
                .map_err(Failure::hint(reach))?;
        } else {
            let missing = missing_prerequisites(&client)
                .await
                .with_context(|| format!("cannot read the CRDs of {server}"))
                .map_err(Failure::hint(reach))?;
            if !missing.is_empty() {
                return Err(Failure::new(
                    anyhow::anyhow!("{server} lacks {}", missing.join(", ")),
                    "add --install-crds to install them (the CRDs of `kaosctl crds`, server-side applied, and the default registry)",
                ));
            }
        }
    }

    let agent_addresses = address_overrides(&options.agent_addresses, client.default_namespace());
    let (stop, _) = watch::channel(false);
    let running = start_controllers(config, &lease_namespace, &agent_addresses, &stop)
        .map_err(Failure::hint("this is a bug in kaosctl"))?;
    let metrics = running.iter().map(|c| (c.name, c.metrics)).collect();
    let controllers = running.into_iter().map(|c| c.task).collect();
    let manifests = if options.apply.is_empty() && testkit.is_some() {
        documents(&format!("{SANDBOX_CREDENTIALS}---\n{QUICKSTART}"))
            .map_err(Failure::hint("this is a bug in kaosctl"))?
    } else {
        read_manifests(&options.apply)
            .map_err(Failure::hint("pass existing YAML files with --apply"))?
    };
    let applied = apply_documents(&client, manifests)
        .await
        .map_err(Failure::hint(
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

impl Dev {
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
