//! A workflow step sent to a suspended Agent, with the agent and workflow controllers running
//! together on kaos-testkit and a fake A2A agent standing for the pod (the workflow controller's
//! own, reached through AGENT_ADDRESS_OVERRIDES): the step wakes the agent (the Deployment goes
//! to one pod), is sent once it is ready, and the agent goes back to zero after the run; the
//! user's `spec.suspend` is never written. A step whose agent never wakes times out within its
//! own limit.

// The workflow controller's fake agents, written once; its tests read what this one does not.
#[allow(dead_code)]
#[path = "../crates/workflow-controller/tests/support/fake_agents.rs"]
mod fake_agents;

use std::time::Duration;

use clap::Parser;
use k8s_openapi::api::apps::v1::Deployment;
use kaos_api::agent::{Agent, AgentPhase};
use kaos_api::modelapi::ModelAPI;
use kaos_api::workflow::{AgentWorkflow, AgentWorkflowRun, RunPhase, StepPhase};
use kaos_harness::cluster::TestCluster;
use kaos_harness::controller::RunningController;
use kaos_harness::deployments::replicas_of;
use kaos_harness::fixtures::*;
use kaos_harness::status::{Conditioned, Phased};

use fake_agents::{Fake, answers, serve, world};

/// The agent and workflow controllers on `cluster`, the workflow controller reaching agents at
/// `overrides`.
fn start_controllers(cluster: &TestCluster, overrides: &str) -> Vec<RunningController> {
    let args = agent_controller::settings::Args::try_parse_from([
        "agent-controller",
        "--default-agent-image=agent:1",
    ])
    .expect("flags");
    let agents = RunningController::start(cluster, agent_controller::ID, args.runtime, |rt| {
        agent_controller::controller::run(rt, args.settings)
    });
    let args = workflow_controller::settings::Args::try_parse_from([
        "workflow-controller".to_string(),
        format!("--agent-address-overrides={overrides}"),
        "--workflow-poll-interval=200ms".to_string(),
        "--a2a-call-timeout=2s".to_string(),
    ])
    .expect("flags");
    let workflows =
        RunningController::start(cluster, workflow_controller::ID, args.runtime, |rt| {
            workflow_controller::controller::run(rt, args.settings)
        });
    vec![agents, workflows]
}

fn one_step(agent: &str, timeout_seconds: i64) -> AgentWorkflow {
    let mut write = step("write", agent);
    write.timeout_seconds = Some(timeout_seconds);
    AgentWorkflow::test("wf").input("draft it").step(write)
}

async fn finished(cluster: &TestCluster, run: &str) -> AgentWorkflowRun {
    cluster
        .until_within(
            Duration::from_secs(30),
            run,
            "finished",
            |r: &AgentWorkflowRun| r.phase().is_some_and(RunPhase::is_finished),
        )
        .await
}

#[tokio::test]
async fn a_step_wakes_a_suspended_agent_which_sleeps_again_after_the_run() {
    let cluster = TestCluster::start();
    let fake = Fake::default();
    let overrides = serve(&fake, &[("writer", answers("written", 1500))]).await;
    let _controllers = start_controllers(&cluster, &overrides);
    cluster
        .apply_with_status(&ModelAPI::test("llm").proxy(["openai/*"]).ready())
        .await;
    cluster.apply(&Agent::test("writer").suspended(true));
    cluster
        .until_phase::<Agent>("writer", AgentPhase::Suspended)
        .await;
    let at_zero = |d: &Deployment| replicas_of(d) == Some(0);
    cluster.until("agent-writer", "at zero pods", at_zero).await;

    cluster.apply(&one_step("writer", 60));
    cluster.apply(&AgentWorkflowRun::test("wf-1", "wf"));
    // Woken while its step is in flight: one pod, Ready, the user's suspension left as it is.
    cluster
        .until("agent-writer", "woken to one pod", |d: &Deployment| {
            replicas_of(d) == Some(1)
        })
        .await;
    let awake = cluster
        .until("writer", "woken by the run", |a: &Agent| {
            a.reason("Suspended") == "WokenByWorkflow"
        })
        .await;
    assert!(awake.spec.suspend);
    let run = finished(&cluster, "wf-1").await;
    assert_eq!(run.phase(), Some(RunPhase::Succeeded), "{}", run.message());
    let step = &run.status.as_ref().expect("status").steps[0];
    assert_eq!((step.phase, step.attempt), (StepPhase::Succeeded, 1));
    assert_eq!(step.output.as_deref(), Some("written"));
    let sends = world(&fake).sends.clone();
    assert_eq!(sends.len(), 1, "sent once, after the wake: {sends:?}");
    assert_eq!(
        (sends[0].agent.as_str(), sends[0].text.as_str()),
        ("writer", "draft it")
    );

    // The run is over: back to zero pods, Suspended again.
    cluster
        .until("agent-writer", "at zero pods again", at_zero)
        .await;
    let agent = cluster
        .until_phase::<Agent>("writer", AgentPhase::Suspended)
        .await;
    assert_eq!(agent.reason("Suspended"), "ScaledToZero");
    assert!(agent.spec.suspend);
}

#[tokio::test]
async fn a_step_whose_agent_never_wakes_times_out_within_its_limit() {
    let cluster = TestCluster::start();
    let fake = Fake::default();
    let overrides = serve(&fake, &[("writer", answers("written", 100))]).await;
    let _controllers = start_controllers(&cluster, &overrides);
    // No ModelAPI: the agent cannot get a Deployment, so it never becomes ready.
    cluster.apply(&Agent::test("writer").suspended(true));
    cluster
        .until_phase::<Agent>("writer", AgentPhase::Failed)
        .await;

    cluster.apply(&one_step("writer", 3));
    cluster.apply(&AgentWorkflowRun::test("wf-1", "wf"));
    let waking = cluster
        .until("wf-1", "waking its agent", |r: &AgentWorkflowRun| {
            r.message().contains("is waking Agent writer")
        })
        .await;
    let started = waking
        .status
        .as_ref()
        .and_then(|s| s.steps[0].start_time.clone());
    let run = finished(&cluster, "wf-1").await;
    assert_eq!(run.phase(), Some(RunPhase::Failed));
    assert_eq!(
        run.message(),
        "step write failed: attempt 1 timed out after 3s"
    );
    let step = &run.status.as_ref().expect("status").steps[0];
    assert_eq!(step.start_time, started, "the limit ran from the dispatch");
    assert!(world(&fake).sends.is_empty(), "never sent");
}
