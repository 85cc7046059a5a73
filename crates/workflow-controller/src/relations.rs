//! Who must look again when something changes, kept from watch events (never by scanning a
//! cache): the agents each workflow names (its `Ready` condition says whether they exist), the
//! agents each unfinished run names (a step waits for its agent to be ready), and the runs of
//! each workflow (its history, its active runs). A run's start or end wakes its workflow.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex};

use futures::{Stream, StreamExt};
use kaos_api::workflow::{AgentWorkflow, AgentWorkflowRun};
use kaos_workload::cache::Events;
use kaos_workload::trigger::index::name_of;
use kaos_workload::trigger::index::{Name, Relation, RelationIndex};
use kaos_workload::trigger::{ChangeTracker, Relist, receive};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::Event;
use tokio::sync::mpsc;

use crate::agents::view::{AgentView, existence_view, readiness_view};

/// An edge to an Agent of the namespace.
pub const AGENT: Relation = "agent";
/// A run's edge to its workflow.
pub const WORKFLOW: Relation = "workflow";

pub type Index = Arc<Mutex<RelationIndex>>;

/// A workflow reads whether the agents its steps name exist.
pub fn workflow_edges(workflow: &AgentWorkflow) -> Vec<(Relation, String)> {
    workflow
        .spec
        .steps
        .iter()
        .map(|step| (AGENT, step.agent_ref.clone()))
        .collect()
}

/// A run belongs to its workflow; while unfinished, it reads the agents of its plan.
pub fn run_edges(run: &AgentWorkflowRun) -> Vec<(Relation, String)> {
    let mut edges = vec![(WORKFLOW, run.spec.workflow_ref.clone())];
    if let Some(status) = &run.status
        && !status.phase.is_some_and(|phase| phase.is_finished())
    {
        edges.extend(
            status
                .plan
                .iter()
                .map(|step| (AGENT, step.agent_ref.clone())),
        );
    }
    edges
}

/// Keeps `index` in step with the edges of each event's object.
pub fn keep_edges<K: kube::Resource>(
    index: &Index,
    edges: fn(&K) -> Vec<(Relation, String)>,
    event: &Event<K>,
) {
    index
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .observe(event, edges)
}

/// The runs of workflow `name` in `namespace`, by name.
pub fn runs_of(index: &Index, namespace: &str, workflow: &str) -> Vec<String> {
    index
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .dependents(WORKFLOW, namespace, workflow)
}

/// Tells which workflows to wake when their runs start, end, appear or go: a digest per run of
/// what its workflow reads of it (its phase, when it finished, whether it is being deleted).
/// Step progress inside a run wakes nothing.
#[derive(Default)]
pub struct RunChanges {
    /// Per run: the digest and the workflow it names.
    seen: HashMap<Name, (u64, String)>,
    relist: Relist<Name>,
}

impl RunChanges {
    /// The workflows (namespace, name) this event concerns.
    pub fn observe(&mut self, event: &Event<AgentWorkflowRun>) -> Vec<Name> {
        match event {
            Event::Init => {
                self.relist.start();
                Vec::new()
            }
            Event::InitApply(run) | Event::Apply(run) => {
                let name = name_of(run);
                if let Event::InitApply(_) = event {
                    self.relist.shows(&name);
                }
                let digest = workflow_view(run);
                let workflow = run.spec.workflow_ref.clone();
                let previous = self.seen.insert(name.clone(), (digest, workflow.clone()));
                match previous {
                    Some((before, _)) if before == digest => Vec::new(),
                    _ => vec![(name.0, workflow)],
                }
            }
            Event::Delete(run) => {
                let name = name_of(run);
                self.seen.remove(&name);
                vec![(name.0, run.spec.workflow_ref.clone())]
            }
            Event::InitDone => {
                let gone = self.relist.end(&mut self.seen);
                gone.into_iter()
                    .map(|(name, (_, workflow))| (name.0, workflow))
                    .collect()
            }
        }
    }
}

fn workflow_view(run: &AgentWorkflowRun) -> u64 {
    let status = run.status.as_ref();
    let mut hasher = DefaultHasher::new();
    (
        status.and_then(|s| s.phase),
        status.and_then(|s| s.completion_time.as_ref().map(|t| t.0.as_second())),
        run.metadata.deletion_timestamp.is_some(),
    )
        .hash(&mut hasher);
    hasher.finish()
}

/// Sends each agent change to the workflows that name it (when it appears or goes) and to the
/// unfinished runs that name it (when its readiness or endpoint changes): one watch, two
/// consumers.
pub fn agent_dependents(
    events: Events<AgentView>,
    workflows: &Index,
    runs: &Index,
) -> (
    impl Stream<Item = ObjectRef<AgentWorkflow>> + Send + 'static,
    impl Stream<Item = ObjectRef<AgentWorkflowRun>> + Send + 'static,
) {
    let (workflow_tx, workflow_rx) = mpsc::unbounded_channel();
    let (run_tx, run_rx) = mpsc::unbounded_channel();
    let (workflows, runs) = (workflows.clone(), runs.clone());
    let mut existence = ChangeTracker::new(existence_view);
    let mut readiness = ChangeTracker::new(readiness_view);
    tokio::spawn(events.for_each(move |event| {
        if let Ok(event) = event {
            let dependents = |index: &Index, (namespace, name): &Name| {
                index
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .dependents(AGENT, namespace, name)
                    .into_iter()
                    .map(|dependent| (namespace.clone(), dependent))
                    .collect::<Vec<_>>()
            };
            for agent in existence.observe(&event) {
                for (namespace, workflow) in dependents(&workflows, &agent) {
                    let _ = workflow_tx.send(ObjectRef::new(&workflow).within(&namespace));
                }
            }
            for agent in readiness.observe(&event) {
                for (namespace, run) in dependents(&runs, &agent) {
                    let _ = run_tx.send(ObjectRef::new(&run).within(&namespace));
                }
            }
        }
        futures::future::ready(())
    }));
    (receive(workflow_rx), receive(run_rx))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(phase: Option<&str>) -> AgentWorkflowRun {
        let mut value = json!({"apiVersion": "kaos.tools/v1alpha1", "kind": "AgentWorkflowRun",
            "metadata": {"name": "r", "namespace": "ns"}, "spec": {"workflowRef": "wf"},
            "status": {"plan": [{"name": "a", "agentRef": "writer"}], "steps": [{"name": "a"}]}});
        if let Some(phase) = phase {
            value["status"]["phase"] = json!(phase);
        }
        serde_json::from_value(value).expect("a run")
    }

    fn wf() -> Vec<Name> {
        vec![("ns".to_string(), "wf".to_string())]
    }

    #[test]
    fn a_run_wakes_its_workflow_when_it_starts_ends_or_goes() {
        let mut changes = RunChanges::default();
        assert_eq!(changes.observe(&Event::Apply(run(None))), wf());
        assert_eq!(changes.observe(&Event::Apply(run(Some("Running")))), wf());
        let mut progressed = run(Some("Running"));
        if let Some(status) = progressed.status.as_mut() {
            status.steps[0].attempt = 1;
        }
        assert!(changes.observe(&Event::Apply(progressed)).is_empty());
        assert_eq!(changes.observe(&Event::Apply(run(Some("Succeeded")))), wf());
        assert_eq!(
            changes.observe(&Event::Delete(run(Some("Succeeded")))),
            wf()
        );
        // A relist that no longer has it says so.
        changes.observe(&Event::Apply(run(None)));
        changes.observe(&Event::Init);
        assert_eq!(changes.observe(&Event::InitDone), wf());
    }

    #[test]
    fn only_an_unfinished_run_reads_its_agents() {
        assert_eq!(
            run_edges(&run(Some("Running"))),
            [(WORKFLOW, "wf".to_string()), (AGENT, "writer".to_string())]
        );
        assert_eq!(
            run_edges(&run(Some("Failed"))),
            [(WORKFLOW, "wf".to_string())]
        );
    }
}
