//! The status an Agent should show. Pure.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kaos_api::agent::{Agent, AgentPhase, AgentStatus};
use kaos_workload::conditions::{ConditionUpdate, remove_condition, set_condition};
use kaos_workload::deployment_view::DeploymentView;
use kaos_workload::rollout::{Summary, WorkloadReport, observe, summarize};

use crate::build::{BuildError, Desired};
use crate::resolve::Blocked;

/// The conditions a reconcile sets, every time.
pub const DEPENDENCIES_READY: &str = "DependenciesReady";
pub const READY: &str = "Ready";
/// Set while the agent is built with a MemoryStore binding: True while the store is missing or
/// not ready (the agent serves with short-term memory only), removed without a binding.
pub const MEMORY_DEGRADED: &str = "MemoryDegraded";
pub const OWN_CONDITIONS: [&str; 3] = [DEPENDENCIES_READY, READY, MEMORY_DEGRADED];

/// Where a reconcile got to.
pub enum Outcome<'a> {
    Blocked(&'a Blocked),
    Invalid(&'a BuildError),
    /// Built, and converged with these conflicts (a child name taken by a foreign object).
    Built(&'a Desired, Option<(&'static str, String)>),
}

pub fn status(
    agent: &Agent,
    outcome: Outcome<'_>,
    deployment: Option<&DeploymentView>,
    now: Time,
) -> AgentStatus {
    let previous = agent.status.clone().unwrap_or_default();
    let generation = agent.metadata.generation;
    let rollout = observe(deployment);
    let mut conditions = previous.conditions.clone();
    let dependencies = match &outcome {
        Outcome::Blocked(b) => ConditionUpdate {
            type_: DEPENDENCIES_READY,
            status: false,
            reason: b.reason,
            message: b.message.clone(),
        },
        _ => ConditionUpdate {
            type_: DEPENDENCIES_READY,
            status: true,
            reason: "Resolved",
            message: "the ModelAPI and MCPServers are available".into(),
        },
    };
    set_condition(&mut conditions, dependencies, generation, now.clone());
    let memory = match &outcome {
        Outcome::Built(desired, _) => desired.memory.as_ref(),
        _ => None,
    };
    match memory {
        Some(bound) => {
            let update = match &bound.degraded {
                Some(message) => ConditionUpdate {
                    type_: MEMORY_DEGRADED,
                    status: true,
                    reason: "MemoryStoreNotReady",
                    message: message.clone(),
                },
                None => ConditionUpdate {
                    type_: MEMORY_DEGRADED,
                    status: false,
                    reason: "MemoryHealthy",
                    message: format!("MemoryStore {} is ready", bound.store),
                },
            };
            set_condition(&mut conditions, update, generation, now.clone());
        }
        None => remove_condition(&mut conditions, MEMORY_DEGRADED),
    }
    let (summary, endpoint) = match outcome {
        Outcome::Blocked(b) => {
            let phase = if b.waiting {
                AgentPhase::Waiting
            } else {
                AgentPhase::Failed
            };
            let summary = Summary {
                phase,
                reason: b.reason,
                message: b.message.clone(),
            };
            (summary, previous.endpoint.clone())
        }
        Outcome::Invalid(e) => {
            let summary = Summary {
                phase: AgentPhase::Failed,
                reason: e.reason,
                message: e.message.clone(),
            };
            (summary, previous.endpoint.clone())
        }
        Outcome::Built(desired, problem) => {
            let problem = problem.as_ref().map(|(r, m)| (*r, m.as_str()));
            let summary = summarize(problem, &rollout).into_phase();
            (summary, desired.endpoint.clone())
        }
    };
    let name = agent.metadata.name.as_deref().unwrap_or_default();
    let report = WorkloadReport {
        conditions,
        summary,
        endpoint,
        rollout,
        labels: &crate::naming::labels(name),
        generation,
        now,
    };
    AgentStatus {
        workload: report.status(),
        linked_resources: linked_resources(agent),
    }
}

/// `modelapi`, and `memorystore` when the agent binds to one.
fn linked_resources(agent: &Agent) -> std::collections::BTreeMap<String, String> {
    let store = agent
        .spec
        .config
        .as_ref()
        .and_then(|c| c.memory.as_ref())
        .and_then(|m| m.bound_store());
    [
        ("modelapi", Some(agent.spec.model_api.as_str())),
        ("memorystore", store),
    ]
    .into_iter()
    .filter_map(|(kind, name)| Some((kind.to_string(), name?.to_string())))
    .collect()
}
