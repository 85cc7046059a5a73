//! `spec.suspend`: what a suspended Agent's children and status become. Pure.
//!
//! A suspended agent keeps every child (Service, HTTPRoute, NetworkPolicy, disruption budget, the
//! Deployment itself) but its autoscaler, and its Deployment asks for zero pods; the steps of
//! running workflows that are sent to it (its `pins`) hold it at one pod until none is left.
//! The user's `spec.suspend` is never written: a wake is read from the runs' statuses.
//!
//! - The autoscaler goes: an HPA neither scales a Deployment up from zero nor should it, and
//!   resuming makes it again (the Deployment then starts at its minimum, `converge`).
//! - The disruption budget stays: it guards evictions only, and scaling to zero is not one.

use kaos_api::agent::Agent;
use kaos_api::conditions::{SCALED_TO_ZERO, SUSPENDED, WOKEN_BY_WORKFLOW};
use kaos_workload::conditions::ConditionUpdate;
use kaos_workload::desired::{Desired, Replicas};

/// The pods a woken agent runs: one serves the steps (it has no autoscaler while suspended).
pub const WOKEN_REPLICAS: i32 = 1;

/// Suspends `desired` if `agent` asks for it: zero pods (one while `pins`, the runs with a step
/// on it, are not empty), no autoscaler, and the `Suspended` condition.
pub fn suspend(agent: &Agent, pins: &[String], desired: &mut Desired) {
    if !agent.spec.suspend {
        return;
    }
    let replicas = if pins.is_empty() { 0 } else { WOKEN_REPLICAS };
    let workload = &mut desired.workload;
    workload.replicas = Replicas::Fixed(Some(replicas));
    if let Some(spec) = workload.deployment.spec.as_mut() {
        spec.replicas = Some(replicas);
    }
    workload.autoscaler = None;
    desired.conditions.push(condition(agent, pins));
}

/// `Suspended`: True at zero, False while woken; the message says what is kept and what is lost.
pub fn condition(agent: &Agent, pins: &[String]) -> ConditionUpdate<'static> {
    let memory = match memory_store(agent) {
        Some(store) => format!("its memory is kept in MemoryStore {store}"),
        None => "without a MemoryStore its in-pod memory (sessions, history) is lost at zero pods"
            .to_string(),
    };
    if pins.is_empty() {
        ConditionUpdate {
            type_: SUSPENDED,
            status: true,
            reason: SCALED_TO_ZERO,
            message: format!(
                "spec.suspend is true: the Deployment is scaled to zero pods; its Service and other children are kept; {memory}; a workflow step sent to it wakes it"
            ),
        }
    } else {
        ConditionUpdate {
            type_: SUSPENDED,
            status: false,
            reason: WOKEN_BY_WORKFLOW,
            message: format!(
                "spec.suspend is true, but AgentWorkflowRun {} has a step on it: one pod until no step runs on it; {memory}",
                pins.join(", ")
            ),
        }
    }
}

/// Whether the status shows the agent asleep: suspended, at zero pods, not woken.
pub fn asleep(desired: &Desired) -> bool {
    desired
        .conditions
        .iter()
        .any(|c| c.type_ == SUSPENDED && c.status)
}

fn memory_store(agent: &Agent) -> Option<&str> {
    agent
        .spec
        .config
        .as_ref()
        .and_then(|c| c.memory.as_ref())
        .and_then(|m| m.bound_store())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kaos_api::conditions::SUSPENDED;
    use kaos_workload::build::scaling::ScaledChildren;
    use kaos_workload::desired::WorkloadChildren;
    use serde_json::json;

    fn agent(spec: serde_json::Value) -> Agent {
        serde_json::from_value(json!({"apiVersion": "kaos.tools/v1alpha1", "kind": "Agent",
            "metadata": {"name": "a", "namespace": "ns", "uid": "u"}, "spec": spec}))
        .expect("an Agent")
    }

    fn desired(agent: &Agent) -> Desired {
        let workload = crate::naming::workload(agent);
        let scaled = ScaledChildren::of(&workload, &agent.spec.scaling);
        let children = WorkloadChildren::plain(
            workload.deployment(Default::default(), scaled.replicas.in_spec()),
            Some(workload.service()),
            None,
        );
        Desired::of(children.scaled(scaled), None)
    }

    fn replicas(desired: &Desired) -> (Replicas, Option<i32>) {
        let spec = desired.workload.deployment.spec.as_ref();
        (desired.workload.replicas, spec.and_then(|s| s.replicas))
    }

    #[test]
    fn an_agent_not_suspended_is_left_as_built() {
        let a = agent(json!({"modelAPI": "llm", "model": "m", "replicas": 3}));
        let mut built = desired(&a);
        suspend(&a, &[], &mut built);
        assert_eq!(replicas(&built), (Replicas::Fixed(Some(3)), Some(3)));
        assert!(built.conditions.is_empty() && !asleep(&built));
    }

    #[test]
    fn suspended_it_asks_for_no_pod_and_no_autoscaler_and_keeps_the_rest() {
        let a = agent(json!({"modelAPI": "llm", "model": "m", "suspend": true,
            "autoscaling": {"minReplicas": 2, "maxReplicas": 5}}));
        let mut built = desired(&a);
        assert!(built.workload.autoscaler.is_some());
        suspend(&a, &[], &mut built);
        assert_eq!(replicas(&built), (Replicas::Fixed(Some(0)), Some(0)));
        assert!(built.workload.autoscaler.is_none());
        assert!(built.workload.disruption_budget.is_some(), "kept");
        assert!(built.workload.service.is_some(), "kept");
        assert!(asleep(&built));
        let condition = &built.conditions[0];
        assert_eq!(
            (condition.type_, condition.status, condition.reason),
            (SUSPENDED, true, SCALED_TO_ZERO)
        );
        assert!(condition.message.contains("in-pod memory"), "{condition:?}");
    }

    #[test]
    fn a_pinned_agent_runs_one_pod_and_names_the_runs() {
        let a = agent(json!({"modelAPI": "llm", "model": "m", "suspend": true,
            "config": {"memory": {"memoryStore": "notes"}}}));
        let mut built = desired(&a);
        suspend(&a, &["wf-1".to_string()], &mut built);
        assert_eq!(replicas(&built), (Replicas::Fixed(Some(1)), Some(1)));
        assert!(!asleep(&built));
        let condition = &built.conditions[0];
        assert_eq!(
            (condition.status, condition.reason),
            (false, WOKEN_BY_WORKFLOW)
        );
        assert!(
            condition.message.contains("AgentWorkflowRun wf-1")
                && condition.message.contains("kept in MemoryStore notes"),
            "{condition:?}"
        );
    }
}
