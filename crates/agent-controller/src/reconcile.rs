//! One reconcile: what the caches hold of the dependencies, the desired state, converged, then
//! the status.

use std::sync::{Arc, Mutex};

use kaos_api::mcpserver::MCPServer;
use kaos_api::memorystore::MemoryStore;
use kaos_api::modelapi::ModelAPI;
use kaos_runtime::error::ReconcileError;
use kaos_workload::cache::cached;
use kaos_workload::desired::Problem;
use kaos_workload::reconcile::{Core, Reconciles};
use kaos_workload::trigger::claims::{SharedSecurityIds, conflict_of};
use kaos_workload::trigger::index::RelationIndex;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::reflector::Store;

use crate::cached::CachedAgent;
use crate::conditions::DEPENDENCIES_READY;
use crate::desired::{Inputs, desired};
use crate::naming;
use crate::pins::SharedPins;
use crate::relations::PEER;
use crate::settings::Settings;
use crate::status::status;
use crate::usage::Shown;
use crate::usage::book::Book;

pub const FINALIZER: &str = "kaos.tools/agent-finalizer";

pub struct Context {
    pub core: Core,
    pub settings: Settings,
    pub model_apis: Store<ModelAPI>,
    pub mcp_servers: Store<MCPServer>,
    pub memory_stores: Store<MemoryStore>,
    pub agents: Store<CachedAgent>,
    /// Who holds each `security.id` of Agents.
    pub ids: SharedSecurityIds,
    /// Who depends on whom in this namespace (the agents that list an agent, for its policy).
    pub index: Arc<Mutex<RelationIndex>>,
    /// The runs that hold each agent awake (a workflow step wakes a suspended agent).
    pub pins: SharedPins,
    /// What the usage collector decided budgeted agents show.
    pub usage: Book,
}

impl Reconciles<CachedAgent> for Context {
    fn core(&self) -> &Core {
        &self.core
    }

    async fn apply(&self, object: Arc<CachedAgent>) -> Result<Action, ReconcileError> {
        let agent = object.to_agent();
        let name = agent.name_any();
        let namespace = agent.namespace().unwrap_or_default();
        let model_api = cached(&self.model_apis, &namespace, &agent.spec.model_api);
        let servers: Vec<_> = agent
            .spec
            .mcp_servers
            .iter()
            .map(|s| (s.as_str(), cached(&self.mcp_servers, &namespace, s)))
            .collect();
        let peers: Vec<_> = agent
            .spec
            .peers()
            .iter()
            .map(|p| (p.as_str(), cached(&self.agents, &namespace, p)))
            .collect();
        let memory_store = agent
            .spec
            .config
            .as_ref()
            .and_then(|c| c.memory.as_ref())
            .and_then(|m| m.bound_store())
            .and_then(|store| cached(&self.memory_stores, &namespace, store));
        let deployment = naming::deployment_name(&name);
        let listers = self
            .index
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .dependents(PEER, &namespace, &name);
        let pins = self
            .pins
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .of(&namespace, &name);
        let inputs = Inputs {
            model_api: model_api.as_deref(),
            mcp_server: &|s| find(&servers, s),
            peer_endpoint: &|p| find(&peers, p).and_then(CachedAgent::advertised_endpoint),
            peer_suspended: &|p| find(&peers, p).is_some_and(CachedAgent::suspended),
            memory_store: memory_store.as_deref(),
            deployed: self
                .core
                .children
                .deployment(&namespace, &deployment)
                .is_some(),
            listers: &listers,
            pins: &pins,
        };
        // A claimed `security.id` comes first, as in KAOS: the agent does nothing else.
        let result = match conflict_of(&self.ids, object.as_ref()) {
            Some((reason, message)) => {
                Err(Problem::failed(reason, message).about(DEPENDENCIES_READY))
            }
            None => desired(&agent, &inputs, &self.settings),
        };
        let budget = kaos_api::modelapi::effective_budget(
            agent.spec.budget.as_ref(),
            model_api.as_deref().map(|m| &m.spec),
        );
        let usage = Shown::of(&self.usage, agent.metadata.uid.as_deref(), budget.is_some());
        let status = |conflict, deployment: Option<&_>, now| {
            status(&agent, &result, conflict, deployment, &usage, now)
        };
        self.core
            .converge_built(object.as_ref(), &result, &deployment, status)
            .await
    }
}

fn find<'a, T>(list: &'a [(&str, Option<Arc<T>>)], name: &str) -> Option<&'a T> {
    list.iter()
        .find(|(n, _)| *n == name)
        .and_then(|(_, o)| o.as_deref())
}

pub fn phase_of(agent: &CachedAgent) -> Option<&'static str> {
    agent.phase().map(|p| p.as_str())
}
