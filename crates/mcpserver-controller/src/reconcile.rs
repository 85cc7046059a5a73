//! The IO side: applies what `build` computed, deletes what is no longer wanted, writes status.

use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use kaos_api::mcpserver::MCPServer;
use kaos_runtime::Runtime;
use kaos_runtime::children::apply_status;
use kaos_runtime::events::Events;
use kaos_runtime::reconciler::{
    ChildCaches, ReconcileError, reconcile_with_finalizer, retry_after_error,
};
use kaos_runtime::stores::cached;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::reflector::Store;

use crate::build::{self, build};
use crate::registry;
use crate::settings::Settings;
use crate::status::status;

pub const FINALIZER: &str = "kaos.tools/mcpserver-finalizer";

pub struct Context {
    pub runtime: Runtime,
    pub settings: Settings,
    pub children: ChildCaches,
    /// The registry ConfigMap, watched so that editing a runtime rolls its MCPServers.
    pub registry: Store<ConfigMap>,
    pub events: Events,
}

pub async fn reconcile(s: Arc<MCPServer>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    reconcile_with_finalizer(&ctx.runtime, s, FINALIZER, |s| apply(s, &ctx)).await
}

pub fn error_policy(s: Arc<MCPServer>, error: &ReconcileError, ctx: Arc<Context>) -> Action {
    retry_after_error(&ctx.runtime, s.as_ref(), error)
}

async fn apply(s: Arc<MCPServer>, ctx: &Context) -> Result<Action, ReconcileError> {
    let client = &ctx.runtime.client;
    let manager = ctx.runtime.field_manager();
    let name = s.name_any();
    let namespace = s.namespace().unwrap_or_default();
    let system_namespace = &ctx.settings.system_namespace;
    let registry_map = cached(&ctx.registry, system_namespace, registry::CONFIG_MAP);
    let registry = registry::from_config_map(registry_map.as_deref(), system_namespace);
    let built = build(&s, &registry, &ctx.settings);
    if let Ok(desired) = &built {
        let changes = ctx
            .children
            .apply(
                client,
                manager,
                &namespace,
                &s.uid().unwrap_or_default(),
                desired.children.clone(),
            )
            .await?;
        if !changes.is_empty() {
            ctx.events
                .normal(s.as_ref(), "Applied", changes.join(", "))
                .await;
        }
    }
    let deployment = ctx
        .children
        .deployment(&namespace, &build::deployment_name(&name));
    let desired_status = status(
        &s,
        &built,
        deployment.as_deref(),
        kaos_runtime::conditions::now(),
    );
    let api: Api<MCPServer> = Api::namespaced(client.clone(), &namespace);
    let wrote = apply_status(&api, manager, &name, s.status.as_ref(), &desired_status).await?;
    if wrote && let Err(e) = &built {
        ctx.events
            .warning(s.as_ref(), e.reason, e.message.clone())
            .await;
    }
    Ok(Action::await_change())
}

pub fn phase_of(s: &MCPServer) -> Option<&'static str> {
    s.status.as_ref().and_then(|s| s.phase).map(|p| p.as_str())
}
