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

use std::fmt::{self, Debug};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Secret, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::core::DynamicObject;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::child_store::ChildStore;
use crate::children::{controlled_by, is_current, stamp_desired_hash, stamp_with};
use crate::deployment_view::DeploymentView;
use crate::drift::covers;
use crate::expectations::{Expectations, Key, Observed, Verdict};
use crate::meta_view::MetaView;
use crate::packed::Labelled;
use crate::podspec::secret_hash;
use crate::references::{self, Missing, Reference, Source};
use crate::scaling::{Replicas, ScaledChildren};
use crate::workload::http_route_resource;
use kaos_runtime::error::{ReconcileError, Step, StepExt};

/// The kinds of child a workload can have.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ChildKind {
    Deployment,
    Service,
    ConfigMap,
    Secret,
    HttpRoute,
    PersistentVolumeClaim,
    PodDisruptionBudget,
    HorizontalPodAutoscaler,
    NetworkPolicy,
}

impl ChildKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ChildKind::Deployment => "Deployment",
            ChildKind::Service => "Service",
            ChildKind::ConfigMap => "ConfigMap",
            ChildKind::Secret => "Secret",
            ChildKind::HttpRoute => "HTTPRoute",
            ChildKind::PersistentVolumeClaim => "PersistentVolumeClaim",
            ChildKind::PodDisruptionBudget => "PodDisruptionBudget",
            ChildKind::HorizontalPodAutoscaler => "HorizontalPodAutoscaler",
            ChildKind::NetworkPolicy => "NetworkPolicy",
        }
    }

    /// Whether a change of the child's status alone is none of its owner's business (the
    /// autoscaler's and disruption controller's frequent status writes wake no reconcile).
    pub fn status_is_noise(self) -> bool {
        matches!(
            self,
            ChildKind::PodDisruptionBudget | ChildKind::HorizontalPodAutoscaler
        )
    }
}

/// One desired child.
#[derive(Clone, Debug)]
pub enum Child {
    Deployment(Box<Deployment>),
    Service(Box<Service>),
    ConfigMap(Box<ConfigMap>),
    Secret(Box<Secret>),
    HttpRoute(Box<DynamicObject>),
    /// Created once and then left alone (see [`ChildResource::CREATE_ONLY`]).
    PersistentVolumeClaim(Box<PersistentVolumeClaim>),
    PodDisruptionBudget(Box<PodDisruptionBudget>),
    HorizontalPodAutoscaler(Box<HorizontalPodAutoscaler>),
    NetworkPolicy(Box<NetworkPolicy>),
}

impl Child {
    pub fn kind(&self) -> ChildKind {
        match self {
            Child::Deployment(_) => ChildKind::Deployment,
            Child::Service(_) => ChildKind::Service,
            Child::ConfigMap(_) => ChildKind::ConfigMap,
            Child::Secret(_) => ChildKind::Secret,
            Child::HttpRoute(_) => ChildKind::HttpRoute,
            Child::PersistentVolumeClaim(_) => ChildKind::PersistentVolumeClaim,
            Child::PodDisruptionBudget(_) => ChildKind::PodDisruptionBudget,
            Child::HorizontalPodAutoscaler(_) => ChildKind::HorizontalPodAutoscaler,
            Child::NetworkPolicy(_) => ChildKind::NetworkPolicy,
        }
    }
}

/// What a parent's children must be: the ones to apply, in order, and the names that must not
/// exist (a Service after `expose: false`, a ConfigMap after Proxy → Hosted, …).
#[derive(Clone, Debug, Default)]
pub struct ChildSet {
    pub apply: Vec<Child>,
    pub absent: Vec<(ChildKind, String)>,
    /// The Deployment's replicas belong to an autoscaler: they are left out of what is
    /// compared, and a write carries the live value (this initial one at creation), so the
    /// controller never changes them.
    pub autoscaled_replicas: Option<i32>,
}

/// The children every kind's workload has, as its builder produces them.
#[derive(Clone, Debug)]
pub struct WorkloadChildren {
    /// Without replicas when they are autoscaled (see [`ChildSet::autoscaled_replicas`]).
    pub deployment: Deployment,
    /// None when the workload must not be reachable (an Agent with `expose: false`).
    pub service: Option<Service>,
    /// None when the gateway is disabled.
    pub http_route: Option<DynamicObject>,
    /// How many pods: fixed, or an autoscaler's (see `scaling`).
    pub replicas: Replicas,
    /// None when the workload is not autoscaled.
    pub autoscaler: Option<HorizontalPodAutoscaler>,
    /// None when at most one pod can run (or the resource turned it off).
    pub disruption_budget: Option<PodDisruptionBudget>,
    /// None when network policies are off for the workload's namespace.
    pub network_policy: Option<NetworkPolicy>,
}

impl WorkloadChildren {
    /// A Deployment, Service and HTTPRoute with fixed replicas and no other child.
    pub fn plain(
        deployment: Deployment,
        service: Option<Service>,
        http_route: Option<DynamicObject>,
    ) -> Self {
        let replicas = Replicas::Fixed(deployment.spec.as_ref().and_then(|s| s.replicas));
        WorkloadChildren {
            deployment,
            service,
            http_route,
            replicas,
            autoscaler: None,
            disruption_budget: None,
            network_policy: None,
        }
    }

    /// With the autoscaler, disruption budget and replicas `scaled` asks for.
    pub fn scaled(self, scaled: ScaledChildren) -> Self {
        WorkloadChildren {
            replicas: scaled.replicas,
            autoscaler: scaled.autoscaler,
            disruption_budget: scaled.disruption_budget,
            ..self
        }
    }

    /// With the NetworkPolicy of the workload (None: it must not have one).
    pub fn fenced(self, network_policy: Option<NetworkPolicy>) -> Self {
        WorkloadChildren {
            network_policy,
            ..self
        }
    }

    /// The set to converge to: the network policy first (pods start fenced), the Deployment,
    /// then the Service, HTTPRoute, autoscaler and disruption budget, each of which shares the
    /// Deployment's name and, when not wanted, must be absent.
    pub fn into_set(self) -> ChildSet {
        let name = self.deployment.name_any();
        let mut set = ChildSet::default();
        let wanted = |child: Option<Child>, kind: ChildKind, set: &mut ChildSet| match child {
            Some(child) => set.apply.push(child),
            None => set.absent.push((kind, name.clone())),
        };
        wanted(
            self.network_policy
                .map(|p| Child::NetworkPolicy(Box::new(p))),
            ChildKind::NetworkPolicy,
            &mut set,
        );
        set.apply.push(Child::Deployment(Box::new(self.deployment)));
        wanted(
            self.service.map(|s| Child::Service(Box::new(s))),
            ChildKind::Service,
            &mut set,
        );
        wanted(
            self.http_route.map(|r| Child::HttpRoute(Box::new(r))),
            ChildKind::HttpRoute,
            &mut set,
        );
        wanted(
            self.autoscaler
                .map(|a| Child::HorizontalPodAutoscaler(Box::new(a))),
            ChildKind::HorizontalPodAutoscaler,
            &mut set,
        );
        wanted(
            self.disruption_budget
                .map(|b| Child::PodDisruptionBudget(Box::new(b))),
            ChildKind::PodDisruptionBudget,
            &mut set,
        );
        if let Replicas::Autoscaled { initial } = self.replicas {
            set.autoscaled_replicas = Some(initial);
        }
        set
    }
}

/// A child's name is taken by an object this parent does not control.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    pub kind: ChildKind,
    pub namespace: String,
    pub name: String,
    /// `Kind/name` of its controller, if it has one.
    pub owner: Option<String>,
}

impl fmt::Display for Conflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let owner = match &self.owner {
            Some(owner) => format!("it is controlled by {owner}"),
            None => "it has no controller".to_string(),
        };
        write!(
            f,
            "{} {}/{} already exists and is not owned by this resource ({owner}); \
             delete or rename it and the resource recovers by itself",
            self.kind.as_str(),
            self.namespace,
            self.name
        )
    }
}

/// The `Ready` reason of a parent whose child name is taken by an object it does not own.
pub const CHILD_CONFLICT: &str = "ChildConflict";

/// What converging did.
#[derive(Clone, Debug, Default)]
pub struct Converged {
    /// A line per write, for the Normal event.
    pub changes: Vec<String>,
    pub conflicts: Vec<Conflict>,
    /// Secrets and ConfigMaps (or keys) the Deployment's pods read that do not exist: the
    /// Deployment is written all the same (its pods start once they appear).
    pub missing: Vec<Missing>,
}

impl Converged {
    /// For the status: `(ChildConflict, message)` when a child could not be written, else the
    /// first missing reference's reason (`SecretNotFound`, …) and every one's message.
    pub fn problem(&self) -> Option<(&'static str, String)> {
        if !self.conflicts.is_empty() {
            let messages: Vec<String> = self.conflicts.iter().map(|c| c.to_string()).collect();
            return Some((CHILD_CONFLICT, messages.join("; ")));
        }
        let first = self.missing.first()?;
        let messages: Vec<String> = self.missing.iter().map(|m| m.to_string()).collect();
        Some((first.reason(), messages.join("; ")))
    }
}

/// The slim caches of a controller's children and the memory of its own writes.
#[derive(Clone)]
pub struct Children {
    pub deployments: ChildStore<DeploymentView>,
    /// Metadata only: converge reads nothing else of a Service.
    pub services: ChildStore<MetaView<Service>>,
    /// None for kinds without ConfigMaps.
    pub config_maps: Option<ChildStore<ConfigMap>>,
    /// Metadata only, so no secret value is ever cached; None for kinds without Secrets.
    pub secrets: Option<ChildStore<MetaView<Secret>>>,
    /// None when the Gateway API is neither enabled nor installed.
    pub routes: Option<ChildStore<DynamicObject>>,
    /// Metadata only; None for kinds without volumes.
    pub claims: Option<ChildStore<MetaView<PersistentVolumeClaim>>>,
    /// Metadata only; None for kinds without disruption budgets.
    pub disruption_budgets: Option<ChildStore<MetaView<PodDisruptionBudget>>>,
    /// Whole (small; their status changes wake nothing); None for kinds never autoscaled.
    pub autoscalers: Option<ChildStore<HorizontalPodAutoscaler>>,
    /// Metadata only; None when network policies are off.
    pub network_policies: Option<ChildStore<MetaView<NetworkPolicy>>>,
    pub expectations: Arc<Expectations>,
}

/// The parent a converge works for.
pub struct Parent<'a> {
    pub namespace: &'a str,
    pub uid: &'a str,
    pub field_manager: &'a str,
    pub client: &'a kube::Client,
}

impl Children {
    pub fn deployment(&self, namespace: &str, name: &str) -> Option<Arc<DeploymentView>> {
        self.deployments.get(namespace, name)
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
        let keep = |_: &mut Service, _: Option<&MetaView<Service>>| {};
        for child in set.apply {
            let kind = child.kind();
            let outcome = match child {
                Child::Deployment(d) => {
                    converged.missing = missing_references(parent, &d, &own).await;
                    // An autoscaler's replicas: the live value (at creation, the initial one).
                    let carry = |d: &mut Deployment, live: Option<&DeploymentView>| {
                        if let (Some(initial), Some(spec)) = (autoscaled, d.spec.as_mut()) {
                            spec.replicas = Some(live.map_or(initial, DeploymentView::replicas));
                        }
                    };
                    self.apply_with(parent, kind, &self.deployments, *d, carry)
                        .await?
                }
                Child::Service(s) => {
                    self.apply_with(parent, kind, &self.services, *s, keep)
                        .await?
                }
                Child::ConfigMap(c) => match &self.config_maps {
                    Some(store) => self.apply(parent, kind, store, *c).await?,
                    None => Applied::Unchanged,
                },
                Child::Secret(s) => match &self.secrets {
                    Some(store) => self.apply(parent, kind, store, *s).await?,
                    None => Applied::Unchanged,
                },
                Child::HttpRoute(r) => match &self.routes {
                    Some(store) => self.apply(parent, kind, store, *r).await?,
                    None => Applied::Unchanged,
                },
                Child::PersistentVolumeClaim(c) => match &self.claims {
                    Some(store) => self.apply(parent, kind, store, *c).await?,
                    None => Applied::Unchanged,
                },
                Child::PodDisruptionBudget(b) => match &self.disruption_budgets {
                    Some(store) => self.apply(parent, kind, store, *b).await?,
                    None => Applied::Unchanged,
                },
                Child::HorizontalPodAutoscaler(a) => match &self.autoscalers {
                    Some(store) => self.apply(parent, kind, store, *a).await?,
                    None => Applied::Unchanged,
                },
                Child::NetworkPolicy(p) => match &self.network_policies {
                    Some(store) => self.apply(parent, kind, store, *p).await?,
                    None => Applied::Unchanged,
                },
            };
            match outcome {
                Applied::Unchanged => {}
                Applied::Written(name) => converged
                    .changes
                    .push(format!("applied {} {name}", kind.as_str())),
                Applied::Conflict(conflict) => converged.conflicts.push(conflict),
            }
        }
        for (kind, name) in set.absent {
            let deleted = match kind {
                ChildKind::Deployment => {
                    self.delete::<Deployment>(parent, kind, &self.deployments, &name)
                        .await?
                }
                ChildKind::Service => {
                    self.delete::<Service>(parent, kind, &self.services, &name)
                        .await?
                }
                ChildKind::ConfigMap => match &self.config_maps {
                    Some(store) => self.delete::<ConfigMap>(parent, kind, store, &name).await?,
                    None => false,
                },
                ChildKind::Secret => match &self.secrets {
                    Some(store) => self.delete::<Secret>(parent, kind, store, &name).await?,
                    None => false,
                },
                ChildKind::HttpRoute => match &self.routes {
                    Some(store) => {
                        self.delete::<DynamicObject>(parent, kind, store, &name)
                            .await?
                    }
                    None => false,
                },
                ChildKind::PersistentVolumeClaim => match &self.claims {
                    Some(store) => {
                        self.delete::<PersistentVolumeClaim>(parent, kind, store, &name)
                            .await?
                    }
                    None => false,
                },
                ChildKind::PodDisruptionBudget => match &self.disruption_budgets {
                    Some(store) => {
                        self.delete::<PodDisruptionBudget>(parent, kind, store, &name)
                            .await?
                    }
                    None => false,
                },
                ChildKind::HorizontalPodAutoscaler => match &self.autoscalers {
                    Some(store) => {
                        self.delete::<HorizontalPodAutoscaler>(parent, kind, store, &name)
                            .await?
                    }
                    None => false,
                },
                ChildKind::NetworkPolicy => match &self.network_policies {
                    Some(store) => {
                        self.delete::<NetworkPolicy>(parent, kind, store, &name)
                            .await?
                    }
                    None => false,
                },
            };
            if deleted {
                converged
                    .changes
                    .push(format!("deleted {} {name}", kind.as_str()));
            }
        }
        Ok(converged)
    }

    async fn apply<K>(
        &self,
        parent: &Parent<'_>,
        kind: ChildKind,
        store: &ChildStore<K::Cached>,
        desired: K,
    ) -> Result<Applied, ReconcileError>
    where
        K: ChildResource,
    {
        self.apply_with(parent, kind, store, desired, |_, _| {})
            .await
    }

    /// [`Self::apply`], with `carry` filling in, only when it is written, what the desired
    /// object leaves out of the comparison (it sees the cached child, if any).
    async fn apply_with<K>(
        &self,
        parent: &Parent<'_>,
        kind: ChildKind,
        store: &ChildStore<K::Cached>,
        mut desired: K,
        carry: impl FnOnce(&mut K, Option<&K::Cached>),
    ) -> Result<Applied, ReconcileError>
    where
        K: ChildResource,
    {
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
        if let Some(observed) = &observed
            && self
                .is_covered(&api, &key, observed.as_ref(), &desired, &hash)
                .await
                .step(Step::ReadChild, target)?
        {
            return Ok(Applied::Unchanged);
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
    async fn is_covered<K: ChildResource>(
        &self,
        api: &Api<K>,
        key: &Key,
        observed: &K::Cached,
        desired: &K,
        hash: &str,
    ) -> Result<bool, kube::Error> {
        if !is_current(observed, hash) {
            return Ok(false);
        }
        if K::CACHED_WHOLE {
            return Ok(covers_json(observed, desired));
        }
        let unlabelled = ObjectMeta {
            labels: None,
            annotations: None,
            ..desired.meta().clone()
        };
        if !observed.labels_cover(desired.meta()) || !covers_json(observed.meta(), &unlabelled) {
            return Ok(false);
        }
        let version = K::content_version(observed.meta());
        if self
            .expectations
            .unchanged_since(key, hash, version.as_deref())
        {
            return Ok(true);
        }
        // The cache keeps no spec and nothing this process saw vouches for this version.
        let Some(whole) = api.get_opt(&key.2).await? else {
            return Ok(false);
        };
        let covered = is_current(whole.meta(), hash) && covers_json(&whole, desired);
        if covered {
            self.expectations.confirmed(
                key.clone(),
                hash.to_string(),
                whole.meta().resource_version.clone(),
                K::content_version(whole.meta()),
            );
        }
        Ok(covered)
    }

    async fn delete<K>(
        &self,
        parent: &Parent<'_>,
        kind: ChildKind,
        store: &ChildStore<K::Cached>,
        name: &str,
    ) -> Result<bool, ReconcileError>
    where
        K: ChildResource,
    {
        let namespace = parent.namespace;
        let Some(observed) = store.get(namespace, name) else {
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
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(true),
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
        .filter_map(|child| match child {
            Child::Secret(s) => Some((Source::Secret, s.name_any())),
            Child::ConfigMap(c) => Some((Source::ConfigMap, c.name_any())),
            _ => None,
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

/// What converge needs of a child type: its API, what its cache keeps and how it is compared.
pub trait ChildResource:
    Resource<DynamicType: Eq + std::hash::Hash + Clone>
    + Clone
    + Serialize
    + DeserializeOwned
    + Debug
    + Send
    + Sync
    + 'static
{
    /// What the cache keeps of this kind.
    type Cached: Resource<DynamicType = Self::DynamicType>
        + Labelled
        + Clone
        + Serialize
        + Debug
        + Send
        + Sync
        + 'static;
    /// Whether the cache keeps the whole object, so drift is read from it (else only its
    /// metadata, and its spec's drift from its content version).
    const CACHED_WHOLE: bool;
    /// Whether an existing child is left as it is: written once, never updated (a claim's
    /// size cannot shrink and may not grow on its storage class; the data is the user's).
    const CREATE_ONLY: bool = false;
    /// What moves whenever the object's content changes: the resourceVersion, unless the kind
    /// has a generation (which status writes leave alone).
    fn content_version(meta: &ObjectMeta) -> Option<String> {
        meta.resource_version.clone()
    }
    /// Stamps the desired object with the hash of its content (see `children`).
    fn stamp(desired: &mut Self) -> String {
        stamp_desired_hash(desired)
    }
    fn api(client: &kube::Client, namespace: &str) -> Api<Self>;
}

impl ChildResource for Deployment {
    type Cached = DeploymentView;
    const CACHED_WHOLE: bool = false;
    fn content_version(meta: &ObjectMeta) -> Option<String> {
        meta.generation.map(|g| g.to_string())
    }
    fn api(client: &kube::Client, namespace: &str) -> Api<Self> {
        Api::namespaced(client.clone(), namespace)
    }
}

impl ChildResource for Service {
    type Cached = MetaView<Service>;
    const CACHED_WHOLE: bool = false;
    fn api(client: &kube::Client, namespace: &str) -> Api<Self> {
        Api::namespaced(client.clone(), namespace)
    }
}

impl ChildResource for ConfigMap {
    type Cached = ConfigMap;
    const CACHED_WHOLE: bool = true;
    fn api(client: &kube::Client, namespace: &str) -> Api<Self> {
        Api::namespaced(client.clone(), namespace)
    }
}

impl ChildResource for Secret {
    type Cached = MetaView<Secret>;
    const CACHED_WHOLE: bool = false;
    /// One-way: the stamp is on the object, its content is a secret.
    fn stamp(desired: &mut Self) -> String {
        stamp_with(desired, secret_hash)
    }
    fn api(client: &kube::Client, namespace: &str) -> Api<Self> {
        Api::namespaced(client.clone(), namespace)
    }
}

impl ChildResource for DynamicObject {
    type Cached = DynamicObject;
    const CACHED_WHOLE: bool = true;
    fn api(client: &kube::Client, namespace: &str) -> Api<Self> {
        Api::namespaced_with(client.clone(), namespace, &http_route_resource())
    }
}

impl ChildResource for PersistentVolumeClaim {
    type Cached = MetaView<PersistentVolumeClaim>;
    const CACHED_WHOLE: bool = false;
    const CREATE_ONLY: bool = true;
    fn api(client: &kube::Client, namespace: &str) -> Api<Self> {
        Api::namespaced(client.clone(), namespace)
    }
}

impl ChildResource for PodDisruptionBudget {
    type Cached = MetaView<PodDisruptionBudget>;
    const CACHED_WHOLE: bool = false;
    /// Its spec moves the generation; the disruption controller's status writes do not.
    fn content_version(meta: &ObjectMeta) -> Option<String> {
        meta.generation.map(|g| g.to_string())
    }
    fn api(client: &kube::Client, namespace: &str) -> Api<Self> {
        Api::namespaced(client.clone(), namespace)
    }
}

impl ChildResource for HorizontalPodAutoscaler {
    type Cached = HorizontalPodAutoscaler;
    const CACHED_WHOLE: bool = true;
    fn api(client: &kube::Client, namespace: &str) -> Api<Self> {
        Api::namespaced(client.clone(), namespace)
    }
}

impl ChildResource for NetworkPolicy {
    type Cached = MetaView<NetworkPolicy>;
    const CACHED_WHOLE: bool = false;
    fn api(client: &kube::Client, namespace: &str) -> Api<Self> {
        Api::namespaced(client.clone(), namespace)
    }
}
