//! `spec.suspend`: an agent scaled to zero pods with its children kept, shown as `Suspended`;
//! resumed at its replicas or autoscaling; woken by the workflow steps sent to it (read from
//! the runs' statuses, here written by the test as the workflow controller would) and asleep
//! again once none is left; named in its listers' `DependenciesReady`.

mod support;

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kaos_api::agent::{Agent, AgentPhase};
use kaos_api::workflow::AgentWorkflowRun;
use kaos_harness::cluster::TestCluster;
use kaos_harness::deployments::replicas_of;
use kaos_harness::fixtures::*;
use kaos_harness::status::{Conditioned, Phased};
use serde_json::json;
use support::{llm, start};

async fn deployment_replicas(cluster: &TestCluster, wanted: i32) {
    let what = format!("asking for {wanted} pods");
    cluster
        .until("agent-a", &what, |d: &Deployment| {
            replicas_of(d) == Some(wanted)
        })
        .await;
}

async fn suspend(cluster: &TestCluster, suspend: bool) {
    cluster
        .merge_patch::<Agent>("a", json!({"spec": {"suspend": suspend}}))
        .await;
}

#[tokio::test]
async fn a_suspended_agent_is_at_zero_pods_with_its_children_kept_and_resumes_at_its_replicas() {
    let h = start();
    h.apply_with_status(&llm().ready()).await;
    h.apply(&Agent::test("a").replicas(2));
    h.until_phase::<Agent>("a", AgentPhase::Ready).await;
    assert!(h.get_opt::<PodDisruptionBudget>("agent-a").await.is_some());

    suspend(&h, true).await;
    deployment_replicas(&h, 0).await;
    let agent = h.until_phase::<Agent>("a", AgentPhase::Suspended).await;
    let status = agent.status.as_ref().expect("status");
    assert!(!status.ready);
    let (ready, reason, _) = agent.condition_state("Ready").expect("Ready");
    assert_eq!((ready.as_str(), reason.as_str()), ("False", "Suspended"));
    let (suspended, reason, message) = agent.condition_state("Suspended").expect("Suspended");
    assert_eq!(
        (suspended.as_str(), reason.as_str()),
        ("True", "ScaledToZero")
    );
    assert!(
        message.contains("without a MemoryStore its in-pod memory"),
        "{message}"
    );
    assert_eq!(
        status.endpoint.as_deref(),
        Some("http://agent-a.default.svc.cluster.local:8000"),
        "the endpoint stays published"
    );
    // Every child is kept: the Service (callers keep their URL), the disruption budget.
    assert!(h.get_opt::<Service>("agent-a").await.is_some());
    assert!(h.get_opt::<PodDisruptionBudget>("agent-a").await.is_some());

    // Asleep and steady (once the last pod is gone): no reconcile, no write.
    h.until("a", "reporting no pods", |a: &Agent| {
        a.status.as_ref().and_then(|s| s.scale.replicas) == Some(0)
    })
    .await;
    h.caught_up().await;
    let (reconciles, writes) = h.idle(Duration::from_secs(2)).await;
    assert_eq!((reconciles, writes), (0.0, Vec::<String>::new()));

    // The user's field is theirs: no controller wrote spec.suspend.
    assert!(h.get::<Agent>("a").await.spec.suspend);

    suspend(&h, false).await;
    deployment_replicas(&h, 2).await;
    let agent = h.until_phase::<Agent>("a", AgentPhase::Ready).await;
    assert!(
        agent.condition("Suspended").is_none(),
        "{:?}",
        agent.conditions()
    );
    assert_eq!(agent.reason("Ready"), "DeploymentReady");
}

#[tokio::test]
async fn an_agent_without_replicas_resumes_at_one_pod() {
    let h = start();
    h.apply_with_status(&llm().ready()).await;
    h.apply(&Agent::test("a").suspended(true));
    let agent = h.until_phase::<Agent>("a", AgentPhase::Suspended).await;
    assert_eq!(agent.reason("Suspended"), "ScaledToZero");
    deployment_replicas(&h, 0).await;
    suspend(&h, false).await;
    // The controller lets go of the field: the API server's default (1) applies, as at creation.
    h.until("agent-a", "no replicas of ours", |d: &Deployment| {
        replicas_of(d).is_none_or(|r| r == 1)
    })
    .await;
    let agent = h.until_phase::<Agent>("a", AgentPhase::Ready).await;
    assert_eq!(agent.status.and_then(|s| s.scale.desired_replicas), Some(1));
}

#[tokio::test]
async fn a_suspended_agent_has_no_autoscaler_and_gets_it_back_at_its_minimum() {
    let h = start();
    h.apply_with_status(&llm().ready()).await;
    h.apply(&Agent::test("a").autoscaling(Some(2), 5));
    h.until_phase::<Agent>("a", AgentPhase::Ready).await;
    deployment_replicas(&h, 2).await;

    suspend(&h, true).await;
    deployment_replicas(&h, 0).await;
    h.until_gone::<HorizontalPodAutoscaler>("agent-a").await;
    h.until_phase::<Agent>("a", AgentPhase::Suspended).await;

    suspend(&h, false).await;
    // An autoscaler never scales up from zero: the Deployment starts at its minimum again.
    deployment_replicas(&h, 2).await;
    let hpa = h.get::<HorizontalPodAutoscaler>("agent-a").await;
    assert_eq!(hpa.spec.and_then(|s| s.min_replicas), Some(2));
    h.until_phase::<Agent>("a", AgentPhase::Ready).await;
}

/// A run of workflow `wf` whose step `write` on agent `a` is in `phase`, with the run in
/// `run_phase`, as the workflow controller writes it.
fn run_with_step(run_phase: &str, phase: &str) -> AgentWorkflowRun {
    let mut run = AgentWorkflowRun::test("wf-1", "wf");
    run.status = Some(
        serde_json::from_value(json!({
            "phase": run_phase,
            "plan": [{"name": "write", "agentRef": "a"}],
            "steps": [{"name": "write", "phase": phase, "attempt": 1}],
        }))
        .expect("a run status"),
    );
    run
}

#[tokio::test]
async fn a_workflow_step_wakes_a_suspended_agent_until_the_run_is_over() {
    let h = start();
    h.apply_with_status(&llm().ready()).await;
    h.apply(&Agent::test("a").suspended(true));
    h.until_phase::<Agent>("a", AgentPhase::Suspended).await;
    deployment_replicas(&h, 0).await;

    // A step being sent to it pins it: one pod, Ready, the suspension still in the spec.
    h.apply_with_status(&run_with_step("Running", "Dispatching"))
        .await;
    deployment_replicas(&h, 1).await;
    let agent = h.until_phase::<Agent>("a", AgentPhase::Ready).await;
    let (suspended, reason, message) = agent.condition_state("Suspended").expect("Suspended");
    assert_eq!(
        (suspended.as_str(), reason.as_str()),
        ("False", "WokenByWorkflow")
    );
    assert!(message.contains("AgentWorkflowRun wf-1"), "{message}");
    assert!(agent.spec.suspend, "the user's field is left as it is");

    // Still pinned while its task runs; awake and steady meanwhile.
    h.write_status(&run_with_step("Running", "Running")).await;
    let (_, writes) = h.idle(Duration::from_secs(1)).await;
    assert!(
        writes.iter().all(|w| !w.contains("deployments")),
        "{writes:?}"
    );
    assert_eq!(replicas_of(&h.get::<Deployment>("agent-a").await), Some(1));

    // The run is over: back to sleep.
    h.write_status(&run_with_step("Succeeded", "Succeeded"))
        .await;
    deployment_replicas(&h, 0).await;
    let agent = h.until_phase::<Agent>("a", AgentPhase::Suspended).await;
    assert_eq!(agent.reason("Suspended"), "ScaledToZero");
}

#[tokio::test]
async fn an_agent_names_its_suspended_peer_and_stays_ready() {
    let h = start();
    h.apply_with_status(&llm().ready()).await;
    h.apply(&Agent::test("a"));
    h.apply(&Agent::test("lead").peers(["a"]));
    h.until_phase::<Agent>("lead", AgentPhase::Ready).await;

    suspend(&h, true).await;
    let lead = h
        .until("lead", "naming its suspended peer", |l: &Agent| {
            l.condition_state("DependenciesReady")
                .is_some_and(|(_, _, message)| message.contains("peer a is suspended"))
        })
        .await;
    assert_eq!(lead.phase(), Some(AgentPhase::Ready));
    assert_eq!(
        lead.condition_state("DependenciesReady").map(|c| c.0),
        Some("True".to_string())
    );

    suspend(&h, false).await;
    h.until("lead", "no longer naming it", |l: &Agent| {
        l.condition_state("DependenciesReady")
            .is_some_and(|(_, _, message)| !message.contains("suspended"))
    })
    .await;
}
