//! One reconcile: load the dependencies from the caches, build, converge, write the status.

use std::sync::{Arc, Mutex};

use kaos_api::agent::AgentPhase;
use kaos_api::mcpserver::MCPServer;
use kaos_api::memorystore::MemoryStore;
use kaos_api::modelapi::ModelAPI;
use kaos_runtime::error::ReconcileError;
use kaos_workload::identity::{SharedSecurityIds, conflict_of};
use kaos_workload::index::RelationIndex;
use kaos_workload::reconciler::{Core, Reconciles, StatusDigest};
use kaos_workload::stores::cached;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::reflector::Store;

use crate::build::build;
use crate::cached::CachedAgent;
use crate::naming;
use crate::network;
use crate::relations::PEER;
use crate::resolve::{Blocked, bind_memory, resolve};
use crate::settings::Settings;
use crate::status::{Outcome, status};

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
        let deployment = self
            .core
            .children
            .deployment(&namespace, &naming::deployment_name(&name));
        let memory_store = agent
            .spec
            .config
            .as_ref()
            .and_then(|c| c.memory.as_ref())
            .and_then(|m| m.bound_store())
            .and_then(|store| cached(&self.memory_stores, &namespace, store));
        // A claimed `security.id` comes first, as in KAOS: the agent does nothing else.
        let resolved = match conflict_of(&self.ids, object.as_ref()) {
            Some((reason, message)) => Err(Blocked {
                waiting: false,
                reason,
                message,
            }),
            None => resolve(
                &agent,
                model_api.as_deref(),
                |s| find(&servers, s),
                |p| find(&peers, p).and_then(CachedAgent::advertised_endpoint),
            )
            .and_then(|mut resolved| {
                resolved.memory =
                    bind_memory(&agent, memory_store.as_deref(), deployment.is_none())?;
                Ok(resolved)
            }),
        };
        let built = resolved.map(|r| build(&agent, &r, &self.settings));
        let converged = match &built {
            Ok(Ok(desired)) => {
                let policy = {
                    let listers = self
                        .index
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .dependents(PEER, &namespace, &name);
                    let cached = network::Cached {
                        model_api: model_api.as_deref(),
                        mcp_server: &|s| find(&servers, s),
                        memory_store: memory_store.as_deref(),
                    };
                    network::policy(
                        &agent,
                        &listers,
                        &cached,
                        &self.settings.data_plane.network_policy,
                    )
                };
                let children = desired.children.clone().fenced(policy);
                self.core
                    .converge(object.as_ref(), children.into_set())
                    .await?
            }
            _ => Default::default(),
        };
        let outcome = match &built {
            Err(blocked) => Outcome::Blocked(blocked),
            Ok(Err(invalid)) => Outcome::Invalid(invalid),
            Ok(Ok(desired)) => Outcome::Built(desired, converged.problem()),
        };
        // Read again: the converge may have created or changed it.
        let deployment = self
            .core
            .children
            .deployment(&namespace, &naming::deployment_name(&name));
        let desired_status = status(
            &agent,
            outcome,
            deployment.as_deref(),
            kaos_workload::conditions::now(),
        );
        let problem = (desired_status.phase == Some(AgentPhase::Failed))
            .then(|| ready_reason(&desired_status))
            .flatten();
        self.core
            .finish(
                object.as_ref(),
                object.status_digest(),
                &desired_status,
                problem,
                &converged,
            )
            .await
    }
}

fn find<'a, T>(list: &'a [(&str, Option<Arc<T>>)], name: &str) -> Option<&'a T> {
    list.iter()
        .find(|(n, _)| *n == name)
        .and_then(|(_, o)| o.as_deref())
}

/// The Ready condition's reason and message, for the Warning event of a failure.
fn ready_reason(status: &kaos_api::agent::AgentStatus) -> Option<(String, String)> {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| (c.reason.clone(), c.message.clone()))
}

pub fn phase_of(agent: &CachedAgent) -> Option<&'static str> {
    agent.phase().map(|p| p.as_str())
}
