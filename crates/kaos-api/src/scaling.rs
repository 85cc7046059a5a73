//! How many pods a workload runs and how many may be taken down at once: `spec.replicas`,
//! `spec.autoscaling` (an owned HorizontalPodAutoscaler) and `spec.podDisruptionBudget`, shared
//! by Agent, ModelAPI and MCPServer.

use k8s_openapi::api::autoscaling::v2::{HorizontalPodAutoscalerBehavior, MetricSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The CPU and memory utilisation an autoscaler aims at when `metrics` is empty, in percent of
/// the pods' requests.
pub const DEFAULT_TARGET_UTILIZATION: i32 = 80;

/// The rule on the whole object that keeps `spec.replicas` and `spec.autoscaling` apart.
pub(crate) fn object_rule() -> serde_json::Value {
    serde_json::json!({
        "rule": "!has(self.spec.replicas) || !has(self.spec.autoscaling)",
        "message": "set spec.replicas or spec.autoscaling, not both: while autoscaled, the HorizontalPodAutoscaler sets the number of pods",
        "fieldPath": ".spec.autoscaling",
    })
}

/// A HorizontalPodAutoscaler (`autoscaling/v2`) owned by the resource, scaling its Deployment.
/// While it is set, the controller never changes the Deployment's replicas: it creates the
/// Deployment at `minReplicas`, and afterwards the autoscaler alone sets them.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!has(self.minReplicas) || self.minReplicas <= self.maxReplicas",
    "message": "minReplicas must not exceed maxReplicas",
    "fieldPath": ".minReplicas"
}]))]
pub struct Autoscaling {
    /// The fewest pods (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub min_replicas: Option<i32>,
    /// The most pods.
    #[schemars(range(min = 1))]
    pub max_replicas: i32,
    /// What to scale on, in `autoscaling/v2` syntax (Resource, Pods, Object, External,
    /// ContainerResource), passed to the HorizontalPodAutoscaler as written. Empty: CPU and
    /// memory at 80% average utilisation of the pods' requests (set `resources.requests` in
    /// `spec.container` or `spec.podSpec`, or the autoscaler cannot compute utilisation).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub metrics: Vec<MetricSpec>,
    /// Scale-up and scale-down behaviour, passed to the HorizontalPodAutoscaler as written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub behavior: Option<HorizontalPodAutoscalerBehavior>,
}

impl Autoscaling {
    /// The pods a new Deployment starts with.
    pub fn min(&self) -> i32 {
        self.min_replicas.unwrap_or(1)
    }
}

/// The PodDisruptionBudget of a workload. By default a workload that can run more than one pod
/// (`replicas` ≥ 2, or `autoscaling.maxReplicas` ≥ 2) gets one with `maxUnavailable: 1`, and
/// one with a single pod gets none (so a node drain is never blocked).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!(has(self.minAvailable) && has(self.maxUnavailable))",
    "message": "set minAvailable or maxUnavailable, not both"
}]))]
pub struct DisruptionBudget {
    /// `true`: always a budget, `false`: never; unset: only when the workload can run more
    /// than one pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Pods that must stay available during a voluntary disruption (a number or a percentage),
    /// in place of `maxUnavailable: 1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_available: Option<IntOrString>,
    /// Pods that may be unavailable during a voluntary disruption (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,
}

/// The replica settings of a workload, flattened into the specs of Agent, ModelAPI and
/// MCPServer: one definition of the three fields and their documentation.
// The spec's `scale` subresource and the object rule read `spec.replicas`: flattened, the
// fields stay where they were.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadScaling {
    /// Number of pods (exclusive with `autoscaling`); `kubectl scale` sets it through the scale
    /// subresource. Unset: 1 at creation, then left alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub replicas: Option<i32>,
    /// Autoscaling by a HorizontalPodAutoscaler the controller owns (exclusive with `replicas`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<Autoscaling>,
    /// The PodDisruptionBudget: by default one with `maxUnavailable: 1` when more than one pod
    /// can run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_disruption_budget: Option<DisruptionBudget>,
}

impl WorkloadScaling {
    /// The most pods the workload can run: the autoscaler's maximum, else its replicas (1
    /// when unset).
    pub fn most_pods(&self) -> i32 {
        match &self.autoscaling {
            Some(a) => a.max_replicas,
            None => self.replicas.unwrap_or(1),
        }
    }

    /// Whether the workload gets a PodDisruptionBudget.
    pub fn wants_disruption_budget(&self) -> bool {
        match self.pod_disruption_budget.as_ref().and_then(|b| b.enabled) {
            Some(enabled) => enabled,
            None => self.most_pods() >= 2,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn autoscaling(min: Option<i32>, max: i32) -> Autoscaling {
        Autoscaling {
            min_replicas: min,
            max_replicas: max,
            metrics: Vec::new(),
            behavior: None,
        }
    }

    #[test]
    fn the_flattened_fields_stay_where_they_were_in_the_json() {
        let json = r#"{"modelAPI":"m","model":"x","waitForDependencies":true,"replicas":2,"podDisruptionBudget":{"maxUnavailable":1},"gatewayRoute":{"timeout":"30s"}}"#;
        let spec: crate::agent::AgentSpec = serde_json::from_str(json).expect("spec");
        assert_eq!(spec.scaling.replicas, Some(2));
        assert_eq!(serde_json::to_string(&spec).expect("json"), json);
        assert_eq!(
            spec.scaling
                .pod_disruption_budget
                .and_then(|b| b.max_unavailable),
            Some(IntOrString::Int(1))
        );
        let scaled = r#"{"runtime":"slack","autoscaling":{"maxReplicas":4}}"#;
        let spec: crate::mcpserver::MCPServerSpec = serde_json::from_str(scaled).expect("spec");
        assert_eq!(spec.scaling.autoscaling.map(|a| a.max_replicas), Some(4));
    }

    #[test]
    fn a_budget_only_where_more_than_one_pod_can_run_unless_overridden() {
        let cases = [
            (None, None, false),
            (Some(1), None, false),
            (Some(2), None, true),
            (None, Some(autoscaling(None, 2)), true),
            (None, Some(autoscaling(None, 1)), false),
        ];
        for (replicas, autoscaling, wanted) in cases {
            let scaling = WorkloadScaling {
                replicas,
                autoscaling,
                pod_disruption_budget: None,
            };
            assert_eq!(scaling.wants_disruption_budget(), wanted, "{scaling:?}");
        }
        let scaling = |replicas, enabled| WorkloadScaling {
            replicas: Some(replicas),
            autoscaling: None,
            pod_disruption_budget: Some(DisruptionBudget {
                enabled: Some(enabled),
                ..Default::default()
            }),
        };
        assert!(!scaling(3, false).wants_disruption_budget());
        assert!(scaling(1, true).wants_disruption_budget());
        assert_eq!(autoscaling(None, 4).min(), 1);
        assert_eq!(autoscaling(Some(2), 4).min(), 2);
    }
}
