//! Cancels tasks on agents, best effort: an attempt that timed out, a task that asks for input,
//! every step in flight of a run being deleted. A send still under way in this process is
//! stopped first; a task whose id was never learnt is found by its idempotency key.

use std::time::Duration;

use kaos_api::workflow::{AgentWorkflowRunStatus, StepPhase};

use crate::a2a::A2aClient;
use crate::agents::dispatcher::Dispatcher;
use crate::engine::dag::CancelTask;

/// Cancels `task` on its agent; a failure is logged, never returned.
pub async fn cancel(a2a: &A2aClient, task: &CancelTask, timeout: Duration) {
    let Some(endpoint) = &task.agent_endpoint else {
        return;
    };
    let id = match (&task.task_id, &task.idempotency_key) {
        (Some(id), _) => id.clone(),
        (None, Some(key)) => match a2a.find_task_by_key(endpoint, key, timeout).await {
            Ok(Some(found)) => found.id,
            Ok(None) => return,
            Err(error) => {
                tracing::debug!(step = %task.step, "could not look for a task to cancel: {error}");
                return;
            }
        },
        (None, None) => return,
    };
    match a2a.cancel_task(endpoint, &id, timeout).await {
        Ok(()) => {
            tracing::debug!(step = %task.step, endpoint = %endpoint, "canceled a step's task")
        }
        Err(error) => tracing::info!(step = %task.step, "could not cancel a step's task: {error}"),
    }
}

/// Stops this process's send of each task (if any), then cancels the tasks in the background.
pub fn cancel_in_background(
    a2a: &A2aClient,
    dispatcher: &Dispatcher,
    tasks: Vec<CancelTask>,
    timeout: Duration,
) {
    for task in tasks {
        if let Some(key) = &task.idempotency_key {
            dispatcher.abort(key);
        }
        let a2a = a2a.clone();
        tokio::spawn(async move { cancel(&a2a, &task, timeout).await });
    }
}

/// The tasks of every step of `status` in flight.
pub fn in_flight_tasks(status: &AgentWorkflowRunStatus) -> Vec<CancelTask> {
    status
        .steps
        .iter()
        .filter(|step| matches!(step.phase, StepPhase::Dispatching | StepPhase::Running))
        .map(|step| CancelTask {
            step: step.name.clone(),
            task_id: step.task_id.clone(),
            idempotency_key: step.idempotency_key.clone(),
            agent_endpoint: step.agent_endpoint.clone(),
        })
        .collect()
}

/// Cancels every step in flight of a run that is going, all at once, within `deadline`
/// (after which the run is let go anyway: an unreachable agent must not hold its deletion).
pub async fn cancel_run(
    a2a: &A2aClient,
    dispatcher: &Dispatcher,
    status: &AgentWorkflowRunStatus,
    timeout: Duration,
    deadline: Duration,
) {
    let tasks = in_flight_tasks(status);
    for key in tasks
        .iter()
        .filter_map(|task| task.idempotency_key.as_ref())
    {
        dispatcher.abort(key);
    }
    let all = futures::future::join_all(tasks.iter().map(|task| cancel(a2a, task, timeout)));
    if tokio::time::timeout(deadline, all).await.is_err() {
        tracing::info!("gave up canceling the tasks of a deleted run after {deadline:?}");
    }
}
