//! One rollout of a workload (what a check is valid for) and the record of its last check. Pure.

use crate::cache::deployment_view::DeploymentView;

/// One rollout: the Deployment's uid and generation, and the endpoint it is reached at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rollout {
    deployment_uid: String,
    deployment_generation: i64,
    pub endpoint: String,
}

impl Rollout {
    /// The rollout a workload that is `ready` at `endpoint` is available on, if any: the
    /// Deployment's controller caught up with its spec and no pod of an older template is left,
    /// so whatever answers at the endpoint is this rollout's.
    pub fn available(
        ready: bool,
        endpoint: Option<&str>,
        deployment: Option<&DeploymentView>,
    ) -> Option<Self> {
        let deployment = deployment?;
        let meta = &deployment.metadata.meta;
        let generation = meta.generation?;
        let status = deployment.status();
        let caught_up = status.observed_generation == Some(generation);
        // While older pods run, the Service may send a check to one of them.
        let rolled = status.updated_replicas.unwrap_or(0) == status.replicas.unwrap_or(0);
        (ready && caught_up && rolled).then_some(())?;
        Some(Rollout {
            deployment_uid: meta.uid.clone()?,
            deployment_generation: generation,
            endpoint: endpoint?.to_string(),
        })
    }
}

/// What a kind's check found.
pub trait Outcome: Clone + Send + Sync + 'static {
    /// Whether it passed: a rollout whose check passed is not checked again; one whose check
    /// failed is, after a backoff.
    fn passed(&self) -> bool;
}

/// The last check of one object: the rollout it checked and what it found.
#[derive(Debug, Clone, PartialEq)]
pub struct Record<O> {
    pub rollout: Rollout,
    pub outcome: O,
}

impl<O> Record<O> {
    /// What the check found, if it checked `current` (the rollout available now).
    pub fn of(&self, current: Option<&Rollout>) -> Option<&O> {
        (current == Some(&self.rollout)).then_some(&self.outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(generation: i64, status: serde_json::Value) -> DeploymentView {
        serde_json::from_value(json!({
            "metadata": {"name": "d", "uid": "u1", "generation": generation},
            "status": status,
        }))
        .expect("a view")
    }

    #[test]
    fn a_rollout_is_available_once_observed_rolled_and_ready() {
        let endpoint = Some("http://svc:8000");
        let rolled = json!({"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2});
        let available = Rollout::available(true, endpoint, Some(&deployment(2, rolled.clone())));
        assert_eq!(
            available.as_ref().map(|r| r.endpoint.as_str()),
            Some("http://svc:8000")
        );
        assert_eq!(
            Rollout::available(false, endpoint, Some(&deployment(2, rolled.clone()))),
            None,
            "not ready"
        );
        assert_eq!(
            Rollout::available(true, None, Some(&deployment(2, rolled.clone()))),
            None,
            "no endpoint"
        );
        assert_eq!(
            Rollout::available(true, endpoint, None),
            None,
            "no Deployment"
        );
        let behind = json!({"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1});
        assert_eq!(
            Rollout::available(true, endpoint, Some(&deployment(2, behind))),
            None,
            "not observed"
        );
        let rolling = json!({"observedGeneration": 2, "replicas": 3, "updatedReplicas": 1});
        assert_eq!(
            Rollout::available(true, endpoint, Some(&deployment(2, rolling))),
            None,
            "old pods left"
        );
        let record = Record {
            rollout: available.clone().expect("available"),
            outcome: true,
        };
        assert_eq!(record.of(available.as_ref()), Some(&true));
        let next = Rollout::available(
            true,
            endpoint,
            Some(&deployment(3, json!({"observedGeneration": 3}))),
        );
        assert_eq!(record.of(next.as_ref()), None, "another rollout");
        assert_eq!(record.of(None), None);
    }
}
