//! Wires both kinds, per watched namespace: a status-only Controller for AgentWorkflows and one
//! for AgentWorkflowRuns, over a slim cache of Agents (existence, readiness, endpoint). A
//! workflow is reconciled when its spec changes, when an Agent it names appears or goes, when
//! one of its runs starts, ends, appears or goes, and at its next fire time. A run is
//! reconciled when it is created or deleted, when one of its sends ends, while its steps are in
//! flight (polling), when something is due (a retry, a timeout), and when an Agent it waits for
//! changes its readiness or endpoint. Dependents are found in relation indexes kept from the
//! watch events, never by scanning.

use std::sync::Arc;

use kaos_api::workflow::{AgentWorkflow, AgentWorkflowRun};
use kaos_runtime::Runtime;
use kaos_workload::cache;
use kaos_workload::reconcile::Core;
use kaos_workload::trigger::receive;
use kaos_workload::wiring::{ChildKinds, Controllers, wire};
use kube::runtime::reflector::ObjectRef;
use tokio::sync::mpsc;

use crate::a2a::A2aClient;
use crate::agents::dispatcher::Dispatcher;
use crate::agents::view::AgentView;
use crate::clock::Clock;
use crate::context::Context;
use crate::metrics::WorkflowMetrics;
use crate::reconcile::run::RUN_FINALIZER;
use crate::reconcile::workflow::workflow_phase;
use crate::relations::{
    Index, RunChanges, agent_dependents, keep_edges, run_edges, workflow_edges,
};
use crate::settings::Settings;

/// `kaos_resources` phases of AgentWorkflows: from their `Ready` condition.
pub const WORKFLOW_PHASES: &[&str] = &["Pending", "Ready", "NotReady"];
/// `kaos_resources` phases of AgentWorkflowRuns: every `RunPhase`.
pub const RUN_PHASES: &[&str] = &kaos_api::workflow::RunPhase::NAMES;

/// Runs the controller on the system clock.
pub async fn run(runtime: Runtime, settings: Settings) -> anyhow::Result<()> {
    run_with_clock(runtime, settings, Clock::system()).await
}

/// Runs the controller on `clock` (tests move it to a fire time).
pub async fn run_with_clock(
    runtime: Runtime,
    settings: Settings,
    clock: Clock,
) -> anyhow::Result<()> {
    let metrics = WorkflowMetrics::register(&runtime.metrics);
    let a2a = A2aClient::new();
    let status_only = ChildKinds::status_only();
    let mut controllers = Controllers::new(&runtime);
    for namespace in runtime.namespaces() {
        let ns = namespace.as_deref();
        let (workflow_index, run_index) = (Index::default(), Index::default());
        let (wake_workflow, workflow_wakes) = mpsc::unbounded_channel();
        let (wake_run, run_wakes) = mpsc::unbounded_channel();

        let edges = workflow_index.clone();
        let workflows = wire::<AgentWorkflow>(&runtime, ns, "", status_only, move |event| {
            keep_edges(&edges, workflow_edges, event)
        });
        let edges = run_index.clone();
        let mut run_changes = RunChanges::default();
        let runs = wire::<AgentWorkflowRun>(&runtime, ns, "", status_only, move |event| {
            keep_edges(&edges, run_edges, event);
            for (namespace, workflow) in run_changes.observe(event) {
                let _ = wake_workflow.send(ObjectRef::new(&workflow).within(&namespace));
            }
        });
        let (agents, agent_events) = cache::cache::<AgentView>(&runtime.client, ns, "");
        controllers.reads(&agents);

        let (agent_workflows, agent_runs) =
            agent_dependents(agent_events, &workflow_index, &run_index);
        let context = Arc::new(Context {
            workflows: Core::new(runtime.clone(), workflows.children.clone(), None),
            runs: Core::new(runtime.clone(), runs.children.clone(), Some(RUN_FINALIZER)),
            agents,
            workflow_store: workflows.store.clone(),
            run_store: runs.store.clone(),
            run_index,
            a2a: a2a.clone(),
            dispatcher: Dispatcher::new(a2a.clone(), wake_run),
            settings: settings.clone(),
            clock: clock.clone(),
            metrics: metrics.clone(),
        });
        let workflows = workflows
            .reconcile_on(agent_workflows)
            .reconcile_on(receive(workflow_wakes));
        let runs = runs
            .reconcile_on(agent_runs)
            .reconcile_on(receive(run_wakes));
        controllers.add(workflows, context.clone(), workflow_phase);
        controllers.add(runs, context, run_phase);
    }
    controllers.run().await
}

fn run_phase(run: &AgentWorkflowRun) -> Option<&'static str> {
    let phase = run.status.as_ref().and_then(|status| status.phase);
    phase.map(|phase| phase.as_str())
}
