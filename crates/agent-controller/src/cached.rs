//! What the Agent cache keeps of an Agent. An Agent's status (conditions, the Deployment's
//! status mirrored with its conditions, linked resources) is three quarters of its memory as
//! typed values, yet a reconcile reads it once and the triggers only its endpoint. So the cache
//! keeps the status as its compact JSON (one allocation) beside its phase (for the metrics), the
//! metadata slim and the spec as is; a reconcile works on [`CachedAgent::to_agent`].

use kaos_api::agent::{Agent, AgentPhase, AgentSpec, AgentStatus};
use kaos_runtime::packed::SlimMeta;
use serde::{Deserialize, Serialize, Serializer};

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(from = "Agent")]
pub struct CachedAgent {
    pub metadata: SlimMeta,
    pub spec: AgentSpec,
    /// The status as compact JSON.
    status: Option<Box<str>>,
    pub phase: Option<AgentPhase>,
}

impl From<Agent> for CachedAgent {
    fn from(agent: Agent) -> Self {
        CachedAgent {
            metadata: agent.metadata.into(),
            spec: agent.spec,
            phase: agent.status.as_ref().and_then(|s| s.phase),
            status: agent
                .status
                .and_then(|s| serde_json::to_string(&s).ok())
                .map(String::into_boxed_str),
        }
    }
}

impl CachedAgent {
    pub fn status(&self) -> Option<AgentStatus> {
        serde_json::from_str(self.status.as_deref()?).ok()
    }

    /// The endpoint its status publishes, without reading the rest of the status.
    fn status_endpoint(&self) -> Option<String> {
        #[derive(Deserialize)]
        struct Endpoint {
            endpoint: Option<String>,
        }
        serde_json::from_str::<Endpoint>(self.status.as_deref()?)
            .ok()?
            .endpoint
    }

    /// The endpoint it offers its listers as a peer ([`crate::build::advertised_endpoint`]).
    pub fn advertised_endpoint(&self) -> Option<String> {
        let published = self.status.is_some().then(|| self.status_endpoint());
        crate::build::advertise(published, || crate::build::endpoint(&self.to_agent()))
    }

    /// The Agent as the API server holds it (less managedFields and the last-applied annotation).
    pub fn to_agent(&self) -> Agent {
        Agent {
            metadata: self.metadata.to_meta(),
            spec: self.spec.clone(),
            status: self.status(),
        }
    }
}

impl Serialize for CachedAgent {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_agent().serialize(serializer)
    }
}

// Served where Agents are.
kaos_runtime::served_as!([] CachedAgent, Agent);

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
                "conditions": [{"type": "Ready", "status": "True", "reason": "DeploymentReady",
                    "message": "Deployment ready replicas: 1/1",
                    "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})
    }

    #[test]
    fn gives_back_the_agent_it_was_read_from() {
        let agent: Agent = serde_json::from_value(watched()).expect("agent");
        let cached: CachedAgent = serde_json::from_value(watched()).expect("cached");
        let mut expected = agent.clone();
        expected.metadata.managed_fields = None;
        let json = |a: &Agent| serde_json::to_value(a).expect("json");
        assert_eq!(json(&cached.to_agent()), json(&expected));
        assert_eq!(cached.status(), agent.status);
        assert_eq!(cached.phase, Some(AgentPhase::Ready));
        assert_eq!(
            cached.advertised_endpoint().as_deref(),
            Some("http://agent-a.ns.svc.cluster.local:8000")
        );
        assert_eq!(cached.spec.peers(), ["b"]);
        assert_eq!(cached.meta().name.as_deref(), Some("a"));
        assert_eq!(
            serde_json::to_value(&cached).expect("json")["status"],
            watched()["status"]
        );
    }

    #[test]
    fn an_agent_without_status_has_none() {
        let mut json = watched();
        json.as_object_mut().expect("object").remove("status");
        let cached: CachedAgent = serde_json::from_value(json).expect("cached");
        assert_eq!(cached.status(), None);
        assert_eq!(cached.phase, None);
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
