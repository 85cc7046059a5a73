//! The workflow controller against kaos-testkit, run in-process, with fake agents: Agent objects
//! whose status the tests write (ready, endpoint), reached through AGENT_ADDRESS_OVERRIDES at
//! small A2A servers that answer SendMessage (interactive: after a scripted delay; with budgets:
//! at once), GetTask, ListTasks and CancelTask, and record every send's idempotency key.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::{Json, Router, routing::post};
use clap::Parser;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::events::v1::Event;
use kaos_api::agent::Agent;
use kaos_api::workflow::{AgentWorkflow, AgentWorkflowRun, RunPhase, StepPhase, StepStatus};
use kaos_harness::cluster::{TestCluster, eventually};
use kaos_runtime::Runtime;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use workflow_controller::clock::Clock;
use workflow_controller::settings::Args;

/// What a fake agent answers.
#[derive(Clone, Debug, Default)]
struct Script {
    output: String,
    /// How long a task takes.
    delay: Duration,
    /// The first this many tasks fail.
    failures: u32,
}

fn answers(output: &str, delay_ms: u64) -> Script {
    Script {
        output: output.into(),
        delay: Duration::from_millis(delay_ms),
        failures: 0,
    }
}

/// One SendMessage an agent received.
#[derive(Clone, Debug)]
struct Sent {
    agent: String,
    key: String,
    text: String,
    task: String,
    at: Instant,
}

/// Every fake agent's tasks and what they were asked.
#[derive(Default)]
struct World {
    scripts: HashMap<String, Script>,
    /// Per agent, newest first (as the KAOS runtime lists them).
    tasks: HashMap<String, Vec<Value>>,
    sends: Vec<Sent>,
    /// (agent, task id) of every CancelTask.
    cancels: Vec<(String, String)>,
    finished: HashMap<String, Instant>,
    next_id: u64,
}

type Fake = Arc<Mutex<World>>;

fn world(fake: &Fake) -> std::sync::MutexGuard<'_, World> {
    fake.lock().unwrap_or_else(|e| e.into_inner())
}

const TASK_NOT_FOUND: i64 = -32001;

async fn rpc(
    State((fake, agent)): State<(Fake, String)>,
    Json(request): Json<Value>,
) -> Json<Value> {
    let id = request["id"].clone();
    let params = request["params"].clone();
    let reply = |result: Value| Json(json!({"jsonrpc": "2.0", "id": id, "result": result}));
    let not_found = || {
        Json(json!({"jsonrpc": "2.0", "id": request["id"],
            "error": {"code": TASK_NOT_FOUND, "message": "Task not found"}}))
    };
    match request["method"].as_str().unwrap_or_default() {
        "SendMessage" => {
            let autonomous = params["configuration"]["mode"] == "autonomous";
            let (task_id, script, fails) = {
                let mut world = world(&fake);
                world.next_id += 1;
                let task_id = format!("{agent}-task-{}", world.next_id);
                let script = world.scripts.get(&agent).cloned().unwrap_or_default();
                let fails = script.failures > 0;
                if let Some(script) = world.scripts.get_mut(&agent) {
                    script.failures = script.failures.saturating_sub(1);
                }
                let text = params["message"]["parts"][0]["text"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                let task = json!({
                    "id": task_id, "sessionId": params["contextId"],
                    "status": {"state": "working"},
                    "history": [{"role": "user", "parts": [{"type": "text", "text": text}]}],
                    "metadata": params["message"]["metadata"], "output": "",
                });
                world
                    .tasks
                    .entry(agent.clone())
                    .or_default()
                    .insert(0, task);
                world.sends.push(Sent {
                    agent: agent.clone(),
                    key: params["message"]["metadata"]["kaos.tools/idempotency-key"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    text,
                    task: task_id.clone(),
                    at: Instant::now(),
                });
                (task_id, script, fails)
            };
            // The task runs on whatever happens to the request (a client that goes away).
            let runner = {
                let (fake, agent, task_id) = (fake.clone(), agent.clone(), task_id.clone());
                tokio::spawn(async move {
                    tokio::time::sleep(script.delay).await;
                    let mut world = world(&fake);
                    world.finished.insert(task_id.clone(), Instant::now());
                    if let Some(task) = find_task(&mut world, &agent, &task_id)
                        && task["status"]["state"] == "working"
                    {
                        if fails {
                            task["status"] =
                                json!({"state": "failed", "message": "scripted failure"});
                        } else {
                            task["status"] = json!({"state": "completed"});
                            if let Some(history) = task["history"].as_array_mut() {
                                history.push(json!({"role": "agent",
                                    "parts": [{"type": "text", "text": script.output}]}));
                            }
                        }
                    }
                })
            };
            if !autonomous {
                // Interactive: the answer comes once the task is done, as in the KAOS runtime.
                let _ = runner.await;
            }
            let mut world = world(&fake);
            let task = find_task(&mut world, &agent, &task_id)
                .cloned()
                .unwrap_or_default();
            reply(task)
        }
        "GetTask" => {
            let mut world = world(&fake);
            let task_id = params["id"].as_str().unwrap_or_default();
            match find_task(&mut world, &agent, task_id) {
                Some(task) => reply(task.clone()),
                None => not_found(),
            }
        }
        "ListTasks" => {
            let world = world(&fake);
            let tasks = world.tasks.get(&agent).cloned().unwrap_or_default();
            reply(json!({"tasks": tasks, "count": tasks.len()}))
        }
        "CancelTask" => {
            let mut world = world(&fake);
            let task_id = params["id"].as_str().unwrap_or_default().to_string();
            world.cancels.push((agent.clone(), task_id.clone()));
            match find_task(&mut world, &agent, &task_id) {
                Some(task) => {
                    if task["status"]["state"] == "working" {
                        task["status"] = json!({"state": "canceled"});
                    }
                    reply(task.clone())
                }
                None => not_found(),
            }
        }
        other => Json(json!({"jsonrpc": "2.0", "id": request["id"],
            "error": {"code": -32601, "message": format!("Method not found: {other}")}})),
    }
}

fn find_task<'w>(world: &'w mut World, agent: &str, id: &str) -> Option<&'w mut Value> {
    world
        .tasks
        .get_mut(agent)?
        .iter_mut()
        .find(|task| task["id"] == id)
}

/// Serves one fake agent per script; returns AGENT_ADDRESS_OVERRIDES for them.
async fn serve(fake: &Fake, agents: &[(&str, Script)]) -> String {
    let mut overrides = Vec::new();
    for (agent, script) in agents {
        world(fake)
            .scripts
            .insert(agent.to_string(), script.clone());
        let app = Router::new()
            .route("/", post(rpc))
            .with_state((fake.clone(), agent.to_string()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a local port");
        let address = listener.local_addr().expect("a local address");
        tokio::spawn(async move { axum::serve(listener, app).await });
        overrides.push(format!("default/{agent}={address}"));
    }
    overrides.join(",")
}

/// A controller process, in-process.
struct Controller {
    runtime: Runtime,
    stop: watch::Sender<bool>,
    task: JoinHandle<anyhow::Result<()>>,
}

struct Harness {
    cluster: TestCluster,
    fake: Fake,
    overrides: String,
    clock: Clock,
    controller: Option<Controller>,
    workflows: Api<AgentWorkflow>,
    runs: Api<AgentWorkflowRun>,
}

impl Harness {
    /// A cluster with a ready Agent per script, and the controller running.
    async fn start(agents: &[(&str, Script)]) -> Self {
        Self::start_with_clock(agents, Clock::system()).await
    }

    async fn start_with_clock(agents: &[(&str, Script)], clock: Clock) -> Self {
        let cluster = TestCluster::start();
        let fake = Fake::default();
        let overrides = serve(&fake, agents).await;
        let mut harness = Harness {
            workflows: Api::default_namespaced(cluster.client.clone()),
            runs: Api::default_namespaced(cluster.client.clone()),
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

    fn start_controller(&mut self) {
        let args = Args::try_parse_from([
            "workflow-controller".to_string(),
            format!("--agent-address-overrides={}", self.overrides),
            "--workflow-poll-interval=200ms".to_string(),
            "--a2a-call-timeout=2s".to_string(),
        ])
        .expect("flags");
        let (runtime, stop) = Runtime::for_tests(
            self.cluster.client.clone(),
            workflow_controller::ID,
            args.runtime,
        );
        let task = tokio::spawn(workflow_controller::controller::run_with_clock(
            runtime.clone(),
            args.settings,
            self.clock.clone(),
        ));
        self.controller = Some(Controller {
            runtime,
            stop,
            task,
        });
    }

    /// Stops the controller as a process would stop: its sends under way stop with it.
    async fn stop_controller(&mut self) {
        if let Some(controller) = self.controller.take() {
            let _ = controller.stop.send(true);
            let stopped = tokio::time::timeout(Duration::from_secs(10), controller.task).await;
            assert!(stopped.is_ok(), "the controller stops");
        }
    }

    fn runtime(&self) -> &Runtime {
        &self.controller.as_ref().expect("a controller runs").runtime
    }

    /// A ready Agent `name`, as the agent controller would report it.
    async fn agent(&self, name: &str) {
        self.apply("Agent", name, json!({"modelAPI": "llm", "model": "m"}));
        let agents: Api<Agent> = Api::default_namespaced(self.cluster.client.clone());
        let status = json!({"status": {"ready": true, "phase": "Ready",
            "endpoint": format!("http://agent-{name}.default.svc.cluster.local:8000")}});
        agents
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .expect("agent status");
    }

    fn apply(&self, kind: &str, name: &str, spec: Value) {
        let manifest = json!({"apiVersion": "kaos.tools/v1alpha1", "kind": kind,
            "metadata": {"name": name, "namespace": "default"}, "spec": spec});
        self.cluster.apply(&manifest.to_string());
    }

    /// Starts a run of `workflow` by hand.
    fn run(&self, name: &str, workflow: &str) {
        self.apply("AgentWorkflowRun", name, json!({"workflowRef": workflow}));
    }

    fn sends(&self) -> Vec<Sent> {
        world(&self.fake).sends.clone()
    }

    fn sent_to(&self, agent: &str) -> Vec<Sent> {
        self.sends()
            .into_iter()
            .filter(|sent| sent.agent == agent)
            .collect()
    }

    fn cancels(&self) -> Vec<(String, String)> {
        world(&self.fake).cancels.clone()
    }

    async fn until_run(
        &self,
        name: &str,
        what: &str,
        check: impl Fn(&AgentWorkflowRun) -> bool,
    ) -> AgentWorkflowRun {
        within(30, &format!("run {name} is {what}"), || async {
            self.runs.get(name).await.ok().filter(|run| check(run))
        })
        .await
    }

    async fn finished(&self, name: &str) -> AgentWorkflowRun {
        self.until_run(name, "finished", |run| {
            phase(run).is_some_and(RunPhase::is_finished)
        })
        .await
    }

    async fn until_workflow(
        &self,
        name: &str,
        what: &str,
        check: impl Fn(&AgentWorkflow) -> bool,
    ) -> AgentWorkflow {
        within(30, &format!("workflow {name} {what}"), || async {
            self.workflows.get(name).await.ok().filter(|wf| check(wf))
        })
        .await
    }

    /// Reconciles run so far (every outcome), from the controller's metrics.
    fn reconciles(&self) -> f64 {
        self.runtime()
            .metrics
            .encode()
            .lines()
            .filter(|line| line.starts_with("controller_runtime_reconcile_total{"))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    async fn events(&self, reason: &str) -> Vec<Event> {
        let events: Api<Event> = Api::default_namespaced(self.cluster.client.clone());
        events
            .list(&ListParams::default())
            .await
            .expect("events")
            .items
            .into_iter()
            .filter(|event| event.reason.as_deref() == Some(reason))
            .collect()
    }
}

/// Polls `check` every 20 ms until it returns Some, for at most `seconds`.
async fn within<T, F, Fut>(seconds: u64, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(seconds);
    while Instant::now() < deadline {
        if let Some(value) = check().await {
            return value;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out after {seconds}s waiting until {what}");
}

fn phase(run: &AgentWorkflowRun) -> Option<RunPhase> {
    run.status.as_ref().and_then(|status| status.phase)
}

fn step<'r>(run: &'r AgentWorkflowRun, name: &str) -> &'r StepStatus {
    run.status
        .as_ref()
        .and_then(|status| status.steps.iter().find(|step| step.name == name))
        .unwrap_or_else(|| panic!("run {} has no step {name}", run.name_any()))
}

/// A step's phase, if the run has started.
fn step_phase(run: &AgentWorkflowRun, name: &str) -> Option<StepPhase> {
    run.status
        .as_ref()?
        .steps
        .iter()
        .find(|step| step.name == name)
        .map(|step| step.phase)
}

fn message(run: &AgentWorkflowRun) -> String {
    run.status
        .as_ref()
        .and_then(|status| status.message.clone())
        .unwrap_or_default()
}

/// The workflow's `Ready` condition: status, reason, message.
fn ready(workflow: &AgentWorkflow) -> Option<(String, String, String)> {
    workflow
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|condition| condition.type_ == "Ready")
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// Each idempotency key the agents received, with how often.
fn keys(sends: &[Sent]) -> HashMap<String, usize> {
    let mut keys = HashMap::new();
    for sent in sends {
        *keys.entry(sent.key.clone()).or_default() += 1;
    }
    keys
}

#[tokio::test]
async fn a_diamond_runs_its_middle_steps_together_and_feeds_both_outputs_on() {
    let h = Harness::start(&[
        ("planner", answers("A", 100)),
        ("left", answers("B", 600)),
        ("right", answers("C", 600)),
        ("joiner", answers("D", 100)),
    ])
    .await;
    h.apply(
        "AgentWorkflow",
        "diamond",
        json!({"input": "go", "steps": [
            {"name": "a", "agentRef": "planner"},
            {"name": "b", "agentRef": "left", "dependsOn": ["a"], "input": "{{ steps.a.output }} left"},
            {"name": "c", "agentRef": "right", "dependsOn": ["a"],
             "budgets": {"maxIterations": 3}},
            {"name": "d", "agentRef": "joiner", "dependsOn": ["b", "c"],
             "input": "{{ steps.b.output }}+{{ steps.c.output }}"}]}),
    );
    h.until_workflow("diamond", "is Ready", |wf| {
        ready(wf).is_some_and(|(status, _, _)| status == "True")
    })
    .await;
    h.run("diamond-1", "diamond");
    let run = h.finished("diamond-1").await;
    assert_eq!(phase(&run), Some(RunPhase::Succeeded), "{}", message(&run));
    for (name, output) in [("a", "A"), ("b", "B"), ("c", "C"), ("d", "D")] {
        assert_eq!(step(&run, name).phase, StepPhase::Succeeded);
        assert_eq!(step(&run, name).output.as_deref(), Some(output));
        assert_eq!(step(&run, name).attempt, 1);
    }

    let sends = h.sends();
    assert_eq!(sends.len(), 4, "each step sent once: {sends:?}");
    assert!(keys(&sends).values().all(|count| *count == 1), "{sends:?}");
    let uid = run.uid().expect("a uid");
    assert_eq!(h.sent_to("planner")[0].key, format!("{uid}/a/1"));
    assert_eq!(h.sent_to("planner")[0].text, "go");
    assert_eq!(h.sent_to("left")[0].text, "A left");
    assert_eq!(h.sent_to("joiner")[0].text, "B+C");
    // b and c were in flight together.
    let (left, right) = (&h.sent_to("left")[0], &h.sent_to("right")[0]);
    let finished = |sent: &Sent| world(&h.fake).finished[&sent.task];
    assert!(left.at < finished(right) && right.at < finished(left));

    // The run is owned and labelled by its workflow, its workflow knows it succeeded.
    let owner = &run.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("AgentWorkflow", "diamond")
    );
    assert_eq!(
        run.labels().get("kaos.tools/workflow").map(String::as_str),
        Some("diamond")
    );
    let workflow = h
        .until_workflow("diamond", "records the success", |wf| {
            wf.status
                .as_ref()
                .is_some_and(|s| s.last_successful_time.is_some() && s.active.is_empty())
        })
        .await;
    assert!(workflow.status.is_some());
    assert!(
        h.runtime()
            .metrics
            .encode()
            .contains("kaos_workflow_runs_total{outcome=\"Succeeded\"} 1")
    );
    assert!(!h.events("RunSucceeded").await.is_empty());

    // Steady: a finished run and an idle workflow cost no reconcile and no write.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let before = h.reconciles();
    let writes = h.cluster.writes_during(Duration::from_secs(3)).await;
    assert!(writes.is_empty(), "writes while idle: {writes:?}");
    assert_eq!(h.reconciles() - before, 0.0, "reconciles while idle");
}

#[tokio::test]
async fn a_false_condition_skips_the_step_and_its_dependents() {
    let h = Harness::start(&[
        ("triager", answers("all fine", 50)),
        ("pager", answers("paged", 50)),
    ])
    .await;
    h.apply(
        "AgentWorkflow",
        "triage",
        json!({"steps": [
            {"name": "triage", "agentRef": "triager"},
            {"name": "escalate", "agentRef": "pager", "dependsOn": ["triage"],
             "when": "steps.triage.output.startsWith('URGENT')"},
            {"name": "page", "agentRef": "pager", "dependsOn": ["escalate"]}]}),
    );
    h.run("triage-1", "triage");
    let run = h.finished("triage-1").await;
    assert_eq!(phase(&run), Some(RunPhase::Succeeded), "{}", message(&run));
    assert_eq!(step(&run, "escalate").phase, StepPhase::Skipped);
    assert_eq!(step(&run, "page").phase, StepPhase::Skipped);
    assert!(
        h.sent_to("pager").is_empty(),
        "a skipped step is never sent"
    );
}

#[tokio::test]
async fn a_failed_step_is_retried_and_exhausted_retries_fail_its_dependents() {
    let h = Harness::start(&[
        (
            "flaky",
            Script {
                output: "at last".into(),
                delay: Duration::from_millis(50),
                failures: 1,
            },
        ),
        (
            "broken",
            Script {
                output: String::new(),
                delay: Duration::from_millis(50),
                failures: 100,
            },
        ),
        ("after", answers("never", 50)),
    ])
    .await;
    h.apply(
        "AgentWorkflow",
        "shaky",
        json!({"steps": [
            {"name": "flaky", "agentRef": "flaky", "retries": 2},
            {"name": "broken", "agentRef": "broken", "retries": 1},
            {"name": "after", "agentRef": "after", "dependsOn": ["broken"]}]}),
    );
    h.run("shaky-1", "shaky");
    let run = h.finished("shaky-1").await;
    assert_eq!(phase(&run), Some(RunPhase::Failed));
    let flaky = step(&run, "flaky");
    assert_eq!((flaky.phase, flaky.attempt), (StepPhase::Succeeded, 2));
    assert_eq!(flaky.output.as_deref(), Some("at last"));
    let broken = step(&run, "broken");
    assert_eq!((broken.phase, broken.attempt), (StepPhase::Failed, 2));
    assert!(
        broken
            .error
            .as_deref()
            .is_some_and(|e| e.contains("scripted failure")),
        "{broken:?}"
    );
    assert_eq!(step(&run, "after").phase, StepPhase::Failed);
    assert_eq!(
        step(&run, "after").error.as_deref(),
        Some("dependency broken failed")
    );
    assert!(
        message(&run).starts_with("step broken failed: "),
        "{}",
        message(&run)
    );
    assert!(h.sent_to("after").is_empty());
    // One send per attempt, each with its own key.
    let sends = h.sends();
    assert_eq!(sends.len(), 4, "{sends:?}");
    assert!(keys(&sends).values().all(|count| *count == 1), "{sends:?}");
    let failed = h.events("RunFailed").await;
    assert!(
        failed.iter().any(|e| e
            .note
            .as_deref()
            .is_some_and(|n| n.starts_with("step broken failed"))),
        "{failed:?}"
    );
}

#[tokio::test]
async fn the_ready_condition_names_cycles_bad_schedules_and_missing_agents() {
    let h = Harness::start(&[("writer", answers("w", 10))]).await;
    h.apply(
        "AgentWorkflow",
        "cyclic",
        json!({"steps": [
            {"name": "a", "agentRef": "writer", "dependsOn": ["b"]},
            {"name": "b", "agentRef": "writer", "dependsOn": ["a"]}]}),
    );
    h.apply(
        "AgentWorkflow",
        "badly-timed",
        json!({"schedule": "61 * * * *", "steps": [{"name": "a", "agentRef": "writer"}]}),
    );
    h.apply(
        "AgentWorkflow",
        "lonely",
        json!({"steps": [{"name": "a", "agentRef": "writer"}, {"name": "b", "agentRef": "ghost"}]}),
    );
    let not_ready = |reason: &'static str| {
        move |wf: &AgentWorkflow| ready(wf).is_some_and(|(s, r, _)| s == "False" && r == reason)
    };
    let cyclic = h
        .until_workflow("cyclic", "InvalidGraph", not_ready("InvalidGraph"))
        .await;
    let (_, _, said) = ready(&cyclic).expect("Ready");
    assert!(said.contains("a → b → a"), "{said}");
    let timed = h
        .until_workflow(
            "badly-timed",
            "InvalidSchedule",
            not_ready("InvalidSchedule"),
        )
        .await;
    let (_, _, said) = ready(&timed).expect("Ready");
    assert!(
        said.contains("61 * * * *") && said.contains("fix spec.schedule"),
        "{said}"
    );
    let lonely = h
        .until_workflow("lonely", "AgentNotFound", not_ready("AgentNotFound"))
        .await;
    let (_, _, said) = ready(&lonely).expect("Ready");
    assert!(
        said.starts_with("Agent ghost not found in namespace default"),
        "{said}"
    );

    // A run of the cyclic workflow fails at once, saying why.
    h.run("cyclic-1", "cyclic");
    let run = h.finished("cyclic-1").await;
    assert_eq!(phase(&run), Some(RunPhase::Failed));
    assert_eq!(
        message(&run),
        "the steps depend on each other in a cycle: a → b → a"
    );
    h.run("nowhere-1", "nowhere");
    let run = h.finished("nowhere-1").await;
    assert_eq!(message(&run), "AgentWorkflow nowhere not found");

    // The agent appears: the workflow is Ready, found through the index, not a resync.
    h.agent("ghost").await;
    h.until_workflow("lonely", "Ready once the agent exists", |wf| {
        ready(wf).is_some_and(|(s, r, _)| s == "True" && r == "Valid")
    })
    .await;
}

#[tokio::test]
async fn a_step_waits_for_its_agent_to_be_ready() {
    let h = Harness::start(&[("sleepy", answers("awake", 50))]).await;
    let agents: Api<Agent> = Api::default_namespaced(h.cluster.client.clone());
    let unready = json!({"status": {"ready": false, "phase": "Pending"}});
    agents
        .patch_status("sleepy", &PatchParams::default(), &Patch::Merge(&unready))
        .await
        .expect("status");
    h.apply(
        "AgentWorkflow",
        "patient",
        json!({"steps": [{"name": "a", "agentRef": "sleepy"}]}),
    );
    h.run("patient-1", "patient");
    h.until_run("patient-1", "waiting", |run| {
        message(run) == "step a is waiting for Agent sleepy to be ready"
    })
    .await;
    assert!(h.sends().is_empty());
    h.agent("sleepy").await;
    let run = h.finished("patient-1").await;
    assert_eq!(phase(&run), Some(RunPhase::Succeeded), "{}", message(&run));
}

/// A clock 2.5 s before a minute boundary, far enough from the real one that the workflow's
/// creation (real time) comes after the previous boundary: the first fire is that boundary.
async fn clock_before_a_fire_time() -> (Clock, Timestamp) {
    let now = Timestamp::now();
    if now.as_second().rem_euclid(60) >= 55 {
        tokio::time::sleep(Duration::from_secs(6)).await;
    }
    let now = Timestamp::now();
    let fire = Timestamp::from_second((now.as_second().div_euclid(60) + 1) * 60).expect("a time");
    let fire = if fire.duration_since(now) < SignedDuration::from_millis(2_500) {
        fire + SignedDuration::from_mins(1)
    } else {
        fire
    };
    let clock = Clock::system();
    clock.set(fire - SignedDuration::from_millis(2_500));
    (clock, fire)
}

fn scheduled_name(workflow: &str, fire: Timestamp) -> String {
    format!("{workflow}-{}", fire.as_second() / 60)
}

#[tokio::test]
async fn a_schedule_fires_on_time_and_forbid_then_replace_handle_a_run_still_active() {
    let (clock, fire) = clock_before_a_fire_time().await;
    let h = Harness::start_with_clock(&[("slow", answers("done", 60_000))], clock.clone()).await;
    h.apply(
        "AgentWorkflow",
        "minutely",
        json!({"schedule": "* * * * *", "concurrencyPolicy": "Forbid",
               "steps": [{"name": "work", "agentRef": "slow"}]}),
    );
    let first = scheduled_name("minutely", fire);
    let run = h
        .until_run(&first, "sent", |run| {
            step_phase(run, "work") == Some(StepPhase::Running)
        })
        .await;
    assert_eq!(
        run.spec.scheduled_time.as_ref().map(|t| t.0),
        Some(fire),
        "the run stands for its fire time"
    );
    assert_eq!(run.spec.trigger, kaos_api::workflow::RunTrigger::Schedule);
    let workflow = h
        .until_workflow("minutely", "lists the active run", |wf| {
            wf.status
                .as_ref()
                .is_some_and(|s| s.active == [first.clone()])
        })
        .await;
    let status = workflow.status.expect("status");
    assert_eq!(status.last_schedule_time.map(|t| t.0), Some(fire));
    assert_eq!(
        status.next_schedule_time.map(|t| t.0),
        Some(fire + SignedDuration::from_mins(1))
    );

    // The next minute, with the first run still going: Forbid skips it.
    clock.advance(SignedDuration::from_mins(1));
    poke(&h, "minutely", "1").await;
    let second_fire = fire + SignedDuration::from_mins(1);
    h.until_workflow("minutely", "records the skipped fire", |wf| {
        wf.status
            .as_ref()
            .is_some_and(|s| s.last_schedule_time.as_ref().map(|t| t.0) == Some(second_fire))
    })
    .await;
    assert!(
        h.runs
            .get_opt(&scheduled_name("minutely", second_fire))
            .await
            .expect("get")
            .is_none(),
        "Forbid starts no second run"
    );
    let skipped = h.events("RunSkipped").await;
    assert!(
        skipped.iter().any(|e| e
            .note
            .as_deref()
            .is_some_and(|n| n.contains(&format!("run {first} is still active")))),
        "{skipped:?}"
    );

    // Replace: the old run goes (its task canceled), a new one starts.
    clock.advance(SignedDuration::from_mins(1));
    h.apply(
        "AgentWorkflow",
        "minutely",
        json!({"schedule": "* * * * *", "concurrencyPolicy": "Replace",
               "steps": [{"name": "work", "agentRef": "slow"}]}),
    );
    let third = scheduled_name("minutely", fire + SignedDuration::from_mins(2));
    h.until_run(&third, "sent", |run| {
        step_phase(run, "work").is_some_and(|p| p != StepPhase::Pending)
    })
    .await;
    let old_task = step(&run, "work").task_id.clone().expect("a task id");
    eventually("the replaced run's task is canceled", || async {
        h.cancels()
            .contains(&("slow".to_string(), old_task.clone()))
            .then_some(())
    })
    .await;
    eventually("the replaced run is gone", || async {
        h.runs
            .get_opt(&first)
            .await
            .ok()
            .flatten()
            .is_none()
            .then_some(())
    })
    .await;
}

/// Wakes a workflow as a user's annotation would.
async fn poke(h: &Harness, workflow: &str, value: &str) {
    let patch = json!({"metadata": {"annotations": {"test.kaos.tools/poke": value}}});
    h.workflows
        .patch(workflow, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("annotate");
}

#[tokio::test]
async fn history_limits_keep_the_newest_runs() {
    let h = Harness::start(&[("quick", answers("ok", 10))]).await;
    h.apply(
        "AgentWorkflow",
        "kept",
        json!({"successfulRunsHistoryLimit": 1, "failedRunsHistoryLimit": 0,
               "steps": [{"name": "a", "agentRef": "quick"}]}),
    );
    for run in ["kept-1", "kept-2", "kept-3"] {
        h.run(run, "kept");
        let finished = h.finished(run).await;
        assert_eq!(phase(&finished), Some(RunPhase::Succeeded));
    }
    eventually("only the newest success is kept", || async {
        let names: Vec<String> = h
            .runs
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .iter()
            .map(|run| run.name_any())
            .collect();
        (names == ["kept-3"]).then_some(())
    })
    .await;
}

#[tokio::test]
async fn deleting_a_run_mid_step_cancels_its_task() {
    let h = Harness::start(&[("slow", answers("late", 60_000))]).await;
    h.apply(
        "AgentWorkflow",
        "long",
        json!({"steps": [{"name": "a", "agentRef": "slow"}]}),
    );
    h.run("long-1", "long");
    let run = h
        .until_run("long-1", "running", |run| {
            step_phase(run, "a") == Some(StepPhase::Running)
        })
        .await;
    let task = step(&run, "a").task_id.clone().expect("a task id");
    h.runs
        .delete("long-1", &DeleteParams::default())
        .await
        .expect("delete");
    eventually("the run is gone", || async {
        h.runs
            .get_opt("long-1")
            .await
            .ok()
            .flatten()
            .is_none()
            .then_some(())
    })
    .await;
    assert!(
        h.cancels().contains(&("slow".to_string(), task)),
        "{:?}",
        h.cancels()
    );
}

#[tokio::test]
async fn a_restart_in_the_middle_of_a_run_neither_repeats_nor_loses_a_step() {
    let mut h =
        Harness::start(&[("first", answers("1", 1_500)), ("second", answers("2", 50))]).await;
    h.apply(
        "AgentWorkflow",
        "two",
        json!({"steps": [{"name": "a", "agentRef": "first"},
                         {"name": "b", "agentRef": "second", "dependsOn": ["a"]}]}),
    );
    h.run("two-1", "two");
    eventually("the first step is sent", || async {
        (!h.sent_to("first").is_empty()).then_some(())
    })
    .await;
    h.stop_controller().await;
    h.start_controller();
    let run = h.finished("two-1").await;
    assert_eq!(phase(&run), Some(RunPhase::Succeeded), "{}", message(&run));
    assert_eq!(step(&run, "b").output.as_deref(), Some("2"));
    let sends = h.sends();
    assert_eq!(sends.len(), 2, "{sends:?}");
    assert!(keys(&sends).values().all(|count| *count == 1), "{sends:?}");
}

/// An agent that cannot be reached (its Service name does not resolve here, as in a sandbox
/// without `--agent-address`) fails the step's attempt at once with the connection error, not
/// at its time limit (600 s by default).
#[tokio::test]
async fn an_unreachable_agent_fails_the_step_at_once_with_the_connection_error() {
    let h = Harness::start(&[("present", answers("here", 10))]).await;
    h.agent("unreachable").await;
    h.apply(
        "AgentWorkflow",
        "lonely",
        json!({"steps": [{"name": "a", "agentRef": "unreachable"}]}),
    );
    h.run("lonely-1", "lonely");
    let run = within(30, "the run to fail", || async {
        h.runs
            .get_opt("lonely-1")
            .await
            .ok()
            .flatten()
            .filter(|run| phase(run) == Some(RunPhase::Failed))
    })
    .await;
    let error = step(&run, "a").error.clone().unwrap_or_default();
    assert!(
        error.contains("cannot connect to the agent at http://agent-unreachable.default"),
        "{error}"
    );
}
