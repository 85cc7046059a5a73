//! What a kind's pure `desired()` returns: the children its object should have, the endpoint
//! and the conditions its status shows besides the rollout; or the [`Problem`] that keeps it
//! from having any (what runs is then left as it is). One shape for every workload kind, so
//! every reconcile ends the same way (`Core::converge_built`) and `kaosctl render` prints
//! exactly what a reconcile would write.

mod child_set;

pub(crate) use child_set::Sealed;
pub use child_set::{Child, ChildKind, ChildSet, ChildType, Replicas, WorkloadChildren};

use crate::conditions::ConditionUpdate;

/// Everything a workload object should have in the cluster.
#[derive(Clone, Debug)]
pub struct Desired {
    /// What the pods need before they start (a ModelAPI's LiteLLM config and key Secret, a
    /// MemoryStore's claim), applied first, or that must be absent.
    pub first: ChildSet,
    /// The Deployment and the children that share its name.
    pub workload: WorkloadChildren,
    /// The base URL the status publishes (None: not reachable, e.g. an Agent not exposed).
    pub endpoint: Option<String>,
    /// Conditions the status shows besides `Ready` (a ModelAPI's `TelemetrySupported`, an
    /// Agent's `DependenciesReady` and `MemoryDegraded`).
    pub conditions: Vec<ConditionUpdate<'static>>,
}

impl Desired {
    /// The workload's children, with nothing first and no other condition.
    pub fn of(workload: WorkloadChildren, endpoint: Option<String>) -> Self {
        Self {
            first: ChildSet::default(),
            workload,
            endpoint,
            conditions: Vec::new(),
        }
    }

    /// The set to converge to: what the pods need first, then the workload's children.
    pub fn into_set(self) -> ChildSet {
        let mut set = self.first;
        let workload = self.workload.into_set();
        set.apply.extend(workload.apply);
        set.absent.extend(workload.absent);
        set.autoscaled_replicas = workload.autoscaled_replicas;
        set
    }
}

/// Where an object stands while it has a [`Problem`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stuck {
    /// Its spec cannot work as it is (or a child's name is taken): the user must act.
    Failed,
    /// It waits for something to appear or become ready, and goes on by itself then.
    Waiting,
}

/// Why an object gets no (new) children: its status shows the phase, the `Ready` reason and the
/// message saying what to fix or what is awaited; a `Failed` one is also a Warning event.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Problem {
    pub stuck: Stuck,
    pub reason: &'static str,
    pub message: String,
    /// The condition besides `Ready` the problem is about, shown False with it (an Agent's
    /// `DependenciesReady`).
    pub condition: Option<&'static str>,
}

impl Problem {
    /// A spec the controller cannot turn into children: what to fix.
    pub fn failed(reason: &'static str, message: String) -> Self {
        Self {
            stuck: Stuck::Failed,
            reason,
            message,
            condition: None,
        }
    }

    /// A dependency that is missing or not ready yet: what is awaited.
    pub fn waiting(reason: &'static str, message: String) -> Self {
        Self {
            stuck: Stuck::Waiting,
            message,
            ..Self::failed(reason, String::new())
        }
    }

    /// The same problem, shown on `condition` too.
    pub fn about(self, condition: &'static str) -> Self {
        Self {
            condition: Some(condition),
            ..self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::{ConfigMap, Service};

    #[test]
    fn the_first_children_come_before_the_workloads() {
        let deployment = Deployment {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some("w".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let mut desired = Desired::of(WorkloadChildren::plain(deployment, None, None), None);
        desired.first.absent.push((ConfigMap::KIND, "c".into()));
        let set = desired.into_set();
        assert_eq!(set.absent[0], (ConfigMap::KIND, "c".into()));
        assert_eq!(set.apply[0].kind(), Deployment::KIND);
        assert!(set.absent.contains(&(Service::KIND, "w".into())));
    }

    #[test]
    fn a_problem_says_how_it_is_stuck_and_on_which_condition() {
        let waiting = Problem::waiting("ModelAPINotReady", "ModelAPI \"llm\" is not ready".into())
            .about("DependenciesReady");
        assert_eq!(waiting.stuck, Stuck::Waiting);
        assert_eq!(waiting.condition, Some("DependenciesReady"));
        assert_eq!(waiting.to_string(), "ModelAPI \"llm\" is not ready");
        assert_eq!(Problem::failed("NoImage", "x".into()).stuck, Stuck::Failed);
    }
}
