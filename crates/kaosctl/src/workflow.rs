//! `kaosctl workflow`: run an AgentWorkflow now (an AgentWorkflowRun made by hand, as
//! `kubectl create` would) and list its runs, against the cluster of a kubeconfig or the
//! sandbox's.

use std::path::{Path, PathBuf};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kaos_api::workflow::{
    AgentWorkflow, AgentWorkflowRun, AgentWorkflowRunSpec, AgentWorkflowRunStatus, RunTrigger,
};
use kube::api::{Api, ListParams, PostParams};
use kube::core::response::reason;
use kube::{Resource, ResourceExt};

use crate::defaults::SANDBOX_KUBECONFIG;
use crate::failure::Failure;
use crate::kubeconfig;

/// The field manager of the runs `kaosctl workflow run` creates.
const FIELD_MANAGER: &str = "kaosctl";

/// Kubernetes cuts a `generateName` to this many characters before adding its 5 random ones
/// (so a name fits a label); done here too, so every API server names a run the same way.
const MAX_GENERATE_NAME: usize = 58;

/// A cluster to talk to, and how to name it in messages.
pub struct Target {
    pub client: kube::Client,
    /// The API server's URL.
    pub server: String,
    /// The kubeconfig used; None when inferred ($KUBECONFIG, ~/.kube/config, in-cluster).
    pub kubeconfig: Option<PathBuf>,
}

impl Target {
    /// `kubectl` with the same kubeconfig, for hints.
    fn kubectl(&self) -> String {
        match &self.kubeconfig {
            Some(path) => format!("kubectl --kubeconfig {}", path.display()),
            None => "kubectl".into(),
        }
    }
}

/// The cluster of `kubeconfig`; without one the sandbox's (`kaos-dev.kubeconfig`, where
/// `kaosctl dev` writes it, when it is in the current directory), else $KUBECONFIG or
/// ~/.kube/config.
pub async fn connect(kubeconfig: Option<&Path>) -> Result<Target, Failure> {
    let sandbox = Path::new(SANDBOX_KUBECONFIG);
    let path = kubeconfig
        .map(Path::to_path_buf)
        .or_else(|| sandbox.exists().then(|| sandbox.to_path_buf()));
    let config = kubeconfig::read_or_infer(
        path.as_deref(),
        "start the sandbox (`kaosctl dev`) in this directory, or pass --kubeconfig PATH",
    )
    .await?;
    let (client, server) = kubeconfig::client(config)
        .map_err(|e| Failure::new(e, "check the kubeconfig's cluster and credentials"))?;
    Ok(Target {
        client,
        server,
        kubeconfig: path,
    })
}

/// An API error while `doing` something, with what to do about it.
fn api_failure(error: kube::Error, doing: String, target: &Target, namespace: &str) -> Failure {
    let hint = match &error {
        kube::Error::Api(status) if status.reason == reason::UNAUTHORIZED => {
            "the cluster refused the kubeconfig's credentials: refresh them".to_string()
        }
        kube::Error::Api(status) if status.is_forbidden() => format!(
            "running a workflow needs get and list on agentworkflows and create on agentworkflowruns in namespace {namespace}"
        ),
        kube::Error::Api(_) => format!(
            "check the cluster: {} get agentworkflows -n {namespace}",
            target.kubectl()
        ),
        _ => format!(
            "is the cluster up? For the sandbox, start `kaosctl dev`; for another cluster pass --kubeconfig (now {})",
            target
                .kubeconfig
                .as_ref()
                .map_or("$KUBECONFIG or ~/.kube/config".into(), |p| p
                    .display()
                    .to_string())
        ),
    };
    Failure::new(
        anyhow::Error::new(error).context(format!("cannot {doing} on {}", target.server)),
        hint,
    )
}

/// The namespace to use: `namespace`, else the kubeconfig context's (or `default`).
pub fn namespace_of(target: &Target, namespace: Option<&str>) -> String {
    namespace.map_or_else(
        || target.client.default_namespace().to_string(),
        str::to_string,
    )
}

/// The AgentWorkflow `name`, or a failure saying which workflows the namespace has.
async fn workflow(target: &Target, namespace: &str, name: &str) -> Result<AgentWorkflow, Failure> {
    let api: Api<AgentWorkflow> = Api::namespaced(target.client.clone(), namespace);
    let doing = || format!("get AgentWorkflow {namespace}/{name}");
    if let Some(workflow) = api
        .get_opt(name)
        .await
        .map_err(|e| api_failure(e, doing(), target, namespace))?
    {
        return Ok(workflow);
    }
    // A 404 is also what a cluster without the CRD answers: listing tells them apart, and
    // names what the user may have meant.
    let listed = api.list(&ListParams::default()).await;
    let names: Vec<String> = match listed {
        Ok(list) => list.items.iter().map(ResourceExt::name_any).collect(),
        Err(kube::Error::Api(status)) if status.is_not_found() => {
            return Err(Failure::new(
                anyhow::anyhow!("{} does not serve AgentWorkflows", target.server),
                "install kaos-rs's CRDs: `kaosctl dev --kubeconfig PATH --install-crds`, or the Helm chart (docs/install.md)",
            ));
        }
        Err(e) => return Err(api_failure(e, doing(), target, namespace)),
    };
    let hint = if names.is_empty() {
        format!("namespace {namespace} has no AgentWorkflow: apply one first, or pass --namespace")
    } else {
        format!(
            "namespace {namespace} has {}; or pass --namespace",
            names.join(", ")
        )
    };
    Err(Failure::new(
        anyhow::anyhow!("AgentWorkflow {name} not found in namespace {namespace}"),
        hint,
    ))
}

/// Creates a run of the workflow `name` (a `Manual` one, named `<name>-manual-<random>`) with
/// `input` in place of the workflow's; returns the run's name.
pub async fn run(
    target: &Target,
    namespace: &str,
    name: &str,
    input: Option<String>,
) -> Result<String, Failure> {
    workflow(target, namespace, name).await?;
    let prefix: String = format!("{name}-manual-")
        .chars()
        .take(MAX_GENERATE_NAME)
        .collect();
    let run = AgentWorkflowRun {
        metadata: ObjectMeta {
            generate_name: Some(prefix),
            namespace: Some(namespace.to_string()),
            ..ObjectMeta::default()
        },
        spec: AgentWorkflowRunSpec {
            workflow_ref: name.to_string(),
            input,
            trigger: RunTrigger::Manual,
            scheduled_time: None,
        },
        status: None,
    };
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PostParams::default()
    };
    let api: Api<AgentWorkflowRun> = Api::namespaced(target.client.clone(), namespace);
    let created = api.create(&params, &run).await.map_err(|e| {
        api_failure(
            e,
            format!("create a run of AgentWorkflow {namespace}/{name}"),
            target,
            namespace,
        )
    })?;
    Ok(created.name_any())
}

/// How each step of a run is going, short: `a Succeeded, b Running, c Pending`.
pub fn steps_summary(status: &AgentWorkflowRunStatus) -> String {
    status
        .steps
        .iter()
        .map(|step| format!("{} {}", step.name, step.phase.as_str()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The runs of the workflow `name`, oldest first, as a table: name, phase, trigger, start,
/// completion and steps.
pub async fn runs(target: &Target, namespace: &str, name: &str) -> Result<String, Failure> {
    workflow(target, namespace, name).await?;
    let api: Api<AgentWorkflowRun> = Api::namespaced(target.client.clone(), namespace);
    // Runs made by hand carry the workflow's label only once adopted: filter on the spec.
    let mut runs: Vec<AgentWorkflowRun> = api
        .list(&ListParams::default())
        .await
        .map_err(|e| {
            api_failure(
                e,
                format!("list the runs of AgentWorkflow {namespace}/{name}"),
                target,
                namespace,
            )
        })?
        .items
        .into_iter()
        .filter(|run| run.spec.workflow_ref == name)
        .collect();
    runs.sort_by(|a, b| {
        (a.meta().creation_timestamp.as_ref(), a.name_any())
            .cmp(&(b.meta().creation_timestamp.as_ref(), b.name_any()))
    });
    if runs.is_empty() {
        return Ok(format!(
            "AgentWorkflow {namespace}/{name} has no runs: start one with `kaosctl workflow run {name} -n {namespace}`\n"
        ));
    }
    let rows: Vec<[String; 6]> = runs
        .iter()
        .map(|run| {
            let status = run.status.clone().unwrap_or_default();
            let time = |t: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>| {
                t.map_or("-".to_string(), |t| t.0.to_string())
            };
            [
                run.name_any(),
                status
                    .phase
                    .map_or("Pending".to_string(), |p| p.as_str().to_string()),
                run.spec.trigger.as_str().to_string(),
                time(status.start_time.as_ref()),
                time(status.completion_time.as_ref()),
                steps_summary(&status),
            ]
        })
        .collect();
    Ok(table(
        ["NAME", "PHASE", "TRIGGER", "STARTED", "COMPLETED", "STEPS"],
        &rows,
    ))
}

/// Columns padded to their widest cell, the last one not padded.
pub fn table<const N: usize>(titles: [&str; N], rows: &[[String; N]]) -> String {
    let mut widths = titles.map(str::len);
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<&str>| {
        let mut text = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 < N {
                text.push_str(&format!("{cell:width$}  ", width = widths[i]));
            } else {
                text.push_str(cell);
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(titles.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
    out
}
