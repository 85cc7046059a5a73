//! The usage collector: in the leader, every `USAGE_SCRAPE_INTERVAL_SECONDS`, it reads the
//! `/metrics/` of every ready proxy pod of each ModelAPI that has a budgeted agent (nothing at
//! all when no agent has a budget), a bounded number at once, each within its timeout; it adds
//! what each pod's counters grew by to each agent's ledger and decides what the agent's status
//! is to show (`merge`); when that changes, it keeps the new one in the book and asks that
//! namespace's Controller to reconcile the agent, whose status is then written from the book.
//! The collector itself writes nothing to the API.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{StreamExt, stream};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kaos_api::budget::Budget;
use kaos_api::modelapi::{ModelAPI, ModelAPIMode};
use kaos_runtime::Runtime;
use kaos_workload::cache::cached;
use kaos_workload::trigger::index::RelationIndex;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::cached::CachedAgent;
use crate::relations::{MODEL_API, MODEL_API_AWAITED};
use crate::usage::book::{Book, Entry};
use crate::usage::counters::PodReading;
use crate::usage::endpoints::{Pod, Pods, by_service, pods};
use crate::usage::merge::{Budgeted, Group, Lookup, merge};
use crate::usage::metrics::UsageMetrics;
use crate::usage::scrape::Scraper;
use crate::usage::settings::UsageSettings;
use crate::usage::window::DayWindow;

/// What the collector reads in one watched namespace (all, for a cluster-wide controller), and
/// where it asks for reconciles.
pub struct Sources {
    pub agents: Store<CachedAgent>,
    pub model_apis: Store<ModelAPI>,
    pub slices: Store<EndpointSlice>,
    /// The agents of each ModelAPI (for its `defaultAgentBudget`).
    pub index: Arc<Mutex<RelationIndex>>,
    pub wake: mpsc::UnboundedSender<ObjectRef<CachedAgent>>,
}

#[derive(Clone)]
pub struct Collector {
    runtime: Runtime,
    settings: UsageSettings,
    book: Book,
    sources: Arc<Mutex<Vec<Sources>>>,
    /// The process start time each proxy pod reported last (a change is a restart).
    starts: Arc<Mutex<HashMap<u64, f64>>>,
    metrics: UsageMetrics,
    scraper: Scraper,
}

impl Collector {
    /// A collector with its metrics registered in the runtime's registry.
    pub fn new(runtime: &Runtime, settings: &UsageSettings) -> Self {
        let book = Book::default();
        Self {
            runtime: runtime.clone(),
            settings: settings.clone(),
            metrics: UsageMetrics::register(&runtime.metrics, &book),
            book,
            sources: Arc::default(),
            starts: Arc::default(),
            scraper: Scraper::new(Duration::from_secs(
                settings.usage_scrape_timeout_seconds.max(1),
            )),
        }
    }

    /// What the reconciles read the agents' usage from.
    pub fn book(&self) -> Book {
        self.book.clone()
    }

    /// Adds a watched namespace's caches and reconcile trigger.
    pub fn watch(&self, sources: Sources) {
        lock(&self.sources).push(sources);
    }

    /// Runs the rounds until shutdown, from the moment this replica leads with synced caches.
    pub async fn run(self) {
        let shutdown = self.runtime.shutdown_signal();
        tokio::pin!(shutdown);
        let mut leading = Box::pin(self.runtime.leadership_gained());
        tokio::select! {
            _ = leading.next() => {}
            () = &mut shutdown => return,
        }
        let slices: Vec<Store<EndpointSlice>> = lock(&self.sources)
            .iter()
            .map(|s| s.slices.clone())
            .collect();
        for store in slices {
            tokio::select! {
                _ = store.wait_until_ready() => {}
                () = &mut shutdown => return,
            }
        }
        let every = Duration::from_secs(self.settings.usage_scrape_interval_seconds.max(1));
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticks.tick() => {}
                () = &mut shutdown => return,
            }
            if self.runtime.is_leader() {
                self.round(jiff::Timestamp::now().as_second()).await;
            } else {
                // A standby exports no agent and shows nothing (a leader that loses its Lease
                // exits; this is for runtimes that keep running).
                self.book.lock().clear();
            }
        }
    }

    /// One round at `now` (Unix seconds).
    async fn round(&self, now: i64) {
        let (groups, left) = self.gather(now);
        // Its status is to drop the usage (its budget went with its ModelAPI's default).
        for (source, namespace, name) in left {
            if let Some(source) = lock(&self.sources).get(source) {
                let _ = source.wake.send(ObjectRef::new(&name).within(&namespace));
            }
        }
        if groups.is_empty() {
            return;
        }
        let lookups: Vec<Lookup<'_>> = groups.iter().map(Lookup::of).collect();
        // By index: the futures borrow the groups, and no closure takes a reference.
        let jobs: Vec<(usize, usize)> = groups
            .iter()
            .enumerate()
            .flat_map(|(g, group)| {
                let count = group.pods.as_ref().map_or(0, |p| p.ready.len());
                (0..count).map(move |p| (g, p))
            })
            .collect();
        let (groups, lookups) = (&groups, &lookups);
        let readings: Vec<(usize, &Pod, Result<PodReading, String>)> = stream::iter(jobs)
            .map(|(g, p)| async move {
                let group = &groups[g];
                let pod = &group.pods.as_ref().map_or(&[][..], |p| p.ready.as_slice())[p];
                let reading = self
                    .scraper
                    .read(&pod.address, &lookups[g], group.agents.len())
                    .await;
                (g, pod, reading)
            })
            .buffer_unordered(self.settings.usage_scrapes_in_flight.max(1))
            .collect()
            .await;
        let mut by_group: Vec<Vec<(&Pod, Result<PodReading, String>)>> =
            groups.iter().map(|_| Vec::new()).collect();
        for (g, pod, reading) in readings {
            self.metrics.scraped(reading.is_ok());
            if let Err(why) = &reading {
                tracing::debug!(pod = %pod.describe(), "reading a proxy's usage failed: {why}");
            }
            by_group[g].push((pod, reading));
        }
        // A pod no longer listed is gone: so is its start time.
        let listed: HashSet<u64> = groups
            .iter()
            .filter_map(|g| g.pods.as_ref().ok())
            .flat_map(|p| p.listed.iter().copied())
            .collect();
        lock(&self.starts).retain(|key, _| listed.contains(key));
        let sources = lock(&self.sources);
        let interval = Duration::from_secs(self.settings.usage_status_interval_seconds);
        for (group, readings) in groups.iter().zip(by_group) {
            let clock = Instant::now();
            for agent in merge(
                &self.book,
                &self.starts,
                group,
                &readings,
                (now, clock),
                interval,
            ) {
                if let Some(source) = sources.get(group.source) {
                    let _ = source
                        .wake
                        .send(ObjectRef::new(&agent).within(&group.namespace));
                }
            }
        }
    }

    /// The budgeted agents by ModelAPI, and the book brought in line with them (an agent no
    /// longer budgeted leaves it, a new one enters it, resuming from its status); the agents that
    /// left it (source, namespace, name).
    fn gather(&self, now: i64) -> (Vec<Group>, Vec<(usize, String, String)>) {
        let sources = lock(&self.sources);
        let mut groups: HashMap<(String, String), Group> = HashMap::new();
        for (source, sources) in sources.iter().enumerate() {
            let slices = by_service(sources.slices.state());
            for (agent, model_api, budget) in budgeted(sources) {
                let meta = &agent.metadata.meta;
                let (Some(uid), Some(namespace), Some(name)) =
                    (meta.uid.clone(), meta.namespace.clone(), meta.name.clone())
                else {
                    continue;
                };
                let key = (namespace.clone(), model_api.clone());
                let group = groups.entry(key).or_insert_with(|| Group {
                    source,
                    pods: self.pods_of(sources, &slices, &namespace, &model_api),
                    namespace,
                    model_api,
                    agents: Vec::new(),
                });
                group.agents.push(Budgeted {
                    agent,
                    uid,
                    name,
                    budget,
                });
            }
        }
        let mut book = self.book.lock();
        let budgeted: HashSet<&str> = groups
            .values()
            .flat_map(|g| g.agents.iter().map(|a| a.uid.as_str()))
            .collect();
        let mut left = Vec::new();
        book.retain(|uid, entry| {
            let stays = budgeted.contains(&**uid);
            if !stays {
                left.push((
                    entry.source,
                    entry.namespace.to_string(),
                    entry.name.to_string(),
                ));
            }
            stays
        });
        for group in groups.values() {
            for agent in &group.agents {
                let window = DayWindow::containing(now, agent.budget.daily_reset_time());
                let entry = book.entry(agent.uid.as_str().into()).or_insert_with(|| {
                    Entry::new(
                        &agent.agent,
                        group.source,
                        &group.model_api,
                        agent.budget.clone(),
                        window,
                    )
                });
                if *entry.model_api != *group.model_api {
                    entry.model_api = group.model_api.as_str().into();
                }
                entry.budget = agent.budget.clone();
                entry.source = group.source;
            }
        }
        (groups.into_values().collect(), left)
    }

    /// The pods to read of ModelAPI `name`, or why there are none.
    fn pods_of(
        &self,
        sources: &Sources,
        slices: &HashMap<(String, String), Vec<Arc<EndpointSlice>>>,
        namespace: &str,
        name: &str,
    ) -> Result<Pods, String> {
        let Some(model_api) = cached(&sources.model_apis, namespace, name) else {
            return Err(format!(
                "ModelAPI {name} does not exist: there is no proxy to read the usage from"
            ));
        };
        if model_api.spec.mode == ModelAPIMode::Hosted {
            return Err(format!(
                "ModelAPI {name} is Hosted (Ollama), which counts no usage: budgets are counted and enforced by a Proxy ModelAPI's LiteLLM"
            ));
        }
        if let Some(address) = self.settings.usage_address_overrides.get(namespace, name) {
            return Ok(Pods::overridden(address));
        }
        let service = format!("modelapi-{name}");
        Ok(slices
            .get(&(namespace.to_string(), service))
            .map(|s| pods(s))
            .unwrap_or_default())
    }
}

/// The budgeted agents of one namespace's caches, with the ModelAPI their budget applies at: an
/// agent's own budget, else its ModelAPI's `defaultAgentBudget` (`kaos_api::modelapi::effective_budget`).
fn budgeted(sources: &Sources) -> Vec<(Arc<CachedAgent>, String, Arc<Budget>)> {
    let mut found: Vec<(Arc<CachedAgent>, String, Arc<Budget>)> = sources
        .agents
        .state()
        .into_iter()
        .filter_map(|agent| {
            let own = agent.own_budget()?;
            let (model_api, budget) = (own.model_api.to_string(), own.budget.clone());
            Some((agent, model_api, budget))
        })
        .collect();
    for model_api in sources.model_apis.state() {
        let default = model_api.spec.proxy_config.as_ref();
        let Some(default) = default.and_then(|p| p.default_agent_budget.as_ref()) else {
            continue;
        };
        let default = Arc::new(default.clone());
        let (namespace, name) = (
            model_api.namespace().unwrap_or_default(),
            model_api.name_any(),
        );
        let dependents: Vec<String> = {
            let index = sources.index.lock().unwrap_or_else(|e| e.into_inner());
            [MODEL_API, MODEL_API_AWAITED]
                .iter()
                .flat_map(|relation| index.dependents(relation, &namespace, &name))
                .collect()
        };
        for dependent in dependents {
            if let Some(agent) = cached(&sources.agents, &namespace, &dependent)
                && agent.own_budget().is_none()
            {
                found.push((agent, name.clone(), default.clone()));
            }
        }
    }
    found
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding it leaves plain data: still usable.
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}
