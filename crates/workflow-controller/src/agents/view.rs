//! What the controller keeps of an Agent: its metadata, whether it is suspended, whether it is
//! ready and the endpoint its status publishes. The rest of its spec (the pod template, the
//! instructions) is never deserialized.

use kaos_api::agent::Agent;
use kaos_workload::cache::packed::SlimMeta;
use serde::Deserialize;

/// An Agent as the workflow controller's cache keeps it.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct AgentView {
    pub metadata: SlimMeta,
    #[serde(default)]
    pub spec: AgentSuspension,
    #[serde(default)]
    pub status: Option<AgentReadiness>,
}

/// The part of an Agent's spec a step reads: whether it must be woken before it is sent to.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
pub struct AgentSuspension {
    #[serde(default)]
    pub suspend: bool,
}

/// The part of an Agent's status a step reads.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
pub struct AgentReadiness {
    #[serde(default)]
    pub ready: bool,
    #[serde(default)]
    pub endpoint: Option<String>,
}

impl AgentView {
    pub fn is_ready(&self) -> bool {
        self.status.as_ref().is_some_and(|status| status.ready)
    }

    /// `spec.suspend`: at zero pods unless a step in flight keeps it awake.
    pub fn is_suspended(&self) -> bool {
        self.spec.suspend
    }

    pub fn endpoint(&self) -> Option<&str> {
        self.status
            .as_ref()
            .and_then(|status| status.endpoint.as_deref())
    }
}

kaos_workload::served_as!([] AgentView, Agent);

/// What a waiting run reads of an agent: readiness, endpoint and suspension.
pub fn readiness_view(agent: &AgentView) -> (Option<AgentReadiness>, bool) {
    (agent.status.clone(), agent.is_suspended())
}

/// What a workflow reads of an agent: only that it exists.
pub fn existence_view(_: &AgentView) {}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource;
    use serde_json::json;

    #[test]
    fn keeps_readiness_and_endpoint_only() -> Result<(), serde_json::Error> {
        let agent: AgentView = serde_json::from_value(json!({
            "apiVersion": "kaos.tools/v1alpha1", "kind": "Agent",
            "metadata": {"name": "writer", "namespace": "team"},
            "spec": {"modelAPI": "llm", "model": "m", "config": {"instructions": "secret"},
                     "suspend": true},
            "status": {"ready": true, "phase": "Ready",
                       "endpoint": "http://agent-writer.team.svc.cluster.local:8000"}
        }))?;
        assert!(agent.is_ready() && agent.is_suspended());
        assert_eq!(
            agent.endpoint(),
            Some("http://agent-writer.team.svc.cluster.local:8000")
        );
        assert_eq!(agent.meta().name.as_deref(), Some("writer"));
        let fresh: AgentView =
            serde_json::from_value(json!({"metadata": {"name": "new", "namespace": "team"}}))?;
        assert!(!fresh.is_ready() && !fresh.is_suspended());
        Ok(())
    }
}
