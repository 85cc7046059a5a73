//! `<controller> release-finalizers`: what the Helm chart's pre-delete hook runs, so an
//! uninstall never leaves objects that nothing can finalize.
//!
//! Every Agent, ModelAPI and MCPServer carries its controller's finalizer. After `helm
//! uninstall` no controller is left to remove it, so deleting the CRDs or a namespace holding
//! such objects would stay `Terminating` for ever. The finalizer guards nothing the API server
//! would not do itself (the children go by garbage collection; the controller only forgets its
//! in-memory bookkeeping), so releasing it early loses nothing.
//!
//! The mode, run once per controller before Helm deletes anything:
//! 1. scales the controller's Deployment to 0 and waits until it has no pods and its Lease is
//!    free (released, or not renewed for its duration by this process's clock), so no running
//!    controller adds the finalizer again;
//! 2. removes only this controller's finalizer from every object of its kind (in the watched
//!    namespaces, else all), each with a JSON patch whose `test` op is the precondition (a
//!    concurrent change fails the patch, and the object is listed again), leaving every other
//!    finalizer alone;
//! 3. prints what it did and exits 0; a second run finds nothing to do. Bounded by `--timeout`.

use std::fmt::Debug;
use std::process::ExitCode;
use std::time::Duration;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;
use tokio::time::Instant;

use crate::runner::ControllerId;
use crate::settings::{LogFormat, parse_duration};

/// The first argument that selects this mode instead of the controller.
pub const COMMAND: &str = "release-finalizers";

/// Lists again at most this many times when patches meet concurrent changes.
const PASSES: usize = 5;

/// The flags of `release-finalizers` (each also read from the environment the chart's hook Job
/// sets, the same names as the controller's).
#[derive(clap::Parser, Clone, Debug)]
pub struct ReleaseArgs {
    /// The controller's Deployment, scaled to 0 first (default: the chart's name, the default
    /// Lease name + `-manager`, as `kaos-agent-controller-manager`; empty: scale nothing).
    #[arg(long, env = "CONTROLLER_DEPLOYMENT")]
    pub deployment: Option<String>,
    /// Namespace of the Deployment and the Lease (default: this pod's namespace).
    #[arg(long, env = "POD_NAMESPACE")]
    pub namespace: Option<String>,
    /// The controller's leader election Lease (default: `kaos-<kind>-controller`; empty: no
    /// Lease to wait for).
    #[arg(long, env = "LEADER_ELECTION_ID")]
    pub lease: Option<String>,
    /// Release only in these namespaces (repeat, or comma-separated); none means all namespaces.
    #[arg(
        long = "watch-namespace",
        env = "WATCH_NAMESPACES",
        value_delimiter = ','
    )]
    pub watch_namespaces: Vec<String>,
    /// How long to wait for the controller to stop before giving up (exit 1, nothing released).
    #[arg(long, env = "RELEASE_TIMEOUT", default_value = "120s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Log format.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,
    /// Log filter (default: `RUST_LOG`, else `info`).
    #[arg(long, env = "CONTROLLER_LOG_LEVEL")]
    pub log_level: Option<String>,
}

/// What one run does, resolved from [`ReleaseArgs`].
#[derive(Clone, Debug)]
pub struct Plan {
    pub finalizer: String,
    /// Namespace of the Deployment and the Lease.
    pub namespace: String,
    pub deployment: Option<String>,
    pub lease: Option<String>,
    /// Where to release; empty: all namespaces.
    pub watch_namespaces: Vec<String>,
    pub timeout: Duration,
    /// Between two looks at the Deployment and the Lease.
    pub poll: Duration,
}

/// What a run did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// `namespace/name` of each object whose finalizer was removed.
    pub released: Vec<String>,
    /// Objects seen that did not carry the finalizer.
    pub without: usize,
}

/// Runs the mode when the first argument asks for it (returning its exit code), else None and
/// the binary runs as the controller.
pub async fn main_if_asked<K>(id: ControllerId, finalizer: &str) -> Option<ExitCode>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Debug,
{
    use clap::Parser;
    let mut argv = std::env::args_os();
    let program = argv.next().unwrap_or_default();
    if argv.next().is_none_or(|a| a != COMMAND) {
        return None;
    }
    let name = format!("{} {COMMAND}", program.to_string_lossy());
    let args = ReleaseArgs::parse_from(std::iter::once(name.into()).chain(argv));
    crate::logging::init(args.log_format, args.log_level.as_deref());
    let result = async {
        let config = kube::Config::infer().await.map_err(|e| {
            anyhow::anyhow!(
                "cannot find a Kubernetes configuration (in-cluster or KUBECONFIG): {e}"
            )
        })?;
        let client = kube::Client::try_from(config)?;
        let plan = plan(&args, id, finalizer, &client);
        release_finalizers::<K>(&client, &plan).await
    }
    .await;
    Some(match result {
        Ok(report) => {
            println!(
                "{COMMAND}: done: {} released, {} without {finalizer}",
                report.released.len(),
                report.without
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{COMMAND}: failed: {e:#}");
            ExitCode::FAILURE
        }
    })
}

/// The plan of `args` for controller `id`: empty names mean "none".
pub fn plan(args: &ReleaseArgs, id: ControllerId, finalizer: &str, client: &kube::Client) -> Plan {
    let named = |value: &Option<String>, default: String| match value.as_deref() {
        None => Some(default),
        Some("") => None,
        Some(name) => Some(name.to_string()),
    };
    let namespace = args
        .namespace
        .clone()
        .or_else(|| {
            std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
                .ok()
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| client.default_namespace().to_string());
    Plan {
        finalizer: finalizer.to_string(),
        namespace,
        // The chart names a controller's Deployment `<lease>-manager` (docs/install.md).
        deployment: named(&args.deployment, format!("{}-manager", id.lease)),
        lease: named(&args.lease, id.lease.to_string()),
        watch_namespaces: args.watch_namespaces.clone(),
        timeout: args.timeout,
        poll: Duration::from_secs(1),
    }
}

/// Stops the controller, then removes `plan.finalizer` from every object of kind `K`.
pub async fn release_finalizers<K>(client: &kube::Client, plan: &Plan) -> anyhow::Result<Report>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Debug,
{
    let stopping = Stopping {
        client,
        namespace: &plan.namespace,
        poll: plan.poll,
        deadline: Instant::now() + plan.timeout,
    };
    if let Some(name) = &plan.deployment {
        stopping.stop_deployment(name).await?;
    }
    if let Some(name) = &plan.lease {
        stopping.wait_for_lease(name).await?;
    }
    let apis: Vec<Api<K>> = if plan.watch_namespaces.is_empty() {
        vec![Api::all(client.clone())]
    } else {
        plan.watch_namespaces
            .iter()
            .map(|ns| Api::namespaced(client.clone(), ns))
            .collect()
    };
    let mut report = Report::default();
    for api in &apis {
        release_in(api, &plan.finalizer, &mut report).await?;
    }
    Ok(report)
}

/// The controller being stopped: the namespace of its Deployment and Lease, looked at every
/// `poll` until `deadline`.
struct Stopping<'a> {
    client: &'a kube::Client,
    namespace: &'a str,
    poll: Duration,
    deadline: Instant,
}

impl Stopping<'_> {
    /// Scales the Deployment to 0 and waits until it has no pods (a missing one is stopped).
    async fn stop_deployment(&self, name: &str) -> anyhow::Result<()> {
        let namespace = self.namespace;
        let api: Api<Deployment> = Api::namespaced(self.client.clone(), namespace);
        let scale = json!({"spec": {"replicas": 0}});
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(&scale))
            .await
        {
            Ok(_) => println!("{COMMAND}: scaled Deployment {namespace}/{name} to 0"),
            Err(kube::Error::Api(s)) if s.is_not_found() => {
                println!("{COMMAND}: no Deployment {namespace}/{name}: nothing to stop");
                return Ok(());
            }
            Err(e) => anyhow::bail!("scaling Deployment {namespace}/{name} to 0: {e}"),
        }
        loop {
            let pods = match api.get_opt(name).await? {
                None => return Ok(()),
                Some(d) => {
                    let observed = d.status.as_ref().and_then(|s| s.observed_generation);
                    let current = observed.is_some() && observed >= d.metadata.generation;
                    let replicas = d.status.as_ref().and_then(|s| s.replicas).unwrap_or(0);
                    if current && replicas == 0 {
                        return Ok(());
                    }
                    replicas
                }
            };
            if Instant::now() >= self.deadline {
                anyhow::bail!(
                    "Deployment {namespace}/{name} still has {pods} pod(s) after scaling to 0; \
                     nothing was released"
                );
            }
            tokio::time::sleep(self.poll).await;
        }
    }

    /// Waits until nobody holds the Lease: it is missing, released (no holder), or not renewed
    /// for its duration as seen by this process's clock (client-go's rule: the holder's
    /// timestamps are never compared with ours).
    async fn wait_for_lease(&self, name: &str) -> anyhow::Result<()> {
        let namespace = self.namespace;
        let api: Api<Lease> = Api::namespaced(self.client.clone(), namespace);
        let mut seen: Option<(String, Instant)> = None;
        loop {
            let Some(lease) = api.get_opt(name).await? else {
                return Ok(());
            };
            let spec = lease.spec.unwrap_or_default();
            let holder = spec.holder_identity.unwrap_or_default();
            if holder.is_empty() {
                println!("{COMMAND}: Lease {namespace}/{name} is released");
                return Ok(());
            }
            let version = lease.metadata.resource_version.unwrap_or_default();
            let now = Instant::now();
            let since = match &seen {
                Some((v, at)) if *v == version => *at,
                _ => {
                    seen = Some((version, now));
                    now
                }
            };
            let duration =
                Duration::from_secs(spec.lease_duration_seconds.unwrap_or(15).max(0) as u64);
            if now.duration_since(since) >= duration {
                println!(
                    "{COMMAND}: Lease {namespace}/{name} of {holder} expired (not renewed for {duration:?})"
                );
                return Ok(());
            }
            if now >= self.deadline {
                anyhow::bail!(
                    "Lease {namespace}/{name} is still held by {holder}: a controller of this kind still \
                     runs outside the scaled-down Deployment; nothing was released"
                );
            }
            tokio::time::sleep(self.poll).await;
        }
    }
}

/// Removes `finalizer` from every object `api` lists, listing again after conflicts.
async fn release_in<K>(api: &Api<K>, finalizer: &str, report: &mut Report) -> anyhow::Result<()>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Debug,
{
    let kind = K::kind(&());
    for pass in 1..=PASSES {
        let mut conflicts = 0;
        let mut without = 0;
        for object in api.list(&ListParams::default()).await?.items {
            let key = format!(
                "{}/{}",
                object.namespace().unwrap_or_default(),
                object.name_any()
            );
            let Some(index) = object.finalizers().iter().position(|f| f == finalizer) else {
                without += 1;
                continue;
            };
            let path = format!("/metadata/finalizers/{index}");
            let patch: json_patch::Patch = serde_json::from_value(json!([
                {"op": "test", "path": path, "value": finalizer},
                {"op": "remove", "path": path},
            ]))?;
            let namespaced: Api<K> = Api::namespaced(
                api.clone().into_client(),
                &object.namespace().unwrap_or_default(),
            );
            match namespaced
                .patch(
                    &object.name_any(),
                    &PatchParams::default(),
                    &Patch::Json::<()>(patch),
                )
                .await
            {
                Ok(_) => {
                    println!("{COMMAND}: removed {finalizer} from {kind} {key}");
                    report.released.push(key);
                }
                Err(kube::Error::Api(s)) if s.is_not_found() => {}
                // The test op failed (the finalizers changed since the list): list again.
                Err(kube::Error::Api(s)) if s.is_conflict() || s.is_invalid() => conflicts += 1,
                Err(e) => anyhow::bail!("removing {finalizer} from {kind} {key}: {e}"),
            }
        }
        if conflicts == 0 {
            report.without += without;
            return Ok(());
        }
        tracing::info!(
            pass,
            conflicts,
            "finalizers changed while releasing; listing again"
        );
    }
    anyhow::bail!("{kind}: the finalizers kept changing over {PASSES} passes")
}
