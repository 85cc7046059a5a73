//! The workflow controller against kaos-testkit with fake agents (`support`): runs of diamonds,
//! conditions, retries, schedules and their concurrency policies, history limits, cancellation
//! and restarts.

mod support;

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use kaos_api::workflow::{AgentWorkflow, AgentWorkflowRun, ConcurrencyPolicy, RunPhase, StepPhase};
use kaos_harness::cluster::eventually;
use kaos_harness::fixtures::*;
use kaos_harness::status::Phased;
use kube::ResourceExt;
use serde_json::json;
use support::fake_agents::{Script, Sent, answers, world};
use support::*;
use workflow_controller::clock::Clock;

#[tokio::test]
async fn a_diamond_runs_its_middle_steps_together_and_feeds_both_outputs_on() {
    let h = Harness::start(&[
        ("planner", answers("A", 100)),
        ("left", answers("B", 600)),
        ("right", answers("C", 600)),
        ("joiner", answers("D", 100)),
    ])
    .await;
    let diamond = AgentWorkflow::test("diamond")
        .input("go")
        .step(step("a", "planner"))
        .step(
            step("b", "left")
                .after(["a"])
                .input("{{ steps.a.output }} left"),
        )
        .step(step("c", "right").after(["a"]).max_iterations(3))
        .step(
            step("d", "joiner")
                .after(["b", "c"])
                .input("{{ steps.b.output }}+{{ steps.c.output }}"),
        );
    h.cluster.apply(&diamond);
    h.until("diamond", "Ready", |wf: &AgentWorkflow| {
        ready(wf).is_some_and(|(status, _, _)| status == "True")
    })
    .await;
    h.run("diamond-1", "diamond");
    let run = h.finished("diamond-1").await;
    assert_eq!(run.phase(), Some(RunPhase::Succeeded), "{}", run.message());
    for (name, output) in [("a", "A"), ("b", "B"), ("c", "C"), ("d", "D")] {
        assert_eq!(step_status(&run, name).phase, StepPhase::Succeeded);
        assert_eq!(step_status(&run, name).output.as_deref(), Some(output));
        assert_eq!(step_status(&run, name).attempt, 1);
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
        .until("diamond", "recording the success", |wf: &AgentWorkflow| {
            wf.status
                .as_ref()
                .is_some_and(|s| s.last_successful_time.is_some() && s.active.is_empty())
        })
        .await;
    assert!(workflow.status.is_some());
    assert!(
        h.controller()
            .runtime
            .metrics
            .encode()
            .contains("kaos_workflow_runs_total{outcome=\"Succeeded\"} 1")
    );
    assert!(!h.cluster.events("RunSucceeded").await.is_empty());

    // Steady: a finished run and an idle workflow cost no reconcile and no write.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let before = h.controller().reconciles();
    h.cluster
        .assert_no_writes_during(Duration::from_secs(3))
        .await;
    assert_eq!(
        h.controller().reconciles() - before,
        0.0,
        "reconciles while idle"
    );
}

#[tokio::test]
async fn a_false_condition_skips_the_step_and_its_dependents() {
    let h = Harness::start(&[
        ("triager", answers("all fine", 50)),
        ("pager", answers("paged", 50)),
    ])
    .await;
    let triage = AgentWorkflow::test("triage")
        .step(step("triage", "triager"))
        .step(
            step("escalate", "pager")
                .after(["triage"])
                .when("steps.triage.output.startsWith('URGENT')"),
        )
        .step(step("page", "pager").after(["escalate"]));
    h.cluster.apply(&triage);
    h.run("triage-1", "triage");
    let run = h.finished("triage-1").await;
    assert_eq!(run.phase(), Some(RunPhase::Succeeded), "{}", run.message());
    assert_eq!(step_status(&run, "escalate").phase, StepPhase::Skipped);
    assert_eq!(step_status(&run, "page").phase, StepPhase::Skipped);
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
    let shaky = AgentWorkflow::test("shaky")
        .step(step("flaky", "flaky").retries(2))
        .step(step("broken", "broken").retries(1))
        .step(step("after", "after").after(["broken"]));
    h.cluster.apply(&shaky);
    h.run("shaky-1", "shaky");
    let run = h.finished("shaky-1").await;
    assert_eq!(run.phase(), Some(RunPhase::Failed));
    let flaky = step_status(&run, "flaky");
    assert_eq!((flaky.phase, flaky.attempt), (StepPhase::Succeeded, 2));
    assert_eq!(flaky.output.as_deref(), Some("at last"));
    let broken = step_status(&run, "broken");
    assert_eq!((broken.phase, broken.attempt), (StepPhase::Failed, 2));
    assert!(
        broken
            .error
            .as_deref()
            .is_some_and(|e| e.contains("scripted failure")),
        "{broken:?}"
    );
    assert_eq!(step_status(&run, "after").phase, StepPhase::Failed);
    assert_eq!(
        step_status(&run, "after").error.as_deref(),
        Some("dependency broken failed")
    );
    assert!(
        run.message().starts_with("step broken failed: "),
        "{}",
        run.message()
    );
    assert!(h.sent_to("after").is_empty());
    // One send per attempt, each with its own key.
    let sends = h.sends();
    assert_eq!(sends.len(), 4, "{sends:?}");
    assert!(keys(&sends).values().all(|count| *count == 1), "{sends:?}");
    let failed = h.cluster.events("RunFailed").await;
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
    let cyclic = AgentWorkflow::test("cyclic")
        .step(step("a", "writer").after(["b"]))
        .step(step("b", "writer").after(["a"]));
    h.cluster.apply(&cyclic);
    let badly_timed = AgentWorkflow::test("badly-timed")
        .schedule("61 * * * *")
        .step(step("a", "writer"));
    h.cluster.apply(&badly_timed);
    let lonely = AgentWorkflow::test("lonely")
        .step(step("a", "writer"))
        .step(step("b", "ghost"));
    h.cluster.apply(&lonely);
    let not_ready = |reason: &'static str| {
        move |wf: &AgentWorkflow| ready(wf).is_some_and(|(s, r, _)| s == "False" && r == reason)
    };
    let cyclic: AgentWorkflow = h
        .until("cyclic", "InvalidGraph", not_ready("InvalidGraph"))
        .await;
    let (_, _, said) = ready(&cyclic).expect("Ready");
    assert!(said.contains("a → b → a"), "{said}");
    let timed: AgentWorkflow = h
        .until(
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
    let lonely: AgentWorkflow = h
        .until("lonely", "AgentNotFound", not_ready("AgentNotFound"))
        .await;
    let (_, _, said) = ready(&lonely).expect("Ready");
    assert!(
        said.starts_with("Agent ghost not found in namespace default"),
        "{said}"
    );

    // A run of the cyclic workflow fails at once, saying why.
    h.run("cyclic-1", "cyclic");
    let run = h.finished("cyclic-1").await;
    assert_eq!(run.phase(), Some(RunPhase::Failed));
    assert_eq!(
        run.message(),
        "the steps depend on each other in a cycle: a → b → a"
    );
    h.run("nowhere-1", "nowhere");
    let run = h.finished("nowhere-1").await;
    assert_eq!(run.message(), "AgentWorkflow nowhere not found");

    // The agent appears: the workflow is Ready, found through the index, not a resync.
    h.agent("ghost").await;
    h.until(
        "lonely",
        "Ready once the agent exists",
        |wf: &AgentWorkflow| ready(wf).is_some_and(|(s, r, _)| s == "True" && r == "Valid"),
    )
    .await;
}

#[tokio::test]
async fn a_step_waits_for_its_agent_to_be_ready() {
    let h = Harness::start(&[("sleepy", answers("awake", 50))]).await;
    h.cluster.write_status(&agent("sleepy").pending()).await;
    h.cluster
        .apply(&AgentWorkflow::test("patient").step(step("a", "sleepy")));
    h.run("patient-1", "patient");
    h.until("patient-1", "waiting", |run: &AgentWorkflowRun| {
        run.message() == "step a is waiting for Agent sleepy to be ready"
    })
    .await;
    assert!(h.sends().is_empty());
    h.agent("sleepy").await;
    let run = h.finished("patient-1").await;
    assert_eq!(run.phase(), Some(RunPhase::Succeeded), "{}", run.message());
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
    let minutely = |policy| {
        AgentWorkflow::test("minutely")
            .schedule("* * * * *")
            .concurrency_policy(policy)
            .step(step("work", "slow"))
    };
    h.cluster.apply(&minutely(ConcurrencyPolicy::Forbid));
    let first = scheduled_name("minutely", fire);
    let run = h
        .until(&first, "sent", |run: &AgentWorkflowRun| {
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
        .until(
            "minutely",
            "listing the active run",
            |wf: &AgentWorkflow| {
                wf.status
                    .as_ref()
                    .is_some_and(|s| s.active == [first.clone()])
            },
        )
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
    h.until(
        "minutely",
        "recording the skipped fire",
        |wf: &AgentWorkflow| {
            wf.status
                .as_ref()
                .is_some_and(|s| s.last_schedule_time.as_ref().map(|t| t.0) == Some(second_fire))
        },
    )
    .await;
    assert!(
        h.cluster
            .get_opt::<AgentWorkflowRun>(&scheduled_name("minutely", second_fire))
            .await
            .is_none(),
        "Forbid starts no second run"
    );
    let skipped = h.cluster.events("RunSkipped").await;
    assert!(
        skipped.iter().any(|e| e
            .note
            .as_deref()
            .is_some_and(|n| n.contains(&format!("run {first} is still active")))),
        "{skipped:?}"
    );

    // Replace: the old run goes (its task canceled), a new one starts.
    clock.advance(SignedDuration::from_mins(1));
    h.cluster.apply(&minutely(ConcurrencyPolicy::Replace));
    let third = scheduled_name("minutely", fire + SignedDuration::from_mins(2));
    h.until(&third, "sent", |run: &AgentWorkflowRun| {
        step_phase(run, "work").is_some_and(|p| p != StepPhase::Pending)
    })
    .await;
    let old_task = step_status(&run, "work")
        .task_id
        .clone()
        .expect("a task id");
    eventually("the replaced run's task is canceled", || async {
        h.cancels()
            .contains(&("slow".to_string(), old_task.clone()))
            .then_some(())
    })
    .await;
    h.cluster.until_gone::<AgentWorkflowRun>(&first).await;
}

/// Wakes a workflow as a user's annotation would.
async fn poke(h: &Harness, workflow: &str, value: &str) {
    let patch = json!({"metadata": {"annotations": {"test.kaos.tools/poke": value}}});
    h.cluster
        .merge_patch::<AgentWorkflow>(workflow, patch)
        .await;
}

#[tokio::test]
async fn history_limits_keep_the_newest_runs() {
    let h = Harness::start(&[("quick", answers("ok", 10))]).await;
    let kept = AgentWorkflow::test("kept")
        .history_limits(1, 0)
        .step(step("a", "quick"));
    h.cluster.apply(&kept);
    for run in ["kept-1", "kept-2", "kept-3"] {
        h.run(run, "kept");
        let finished = h.finished(run).await;
        assert_eq!(finished.phase(), Some(RunPhase::Succeeded));
    }
    eventually("only the newest success is kept", || async {
        let names: Vec<String> = h
            .cluster
            .api::<AgentWorkflowRun>()
            .list(&Default::default())
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
    h.cluster
        .apply(&AgentWorkflow::test("long").step(step("a", "slow")));
    h.run("long-1", "long");
    let run = h
        .until("long-1", "running", |run: &AgentWorkflowRun| {
            step_phase(run, "a") == Some(StepPhase::Running)
        })
        .await;
    let task = step_status(&run, "a").task_id.clone().expect("a task id");
    h.cluster.delete::<AgentWorkflowRun>("long-1").await;
    h.cluster.until_gone::<AgentWorkflowRun>("long-1").await;
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
    let two = AgentWorkflow::test("two")
        .step(step("a", "first"))
        .step(step("b", "second").after(["a"]));
    h.cluster.apply(&two);
    h.run("two-1", "two");
    eventually("the first step is sent", || async {
        (!h.sent_to("first").is_empty()).then_some(())
    })
    .await;
    h.stop_controller().await;
    h.start_controller();
    let run = h.finished("two-1").await;
    assert_eq!(run.phase(), Some(RunPhase::Succeeded), "{}", run.message());
    assert_eq!(step_status(&run, "b").output.as_deref(), Some("2"));
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
    h.cluster
        .apply(&AgentWorkflow::test("lonely").step(step("a", "unreachable")));
    h.run("lonely-1", "lonely");
    let run = h
        .until("lonely-1", "Failed", |run: &AgentWorkflowRun| {
            run.phase() == Some(RunPhase::Failed)
        })
        .await;
    let error = step_status(&run, "a").error.clone().unwrap_or_default();
    assert!(
        error.contains("cannot connect to the agent at http://agent-unreachable.default"),
        "{error}"
    );
}
