//! Wires the watch caches, triggers and reconciler into kube-runtime Controllers (one per watched
//! namespace, or one for all).

use std::sync::Arc;

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kaos_api::modelapi::ModelAPI;
use kaos_runtime::Runtime;
use kaos_runtime::reconciler::{controller_with_children, watch_routes};
use kaos_runtime::stores;

use crate::build::CHILD_SELECTOR;
use crate::reconcile::{Context, error_policy, phase_of, reconcile};
use crate::settings::Settings;

pub const PHASES: &[&str] = &["Pending", "Ready", "Failed"];

pub async fn run(runtime: Runtime, settings: Settings) -> anyhow::Result<()> {
    let routes = watch_routes(&runtime, settings.gateway.gateway_api_enabled).await;
    let events = runtime.events();
    let (mut synced, mut main_stores, mut controllers) = (Vec::new(), Vec::new(), Vec::new());
    for namespace in runtime.namespaces() {
        let ns = namespace.as_deref();
        let (controller, children) =
            controller_with_children::<ModelAPI>(&runtime, ns, CHILD_SELECTOR, routes);
        let (config_maps, config_map_changes) =
            stores::metadata::<ConfigMap>(&runtime.client, ns, CHILD_SELECTOR);
        let controller = controller.owns_stream(config_map_changes);
        let store = controller.store();
        main_stores.push(store.clone());
        synced.push(
            async move {
                let _ = store.wait_until_ready().await;
            }
            .boxed(),
        );
        let context = Arc::new(Context {
            runtime: runtime.clone(),
            settings: settings.clone(),
            children,
            config_maps,
            events: events.clone(),
        });
        controllers.push(
            controller
                .reconcile_all_on(runtime.leadership_gained())
                .graceful_shutdown_on(runtime.shutdown_signal())
                .run(reconcile, error_policy, context)
                .for_each(|_| async {}),
        );
    }
    runtime.mark_ready_when(synced);
    runtime.track_phases("ModelAPI", PHASES, main_stores, phase_of);
    futures::future::join_all(controllers).await;
    Ok(())
}
