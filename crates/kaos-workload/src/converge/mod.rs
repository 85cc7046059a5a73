//! Making a parent's children what its builder wants: the one write path of every controller.
//!
//! For each desired child: an object of that name we do not control is a conflict (never
//! overwritten, never adopted); an object that covers the desired one, or our own write the
//! cache has not shown yet, is left alone; anything else is server-side applied. Children the
//! builder lists as absent are deleted by name if we control them. Lookups are by name in the
//! slim caches: the work is proportional to the parent's children, never to the cache size.
//!
//! Deployments are cached without their pod template (`DeploymentView`) and Services as
//! metadata only: their metadata is compared as above, the rest by content version (a
//! Deployment's generation, a Service's resourceVersion). A version this process saw holding
//! the desired content means nothing changed; any other (a hand edit, or a restart that forgot
//! what was seen) is settled by reading the object once.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde_json::{Value, json};

use crate::cache::deployment_view::DeploymentView;
use crate::cache::packed::Labelled;
use crate::converge::drift::{covers, holds_whole};
use crate::converge::expectations::{Key, Observed, Verdict};
use crate::converge::ownership::{controlled_by, is_current};
use crate::desired::{ChildKind, ChildSet};
use kaos_runtime::error::{ReconcileError, Step, StepExt};
use references::{Missing, Reference, Source};

mod child_kinds;
mod child_resource;
pub mod drift;
pub mod expectations;
mod outcome;
pub mod ownership;
pub mod references;

pub use child_kinds::{ChildKinds, ChildRow, Children, OpenCache};
pub use child_resource::ChildResource;
pub use outcome::{CHILD_CONFLICT, Conflict, Converged};

/// The parent a converge works for.
pub struct Parent<'a> {
    pub namespace: &'a str,
    pub uid: &'a str,
    pub field_manager: &'a str,
    pub client: &'a kube::Client,
}

impl Children {
    pub fn deployment(&self, namespace: &str, name: &str) -> Option<Arc<DeploymentView>> {
        self.deployments.as_ref()?.get(namespace, name)
    }

    /// Whether the cache shows the Deployment `name` as this process last wrote it (or it
    /// wrote none): right after a write, the cached one is the rollout before it.
    pub fn deployment_shown(&self, namespace: &str, name: &str) -> bool {
        let observed = self.deployment(namespace, name);
        let key = (
            <Deployment as crate::desired::ChildType>::KIND.as_str(),
            namespace.to_string(),
            name.to_string(),
        );
        let seen = observed.as_ref().map(|d| Observed {
            resource_version: d.metadata.meta.resource_version.as_deref(),
        });
        !self.expectations.pending(&key, seen)
    }

    /// Applies what differs, reports conflicts, deletes what must be absent.
    pub async fn converge(
        &self,
        parent: &Parent<'_>,
        set: ChildSet,
    ) -> Result<Converged, ReconcileError> {
        let mut converged = Converged::default();
        let own = own_sources(&set);
        let autoscaled = set.autoscaled_replicas;
        for child in set.apply {
            let kind = child.kind();
            if let Some(deployment) = child.get::<Deployment>() {
                converged.missing = missing_references(parent, deployment, &own).await;
            }
            let outcome = self.apply_child(parent, child, autoscaled).await?;
            match outcome {
                Applied::Unchanged => {}
                Applied::Written(name) => converged
                    .changes
                    .push(format!("applied {} {name}", kind.as_str())),
                Applied::Conflict(conflict) => converged.conflicts.push(conflict),
            }
        }
        for (kind, name) in set.absent {
            let deleted = self.delete_child(parent, kind, &name).await?;
            if deleted {
                converged
                    .changes
                    .push(format!("deleted {} {name}", kind.as_str()));
            }
        }
        Ok(converged)
    }

    /// Applies `desired` unless covered, with `carry` filling in, only when it is written, what
    /// the desired object leaves out of the comparison (it sees the cached child, if any). A
    /// kind the controller keeps no cache of is not written.
    async fn apply_with<K>(
        &self,
        parent: &Parent<'_>,
        mut desired: K,
        carry: impl FnOnce(&mut K, Option<&K::Cached>),
    ) -> Result<Applied, ReconcileError>
    where
        K: ChildRow,
    {
        let Some(store) = K::store(self) else {
            return Ok(Applied::Unchanged);
        };
        let kind = K::KIND;
        let hash = K::stamp(&mut desired);
        let name = desired.name_any();
        let namespace = parent.namespace;
        let key = (kind.as_str(), namespace.to_string(), name.clone());
        let observed = store.get(namespace, &name);
        if let Some(observed) = &observed
            && !controlled_by(observed.meta(), parent.uid)
        {
            return Ok(Applied::Conflict(conflict(
                kind,
                namespace,
                observed.meta(),
            )));
        }
        if K::CREATE_ONLY && observed.is_some() {
            return Ok(Applied::Unchanged);
        }
        let seen = observed.as_ref().map(|o| Observed {
            resource_version: o.meta().resource_version.as_deref(),
        });
        match self.expectations.verdict(&key, &hash, seen) {
            Verdict::Pending | Verdict::Written => return Ok(Applied::Unchanged),
            Verdict::Unknown => {}
        }
        let api = K::api(parent.client, namespace);
        let target = || format!("{} {namespace}/{name}", kind.as_str());
        if let Some(observed) = &observed {
            match self
                .coverage(&api, &key, observed.as_ref(), &desired, &hash)
                .await
                .step(Step::ReadChild, target)?
            {
                Coverage::Covered => return Ok(Applied::Unchanged),
                Coverage::Drifted(Some(whole)) => {
                    let replaced =
                        replace_owned_whole(&api, parent.field_manager, &whole, &desired)
                            .await
                            .step(Step::ApplyChild, target)?;
                    // That write may have been all the drift: then it is the one write.
                    if let Some(patched) = replaced
                        && is_current(patched.meta(), &hash)
                        && covers_json(&patched, &desired)
                    {
                        self.expectations.wrote(
                            key,
                            hash,
                            observed.meta().resource_version.as_deref(),
                            patched.meta().resource_version.clone(),
                            K::content_version(patched.meta()),
                        );
                        return Ok(Applied::Written(name));
                    }
                }
                Coverage::Drifted(None) => {}
            }
        }
        // What the server held before the write, as far as this process knows: the cached
        // object, or the one read just below.
        let mut before_write = observed.as_ref().map(|o| version_of(o.meta()));
        if observed.is_none() {
            // Not in our (label-selected) cache: an object of that name may still exist.
            if let Some(existing) = api.get_opt(&name).await.step(Step::ReadChild, target)? {
                before_write = Some(version_of(existing.meta()));
                if !controlled_by(existing.meta(), parent.uid) {
                    return Ok(Applied::Conflict(conflict(
                        kind,
                        namespace,
                        existing.meta(),
                    )));
                }
                if K::CREATE_ONLY {
                    return Ok(Applied::Unchanged);
                }
            }
        }
        carry(&mut desired, observed.as_deref());
        let written = api
            .patch(
                &name,
                &PatchParams::apply(parent.field_manager).force(),
                &Patch::Apply(&desired),
            )
            .await
            .step(Step::ApplyChild, target)?;
        // A write that changed nothing answers with the object as the server holds it, whose
        // version may be another writer's (the deployment controller's status) that our watch
        // has not shown yet: taken as the echo of our write, its event would wake no one. Only
        // a write that moved the object (created it, or for kinds with a generation, changed
        // its spec) has an echo of its own.
        let moved = before_write.is_none_or(|(version, generation)| {
            written.meta().resource_version != version
                && (generation.is_none() || written.meta().generation != generation)
        });
        self.expectations.wrote(
            key,
            hash,
            observed
                .as_ref()
                .and_then(|o| o.meta().resource_version.as_deref()),
            written.meta().resource_version.clone().filter(|_| moved),
            K::content_version(written.meta()),
        );
        Ok(Applied::Written(name))
    }

    /// Whether the cached child carries the desired hash and still holds every desired field (a
    /// hand edit or another tool's change of one of our fields is drift, and is reverted).
    async fn coverage<K: ChildResource>(
        &self,
        api: &Api<K>,
        key: &Key,
        observed: &K::Cached,
        desired: &K,
        hash: &str,
    ) -> Result<Coverage<K>, kube::Error> {
        if !is_current(observed, hash) {
            return Ok(Coverage::Drifted(None));
        }
        if K::CACHED_WHOLE {
            return Ok(Coverage::when(covers_json(observed, desired)));
        }
        let unlabelled = ObjectMeta {
            labels: None,
            annotations: None,
            ..desired.meta().clone()
        };
        if !observed.labels_cover(desired.meta()) || !covers_json(observed.meta(), &unlabelled) {
            return Ok(Coverage::Drifted(None));
        }
        let version = K::content_version(observed.meta());
        if self
            .expectations
            .unchanged_since(key, hash, version.as_deref())
        {
            return Ok(Coverage::Covered);
        }
        // The cache keeps no spec and nothing this process saw vouches for this version.
        let Some(whole) = api.get_opt(&key.2).await? else {
            return Ok(Coverage::Drifted(None));
        };
        let covered = is_current(whole.meta(), hash)
            && covers_json(&whole, desired)
            && holds_owned_whole(&whole, desired);
        if !covered {
            return Ok(Coverage::Drifted(Some(whole)));
        }
        self.expectations.confirmed(
            key.clone(),
            hash.to_string(),
            whole.meta().resource_version.clone(),
            K::content_version(whole.meta()),
        );
        Ok(Coverage::Covered)
    }

    /// Deletes the child if we control it; a kind the controller keeps no cache of has none.
    async fn delete<K>(&self, parent: &Parent<'_>, name: &str) -> Result<bool, ReconcileError>
    where
        K: ChildRow,
    {
        let kind = K::KIND;
        let namespace = parent.namespace;
        let Some(observed) = K::store(self).and_then(|store| store.get(namespace, name)) else {
            return Ok(false);
        };
        if !controlled_by(observed.meta(), parent.uid)
            || observed.meta().deletion_timestamp.is_some()
        {
            return Ok(false);
        }
        self.expectations
            .forget(&(kind.as_str(), namespace.to_string(), name.to_string()));
        match K::api(parent.client, namespace)
            .delete(name, &DeleteParams::background())
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.is_not_found() => Ok(true),
            Err(e) => Err(ReconcileError::new(
                Step::DeleteOrphan,
                format!("{} {namespace}/{name}", kind.as_str()),
                e,
            )),
        }
    }

    /// Forgets the writes for a parent's children (the parent is gone).
    pub fn forget(&self, namespace: &str, names: &[(ChildKind, String)]) {
        for (kind, name) in names {
            self.expectations
                .forget(&(kind.as_str(), namespace.to_string(), name.clone()));
        }
    }
}

/// The Secrets and ConfigMaps the set itself writes: the pods' references to them need no check.
fn own_sources(set: &ChildSet) -> Vec<(Source, String)> {
    set.apply
        .iter()
        .filter_map(|child| {
            let secret = child
                .get::<Secret>()
                .map(|s| (Source::Secret, s.name_any()));
            secret.or_else(|| {
                let config_map = child.get::<ConfigMap>();
                config_map.map(|c| (Source::ConfigMap, c.name_any()))
            })
        })
        .collect()
}

/// What the Deployment's pods read and the namespace does not hold (no read at all when the
/// pods read nothing but the set's own objects).
async fn missing_references(
    parent: &Parent<'_>,
    deployment: &Deployment,
    own: &[(Source, String)],
) -> Vec<Missing> {
    let Some(pod) = deployment
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
    else {
        return Vec::new();
    };
    let required: Vec<Reference> = references::required(pod)
        .into_iter()
        .filter(|r| !own.iter().any(|(s, n)| (*s, n) == (r.source, &r.name)))
        .collect();
    if required.is_empty() {
        return Vec::new();
    }
    references::missing(parent.client, parent.namespace, required).await
}

/// What a child holds against the desired one.
enum Coverage<K> {
    Covered,
    /// Not what is desired; with the whole object when it was read.
    Drifted(Option<K>),
}

impl<K> Coverage<K> {
    fn when(covered: bool) -> Self {
        if covered {
            Self::Covered
        } else {
            Self::Drifted(None)
        }
    }
}

/// Whether `observed` holds nothing but the desired value in the fields its kind owns whole.
fn holds_owned_whole<K: ChildResource>(observed: &K, desired: &K) -> bool {
    K::OWNED_WHOLE.is_empty()
        || match (
            serde_json::to_value(observed),
            serde_json::to_value(desired),
        ) {
            (Ok(o), Ok(d)) => holds_whole(&o, &d, K::OWNED_WHOLE),
            _ => false,
        }
}

/// Puts the desired value in each field its kind owns whole that holds more or other (what
/// another manager added there would survive a server-side apply), and returns the object as
/// the write left it (None when there was nothing to replace). A JSON patch tested against the
/// version read: an object changed since makes it fail with a conflict, and the retry reads it
/// again.
async fn replace_owned_whole<K: ChildResource>(
    api: &Api<K>,
    field_manager: &str,
    observed: &K,
    desired: &K,
) -> Result<Option<K>, kube::Error> {
    if holds_owned_whole(observed, desired) {
        return Ok(None);
    }
    let desired = serde_json::to_value(desired).unwrap_or_default();
    let mut operations = vec![json!({
        "op": "test",
        "path": "/metadata/resourceVersion",
        "value": observed.meta().resource_version,
    })];
    operations.extend(K::OWNED_WHOLE.iter().filter_map(|pointer| {
        let value = desired.pointer(pointer).filter(|v| !v.is_null())?;
        Some(json!({"op": "add", "path": pointer, "value": value}))
    }));
    let patch: json_patch::Patch =
        serde_json::from_value(Value::Array(operations)).map_err(kube::Error::SerdeError)?;
    let params = PatchParams {
        field_manager: Some(field_manager.to_string()),
        ..PatchParams::default()
    };
    api.patch(&observed.name_any(), &params, &Patch::Json::<()>(patch))
        .await
        .map(Some)
}

enum Applied {
    Unchanged,
    Written(String),
    Conflict(Conflict),
}

/// Whether `observed`'s JSON holds every field of `desired`'s.
fn covers_json<O: Serialize, D: Serialize>(observed: &O, desired: &D) -> bool {
    match (
        serde_json::to_value(observed),
        serde_json::to_value(desired),
    ) {
        (Ok(o), Ok(d)) => covers(&o, &d),
        _ => false,
    }
}

/// The resourceVersion and generation of an object.
fn version_of(meta: &ObjectMeta) -> (Option<String>, Option<i64>) {
    (meta.resource_version.clone(), meta.generation)
}

fn conflict(kind: ChildKind, namespace: &str, meta: &ObjectMeta) -> Conflict {
    let owner = meta
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
        .map(|r| format!("{}/{}", r.kind, r.name));
    Conflict {
        kind,
        namespace: namespace.to_string(),
        name: meta.name.clone().unwrap_or_default(),
        owner,
    }
}
