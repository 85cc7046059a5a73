//! The reconcile skeleton the three controllers share: the finalizer around each reconcile, the
//! watch caches of the workload children (Deployment, Service, HTTPRoute), and applying them
//! with orphan collection.

use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use kube::api::Api;
use kube::core::{DynamicObject, PartialObjectMeta};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{Controller, controller, watcher};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::Runtime;
use crate::children::{apply_if_changed, delete_orphans};
use crate::stores::{self, cached, cached_metadata};
use crate::workload::http_route_resource;

#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<ReconcileError>>),
}

/// The children every kind's workload has.
#[derive(Clone, Debug)]
pub struct WorkloadChildren {
    pub deployment: Deployment,
    /// None when the workload must not be reachable (an Agent with `expose: false`).
    pub service: Option<Service>,
    pub http_route: Option<DynamicObject>,
}

/// Watch caches of the workload children of one namespace (or all).
#[derive(Clone)]
pub struct ChildCaches {
    pub deployments: Store<Deployment>,
    pub services: Store<PartialObjectMeta<Service>>,
    /// None when the Gateway API is neither enabled nor installed.
    pub routes: Option<Store<DynamicObject>>,
}

impl ChildCaches {
    pub fn deployment(&self, namespace: &str, name: &str) -> Option<Arc<Deployment>> {
        cached(&self.deployments, namespace, name)
    }

    /// Applies what differs from the caches and deletes the owner's children that are no longer
    /// wanted. Returns a line per change, for events.
    pub async fn apply(
        &self,
        client: &kube::Client,
        field_manager: &str,
        namespace: &str,
        owner_uid: &str,
        children: WorkloadChildren,
    ) -> Result<Vec<String>, kube::Error> {
        let mut changes = Vec::new();
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
        let name = children.deployment.name_any();
        let observed = self.deployment(namespace, &name);
        if apply_if_changed(
            &deployments,
            field_manager,
            observed.as_ref().map(|o| o.meta()),
            children.deployment,
        )
        .await?
        {
            changes.push(format!("applied Deployment {name}"));
        }
        let services: Api<Service> = Api::namespaced(client.clone(), namespace);
        let keep: Vec<String> = children.service.iter().map(|s| s.name_any()).collect();
        if let Some(service) = children.service {
            let observed = cached(&self.services, namespace, &service.name_any());
            let service_name = service.name_any();
            if apply_if_changed(
                &services,
                field_manager,
                observed.as_ref().map(|o| o.meta()),
                service,
            )
            .await?
            {
                changes.push(format!("applied Service {service_name}"));
            }
        }
        let keep: Vec<&str> = keep.iter().map(String::as_str).collect();
        for gone in delete_orphans(
            &services,
            &cached_metadata(&self.services),
            owner_uid,
            &keep,
        )
        .await?
        {
            changes.push(format!("deleted Service {gone}"));
        }
        if let Some(routes_store) = &self.routes {
            let resource = http_route_resource();
            let routes: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), namespace, &resource);
            let keep: Vec<String> = children.http_route.iter().map(|r| r.name_any()).collect();
            if let Some(route) = children.http_route {
                let route_name = route.name_any();
                let observed = routes_store
                    .get(&ObjectRef::new_with(&route_name, resource.clone()).within(namespace));
                if apply_if_changed(
                    &routes,
                    field_manager,
                    observed.as_ref().map(|o| o.meta()),
                    route,
                )
                .await?
                {
                    changes.push(format!("applied HTTPRoute {route_name}"));
                }
            }
            let keep: Vec<&str> = keep.iter().map(String::as_str).collect();
            for gone in
                delete_orphans(&routes, &cached_metadata(routes_store), owner_uid, &keep).await?
            {
                changes.push(format!("deleted HTTPRoute {gone}"));
            }
        }
        Ok(changes)
    }
}

/// Whether HTTPRoutes are watched: the gateway is enabled, or the API exists (so routes left
/// from when it was enabled can be cleaned up).
pub async fn watch_routes(runtime: &Runtime, gateway_enabled: bool) -> bool {
    gateway_enabled || stores::served(&runtime.client, &http_route_resource()).await
}

/// A Controller for `K` in `namespace` that also watches the workload children labelled with
/// `selector`, and the caches of those children.
pub fn controller_with_children<K>(
    runtime: &Runtime,
    namespace: Option<&str>,
    selector: &str,
    routes: bool,
) -> (Controller<K>, ChildCaches)
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static,
{
    let client = &runtime.client;
    let (deployments, deployment_changes) = stores::full::<Deployment>(client, namespace, selector);
    let (services, service_changes) = stores::metadata::<Service>(client, namespace, selector);
    let mut controller = Controller::new(
        stores::api::<K>(client, namespace),
        watcher::Config::default().any_semantic(),
    )
    .with_config(controller::Config::default().concurrency(runtime.args.max_concurrent_reconciles))
    .owns_stream(deployment_changes)
    .owns_stream(service_changes);
    let routes = if routes {
        let resource = http_route_resource();
        let (routes, route_changes) = stores::dynamic(client, namespace, &resource, selector);
        controller = controller.owns_stream_with(route_changes, resource);
        Some(routes)
    } else {
        None
    };
    (
        controller,
        ChildCaches {
            deployments,
            services,
            routes,
        },
    )
}

/// Runs `apply` for `object` inside its finalizer (added on first reconcile, removed on
/// deletion; children go by garbage collection), timed and counted when this replica leads.
pub async fn reconcile_with_finalizer<K, F, Fut>(
    runtime: &Runtime,
    object: Arc<K>,
    finalizer_name: &str,
    apply: F,
) -> Result<Action, ReconcileError>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + Serialize
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static,
    F: FnOnce(Arc<K>) -> Fut,
    Fut: Future<Output = Result<Action, ReconcileError>>,
{
    let namespace = object.namespace().unwrap_or_default();
    let key = format!("{namespace}/{}", object.name_any());
    let api: Api<K> = Api::namespaced(runtime.client.clone(), &namespace);
    let work = async {
        finalizer(&api, finalizer_name, object, |event| async {
            match event {
                Finalizer::Apply(object) => apply(object).await,
                // Children carry owner references: garbage collection removes them.
                Finalizer::Cleanup(_) => Ok(Action::await_change()),
            }
        })
        .await
        .map_err(|e| ReconcileError::Finalizer(Box::new(e)))
    };
    let span = tracing::info_span!("reconcile", kind = %K::kind(&()), object = %key);
    tracing::Instrument::instrument(runtime.reconcile(&key, work), span).await
}

/// A conflict with a newer version of the object (409, or a failed JSON-patch precondition).
fn is_conflict(error: &ReconcileError) -> bool {
    use kube::runtime::finalizer::Error as FinalizerError;
    let api_code =
        |e: &kube::Error| matches!(e, kube::Error::Api(s) if s.code == 409 || s.code == 422);
    match error {
        ReconcileError::Kube(e) => matches!(e, kube::Error::Api(s) if s.code == 409),
        ReconcileError::Finalizer(f) => match f.as_ref() {
            FinalizerError::AddFinalizer(e) | FinalizerError::RemoveFinalizer(e) => api_code(e),
            FinalizerError::ApplyFailed(inner) | FinalizerError::CleanupFailed(inner) => {
                is_conflict(inner)
            }
            _ => false,
        },
    }
}

/// The error policy of every controller: log, and retry with per-object backoff.
pub fn retry_after_error<K: Resource>(
    runtime: &Runtime,
    object: &K,
    error: &ReconcileError,
) -> Action {
    let key = format!(
        "{}/{}",
        object.meta().namespace.clone().unwrap_or_default(),
        object.meta().name.clone().unwrap_or_default()
    );
    if is_conflict(error) {
        // A write based on a cache that had not caught up yet: the retry reads the newer object.
        tracing::debug!(object = %key, "reconcile raced a newer version, retrying: {error}");
    } else {
        tracing::warn!(object = %key, "reconcile failed: {error}");
    }
    runtime.retry_after_error(&key)
}
