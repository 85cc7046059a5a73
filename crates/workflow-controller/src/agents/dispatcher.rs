//! Sends steps to agents in the background. The KAOS agent runtime answers an interactive
//! SendMessage only once the whole task is done (an autonomous one, with budgets, at once), so
//! a reconcile never awaits a send: it records the attempt's idempotency key in the run's
//! status, then hands the send to a task of its own here, whose end only wakes the run. The
//! reconcile learns the task's id from the agent (ListTasks, by the key) and its result from
//! GetTask; what a send that ended here returned is kept so that a send the agent refused fails
//! its attempt at once instead of after the grace period.
//!
//! What this remembers is this process's only: after a restart the run's status and the
//! agent's tasks tell everything that matters.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kaos_api::workflow::AgentWorkflowRun;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::mpsc;
use tokio::task::AbortHandle;

use crate::a2a::{A2aClient, StepSend, Task};

/// What this process knows of the send of an attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendState {
    /// Under way.
    InFlight,
    /// The agent answered with its task.
    Answered(Task),
    /// No answer: why (the agent's error, the connection, the time limit).
    Failed(String),
}

enum Entry {
    InFlight(AbortHandle),
    Done(Result<Task, String>),
}

/// The sends of this process, by idempotency key.
pub struct Dispatcher {
    a2a: A2aClient,
    /// Wakes a run when one of its sends ends.
    wake: mpsc::UnboundedSender<ObjectRef<AgentWorkflowRun>>,
    sends: Arc<Mutex<HashMap<String, Entry>>>,
}

impl Dispatcher {
    pub fn new(a2a: A2aClient, wake: mpsc::UnboundedSender<ObjectRef<AgentWorkflowRun>>) -> Self {
        Self {
            a2a,
            wake,
            sends: Arc::default(),
        }
    }

    /// Starts sending `send` for `run`, unless this process already sent that attempt (a
    /// reconcile that read a cache not showing its own status write yet would ask again).
    /// The send stops when `shutdown` resolves, as it would with the process.
    pub fn spawn(
        &self,
        run: ObjectRef<AgentWorkflowRun>,
        send: StepSend,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        let mut sends = self.lock();
        if sends.contains_key(&send.idempotency_key) {
            return;
        }
        let (a2a, wake, entries) = (self.a2a.clone(), self.wake.clone(), self.sends.clone());
        let key = send.idempotency_key.clone();
        tracing::debug!(run = %run, step = %send.step, endpoint = %send.endpoint, "sending a step");
        let task = tokio::spawn(async move {
            let sent = a2a.send_message(
                &send.endpoint,
                &send.text,
                &send.idempotency_key,
                send.budgets.as_ref(),
                send.timeout,
            );
            let answer = tokio::select! {
                answer = sent => answer,
                () = shutdown => return,
            };
            if let Err(error) = &answer {
                tracing::debug!(run = %run, step = %send.step, "a step's send failed: {error}");
            }
            entries.lock().unwrap_or_else(|e| e.into_inner()).insert(
                send.idempotency_key,
                Entry::Done(answer.map_err(|error| error.to_string())),
            );
            let _ = wake.send(run);
        });
        // Inserted under the lock the task's end takes too, so its result is never overwritten.
        sends.insert(key, Entry::InFlight(task.abort_handle()));
    }

    /// What this process knows of the send of the attempt `idempotency_key`.
    pub fn state(&self, idempotency_key: &str) -> Option<SendState> {
        self.lock().get(idempotency_key).map(|entry| match entry {
            Entry::InFlight(task) if task.is_finished() => {
                SendState::Failed("the send stopped without an answer".into())
            }
            Entry::InFlight(_) => SendState::InFlight,
            Entry::Done(Ok(task)) => SendState::Answered(task.clone()),
            Entry::Done(Err(error)) => SendState::Failed(error.clone()),
        })
    }

    /// Stops the send of `idempotency_key`, if under way (its step timed out or its run goes).
    pub fn abort(&self, idempotency_key: &str) {
        if let Some(Entry::InFlight(task)) = self.lock().remove(idempotency_key) {
            task.abort();
        }
    }

    /// Forgets the sends of a run that is over (keys start with its uid), stopping any left.
    pub fn forget_run(&self, run_uid: &str) {
        let prefix = format!("{run_uid}/");
        self.lock().retain(|key, entry| {
            let keep = !key.starts_with(&prefix);
            if let (false, Entry::InFlight(task)) = (keep, &*entry) {
                task.abort();
            }
            keep
        });
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.sends.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn send(key: &str, endpoint: &str) -> StepSend {
        StepSend {
            step: "a".into(),
            idempotency_key: key.into(),
            endpoint: endpoint.into(),
            text: "hello".into(),
            budgets: None,
            timeout: Duration::from_secs(5),
        }
    }

    #[tokio::test]
    async fn a_failed_send_is_kept_and_wakes_its_run_once() {
        let (wake, mut woken) = mpsc::unbounded_channel();
        let dispatcher = Dispatcher::new(A2aClient::new(), wake);
        let run = ObjectRef::new("r").within("ns");
        // Nothing listens on port 1.
        dispatcher.spawn(
            run.clone(),
            send("uid/a/1", "http://127.0.0.1:1"),
            futures::future::pending(),
        );
        dispatcher.spawn(
            run.clone(),
            send("uid/a/1", "http://127.0.0.1:1"),
            futures::future::pending(),
        );
        assert_eq!(woken.recv().await, Some(run));
        assert!(
            matches!(dispatcher.state("uid/a/1"), Some(SendState::Failed(error)) if error.contains("cannot connect"))
        );
        assert!(woken.try_recv().is_err(), "sent once");
        dispatcher.forget_run("uid");
        assert_eq!(dispatcher.state("uid/a/1"), None);
    }
}
