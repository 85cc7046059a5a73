//! Wires the caches and the reconciler into kube-runtime Controllers (one per watched
//! namespace, or one for all). A ModelAPI is reconciled when its spec changes, it is deleted,
//! or one of its children (Deployment, Service, LiteLLM ConfigMap, HTTPRoute) changes.

use std::sync::Arc;

use kaos_api::modelapi::ModelAPI;
use kaos_runtime::Runtime;
use kaos_workload::reconcile::Core;
use kaos_workload::trigger::claims::Claims;
use kaos_workload::wiring::{ChildKinds, Controllers, watch_routes, wire};

use crate::build::CHILD_SELECTOR;
use crate::reconcile::{Context, FINALIZER, phase_of};
use crate::settings::Settings;

pub const PHASES: &[&str] = &kaos_api::common::Phase::NAMES;

pub async fn run(runtime: Runtime, settings: Settings) -> anyhow::Result<()> {
    let routes = watch_routes(&runtime, settings.gateway.gateway_api_enabled).await;
    let kinds = ChildKinds {
        config_maps: true,
        secrets: true,
        ..ChildKinds::workload(routes)
    };
    let mut controllers = Controllers::new(&runtime);
    let mut claims = Claims::<ModelAPI>::new(&runtime.namespaces());
    for namespace in runtime.namespaces() {
        let (track_claims, rechecks) = claims.for_namespace(&namespace);
        let wiring = wire::<ModelAPI>(
            &runtime,
            namespace.as_deref(),
            CHILD_SELECTOR,
            kinds,
            track_claims,
        );
        let wiring = wiring.reconcile_on(rechecks);
        let context = Arc::new(Context {
            core: Core::new(runtime.clone(), wiring.children.clone(), Some(FINALIZER)),
            settings: settings.clone(),
            ids: claims.ids.clone(),
        });
        controllers.add(wiring, context, phase_of);
    }
    controllers.run().await
}
