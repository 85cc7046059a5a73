//! `kaosctl render`: the objects the controllers would create for the resources in some
//! manifests, computed by the controllers' own pure builders. Dependencies found in the same
//! manifests are treated as ready; no cluster is involved. AccessGrants, ThirdPartyServices,
//! AgentWorkflows and AgentWorkflowRuns are validated and create nothing: a comment says so.

use anyhow::{Context, bail};
use authz_controller::status::{AUTHORIZATION_DISABLED, ENFORCED, FEATURE_DISABLED, READY};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kaos_api::access::{AccessGrant, ThirdPartyService};
use kaos_api::agent::Agent;
use kaos_api::mcpserver::MCPServer;
use kaos_api::memorystore::MemoryStore;
use kaos_api::modelapi::ModelAPI;
use kaos_api::workflow::{AgentWorkflow, AgentWorkflowRun};
use kaos_schema::{CrdSchema, UnknownFields};
use kaos_workload::desired::{Desired, Problem};
use kube::{Resource, ResourceExt};
use serde_json::Value;

use crate::defaults::controller_settings;

/// What one manifest stream renders to.
#[derive(Debug, Default)]
pub struct Rendered {
    /// The children, as JSON objects, in input order.
    pub objects: Vec<Value>,
    /// Resources that would end Failed or Waiting, with the controller's message.
    pub problems: Vec<String>,
    /// Resources that create no objects, and why (printed as YAML comments).
    pub notes: Vec<String>,
}

impl Rendered {
    /// The children `result` asks for, as the controller would write them (an autoscaled
    /// Deployment at its initial replicas), and the endpoint it publishes; or, when it is a
    /// problem, the controller's message among the problems (and None).
    fn children(
        &mut self,
        kind: &str,
        name: &str,
        result: Result<Desired, Problem>,
    ) -> Option<Option<String>> {
        let desired = match result {
            Ok(desired) => desired,
            Err(problem) => {
                self.problems
                    .push(format!("{kind} {name}: {}", problem.message));
                return None;
            }
        };
        let endpoint = desired.endpoint.clone();
        let set = desired.into_set();
        for mut child in set.apply {
            if let (Some(initial), Some(deployment)) =
                (set.autoscaled_replicas, child.get_mut::<Deployment>())
                && let Some(spec) = deployment.spec.as_mut()
            {
                spec.replicas = Some(initial);
            }
            let pushed = child.to_json();
            self.objects.extend(pushed.ok());
        }
        Some(endpoint)
    }
}

/// The status a resource that rendered publishes once Ready, for those that depend on it.
fn ready_at<P: Default>(endpoint: Option<String>) -> kaos_api::common::WorkloadStatus<P> {
    kaos_api::common::WorkloadStatus {
        ready: true,
        endpoint,
        ..Default::default()
    }
}

fn schema_for(kind: &str) -> Option<CrdSchema> {
    let (_, crd) = kaos_api::crd::all()
        .into_iter()
        .find(|(_, c)| c.spec.names.kind == kind)?;
    CrdSchema::from_crd(&serde_json::to_value(crd).ok()?, "v1alpha1")
}

/// Validates and defaults a custom resource as the API server would, then reads it.
fn admit<K: serde::de::DeserializeOwned>(kind: &str, mut object: Value) -> anyhow::Result<K> {
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if object.pointer("/metadata/namespace").is_none()
        && let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut)
    {
        metadata.insert("namespace".into(), Value::from("default"));
    }
    let schema = schema_for(kind).context("no CRD for this kind")?;
    if let Err(errors) = schema.admit(&mut object, None, UnknownFields::Reject) {
        let texts: Vec<String> = errors.iter().map(ToString::to_string).collect();
        bail!("{kind} {name} is invalid: {}", texts.join("; "));
    }
    serde_json::from_value(object).with_context(|| format!("{kind} {name} cannot be read"))
}

fn named<K: Resource>(object: &K, namespace: &Option<String>, name: &str) -> bool {
    object.meta().namespace == *namespace && object.meta().name.as_deref() == Some(name)
}

/// The note of a resource that creates no objects: only the status condition its controller
/// writes.
fn no_objects<K: Resource<DynamicType = ()>>(object: &K, condition: &str, reason: &str) -> String {
    format!(
        "{} {}/{}: creates no objects; the authz controller writes its status ({condition}=False, {reason}: kaos-rs does not enforce it)",
        K::kind(&()),
        object.namespace().unwrap_or_default(),
        object.name_any()
    )
}

/// The note of a workflow or a run: the workflow controller only calls agents and writes
/// statuses.
fn workflow_note<K: Resource<DynamicType = ()>>(object: &K, what: &str) -> String {
    format!(
        "{} {}/{}: creates no objects; the workflow controller {what} and writes its status",
        K::kind(&()),
        object.namespace().unwrap_or_default(),
        object.name_any()
    )
}

/// What the workflow controller would say of the workflows and runs: a workflow that cannot
/// run (its `Ready` condition False: a cycle, a schedule it cannot read, an agent not in the
/// manifests), a run of a workflow not in the manifests.
fn workflow_problems(
    workflows: &[AgentWorkflow],
    runs: &[AgentWorkflowRun],
    agents: &[Agent],
) -> Vec<String> {
    let mut problems = Vec::new();
    for w in workflows {
        let ns = w.namespace();
        let validity = workflow_controller::engine::validation::validate(
            &w.spec,
            ns.as_deref().unwrap_or_default(),
            |agent| agents.iter().any(|a| named(a, &ns, agent)),
        );
        if let Some(problem) = validity.problem {
            problems.push(format!(
                "AgentWorkflow {}: {} ({})",
                w.name_any(),
                problem.message,
                problem.reason
            ));
        }
    }
    for r in runs {
        let ns = r.namespace();
        if !workflows
            .iter()
            .any(|w| named(w, &ns, &r.spec.workflow_ref))
        {
            problems.push(format!(
                "AgentWorkflowRun {}: AgentWorkflow {} not found in namespace {}",
                r.name_any(),
                r.spec.workflow_ref,
                ns.unwrap_or_default()
            ));
        }
    }
    problems
}

/// Renders every kaos.tools resource of `documents`.
pub fn render(documents: &[Value]) -> anyhow::Result<Rendered> {
    let settings = controller_settings()?;
    let (mut model_apis, mut servers, mut stores, mut agents) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut workflows, mut runs) = (Vec::new(), Vec::new());
    let mut registry_text = None;
    let mut notes = Vec::new();
    for document in documents {
        let kind = document.get("kind").and_then(Value::as_str).unwrap_or("");
        let api_version = document
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or("");
        match (api_version, kind) {
            ("kaos.tools/v1alpha1", "ModelAPI") => {
                model_apis.push(admit::<ModelAPI>(kind, document.clone())?)
            }
            ("kaos.tools/v1alpha1", "MCPServer") => {
                servers.push(admit::<MCPServer>(kind, document.clone())?)
            }
            ("kaos.tools/v1alpha1", "MemoryStore") => {
                stores.push(admit::<MemoryStore>(kind, document.clone())?)
            }
            ("kaos.tools/v1alpha1", "Agent") => {
                agents.push(admit::<Agent>(kind, document.clone())?)
            }
            // Status only: the authz controller says they are not enforced.
            ("kaos.tools/v1alpha1", "AccessGrant") => {
                let grant = admit::<AccessGrant>(kind, document.clone())?;
                notes.push(no_objects(&grant, ENFORCED, AUTHORIZATION_DISABLED));
            }
            ("kaos.tools/v1alpha1", "ThirdPartyService") => {
                let service = admit::<ThirdPartyService>(kind, document.clone())?;
                notes.push(no_objects(&service, READY, FEATURE_DISABLED));
            }
            // Status only: their steps are tasks sent to agents over A2A.
            ("kaos.tools/v1alpha1", "AgentWorkflow") => {
                let workflow = admit::<AgentWorkflow>(kind, document.clone())?;
                notes.push(workflow_note(
                    &workflow,
                    "sends its steps to their agents over A2A (for each AgentWorkflowRun, and on its schedule)",
                ));
                workflows.push(workflow);
            }
            ("kaos.tools/v1alpha1", "AgentWorkflowRun") => {
                let run = admit::<AgentWorkflowRun>(kind, document.clone())?;
                notes.push(workflow_note(
                    &run,
                    "sends the steps of its workflow to their agents over A2A",
                ));
                runs.push(run);
            }
            ("v1", "ConfigMap")
                if document.pointer("/metadata/name").and_then(Value::as_str)
                    == Some(mcpserver_controller::registry::CONFIG_MAP) =>
            {
                let config_map: ConfigMap = serde_json::from_value(document.clone())
                    .context("the runtime registry ConfigMap cannot be read")?;
                registry_text = config_map
                    .data
                    .and_then(|d| d.get(mcpserver_controller::registry::KEY).cloned());
            }
            ("kaos.tools/v1alpha1", other) => bail!("unknown kaos.tools kind {other:?}"),
            _ => {}
        }
    }
    let registry = mcpserver_controller::registry::parse(
        registry_text
            .as_deref()
            .unwrap_or(mcpserver_controller::registry::DEFAULT_RUNTIMES_YAML),
    )
    .map_err(
        |message| mcpserver_controller::registry::RegistryError::Invalid {
            namespace: "(manifests)".into(),
            message,
        },
    );

    let mut rendered = Rendered {
        notes,
        ..Default::default()
    };
    // Each kind's own pure `desired()`, with what the manifests hold as its inputs; a resource
    // that renders is taken as Ready at its endpoint by those that depend on it.
    for m in &mut model_apis {
        let result = modelapi_controller::build::desired(m, &settings.modelapi);
        let endpoint = rendered.children("ModelAPI", &m.name_any(), result);
        m.status = endpoint.map(ready_at);
    }
    for s in &mut servers {
        let result = mcpserver_controller::build::desired(s, &registry, &settings.mcpserver);
        let endpoint = rendered.children("MCPServer", &s.name_any(), result);
        s.status = endpoint.map(|e| ready_at(e).into());
    }
    for s in &mut stores {
        let ns = s.namespace();
        let model_api = |name: &str| model_apis.iter().find(|m| named(*m, &ns, name));
        let result = memorystore_controller::build::desired(s, model_api, &settings.memorystore);
        let endpoint = rendered.children("MemoryStore", &s.name_any(), result);
        s.status = endpoint.map(ready_at);
    }
    // Peers are taken at the endpoint their spec gives, as the controller takes a peer not
    // built yet.
    for a in &mut agents {
        a.status = Some(ready_at(agent_controller::naming::endpoint(a)).into());
    }
    for a in &agents {
        let (ns, name) = (a.namespace(), a.name_any());
        let listers: Vec<String> = agents
            .iter()
            .filter(|l| l.namespace() == ns && l.spec.peers().contains(&name))
            .map(|l| l.name_any())
            .filter(|l| *l != name)
            .collect();
        let bound = a
            .spec
            .config
            .as_ref()
            .and_then(|c| c.memory.as_ref())
            .and_then(|m| m.bound_store());
        let inputs = agent_controller::desired::Inputs {
            model_api: model_apis
                .iter()
                .find(|m| named(*m, &ns, &a.spec.model_api)),
            mcp_server: &|n| servers.iter().find(|s| named(*s, &ns, n)),
            peer_endpoint: &|n| {
                let peer = agents.iter().find(|p| named(*p, &ns, n))?;
                agent_controller::naming::advertised_endpoint(peer)
            },
            memory_store: bound.and_then(|n| stores.iter().find(|s| named(*s, &ns, n))),
            // As for a first Deployment: a missing or unready store holds back a waiting agent.
            deployed: false,
            listers: &listers,
        };
        let result = agent_controller::desired::desired(a, &inputs, &settings.agent);
        rendered.children("Agent", &name, result);
    }
    rendered
        .problems
        .extend(workflow_problems(&workflows, &runs, &agents));
    Ok(rendered)
}

/// The rendered objects as one YAML stream.
pub fn to_yaml(objects: &[Value]) -> anyhow::Result<String> {
    let mut out = String::new();
    for object in objects {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(object).context("cannot write YAML")?);
    }
    Ok(out)
}
