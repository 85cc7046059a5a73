//! The skeleton every workload controller shares, so each kind's reconcile reads "load
//! dependencies, build, converge, status":
//!
//! - [`wire`] builds the kube-runtime Controller from slim caches: the primary triggers only on
//!   spec changes and deletion, children on any change (drift, rollout, deletion), with a short
//!   debounce that merges bursts;
//! - [`Core::reconcile`] runs one reconcile as the leader, once the caches have synced, with the
//!   finalizer added in the same pass and removed on deletion;
//! - the work queue's metrics (`workqueue_*`, [`crate::workqueue`]) are observed around the
//!   Controller: every trigger stream counts its objects in, a reconcile takes them out;
//! - [`Core::converge`] writes the children ([`crate::converge`]), [`Core::write_status`] the
//!   status, each only when it differs from what the cache shows or this process just wrote.

use std::collections::HashMap;
use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::deployment_view::DeploymentView;
use futures::future::BoxFuture;
use futures::{FutureExt, Stream, StreamExt, TryStreamExt};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Secret, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{self, Action};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{Controller, watcher};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::Runtime;
use crate::backoff::Backoff;
use crate::child_store::{ChildStore, child_store};
use crate::converge::{ChildKind, ChildSet, Children, Converged, Parent};
use crate::error::{ReconcileError, Step, StepExt};
use crate::events::Events;
use crate::expectations::{Expectations, Observed, Verdict};
use crate::meta_view::MetaView;
use crate::podspec::stable_hash;
use crate::stores;
use crate::triggers::PrimaryChanges;
use crate::workload::http_route_resource;

/// How long a parent in conflict with an object it does not own waits before looking again
/// (the foreign object is outside our caches, so its deletion sends no event).
pub const CONFLICT_RECHECK: Duration = Duration::from_secs(10);

/// How often a parent whose pods read a missing Secret or ConfigMap looks again: from 1 s,
/// doubling to once a minute (those objects are outside our caches, so their creation sends no
/// event; reads only, never a write, while it waits).
fn reference_rechecks() -> Backoff {
    Backoff::new(Duration::from_secs(1), Duration::from_secs(60))
}

/// What a primary kind needs to be reconciled by the skeleton.
pub trait Primary:
    Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
    + Clone
    + DeserializeOwned
    + Debug
    + Send
    + Sync
    + 'static
{
}

impl<K> Primary for K where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static
{
}

/// Which optional children a kind has.
#[derive(Clone, Copy, Debug, Default)]
pub struct ChildKinds {
    /// A kind whose controller writes only its status (no Deployment, no Service): nothing is
    /// watched but the primary.
    pub status_only: bool,
    pub config_maps: bool,
    /// Secrets the controller writes (a ModelAPI's inline API key), cached as metadata only.
    pub secrets: bool,
    pub routes: bool,
    /// PersistentVolumeClaims, created once and never updated.
    pub claims: bool,
    pub disruption_budgets: bool,
    /// HorizontalPodAutoscalers (`spec.autoscaling`).
    pub autoscalers: bool,
    /// NetworkPolicies (when the operator generates them).
    pub network_policies: bool,
}

/// A Controller and the caches it reads, before it runs.
pub struct Wiring<K: Primary> {
    pub controller: Controller<K>,
    pub store: Store<K>,
    pub children: Children,
    /// Resolve once every cache the reconcile reads has synced; add the dependency caches.
    pub synced: Vec<BoxFuture<'static, ()>>,
    /// Counts the triggers into the work queue metrics.
    runtime: Runtime,
}

/// The work-queue key of an object: `namespace/name`, as [`Core::reconcile`] names it.
fn queue_key(namespace: Option<&str>, name: &str) -> String {
    format!("{}/{name}", namespace.unwrap_or_default())
}

/// Counts the owners of kind `K` of each child into the work queue, as kube-runtime's
/// `owns_stream` maps a child's event to them (every owner reference of that kind).
fn enqueue_owners<K: Primary, C: Resource>(runtime: &Runtime) -> impl Fn(&C) + Send + 'static {
    let runtime = runtime.clone();
    move |child| {
        let meta = child.meta();
        for owner in meta.owner_references.iter().flatten() {
            if ObjectRef::<K>::from_owner_ref(meta.namespace.as_deref(), owner, ()).is_some() {
                runtime.enqueued(&queue_key(meta.namespace.as_deref(), &owner.name));
            }
        }
    }
}

/// Whether HTTPRoutes are watched: the gateway is enabled, or the API exists (so routes left
/// from when it was enabled can be cleaned up).
pub async fn watch_routes(runtime: &Runtime, gateway_enabled: bool) -> bool {
    gateway_enabled || stores::served(&runtime.client, &http_route_resource()).await
}

/// Resolves once the child cache `store` has synced.
fn ready<K: Resource + Send + Sync + 'static>(store: &ChildStore<K>) -> BoxFuture<'static, ()> {
    let store = store.clone();
    async move { store.wait_until_ready().await }.boxed()
}

/// The Controller of `K` in `namespace` (all when None) with slim caches of its children
/// (selected by `selector`). `on_event` sees every event of `K` after its cache applied it:
/// that is where relation indexes are kept.
pub fn wire<K>(
    runtime: &Runtime,
    namespace: Option<&str>,
    selector: &str,
    kinds: ChildKinds,
    mut on_event: impl FnMut(&watcher::Event<K>) + Send + 'static,
) -> Wiring<K>
where
    K: Primary,
{
    let client = &runtime.client;
    let (store, events) = stores::cache::<K>(client, namespace, "");
    let expectations = Arc::<Expectations>::default();
    // The primary store's sync is seen in its own events (see `ready` for why not its store).
    let (primary_synced, mut primary_ready) = tokio::sync::watch::channel(false);
    let forgotten = expectations.clone();
    let primary = events
        .inspect_ok(move |event| {
            match event {
                watcher::Event::InitDone => {
                    primary_synced.send_replace(true);
                }
                // Gone: no reconcile will see it again (a kind without a finalizer is never
                // reconciled while deleting), so its status write is forgotten here.
                watcher::Event::Delete(object) => forgotten.forget(&status_key(object)),
                _ => {}
            }
            on_event(event)
        })
        .try_filter_map({
            let mut changes = PrimaryChanges::default();
            move |event| futures::future::ready(Ok(changes.pass(event)))
        })
        .inspect_ok({
            let runtime = runtime.clone();
            move |object| {
                runtime.enqueued(&queue_key(
                    object.meta().namespace.as_deref(),
                    &object.name_any(),
                ))
            }
        });
    let config = controller::Config::default()
        .concurrency(runtime.args.max_concurrent_reconciles)
        .debounce(runtime.args.reconcile_debounce);
    let controller = Controller::for_stream(primary, store.clone()).with_config(config);
    let primary_synced = async move {
        let _ = primary_ready.wait_for(|synced| *synced).await;
    }
    .boxed();
    let mut synced = vec![primary_synced];
    let mut optional = OptionalChildren {
        runtime,
        namespace,
        selector,
        expectations: &expectations,
        synced: &mut synced,
    };
    let workloads = !kinds.status_only;
    let (controller, deployments) =
        optional.cache::<K, DeploymentView>(workloads, controller, ChildKind::Deployment);
    let (controller, services) =
        optional.cache::<K, MetaView<Service>>(workloads, controller, ChildKind::Service);
    let (controller, config_maps) =
        optional.cache::<K, ConfigMap>(kinds.config_maps, controller, ChildKind::ConfigMap);
    let (controller, secrets) =
        optional.cache::<K, MetaView<Secret>>(kinds.secrets, controller, ChildKind::Secret);
    let (controller, claims) = optional.cache::<K, MetaView<PersistentVolumeClaim>>(
        kinds.claims,
        controller,
        ChildKind::PersistentVolumeClaim,
    );
    let (controller, disruption_budgets) = optional.cache::<K, MetaView<PodDisruptionBudget>>(
        kinds.disruption_budgets,
        controller,
        ChildKind::PodDisruptionBudget,
    );
    let (controller, autoscalers) = optional.cache::<K, HorizontalPodAutoscaler>(
        kinds.autoscalers,
        controller,
        ChildKind::HorizontalPodAutoscaler,
    );
    let (mut controller, network_policies) = optional.cache::<K, MetaView<NetworkPolicy>>(
        kinds.network_policies,
        controller,
        ChildKind::NetworkPolicy,
    );
    let mut routes = None;
    if kinds.routes {
        let resource = http_route_resource();
        let (store, events) = stores::dynamic_child_cache(client, namespace, &resource, selector);
        let events = child_changes(events, &expectations, ChildKind::HttpRoute);
        controller = controller
            .owns_stream_with(events.inspect_ok(enqueue_owners::<K, _>(runtime)), resource);
        synced.push(ready(&store));
        routes = Some(store);
    }
    Wiring {
        controller,
        store,
        children: Children {
            // A status-only kind converges nothing: its stores stay empty, unwatched.
            deployments: deployments.unwrap_or_else(|| child_store().0),
            services: services.unwrap_or_else(|| child_store().0),
            config_maps,
            secrets,
            routes,
            claims,
            disruption_budgets,
            autoscalers,
            network_policies,
            expectations,
        },
        synced,
        runtime: runtime.clone(),
    }
}

/// What wiring an optional child kind needs: its slim cache joins the Controller's triggers and
/// the caches to sync.
struct OptionalChildren<'a> {
    runtime: &'a Runtime,
    namespace: Option<&'a str>,
    selector: &'a str,
    expectations: &'a Arc<Expectations>,
    synced: &'a mut Vec<BoxFuture<'static, ()>>,
}

impl OptionalChildren<'_> {
    /// The cache of `C` when `wanted`, with `controller` triggered by its changes.
    fn cache<K: Primary, C: stores::Watched + Resource<DynamicType = ()> + Serialize>(
        &mut self,
        wanted: bool,
        controller: Controller<K>,
        kind: ChildKind,
    ) -> (Controller<K>, Option<ChildStore<C>>) {
        if !wanted {
            return (controller, None);
        }
        let (store, events) =
            stores::child_cache::<C>(&self.runtime.client, self.namespace, self.selector);
        let events = child_changes(events, self.expectations, kind);
        let controller =
            controller.owns_stream(events.inspect_ok(enqueue_owners::<K, _>(self.runtime)));
        self.synced.push(ready(&store));
        (controller, Some(store))
    }
}

/// Forgets our write of a child when the watch reports it deleted, so it is created again.
/// The children whose change their owner must look at: every change but the echo of this
/// process's own write (the object exactly as that write left it shows nothing new). A deleted
/// child is forgotten by the expectations: creating it again is not pending.
fn child_changes<C: Resource + Serialize + Send + 'static>(
    events: stores::Events<C>,
    expectations: &Arc<Expectations>,
    kind: ChildKind,
) -> impl Stream<Item = Result<C, watcher::Error>> + Send + 'static {
    let expectations = expectations.clone();
    // For kinds whose status is noise: a digest of each child's content but its status.
    let mut contents: HashMap<u64, u64> = HashMap::new();
    events.try_filter_map(move |event| {
        let key = |child: &C| {
            let meta = child.meta();
            (
                kind.as_str(),
                meta.namespace.clone().unwrap_or_default(),
                meta.name.clone().unwrap_or_default(),
            )
        };
        let changed = match event {
            watcher::Event::Apply(child) | watcher::Event::InitApply(child) => {
                let version = child.meta().resource_version.as_deref();
                let news = !kind.status_is_noise() || {
                    let content = content_digest(&child);
                    contents.insert(digest(&key(&child)), content) != Some(content)
                };
                (news && !expectations.is_own_write(&key(&child), version)).then_some(child)
            }
            watcher::Event::Delete(child) => {
                contents.remove(&digest(&key(&child)));
                expectations.forget(&key(&child));
                Some(child)
            }
            watcher::Event::Init | watcher::Event::InitDone => None,
        };
        futures::future::ready(Ok(changed))
    })
}

fn digest<T: std::hash::Hash>(value: &T) -> u64 {
    let mut hasher = std::hash::DefaultHasher::new();
    value.hash(&mut hasher);
    std::hash::Hasher::finish(&hasher)
}

/// A digest of what a child holds but its status and the versions any write moves.
fn content_digest<C: Serialize>(child: &C) -> u64 {
    let mut value = serde_json::to_value(child).unwrap_or_default();
    if let Some(object) = value.as_object_mut() {
        object.remove("status");
        if let Some(meta) = object.get_mut("metadata").and_then(|m| m.as_object_mut()) {
            meta.remove("resourceVersion");
            meta.remove("managedFields");
        }
    }
    digest(&value.to_string())
}

impl<K: Primary> Wiring<K> {
    /// Runs the Controller until shutdown: every object is reconciled again when this replica
    /// gains leadership (after the caches have synced).
    pub fn run<Ctx, R, RFut, E>(
        self,
        runtime: &Runtime,
        reconcile: R,
        error_policy: E,
        context: Arc<Ctx>,
    ) -> impl Future<Output = ()> + Send + use<K, Ctx, R, RFut, E>
    where
        Ctx: Send + Sync + 'static,
        R: FnMut(Arc<K>, Arc<Ctx>) -> RFut + Send + 'static,
        RFut: Future<Output = Result<Action, ReconcileError>> + Send + 'static,
        E: Fn(Arc<K>, &ReconcileError, Arc<Ctx>) -> Action + Send + Sync + 'static,
    {
        // A new leader reconciles every object in its cache: each is an add.
        let (store, queue) = (self.store.clone(), runtime.clone());
        let resync = runtime.leadership_gained().inspect(move |()| {
            for object in store.state() {
                queue.enqueued(&queue_key(
                    object.meta().namespace.as_deref(),
                    &object.name_any(),
                ));
            }
        });
        let queue = runtime.metrics.workqueue.clone();
        self.controller
            .reconcile_all_on(resync)
            .graceful_shutdown_on(runtime.shutdown_signal())
            .run(reconcile, error_policy, context)
            .for_each(move |result| {
                // Queued, then gone from the cache before its turn: kube-runtime drops it.
                if let Err(controller::Error::ObjectNotFound(object)) = result {
                    queue.forget(&queue_key(object.namespace.as_deref(), &object.name));
                }
                async {}
            })
    }

    /// A trigger stream of extra objects to reconcile (dependents of another kind's change).
    pub fn reconcile_on(
        mut self,
        trigger: impl Stream<Item = ObjectRef<K>> + Send + 'static,
    ) -> Self {
        let runtime = self.runtime.clone();
        self.controller = self.controller.reconcile_on(trigger.inspect(move |object| {
            runtime.enqueued(&queue_key(object.namespace.as_deref(), &object.name))
        }));
        self
    }
}

/// What every reconcile of one controller shares.
#[derive(Clone)]
pub struct Core {
    pub runtime: Runtime,
    pub children: Children,
    pub events: Events,
    /// None for kinds that keep none (a MemoryStore, as in KAOS: nothing to finalize).
    pub finalizer: Option<&'static str>,
    /// Status writes this process made and the cache may not show yet (in the children's
    /// expectations, which forget a parent's entry when the watch reports it deleted).
    status_writes: Arc<Expectations>,
    /// Per parent, the next look at a missing reference.
    reference_rechecks: Arc<Backoff>,
}

impl Core {
    pub fn new(runtime: Runtime, children: Children, finalizer: Option<&'static str>) -> Self {
        let events = runtime.events();
        let status_writes = children.expectations.clone();
        Self {
            runtime,
            children,
            events,
            finalizer,
            status_writes,
            reference_rechecks: Arc::new(reference_rechecks()),
        }
    }

    /// Runs `apply` for `object` as the leader: adds the finalizer first (in the same pass),
    /// and on deletion releases the finalizer (children go by garbage collection).
    pub async fn reconcile<K, F, Fut>(
        &self,
        object: Arc<K>,
        apply: F,
    ) -> Result<Action, ReconcileError>
    where
        K: Primary,
        F: FnOnce(Arc<K>) -> Fut,
        Fut: Future<Output = Result<Action, ReconcileError>>,
    {
        let key = format!(
            "{}/{}",
            object.namespace().unwrap_or_default(),
            object.name_any()
        );
        let span = tracing::info_span!("reconcile", kind = %K::kind(&()), object = %key);
        let work = async {
            if object.meta().deletion_timestamp.is_some() {
                self.release(object.as_ref()).await?;
                return Ok(Action::await_change());
            }
            let object = self.hold(object).await?;
            match apply(object).await {
                // The namespace is being deleted and has taken a child first (the namespace
                // controller deletes kinds in no fixed order): nothing can be created there
                // again, and the object's own deletion event is on its way. Not an error.
                Err(e) if e.is_namespace_terminating() => {
                    tracing::debug!("namespace terminating, waiting for the deletion: {e}");
                    Ok(Action::await_change())
                }
                done => done,
            }
        };
        tracing::Instrument::instrument(self.runtime.reconcile(&key, work), span).await
    }

    /// Adds the finalizer if missing, returning the object as written.
    async fn hold<K: Primary>(&self, object: Arc<K>) -> Result<Arc<K>, ReconcileError> {
        let Some(finalizer) = self.finalizer else {
            return Ok(object);
        };
        let finalizers = object.finalizers();
        if finalizers.iter().any(|f| f == finalizer) {
            return Ok(object);
        }
        let patch = if object.meta().finalizers.is_none() {
            json!([
                {"op": "test", "path": "/metadata/finalizers", "value": null},
                {"op": "add", "path": "/metadata/finalizers", "value": [finalizer]},
            ])
        } else {
            json!([
                {"op": "test", "path": "/metadata/finalizers", "value": finalizers},
                {"op": "add", "path": "/metadata/finalizers/-", "value": finalizer},
            ])
        };
        let written = self
            .api::<K>(&object)
            .patch(
                &object.name_any(),
                &PatchParams::default(),
                &json_patch(patch),
            )
            .await
            .step(Step::AddFinalizer, || {
                format!("{} {}", K::kind(&()), object.name_any())
            })?;
        Ok(Arc::new(written))
    }

    /// Removes the finalizer of an object being deleted.
    async fn release<K: Primary>(&self, object: &K) -> Result<(), ReconcileError> {
        let Some(finalizer) = self.finalizer else {
            return Ok(());
        };
        let Some(index) = object.finalizers().iter().position(|f| f == finalizer) else {
            return Ok(());
        };
        let path = format!("/metadata/finalizers/{index}");
        let patch = json!([
            {"op": "test", "path": path, "value": finalizer},
            {"op": "remove", "path": path},
        ]);
        match self
            .api::<K>(object)
            .patch(
                &object.name_any(),
                &PatchParams::default(),
                &json_patch(patch),
            )
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => {
                return Err(ReconcileError::new(
                    Step::RemoveFinalizer,
                    format!("{} {}", K::kind(&()), object.name_any()),
                    e,
                ));
            }
        }
        let key = status_key(object);
        self.reference_rechecks
            .reset(&format!("{}/{}", key.1, key.2));
        self.status_writes.forget(&key);
        Ok(())
    }

    fn api<K: Primary>(&self, object: &K) -> Api<K> {
        Api::namespaced(
            self.runtime.client.clone(),
            &object.namespace().unwrap_or_default(),
        )
    }

    /// Converges the children of `parent` to `set` and publishes a Normal event for the writes.
    pub async fn converge<K: Primary>(
        &self,
        parent: &K,
        set: ChildSet,
    ) -> Result<Converged, ReconcileError> {
        let namespace = parent.namespace().unwrap_or_default();
        let uid = parent.uid().unwrap_or_default();
        let converged = self
            .children
            .converge(
                &Parent {
                    namespace: &namespace,
                    uid: &uid,
                    field_manager: self.runtime.field_manager(),
                    client: &self.runtime.client,
                },
                set,
            )
            .await?;
        if !converged.changes.is_empty() {
            self.events
                .normal(parent, "Applied", converged.changes.join(", "))
                .await;
        }
        Ok(converged)
    }

    /// Server-side applies `desired` as the status of `object` unless the cache already shows
    /// it (`current`: the [`status_digest`] of the cached status) or this process just wrote
    /// it; when it writes and `problem` is set (a reason and a message), publishes it as a
    /// Warning event. Returns whether it wrote.
    pub async fn write_status<K, S>(
        &self,
        object: &K,
        current: Option<u64>,
        desired: &S,
        problem: Option<(&str, &str)>,
    ) -> Result<bool, ReconcileError>
    where
        K: Primary,
        S: Serialize,
    {
        if current == Some(status_digest(desired)) {
            return Ok(false);
        }
        let key = status_key(object);
        let hash = status_hash(desired);
        let seen = Observed {
            resource_version: object.meta().resource_version.as_deref(),
        };
        if self.status_writes.verdict(&key, &hash, Some(seen)) != Verdict::Unknown {
            return Ok(false);
        }
        let name = object.name_any();
        let body = json!({
            "apiVersion": K::api_version(&()),
            "kind": K::kind(&()),
            "metadata": {"name": name},
            "status": desired,
        });
        let written = self
            .api::<K>(object)
            .patch_status(
                &name,
                &PatchParams::apply(self.runtime.field_manager()).force(),
                &Patch::Apply(body),
            )
            .await
            .step(Step::PatchStatus, || format!("{} {name}", K::kind(&())))?;
        self.status_writes.wrote(
            key,
            hash,
            seen.resource_version,
            written.meta().resource_version.clone(),
            None,
        );
        if let Some((reason, message)) = problem {
            self.events
                .warning(object, reason, message.to_string())
                .await;
        }
        Ok(true)
    }

    /// The end of every reconcile: writes the status (see [`Core::write_status`]) and says
    /// when to look again: on the next change, every [`CONFLICT_RECHECK`] while a child's
    /// name is taken by an object this resource does not own, or with a growing interval (1 s
    /// to 60 s) while its pods read a Secret or ConfigMap that is missing.
    pub async fn finish<K, S>(
        &self,
        object: &K,
        current: Option<u64>,
        desired: &S,
        problem: Option<(String, String)>,
        converged: &Converged,
    ) -> Result<Action, ReconcileError>
    where
        K: Primary,
        S: Serialize,
    {
        let problem = problem.as_ref().map(|(r, m)| (r.as_str(), m.as_str()));
        self.write_status(object, current, desired, problem).await?;
        let (_, namespace, name) = status_key(object);
        let key = format!("{namespace}/{name}");
        if converged.missing.is_empty() {
            self.reference_rechecks.reset(&key);
        }
        Ok(if !converged.conflicts.is_empty() {
            Action::requeue(CONFLICT_RECHECK)
        } else if !converged.missing.is_empty() {
            Action::requeue(self.reference_rechecks.next_delay(&key))
        } else {
            Action::await_change()
        })
    }

    /// The problem to report for a resource whose build failed or whose children conflict.
    pub fn problem(
        build_error: Option<(&str, &str)>,
        converged: &Converged,
    ) -> Option<(String, String)> {
        build_error
            .map(|(r, m)| (r.to_string(), m.to_string()))
            .or_else(|| converged.problem().map(|(r, m)| (r.to_string(), m)))
    }

    /// The error policy of every controller: log by step, count, warn, and retry with
    /// per-object backoff.
    pub fn retry_after_error<K: Primary>(&self, object: &K, error: &ReconcileError) -> Action {
        let key = format!(
            "{}/{}",
            object.namespace().unwrap_or_default(),
            object.name_any()
        );
        let step = error.step.metric_label();
        self.runtime.metrics.record_error_step(step);
        if error.is_conflict() {
            // A write based on a cache that had not caught up yet: the retry reads the newer object.
            tracing::debug!(object = %key, step, "reconcile raced a newer version, retrying: {error}");
        } else {
            tracing::warn!(object = %key, step, "reconcile failed: {error}");
            let events = self.events.clone();
            let object = object.clone();
            let (reason, note) = (error.step.event_reason(), error.to_string());
            tokio::spawn(async move { events.warning(&object, reason, note).await });
        }
        self.runtime.retry_after_error(&key)
    }
}

fn json_patch(patch: Value) -> Patch<()> {
    match serde_json::from_value(patch) {
        Ok(p) => Patch::Json(p),
        // The literals above are valid JSON patches.
        Err(_) => Patch::Json(json_patch::Patch(Vec::new())),
    }
}

fn status_key<K: Primary>(object: &K) -> crate::expectations::Key {
    (
        "status",
        object.namespace().unwrap_or_default(),
        format!("{}/{}", K::kind(&()), object.name_any()),
    )
}

/// A digest of a whole status, to tell whether a desired status equals the cached one without
/// the cache keeping the status (two statuses that serialize alike are equal; two different
/// ones share a digest with odds of ~1 in 2^64).
pub fn status_digest<S: Serialize>(status: &S) -> u64 {
    let mut hasher = std::hash::DefaultHasher::new();
    std::hash::Hash::hash(&serde_json::to_vec(status).unwrap_or_default(), &mut hasher);
    std::hash::Hasher::finish(&hasher)
}

/// The hash of a status without its conditions' transition times, which a reconcile sets to
/// "now" and which alone must not make two otherwise equal statuses differ.
fn status_hash<S: Serialize>(status: &S) -> String {
    let mut value = serde_json::to_value(status).unwrap_or(Value::Null);
    if let Some(conditions) = value.get_mut("conditions").and_then(Value::as_array_mut) {
        for condition in conditions {
            if let Some(c) = condition.as_object_mut() {
                c.remove("lastTransitionTime");
            }
        }
    }
    stable_hash(&value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::stream;

    fn config_map(rv: &str) -> ConfigMap {
        ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some("child".into()),
                namespace: Some("ns".into()),
                resource_version: Some(rv.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn the_echo_of_our_own_write_wakes_no_owner() {
        let expectations = Arc::<Expectations>::default();
        let key = ("ConfigMap", "ns".to_string(), "child".to_string());
        expectations.wrote(key.clone(), "h".into(), None, Some("5".into()), None);
        let events = stream::iter([
            watcher::Event::Apply(config_map("5")),
            watcher::Event::Apply(config_map("6")),
            watcher::Event::Delete(config_map("6")),
        ])
        .map(Ok)
        .boxed();
        let changed: Vec<String> = child_changes(events, &expectations, ChildKind::ConfigMap)
            .map_ok(|c| c.resource_version().unwrap_or_default())
            .try_collect()
            .await
            .expect("no errors");
        assert_eq!(
            changed,
            ["6", "6"],
            "another's change and the deletion wake it"
        );
        assert_eq!(
            expectations.verdict(&key, "h", None),
            Verdict::Unknown,
            "a deleted child is forgotten"
        );
    }
}
