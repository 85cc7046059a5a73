//! The status an Agent should show, from its desired state (or why it has none), the observed
//! Deployment and, with a budget, what the usage collector decided it shows. Pure.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kaos_api::agent::{Agent, AgentPhase, AgentStatus};
use kaos_workload::build::status_report::{Summary, WorkloadReport};
use kaos_workload::cache::deployment_view::DeploymentView;
use kaos_workload::conditions::{remove_condition, set_condition, set_condition_status};
use kaos_workload::desired::{Desired, Problem};

use crate::conditions::{
    DEPENDENCIES_READY, MEMORY_DEGRADED, SUSPENDED, USAGE_CONDITIONS, dependencies_resolved,
};
use crate::suspension;
use crate::usage::Shown;

pub fn status(
    agent: &Agent,
    result: &Result<Desired, Problem>,
    conflict: Option<(&'static str, String)>,
    deployment: Option<&DeploymentView>,
    usage: &Shown,
    now: Time,
) -> AgentStatus {
    let previous = agent.status.clone().unwrap_or_default();
    let generation = agent.metadata.generation;
    let labels = crate::naming::labels(agent.metadata.name.as_deref().unwrap_or_default());
    let mut report = WorkloadReport::of(
        result,
        conflict,
        deployment,
        &previous.workload,
        &[DEPENDENCIES_READY, MEMORY_DEGRADED, SUSPENDED],
        &labels,
        generation,
        now.clone(),
    );
    // Asleep: Ready=False whatever pods are still going, and `kubectl get agents` says why.
    if let Ok(desired) = result
        && suspension::asleep(desired)
    {
        report.summary = Summary {
            phase: AgentPhase::Suspended,
            reason: SUSPENDED,
            message: "suspended (spec.suspend): scaled to zero pods".into(),
        };
    }
    // A spec that cannot be built once its dependencies resolved (no image, say): they did.
    if let Err(problem) = result
        && problem.condition != Some(DEPENDENCIES_READY)
    {
        set_condition(
            &mut report.conditions,
            dependencies_resolved(&[]),
            generation,
            now.clone(),
        );
    }
    let usage = show_usage(
        &mut report.conditions,
        usage,
        previous.usage,
        generation,
        now,
    );
    AgentStatus {
        workload: report.status(),
        linked_resources: linked_resources(agent),
        usage,
    }
}

/// Sets the usage conditions as `shown` says and returns the usage to show: none without a
/// budget, the `previous` one until the collector has decided.
fn show_usage(
    conditions: &mut Vec<Condition>,
    shown: &Shown,
    previous: Option<kaos_api::budget::BudgetUsage>,
    generation: Option<i64>,
    now: Time,
) -> Option<kaos_api::budget::BudgetUsage> {
    match shown {
        Shown::Unbudgeted => {
            for type_ in USAGE_CONDITIONS {
                remove_condition(conditions, type_);
            }
            None
        }
        Shown::Carried => previous,
        Shown::Published(published) => {
            for verdict in [&published.budget_exceeded, &published.usage_reported] {
                set_condition_status(
                    conditions,
                    verdict.type_,
                    verdict.status,
                    verdict.reason,
                    verdict.message.clone(),
                    generation,
                    now.clone(),
                );
            }
            Some(published.usage.clone())
        }
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
