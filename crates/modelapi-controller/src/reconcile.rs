//! The IO side: applies what `build` computed, deletes what is no longer wanted, writes status.

use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use kaos_api::modelapi::ModelAPI;
use kaos_runtime::Runtime;
use kaos_runtime::children::{apply_if_changed, apply_status, delete_orphans};
use kaos_runtime::events::Events;
use kaos_runtime::reconciler::{
    ChildCaches, ReconcileError, WorkloadChildren, reconcile_with_finalizer, retry_after_error,
};
use kaos_runtime::stores::{cached, cached_metadata};
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::Action;
use kube::runtime::reflector::Store;
use kube::{Resource, ResourceExt};

use crate::build::{self, build};
use crate::settings::Settings;
use crate::status::status;

pub const FINALIZER: &str = "kaos.tools/modelapi-finalizer";

/// What every reconcile reads from: settings and the watch caches of the children.
pub struct Context {
    pub runtime: Runtime,
    pub settings: Settings,
    pub children: ChildCaches,
    pub config_maps: Store<PartialObjectMeta<ConfigMap>>,
    pub events: Events,
}

pub async fn reconcile(m: Arc<ModelAPI>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    reconcile_with_finalizer(&ctx.runtime, m, FINALIZER, |m| apply(m, &ctx)).await
}

pub fn error_policy(m: Arc<ModelAPI>, error: &ReconcileError, ctx: Arc<Context>) -> Action {
    retry_after_error(&ctx.runtime, m.as_ref(), error)
}

async fn apply(m: Arc<ModelAPI>, ctx: &Context) -> Result<Action, ReconcileError> {
    let client = &ctx.runtime.client;
    let manager = ctx.runtime.field_manager();
    let name = m.name_any();
    let namespace = m.namespace().unwrap_or_default();
    let uid = m.uid().unwrap_or_default();
    let built = build(&m, &ctx.settings);
    let mut changes = Vec::new();
    if let Ok(desired) = &built {
        // The config first, so new pods find it.
        let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
        let keep: Vec<String> = desired.config_map.iter().map(|c| c.name_any()).collect();
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
                changes.push(format!(
                    "applied ConfigMap {}",
                    build::config_map_name(&name)
                ));
            }
        }
        let children = WorkloadChildren {
            deployment: desired.deployment.clone(),
            service: Some(desired.service.clone()),
            http_route: desired.http_route.clone(),
        };
        changes.extend(
            ctx.children
                .apply(client, manager, &namespace, &uid, children)
                .await?,
        );
        let keep: Vec<&str> = keep.iter().map(String::as_str).collect();
        for gone in delete_orphans(
            &config_maps,
            &cached_metadata(&ctx.config_maps),
            &uid,
            &keep,
        )
        .await?
        {
            changes.push(format!("deleted ConfigMap {gone}"));
        }
    }
    if !changes.is_empty() {
        ctx.events
            .normal(m.as_ref(), "Applied", changes.join(", "))
            .await;
    }
    let deployment = ctx
        .children
        .deployment(&namespace, &build::deployment_name(&name));
    let desired_status = status(
        &m,
        &built,
        deployment.as_deref(),
        kaos_runtime::conditions::now(),
    );
    let api: Api<ModelAPI> = Api::namespaced(client.clone(), &namespace);
    let wrote = apply_status(&api, manager, &name, m.status.as_ref(), &desired_status).await?;
    if wrote && let Err(e) = &built {
        ctx.events
            .warning(m.as_ref(), e.reason, e.message.clone())
            .await;
    }
    Ok(Action::await_change())
}

/// The phase of a ModelAPI, for `kaos_resources`.
pub fn phase_of(m: &ModelAPI) -> Option<&'static str> {
    m.status.as_ref().and_then(|s| s.phase).map(|p| p.as_str())
}
