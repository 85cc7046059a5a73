//! Wires the caches, the relation index and the triggers into one kube-runtime Controller per
//! watched namespace. A MemoryStore is reconciled when its spec changes or it is deleted, when
//! one of its children changes, and when the readiness or endpoint of a ModelAPI it names
//! changes (found in the relation index kept from the MemoryStore watch events, never by
//! scanning the MemoryStore cache).

use std::sync::{Arc, Mutex};

use kaos_api::memorystore::MemoryStore;
use kaos_api::modelapi::ModelAPI;
use kaos_runtime::Runtime;
use kaos_workload::trigger::dependents_of;
use kaos_workload::trigger::index::name_of;
use kaos_workload::trigger::index::{Relation, RelationIndex};
use kaos_workload::wiring::{ChildKinds, Workload, run_workload};
use kube::runtime::watcher::Event;

use crate::build::CHILD_SELECTOR;
use crate::models;
use crate::reconcile::{Context, phase_of};
use crate::settings::Settings;

pub const PHASES: &[&str] = &kaos_api::common::Phase::NAMES;

pub async fn run(runtime: Runtime, settings: Settings) -> anyhow::Result<()> {
    // Replicas fixed by the storage (1 on a local claim), so no autoscaler; no finalizer, as
    // in KAOS: the children go by garbage collection.
    let workload = Workload::new(CHILD_SELECTOR, phase_of)
        .children(ChildKinds {
            claims: true,
            autoscalers: false,
            ..ChildKinds::workload()
        })
        .gateway(settings.gateway.gateway_api_enabled);
    run_workload(&runtime, workload, |ns| {
        let index = Arc::new(Mutex::new(RelationIndex::default()));
        let edges = index.clone();
        ns.on_event(move |event: &Event<MemoryStore>| {
            let mut index = edges.lock().unwrap_or_else(|e| e.into_inner());
            match event {
                Event::Apply(store) | Event::InitApply(store) => {
                    index.set(&name_of(store), store_edges(store))
                }
                Event::Delete(store) => index.remove(&name_of(store)),
                Event::Init | Event::InitDone => {}
            }
        });
        let (model_apis, model_api_events) = ns.watch::<ModelAPI>();
        ns.reconcile_on(dependents_of(
            model_api_events,
            [(MODEL_API, models::model_api_view)],
            index,
        ));
        Context {
            core: ns.core(),
            settings: settings.clone(),
            model_apis,
            ids: ns.ids(),
        }
    })
    .await
}

/// The relation of a store to each ModelAPI it names.
pub const MODEL_API: Relation = "modelapi";

/// The edges of a store: the summarization and the embedding ModelAPI.
pub fn store_edges(store: &MemoryStore) -> Vec<(Relation, String)> {
    let models = &store.spec.models;
    vec![
        (MODEL_API, models.summarization.model_api.clone()),
        (MODEL_API, models.embedding.model_api.clone()),
    ]
}
