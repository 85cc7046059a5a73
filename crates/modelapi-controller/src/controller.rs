//! Wires the watch caches, triggers and reconciler into kube-runtime Controllers (one per watched
//! namespace, or one for all).

use std::sync::Arc;

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kaos_api::modelapi::ModelAPI;
use kaos_runtime::Runtime;
use kaos_runtime::events::Events;
use kaos_runtime::stores;
use kaos_runtime::workload::http_route_resource;
use kube::runtime::{Controller, controller, watcher};

use crate::build::CHILD_SELECTOR;
use crate::reconcile::{Context, error_policy, phase_of, reconcile};
use crate::settings::Settings;

pub const PHASES: &[&str] = &["Pending", "Ready", "Failed"];

pub async fn run(runtime: Runtime, settings: Settings) -> anyhow::Result<()> {
    let client = runtime.client.clone();
    let route_resource = http_route_resource();
    let watch_routes =
        settings.gateway.gateway_api_enabled || stores::served(&client, &route_resource).await;
    let namespaces: Vec<Option<String>> = match runtime.watch_namespaces() {
        Some(list) => list.iter().cloned().map(Some).collect(),
        None => vec![None],
    };
    let events = Events::new(
        client.clone(),
        runtime.field_manager(),
        runtime.args.pod_name.clone(),
    );
    let mut synced = Vec::new();
    let mut main_stores = Vec::new();
    let mut controllers = Vec::new();
    for namespace in namespaces {
        let ns = namespace.as_deref();
        let (deployments, deployment_changes) =
            stores::full::<Deployment>(&client, ns, CHILD_SELECTOR);
        let (services, service_changes) = stores::metadata::<Service>(&client, ns, CHILD_SELECTOR);
        let (config_maps, config_map_changes) =
            stores::metadata::<ConfigMap>(&client, ns, CHILD_SELECTOR);
        let mut controller = Controller::new(
            stores::api::<ModelAPI>(&client, ns),
            watcher::Config::default().any_semantic(),
        )
        .with_config(
            controller::Config::default().concurrency(runtime.args.max_concurrent_reconciles),
        )
        .owns_stream(deployment_changes)
        .owns_stream(service_changes)
        .owns_stream(config_map_changes);
        let routes = if watch_routes {
            let (routes, route_changes) =
                stores::dynamic(&client, ns, &route_resource, CHILD_SELECTOR);
            controller = controller.owns_stream_with(route_changes, route_resource.clone());
            Some(routes)
        } else {
            None
        };
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
            deployments,
            services,
            config_maps,
            routes,
            events: events.clone(),
        });
        let running = controller
            .reconcile_all_on(runtime.leadership_gained())
            .graceful_shutdown_on(runtime.shutdown_signal())
            .run(reconcile, error_policy, context)
            .for_each(|_| async {});
        controllers.push(running);
    }
    runtime.mark_ready_when(synced);
    runtime.track_phases("ModelAPI", PHASES, main_stores, phase_of);
    futures::future::join_all(controllers).await;
    Ok(())
}
