//! The workflow controller against kaos-testkit, run in-process, with fake agents: Agent objects
//! whose status the tests write (ready, endpoint), reached through AGENT_ADDRESS_OVERRIDES at
//! the [`fake_agents`].

pub mod fake_agents;

use std::collections::HashMap;
use std::time::Duration;

use clap::Parser;
use kaos_api::agent::Agent;
use kaos_api::workflow::{AgentWorkflow, AgentWorkflowRun, RunPhase, StepPhase, StepStatus};
use kaos_harness::cluster::{Kind, TestCluster};
use kaos_harness::controller::RunningController;
use kaos_harness::fixtures::*;
use kaos_harness::status::{Conditioned, Phased};
use kube::ResourceExt;
use workflow_controller::clock::Clock;
use workflow_controller::settings::Args;

use fake_agents::{Fake, Script, Sent, serve, world};

/// The cluster, the fake agents, and the controller (stopped and started again by some tests).
pub struct Harness {
    pub cluster: TestCluster,
    pub fake: Fake,
    overrides: String,
    clock: Clock,
    controller: Option<RunningController>,
}

/// How long a run or a workflow may take to get where a test waits for it.
const RUN_LIMIT: Duration = Duration::from_secs(30);

impl Harness {
    /// A cluster with a ready Agent per script, and the controller running.
    pub async fn start(agents: &[(&str, Script)]) -> Self {
        Self::start_with_clock(agents, Clock::system()).await
    }

    pub async fn start_with_clock(agents: &[(&str, Script)], clock: Clock) -> Self {
        let cluster = TestCluster::start();
        let fake = Fake::default();
        let overrides = serve(&fake, agents).await;
        let mut harness = Harness {
            cluster,
            fake,
            overrides,
            clock,
            controller: None,
        };
        for (agent, _) in agents {
            harness.agent(agent).await;
        }
        harness.start_controller();
        harness
    }

    pub fn start_controller(&mut self) {
        let args = Args::try_parse_from([
            "workflow-controller".to_string(),
            format!("--agent-address-overrides={}", self.overrides),
            "--workflow-poll-interval=200ms".to_string(),
            "--a2a-call-timeout=2s".to_string(),
        ])
        .expect("flags");
        let clock = self.clock.clone();
        self.controller = Some(RunningController::start(
            &self.cluster,
            workflow_controller::ID,
            args.runtime,
            |runtime| {
                workflow_controller::controller::run_with_clock(runtime, args.settings, clock)
            },
        ));
    }

    /// Stops the controller as a process would stop: its sends under way stop with it.
    pub async fn stop_controller(&mut self) {
        if let Some(controller) = self.controller.take() {
            controller.stop().await;
        }
    }

    pub fn controller(&self) -> &RunningController {
        self.controller.as_ref().expect("a controller runs")
    }

    /// A ready Agent `name`, as the agent controller would report it.
    pub async fn agent(&self, name: &str) {
        self.cluster.apply_with_status(&agent(name).ready()).await;
    }

    /// Starts a run of `workflow` by hand.
    pub fn run(&self, name: &str, workflow: &str) {
        self.cluster.apply(&AgentWorkflowRun::test(name, workflow));
    }

    pub fn sends(&self) -> Vec<Sent> {
        world(&self.fake).sends.clone()
    }

    pub fn sent_to(&self, agent: &str) -> Vec<Sent> {
        self.sends()
            .into_iter()
            .filter(|sent| sent.agent == agent)
            .collect()
    }

    pub fn cancels(&self) -> Vec<(String, String)> {
        world(&self.fake).cancels.clone()
    }

    /// Waits until the run or workflow `name` exists and `check` holds.
    pub async fn until<K: Kind>(&self, name: &str, what: &str, check: impl Fn(&K) -> bool) -> K {
        self.cluster
            .until_within(RUN_LIMIT, name, what, check)
            .await
    }

    pub async fn finished(&self, name: &str) -> AgentWorkflowRun {
        self.until(name, "finished", |run: &AgentWorkflowRun| {
            run.phase().is_some_and(RunPhase::is_finished)
        })
        .await
    }
}

/// Agent `name`, standing for a fake agent (its spec is never read: the fake answers).
pub fn agent(name: &str) -> Agent {
    Agent::test(name).model("m")
}

/// A step's status; panics if the run has none of that name.
pub fn step_status<'r>(run: &'r AgentWorkflowRun, name: &str) -> &'r StepStatus {
    run.status
        .as_ref()
        .and_then(|status| status.steps.iter().find(|step| step.name == name))
        .unwrap_or_else(|| panic!("run {} has no step {name}", run.name_any()))
}

/// A step's phase, if the run has started.
pub fn step_phase(run: &AgentWorkflowRun, name: &str) -> Option<StepPhase> {
    run.status
        .as_ref()?
        .steps
        .iter()
        .find(|step| step.name == name)
        .map(|step| step.phase)
}

/// The workflow's `Ready` condition: status, reason, message.
pub fn ready(workflow: &AgentWorkflow) -> Option<(String, String, String)> {
    workflow.condition_state("Ready")
}

/// Each idempotency key the agents received, with how often.
pub fn keys(sends: &[Sent]) -> HashMap<String, usize> {
    let mut keys = HashMap::new();
    for sent in sends {
        *keys.entry(sent.key.clone()).or_default() += 1;
    }
    keys
}
