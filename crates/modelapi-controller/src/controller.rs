//! Wires the caches and the reconciler into kube-runtime Controllers (one per watched
//! namespace, or one for all). A ModelAPI is reconciled when its spec changes, it is deleted,
//! or one of its children (Deployment, Service, LiteLLM ConfigMap, HTTPRoute) changes.

use kaos_runtime::Runtime;
use kaos_workload::wiring::{ChildKinds, Workload, run_workload};

use crate::build::CHILD_SELECTOR;
use crate::reconcile::{Context, FINALIZER, phase_of};
use crate::settings::Settings;

pub const PHASES: &[&str] = &kaos_api::common::Phase::NAMES;

pub async fn run(runtime: Runtime, settings: Settings) -> anyhow::Result<()> {
    let workload = Workload::new(CHILD_SELECTOR, phase_of)
        .children(ChildKinds {
            config_maps: true,
            secrets: true,
            ..ChildKinds::workload()
        })
        .finalizer(FINALIZER)
        .gateway(settings.gateway.gateway_api_enabled);
    run_workload(&runtime, workload, |ns| Context {
        core: ns.core(),
        settings: settings.clone(),
        ids: ns.ids(),
    })
    .await
}
