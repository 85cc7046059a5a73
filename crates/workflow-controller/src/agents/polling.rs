//! Looks at the steps of a run that are in flight and records what their agents say: a `Running`
//! step's task by its id (GetTask); a `Dispatching` step's task by its idempotency key
//! (ListTasks), or what this process's send of it returned. A `Dispatching` step with no task
//! and no send under way here is sent again once [`DISPATCH_GRACE`] has passed: its send never
//! reached the agent. An agent that cannot be reached now is asked again at the next poll (the
//! step's time limit bounds the wait).

use jiff::Timestamp;
use kaos_api::workflow::{AgentWorkflowRunStatus, StepPhase, StepStatus};

use crate::a2a::StepSend;
use crate::a2a::{A2aClient, A2aError, Task, TaskState};
use crate::agents::dispatcher::{Dispatcher, SendState};
use crate::engine::dag::CancelTask;
use crate::engine::outcome::{record_failure, record_sent, record_task};
use crate::engine::run_progress::{DISPATCH_GRACE, attempt_sent_at, resend};

/// What polling asks the reconcile to do next.
#[derive(Debug, Default)]
pub struct Polled {
    /// Steps whose first send never arrived: to send again, same key.
    pub resends: Vec<StepSend>,
    /// Tasks to cancel: they ask for input no workflow can give.
    pub cancels: Vec<CancelTask>,
}

/// What an agent said of one step.
enum Observation {
    /// Its task, as the agent has it now.
    Task { task: Task, endpoint: String },
    /// The attempt failed, for this reason.
    Failed(String),
    /// Its send never reached the agent.
    NeverArrived,
    /// Nothing new (still being sent, or the agent could not be asked now).
    Nothing,
}

/// Polls the in-flight steps of `status` (concurrently: each call is bounded by `timeout`)
/// and records what was found.
pub async fn poll(
    status: &mut AgentWorkflowRunStatus,
    a2a: &A2aClient,
    dispatcher: &Dispatcher,
    timeout: std::time::Duration,
    now: Timestamp,
) -> Polled {
    let looks = status
        .steps
        .iter()
        .filter(|step| matches!(step.phase, StepPhase::Dispatching | StepPhase::Running))
        .map(|step| async move {
            (
                step.name.clone(),
                observe(step, a2a, dispatcher, timeout, now).await,
            )
        });
    let observations = futures::future::join_all(looks).await;
    let mut polled = Polled::default();
    for (name, observation) in observations {
        if let Observation::NeverArrived = observation {
            match resend(status, &name) {
                Ok(send) => polled.resends.push(send),
                Err(error) => {
                    if let Some(step) = status.steps.iter_mut().find(|step| step.name == name) {
                        record_failure(step, &error, now);
                    }
                }
            }
            continue;
        }
        let Some(step) = status.steps.iter_mut().find(|step| step.name == name) else {
            continue;
        };
        match observation {
            Observation::Task { task, endpoint } => {
                if step.phase == StepPhase::Dispatching {
                    record_sent(step, &task.id, &endpoint);
                }
                if record_task(step, &task, now) && task.state == TaskState::InputRequired {
                    polled.cancels.push(CancelTask {
                        step: step.name.clone(),
                        task_id: Some(task.id.clone()),
                        idempotency_key: step.idempotency_key.clone(),
                        agent_endpoint: Some(endpoint),
                    });
                }
            }
            Observation::Failed(error) => record_failure(step, &error, now),
            Observation::NeverArrived | Observation::Nothing => {}
        }
    }
    polled
}

async fn observe(
    step: &StepStatus,
    a2a: &A2aClient,
    dispatcher: &Dispatcher,
    timeout: std::time::Duration,
    now: Timestamp,
) -> Observation {
    let Some(endpoint) = step.agent_endpoint.clone() else {
        // Not sent yet: its time limit settles it.
        return Observation::Nothing;
    };
    if step.phase == StepPhase::Running {
        let Some(id) = &step.task_id else {
            return Observation::Nothing;
        };
        return match a2a.get_task(&endpoint, id, timeout).await {
            Ok(Some(task)) => Observation::Task { task, endpoint },
            Ok(None) => Observation::Failed(format!(
                "the agent at {endpoint} no longer has task {id} (was it restarted?)"
            )),
            Err(error) => {
                tracing::debug!(step = %step.name, "could not ask for a step's task: {error}");
                Observation::Nothing
            }
        };
    }
    let Some(key) = &step.idempotency_key else {
        return Observation::Nothing;
    };
    let local = dispatcher.state(key);
    if let Some(SendState::Answered(task)) = local {
        return Observation::Task { task, endpoint };
    }
    match a2a.find_task_by_key(&endpoint, key, timeout).await {
        Ok(Some(task)) => Observation::Task { task, endpoint },
        Ok(None) => match local {
            Some(SendState::Failed(error)) => Observation::Failed(error),
            Some(_) => Observation::Nothing,
            None => {
                let sent_at = attempt_sent_at(step).unwrap_or(now);
                if now.duration_since(sent_at) >= DISPATCH_GRACE {
                    Observation::NeverArrived
                } else {
                    Observation::Nothing
                }
            }
        },
        // The send failed and the agent cannot even be connected to: the attempt failed (a
        // task it may have started is lost with it), now rather than at its time limit.
        Err(error) => match (local, error) {
            (Some(SendState::Failed(sent)), A2aError::Connect { .. }) => Observation::Failed(sent),
            (_, error) => {
                tracing::debug!(step = %step.name, "could not look for a step's task: {error}");
                Observation::Nothing
            }
        },
    }
}
