//! What every reconcile of one watched namespace shares: the caches, the indexes, the A2A
//! client and its background sends, the settings, the clock and the metrics.

use kaos_api::workflow::{AgentWorkflow, AgentWorkflowRun};
use kaos_workload::cache::cached;
use kaos_workload::reconcile::Core;
use kube::runtime::reflector::Store;

use crate::a2a::A2aClient;
use crate::agents::dispatcher::Dispatcher;
use crate::agents::view::AgentView;
use crate::clock::Clock;
use crate::engine::run_progress::AgentState;
use crate::metrics::WorkflowMetrics;
use crate::relations::Index;
use crate::settings::Settings;

pub struct Context {
    /// AgentWorkflows: no finalizer (their runs go by garbage collection).
    pub workflows: Core,
    /// AgentWorkflowRuns, with [`crate::reconcile::run::RUN_FINALIZER`].
    pub runs: Core,
    pub agents: Store<AgentView>,
    pub workflow_store: Store<AgentWorkflow>,
    pub run_store: Store<AgentWorkflowRun>,
    /// Runs → their workflow and, while unfinished, their agents.
    pub run_index: Index,
    pub a2a: A2aClient,
    pub dispatcher: Dispatcher,
    pub settings: Settings,
    pub clock: Clock,
    pub metrics: WorkflowMetrics,
}

impl Context {
    /// What a step of a run in `namespace` reads of agent `name`: whether it exists, whether it
    /// is ready (or suspended, to be woken), and where to send to it.
    pub fn agent_state(&self, namespace: &str, name: &str) -> AgentState {
        match cached(&self.agents, namespace, name) {
            None => AgentState::Missing,
            Some(agent) if !agent.is_ready() && agent.is_suspended() => AgentState::Asleep,
            Some(agent) if !agent.is_ready() => AgentState::NotReady,
            Some(agent) => AgentState::Ready {
                endpoint: self.settings.agent_address_overrides.endpoint(
                    namespace,
                    name,
                    agent.endpoint(),
                ),
            },
        }
    }

    pub fn agent_exists(&self, namespace: &str, name: &str) -> bool {
        cached(&self.agents, namespace, name).is_some()
    }
}
