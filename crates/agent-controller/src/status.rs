//! The status an Agent should show, from its desired state (or why it has none) and the
//! observed Deployment. Pure.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kaos_api::agent::{Agent, AgentStatus};
use kaos_workload::build::status_report::WorkloadReport;
use kaos_workload::cache::deployment_view::DeploymentView;
use kaos_workload::conditions::set_condition;
use kaos_workload::desired::{Desired, Problem};

use crate::conditions::{DEPENDENCIES_READY, MEMORY_DEGRADED, dependencies_resolved};

pub fn status(
    agent: &Agent,
    result: &Result<Desired, Problem>,
    conflict: Option<(&'static str, String)>,
    deployment: Option<&DeploymentView>,
    now: Time,
) -> AgentStatus {
    let previous = agent.status.clone().unwrap_or_default().workload;
    let generation = agent.metadata.generation;
    let labels = crate::naming::labels(agent.metadata.name.as_deref().unwrap_or_default());
    let mut report = WorkloadReport::of(
        result,
        conflict,
        deployment,
        &previous,
        &[DEPENDENCIES_READY, MEMORY_DEGRADED],
        &labels,
        generation,
        now.clone(),
    );
    // A spec that cannot be built once its dependencies resolved (no image, say): they did.
    if let Err(problem) = result
        && problem.condition != Some(DEPENDENCIES_READY)
    {
        set_condition(
            &mut report.conditions,
            dependencies_resolved(),
            generation,
            now,
        );
    }
    AgentStatus {
        workload: report.status(),
        linked_resources: linked_resources(agent),
        usage: None,
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
