//! Steps sent to a suspended agent: dispatched while it is asleep (a step in flight is what
//! wakes it: its agent controller keeps an agent with one at one pod, reading the run's status),
//! then sent once it is ready, with the attempt's key and input. The attempt's time limit runs
//! from its dispatch, so it counts the wake. The user's `spec.suspend` is never written.

use jiff::Timestamp;
use kaos_api::workflow::{AgentWorkflowRunStatus, StepPhase, WorkflowStep};

use crate::a2a::StepSend;
use crate::engine::outcome::record_failure;
use crate::engine::run_progress::{AgentState, resend, step_named_mut};

/// The steps dispatched to an agent that was asleep and not sent yet (no endpoint), with it.
pub fn waking(status: &AgentWorkflowRunStatus, plan: &[WorkflowStep]) -> Vec<(String, String)> {
    status
        .steps
        .iter()
        .filter(|step| step.phase == StepPhase::Dispatching && step.agent_endpoint.is_none())
        .filter_map(|step| {
            let planned = plan.iter().find(|planned| planned.name == step.name)?;
            Some((step.name.clone(), planned.agent_ref.clone()))
        })
        .collect()
}

/// Sends the steps that woke their agent once it is ready (the same attempt, key and input);
/// fails those whose agent went away. The others wait, their time limit running.
pub fn send_woken(
    status: &mut AgentWorkflowRunStatus,
    plan: &[WorkflowStep],
    now: Timestamp,
    agent: &impl Fn(&str) -> AgentState,
) -> Vec<StepSend> {
    let mut sends = Vec::new();
    for (step, agent_ref) in waking(status, plan) {
        match agent(&agent_ref) {
            AgentState::Ready { endpoint } => {
                if let Some(current) = step_named_mut(&mut status.steps, &step) {
                    current.agent_endpoint = Some(endpoint);
                }
                match resend(status, &step) {
                    Ok(send) => sends.push(send),
                    Err(error) => fail_step(status, &step, &error, now),
                }
            }
            AgentState::Missing => {
                fail_step(status, &step, &format!("Agent {agent_ref} not found"), now)
            }
            AgentState::Asleep | AgentState::NotReady => {}
        }
    }
    sends
}

fn fail_step(status: &mut AgentWorkflowRunStatus, step: &str, error: &str, now: Timestamp) {
    if let Some(step) = step_named_mut(&mut status.steps, step) {
        record_failure(step, error, now);
    }
}
