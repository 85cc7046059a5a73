//! What the Agent cache keeps of an Agent. As typed values an Agent's status (conditions, the
//! Deployment's status mirrored with its conditions, linked resources) and spec are most of its
//! memory, yet a reconcile reads the spec once and of the status only what a new status keeps
//! (its endpoint, when each condition last flipped) and whether it would change. So the cache
//! keeps the metadata slim, the spec compact and the status as a [`StatusMemo`]; a reconcile
//! works on [`CachedAgent::to_agent`]. An agent's own budget is kept apart too, for the usage
//! collector's every round, and its reported usage whole, so a new leader resumes from it.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kaos_api::agent::{Agent, AgentPhase, AgentSpec, AgentStatus};
use kaos_api::budget::{Budget, BudgetUsage};
use kaos_api::common::WorkloadStatus;
use kaos_workload::cache::compact::Compact;
use kaos_workload::cache::packed::SlimMeta;
use kaos_workload::reconcile::{StatusDigest, status_digest};
use serde::Deserialize;

use crate::conditions::OWN_CONDITIONS;
use kaos_workload::trigger::claims::{SecurityIdentity, claimed};

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(from = "Agent")]
pub struct CachedAgent {
    pub metadata: SlimMeta,
    spec: Compact<AgentSpec>,
    /// `spec.security.id`, kept apart: the claims index reads it on every event.
    security_id: Option<Box<str>>,
    /// `spec.budget` with `spec.modelAPI`, kept apart: the usage collector reads them every round.
    own_budget: Option<Box<OwnBudget>>,
    /// `spec.suspend`, kept apart: its listers' projections read it on every event.
    suspended: bool,
    status: Option<StatusMemo>,
}

/// An agent's own budget and the ModelAPI it applies at.
#[derive(Clone, Debug, PartialEq)]
pub struct OwnBudget {
    pub model_api: Box<str>,
    pub budget: Arc<Budget>,
}

/// What a reconcile reads of an Agent's current status.
#[derive(Clone, Debug, PartialEq)]
struct StatusMemo {
    /// [`status_digest`] of the whole status: a new status equal to it is not written.
    digest: u64,
    phase: Option<AgentPhase>,
    endpoint: Option<Box<str>>,
    conditions: Box<[KeptCondition]>,
    /// `status.usage` (agents with a budget), kept whole: a new status carries it until the usage
    /// collector has read the proxy again, and the collector resumes the day window from it.
    usage: Option<Box<BudgetUsage>>,
}

/// The statuses a condition can have.
const CONDITION_STATUSES: [&str; 3] = ["True", "False", "Unknown"];

#[derive(Clone, Debug, PartialEq)]
enum KeptCondition {
    /// One this controller sets on every reconcile: all a new status keeps of it is when its
    /// status last flipped.
    Own {
        type_: &'static str,
        status: &'static str,
        since: Time,
    },
    /// One someone else set, kept whole so that our status writes carry it unchanged; also the
    /// usage conditions (`BudgetExceeded`, `UsageReported`), carried until the collector reports.
    Foreign(Box<Condition>),
}

impl From<AgentStatus> for StatusMemo {
    fn from(status: AgentStatus) -> Self {
        let digest = status_digest(&status);
        let usage = status.usage.map(Box::new);
        let status = status.workload;
        StatusMemo {
            digest,
            phase: status.phase,
            endpoint: status.endpoint.map(String::into_boxed_str),
            conditions: status
                .conditions
                .into_iter()
                .map(|c| {
                    let own = OWN_CONDITIONS.iter().find(|t| **t == c.type_);
                    let status = CONDITION_STATUSES.iter().find(|s| **s == c.status);
                    match (own, status) {
                        (Some(type_), Some(status)) => KeptCondition::Own {
                            type_,
                            status,
                            since: c.last_transition_time,
                        },
                        _ => KeptCondition::Foreign(Box::new(c)),
                    }
                })
                .collect(),
            usage,
        }
    }
}

impl StatusMemo {
    /// A status holding what a new status keeps of this one, and nothing else.
    fn kept(&self) -> AgentStatus {
        let workload = WorkloadStatus {
            phase: self.phase,
            endpoint: self.endpoint.as_deref().map(String::from),
            conditions: self
                .conditions
                .iter()
                .map(|c| match c {
                    KeptCondition::Own {
                        type_,
                        status,
                        since,
                    } => Condition {
                        type_: type_.to_string(),
                        status: status.to_string(),
                        last_transition_time: since.clone(),
                        reason: String::new(),
                        message: String::new(),
                        observed_generation: None,
                    },
                    KeptCondition::Foreign(condition) => condition.as_ref().clone(),
                })
                .collect(),
            ..Default::default()
        };
        AgentStatus {
            usage: self.usage.as_deref().cloned(),
            ..workload.into()
        }
    }
}

impl From<Agent> for CachedAgent {
    fn from(agent: Agent) -> Self {
        CachedAgent {
            metadata: agent.metadata.into(),
            security_id: claimed(agent.spec.workload.security.as_ref()).map(Box::from),
            own_budget: agent.spec.budget.as_ref().map(|budget| {
                Box::new(OwnBudget {
                    model_api: agent.spec.model_api.as_str().into(),
                    budget: Arc::new(budget.clone()),
                })
            }),
            suspended: agent.spec.suspend,
            spec: Compact::new(&agent.spec),
            status: agent.status.map(StatusMemo::from),
        }
    }
}

impl StatusDigest for CachedAgent {
    /// [`status_digest`] of its status, if it has one.
    fn status_digest(&self) -> Option<u64> {
        self.status.as_ref().map(|s| s.digest)
    }
}

impl CachedAgent {
    pub fn spec(&self) -> AgentSpec {
        self.spec.get()
    }

    /// `spec.suspend`.
    pub fn suspended(&self) -> bool {
        self.suspended
    }

    pub fn phase(&self) -> Option<AgentPhase> {
        self.status.as_ref().and_then(|s| s.phase)
    }

    /// Its own `spec.budget` (not a ModelAPI's default), with its ModelAPI.
    pub fn own_budget(&self) -> Option<&OwnBudget> {
        self.own_budget.as_deref()
    }

    /// The `status.usage` last written.
    pub fn reported_usage(&self) -> Option<&BudgetUsage> {
        self.status.as_ref().and_then(|s| s.usage.as_deref())
    }

    /// The condition `type_` of the status last written, if kept whole (another controller's,
    /// or a usage condition).
    pub fn kept_condition(&self, type_: &str) -> Option<&Condition> {
        self.status
            .as_ref()?
            .conditions
            .iter()
            .find_map(|c| match c {
                KeptCondition::Foreign(c) if c.type_ == type_ => Some(c.as_ref()),
                _ => None,
            })
    }

    /// The endpoint it offers its listers as a peer ([`crate::naming::advertised_endpoint`]).
    pub fn advertised_endpoint(&self) -> Option<String> {
        let published = self
            .status
            .as_ref()
            .map(|s| s.endpoint.as_deref().map(String::from));
        let waiting = self.phase() == Some(AgentPhase::Waiting);
        crate::naming::advertise(published, waiting, || {
            crate::naming::endpoint(&self.to_agent())
        })
    }

    /// The Agent as a reconcile reads it: the metadata and spec as the API server holds them
    /// (less managedFields and the last-applied annotation), and of the status what a new
    /// status keeps (its phase, its endpoint, when each condition last flipped; other
    /// controllers' conditions whole).
    pub fn to_agent(&self) -> Agent {
        Agent {
            metadata: self.metadata.to_meta(),
            spec: self.spec(),
            status: self.status.as_ref().map(StatusMemo::kept),
        }
    }
}

// Served where Agents are.
kaos_workload::served_as!([] CachedAgent, Agent);

impl SecurityIdentity for CachedAgent {
    fn security_id(&self) -> Option<&str> {
        self.security_id.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource;
    use serde_json::json;

    fn watched() -> serde_json::Value {
        json!({"apiVersion": "kaos.tools/v1alpha1", "kind": "Agent",
            "metadata": {"name": "a", "namespace": "ns", "labels": {"team": "search"},
                "managedFields": [{"manager": "kubectl"}]},
            "spec": {"modelAPI": "llm", "model": "m", "agentNetwork": {"access": ["b"]}},
            "status": {"phase": "Ready", "ready": true,
                "endpoint": "http://agent-a.ns.svc.cluster.local:8000",
                "linkedResources": {"modelapi": "llm"},
                "deployment": {"replicas": 1, "readyReplicas": 1, "availableReplicas": 1,
                    "updatedReplicas": 1},
                "conditions": [
                    {"type": "Ready", "status": "True", "reason": "DeploymentReady",
                        "message": "Deployment ready replicas: 1/1", "observedGeneration": 1,
                        "lastTransitionTime": "2026-01-01T00:00:00Z"},
                    {"type": "Audited", "status": "True", "reason": "Reviewed",
                        "message": "set by another controller",
                        "lastTransitionTime": "2026-01-02T00:00:00Z"}]}})
    }

    #[test]
    fn gives_back_the_metadata_and_spec_and_what_a_new_status_keeps() {
        let agent: Agent = serde_json::from_value(watched()).expect("agent");
        let cached: CachedAgent = serde_json::from_value(watched()).expect("cached");
        let read = cached.to_agent();
        let mut meta = agent.metadata.clone();
        meta.managed_fields = None;
        assert_eq!(read.metadata, meta);
        assert_eq!(read.spec, agent.spec);
        assert_eq!(cached.spec().peers(), ["b"]);
        assert_eq!(cached.phase(), Some(AgentPhase::Ready));
        assert_eq!(
            cached.status_digest(),
            agent.status.as_ref().map(status_digest),
            "whether a new status differs is told by the digest of the whole status"
        );

        let kept = read.status.expect("status");
        let status = agent.status.expect("status");
        assert_eq!(kept.endpoint, status.endpoint);
        let ready = &kept.conditions[0];
        assert_eq!(
            (
                ready.type_.as_str(),
                ready.status.as_str(),
                &ready.last_transition_time
            ),
            ("Ready", "True", &status.conditions[0].last_transition_time)
        );
        assert_eq!(
            kept.conditions[1], status.conditions[1],
            "another controller's condition is kept whole"
        );
        assert_eq!(kept.scale.deployment, None, "rebuilt from the Deployment");
        assert_eq!(
            cached.advertised_endpoint().as_deref(),
            Some("http://agent-a.ns.svc.cluster.local:8000")
        );
        assert_eq!(cached.meta().name.as_deref(), Some("a"));
    }

    #[test]
    fn an_agent_without_status_has_none() {
        let mut json = watched();
        json.as_object_mut().expect("object").remove("status");
        let cached: CachedAgent = serde_json::from_value(json).expect("cached");
        assert_eq!(cached.to_agent().status, None);
        assert_eq!(cached.status_digest(), None);
        assert_eq!(cached.phase(), None);
        assert_eq!(
            cached.advertised_endpoint().as_deref(),
            Some("http://agent-a.ns.svc.cluster.local:8000"),
            "before its first status, the endpoint its spec gives"
        );
        assert_eq!(
            CachedAgent::url_path(&(), Some("ns")),
            "/apis/kaos.tools/v1alpha1/namespaces/ns/agents"
        );
    }
}
