//! Reconciles an AgentWorkflowRun: the run's state lives in its status, so any replica, after
//! any restart, takes it up where it was. One pass:
//!
//! 1. a run made by hand gets its workflow's ownerReference and label (history, GC);
//! 2. the first pass takes a snapshot of the workflow (`status.plan`, the input);
//! 3. the steps in flight are looked at (`polling`), the run moves on (`run_progress`);
//! 4. the status is written, idempotency keys included, BEFORE anything is sent: a restart
//!    finds the task by its key instead of sending it twice;
//! 5. the sends start in the background (`dispatcher`); their end wakes the run;
//! 6. the run is looked at again after the poll interval while a step is in flight, else when
//!    something is due (a retry, a timeout).
//!
//! On deletion the finalizer holds the run until every step in flight is canceled (best effort,
//! bounded in time).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kaos_api::workflow::{AgentWorkflow, AgentWorkflowRun, AgentWorkflowRunStatus, RunPhase};
use kaos_runtime::error::{ReconcileError, Step, StepExt};
use kaos_workload::cache::cached;
use kaos_workload::reconcile::{Core, Reconciles};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::agents::cancellation::{cancel_in_background, cancel_run};
use crate::agents::polling::poll;
use crate::context::Context;
use crate::engine::run_progress::{Progress, advance, in_flight, newly_finished, start};
use crate::naming::{WORKFLOW_LABEL, workflow_label_value};

/// Holds a run being deleted until its tasks in flight are canceled.
pub const RUN_FINALIZER: &str = "kaos.tools/workflow-run-finalizer";

impl Reconciles<AgentWorkflowRun> for Context {
    fn core(&self) -> &Core {
        &self.runs
    }

    async fn apply(&self, run: Arc<AgentWorkflowRun>) -> Result<Action, ReconcileError> {
        apply(run, self).await
    }

    async fn finalize(&self, run: &AgentWorkflowRun) {
        release_tasks(run, self).await;
    }
}

/// The deletion of a run: its steps in flight are canceled, then `Core::reconcile` releases
/// the finalizer. Only the leader calls agents.
async fn release_tasks(run: &AgentWorkflowRun, ctx: &Context) {
    let holds = run.finalizers().iter().any(|f| f == RUN_FINALIZER);
    if holds
        && ctx.runs.runtime.is_leader()
        && let Some(status) = &run.status
    {
        let timeout = ctx.settings.a2a_call_timeout;
        cancel_run(&ctx.a2a, &ctx.dispatcher, status, timeout, timeout * 2).await;
    }
    if let Some(uid) = run.uid() {
        ctx.dispatcher.forget_run(&uid);
    }
}

async fn apply(run: Arc<AgentWorkflowRun>, ctx: &Context) -> Result<Action, ReconcileError> {
    let namespace = run.namespace().unwrap_or_default();
    let uid = run.uid().unwrap_or_default();
    let workflow = cached(&ctx.workflow_store, &namespace, &run.spec.workflow_ref);
    let run = adopt(run, workflow.as_deref(), ctx).await?;
    let before = run.status.clone().unwrap_or_default();
    if before.phase.is_some_and(RunPhase::is_finished) {
        ctx.dispatcher.forget_run(&uid);
        return Ok(Action::await_change());
    }

    let now = ctx.clock.now();
    let mut status = match before.phase {
        Some(RunPhase::Running) => before.clone(),
        _ => start(&run, workflow.as_deref(), now),
    };
    let mut progress = Progress::default();
    if status.phase == Some(RunPhase::Running) {
        let timeout = ctx.settings.a2a_call_timeout;
        let polled = poll(&mut status, &ctx.a2a, &ctx.dispatcher, timeout, now).await;
        progress = advance(&mut status, &uid, now, |agent| {
            ctx.agent_state(&namespace, agent)
        });
        // A step the scheduler settled meanwhile (timed out, even as its agent woke) is not sent.
        progress.sends.extend(polled.resends);
        progress.sends.retain(|send| {
            status.steps.iter().any(|step| {
                step.idempotency_key.as_deref() == Some(send.idempotency_key.as_str())
                    && step.phase == kaos_api::workflow::StepPhase::Dispatching
            })
        });
        progress.cancels.extend(polled.cancels);
    }
    status.observed_generation = run.metadata.generation;

    // The keys are in the status before anything is sent.
    write_status(&run, &status, ctx).await?;

    let run_ref = ObjectRef::from_obj(run.as_ref());
    for send in progress.sends {
        ctx.dispatcher
            .spawn(run_ref.clone(), send, ctx.runs.runtime.shutdown_signal());
    }
    cancel_in_background(
        &ctx.a2a,
        &ctx.dispatcher,
        progress.cancels,
        ctx.settings.a2a_call_timeout,
    );
    for (outcome, seconds) in newly_finished(&before, &status) {
        ctx.metrics.step_finished(outcome, seconds);
    }
    if let Some(phase) = status.phase.filter(|phase| phase.is_finished()) {
        finished(&run, &status, phase, ctx).await;
        return Ok(Action::await_change());
    }
    Ok(next_look(&status, progress.wake_at, now, ctx))
}

/// When to look at a running run again: at the poll interval while a step is in flight,
/// else when something is due, else on the next change.
fn next_look(
    status: &AgentWorkflowRunStatus,
    wake_at: Option<jiff::Timestamp>,
    now: jiff::Timestamp,
    ctx: &Context,
) -> Action {
    let until_due = wake_at.map(|at| {
        let wait = at.duration_since(now);
        // A second late rather than early: times are kept in whole seconds.
        Duration::try_from(wait).unwrap_or_default() + Duration::from_secs(1)
    });
    let poll = in_flight(status).then_some(ctx.settings.workflow_poll_interval);
    match (poll, until_due) {
        (Some(poll), Some(due)) => Action::requeue(poll.min(due)),
        (Some(wait), None) | (None, Some(wait)) => Action::requeue(wait),
        (None, None) => Action::await_change(),
    }
}

/// The end of a run: metrics and an event naming the step that failed, if one did. Its
/// workflow hears of it from the run watch (its status, its history).
async fn finished(
    run: &AgentWorkflowRun,
    status: &AgentWorkflowRunStatus,
    phase: RunPhase,
    ctx: &Context,
) {
    ctx.metrics.run_finished(phase);
    if let Some(uid) = run.uid() {
        ctx.dispatcher.forget_run(&uid);
    }
    let message = status.message.clone().unwrap_or_default();
    let events = &ctx.runs.events;
    match phase {
        RunPhase::Succeeded => {
            let skipped = status
                .steps
                .iter()
                .filter(|step| step.phase == kaos_api::workflow::StepPhase::Skipped)
                .count();
            let note = format!(
                "the run succeeded: {} steps, {skipped} skipped",
                status.steps.len()
            );
            events.normal(run, "RunSucceeded", note).await;
        }
        RunPhase::Failed => events.warning(run, "RunFailed", message).await,
        RunPhase::Canceled => events.warning(run, "RunCanceled", message).await,
        RunPhase::Pending | RunPhase::Running => {}
    }
}

/// Writes the run's status when it changed, on the version this pass read: a pass that read a
/// cache not showing the last write fails with a conflict (retried at once) instead of writing
/// an older state over a newer one.
async fn write_status(
    run: &AgentWorkflowRun,
    status: &AgentWorkflowRunStatus,
    ctx: &Context,
) -> Result<bool, ReconcileError> {
    if run.status.as_ref() == Some(status) {
        return Ok(false);
    }
    let name = run.name_any();
    let body = json!({
        "apiVersion": AgentWorkflowRun::api_version(&()),
        "kind": AgentWorkflowRun::kind(&()),
        "metadata": {"name": name, "resourceVersion": run.resource_version()},
        "status": status,
    });
    api(run, ctx)
        .patch_status(
            &name,
            &PatchParams::apply(ctx.runs.runtime.field_manager()).force(),
            &Patch::Apply(body),
        )
        .await
        .step(Step::PatchStatus, || format!("AgentWorkflowRun {name}"))?;
    Ok(true)
}

/// A run made by hand (or by a tool) gets its workflow's controller ownerReference and label,
/// so that the history limits and garbage collection apply to it as to scheduled runs.
async fn adopt(
    run: Arc<AgentWorkflowRun>,
    workflow: Option<&AgentWorkflow>,
    ctx: &Context,
) -> Result<Arc<AgentWorkflowRun>, ReconcileError> {
    let Some(workflow) = workflow else {
        return Ok(run);
    };
    let Some(uid) = workflow.uid() else {
        return Ok(run);
    };
    let label = workflow_label_value(&workflow.name_any());
    let labelled = run.labels().get(WORKFLOW_LABEL) == Some(&label);
    let owned = run.owner_references().iter().any(|owner| owner.uid == uid);
    if labelled && owned {
        return Ok(run);
    }
    let mut owners = run.owner_references().to_vec();
    if !owned {
        let controlled = owners.iter().any(|owner| owner.controller == Some(true));
        owners.push(owner_reference(workflow, uid, !controlled));
    }
    let name = run.name_any();
    let patch = json!({"metadata": {
        "resourceVersion": run.resource_version(),
        "labels": {WORKFLOW_LABEL: label},
        "ownerReferences": owners,
    }});
    let adopted = api(&run, ctx)
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .step(Step::ApplyChild, || format!("AgentWorkflowRun {name}"))?;
    Ok(Arc::new(adopted))
}

/// The ownerReference of a run to its workflow.
pub fn owner_reference(workflow: &AgentWorkflow, uid: String, controller: bool) -> OwnerReference {
    OwnerReference {
        api_version: AgentWorkflow::api_version(&()).to_string(),
        kind: AgentWorkflow::kind(&()).to_string(),
        name: workflow.name_any(),
        uid,
        controller: Some(controller),
        block_owner_deletion: Some(true),
    }
}

fn api(run: &AgentWorkflowRun, ctx: &Context) -> Api<AgentWorkflowRun> {
    Api::namespaced(
        ctx.runs.runtime.client.clone(),
        &run.namespace().unwrap_or_default(),
    )
}
