//! A value a cache keeps as its compact JSON: one allocation instead of a tree of typed fields
//! (a `Vec` of conditions with four `String`s each, an `Option` per field of a spec), read back
//! whole when a reconcile needs it. For the parts of cached objects that are large as typed
//! values and read rarely: a Deployment's status, an Agent's spec.

use std::fmt;
use std::marker::PhantomData;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A `T`, kept as the JSON it serializes to.
pub struct Compact<T> {
    json: Box<str>,
    kind: PhantomData<fn() -> T>,
}

impl<T: Serialize> Compact<T> {
    pub fn new(value: &T) -> Self {
        Compact {
            // Serializing a typed value to JSON fails only for maps with non-string keys, which
            // no Kubernetes type has.
            json: serde_json::to_string(value)
                .expect("a Kubernetes value serializes to JSON")
                .into_boxed_str(),
            kind: PhantomData,
        }
    }
}

impl<T: DeserializeOwned> Compact<T> {
    /// The value it was made from.
    pub fn get(&self) -> T {
        // The JSON was written from a `T` (`new`, `deserialize`), so it reads back as one.
        serde_json::from_str(&self.json).expect("a compact value reads back as its type")
    }

    /// A part of the value, read without the rest (`P` a struct of the fields wanted).
    pub fn read<P: DeserializeOwned>(&self) -> Option<P> {
        serde_json::from_str(&self.json).ok()
    }
}

impl<T> Clone for Compact<T> {
    fn clone(&self) -> Self {
        Compact {
            json: self.json.clone(),
            kind: PhantomData,
        }
    }
}

impl<T> PartialEq for Compact<T> {
    fn eq(&self, other: &Self) -> bool {
        self.json == other.json
    }
}

impl<T> fmt::Debug for Compact<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.json)
    }
}

impl<'de, T: Deserialize<'de> + Serialize> Deserialize<'de> for Compact<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        T::deserialize(deserializer).map(|value| Compact::new(&value))
    }
}

impl<T: Serialize + DeserializeOwned> Serialize for Compact<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.get().serialize(serializer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::DeploymentStatus;
    use serde_json::json;

    #[test]
    fn reads_back_the_value_it_was_read_from() {
        let watched = json!({"replicas": 1, "readyReplicas": 1,
            "conditions": [{"type": "Available", "status": "True",
                "reason": "MinimumReplicasAvailable",
                "message": "Deployment has minimum availability.",
                "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
        let typed: DeploymentStatus = serde_json::from_value(watched.clone()).expect("typed");
        let compact: Compact<DeploymentStatus> =
            serde_json::from_value(watched.clone()).expect("compact");
        assert_eq!(compact.get(), typed);
        assert_eq!(serde_json::to_value(&compact).expect("json"), watched);
        assert_eq!(compact, Compact::new(&typed));

        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Ready {
            ready_replicas: i32,
        }
        assert_eq!(compact.read::<Ready>().map(|r| r.ready_replicas), Some(1));
    }
}
