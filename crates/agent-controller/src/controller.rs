//! Wires the caches, the relation index and the triggers into one kube-runtime Controller per
//! watched namespace. An Agent is reconciled when its spec changes or it is deleted, when one
//! of its children changes, and when what it reads of a dependency changes: its ModelAPI's or an
//! MCPServer's readiness or endpoint, a peer's endpoint, its MemoryStore's readiness or read
//! ceiling. Dependents are found in the relation
//! index (kept from the Agent watch events), never by scanning the Agent cache. A budgeted
//! agent is also reconciled when the usage collector (one per process, reading every namespace's
//! caches) has something new for its status. And an agent is reconciled when the runs that pin it
//! change (`pins`: a workflow step wakes a suspended agent).

use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kaos_api::mcpserver::MCPServer;
use kaos_api::memorystore::MemoryStore;
use kaos_api::modelapi::ModelAPI;
use kaos_runtime::Runtime;
use kaos_workload::build::network_policy::NetworkPolicyArgs;
use kaos_workload::trigger::index::RelationIndex;
use kaos_workload::trigger::index::name_of;
use kaos_workload::trigger::{ChangeTracker, dependents_of, receive};
use kaos_workload::wiring::{Workload, run_workload};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher::Event;
use tokio::sync::mpsc;

use crate::cached::CachedAgent;
use crate::naming::CHILD_SELECTOR;
use crate::pins::{RunPins, SharedPins, keep_pins};
use crate::reconcile::{Context, FINALIZER, phase_of};
use crate::relations::{
    self, MCP_SERVER, MCP_SERVER_AWAITED, MEMORY_STORE, MODEL_API, MODEL_API_AWAITED, PEER,
};
use crate::settings::Settings;
use crate::usage::collector::{Collector, Sources};
use crate::usage::endpoints::SLICE_SELECTOR;

pub const PHASES: &[&str] = &kaos_api::agent::AgentPhase::NAMES;

type Index = Arc<Mutex<RelationIndex>>;

pub async fn run(runtime: Runtime, settings: Settings) -> anyhow::Result<()> {
    let workload = Workload::new(CHILD_SELECTOR, phase_of)
        .finalizer(FINALIZER)
        .gateway(settings.gateway.gateway_api_enabled);
    let collector = Collector::new(&runtime, &settings.usage);
    tokio::spawn(collector.clone().run());
    run_workload(&runtime, workload, |ns| {
        let index = Index::default();
        let (peer_tx, peer_rx) = mpsc::unbounded_channel();
        let policies = settings.data_plane.network_policy.clone();
        ns.on_event(agent_event_handler(index.clone(), peer_tx, policies));
        let (model_apis, model_api_events) = ns.watch::<ModelAPI>();
        let (mcp_servers, mcp_server_events) = ns.watch::<MCPServer>();
        let (memory_stores, memory_store_events) = ns.watch::<MemoryStore>();
        ns.reconcile_on(dependents_of(
            model_api_events,
            [
                (MODEL_API, relations::model_api_view),
                (MODEL_API_AWAITED, relations::awaited_model_api_view),
            ],
            index.clone(),
        ));
        ns.reconcile_on(dependents_of(
            mcp_server_events,
            [
                (MCP_SERVER, relations::mcp_server_view),
                (MCP_SERVER_AWAITED, relations::awaited_mcp_server_view),
            ],
            index.clone(),
        ));
        ns.reconcile_on(dependents_of(
            memory_store_events,
            [(MEMORY_STORE, relations::memory_store_view)],
            index.clone(),
        ));
        ns.reconcile_on(receive(peer_rx));
        let pins = SharedPins::default();
        let (_, run_events) = ns.watch::<RunPins>();
        ns.reconcile_on(keep_pins(run_events, pins.clone()));
        let (usage_tx, usage_rx) = mpsc::unbounded_channel();
        ns.reconcile_on(receive(usage_rx));
        collector.watch(Sources {
            agents: ns.store(),
            model_apis: model_apis.clone(),
            slices: watch_slices(ns.runtime, ns.namespace),
            index: index.clone(),
            wake: usage_tx,
        });
        Context {
            core: ns.core(),
            settings: settings.clone(),
            model_apis,
            mcp_servers,
            memory_stores,
            agents: ns.store(),
            ids: ns.ids(),
            index,
            pins,
            usage: collector.book(),
        }
    })
    .await
}

/// The EndpointSlices of ModelAPIs' Services in `namespace` (all when None), for the usage
/// collector, which waits for the cache itself: the process's readiness does not.
fn watch_slices(runtime: &Runtime, namespace: Option<&str>) -> Store<EndpointSlice> {
    let (store, events) =
        kaos_workload::cache::cache::<EndpointSlice>(&runtime.client, namespace, SLICE_SELECTOR);
    let shutdown = runtime.shutdown_signal();
    tokio::spawn(async move {
        // The store fills while its events are polled; nothing else reads them.
        tokio::select! {
            () = events.for_each(|_| async {}) => {}
            () = shutdown => {}
        }
    });
    store
}

/// Keeps the index of an Agent's edges and sends the listers of an agent whose endpoint
/// changed; with network policies, also the peers an agent started or stopped listing (their
/// policies admit exactly their listers).
fn agent_event_handler(
    index: Index,
    listers: mpsc::UnboundedSender<ObjectRef<CachedAgent>>,
    policies: NetworkPolicyArgs,
) -> impl FnMut(&Event<CachedAgent>) + Send + 'static {
    let mut peers = ChangeTracker::new(relations::peer_view);
    move |event| {
        let mut index = index.lock().unwrap_or_else(|e| e.into_inner());
        let (source, listed_before) = match event {
            Event::Apply(agent) | Event::InitApply(agent) | Event::Delete(agent) => {
                let source = name_of(agent);
                let before = index.targets(PEER, &source);
                (Some(source), before)
            }
            Event::Init | Event::InitDone => (None, Vec::new()),
        };
        match event {
            Event::Apply(agent) | Event::InitApply(agent) => {
                index.set(&name_of(agent), relations::edges(agent));
            }
            Event::Delete(agent) => index.remove(&name_of(agent)),
            Event::Init | Event::InitDone => {}
        }
        if let Some((namespace, name)) = source.filter(|(ns, _)| policies.applies_to(ns)) {
            let listed_now = index.targets(PEER, &(namespace.clone(), name));
            let changed = listed_before
                .iter()
                .filter(|p| !listed_now.contains(p))
                .chain(listed_now.iter().filter(|p| !listed_before.contains(p)));
            for peer in changed {
                let _ = listers.send(ObjectRef::new(peer).within(&namespace));
            }
        }
        for (namespace, name) in peers.observe(event) {
            for lister in index.dependents(PEER, &namespace, &name) {
                let _ = listers.send(ObjectRef::new(&lister).within(&namespace));
            }
        }
    }
}
