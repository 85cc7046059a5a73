//! Which AgentWorkflowRuns hold which agents awake: a step of an unfinished run that is being
//! sent (`Dispatching`) or runs (`Running`) pins the agent its plan names, so a suspended agent
//! is woken for it and kept at one pod until no step is left on it (`suspension`). Kept from the
//! run watch events, never by scanning; the runs' statuses are the only record, so a run that
//! ends, or is deleted, lets its agents sleep again with no write of its own.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use kaos_api::workflow::{AgentWorkflowRun, RunPhase, StepPhase};
use kaos_workload::cache::Events;
use kaos_workload::cache::packed::SlimMeta;
use kaos_workload::trigger::Relist;
use kaos_workload::trigger::index::{Name, name_of};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::Event;
use serde::Deserialize;
use tokio::sync::mpsc;

use crate::cached::CachedAgent;

/// An AgentWorkflowRun as the agent controller keeps it: its name and the agents its steps in
/// flight pin (nothing else of its status, whose outputs can be large).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(from = "RunRead")]
pub struct RunPins {
    pub metadata: SlimMeta,
    /// The agents pinned, sorted, each once.
    pub pinned: Box<[Box<str>]>,
}

kaos_workload::served_as!([] RunPins, AgentWorkflowRun);

/// What is read of a run to find its pins.
#[derive(Deserialize)]
struct RunRead {
    metadata: SlimMeta,
    #[serde(default)]
    status: Option<RunStatusRead>,
}

#[derive(Deserialize)]
struct RunStatusRead {
    #[serde(default)]
    phase: Option<RunPhase>,
    #[serde(default)]
    plan: Vec<PlannedRead>,
    #[serde(default)]
    steps: Vec<StepRead>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PlannedRead {
    name: String,
    agent_ref: String,
}

#[derive(Deserialize)]
struct StepRead {
    name: String,
    #[serde(default)]
    phase: StepPhase,
}

impl From<RunRead> for RunPins {
    fn from(run: RunRead) -> Self {
        // A run being deleted has its tasks canceled: it holds nothing awake.
        let going = run.metadata.meta.deletion_timestamp.is_some();
        let pinned: BTreeSet<Box<str>> = match run.status {
            Some(status) if !going && !status.phase.is_some_and(RunPhase::is_finished) => status
                .steps
                .iter()
                .filter(|step| matches!(step.phase, StepPhase::Dispatching | StepPhase::Running))
                .filter_map(|step| status.plan.iter().find(|p| p.name == step.name))
                .map(|planned| Box::from(planned.agent_ref.as_str()))
                .collect(),
            _ => BTreeSet::new(),
        };
        RunPins {
            metadata: run.metadata,
            pinned: pinned.into_iter().collect(),
        }
    }
}

/// Per agent, the runs that pin it; per run, the agents it pins.
#[derive(Default)]
pub struct Pins {
    by_run: HashMap<Name, Box<[Box<str>]>>,
    by_agent: HashMap<Name, BTreeSet<String>>,
    relist: Relist<Name>,
}

pub type SharedPins = Arc<Mutex<Pins>>;

impl Pins {
    /// The runs that pin agent `name` in `namespace`, sorted.
    pub fn of(&self, namespace: &str, name: &str) -> Vec<String> {
        self.by_agent
            .get(&(namespace.to_string(), name.to_string()))
            .map(|runs| runs.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Takes in a run watch event; returns the agents whose pins changed.
    pub fn observe(&mut self, event: &Event<RunPins>) -> Vec<Name> {
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
                self.set(name, run.pinned.clone())
            }
            Event::Delete(run) => self.set(name_of(run), Box::default()),
            Event::InitDone => {
                let mut known: HashMap<Name, ()> =
                    self.by_run.keys().map(|run| (run.clone(), ())).collect();
                let gone = self.relist.end(&mut known);
                gone.into_iter()
                    .flat_map(|(run, ())| self.set(run, Box::default()))
                    .collect()
            }
        }
    }

    fn set(&mut self, run: Name, pinned: Box<[Box<str>]>) -> Vec<Name> {
        let before = match pinned.is_empty() {
            true => self.by_run.remove(&run),
            false => self.by_run.insert(run.clone(), pinned.clone()),
        }
        .unwrap_or_default();
        if before == pinned {
            return Vec::new();
        }
        let (namespace, run_name) = run;
        let agent = |name: &str| (namespace.clone(), name.to_string());
        let mut changed = Vec::new();
        for gone in before.iter().filter(|a| !pinned.contains(a)) {
            if let Some(runs) = self.by_agent.get_mut(&agent(gone)) {
                runs.remove(&run_name);
                if runs.is_empty() {
                    self.by_agent.remove(&agent(gone));
                }
            }
            changed.push(agent(gone));
        }
        for new in pinned.iter().filter(|a| !before.contains(a)) {
            self.by_agent
                .entry(agent(new))
                .or_default()
                .insert(run_name.clone());
            changed.push(agent(new));
        }
        changed
    }
}

/// Keeps `pins` from the run watch and sends each agent whose pins changed.
pub fn keep_pins(
    events: Events<RunPins>,
    pins: SharedPins,
) -> impl futures::Stream<Item = ObjectRef<CachedAgent>> + Send + 'static {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(events.for_each(move |event| {
        if let Ok(event) = event {
            let changed = pins
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .observe(&event);
            for (namespace, agent) in changed {
                let _ = tx.send(ObjectRef::new(&agent).within(&namespace));
            }
        }
        futures::future::ready(())
    }));
    kaos_workload::trigger::receive(rx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(name: &str, phase: &str, steps: &[(&str, &str, &str)]) -> RunPins {
        let plan: Vec<_> = steps
            .iter()
            .map(|(step, agent, _)| json!({"name": step, "agentRef": agent}))
            .collect();
        let statuses: Vec<_> = steps
            .iter()
            .map(|(step, _, phase)| json!({"name": step, "phase": phase}))
            .collect();
        serde_json::from_value(
            json!({"apiVersion": "kaos.tools/v1alpha1", "kind": "AgentWorkflowRun",
            "metadata": {"name": name, "namespace": "ns"}, "spec": {"workflowRef": "wf"},
            "status": {"phase": phase, "plan": plan, "steps": statuses,
                       "input": "x".repeat(100)}}),
        )
        .expect("a run")
    }

    fn agents(names: &[&str]) -> Vec<Name> {
        names
            .iter()
            .map(|n| ("ns".to_string(), n.to_string()))
            .collect()
    }

    #[test]
    fn only_steps_in_flight_of_an_unfinished_run_pin_their_agent() {
        let running = run(
            "r",
            "Running",
            &[
                ("a", "writer", "Succeeded"),
                ("b", "editor", "Dispatching"),
                ("c", "critic", "Running"),
                ("d", "critic", "Pending"),
            ],
        );
        assert_eq!(&*running.pinned, [Box::from("critic"), Box::from("editor")]);
        let done = run("r", "Succeeded", &[("c", "critic", "Running")]);
        assert!(done.pinned.is_empty());
    }

    #[test]
    fn the_agents_whose_pins_change_are_told() {
        let mut pins = Pins::default();
        let first = run("r1", "Running", &[("a", "writer", "Dispatching")]);
        assert_eq!(
            pins.observe(&Event::Apply(first.clone())),
            agents(&["writer"])
        );
        assert!(pins.observe(&Event::Apply(first)).is_empty(), "no change");
        let other = run("r2", "Running", &[("a", "writer", "Running")]);
        assert_eq!(pins.observe(&Event::Apply(other)), agents(&["writer"]));
        assert_eq!(pins.of("ns", "writer"), ["r1", "r2"]);
        let moved = run(
            "r1",
            "Running",
            &[("a", "writer", "Succeeded"), ("b", "editor", "Running")],
        );
        assert_eq!(
            pins.observe(&Event::Apply(moved)),
            agents(&["writer", "editor"])
        );
        assert_eq!(pins.of("ns", "writer"), ["r2"]);
        assert_eq!(pins.of("ns", "editor"), ["r1"]);
        // A relist that no longer shows r2 lets the writer go.
        pins.observe(&Event::Init);
        let r1 = run("r1", "Running", &[("b", "editor", "Running")]);
        assert!(pins.observe(&Event::InitApply(r1)).is_empty());
        assert_eq!(pins.observe(&Event::InitDone), agents(&["writer"]));
        assert!(pins.of("ns", "writer").is_empty());
        let r1 = run("r1", "Failed", &[("b", "editor", "Running")]);
        assert_eq!(pins.observe(&Event::Delete(r1)), agents(&["editor"]));
        assert!(pins.by_agent.is_empty() && pins.by_run.is_empty());
    }
}
