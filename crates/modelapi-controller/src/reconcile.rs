//! The IO side: applies what `build` computed, deletes what is no longer wanted, writes status.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kaos_api::modelapi::ModelAPI;
use kaos_runtime::Runtime;
use kaos_runtime::children::{apply_if_changed, apply_status, delete_orphans};
use kaos_runtime::events::Events;
use kaos_runtime::stores::{cached, cached_metadata};
use kaos_runtime::workload::http_route_resource;
use kube::api::Api;
use kube::core::{DynamicObject, PartialObjectMeta};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};

use crate::build::{self, build};
use crate::settings::Settings;
use crate::status::status;

pub const FINALIZER: &str = "kaos.tools/modelapi-finalizer";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
}

/// What every reconcile reads from: settings and the watch caches of the children.
pub struct Context {
    pub runtime: Runtime,
    pub settings: Settings,
    pub deployments: Store<Deployment>,
    pub services: Store<PartialObjectMeta<Service>>,
    pub config_maps: Store<PartialObjectMeta<ConfigMap>>,
    /// None when the Gateway API is neither enabled nor installed.
    pub routes: Option<Store<DynamicObject>>,
    pub events: Events,
}

pub async fn reconcile(m: Arc<ModelAPI>, ctx: Arc<Context>) -> Result<Action, Error> {
    let namespace = m.namespace().unwrap_or_default();
    let key = format!("{namespace}/{}", m.name_any());
    let api: Api<ModelAPI> = Api::namespaced(ctx.runtime.client.clone(), &namespace);
    let work = async {
        finalizer(&api, FINALIZER, m, |event| async {
            match event {
                Finalizer::Apply(m) => apply(&m, &ctx).await,
                // Children carry owner references: garbage collection removes them.
                Finalizer::Cleanup(_) => Ok(Action::await_change()),
            }
        })
        .await
        .map_err(|e| Error::Finalizer(Box::new(e)))
    };
    let span =
        tracing::info_span!("reconcile", kind = "ModelAPI", namespace = %namespace, name = %key);
    tracing::Instrument::instrument(ctx.runtime.reconcile(&key, work), span).await
}

pub fn error_policy(m: Arc<ModelAPI>, error: &Error, ctx: Arc<Context>) -> Action {
    let key = format!("{}/{}", m.namespace().unwrap_or_default(), m.name_any());
    tracing::warn!(modelapi = %key, "reconcile failed: {error}");
    ctx.runtime.retry_after_error(&key)
}

async fn apply(m: &ModelAPI, ctx: &Context) -> Result<Action, Error> {
    let client = ctx.runtime.client.clone();
    let manager = ctx.runtime.field_manager();
    let name = m.name_any();
    let namespace = m.namespace().unwrap_or_default();
    let uid = m.uid().unwrap_or_default();
    let built = build(m, &ctx.settings);
    let mut changed = Vec::new();
    if let Ok(desired) = &built {
        let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
        let keep_config: Vec<String> = desired.config_map.iter().map(|c| c.name_any()).collect();
        if let Some(config_map) = desired.config_map.clone() {
            let observed = cached(&ctx.config_maps, &namespace, &config_map.name_any());
            if apply_if_changed(
                &config_maps,
                manager,
                observed.as_ref().map(|o| o.meta()),
                config_map,
            )
            .await?
            {
                changed.push(format!("ConfigMap {}", build::config_map_name(&name)));
            }
        }
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), &namespace);
        let observed = cached(&ctx.deployments, &namespace, &build::deployment_name(&name));
        if apply_if_changed(
            &deployments,
            manager,
            observed.as_ref().map(|o| o.meta()),
            desired.deployment.clone(),
        )
        .await?
        {
            changed.push(format!("Deployment {}", build::deployment_name(&name)));
        }
        let services: Api<Service> = Api::namespaced(client.clone(), &namespace);
        let observed = cached(&ctx.services, &namespace, &build::deployment_name(&name));
        if apply_if_changed(
            &services,
            manager,
            observed.as_ref().map(|o| o.meta()),
            desired.service.clone(),
        )
        .await?
        {
            changed.push(format!("Service {}", build::deployment_name(&name)));
        }
        let keep: Vec<&str> = keep_config.iter().map(String::as_str).collect();
        for gone in delete_orphans(
            &config_maps,
            &cached_metadata(&ctx.config_maps),
            &uid,
            &keep,
        )
        .await?
        {
            changed.push(format!("deleted ConfigMap {gone}"));
        }
        if let Some(routes_store) = &ctx.routes {
            let resource = http_route_resource();
            let routes: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), &namespace, &resource);
            let keep: Vec<String> = desired.http_route.iter().map(|r| r.name_any()).collect();
            if let Some(route) = desired.http_route.clone() {
                let observed = routes_store.get(
                    &ObjectRef::new_with(&route.name_any(), resource.clone()).within(&namespace),
                );
                if apply_if_changed(&routes, manager, observed.as_ref().map(|o| o.meta()), route)
                    .await?
                {
                    changed.push(format!("HTTPRoute modelapi-{name}"));
                }
            }
            let keep: Vec<&str> = keep.iter().map(String::as_str).collect();
            for gone in delete_orphans(&routes, &cached_metadata(routes_store), &uid, &keep).await?
            {
                changed.push(format!("deleted HTTPRoute {gone}"));
            }
        }
    }
    if !changed.is_empty() {
        ctx.events.normal(m, "Applied", changed.join(", ")).await;
    }
    let deployment = cached(&ctx.deployments, &namespace, &build::deployment_name(&name));
    let desired_status = status(
        m,
        &built,
        deployment.as_deref(),
        kaos_runtime::conditions::now(),
    );
    let api: Api<ModelAPI> = Api::namespaced(client, &namespace);
    let wrote = apply_status(&api, manager, &name, m.status.as_ref(), &desired_status).await?;
    if wrote && let Err(e) = &built {
        ctx.events.warning(m, e.reason, e.message.clone()).await;
    }
    Ok(Action::await_change())
}

/// The phase of a ModelAPI, for `kaos_resources`.
pub fn phase_of(m: &ModelAPI) -> Option<&'static str> {
    m.status.as_ref().and_then(|s| s.phase).map(|p| p.as_str())
}
