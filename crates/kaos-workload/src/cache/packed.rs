//! Labels and annotations as the caches keep them. A `BTreeMap<String, String>` allocates a whole
//! B-tree node (~540 bytes) for its first entry and a String per key and value; the labels and
//! annotations of a child cost more than the rest of its cached metadata. [`PackedMap`] keeps
//! the same entries, sorted, in one allocation.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::cache::LAST_APPLIED;

/// A read-only string map in one allocation: the number of entries, where each key and value
/// ends, then the keys and values end to end (all offsets `u32`, little-endian).
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct PackedMap {
    bytes: Box<[u8]>,
}

const WORD: usize = std::mem::size_of::<u32>();

impl PackedMap {
    pub fn get(&self, key: &str) -> Option<&str> {
        self.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        let entries = self.len();
        let text_start = WORD * (1 + 2 * entries);
        let text = std::str::from_utf8(self.bytes.get(text_start..).unwrap_or_default())
            .unwrap_or_default();
        (0..entries).scan(0usize, move |start, i| {
            let (key_end, value_end) = (self.word(1 + 2 * i), self.word(2 + 2 * i));
            let entry = (&text[*start..key_end], &text[key_end..value_end]);
            *start = value_end;
            Some(entry)
        })
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    fn len(&self) -> usize {
        if self.is_empty() { 0 } else { self.word(0) }
    }

    fn word(&self, i: usize) -> usize {
        let bytes = &self.bytes[WORD * i..WORD * (i + 1)];
        u32::from_le_bytes(bytes.try_into().unwrap_or_default()) as usize
    }

    /// The entries as a map (None when there are none, as `ObjectMeta` keeps them).
    pub fn unpack(&self) -> Option<BTreeMap<String, String>> {
        (!self.is_empty()).then(|| {
            self.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
    }
}

impl<K: AsRef<str>, V: AsRef<str>> FromIterator<(K, V)> for PackedMap {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(entries: I) -> Self {
        let mut text = String::new();
        let mut ends = Vec::new();
        for (key, value) in entries {
            text.push_str(key.as_ref());
            ends.push(text.len() as u32);
            text.push_str(value.as_ref());
            ends.push(text.len() as u32);
        }
        if ends.is_empty() {
            return PackedMap::default();
        }
        let mut bytes = Vec::with_capacity(WORD * (1 + ends.len()) + text.len());
        bytes.extend_from_slice(&((ends.len() / 2) as u32).to_le_bytes());
        for end in ends {
            bytes.extend_from_slice(&end.to_le_bytes());
        }
        bytes.extend_from_slice(text.as_bytes());
        PackedMap {
            bytes: bytes.into_boxed_slice(),
        }
    }
}

impl fmt::Debug for PackedMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl Serialize for PackedMap {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.len()))?;
        for (k, v) in self.iter() {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

/// An object's metadata as a cache keeps it: `meta` without managedFields, labels and
/// annotations; the labels and annotations packed (the last-applied annotation dropped).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SlimMeta {
    pub meta: ObjectMeta,
    pub labels: PackedMap,
    pub annotations: PackedMap,
}

impl From<ObjectMeta> for SlimMeta {
    fn from(mut meta: ObjectMeta) -> Self {
        meta.managed_fields = None;
        let labels = meta.labels.take().into_iter().flatten().collect();
        let annotations = meta
            .annotations
            .take()
            .into_iter()
            .flatten()
            .filter(|(k, _)| k != LAST_APPLIED)
            .collect();
        SlimMeta {
            meta,
            labels,
            annotations,
        }
    }
}

impl<'de> Deserialize<'de> for SlimMeta {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        ObjectMeta::deserialize(deserializer).map(SlimMeta::from)
    }
}

impl SlimMeta {
    /// The metadata it was read from (less what was dropped).
    pub fn to_meta(&self) -> ObjectMeta {
        ObjectMeta {
            labels: self.labels.unpack(),
            annotations: self.annotations.unpack(),
            ..self.meta.clone()
        }
    }
}

impl Serialize for SlimMeta {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_meta().serialize(serializer)
    }
}

/// What converge reads of a cached child's labels and annotations, however it is cached.
pub trait Labelled {
    fn label(&self, key: &str) -> Option<&str>;
    fn annotation(&self, key: &str) -> Option<&str>;
    /// Whether the labels and annotations hold every one of `desired`'s.
    fn labels_cover(&self, desired: &ObjectMeta) -> bool {
        let mut labels = desired.labels.iter().flatten();
        let mut annotations = desired.annotations.iter().flatten();
        labels.all(|(k, v)| self.label(k) == Some(v.as_str()))
            && annotations.all(|(k, v)| self.annotation(k) == Some(v.as_str()))
    }
}

impl Labelled for SlimMeta {
    fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key)
    }
    fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations.get(key)
    }
}

impl Labelled for ObjectMeta {
    fn label(&self, key: &str) -> Option<&str> {
        self.labels.as_ref()?.get(key).map(String::as_str)
    }
    fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations.as_ref()?.get(key).map(String::as_str)
    }
}

// Objects cached whole answer from their own metadata.
crate::labelled_by_metadata!([] k8s_openapi::api::core::v1::ConfigMap);
crate::labelled_by_metadata!([] kube::core::DynamicObject);
crate::labelled_by_metadata!([] k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn holds_the_entries_of_the_map_it_was_read_from() {
        let map: BTreeMap<String, String> = [("app", "agent"), ("agent", "a"), ("empty", "")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let packed: PackedMap = map.iter().collect();
        assert_eq!(packed.get("app"), Some("agent"));
        assert_eq!(packed.get("empty"), Some(""));
        assert_eq!(packed.get("ap"), None);
        assert_eq!(
            serde_json::to_value(&packed).expect("json"),
            serde_json::to_value(&map).expect("json")
        );
        assert_eq!(packed.unpack(), Some(map));
        assert_eq!(PackedMap::default().unpack(), None);
    }

    #[test]
    fn slim_meta_packs_labels_and_annotations_and_drops_what_no_one_reads() {
        let watched = json!({"name": "a", "namespace": "ns", "resourceVersion": "7",
            "labels": {"app": "agent"},
            "annotations": {"kaos.tools/desired-hash": "h", LAST_APPLIED: "{...}"},
            "managedFields": [{"manager": "kubectl"}]});
        let slim: SlimMeta = serde_json::from_value(watched).expect("meta");
        assert_eq!(slim.meta.labels, None);
        assert_eq!(slim.meta.annotations, None);
        assert_eq!(slim.meta.managed_fields, None);
        assert_eq!(slim.meta.resource_version.as_deref(), Some("7"));
        assert_eq!(slim.label("app"), Some("agent"));
        assert_eq!(slim.annotation("kaos.tools/desired-hash"), Some("h"));
        assert_eq!(slim.annotation(LAST_APPLIED), None);
        assert_eq!(
            serde_json::to_value(&slim).expect("json"),
            json!({"name": "a", "namespace": "ns", "resourceVersion": "7",
                "labels": {"app": "agent"}, "annotations": {"kaos.tools/desired-hash": "h"}})
        );
        let desired: ObjectMeta =
            serde_json::from_value(json!({"labels": {"app": "agent"}})).expect("meta");
        assert!(slim.labels_cover(&desired));
        assert!(!slim.meta.labels_cover(&desired));
    }
}
