//! Wires the caches and the reconciler into kube-runtime Controllers (one per watched
//! namespace, or one for all). Besides its children, each watches the runtime registry: a
//! change of the registry re-reconciles every MCPServer, and those whose runtime changed roll.

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kaos_api::mcpserver::MCPServer;
use kaos_runtime::Runtime;
use kaos_workload::cache;
use kaos_workload::reconcile::Core;
use kaos_workload::trigger::claims::Claims;
use kaos_workload::wiring::{ChildKinds, Controllers, watch_routes, wire};
use kube::api::Api;
use kube::runtime::{WatchStreamExt, reflector, watcher};

use crate::build::CHILD_SELECTOR;
use crate::reconcile::{Context, FINALIZER, phase_of};
use crate::registry;
use crate::settings::Settings;

pub const PHASES: &[&str] = &kaos_api::common::Phase::NAMES;

pub async fn run(runtime: Runtime, settings: Settings) -> anyhow::Result<()> {
    let routes = watch_routes(&runtime, settings.gateway.gateway_api_enabled).await;
    let kinds = ChildKinds::workload(routes);
    let mut controllers = Controllers::new(&runtime);
    let mut claims = Claims::<MCPServer>::new(&runtime.namespaces());
    for namespace in runtime.namespaces() {
        let (track_claims, rechecks) = claims.for_namespace(&namespace);
        let wiring = wire::<MCPServer>(
            &runtime,
            namespace.as_deref(),
            CHILD_SELECTOR,
            kinds,
            track_claims,
        );
        let mut wiring = wiring.reconcile_on(rechecks);
        let (registry_store, registry_writer) = reflector::store();
        let registry_api: Api<ConfigMap> =
            Api::namespaced(runtime.client.clone(), &settings.system_namespace);
        let registry_config =
            watcher::Config::default().fields(&format!("metadata.name={}", registry::CONFIG_MAP));
        let registry_events = watcher(registry_api, registry_config)
            .default_backoff()
            .modify(cache::slim::<ConfigMap>)
            .reflect(registry_writer);
        let registry_events = kaos_workload::cache::relist::after_relists(registry_events);
        let registry_changes = cache::without_errors(registry_events, "configmaps".into())
            .touched_objects()
            .filter_map(|r| async move { r.ok().map(|_| ()) });
        controllers.reads(&registry_store);
        let context = Arc::new(Context {
            core: Core::new(runtime.clone(), wiring.children.clone(), Some(FINALIZER)),
            settings: settings.clone(),
            registry: registry_store,
            ids: claims.ids.clone(),
        });
        wiring.controller = wiring.controller.reconcile_all_on(registry_changes);
        controllers.add(wiring, context, phase_of);
    }
    controllers.run().await
}
