//! Wiring a kind into kube-runtime: [`wire`] builds a Controller from slim caches (the primary
//! triggers only on spec changes and deletion, children on any change but the echo of our own
//! write, with a short debounce that merges bursts); [`run_workload`] wires a workload kind in
//! every watched namespace in one call; [`Controllers`] runs every Controller of one process.

mod controllers;
mod workload;

pub use controllers::Controllers;
pub use workload::{Namespace, Workload, run_workload};

use std::future::Future;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::{FutureExt, Stream, StreamExt, TryStreamExt};
use kaos_runtime::Runtime;
use kaos_runtime::error::ReconcileError;
use kube::runtime::controller;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{Controller, watcher};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use tokio::sync::mpsc;

use crate::build::gateway::http_route_resource;
use crate::cache;
use crate::cache::child_store::ChildStore;
pub use crate::converge::ChildKinds;
use crate::converge::expectations::Expectations;
use crate::converge::{ChildRow, Children, OpenCache};
use crate::reconcile::{Primary, Reconciles, parent_keys};
use crate::trigger::child_changes::{ChildChanges, child_changes};
use crate::trigger::{PrimaryChanges, receive};

impl ChildKinds {
    /// The children of a workload: its Deployment and Service, an autoscaler, a disruption
    /// budget, and NetworkPolicies (always watched: policies left from when they were on are
    /// deleted once they are off); HTTPRoutes are [`watch_routes`]'s to decide.
    pub fn workload() -> Self {
        Self {
            deployments: true,
            services: true,
            autoscalers: true,
            disruption_budgets: true,
            network_policies: true,
            ..Self::default()
        }
    }

    /// A kind whose controller writes only its status (no Deployment, no Service): nothing is
    /// watched but the primary.
    pub fn status_only() -> Self {
        Self::default()
    }
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

/// The Controller's backoff after an error on its merged trigger streams: none. kube-runtime's
/// default pauses *every* trigger stream (so every cache the Controller polls) after any error,
/// for a backoff only a passed event resets. Our caches end their own errors
/// ([`cache::without_errors`]) and each watcher backs off on its own; this keeps a future
/// trigger that passes an error from stalling the others. So a new trigger must back off from
/// its own errors too: one that yields errors in a tight loop would be polled again at once.
struct NeverPause;

impl Iterator for NeverPause {
    type Item = std::time::Duration;

    fn next(&mut self) -> Option<std::time::Duration> {
        Some(std::time::Duration::ZERO)
    }
}

impl kube::runtime::utils::Backoff for NeverPause {
    fn reset(&mut self) {}
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

/// `controller` triggered by a child cache's `events`: the owners of each child that changed,
/// and the owners of children a relist no longer shows.
fn owns<K, C>(
    controller: Controller<K>,
    runtime: &Runtime,
    events: cache::Events<C>,
    changes: ChildChanges<K>,
    dyntype: C::DynamicType,
) -> Controller<K>
where
    K: Primary,
    C: Resource + Serialize + Send + 'static,
    C::DynamicType: std::fmt::Debug + Eq + std::hash::Hash + Clone,
{
    let (vanished, owners_of_vanished) = mpsc::unbounded_channel();
    let changed = child_changes(events, changes, move |owners| {
        for owner in owners {
            let _ = vanished.send(owner);
        }
    });
    let queue = runtime.clone();
    controller
        .owns_stream_with(changed.inspect_ok(enqueue_owners::<K, _>(runtime)), dyntype)
        .reconcile_on(receive(owners_of_vanished).inspect(move |owner| {
            queue.enqueued(&queue_key(owner.namespace.as_deref(), &owner.name))
        }))
}

/// Whether HTTPRoutes are watched: the gateway is enabled, or the API exists (so routes left
/// from when it was enabled can be cleaned up).
pub async fn watch_routes(runtime: &Runtime, gateway_enabled: bool) -> bool {
    gateway_enabled || cache::served(&runtime.client, &http_route_resource()).await
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
    let (store, events) = cache::cache::<K>(client, namespace, "");
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
                // reconciled while deleting), so its status and finalizer writes are forgotten here.
                watcher::Event::Delete(object) => {
                    for key in parent_keys(object) {
                        forgotten.forget(&key);
                    }
                }
                _ => {}
            }
            on_event(event)
        })
        .try_filter_map({
            let mut changes = PrimaryChanges::new(expectations.clone());
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
    let controller = Controller::for_stream(primary, store.clone())
        .with_config(config)
        .trigger_backoff(NeverPause);
    let primary_synced = async move {
        let _ = primary_ready.wait_for(|synced| *synced).await;
    }
    .boxed();
    let mut synced = vec![primary_synced];
    let mut caches = ChildCaches {
        runtime,
        namespace,
        selector,
        expectations: &expectations,
        synced: &mut synced,
        controller: Some(controller),
    };
    let children = Children::open(kinds, expectations.clone(), &mut caches);
    let controller = caches
        .controller
        .take()
        .expect("the Controller is put back");
    Wiring {
        controller,
        store,
        children,
        synced,
        runtime: runtime.clone(),
    }
}

/// Opens the children's caches: each joins the Controller's triggers and the caches to sync.
struct ChildCaches<'a, K: Primary> {
    runtime: &'a Runtime,
    namespace: Option<&'a str>,
    selector: &'a str,
    expectations: &'a Arc<Expectations>,
    synced: &'a mut Vec<BoxFuture<'static, ()>>,
    /// Taken and put back by each cache's trigger.
    controller: Option<Controller<K>>,
}

impl<K: Primary> OpenCache for ChildCaches<'_, K> {
    fn open<C: ChildRow>(&mut self) -> ChildStore<C::Cached> {
        let api = C::watch_api(&self.runtime.client, self.namespace);
        let (store, events) = cache::watch_children(api, self.selector);
        let changes = ChildChanges::new(C::KIND, self.expectations.clone());
        let controller = self.controller.take().expect("the Controller is put back");
        let controller = owns(controller, self.runtime, events, changes, C::dynamic_type());
        self.controller = Some(controller);
        self.synced.push(ready(&store));
        store
    }
}

impl<K: Primary> Wiring<K> {
    /// Runs the Controller until shutdown with `context`'s reconcile: every object is
    /// reconciled again when this replica gains leadership (after the caches have synced).
    pub fn run<C: Reconciles<K>>(
        self,
        runtime: &Runtime,
        context: Arc<C>,
    ) -> impl Future<Output = ()> + Send + use<K, C> {
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
        let reconcile = |object: Arc<K>, context: Arc<C>| async move {
            if object.meta().deletion_timestamp.is_some() {
                context.finalize(&object).await;
            }
            let core = context.core();
            core.reconcile(object, |object| context.apply(object)).await
        };
        let error_policy = |object: Arc<K>, error: &ReconcileError, context: Arc<C>| {
            context.core().retry_after_error(object.as_ref(), error)
        };
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

    /// A trigger that reconciles every object of the Controller's cache (a change every one of
    /// them reads, such as the MCPServer runtime registry), counted into the work queue.
    pub fn reconcile_all_on(mut self, trigger: impl Stream<Item = ()> + Send + 'static) -> Self {
        let (store, queue) = (self.store.clone(), self.runtime.clone());
        self.controller = self.controller.reconcile_all_on(trigger.inspect(move |()| {
            for object in store.state() {
                queue.enqueued(&queue_key(
                    object.meta().namespace.as_deref(),
                    &object.name_any(),
                ));
            }
        }));
        self
    }
}
