//! `kaosctl migrate`: move a cluster from the KAOS Go operator to kaos-rs without losing a
//! resource.
//!
//! KAOS's chart ships its CRDs in the chart's `crds/` directory, which Helm installs once and
//! never marks as its own, and `kubectl apply` of them marks nothing either. `helm install` of
//! charts/kaos (whose CRDs are templates) then stops at the first of them: "exists and cannot be
//! imported into the current release". Helm adopts an existing object when it carries exactly the
//! metadata Helm checks (helm.sh/helm/v4 `pkg/action/validate.go`, `checkOwnership`): the label
//! `app.kubernetes.io/managed-by: Helm` and the annotations `meta.helm.sh/release-name` and
//! `meta.helm.sh/release-namespace` naming the release. Adopting a CRD is a merge patch of those
//! three keys: its spec, its stored objects and their uids are untouched.
//!
//! Two operators reconciling the same objects would fight, so the KAOS operator must be stopped
//! first: `migrate` refuses while a KAOS operator Deployment has replicas, and
//! `--scale-down-kaos` scales it to 0 (and waits for its pods to go) before adopting.
//!
//! `migrate --check` is read-only: it reports whether the migration is complete ([`check`]).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube::core::response::reason;
use serde_json::{Value, json};

use crate::failure::Failure;
use crate::kubeconfig;

mod check;
mod survey;
pub use check::{Finding, check, not_reconciled};
use survey::kind_api;
pub use survey::{Crd, Operator, Owner, Survey, survey};

/// The label and annotations Helm requires on an object it adopts (helm.sh/helm/v4
/// pkg/action/validate.go).
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY_HELM: &str = "Helm";
pub const RELEASE_NAME: &str = "meta.helm.sh/release-name";
pub const RELEASE_NAMESPACE: &str = "meta.helm.sh/release-namespace";

/// The API group of KAOS and kaos-rs.
const GROUP: &str = "kaos.tools";
/// The registry ConfigMap both charts create in their release namespace.
const REGISTRY: &str = "kaos-mcp-runtimes";
/// How many unreconciled resources `--check` names before summarising.
const SHOWN: usize = 20;

/// Where a kind's status says which generation it was written for.
#[derive(Clone, Copy, Debug)]
pub enum Observed {
    /// `status.observedGeneration`.
    Status,
    /// The `observedGeneration` of this condition. AccessGrant and ThirdPartyService statuses
    /// are conditions only (KAOS's schema has no `status.observedGeneration`), and the authz
    /// controller writes this one on every reconcile, stamped with the generation it judged;
    /// a condition it no longer writes could keep an old stamp, this one cannot.
    Condition(&'static str),
}

/// The kinds kaos-rs reconciles: (kind, plural, field manager of its controller, where its
/// status records the generation it was written for).
pub const KINDS: &[(&str, &str, &str, Observed)] = &[
    (
        "Agent",
        "agents",
        agent_controller::ID.lease,
        Observed::Status,
    ),
    (
        "ModelAPI",
        "modelapis",
        modelapi_controller::ID.lease,
        Observed::Status,
    ),
    (
        "MCPServer",
        "mcpservers",
        mcpserver_controller::ID.lease,
        Observed::Status,
    ),
    (
        "MemoryStore",
        "memorystores",
        memorystore_controller::ID.lease,
        Observed::Status,
    ),
    (
        "AccessGrant",
        "accessgrants",
        authz_controller::ID.lease,
        Observed::Condition(authz_controller::status::ENFORCED),
    ),
    (
        "ThirdPartyService",
        "thirdpartyservices",
        authz_controller::ID.lease,
        Observed::Condition(authz_controller::status::READY),
    ),
];

/// What `kaosctl migrate` is asked: the release to adopt the CRDs into, and how.
#[derive(Clone, Debug, clap::Args)]
pub struct Options {
    /// The cluster of this kubeconfig (its current context); default: $KUBECONFIG or
    /// ~/.kube/config.
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// The Helm release that will own the CRDs (`helm install RELEASE charts/kaos`).
    #[arg(long, default_value = "kaos")]
    pub release: String,
    /// The namespace of that release (`helm install -n NAMESPACE`).
    #[arg(long, short = 'n', default_value = "kaos-system")]
    pub namespace: String,
    /// Print what would change and let the API server validate it (dryRun=All); change nothing.
    #[arg(long, conflicts_with = "check")]
    pub dry_run: bool,
    /// Scale the KAOS operator's Deployment(s) to 0 and wait for their pods to go, instead of
    /// refusing while KAOS runs.
    #[arg(long, conflicts_with = "check")]
    pub scale_down_kaos: bool,
    /// Adopt CRDs even when they belong to another Helm release.
    #[arg(long, conflicts_with = "check")]
    pub force: bool,
    /// Read-only: exit non-zero unless the CRDs belong to the release, it is deployed, no
    /// KAOS operator runs and kaos-rs has reconciled every Agent, ModelAPI, MCPServer,
    /// MemoryStore, AccessGrant and ThirdPartyService.
    #[arg(long)]
    pub check: bool,
    /// Seconds --scale-down-kaos waits for the KAOS operator's pods to go.
    #[arg(long, value_name = "TIMEOUT", default_value = "120", value_parser = seconds)]
    pub timeout: Duration,
}

fn seconds(text: &str) -> Result<Duration, std::num::ParseIntError> {
    text.parse().map(Duration::from_secs)
}

/// A client for the kubeconfig (or the default one: $KUBECONFIG, ~/.kube/config, in-cluster)
/// and the server's URL.
pub async fn connect(kubeconfig: Option<&Path>) -> Result<(kube::Client, String), Failure> {
    let config =
        kubeconfig::read_or_infer(kubeconfig, "pass --kubeconfig PATH, or set KUBECONFIG").await?;
    kubeconfig::client(config)
        .map_err(|e| Failure::new(e, "check the kubeconfig's cluster and credentials"))
}

/// Turns an API error into a failure naming what was being done and what to do about it.
fn api_failure(error: kube::Error, doing: &str, server: &str) -> Failure {
    let hint = match &error {
        kube::Error::Api(status) if status.is_forbidden() => {
            "migrate needs to get, list and patch customresourcedefinitions, list deployments in \
             all namespaces (and patch them with --scale-down-kaos), list the kaos.tools resources \
             and read configmaps and secrets in the release namespace: run it as a cluster admin"
                .to_string()
        }
        kube::Error::Api(status) if status.reason == reason::UNAUTHORIZED => {
            "the cluster refused the kubeconfig's credentials: refresh them (kubectl get nodes shows the same)"
                .to_string()
        }
        kube::Error::Api(_) => "see the API server's message above".to_string(),
        _ => format!("check that the cluster answers: kubectl get --raw /version (server {server})"),
    };
    Failure::new(
        anyhow::Error::new(error).context(format!("cannot {doing} on {server}")),
        hint,
    )
}

fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("{n} {word}")
    } else {
        format!("{n} {word}s")
    }
}

/// The plan, as printed before anything is changed.
pub fn describe(survey: &Survey, options: &Options) -> String {
    let (release, namespace) = (&options.release, &options.namespace);
    let mut out = format!(
        "Migrating {} from KAOS to kaos-rs (Helm release {release} in namespace {namespace})\n\nCRDs:\n",
        survey.server
    );
    let width = survey.crds.iter().map(|c| c.name.len()).max().unwrap_or(0);
    for crd in &survey.crds {
        let action = match &crd.owner {
            Owner::Missing => "the chart creates it".to_string(),
            owner if owner.is(release, namespace) => "already adopted".to_string(),
            owner if owner.other_release(release, namespace) => {
                if options.force {
                    "adopt (--force: taken from that release)".to_string()
                } else {
                    "belongs to another release: refused without --force".to_string()
                }
            }
            _ => "adopt".to_string(),
        };
        let _ = writeln!(
            out,
            "  {:width$}  {}: {action}",
            crd.name,
            crd.owner.describe()
        );
    }
    for name in &survey.foreign_crds {
        let _ = writeln!(
            out,
            "  {name:width$}  not a kaos-rs kind: left as it is (kaos-rs does not reconcile it)"
        );
    }
    out.push_str("\nKAOS operator:\n");
    if survey.operators.is_empty() {
        out.push_str("  none found (no Deployment kaos-operator* in any namespace)\n");
    }
    for op in &survey.operators {
        let state = if op.running() {
            format!(
                "running ({}, {})",
                plural(op.replicas as usize, "replica"),
                plural(op.pods as usize, "pod")
            )
        } else {
            "scaled to 0".into()
        };
        let helm = match &op.owner {
            Owner::Release { name, namespace } => format!(", Helm release {name} in {namespace}"),
            _ => String::new(),
        };
        let _ = writeln!(out, "  {}/{}: {state}{helm}", op.namespace, op.name);
    }
    out.push_str(
        "\nResources (they stay: adoption changes only the CRDs' labels and annotations):\n  ",
    );
    if survey.counts.is_empty() {
        out.push_str("none (no CRD served)");
    } else {
        let counts: Vec<String> = survey
            .counts
            .iter()
            .map(|(kind, n)| plural(*n, kind))
            .collect();
        out.push_str(&counts.join(", "));
    }
    out.push('\n');
    out
}

/// Why the CRDs cannot be adopted now, if anything blocks.
pub fn blockers(survey: &Survey, options: &Options) -> Vec<(String, String)> {
    let mut blockers = Vec::new();
    if survey.crds.iter().all(|c| c.owner == Owner::Missing) {
        blockers.push((
            format!(
                "{} has no kaos.tools CRDs: nothing to migrate",
                survey.server
            ),
            format!(
                "install kaos-rs directly: helm install {} charts/kaos -n {} --create-namespace",
                options.release, options.namespace
            ),
        ));
        return blockers;
    }
    let taken: Vec<String> = survey
        .crds
        .iter()
        .filter(|c| c.owner.other_release(&options.release, &options.namespace))
        .map(|c| format!("{} ({})", c.name, c.owner.describe()))
        .collect();
    if !taken.is_empty() && !options.force {
        blockers.push((
            format!("CRDs belong to another Helm release: {}", taken.join(", ")),
            "pass that release's --release and --namespace, or --force to move them to this one"
                .into(),
        ));
    }
    let running: Vec<String> = survey
        .operators
        .iter()
        .filter(|o| o.running())
        .map(|o| format!("{}/{}", o.namespace, o.name))
        .collect();
    if !running.is_empty() && !options.scale_down_kaos {
        blockers.push((
            format!(
                "the KAOS operator is running ({}): it and kaos-rs would fight over every resource",
                running.join(", ")
            ),
            "add --scale-down-kaos to scale it to 0 first (kubectl scale --replicas=N brings it back)"
                .into(),
        ));
    }
    blockers
}

/// Scales the running KAOS operators to 0 and waits until their pods are gone.
async fn scale_down(
    client: &kube::Client,
    survey: &Survey,
    options: &Options,
    out: &mut String,
) -> Result<(), Failure> {
    let server = &survey.server;
    for op in survey.operators.iter().filter(|o| o.running()) {
        let api: Api<Deployment> = Api::namespaced(client.clone(), &op.namespace);
        let params = PatchParams {
            dry_run: options.dry_run,
            ..PatchParams::default()
        };
        api.patch(
            &op.name,
            &params,
            &Patch::Merge(json!({"spec": {"replicas": 0}})),
        )
        .await
        .map_err(|e| {
            api_failure(
                e,
                &format!("scale Deployment {}/{} to 0", op.namespace, op.name),
                server,
            )
        })?;
        if options.dry_run {
            let _ = writeln!(
                out,
                "would scale {}/{} to 0 (from {})",
                op.namespace, op.name, op.replicas
            );
            continue;
        }
        let started = Instant::now();
        loop {
            let deployment = api.get(&op.name).await.map_err(|e| {
                api_failure(
                    e,
                    &format!("read Deployment {}/{}", op.namespace, op.name),
                    server,
                )
            })?;
            let pods = deployment.status.and_then(|s| s.replicas).unwrap_or(0);
            if pods == 0 {
                break;
            }
            if started.elapsed() >= options.timeout {
                return Err(Failure::new(
                    anyhow::anyhow!(
                        "Deployment {}/{} still has {} after {}s",
                        op.namespace,
                        op.name,
                        plural(pods as usize, "pod"),
                        options.timeout.as_secs()
                    ),
                    "wait for its pods to terminate (kubectl get pods -n NAMESPACE), then run migrate again; raise --timeout on a slow cluster",
                ));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let _ = writeln!(
            out,
            "scaled {}/{} to 0 (it had {}; `kubectl scale deployment {} -n {} --replicas={}` restores it)",
            op.namespace,
            op.name,
            plural(op.replicas as usize, "replica"),
            op.name,
            op.namespace,
            op.replicas
        );
    }
    Ok(())
}

/// The metadata patch that lets Helm adopt an object into the release.
pub fn ownership_patch(release: &str, namespace: &str) -> Value {
    json!({"metadata": {
        "labels": {MANAGED_BY: MANAGED_BY_HELM},
        "annotations": {RELEASE_NAME: release, RELEASE_NAMESPACE: namespace},
    }})
}

/// What `migrate` did, for the caller to print; Err when something blocked it.
pub async fn migrate(
    client: &kube::Client,
    survey: &Survey,
    options: &Options,
) -> Result<String, Failure> {
    let mut out = String::new();
    let blockers = blockers(survey, options);
    if let Some((error, hint)) = blockers.into_iter().next() {
        return Err(Failure::new(
            anyhow::anyhow!("cannot migrate: {error}"),
            hint,
        ));
    }
    scale_down(client, survey, options, &mut out).await?;
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let patch = ownership_patch(&options.release, &options.namespace);
    let params = PatchParams {
        dry_run: options.dry_run,
        ..PatchParams::default()
    };
    for crd in &survey.crds {
        if crd.owner == Owner::Missing || crd.owner.is(&options.release, &options.namespace) {
            continue;
        }
        api.patch(&crd.name, &params, &Patch::Merge(&patch))
            .await
            .map_err(|e| api_failure(e, &format!("patch CRD {}", crd.name), &survey.server))?;
        let verb = if options.dry_run {
            "would adopt"
        } else {
            "adopted"
        };
        let _ = writeln!(
            out,
            "{verb} CRD {} into release {} ({MANAGED_BY}={MANAGED_BY_HELM}, {RELEASE_NAME}={}, {RELEASE_NAMESPACE}={})",
            crd.name, options.release, options.release, options.namespace
        );
    }
    out.push_str(&next_steps(survey, options));
    Ok(out)
}

/// The commands that finish the migration.
pub fn next_steps(survey: &Survey, options: &Options) -> String {
    let (release, namespace) = (&options.release, &options.namespace);
    let kubeconfig = options
        .kubeconfig
        .as_ref()
        .map(|k| format!(" --kubeconfig {}", k.display()))
        .unwrap_or_default();
    let install =
        format!("helm install {release} charts/kaos -n {namespace} --create-namespace{kubeconfig}");
    let check =
        format!("kaosctl migrate --check --release {release} --namespace {namespace}{kubeconfig}");
    let mut removals: Vec<String> = survey.operators.iter().map(Operator::removal).collect();
    removals.dedup();
    let mut steps = Vec::new();
    if options.dry_run {
        steps.push(format!(
            "run this again without --dry-run{}",
            if survey.operators.iter().any(Operator::running) {
                " (with --scale-down-kaos)"
            } else {
                ""
            }
        ));
    }
    if survey.blocking_registry(options) {
        // Both charts create ConfigMap kaos-mcp-runtimes in their namespace: KAOS's must go first.
        steps.push(format!(
            "remove KAOS first: ConfigMap {namespace}/{REGISTRY} ({}) would stop helm install:\n       {}",
            survey.registry.describe(),
            if removals.is_empty() {
                format!("kubectl delete configmap {REGISTRY} -n {namespace}")
            } else {
                removals.join("\n       ")
            }
        ));
        steps.push(install);
        steps.push(check);
    } else {
        steps.push(install);
        steps.push(check);
        for removal in removals {
            steps.push(format!("once --check passes, remove KAOS: {removal}"));
        }
    }
    let mut out = String::from("\nNext:\n");
    for (i, step) in steps.iter().enumerate() {
        let _ = writeln!(out, "  {}. {step}", i + 1);
    }
    out
}
