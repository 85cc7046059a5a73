//! What a Deployment's status says about a workload: the mirror every kind's status carries,
//! whether it is ready, and the message users see.

use kaos_api::conditions::{DEPLOYMENT_NOT_READY, DEPLOYMENT_READY, READY, ROLLOUT_FAILED};
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kaos_api::agent::AgentPhase;
use kaos_api::common::{DeploymentStatus, Phase, ScaleStatus, WorkloadStatus};

use crate::cache::deployment_view::DeploymentView;
use crate::conditions::{remove_condition, set_condition};
use crate::desired::{Desired, Problem, Stuck};

/// The state of an owned Deployment as the custom resource reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct Rollout {
    pub mirror: Option<DeploymentStatus>,
    /// At least one ready replica.
    pub ready: bool,
    /// `Deployment ready replicas: <ready>/<desired>`.
    pub message: String,
    /// The Deployment reported `Progressing=False` (e.g. ProgressDeadlineExceeded) with nothing
    /// ready: the message of that condition.
    pub failure: Option<String>,
    /// Pods now and pods asked for (None before the Deployment exists).
    pub replicas: Option<i32>,
    pub desired_replicas: Option<i32>,
}

impl Rollout {
    /// The Deployment's part of the status, for the pods labelled `labels`.
    pub fn into_scale_status(self, labels: &BTreeMap<String, String>) -> ScaleStatus {
        ScaleStatus {
            deployment: self.mirror,
            replicas: self.replicas,
            desired_replicas: self.desired_replicas,
            selector: Some(crate::build::workload::selector_string(labels)),
        }
    }
}

/// Reads the cached Deployment (None: not created yet).
pub fn observe(deployment: Option<&DeploymentView>) -> Rollout {
    let Some(deployment) = deployment else {
        return Rollout {
            mirror: None,
            ready: false,
            message: "Deployment ready replicas: 0/0".into(),
            failure: None,
            replicas: None,
            desired_replicas: None,
        };
    };
    let status = deployment.status();
    let desired = deployment.replicas();
    let ready_replicas = status.ready_replicas.unwrap_or(0);
    let conditions = status.conditions.clone().unwrap_or_default();
    let failure = conditions
        .iter()
        .find(|c| c.type_ == "Progressing" && c.status == "False")
        .filter(|_| ready_replicas == 0)
        .map(|c| {
            c.message
                .clone()
                .unwrap_or_else(|| c.reason.clone().unwrap_or_default())
        });
    Rollout {
        mirror: Some(DeploymentStatus {
            replicas: status.replicas.unwrap_or(0),
            ready_replicas,
            available_replicas: status.available_replicas.unwrap_or(0),
            updated_replicas: status.updated_replicas.unwrap_or(0),
            conditions,
        }),
        ready: ready_replicas >= 1,
        message: format!("Deployment ready replicas: {ready_replicas}/{desired}"),
        failure,
        replicas: Some(status.replicas.unwrap_or(0)),
        desired_replicas: Some(desired),
    }
}

/// The phase, Ready condition and message of a workload: Failed with the builder's error when
/// the spec cannot be built, Failed when the rollout failed, else Ready once a replica is ready,
/// else Pending.
///
/// `P` is the kind's phase ([`Phase`], or an Agent's, which can also wait).
#[derive(Clone, Debug, PartialEq)]
pub struct Summary<P = Phase> {
    pub phase: P,
    /// The `Ready` condition's reason.
    pub reason: &'static str,
    pub message: String,
}

impl Summary {
    /// The same summary in the phases of a kind that has more (an Agent's).
    pub fn into_phase<P: From<Phase>>(self) -> Summary<P> {
        Summary {
            phase: self.phase.into(),
            reason: self.reason,
            message: self.message,
        }
    }
}

pub fn summarize(build_error: Option<(&'static str, &str)>, rollout: &Rollout) -> Summary {
    match (build_error, &rollout.failure, rollout.ready) {
        (Some((reason, message)), _, _) => Summary {
            phase: Phase::Failed,
            reason,
            message: message.to_string(),
        },
        (None, Some(failure), _) => Summary {
            phase: Phase::Failed,
            reason: ROLLOUT_FAILED,
            message: format!("{}: {failure}", rollout.message),
        },
        (None, None, true) => Summary {
            phase: Phase::Ready,
            reason: DEPLOYMENT_READY,
            message: rollout.message.clone(),
        },
        (None, None, false) => Summary {
            phase: Phase::Pending,
            reason: DEPLOYMENT_NOT_READY,
            message: rollout.message.clone(),
        },
    }
}

/// A kind's phase: the common ones, and the one it shows while it waits for a dependency.
pub trait KindPhase: Copy + PartialEq + From<Phase> {
    const WAITING: Self;
}

impl KindPhase for Phase {
    /// KAOS's hold: Pending with what is awaited.
    const WAITING: Self = Phase::Pending;
}

impl KindPhase for AgentPhase {
    const WAITING: Self = AgentPhase::Waiting;
}

/// The summary of a workload whose desired state was worked out (or not) and converged: its
/// problem first, then a child's conflict, else its rollout.
pub fn summarize_result<P: KindPhase>(
    result: &Result<Desired, Problem>,
    conflict: Option<&(&'static str, String)>,
    rollout: &Rollout,
) -> Summary<P> {
    match result {
        Err(problem) => Summary {
            phase: match problem.stuck {
                Stuck::Failed => Phase::Failed.into(),
                Stuck::Waiting => P::WAITING,
            },
            reason: problem.reason,
            message: problem.message.clone(),
        },
        Ok(_) => {
            let conflict = conflict.map(|(reason, message)| (*reason, message.as_str()));
            summarize(conflict, rollout).into_phase()
        }
    }
}

/// Sets the `Ready` condition from a summary.
fn set_ready_condition(
    conditions: &mut Vec<Condition>,
    summary: &Summary<impl Copy + PartialEq + From<Phase>>,
    generation: Option<i64>,
    now: Time,
) {
    let ready = crate::conditions::ConditionUpdate {
        type_: READY,
        status: summary.phase == Phase::Ready.into(),
        reason: summary.reason,
        message: summary.message.clone(),
    };
    crate::conditions::set_condition(conditions, ready, generation, now);
}

/// What a workload kind's status says once a reconcile got as far as `summary`: its phase,
/// readiness, message and `Ready` condition (beside the other `conditions` it shows), its
/// `endpoint`, and the `rollout` of the Deployment running the pods labelled `labels`.
pub struct WorkloadReport<'a, P = Phase> {
    /// The conditions the status shows besides `Ready` (the previous status's, with the
    /// kind's own already set).
    pub conditions: Vec<Condition>,
    pub summary: Summary<P>,
    pub endpoint: Option<String>,
    pub rollout: Rollout,
    pub labels: &'a BTreeMap<String, String>,
    pub generation: Option<i64>,
    pub now: Time,
}

impl<P: Copy + PartialEq + From<Phase>> WorkloadReport<'_, P> {
    pub fn status(self) -> WorkloadStatus<P> {
        let mut conditions = self.conditions;
        set_ready_condition(&mut conditions, &self.summary, self.generation, self.now);
        WorkloadStatus {
            phase: Some(self.summary.phase),
            ready: self.summary.phase == Phase::Ready.into(),
            endpoint: self.endpoint,
            message: Some(self.summary.message),
            scale: self.rollout.into_scale_status(self.labels),
            observed_generation: self.generation,
            conditions,
        }
    }
}

impl<'a, P: KindPhase> WorkloadReport<'a, P> {
    /// The report of a reconcile whose desired state is `result`, converged with `conflict`
    /// (a child's name taken), its Deployment now `deployment`: the previous status's
    /// conditions with `result`'s set (a problem's own condition False) and the kind's other
    /// `optional` conditions removed; the endpoint it was built with, or while it has a problem
    /// (what runs is left as it was) the one it reported before.
    #[allow(clippy::too_many_arguments)]
    pub fn of(
        result: &Result<Desired, Problem>,
        conflict: Option<(&'static str, String)>,
        deployment: Option<&DeploymentView>,
        previous: &WorkloadStatus<P>,
        optional: &[&'static str],
        labels: &'a BTreeMap<String, String>,
        generation: Option<i64>,
        now: Time,
    ) -> Self {
        let rollout = observe(deployment);
        let mut conditions = previous.conditions.clone();
        let shown: Vec<&str> = match result {
            Ok(desired) => {
                for update in &desired.conditions {
                    set_condition(&mut conditions, update.clone(), generation, now.clone());
                }
                desired.conditions.iter().map(|c| c.type_).collect()
            }
            Err(problem) => {
                if let Some(type_) = problem.condition {
                    let update = crate::conditions::ConditionUpdate {
                        type_,
                        status: false,
                        reason: problem.reason,
                        message: problem.message.clone(),
                    };
                    set_condition(&mut conditions, update, generation, now.clone());
                }
                problem.condition.into_iter().collect()
            }
        };
        for type_ in optional.iter().filter(|t| !shown.contains(t)) {
            remove_condition(&mut conditions, type_);
        }
        let endpoint = match result {
            Ok(desired) => desired.endpoint.clone(),
            Err(_) => previous.endpoint.clone(),
        };
        WorkloadReport {
            summary: summarize_result(result, conflict.as_ref(), &rollout),
            conditions,
            endpoint,
            rollout,
            labels,
            generation,
            now,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(status: serde_json::Value) -> DeploymentView {
        serde_json::from_value(
            json!({"metadata": {"name": "d"}, "spec": {"replicas": 2}, "status": status}),
        )
        .expect("deployment")
    }

    #[test]
    fn ready_pending_and_failed_rollouts() {
        let none = observe(None);
        assert!(!none.ready && none.mirror.is_none());
        let ready = observe(Some(&deployment(
            json!({"replicas": 2, "readyReplicas": 1, "availableReplicas": 1, "updatedReplicas": 2}),
        )));
        assert!(ready.ready);
        assert_eq!(ready.message, "Deployment ready replicas: 1/2");
        assert_eq!(ready.mirror.as_ref().map(|m| m.updated_replicas), Some(2));
        let pending = observe(Some(&deployment(json!({"replicas": 2}))));
        assert!(!pending.ready && pending.failure.is_none());
        assert_eq!(pending.message, "Deployment ready replicas: 0/2");
        let failed = observe(Some(&deployment(json!({"replicas": 2, "conditions": [
            {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded", "message": "ReplicaSet \"d\" has timed out progressing."}
        ]}))));
        assert_eq!(
            failed.failure.as_deref(),
            Some("ReplicaSet \"d\" has timed out progressing.")
        );
    }
}
