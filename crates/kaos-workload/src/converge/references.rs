//! The Secrets and ConfigMaps a pod spec needs before its containers can start, and which of
//! them are missing.
//!
//! Admission cannot see these: a `secretKeyRef` to a Secret created later is valid. Without this
//! check the pods sit in `CreateContainerConfigError` and the resource says only "0/1 ready".
//! The check reads each referenced object by name (`get`, never `list`: the controllers hold no
//! cache of Secrets) and keeps nothing of it but whether the keys exist; no value is logged.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::{ConfigMap, Container, KeyToPath, PodSpec, Secret};
use kube::Api;

/// The kind of object a pod reads configuration from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Source {
    Secret,
    ConfigMap,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Secret => "Secret",
            Source::ConfigMap => "ConfigMap",
        }
    }
}

/// One required read: a key of an object (`key` None: the object as a whole, as `envFrom`
/// and volumes without `items` read it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reference {
    pub source: Source,
    pub name: String,
    pub key: Option<String>,
    /// Where the pod reads it, for the message: `env PROXY_API_KEY of container model-api`.
    pub reader: String,
}

/// The non-optional references of a pod spec, in the order the pod declares them.
pub fn required(pod: &PodSpec) -> Vec<Reference> {
    let mut references = Vec::new();
    let containers = pod
        .init_containers
        .iter()
        .flatten()
        .chain(pod.containers.iter());
    for container in containers {
        container_references(container, &mut references);
    }
    for volume in pod.volumes.iter().flatten() {
        let reader = format!("volume {}", volume.name);
        let mut require = |source, name: &str, optional: Option<bool>, items: &Option<Vec<_>>| {
            if optional != Some(true) {
                let keys = items.iter().flatten().map(|i: &KeyToPath| i.key.clone());
                push_object(&mut references, source, name, keys, &reader);
            }
        };
        if let Some(s) = &volume.secret {
            let name = s.secret_name.as_deref().unwrap_or_default();
            require(Source::Secret, name, s.optional, &s.items);
        }
        if let Some(c) = &volume.config_map {
            require(Source::ConfigMap, &c.name, c.optional, &c.items);
        }
        let projected = volume
            .projected
            .iter()
            .flat_map(|p| p.sources.iter().flatten());
        for projection in projected {
            if let Some(s) = &projection.secret {
                require(Source::Secret, &s.name, s.optional, &s.items);
            }
            if let Some(c) = &projection.config_map {
                require(Source::ConfigMap, &c.name, c.optional, &c.items);
            }
        }
    }
    references
}

fn container_references(container: &Container, references: &mut Vec<Reference>) {
    let mut require =
        |source, name: &str, optional: Option<bool>, key: Option<&str>, reader: &str| {
            if optional != Some(true) {
                push_object(references, source, name, key.map(str::to_string), reader);
            }
        };
    for env in container.env.iter().flatten() {
        let Some(from) = &env.value_from else {
            continue;
        };
        let reader = &format!("env {} of container {}", env.name, container.name);
        if let Some(r) = &from.secret_key_ref {
            require(Source::Secret, &r.name, r.optional, Some(&r.key), reader);
        }
        if let Some(r) = &from.config_map_key_ref {
            require(Source::ConfigMap, &r.name, r.optional, Some(&r.key), reader);
        }
    }
    let reader = &format!("envFrom of container {}", container.name);
    for from in container.env_from.iter().flatten() {
        if let Some(r) = &from.secret_ref {
            require(Source::Secret, &r.name, r.optional, None, reader);
        }
        if let Some(r) = &from.config_map_ref {
            require(Source::ConfigMap, &r.name, r.optional, None, reader);
        }
    }
}

/// The object itself when no keys are listed, else each listed key.
fn push_object(
    references: &mut Vec<Reference>,
    source: Source,
    name: &str,
    keys: impl IntoIterator<Item = String>,
    reader: &str,
) {
    let before = references.len();
    for key in keys {
        references.push(Reference {
            source,
            name: name.to_string(),
            key: Some(key),
            reader: reader.to_string(),
        });
    }
    if references.len() == before {
        references.push(Reference {
            source,
            name: name.to_string(),
            key: None,
            reader: reader.to_string(),
        });
    }
}

/// A reference the namespace cannot satisfy yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Missing {
    pub reference: Reference,
    pub namespace: String,
    /// The object exists but lacks the key.
    pub object_exists: bool,
}

impl Missing {
    /// The condition reason: `SecretNotFound`, `SecretKeyNotFound`, `ConfigMapNotFound` or
    /// `ConfigMapKeyNotFound`.
    pub fn reason(&self) -> &'static str {
        match (self.reference.source, self.object_exists) {
            (Source::Secret, false) => "SecretNotFound",
            (Source::Secret, true) => "SecretKeyNotFound",
            (Source::ConfigMap, false) => "ConfigMapNotFound",
            (Source::ConfigMap, true) => "ConfigMapKeyNotFound",
        }
    }
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Reference {
            source,
            name,
            key,
            reader,
        } = &self.reference;
        let source = source.as_str();
        let reads = match key {
            Some(key) => format!("{reader} reads its key {key}"),
            None => format!("{reader} reads it"),
        };
        match (self.object_exists, key) {
            (true, Some(key)) => write!(
                f,
                "{source} {name} has no key {key} ({reader} reads it); add the key or fix the \
                 reference, and the resource recovers by itself"
            ),
            _ => write!(
                f,
                "{source} {name} does not exist in namespace {} ({reads}); create it and the \
                 resource recovers by itself",
                self.namespace
            ),
        }
    }
}

/// What a read of one referenced object found.
enum Lookup {
    /// It could not be read (RBAC, a transient error): not reported.
    Unknown,
    Absent,
    Keys(Vec<String>),
}

/// The references of `required` that `namespace` cannot satisfy, reading each object once. An
/// object this controller may not read (RBAC) or could not read is not reported: the check
/// explains a stuck pod, it must never block one.
pub async fn missing(
    client: &kube::Client,
    namespace: &str,
    required: Vec<Reference>,
) -> Vec<Missing> {
    let mut lookups: BTreeMap<(Source, String), Lookup> = BTreeMap::new();
    let mut missing: Vec<Missing> = Vec::new();
    for reference in required {
        let object = (reference.source, reference.name.clone());
        if !lookups.contains_key(&object) {
            let lookup = lookup(client, namespace, reference.source, &reference.name).await;
            lookups.insert(object.clone(), lookup);
        }
        let object_exists = match (&lookups[&object], &reference.key) {
            (Lookup::Absent, _) => false,
            (Lookup::Keys(keys), Some(key)) if !keys.contains(key) => true,
            _ => continue,
        };
        let reported = missing.iter().any(|m| {
            (m.reference.source, &m.reference.name, &m.reference.key)
                == (reference.source, &reference.name, &reference.key)
        });
        if !reported {
            missing.push(Missing {
                reference,
                namespace: namespace.to_string(),
                object_exists,
            });
        }
    }
    missing
}

async fn lookup(client: &kube::Client, namespace: &str, source: Source, name: &str) -> Lookup {
    let read = match source {
        Source::Secret => Api::<Secret>::namespaced(client.clone(), namespace)
            .get_opt(name)
            .await
            .map(|s| s.map(|s| keys(s.data).chain(keys(s.string_data)).collect())),
        Source::ConfigMap => Api::<ConfigMap>::namespaced(client.clone(), namespace)
            .get_opt(name)
            .await
            .map(|c| c.map(|c| keys(c.data).chain(keys(c.binary_data)).collect())),
    };
    match read {
        Ok(Some(keys)) => Lookup::Keys(keys),
        Ok(None) => Lookup::Absent,
        Err(error) => {
            tracing::debug!(
                "not checking {} {namespace}/{name}: {error}",
                source.as_str()
            );
            Lookup::Unknown
        }
    }
}

/// The keys of a data map that may be absent (the values are never read).
fn keys<V>(data: Option<BTreeMap<String, V>>) -> impl Iterator<Item = String> {
    data.into_iter().flatten().map(|(key, _)| key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(spec: serde_json::Value) -> PodSpec {
        serde_json::from_value(spec).expect("pod spec")
    }

    #[test]
    fn every_non_optional_reference_of_containers_and_volumes_in_pod_order() {
        let spec = pod(json!({
            "initContainers": [{"name": "init", "envFrom": [{"configMapRef": {"name": "settings"}}]}],
            "containers": [{"name": "agent", "env": [
                {"name": "PLAIN", "value": "x"},
                {"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "api-key"}}},
                {"name": "MAYBE", "valueFrom": {"secretKeyRef": {"name": "extra", "key": "k", "optional": true}}},
                {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "mode"}}},
                {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
            ], "envFrom": [{"secretRef": {"name": "bulk"}}, {"secretRef": {"name": "opt", "optional": true}}]}],
            "volumes": [
                {"name": "config", "secret": {"secretName": "litellm", "items": [{"key": "config.yaml", "path": "c"}]}},
                {"name": "all", "configMap": {"name": "files"}},
                {"name": "tmp", "emptyDir": {}},
                {"name": "both", "projected": {"sources": [
                    {"secret": {"name": "p", "items": [{"key": "a", "path": "a"}]}},
                    {"configMap": {"name": "q", "optional": true}}
                ]}}
            ]
        }));
        let found: Vec<(Source, String, Option<String>, String)> = required(&spec)
            .into_iter()
            .map(|r| (r.source, r.name, r.key, r.reader))
            .collect();
        let expected = [
            (
                Source::ConfigMap,
                "settings",
                None,
                "envFrom of container init",
            ),
            (
                Source::Secret,
                "creds",
                Some("api-key"),
                "env KEY of container agent",
            ),
            (
                Source::ConfigMap,
                "settings",
                Some("mode"),
                "env MODE of container agent",
            ),
            (Source::Secret, "bulk", None, "envFrom of container agent"),
            (
                Source::Secret,
                "litellm",
                Some("config.yaml"),
                "volume config",
            ),
            (Source::ConfigMap, "files", None, "volume all"),
            (Source::Secret, "p", Some("a"), "volume both"),
        ]
        .map(|(s, n, k, r)| (s, n.to_string(), k.map(str::to_string), r.to_string()));
        assert_eq!(found, expected);
    }

    #[test]
    fn messages_name_the_object_the_key_and_the_reader_and_say_what_to_do() {
        let key = Reference {
            source: Source::Secret,
            name: "openai-credentials".into(),
            key: Some("api-key".into()),
            reader: "env PROXY_API_KEY of container model-api".into(),
        };
        let whole_config_map = Reference {
            source: Source::ConfigMap,
            key: None,
            reader: "volume all".into(),
            ..key.clone()
        };
        let cases = [
            (
                &key,
                false,
                "SecretNotFound",
                "Secret openai-credentials does not exist in namespace team-a (env PROXY_API_KEY \
                 of container model-api reads its key api-key); create it and the resource \
                 recovers by itself",
            ),
            (
                &key,
                true,
                "SecretKeyNotFound",
                "Secret openai-credentials has no key api-key (env PROXY_API_KEY of container \
                 model-api reads it); add the key or fix the reference, and the resource \
                 recovers by itself",
            ),
            (
                &whole_config_map,
                false,
                "ConfigMapNotFound",
                "ConfigMap openai-credentials does not exist in namespace team-a (volume all \
                 reads it); create it and the resource recovers by itself",
            ),
        ];
        for (reference, object_exists, reason, message) in cases {
            let missing = Missing {
                reference: reference.clone(),
                namespace: "team-a".into(),
                object_exists,
            };
            assert_eq!(missing.reason(), reason);
            assert_eq!(missing.to_string(), message);
        }
    }
}
