//! Wires the watch caches, triggers and reconciler into kube-runtime Controllers. An Agent is
//! reconciled when it or its children change, when its ModelAPI or an MCPServer it uses
//! changes, and when a peer it lists in `agentNetwork.access` changes.

use std::sync::Arc;

use futures::{FutureExt, StreamExt};
use kaos_api::agent::Agent;
use kaos_api::mcpserver::MCPServer;
use kaos_api::modelapi::ModelAPI;
use kaos_runtime::Runtime;
use kaos_runtime::reconciler::{controller_with_children, watch_routes};
use kaos_runtime::stores;
use kube::ResourceExt;

use crate::build::CHILD_SELECTOR;
use crate::reconcile::{Context, agents_where, error_policy, phase_of, reconcile};
use crate::settings::Settings;

pub const PHASES: &[&str] = &["Pending", "Ready", "Failed", "Waiting"];

pub async fn run(runtime: Runtime, settings: Settings) -> anyhow::Result<()> {
    let routes = watch_routes(&runtime, settings.gateway.gateway_api_enabled).await;
    let events = runtime.events();
    let (mut synced, mut main_stores, mut controllers) = (Vec::new(), Vec::new(), Vec::new());
    for namespace in runtime.namespaces() {
        let ns = namespace.as_deref();
        let (controller, children) =
            controller_with_children::<Agent>(&runtime, ns, CHILD_SELECTOR, routes);
        let agents = controller.store();
        let (model_apis, model_api_changes) = stores::full::<ModelAPI>(&runtime.client, ns, "");
        let (mcp_servers, mcp_server_changes) = stores::full::<MCPServer>(&runtime.client, ns, "");
        let (peer_tx, peer_rx) = tokio::sync::mpsc::unbounded_channel();
        let by_model_api = {
            let agents = agents.clone();
            move |m: ModelAPI| {
                let name = m.name_any();
                agents_where(&agents, &m.namespace().unwrap_or_default(), |a| {
                    a.spec.model_api == name
                })
            }
        };
        let by_mcp_server = {
            let agents = agents.clone();
            move |s: MCPServer| {
                let name = s.name_any();
                agents_where(&agents, &s.namespace().unwrap_or_default(), |a| {
                    a.spec.mcp_servers.contains(&name)
                })
            }
        };
        let controller = controller
            .watches_stream(model_api_changes, by_model_api)
            .watches_stream(mcp_server_changes, by_mcp_server)
            .reconcile_on(futures::stream::unfold(peer_rx, |mut rx| async move {
                rx.recv().await.map(|r| (r, rx))
            }));
        main_stores.push(agents.clone());
        let ready = (agents.clone(), model_apis.clone(), mcp_servers.clone());
        synced.push(
            async move {
                let _ = ready.0.wait_until_ready().await;
                let _ = ready.1.wait_until_ready().await;
                let _ = ready.2.wait_until_ready().await;
            }
            .boxed(),
        );
        let context = Arc::new(Context {
            runtime: runtime.clone(),
            settings: settings.clone(),
            children,
            model_apis,
            mcp_servers,
            agents,
            peer_changes: peer_tx,
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
    runtime.track_phases("Agent", PHASES, main_stores, phase_of);
    futures::future::join_all(controllers).await;
    Ok(())
}
