//! What the caches keep of a Deployment: its metadata, replica count and status, never its pod
//! template. The template is most of a Deployment's memory (12 of the 16 KiB an agent's
//! Deployment from kube-apiserver takes), and no controller reads it from the cache: the
//! status mirror needs the status, converge needs the metadata, and whether the template still
//! holds what we applied is told by the generation (see `converge`). Deserialized straight from
//! the watch, so the template is never even allocated; the labels and annotations are packed
//! ([`SlimMeta`]) and the status, read only to mirror it, is kept compact ([`Compact`]).

use k8s_openapi::api::apps::v1::{Deployment, DeploymentStatus};
use serde::{Deserialize, Serialize};

use crate::cache::compact::Compact;
use crate::cache::packed::SlimMeta;

/// A Deployment without its selector and pod template.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct DeploymentView {
    pub metadata: SlimMeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<ReplicasSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Compact<DeploymentStatus>>,
}

/// The only field of a Deployment's spec the cache keeps.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct ReplicasSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
}

impl DeploymentView {
    /// The view of a whole Deployment.
    pub fn of(deployment: &Deployment) -> Self {
        DeploymentView {
            metadata: deployment.metadata.clone().into(),
            spec: deployment.spec.as_ref().map(|s| ReplicasSpec {
                replicas: s.replicas,
            }),
            status: deployment.status.as_ref().map(Compact::new),
        }
    }

    /// The status the Deployment controller reports (empty before its first).
    pub fn status(&self) -> DeploymentStatus {
        self.status.as_ref().map(Compact::get).unwrap_or_default()
    }

    /// The desired replica count (1, the API default, when unset).
    pub fn replicas(&self) -> i32 {
        self.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
    }
}

// Served where Deployments are: a list or watch of `DeploymentView`s is one of Deployments.
crate::served_as!([] DeploymentView, Deployment);

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource;
    use serde_json::json;

    #[test]
    fn keeps_metadata_replicas_and_status_only() {
        let watched = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "agent-a", "namespace": "ns", "generation": 3},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "a"}},
                "template": {"spec": {"containers": [{"name": "agent", "image": "a:1"}]}}},
            "status": {"readyReplicas": 1, "observedGeneration": 3}
        });
        let view: DeploymentView = serde_json::from_value(watched).expect("view");
        assert_eq!(view.meta().generation, Some(3));
        assert_eq!(view.replicas(), 2);
        assert_eq!(view.status().ready_replicas, Some(1));
        assert_eq!(
            DeploymentView::url_path(&(), Some("ns")),
            "/apis/apps/v1/namespaces/ns/deployments"
        );
    }

    #[test]
    fn replicas_default_to_one() {
        assert_eq!(DeploymentView::default().replicas(), 1);
    }
}
