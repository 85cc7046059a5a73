//! The children that decide how many pods a workload runs and how many may go at once: the
//! HorizontalPodAutoscaler of `spec.autoscaling` and the PodDisruptionBudget.

use k8s_openapi::api::autoscaling::v2::{
    CrossVersionObjectReference, HorizontalPodAutoscaler, HorizontalPodAutoscalerSpec, MetricSpec,
    MetricTarget, ResourceMetricSource,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kaos_api::scaling::{Autoscaling, DEFAULT_TARGET_UTILIZATION, WorkloadScaling};

use crate::build::workload::Workload;
use crate::desired::{Replicas, WorkloadChildren};

/// The replica settings of one workload, turned into what its children need.
#[derive(Clone, Debug)]
pub struct ScaledChildren {
    pub replicas: Replicas,
    pub autoscaler: Option<HorizontalPodAutoscaler>,
    pub disruption_budget: Option<PodDisruptionBudget>,
}

impl ScaledChildren {
    pub fn of(workload: &Workload, scaling: &WorkloadScaling) -> Self {
        ScaledChildren {
            replicas: Replicas::of(scaling),
            autoscaler: scaling
                .autoscaling
                .as_ref()
                .map(|a| autoscaler(workload, a)),
            disruption_budget: disruption_budget(workload, scaling),
        }
    }
}

impl WorkloadChildren {
    /// With the autoscaler, disruption budget and replicas `scaled` asks for.
    pub fn scaled(self, scaled: ScaledChildren) -> Self {
        WorkloadChildren {
            replicas: scaled.replicas,
            autoscaler: scaled.autoscaler,
            disruption_budget: scaled.disruption_budget,
            ..self
        }
    }
}

/// The HorizontalPodAutoscaler named like the workload, scaling its Deployment.
pub fn autoscaler(workload: &Workload, autoscaling: &Autoscaling) -> HorizontalPodAutoscaler {
    let metrics = if autoscaling.metrics.is_empty() {
        ["cpu", "memory"]
            .into_iter()
            .map(|resource| MetricSpec {
                type_: "Resource".into(),
                resource: Some(ResourceMetricSource {
                    name: resource.into(),
                    target: MetricTarget {
                        type_: "Utilization".into(),
                        average_utilization: Some(DEFAULT_TARGET_UTILIZATION),
                        ..Default::default()
                    },
                }),
                ..Default::default()
            })
            .collect()
    } else {
        autoscaling.metrics.clone()
    };
    HorizontalPodAutoscaler {
        metadata: metadata(workload),
        spec: Some(HorizontalPodAutoscalerSpec {
            scale_target_ref: CrossVersionObjectReference {
                api_version: Some("apps/v1".into()),
                kind: "Deployment".into(),
                name: workload.name.clone(),
            },
            min_replicas: Some(autoscaling.min()),
            max_replicas: autoscaling.max_replicas,
            metrics: Some(metrics),
            behavior: autoscaling.behavior.clone(),
        }),
        status: None,
    }
}

/// The PodDisruptionBudget named like the workload, when it is wanted: `maxUnavailable: 1`
/// unless the resource says otherwise.
pub fn disruption_budget(
    workload: &Workload,
    scaling: &WorkloadScaling,
) -> Option<PodDisruptionBudget> {
    if !scaling.wants_disruption_budget() {
        return None;
    }
    let chosen = scaling.pod_disruption_budget.as_ref();
    let min_available = chosen.and_then(|b| b.min_available.clone());
    let max_unavailable = chosen
        .and_then(|b| b.max_unavailable.clone())
        .or_else(|| min_available.is_none().then_some(IntOrString::Int(1)));
    Some(PodDisruptionBudget {
        metadata: metadata(workload),
        spec: Some(PodDisruptionBudgetSpec {
            min_available,
            max_unavailable,
            selector: Some(LabelSelector {
                match_labels: Some(workload.labels.clone()),
                ..Default::default()
            }),
            ..Default::default()
        }),
        status: None,
    })
}

fn metadata(workload: &Workload) -> ObjectMeta {
    ObjectMeta {
        name: Some(workload.name.clone()),
        namespace: Some(workload.namespace.clone()),
        labels: Some(workload.labels.clone()),
        owner_references: Some(vec![workload.owner.clone()]),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use kaos_api::scaling::DisruptionBudget;
    use serde_json::json;

    fn workload() -> Workload {
        Workload {
            name: "agent-a".into(),
            namespace: "ns".into(),
            labels: [("app".to_string(), "agent".to_string())].into(),
            owner: OwnerReference {
                api_version: "kaos.tools/v1alpha1".into(),
                kind: "Agent".into(),
                name: "a".into(),
                uid: "u".into(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            },
            port: 8000,
        }
    }

    fn autoscaling(value: serde_json::Value) -> Autoscaling {
        serde_json::from_value(value).expect("autoscaling")
    }

    #[test]
    fn the_autoscaler_targets_the_deployment_on_cpu_and_memory_by_default() {
        let hpa = autoscaler(&workload(), &autoscaling(json!({"maxReplicas": 5})));
        assert_eq!(
            serde_json::to_value(&hpa).expect("json"),
            json!({
                "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                "metadata": {"name": "agent-a", "namespace": "ns", "labels": {"app": "agent"},
                    "ownerReferences": [{"apiVersion": "kaos.tools/v1alpha1", "kind": "Agent",
                        "name": "a", "uid": "u", "controller": true, "blockOwnerDeletion": true}]},
                "spec": {
                    "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "agent-a"},
                    "minReplicas": 1, "maxReplicas": 5,
                    "metrics": [
                        {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}},
                        {"type": "Resource", "resource": {"name": "memory", "target": {"type": "Utilization", "averageUtilization": 80}}},
                    ],
                },
            })
        );
    }

    #[test]
    fn custom_metrics_and_behaviour_pass_through_as_written() {
        let external = json!({"type": "External", "external": {
            "metric": {"name": "queue_depth", "selector": {"matchLabels": {"queue": "a"}}},
            "target": {"type": "AverageValue", "averageValue": "30"}}});
        let behavior = json!({"scaleDown": {"stabilizationWindowSeconds": 600}});
        let hpa = autoscaler(
            &workload(),
            &autoscaling(json!({"minReplicas": 2, "maxReplicas": 9,
                "metrics": [external.clone()], "behavior": behavior.clone()})),
        );
        let spec = serde_json::to_value(hpa.spec).expect("json");
        assert_eq!(spec["minReplicas"], 2);
        assert_eq!(spec["metrics"], json!([external]));
        assert_eq!(spec["behavior"], behavior);
    }

    #[test]
    fn a_budget_allows_one_pod_down_unless_told_otherwise() {
        let scaling = |replicas, budget| WorkloadScaling {
            replicas: Some(replicas),
            autoscaling: None,
            pod_disruption_budget: budget,
        };
        assert!(disruption_budget(&workload(), &scaling(1, None)).is_none());
        let budget = disruption_budget(&workload(), &scaling(2, None)).expect("budget");
        assert_eq!(
            serde_json::to_value(budget.spec).expect("json"),
            json!({"maxUnavailable": 1, "selector": {"matchLabels": {"app": "agent"}}})
        );
        let half = DisruptionBudget {
            min_available: Some(IntOrString::String("50%".into())),
            ..Default::default()
        };
        let budget = disruption_budget(&workload(), &scaling(4, Some(half))).expect("budget");
        assert_eq!(
            serde_json::to_value(budget.spec).expect("json"),
            json!({"minAvailable": "50%", "selector": {"matchLabels": {"app": "agent"}}})
        );
    }

    #[test]
    fn an_autoscaled_deployment_starts_at_the_minimum_and_never_carries_replicas_to_compare() {
        let a = autoscaling(json!({"minReplicas": 3, "maxReplicas": 6}));
        let scaled = Replicas::of(&WorkloadScaling {
            autoscaling: Some(a),
            ..Default::default()
        });
        assert_eq!(scaled, Replicas::Autoscaled { initial: 3 });
        assert_eq!(scaled.in_spec(), None);
        let fixed = Replicas::of(&WorkloadScaling {
            replicas: Some(2),
            ..Default::default()
        });
        assert_eq!(fixed.in_spec(), Some(2));
    }
}
