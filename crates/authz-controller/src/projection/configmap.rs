//! The policy ConfigMap's content: `policy.rego` and `data.json` (KAOS's keys), its size against
//! the API server's limit, and whether what the cluster holds already says it. Pure.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;

/// The key of the policy (what OPA loads as `/policy/policy.rego`).
pub const POLICY_KEY: &str = "policy.rego";
/// The key of the data (`/policy/data.json`).
pub const DATA_KEY: &str = "data.json";
/// The policy itself: static; only the data changes with the cluster.
pub const POLICY: &str = include_str!("policy.rego");
/// The most a ConfigMap's data may hold, keys included (kube-apiserver refuses more:
/// "must have at most 1048576 bytes").
pub const MAX_BYTES: usize = 1024 * 1024;
/// The label the controller's ConfigMap carries (KAOS's value for the same object).
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "kaos-operator-authz");

/// The keys the controller owns and their values; a key it does not own is left to whoever
/// writes it (with `policyRegoOverride`, `data.json` is the administrator's).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Content(pub BTreeMap<&'static str, String>);

impl Content {
    pub fn new(policy: bool, data: Option<String>) -> Self {
        let mut keys = BTreeMap::new();
        if policy {
            keys.insert(POLICY_KEY, POLICY.to_string());
        }
        if let Some(data) = data {
            keys.insert(DATA_KEY, data);
        }
        Content(keys)
    }

    /// Bytes counted as the API server counts them: every key and value of `data`.
    pub fn size(&self) -> usize {
        self.0.iter().map(|(k, v)| k.len() + v.len()).sum()
    }

    /// Why it cannot be written, if it is too big: KAOS does not split the data across objects
    /// (its PDP mounts one ConfigMap), so neither does this; the write is refused and the grants
    /// say so.
    pub fn too_big(&self) -> Option<String> {
        let size = self.size();
        (size > MAX_BYTES).then(|| {
            format!(
                "the policy data is {size} bytes, over the ConfigMap limit of {MAX_BYTES} bytes; \
                 the last projected data stays in force. Fewer grants or narrower selectors make it smaller"
            )
        })
    }

    /// Whether `current` already holds every owned key with this value (other keys, labels
    /// and annotations are not compared: they are not the controller's).
    pub fn is_in(&self, current: Option<&ConfigMap>) -> bool {
        let data = current.and_then(|c| c.data.as_ref());
        self.0
            .iter()
            .all(|(k, v)| data.and_then(|d| d.get(*k)) == Some(v))
    }

    /// The server-side apply body that sets the owned keys.
    pub fn apply_body(&self, namespace: &str, name: &str) -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {MANAGED_BY.0: MANAGED_BY.1},
            },
            "data": self.0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compares_only_the_owned_keys() {
        let content = Content::new(true, None);
        let mut current = ConfigMap {
            data: Some(BTreeMap::from([
                (POLICY_KEY.to_string(), POLICY.to_string()),
                (DATA_KEY.to_string(), "{\"kaos\":{}}".to_string()),
            ])),
            ..Default::default()
        };
        assert!(
            content.is_in(Some(&current)),
            "data.json is the administrator's"
        );
        assert!(!Content::new(true, Some("{}".into())).is_in(Some(&current)));
        current.data = None;
        assert!(!content.is_in(Some(&current)));
        assert!(!content.is_in(None));
    }

    #[test]
    fn refuses_data_over_the_limit_and_says_its_size() {
        let fits = Content::new(true, Some("x".repeat(MAX_BYTES - POLICY.len() - 40)));
        assert!(fits.too_big().is_none());
        let over = Content::new(true, Some("x".repeat(MAX_BYTES)));
        let message = over.too_big().expect("too big");
        assert!(
            message.contains(&format!("{} bytes", over.size())),
            "{message}"
        );
    }
}
