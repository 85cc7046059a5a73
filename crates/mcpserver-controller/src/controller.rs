//! Wires the caches and the reconciler into kube-runtime Controllers (one per watched
//! namespace, or one for all). Besides its children, each watches the runtime registry: a
//! change of the registry re-reconciles every MCPServer, and those whose runtime changed roll.

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kaos_runtime::Runtime;
use kaos_workload::cache;
use kaos_workload::trigger::receive;
use kaos_workload::wiring::{Workload, run_workload};
use kube::api::Api;
use kube::runtime::reflector::Store;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use tokio::sync::{mpsc, watch};

use crate::build::CHILD_SELECTOR;
use crate::reconcile::{Context, FINALIZER, phase_of};
use crate::registry;
use crate::settings::Settings;
use crate::verification::Verifier;

pub const PHASES: &[&str] = &kaos_api::common::Phase::NAMES;

pub async fn run(runtime: Runtime, settings: Settings) -> anyhow::Result<()> {
    let (registry, registry_changes) = watch_registry(&runtime, &settings.system_namespace);
    let verifier = Verifier::new(&settings.protocol, &settings.mcp_address_overrides);
    let workload = Workload::new(CHILD_SELECTOR, phase_of)
        .finalizer(FINALIZER)
        .gateway(settings.gateway.gateway_api_enabled);
    run_workload(&runtime, workload, |ns| {
        ns.reads(&registry);
        ns.reconcile_all_on(changes(registry_changes.clone()));
        let (wake, woken) = mpsc::unbounded_channel();
        ns.reconcile_on(receive(woken));
        Context {
            core: ns.core(),
            settings: settings.clone(),
            registry: registry.clone(),
            ids: ns.ids(),
            verifier: verifier.clone(),
            wake,
        }
    })
    .await
}

/// The runtime registry, watched once for the process however many namespaces it serves (the
/// ConfigMap lives in the operator's namespace): its cache, and a counter each of its changes
/// moves.
fn watch_registry(runtime: &Runtime, namespace: &str) -> (Store<ConfigMap>, watch::Receiver<u64>) {
    let (store, writer) = reflector::store();
    let api: Api<ConfigMap> = Api::namespaced(runtime.client.clone(), namespace);
    let only_it =
        watcher::Config::default().fields(&format!("metadata.name={}", registry::CONFIG_MAP));
    let events = watcher(api, only_it)
        .default_backoff()
        .modify(cache::slim::<ConfigMap>)
        .reflect(writer);
    let events = cache::relist::after_relists(events);
    let mut touched = cache::without_errors(events, "configmaps".into())
        .touched_objects()
        .boxed();
    let (changed, changes) = watch::channel(0);
    tokio::spawn(async move {
        while let Some(touched) = touched.next().await {
            if touched.is_ok() {
                changed.send_modify(|count| *count += 1);
            }
        }
    });
    (store, changes)
}

/// A stream of the registry's changes, for one namespace's Controller (changes that come faster
/// than it takes them merge into one).
fn changes(changes: watch::Receiver<u64>) -> impl Stream<Item = ()> + Send + 'static {
    futures::stream::unfold(changes, |mut changes| async move {
        changes.changed().await.ok().map(|()| ((), changes))
    })
}
