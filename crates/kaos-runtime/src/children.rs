//! Writing a parent's children and status without needless writes.
//!
//! A child is server-side applied with the controller's field manager and carries the hash of
//! the desired state in an annotation; while the cached child shows that hash, nothing is sent.
//! Fields other managers own (labels a user added, a sidecar another tool injected, replicas an
//! HPA sets) are left alone by server-side apply.

use std::fmt::Debug;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::podspec::stable_hash;

/// Annotation holding the hash of the desired state a child was last applied with.
pub const DESIRED_HASH_ANNOTATION: &str = "kaos.tools/desired-hash";

/// Stamps `desired` with the hash of its content and returns the hash.
pub fn stamp_desired_hash<K: Resource + Serialize>(desired: &mut K) -> String {
    desired.annotations_mut().remove(DESIRED_HASH_ANNOTATION);
    let hash = stable_hash(&*desired);
    desired
        .annotations_mut()
        .insert(DESIRED_HASH_ANNOTATION.into(), hash.clone());
    hash
}

/// Whether a cached child already has the desired state's hash.
pub fn is_current(observed: Option<&ObjectMeta>, hash: &str) -> bool {
    observed
        .and_then(|m| m.annotations.as_ref())
        .and_then(|a| a.get(DESIRED_HASH_ANNOTATION))
        .is_some_and(|h| h == hash)
}

/// Server-side applies `desired` unless `observed` (from the cache) already carries its hash.
/// Returns whether a write was made.
pub async fn apply_if_changed<K>(
    api: &Api<K>,
    field_manager: &str,
    observed: Option<&ObjectMeta>,
    mut desired: K,
) -> Result<bool, kube::Error>
where
    K: Resource + Serialize + DeserializeOwned + Clone + Debug,
{
    let hash = stamp_desired_hash(&mut desired);
    if is_current(observed, &hash) {
        return Ok(false);
    }
    let name = desired.name_any();
    api.patch(
        &name,
        &PatchParams::apply(field_manager).force(),
        &Patch::Apply(&desired),
    )
    .await?;
    Ok(true)
}

/// Whether `child` is controlled by the object with `owner_uid`.
pub fn controlled_by(child: &ObjectMeta, owner_uid: &str) -> bool {
    child
        .owner_references
        .iter()
        .flatten()
        .any(|r| r.controller == Some(true) && r.uid == owner_uid)
}

/// Deletes the cached children controlled by `owner_uid` whose names are not in `keep`.
/// Returns the names deleted; a child already gone counts as deleted.
pub async fn delete_orphans<'a, K>(
    api: &Api<K>,
    cached: impl IntoIterator<Item = &'a ObjectMeta>,
    owner_uid: &str,
    keep: &[&str],
) -> Result<Vec<String>, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let mut deleted = Vec::new();
    for child in cached {
        let name = child.name.clone().unwrap_or_default();
        if !controlled_by(child, owner_uid)
            || keep.contains(&name.as_str())
            || child.deletion_timestamp.is_some()
        {
            continue;
        }
        match api.delete(&name, &DeleteParams::background()).await {
            Ok(_) => deleted.push(name),
            Err(kube::Error::Api(s)) if s.code == 404 => deleted.push(name),
            Err(e) => return Err(e),
        }
    }
    Ok(deleted)
}

/// Server-side applies the status of `name` unless `current` already equals `desired`.
/// Fields the controller set before and no longer sets are removed. Returns whether it wrote.
pub async fn apply_status<K, S>(
    api: &Api<K>,
    field_manager: &str,
    name: &str,
    current: Option<&S>,
    desired: &S,
) -> Result<bool, kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
    S: Serialize + PartialEq,
{
    if current == Some(desired) {
        return Ok(false);
    }
    let body = json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "metadata": {"name": name},
        "status": desired,
    });
    api.patch_status(
        name,
        &PatchParams::apply(field_manager).force(),
        &Patch::Apply(body),
    )
    .await?;
    Ok(true)
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
        assert!(is_current(Some(&meta), &first));
        assert!(!is_current(Some(&meta), "other"));
        assert!(!is_current(None, &first));
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
