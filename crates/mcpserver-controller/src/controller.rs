//! Wires the watch caches, triggers and reconciler into kube-runtime Controllers (one per watched
//! namespace, or one for all). Besides its children, each watches the runtime registry.

use std::sync::Arc;

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kaos_api::mcpserver::MCPServer;
use kaos_runtime::Runtime;
use kaos_runtime::reconciler::{controller_with_children, watch_routes};
use kube::api::Api;
use kube::runtime::{WatchStreamExt, reflector, watcher};

use crate::build::CHILD_SELECTOR;
use crate::reconcile::{Context, error_policy, phase_of, reconcile};
use crate::registry;
use crate::settings::Settings;

pub const PHASES: &[&str] = &["Pending", "Ready", "Failed"];

pub async fn run(runtime: Runtime, settings: Settings) -> anyhow::Result<()> {
    let routes = watch_routes(&runtime, settings.gateway.gateway_api_enabled).await;
    let events = runtime.events();
    let (mut synced, mut main_stores, mut controllers) = (Vec::new(), Vec::new(), Vec::new());
    for namespace in runtime.namespaces() {
        let (controller, children) = controller_with_children::<MCPServer>(
            &runtime,
            namespace.as_deref(),
            CHILD_SELECTOR,
            routes,
        );
        // Any change to the registry re-reconciles every MCPServer: those whose runtime changed roll.
        let (registry_store, registry_writer) = reflector::store();
        let registry_api: Api<ConfigMap> =
            Api::namespaced(runtime.client.clone(), &settings.system_namespace);
        let registry_config =
            watcher::Config::default().fields(&format!("metadata.name={}", registry::CONFIG_MAP));
        let registry_changes =
            reflector::reflector(registry_writer, watcher(registry_api, registry_config))
                .default_backoff()
                .touched_objects()
                .filter_map(|r| async move { r.ok().map(|_| ()) });
        let store = controller.store();
        main_stores.push(store.clone());
        let registry_ready = registry_store.clone();
        synced.push(
            async move {
                let _ = store.wait_until_ready().await;
                let _ = registry_ready.wait_until_ready().await;
            }
            .boxed(),
        );
        let context = Arc::new(Context {
            runtime: runtime.clone(),
            settings: settings.clone(),
            children,
            registry: registry_store,
            events: events.clone(),
        });
        controllers.push(
            controller
                .reconcile_all_on(registry_changes)
                .reconcile_all_on(runtime.leadership_gained())
                .graceful_shutdown_on(runtime.shutdown_signal())
                .run(reconcile, error_policy, context)
                .for_each(|_| async {}),
        );
    }
    runtime.mark_ready_when(synced);
    runtime.track_phases("MCPServer", PHASES, main_stores, phase_of);
    futures::future::join_all(controllers).await;
    Ok(())
}
