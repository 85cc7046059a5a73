//! Reading what a controller wrote into a Deployment's pod template.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Container, EnvVarSource};

/// The pod template's first container (the workload's own).
pub(crate) fn container(deployment: &Deployment) -> Option<&Container> {
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

/// The first container's environment as (name, value) pairs, in order, with a variable read from
/// elsewhere shown by its source, `<secret NAME/KEY>` or `<configMap NAME/KEY>` (any other
/// source in full), and one with neither value nor source as `<unset>`: for comparing a whole
/// environment, references included, with [`expected_env`].
pub fn env_with_sources(deployment: &Deployment) -> Vec<(String, String)> {
    container(deployment)
        .and_then(|c| c.env.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|e| {
            let shown = match (e.value, e.value_from) {
                (Some(value), _) => value,
                (None, Some(source)) => shown_source(&source),
                (None, None) => "<unset>".to_string(),
            };
            (e.name, shown)
        })
        .collect()
}

/// A Secret or ConfigMap key in short, `<secret NAME/KEY>`; only when its name and key are all
/// the source says (so nothing a test should see is hidden), otherwise the source in full.
fn shown_source(source: &EnvVarSource) -> String {
    let source = serde_json::to_value(source).expect("serializes");
    let only_field = source.as_object().is_some_and(|fields| fields.len() == 1);
    for (field, kind) in [("secretKeyRef", "secret"), ("configMapKeyRef", "configMap")] {
        let reference = &source[field];
        let name_and_key = reference.as_object().is_some_and(|r| r.len() == 2);
        if only_field && name_and_key {
            let (name, key) = (&reference["name"], &reference["key"]);
            return format!(
                "<{kind} {}/{}>",
                name.as_str().unwrap_or(""),
                key.as_str().unwrap_or("")
            );
        }
    }
    source.to_string()
}

/// An environment written as literals, to compare with [`env_with_sources`].
pub fn expected_env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect()
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
