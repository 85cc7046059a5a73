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
//! `migrate --check` is read-only: it reports whether the CRDs belong to the release, the
//! release is deployed, no KAOS operator runs, and every Agent, ModelAPI, MCPServer,
//! MemoryStore, AccessGrant and ThirdPartyService has been reconciled by kaos-rs: its status was
//! written by the kaos-rs controller of its kind (the field manager `kaos-<name>-controller` in
//! `managedFields`) for its current generation (`status.observedGeneration` =
//! `metadata.generation`; for AccessGrants and ThirdPartyServices, whose status has no
//! observedGeneration, that of the condition their controller always writes).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, ObjectMeta, Patch, PatchParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::{Value, json};

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

/// An error and what to do about it.
#[derive(Debug)]
pub struct Failure {
    pub error: anyhow::Error,
    pub hint: String,
}

impl Failure {
    fn new(error: impl Into<anyhow::Error>, hint: impl Into<String>) -> Self {
        Self {
            error: error.into(),
            hint: hint.into(),
        }
    }
}

/// The release to adopt the CRDs into, and how.
#[derive(Clone, Debug)]
pub struct Options {
    pub kubeconfig: Option<PathBuf>,
    pub release: String,
    pub namespace: String,
    pub dry_run: bool,
    pub scale_down_kaos: bool,
    pub force: bool,
    /// How long `--scale-down-kaos` waits for the KAOS operator's pods to go.
    pub timeout: Duration,
}

/// Who owns an object, as Helm sees it.
#[derive(Clone, Debug, PartialEq)]
pub enum Owner {
    /// Not in the cluster.
    Missing,
    /// None of Helm's ownership keys: how KAOS installs its CRDs.
    Unowned,
    /// A Helm release (the label and both annotations).
    Release { name: String, namespace: String },
    /// Some of the keys, or other values: described.
    Other(String),
}

impl Owner {
    fn of(meta: &ObjectMeta) -> Self {
        let label = meta.labels.as_ref().and_then(|l| l.get(MANAGED_BY));
        let annotations = meta.annotations.as_ref();
        let name = annotations.and_then(|a| a.get(RELEASE_NAME));
        let namespace = annotations.and_then(|a| a.get(RELEASE_NAMESPACE));
        match (label, name, namespace) {
            (None, None, None) => Owner::Unowned,
            (Some(helm), Some(name), Some(namespace)) if helm == MANAGED_BY_HELM => {
                Owner::Release {
                    name: name.clone(),
                    namespace: namespace.clone(),
                }
            }
            _ => {
                let mut parts = Vec::new();
                if let Some(label) = label {
                    parts.push(format!("{MANAGED_BY}={label}"));
                }
                if let Some(name) = name {
                    parts.push(format!("{RELEASE_NAME}={name}"));
                }
                if let Some(namespace) = namespace {
                    parts.push(format!("{RELEASE_NAMESPACE}={namespace}"));
                }
                Owner::Other(parts.join(", "))
            }
        }
    }

    fn is(&self, release: &str, namespace: &str) -> bool {
        matches!(self, Owner::Release { name, namespace: ns } if name == release && ns == namespace)
    }

    /// Names another Helm release (which would refuse to let ours adopt it).
    fn other_release(&self, release: &str, namespace: &str) -> bool {
        match self {
            Owner::Release { .. } => !self.is(release, namespace),
            Owner::Other(keys) => keys.contains("meta.helm.sh/"),
            _ => false,
        }
    }

    fn describe(&self) -> String {
        match self {
            Owner::Missing => "missing".into(),
            Owner::Unowned => "no Helm ownership metadata (as KAOS installs it)".into(),
            Owner::Release { name, namespace } => {
                format!("Helm release {name} in namespace {namespace}")
            }
            Owner::Other(keys) => format!("partial Helm metadata: {keys}"),
        }
    }
}

/// A CRD of kaos-rs and who owns it.
#[derive(Clone, Debug)]
pub struct Crd {
    pub name: String,
    pub owner: Owner,
}

/// A Deployment of the KAOS Go operator.
#[derive(Clone, Debug)]
pub struct Operator {
    pub namespace: String,
    pub name: String,
    /// spec.replicas
    pub replicas: i32,
    /// status.replicas: pods still there
    pub pods: i32,
    pub owner: Owner,
}

impl Operator {
    pub fn running(&self) -> bool {
        self.replicas > 0 || self.pods > 0
    }

    /// How to remove it: its Helm release, or the Deployment itself.
    fn removal(&self) -> String {
        match &self.owner {
            Owner::Release { name, namespace } => format!("helm uninstall {name} -n {namespace}"),
            _ => format!(
                "kubectl delete deployment {} -n {}   # and its ServiceAccount, ClusterRole(s) and ClusterRoleBinding(s): kubectl get clusterrole,clusterrolebinding | grep kaos-operator",
                self.name, self.namespace
            ),
        }
    }
}

/// What the cluster holds for the migration.
#[derive(Clone, Debug)]
pub struct Survey {
    pub server: String,
    pub crds: Vec<Crd>,
    /// Other kaos.tools CRDs (of KAOS kinds kaos-rs does not serve): not in the chart, left alone.
    pub foreign_crds: Vec<String>,
    pub operators: Vec<Operator>,
    /// (kind, count) of the kinds whose CRD is there.
    pub counts: Vec<(&'static str, usize)>,
    /// The registry ConfigMap in the release namespace, which the chart creates.
    pub registry: Owner,
}

impl Survey {
    fn blocking_registry(&self, options: &Options) -> bool {
        !matches!(self.registry, Owner::Missing)
            && !self.registry.is(&options.release, &options.namespace)
    }
}

/// A client for the kubeconfig (or the default one: $KUBECONFIG, ~/.kube/config, in-cluster)
/// and the server's URL.
pub async fn connect(kubeconfig: Option<&Path>) -> Result<(kube::Client, String), Failure> {
    let config = match kubeconfig {
        Some(path) => async {
            let file = kube::config::Kubeconfig::read_from(path)?;
            anyhow::Ok(kube::Config::from_custom_kubeconfig(file, &Default::default()).await?)
        }
        .await
        .map_err(|e| {
            Failure::new(
                e.context(format!("cannot use kubeconfig {}", path.display())),
                "pass a kubeconfig kubectl can use (its current context names the cluster)",
            )
        })?,
        None => kube::Config::infer().await.map_err(|e| {
            Failure::new(
                anyhow::Error::new(e).context("no kubeconfig found"),
                "pass --kubeconfig PATH, or set KUBECONFIG",
            )
        })?,
    };
    let server = config
        .cluster_url
        .to_string()
        .trim_end_matches('/')
        .to_string();
    let client = kube::Client::try_from(config)
        .map_err(|e| Failure::new(e, "check the kubeconfig's cluster and credentials"))?;
    Ok((client, server))
}

/// Turns an API error into a failure naming what was being done and what to do about it.
fn api_failure(error: kube::Error, doing: &str, server: &str) -> Failure {
    let hint = match &error {
        kube::Error::Api(status) if status.code == 403 => {
            "migrate needs to get, list and patch customresourcedefinitions, list deployments in \
             all namespaces (and patch them with --scale-down-kaos), list the kaos.tools resources \
             and read configmaps and secrets in the release namespace: run it as a cluster admin"
                .to_string()
        }
        kube::Error::Api(status) if status.code == 401 => {
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

fn is_kaos_operator(meta: &ObjectMeta) -> bool {
    let name = meta.name.as_deref().unwrap_or("");
    let label = |key: &str| {
        meta.labels
            .as_ref()
            .and_then(|l| l.get(key))
            .map(String::as_str)
    };
    name == "kaos-operator"
        || name.starts_with("kaos-operator-")
        || label("app.kubernetes.io/name") == Some("kaos-operator")
        || label("helm.sh/chart").is_some_and(|c| c.starts_with("kaos-operator-"))
}

fn kind_api(client: &kube::Client, kind: &str) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(GROUP, "v1alpha1", kind));
    Api::all_with(client.clone(), &resource)
}

/// Reads what the migration needs: the CRDs, the KAOS operators, the resources, the registry.
pub async fn survey(
    client: &kube::Client,
    server: &str,
    options: &Options,
) -> Result<Survey, Failure> {
    let crd_api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let all = crd_api
        .list_metadata(&ListParams::default())
        .await
        .map_err(|e| api_failure(e, "list the CustomResourceDefinitions", server))?;
    let ours: Vec<String> = kaos_api::crd::all()
        .into_iter()
        .filter_map(|(_, crd)| crd.metadata.name)
        .collect();
    let mut crds = Vec::new();
    for name in &ours {
        let owner = all
            .items
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(name))
            .map_or(Owner::Missing, |c| Owner::of(&c.metadata));
        crds.push(Crd {
            name: name.clone(),
            owner,
        });
    }
    let mut foreign_crds: Vec<String> = all
        .items
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .filter(|n| n.ends_with(&format!(".{GROUP}")) && !ours.contains(n))
        .collect();
    foreign_crds.sort();

    let deployments: Api<Deployment> = Api::all(client.clone());
    let mut operators = Vec::new();
    for deployment in deployments
        .list(&ListParams::default())
        .await
        .map_err(|e| api_failure(e, "list the Deployments of all namespaces", server))?
        .items
    {
        if !is_kaos_operator(&deployment.metadata) {
            continue;
        }
        operators.push(Operator {
            namespace: deployment.metadata.namespace.clone().unwrap_or_default(),
            name: deployment.metadata.name.clone().unwrap_or_default(),
            replicas: deployment
                .spec
                .as_ref()
                .and_then(|s| s.replicas)
                .unwrap_or(1),
            pods: deployment
                .status
                .as_ref()
                .and_then(|s| s.replicas)
                .unwrap_or(0),
            owner: Owner::of(&deployment.metadata),
        });
    }

    let mut counts = Vec::new();
    for (kind, plural, _, _) in KINDS {
        let crd = format!("{plural}.{GROUP}");
        if crds
            .iter()
            .any(|c| c.name == crd && c.owner != Owner::Missing)
        {
            let listed = kind_api(client, kind)
                .list_metadata(&ListParams::default())
                .await
                .map_err(|e| api_failure(e, &format!("list the {kind}s"), server))?;
            counts.push((*kind, listed.items.len()));
        }
    }

    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &options.namespace);
    let registry = match config_maps.get_metadata_opt(REGISTRY).await {
        Ok(found) => found.map_or(Owner::Missing, |c| Owner::of(&c.metadata)),
        Err(e) => {
            return Err(api_failure(
                e,
                &format!("read ConfigMap {}/{REGISTRY}", options.namespace),
                server,
            ));
        }
    };
    Ok(Survey {
        server: server.to_string(),
        crds,
        foreign_crds,
        operators,
        counts,
        registry,
    })
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

/// One finding of `--check`.
#[derive(Clone, Debug, PartialEq)]
pub struct Finding {
    pub ok: bool,
    pub what: String,
}

/// `--check`: read-only; every finding, and whether all passed.
pub async fn check(
    client: &kube::Client,
    server: &str,
    options: &Options,
) -> Result<Vec<Finding>, Failure> {
    let survey = survey(client, server, options).await?;
    let (release, namespace) = (&options.release, &options.namespace);
    let mut findings = Vec::new();
    for crd in &survey.crds {
        findings.push(Finding {
            ok: crd.owner.is(release, namespace),
            what: format!("CRD {}: {}", crd.name, crd.owner.describe()),
        });
    }
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let releases = secrets
        .list_metadata(&ListParams::default().labels(&format!("owner=helm,name={release}")))
        .await
        .map_err(|e| {
            api_failure(
                e,
                &format!("list the Helm release Secrets in {namespace}"),
                server,
            )
        })?;
    let deployed = releases.items.iter().find_map(|s| {
        let labels = s.metadata.labels.as_ref()?;
        (labels.get("status").map(String::as_str) == Some("deployed"))
            .then(|| labels.get("version").cloned().unwrap_or_default())
    });
    findings.push(Finding {
        ok: deployed.is_some(),
        what: match deployed {
            Some(version) => {
                format!("Helm release {release} in {namespace}: deployed (revision {version})")
            }
            None => format!("Helm release {release} in {namespace}: not deployed"),
        },
    });
    for op in &survey.operators {
        findings.push(Finding {
            ok: !op.running(),
            what: if op.running() {
                format!(
                    "KAOS operator {}/{}: running, it fights kaos-rs (scale it to 0 or remove it)",
                    op.namespace, op.name
                )
            } else {
                format!(
                    "KAOS operator {}/{}: scaled to 0 (remove it: {})",
                    op.namespace,
                    op.name,
                    op.removal()
                )
            },
        });
    }
    for (kind, _, manager, observed) in KINDS {
        let crd_served = survey.counts.iter().any(|(k, _)| k == kind);
        if !crd_served {
            continue;
        }
        let objects = kind_api(client, kind)
            .list(&ListParams::default())
            .await
            .map_err(|e| api_failure(e, &format!("list the {kind}s"), server))?
            .items;
        let mut behind = BTreeMap::new();
        for object in &objects {
            if let Some(reason) = not_reconciled(object, manager, *observed) {
                let name = format!(
                    "{}/{}",
                    object.metadata.namespace.as_deref().unwrap_or(""),
                    object.metadata.name.as_deref().unwrap_or("")
                );
                behind.insert(name, reason);
            }
        }
        let total = objects.len();
        if behind.is_empty() {
            findings.push(Finding {
                ok: true,
                what: format!(
                    "{}: all reconciled by kaos-rs ({manager})",
                    plural(total, kind)
                ),
            });
        } else {
            let mut what = format!(
                "{}: {} not reconciled by kaos-rs ({manager}) yet:",
                plural(total, kind),
                behind.len()
            );
            for (name, reason) in behind.iter().take(SHOWN) {
                let _ = write!(what, "\n      {name}: {reason}");
            }
            if behind.len() > SHOWN {
                let _ = write!(what, "\n      ... and {} more", behind.len() - SHOWN);
            }
            findings.push(Finding { ok: false, what });
        }
    }
    Ok(findings)
}

/// Why `object` does not show a kaos-rs reconcile of its current generation (None: it does).
pub fn not_reconciled(object: &DynamicObject, manager: &str, observed: Observed) -> Option<String> {
    let ours = object
        .metadata
        .managed_fields
        .as_ref()
        .is_some_and(|fields| fields.iter().any(|f| f.manager.as_deref() == Some(manager)));
    if !ours {
        return Some(format!("its status was never written by {manager}"));
    }
    let generation = object.metadata.generation;
    let (field, observed) = match observed {
        Observed::Status => (
            "status.observedGeneration".to_string(),
            object.data.pointer("/status/observedGeneration"),
        ),
        Observed::Condition(type_) => (
            format!("the observedGeneration of condition {type_}"),
            object
                .data
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .and_then(|c| c.iter().find(|c| c["type"] == type_))
                .and_then(|c| c.get("observedGeneration")),
        ),
    };
    let observed = observed.and_then(Value::as_i64);
    if observed != generation {
        return Some(format!(
            "{field} {} behind metadata.generation {}",
            observed.map_or("unset".into(), |o| o.to_string()),
            generation.map_or("unset".into(), |g| g.to_string())
        ));
    }
    None
}
