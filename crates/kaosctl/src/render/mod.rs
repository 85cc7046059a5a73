//! `kaosctl render`: the objects the controllers would create for the resources in some
//! manifests, computed by the controllers' own pure builders. Dependencies found in the same
//! manifests are treated as ready; no cluster is involved. AccessGrants, ThirdPartyServices,
//! AgentWorkflows and AgentWorkflowRuns are validated and create nothing: a comment says so.

mod manifests;
mod workflows;

use agent_controller::desired::Inputs;
use agent_controller::settings::Settings as AgentSettings;
use anyhow::Context;
use k8s_openapi::api::apps::v1::Deployment;
use kaos_api::agent::Agent;
use kaos_api::modelapi::ModelAPI;
use kaos_workload::desired::{Desired, Problem};
use kube::ResourceExt;
use modelapi_controller::agent_budgets::{BudgetedAgent, budgeted};
use serde_json::Value;

use crate::defaults::controller_settings;
use manifests::{Manifests, named};
use workflows::workflow_problems;

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
        object: &impl ResourceExt,
        result: Result<Desired, Problem>,
    ) -> Option<Option<String>> {
        let name = object.name_any();
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

/// Renders every kaos.tools resource of `documents`: each kind's own pure `desired()`, with
/// what the manifests hold as its inputs; a resource that renders is taken as Ready at its
/// endpoint by those that depend on it.
pub fn render(documents: &[Value]) -> anyhow::Result<Rendered> {
    let settings = controller_settings()?;
    let mut m = Manifests::read(documents)?;
    let registry = m.registry();
    let mut rendered = Rendered {
        notes: std::mem::take(&mut m.notes),
        ..Default::default()
    };
    for api in &mut m.model_apis {
        let agents = budgeted_agents(&m.agents, api);
        let result = modelapi_controller::build::desired(api, &settings.modelapi, &agents);
        api.status = rendered.children("ModelAPI", api, result).map(ready_at);
    }
    for s in &mut m.servers {
        let result = mcpserver_controller::build::desired(s, &registry, &settings.mcpserver);
        s.status = rendered
            .children("MCPServer", s, result)
            .map(|e| ready_at(e).into());
    }
    let model_apis = &m.model_apis;
    for s in &mut m.stores {
        let ns = s.namespace();
        let model_api = |name: &str| model_apis.iter().find(|m| named(*m, &ns, name));
        let result = memorystore_controller::build::desired(s, model_api, &settings.memorystore);
        s.status = rendered.children("MemoryStore", s, result).map(ready_at);
    }
    // Peers are taken at the endpoint their spec gives, as the controller takes a peer not
    // built yet.
    for a in &mut m.agents {
        a.status = Some(ready_at(agent_controller::naming::endpoint(a)).into());
    }
    for a in &m.agents {
        render_agent(&mut rendered, a, &m, &settings.agent);
    }
    let problems = workflow_problems(&m.workflows, &m.runs, &m.agents);
    rendered.problems.extend(problems);
    Ok(rendered)
}

/// The agents of the manifests that have a budget at `model_api`. The API server gives an Agent
/// its uid (the entry's `model_info.id`); here the alias stands in for it.
fn budgeted_agents(agents: &[Agent], model_api: &ModelAPI) -> Vec<BudgetedAgent> {
    agents
        .iter()
        .filter_map(|a| {
            let (ns, name) = (
                a.namespace().unwrap_or_else(|| "default".into()),
                a.name_any(),
            );
            let spec = &a.spec;
            let uid = kaos_api::budget::alias(&ns, &name);
            budgeted(
                &ns,
                &name,
                &uid,
                &spec.model,
                &spec.model_api,
                spec.budget.as_ref(),
                model_api,
            )
        })
        .collect()
}

/// The agents of `agent`'s namespace that list it as a peer.
fn listers_of(agent: &Agent, agents: &[Agent]) -> Vec<String> {
    let (ns, name) = (agent.namespace(), agent.name_any());
    agents
        .iter()
        .filter(|l| l.namespace() == ns && l.spec.peers().contains(&name))
        .map(|l| l.name_any())
        .filter(|l| *l != name)
        .collect()
}

/// `agent`'s children, with what the agent controller would read from its caches found in
/// the manifests instead.
fn render_agent(rendered: &mut Rendered, agent: &Agent, m: &Manifests, settings: &AgentSettings) {
    let ns = agent.namespace();
    let listers = listers_of(agent, &m.agents);
    let bound = agent
        .spec
        .config
        .as_ref()
        .and_then(|c| c.memory.as_ref())
        .and_then(|memory| memory.bound_store());
    let inputs = Inputs {
        model_api: m
            .model_apis
            .iter()
            .find(|api| named(*api, &ns, &agent.spec.model_api)),
        mcp_server: &|n| m.servers.iter().find(|s| named(*s, &ns, n)),
        peer_endpoint: &|n| {
            let peer = m.agents.iter().find(|p| named(*p, &ns, n))?;
            agent_controller::naming::advertised_endpoint(peer)
        },
        peer_suspended: &|n| m.agents.iter().any(|p| named(p, &ns, n) && p.spec.suspend),
        memory_store: bound.and_then(|n| m.stores.iter().find(|s| named(*s, &ns, n))),
        // As for a first Deployment: a missing or unready store holds back a waiting agent.
        deployed: false,
        listers: &listers,
        // No workflow runs: a suspended agent renders at zero pods.
        pins: &[],
    };
    let result = agent_controller::desired::desired(agent, &inputs, settings);
    rendered.children("Agent", agent, result);
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
