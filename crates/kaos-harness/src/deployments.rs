//! Reading what a controller wrote into a Deployment's pod template.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Container;

/// The pod template's first container (the workload's own).
fn container(deployment: &Deployment) -> Option<&Container> {
    deployment
        .spec
        .as_ref()?
        .template
        .spec
        .as_ref()?
        .containers
        .first()
}

/// The first container's environment as (name, value) pairs, in order (a value read from a
/// Secret or ConfigMap is empty).
pub fn env_of(deployment: &Deployment) -> Vec<(String, String)> {
    container(deployment)
        .and_then(|c| c.env.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|e| (e.name, e.value.unwrap_or_default()))
        .collect()
}

/// The value of one variable of the first container's environment.
pub fn env_value(deployment: &Deployment, name: &str) -> Option<String> {
    env_of(deployment)
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, value)| value)
}

pub fn image_of(deployment: &Deployment) -> Option<String> {
    container(deployment)?.image.clone()
}

/// An annotation of the pod template, empty when absent.
pub fn template_annotation(deployment: &Deployment, key: &str) -> String {
    deployment
        .spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.annotations.as_ref())
        .and_then(|a| a.get(key).cloned())
        .unwrap_or_default()
}

/// The replicas the Deployment asks for.
pub fn replicas_of(deployment: &Deployment) -> Option<i32> {
    deployment.spec.as_ref()?.replicas
}
