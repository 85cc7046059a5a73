//! What the ModelAPI controller reads of Agents: which agents use a ModelAPI and with what
//! budget, so that its LiteLLM config carries one entry per budgeted agent. The cache keeps of
//! each Agent only its name, uid, ModelAPI, model and own budget; a ModelAPI is reconciled when
//! that changes for one of its agents.

use std::collections::HashMap;

use futures::{Stream, StreamExt, stream};
use kaos_api::agent::Agent;
use kaos_api::budget::Budget;
use kaos_api::modelapi::{ModelAPI, ModelAPISpec, effective_budget};
use kaos_workload::cache::Events;
use kaos_workload::cache::packed::SlimMeta;
use kaos_workload::served_as;
use kaos_workload::trigger::index::{Name, name_of};
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher::Event;
use serde::Deserialize;

/// An Agent as this controller keeps it.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(from = "Agent")]
pub struct AgentOfModelApi {
    pub metadata: SlimMeta,
    pub model_api: Box<str>,
    pub model: Box<str>,
    pub budget: Option<Box<Budget>>,
}

served_as!([] AgentOfModelApi, Agent);

impl From<Agent> for AgentOfModelApi {
    fn from(agent: Agent) -> Self {
        let mut meta = agent.metadata;
        // Only the name, namespace and uid are read: labels and annotations are not kept.
        meta.labels = None;
        meta.annotations = None;
        AgentOfModelApi {
            metadata: meta.into(),
            model_api: agent.spec.model_api.into(),
            model: agent.spec.model.into(),
            budget: agent.spec.budget.map(Box::new),
        }
    }
}

/// A budgeted agent of a ModelAPI, as its LiteLLM entry needs it.
#[derive(Clone, Debug, PartialEq)]
pub struct BudgetedAgent {
    pub namespace: String,
    pub name: String,
    /// The entry's `model_info.id`: LiteLLM keys the counters on it.
    pub uid: String,
    pub model: String,
    pub budget: Budget,
}

/// The agents of `model_api` that have a budget (their own or its default), by name. Agents
/// not stored yet (no uid) are left out until they are.
pub fn budgeted_agents(
    agents: &Store<AgentOfModelApi>,
    model_api: &ModelAPI,
) -> Vec<BudgetedAgent> {
    let mut found: Vec<BudgetedAgent> = agents
        .state()
        .iter()
        .filter_map(|a| {
            let meta = &a.metadata.meta;
            let (namespace, name, uid) = (
                meta.namespace.as_deref()?,
                meta.name.as_deref()?,
                meta.uid.as_deref()?,
            );
            budgeted(
                namespace,
                name,
                uid,
                &a.model,
                &a.model_api,
                a.budget.as_deref(),
                model_api,
            )
        })
        .collect();
    found.sort_by(|a, b| a.name.cmp(&b.name));
    found
}

/// The budgeted agent `namespace/name` (of `uid`) is, if it uses `model_api` and has a budget.
pub fn budgeted(
    namespace: &str,
    name: &str,
    uid: &str,
    model: &str,
    its_model_api: &str,
    own: Option<&Budget>,
    model_api: &ModelAPI,
) -> Option<BudgetedAgent> {
    if its_model_api != model_api.name_any() || Some(namespace) != model_api.namespace().as_deref()
    {
        return None;
    }
    let budget = effective_budget(own, Some(&model_api.spec))?;
    Some(BudgetedAgent {
        namespace: namespace.into(),
        name: name.into(),
        uid: uid.into(),
        model: model.into(),
        budget: budget.clone(),
    })
}

/// Whether a ModelAPI's default budget could concern an agent without one of its own.
pub fn has_default_budget(spec: &ModelAPISpec) -> bool {
    spec.proxy_config
        .as_ref()
        .is_some_and(|p| p.default_agent_budget.is_some())
}

/// What a ModelAPI's config reads of one agent.
type Entry = (Box<str>, Box<str>, Option<Box<str>>, Option<Box<Budget>>);

fn entry_of(agent: &AgentOfModelApi) -> Entry {
    (
        agent.model_api.clone(),
        agent.model.clone(),
        agent.metadata.meta.uid.as_deref().map(Box::from),
        agent.budget.clone(),
    )
}

/// The ModelAPIs to reconcile when an agent's entry changes: the one it uses, and the one it
/// used before when that changed, when the agent has a budget (before or after) or the ModelAPI
/// gives a default one (`has_default(namespace, model_api)`). Agents without a budget never
/// reconcile a ModelAPI without a default. Work per event: one map lookup.
pub fn model_apis_of_changed_agents(
    events: Events<AgentOfModelApi>,
    has_default: impl Fn(&str, &str) -> bool + Send + 'static,
) -> impl Stream<Item = ObjectRef<ModelAPI>> + Send + 'static {
    let mut seen: HashMap<Name, Entry> = HashMap::new();
    let mut relist: Option<HashMap<Name, Entry>> = None;
    events.flat_map(move |event| {
        let mut changed: Vec<ObjectRef<ModelAPI>> = Vec::new();
        let mut touch = |namespace: &str, entry: &Entry| {
            if entry.3.is_some() || has_default(namespace, &entry.0) {
                changed.push(ObjectRef::new(&entry.0).within(namespace));
            }
        };
        match event {
            Ok(Event::Init) => relist = Some(HashMap::new()),
            Ok(Event::InitApply(agent)) | Ok(Event::Apply(agent)) => {
                let name = name_of(&agent);
                let entry = entry_of(&agent);
                if let Some(shown) = relist.as_mut() {
                    shown.insert(name.clone(), entry.clone());
                }
                match seen.insert(name.clone(), entry.clone()) {
                    Some(before) if before == entry => {}
                    Some(before) => {
                        touch(&name.0, &entry);
                        touch(&name.0, &before);
                    }
                    None => touch(&name.0, &entry),
                }
            }
            Ok(Event::Delete(agent)) => {
                let name = name_of(&agent);
                if let Some(before) = seen.remove(&name) {
                    touch(&name.0, &before);
                }
            }
            Ok(Event::InitDone) => {
                if let Some(shown) = relist.take() {
                    for (name, before) in std::mem::replace(&mut seen, shown) {
                        if !seen.contains_key(&name) {
                            touch(&name.0, &before);
                        }
                    }
                }
            }
            Err(_) => {}
        }
        changed.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        changed.dedup();
        stream::iter(changed)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use kaos_api::agent::AgentSpec;

    fn agent(name: &str, model_api: &str, tokens: Option<i64>) -> AgentOfModelApi {
        let spec: AgentSpec =
            serde_json::from_value(serde_json::json!({"modelAPI": model_api, "model": "gpt-4o"}))
                .expect("a spec");
        let mut agent = Agent::new(name, spec);
        agent.metadata.namespace = Some("ns".into());
        agent.metadata.uid = Some(format!("uid-{name}"));
        agent.spec.budget = tokens.map(|t| Budget {
            tokens_per_day: Some(t),
            ..Default::default()
        });
        agent.into()
    }

    async fn triggered(events: Vec<Event<AgentOfModelApi>>) -> Vec<String> {
        let events = stream::iter(events.into_iter().map(Ok)).boxed();
        model_apis_of_changed_agents(events, |_, model_api| model_api == "defaulted")
            .map(|r| r.name)
            .collect()
            .await
    }

    #[tokio::test]
    async fn a_model_api_is_reconciled_only_when_an_agent_entry_of_it_changes() {
        let names = triggered(vec![
            Event::Apply(agent("a", "m1", Some(100))),
            // The same entry again (a status write, a label): nothing.
            Event::Apply(agent("a", "m1", Some(100))),
            Event::Apply(agent("a", "m1", Some(200))),
            // Moved to another ModelAPI: both.
            Event::Apply(agent("a", "m2", Some(200))),
            Event::Delete(agent("a", "m2", Some(200))),
        ])
        .await;
        assert_eq!(names, ["m1", "m1", "m1", "m2", "m2"]);
    }

    #[tokio::test]
    async fn a_relist_reports_the_agents_deleted_while_the_watch_was_down() {
        let names = triggered(vec![
            Event::Apply(agent("a", "m1", Some(100))),
            Event::Apply(agent("b", "m2", Some(100))),
            Event::Init,
            Event::InitApply(agent("a", "m1", Some(100))),
            Event::InitDone,
        ])
        .await;
        assert_eq!(names, ["m1", "m2", "m2"]);
    }

    #[tokio::test]
    async fn an_agent_without_a_budget_concerns_only_a_model_api_with_a_default() {
        let names = triggered(vec![
            Event::Apply(agent("a", "m1", None)),
            Event::Apply(agent("b", "defaulted", None)),
            // Given a budget, then losing it: both count.
            Event::Apply(agent("a", "m1", Some(100))),
            Event::Apply(agent("a", "m1", None)),
            Event::Delete(agent("a", "m1", None)),
        ])
        .await;
        assert_eq!(names, ["defaulted", "m1", "m1"]);
    }
}
