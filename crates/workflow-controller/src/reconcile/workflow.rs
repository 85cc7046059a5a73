//! Reconciles an AgentWorkflow: validates it (its `Ready` condition), starts the runs its
//! schedule owes (as its concurrency policy allows), deletes the runs beyond its history
//! limits, and reports its schedule and active runs. Its runs are found through the index kept
//! from the run watch, never by listing.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kaos_api::workflow::{
    AgentWorkflow, AgentWorkflowRun, AgentWorkflowRunSpec, AgentWorkflowStatus, RunPhase,
    RunTrigger,
};
use kaos_runtime::error::{ReconcileError, Step, StepExt};
use kaos_workload::cache::cached;
use kaos_workload::conditions::{ConditionUpdate, set_condition};
use kaos_workload::reconcile::{Core, Reconciles, status_digest};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams, Preconditions};
use kube::runtime::controller::Action;

use crate::context::Context;
use crate::engine::validation::{READY, validate};
use crate::naming::{WORKFLOW_LABEL, scheduled_run_name, workflow_label_value};
use crate::reconcile::run::{RUN_FINALIZER, owner_reference};
use crate::relations::runs_of;
use crate::schedule::history::{FinishedRun, runs_to_delete};
use crate::schedule::policy::{Fire, FireAction, Situation, evaluate, runs_named};

impl Reconciles<AgentWorkflow> for Context {
    fn core(&self) -> &Core {
        &self.workflows
    }

    async fn apply(&self, workflow: Arc<AgentWorkflow>) -> Result<Action, ReconcileError> {
        apply(workflow, self).await
    }
}

async fn apply(workflow: Arc<AgentWorkflow>, ctx: &Context) -> Result<Action, ReconcileError> {
    let namespace = workflow.namespace().unwrap_or_default();
    let name = workflow.name_any();
    let now = ctx.clock.now();
    let previous = workflow.status.clone().unwrap_or_default();
    let validity = validate(&workflow.spec, &namespace, |agent| {
        ctx.agent_exists(&namespace, agent)
    });
    let runs: Vec<Arc<AgentWorkflowRun>> = runs_of(&ctx.run_index, &namespace, &name)
        .iter()
        .filter_map(|run| cached(&ctx.run_store, &namespace, run))
        .filter(|run| run.spec.workflow_ref == name)
        .collect();

    let doomed = runs_to_delete(
        &finished_runs(&runs),
        workflow.spec.successful_runs_history_limit,
        workflow.spec.failed_runs_history_limit,
    );
    for run in runs.iter().filter(|run| doomed.contains(&run.name_any())) {
        delete_run(run, ctx).await?;
    }

    let mut active: Vec<String> = runs
        .iter()
        .filter(|run| run.metadata.deletion_timestamp.is_none())
        .filter(|run| !phase_of(run).is_some_and(RunPhase::is_finished))
        .map(|run| run.name_any())
        .collect();
    active.sort();

    let mut last_schedule = previous.last_schedule_time.clone();
    let mut next_schedule = None;
    if let (Some(schedule), false) = (&validity.schedule, workflow.spec.suspend) {
        let created = workflow.metadata.creation_timestamp.as_ref();
        let last = last_schedule
            .as_ref()
            .or(created)
            .map_or(now, |time| time.0);
        let not_ready = validity
            .problem
            .as_ref()
            .map(|problem| problem.message.as_str());
        let situation = Situation {
            last,
            now,
            policy: workflow.spec.concurrency_policy,
            active: &active,
            not_ready,
        };
        match evaluate(schedule, situation) {
            Ok(state) => {
                next_schedule = state.next;
                if let Some(fire) = state.fire {
                    fire_once(&workflow, &runs, &fire, &mut active, ctx).await?;
                    last_schedule = Some(Time(fire.time));
                }
            }
            Err(error) => {
                tracing::info!(workflow = %name, "the schedule has no next fire time: {error}")
            }
        }
    }

    let last_successful = runs
        .iter()
        .filter(|run| phase_of(run) == Some(RunPhase::Succeeded))
        .filter_map(|run| run.status.as_ref()?.completion_time.clone())
        .chain(previous.last_successful_time.clone())
        .max();
    let (reason, message) = validity.reason_and_message(&workflow.spec);
    let mut conditions = previous.conditions.clone();
    set_condition(
        &mut conditions,
        ConditionUpdate {
            type_: READY,
            status: validity.is_ready(),
            reason,
            message: message.clone(),
        },
        workflow.metadata.generation,
        Time(now),
    );
    let status = AgentWorkflowStatus {
        observed_generation: workflow.metadata.generation,
        conditions,
        message: Some(message),
        last_schedule_time: last_schedule,
        next_schedule_time: next_schedule.map(Time),
        last_successful_time: last_successful,
        active,
    };
    let problem = validity
        .problem
        .as_ref()
        .map(|problem| (problem.reason, problem.message.as_str()));
    ctx.workflows
        .write_status(
            workflow.as_ref(),
            workflow.status.as_ref().map(status_digest),
            &status,
            problem,
        )
        .await?;
    Ok(match next_schedule {
        // Times are whole seconds: a second late rather than early.
        Some(next) => Action::requeue(
            Duration::try_from(next.duration_since(now)).unwrap_or_default()
                + Duration::from_secs(1),
        ),
        None => Action::await_change(),
    })
}

/// Acts on a due fire time, once: its run's name is derived from the time, so a run that exists
/// already (made before a restart or by another leader) means the fire was acted on.
async fn fire_once(
    workflow: &AgentWorkflow,
    runs: &[Arc<AgentWorkflowRun>],
    fire: &Fire,
    active: &mut Vec<String>,
    ctx: &Context,
) -> Result<(), ReconcileError> {
    let name = workflow.name_any();
    let run_name = scheduled_run_name(&name, fire.time);
    if runs.iter().any(|run| run.name_any() == run_name) {
        return Ok(());
    }
    let events = &ctx.workflows.events;
    if fire.too_many_missed {
        let note = format!(
            "more than {} fire times were missed (was the controller down, or the workflow suspended?); only the latest, {}, starts a run",
            crate::schedule::cron::MAX_MISSED,
            fire.time
        );
        events.warning(workflow, "MissedSchedules", note).await;
    }
    match &fire.action {
        FireAction::Skip { reason } => {
            let note = format!("skipped the run due at {}: {reason}", fire.time);
            events.normal(workflow, "RunSkipped", note).await;
            return Ok(());
        }
        FireAction::Replace { runs: replaced } => {
            for run in runs.iter().filter(|run| replaced.contains(&run.name_any())) {
                delete_run(run, ctx).await?;
            }
            active.retain(|run| !replaced.contains(run));
            let note = format!(
                "concurrencyPolicy is Replace: deleting {} to start {run_name}",
                runs_named(replaced)
            );
            events.normal(workflow, "RunsReplaced", note).await;
        }
        FireAction::Start => {}
    }
    create_run(workflow, &run_name, fire.time, ctx).await?;
    active.push(run_name.clone());
    active.sort();
    let note = format!("started run {run_name} for the schedule's {}", fire.time);
    events.normal(workflow, "RunStarted", note).await;
    Ok(())
}

/// Creates the run of a fire time; one that exists already is success (idempotent).
async fn create_run(
    workflow: &AgentWorkflow,
    run_name: &str,
    fire_time: Timestamp,
    ctx: &Context,
) -> Result<(), ReconcileError> {
    let namespace = workflow.namespace().unwrap_or_default();
    let name = workflow.name_any();
    let run = AgentWorkflowRun {
        metadata: ObjectMeta {
            name: Some(run_name.to_string()),
            namespace: Some(namespace.clone()),
            labels: Some([(WORKFLOW_LABEL.to_string(), workflow_label_value(&name))].into()),
            owner_references: Some(vec![owner_reference(
                workflow,
                workflow.uid().unwrap_or_default(),
                true,
            )]),
            // Held from the start, so its first reconcile has nothing to add.
            finalizers: Some(vec![RUN_FINALIZER.to_string()]),
            ..ObjectMeta::default()
        },
        spec: AgentWorkflowRunSpec {
            workflow_ref: name,
            input: None,
            trigger: RunTrigger::Schedule,
            scheduled_time: Some(Time(fire_time)),
        },
        status: None,
    };
    let params = PostParams {
        field_manager: Some(ctx.workflows.runtime.field_manager().to_string()),
        ..PostParams::default()
    };
    match runs_api(workflow, ctx).create(&params, &run).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.is_already_exists() || status.is_conflict() => {
            Ok(())
        }
        Err(error) => Err(ReconcileError::new(
            Step::ApplyChild,
            format!("AgentWorkflowRun {run_name}"),
            error,
        )),
    }
}

/// Deletes a run (its finalizer cancels its tasks first); one already gone, or replaced by a
/// newer one of the same name, is left alone.
async fn delete_run(run: &AgentWorkflowRun, ctx: &Context) -> Result<(), ReconcileError> {
    if run.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    let name = run.name_any();
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: run.uid(),
            resource_version: None,
        }),
        ..DeleteParams::background()
    };
    let api: Api<AgentWorkflowRun> = Api::namespaced(
        ctx.workflows.runtime.client.clone(),
        &run.namespace().unwrap_or_default(),
    );
    match api.delete(&name, &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.is_not_found() || status.is_conflict() => Ok(()),
        Err(error) => Err(error).step(Step::DeleteOrphan, || format!("AgentWorkflowRun {name}")),
    }
}

fn runs_api(workflow: &AgentWorkflow, ctx: &Context) -> Api<AgentWorkflowRun> {
    Api::namespaced(
        ctx.workflows.runtime.client.clone(),
        &workflow.namespace().unwrap_or_default(),
    )
}

fn phase_of(run: &AgentWorkflowRun) -> Option<RunPhase> {
    run.status.as_ref().and_then(|status| status.phase)
}

/// The finished runs history counts (those being deleted are already on their way).
fn finished_runs(runs: &[Arc<AgentWorkflowRun>]) -> Vec<FinishedRun> {
    runs.iter()
        .filter(|run| run.metadata.deletion_timestamp.is_none())
        .filter_map(|run| {
            let phase = phase_of(run).filter(|phase| phase.is_finished())?;
            let finished = run
                .status
                .as_ref()
                .and_then(|status| status.completion_time.as_ref())
                .or(run.metadata.creation_timestamp.as_ref())
                .map(|time| time.0);
            Some(FinishedRun {
                name: run.name_any(),
                phase,
                finished,
            })
        })
        .collect()
}

/// A workflow's phase for `kaos_resources`: its `Ready` condition.
pub fn workflow_phase(workflow: &AgentWorkflow) -> Option<&'static str> {
    let ready = workflow
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|condition| condition.type_ == READY)?;
    Some(if ready.status == "True" {
        "Ready"
    } else {
        "NotReady"
    })
}
