//! Whose a child is and what it was applied with: the hash of the desired state it was applied with, and whether a
//! parent controls it. Fields other managers own (labels a user added, a sidecar another tool
//! injected, replicas an HPA sets) are left alone by server-side apply.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Resource, ResourceExt};
use serde::Serialize;

use crate::cache::packed::Labelled;
use crate::hash::stable_hash;

/// Annotation holding the hash of the desired state a child was last applied with.
pub const DESIRED_HASH_ANNOTATION: &str = "kaos.tools/desired-hash";

/// Stamps `desired` with the hash of its content and returns the hash.
pub fn stamp_desired_hash<K: Resource + Serialize>(desired: &mut K) -> String {
    stamp_with(desired, stable_hash)
}

/// Stamps `desired` with a hash computed by `hash` (a one-way one for Secrets).
pub fn stamp_with<K: Resource + Serialize>(desired: &mut K, hash: fn(&K) -> String) -> String {
    desired.annotations_mut().remove(DESIRED_HASH_ANNOTATION);
    let hash = hash(&*desired);
    desired
        .annotations_mut()
        .insert(DESIRED_HASH_ANNOTATION.into(), hash.clone());
    hash
}

/// Whether a child already has the desired state's hash.
pub fn is_current(observed: &impl Labelled, hash: &str) -> bool {
    observed.annotation(DESIRED_HASH_ANNOTATION) == Some(hash)
}

/// Whether `child` is controlled by the object with `owner_uid`.
pub fn controlled_by(child: &ObjectMeta, owner_uid: &str) -> bool {
    child
        .owner_references
        .iter()
        .flatten()
        .any(|r| r.controller == Some(true) && r.uid == owner_uid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    #[test]
    fn hash_ignores_a_previous_stamp() {
        let mut a = ConfigMap {
            data: Some([("k".into(), "v".into())].into()),
            ..Default::default()
        };
        let first = stamp_desired_hash(&mut a);
        let second = stamp_desired_hash(&mut a);
        assert_eq!(first, second, "stamping twice gives the same hash");
        let meta = ObjectMeta {
            annotations: Some([(DESIRED_HASH_ANNOTATION.into(), first.clone())].into()),
            ..Default::default()
        };
        assert!(is_current(&meta, &first));
        assert!(!is_current(&meta, "other"));
        assert!(!is_current(&ObjectMeta::default(), &first));
    }

    #[test]
    fn only_controller_references_count() {
        let reference = |controller| OwnerReference {
            uid: "u1".into(),
            controller,
            ..Default::default()
        };
        let child = |r| ObjectMeta {
            owner_references: Some(vec![r]),
            ..Default::default()
        };
        assert!(controlled_by(&child(reference(Some(true))), "u1"));
        assert!(!controlled_by(&child(reference(Some(false))), "u1"));
        assert!(!controlled_by(&child(reference(Some(true))), "u2"));
    }
}
