//! What the controller caches of an Agent: its metadata (slim) and the fields the policy data
//! reads (what it calls, whether it is autonomous), nothing else, so 10 000 Agents cost little
//! and a change to any other field neither wakes the projector nor writes.

use kaos_api::agent::Agent;
use kaos_workload::cache::packed::SlimMeta;
use serde::{Deserialize, Serialize};

use crate::projection::data::AgentEdges;

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct AgentView {
    pub metadata: SlimMeta,
    #[serde(default)]
    pub spec: Spec,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Spec {
    #[serde(default, rename = "modelAPI")]
    pub model_api: String,
    #[serde(default)]
    pub mcp_servers: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_network: Option<Network>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<Config>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct Network {
    #[serde(default)]
    pub access: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct Config {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Memory>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autonomous: Option<Autonomous>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Memory {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_store: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct Autonomous {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal: Option<String>,
}

kaos_workload::served_as!([] AgentView, Agent);

impl AgentView {
    /// What the policy data reads of it (also what its change tracking hashes).
    pub fn edges(&self) -> AgentEdges {
        let config = self.spec.config.as_ref();
        AgentEdges {
            namespace: self.metadata.meta.namespace.clone().unwrap_or_default(),
            name: self.metadata.meta.name.clone().unwrap_or_default(),
            model_api: self.spec.model_api.clone(),
            mcp_servers: self.spec.mcp_servers.clone(),
            memory_store: config
                .and_then(|c| c.memory.as_ref())
                .and_then(|m| m.memory_store.clone()),
            peers: self
                .spec
                .agent_network
                .as_ref()
                .map(|n| n.access.clone())
                .unwrap_or_default(),
            autonomous: config
                .and_then(|c| c.autonomous.as_ref())
                .and_then(|a| a.goal.as_deref())
                .is_some_and(|g| !g.trim().is_empty()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_what_the_policy_needs_and_nothing_else() {
        let watched = json!({"apiVersion": "kaos.tools/v1alpha1", "kind": "Agent",
            "metadata": {"name": "coordinator", "namespace": "team", "labels": {"tier": "gold"}},
            "spec": {"modelAPI": "llm", "model": "gpt", "mcpServers": ["tools"],
                     "agentNetwork": {"access": ["worker", "coordinator"]},
                     "config": {"instructions": "be brief", "memory": {"memoryStore": "mem"},
                                "autonomous": {"goal": "watch the queue"}}}});
        let view: AgentView = serde_json::from_value(watched).expect("view");
        assert_eq!(
            view.edges(),
            AgentEdges {
                namespace: "team".into(),
                name: "coordinator".into(),
                model_api: "llm".into(),
                mcp_servers: vec!["tools".into()],
                memory_store: Some("mem".into()),
                peers: vec!["worker".into(), "coordinator".into()],
                autonomous: true,
            }
        );
        let text = serde_json::to_string(&view).expect("json");
        assert!(
            !text.contains("be brief") && !text.contains("gpt"),
            "{text}"
        );
    }
}
