//! Wires both kinds, per watched namespace: a status-only Controller each, over slim caches of
//! the kinds they name (metadata only; for Agents, also what the policy data reads). A grant or
//! service is reconciled when its spec changes and when an object it names appears or goes
//! (found in relation indexes kept from their watch events, never by scanning); a grant with a
//! selector also when labels change in its namespace; a grant also when the projection's verdict
//! on it changes. A missing client Secret is looked at again with a growing interval, as the
//! workload controllers do. With the policy ConfigMap named, one projector per process
//! (`projection::projector`) is woken by the same events, only when what the data reads changed.

use std::hash::Hash;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kaos_api::access::{
    AccessGrant, AccessGrantStatus, ThirdPartyService, ThirdPartyServiceStatus,
};
use kaos_api::mcpserver::MCPServer;
use kaos_api::memorystore::MemoryStore;
use kaos_api::modelapi::ModelAPI;
use kaos_runtime::Runtime;
use kaos_runtime::error::ReconcileError;
use kaos_workload::cache::meta_view::MetaView;
use kaos_workload::cache::packed::Labelled;
use kaos_workload::cache::{self, Events, cached};
use kaos_workload::converge::Converged;
use kaos_workload::converge::references::{self, Reference, Source};
use kaos_workload::reconcile::{Core, Primary, Reconciles, status_digest};
use kaos_workload::trigger::index::{Relation, RelationIndex};
use kaos_workload::trigger::{ChangeTracker, receive};
use kaos_workload::wiring::{ChildKinds, Controllers, wire};
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher::Event;
use tokio::sync::mpsc;

use crate::enforcement;
use crate::projection::agent_view::AgentView;
use crate::projection::projector::{self, GrantTriggers, Projection, Sources};
use crate::projection::selector;
use crate::references::{
    AGENT, MCP_SERVER, MEMORY_STORE, MODEL_API, grant_edges, service_edges, undeclared_scopes,
    unresolved,
};
use crate::settings::Security;
use crate::status::{
    self, AUTHORIZATION_DISABLED, ENFORCED, FEATURE_DISABLED, NO_USER_IDENTITY_PROVIDER,
    POLICY_PROJECTION_INACTIVE, PROJECTION_FAILED, READY, SELECTOR_MATCHES_NOTHING,
    UNDECLARED_SCOPE, not_found, token_exchange_disabled,
};

pub const GRANT_PHASES: &[&str] = &[
    "Pending",
    ENFORCED,
    AUTHORIZATION_DISABLED,
    NO_USER_IDENTITY_PROVIDER,
    POLICY_PROJECTION_INACTIVE,
    PROJECTION_FAILED,
];
pub const SERVICE_PHASES: &[&str] = &["Pending", FEATURE_DISABLED];

type Index = Arc<Mutex<RelationIndex>>;

/// Which named objects exist, with their labels (slim caches).
struct Exists {
    agents: Store<AgentView>,
    mcp_servers: Store<MetaView<MCPServer>>,
    model_apis: Store<MetaView<ModelAPI>>,
    memory_stores: Store<MetaView<MemoryStore>>,
}

impl Exists {
    fn has(&self, namespace: &str, relation: Relation, name: &str) -> bool {
        match relation {
            AGENT => cached(&self.agents, namespace, name).is_some(),
            MCP_SERVER => cached(&self.mcp_servers, namespace, name).is_some(),
            MODEL_API => cached(&self.model_apis, namespace, name).is_some(),
            MEMORY_STORE => cached(&self.memory_stores, namespace, name).is_some(),
            _ => false,
        }
    }

    /// Whether anything in `namespace` carries labels `selector` matches (Agents first: the
    /// usual target of a selector).
    fn any_selected(&self, namespace: &str, selector: &LabelSelector) -> bool {
        fn any<K>(store: &Store<K>, ns: &str, s: &LabelSelector) -> bool
        where
            K: Labelled + kube::Resource<DynamicType = ()> + Clone + 'static,
        {
            store.state().iter().any(|o| {
                o.meta().namespace.as_deref() == Some(ns) && selector::matches(s, |k| o.label(k))
            })
        }
        any(&self.agents, namespace, selector)
            || any(&self.mcp_servers, namespace, selector)
            || any(&self.model_apis, namespace, selector)
            || any(&self.memory_stores, namespace, selector)
    }
}

pub struct Context {
    grants: Core,
    services: Core,
    exists: Exists,
    security: Security,
    projection: Arc<Projection>,
}

pub async fn run(runtime: Runtime, security: Security) -> anyhow::Result<()> {
    let status_only = ChildKinds::status_only();
    let mut controllers = Controllers::new(&runtime);
    let projection = Arc::new(Projection::default());
    // The projector is woken only where it runs.
    let wake = security.writes_policy().then(|| projection.clone());
    let (mut sources, mut triggers) = (Sources::default(), GrantTriggers::default());
    for namespace in runtime.namespaces() {
        let ns = namespace.as_deref();
        let (grant_index, service_index) = (Index::default(), Index::default());
        let grant_wake = wake.clone();
        let mut generations = ChangeTracker::new(grant_generation);
        let mut on_grant = keep_edges(grant_index.clone(), grant_edges);
        let grants = wire::<AccessGrant>(&runtime, ns, "", status_only, move |event| {
            on_grant(event);
            if let Some(projection) = &grant_wake
                && !generations.observe(event).is_empty()
            {
                projection.wake();
            }
        });
        let services = wire::<ThirdPartyService>(
            &runtime,
            ns,
            "",
            status_only,
            keep_edges(service_index.clone(), service_edges),
        );
        let client = &runtime.client;
        let (agents, agent_events) = cache::cache::<AgentView>(client, ns, "");
        let (mcp_servers, mcp_server_events) = cache::cache::<MetaView<MCPServer>>(client, ns, "");
        let (model_apis, model_api_events) = cache::cache::<MetaView<ModelAPI>>(client, ns, "");
        let (memory_stores, memory_store_events) =
            cache::cache::<MetaView<MemoryStore>>(client, ns, "");
        let exists = Exists {
            agents: agents.clone(),
            mcp_servers: mcp_servers.clone(),
            model_apis: model_apis.clone(),
            memory_stores: memory_stores.clone(),
        };
        controllers.reads(&agents);
        controllers.reads(&mcp_servers);
        controllers.reads(&model_apis);
        controllers.reads(&memory_stores);
        sources.agents.push(agents);
        sources.mcp_servers.push(mcp_servers);
        sources.model_apis.push(model_apis);
        sources.memory_stores.push(memory_stores);
        sources.grants.push(grants.store.clone());
        let context = Arc::new(Context {
            grants: Core::new(runtime.clone(), grants.children.clone(), None),
            services: Core::new(runtime.clone(), services.children.clone(), None),
            exists,
            security: security.clone(),
            projection: projection.clone(),
        });
        let (verdicts, verdict_changes) = mpsc::unbounded_channel();
        triggers.0.insert(namespace.clone(), verdicts);
        let targets = Targets {
            grants: grants.store.clone(),
            index: grant_index.clone(),
            wake: wake.clone(),
        };
        // Agents are named by both kinds: one watch, its changes sent to each.
        let (to_grants, to_services) = agent_dependents(agent_events, &targets, &service_index);
        let grants = grants
            .reconcile_on(to_grants)
            .reconcile_on(targets.follow(mcp_server_events, MCP_SERVER, meta_labels))
            .reconcile_on(targets.follow(model_api_events, MODEL_API, meta_labels))
            .reconcile_on(targets.follow(memory_store_events, MEMORY_STORE, meta_labels))
            .reconcile_on(receive(verdict_changes));
        let services = services.reconcile_on(to_services);
        controllers.add(grants, context.clone(), grant_phase);
        controllers.add(services, context, service_phase);
    }
    if security.writes_policy() {
        tokio::spawn(projector::run(
            runtime.clone(),
            security,
            sources,
            projection,
            triggers,
        ));
    }
    controllers.run().await
}

fn grant_phase(grant: &AccessGrant) -> Option<&'static str> {
    let conditions = conditions(grant.status.as_ref().map(|s| &s.conditions));
    status::phase_of(conditions, ENFORCED, GRANT_PHASES)
}

fn service_phase(service: &ThirdPartyService) -> Option<&'static str> {
    let conditions = conditions(service.status.as_ref().map(|s| &s.conditions));
    status::phase_of(conditions, READY, SERVICE_PHASES)
}

fn conditions(
    conditions: Option<&Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>>,
) -> &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition] {
    conditions.map(Vec::as_slice).unwrap_or_default()
}

/// Only whether a named object exists is read of it.
fn exists_view<K>(_: &K) {}

/// A grant's spec changes with its generation (its status writes do not).
fn grant_generation(grant: &AccessGrant) -> Option<i64> {
    grant.metadata.generation
}

/// The labels of an object (what selectors read).
fn meta_labels<K>(object: &MetaView<K>) -> Vec<(String, String)> {
    labels_of(&object.metadata.labels)
}

fn labels_of(labels: &kaos_workload::cache::packed::PackedMap) -> Vec<(String, String)> {
    labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// What the policy data reads of an Agent: its edges and labels.
fn agent_data(agent: &AgentView) -> (crate::projection::data::AgentEdges, Vec<(String, String)>) {
    (agent.edges(), labels_of(&agent.metadata.labels))
}

fn agent_labels(agent: &AgentView) -> Vec<(String, String)> {
    labels_of(&agent.metadata.labels)
}

/// What the grants of one namespace follow of the objects they name or select.
struct Targets {
    grants: Store<AccessGrant>,
    index: Index,
    wake: Option<Arc<Projection>>,
}

impl Targets {
    /// The grants of `namespace` with a selector (their `ResolvedRefs` may change with labels).
    fn selecting(&self, namespace: &str) -> Vec<ObjectRef<AccessGrant>> {
        self.grants
            .state()
            .iter()
            .filter(|g| {
                g.metadata.namespace.as_deref() == Some(namespace)
                    && g.spec.resources.iter().any(|r| r.selector.is_some())
            })
            .map(|g| ObjectRef::from_obj(g.as_ref()))
            .collect()
    }

    /// The grants to reconcile for one changed object, by name (`existence`) or selector
    /// (`labelled`).
    fn dependents(
        &self,
        relation: Relation,
        namespace: &str,
        name: &str,
        existence: bool,
        labelled: bool,
    ) -> Vec<ObjectRef<AccessGrant>> {
        let mut grants = Vec::new();
        if existence {
            let index = self.index.lock().unwrap_or_else(|e| e.into_inner());
            grants.extend(
                index
                    .dependents(relation, namespace, name)
                    .into_iter()
                    .map(|g| ObjectRef::new(&g).within(namespace)),
            );
        }
        if labelled {
            grants.extend(self.selecting(namespace));
        }
        grants
    }

    /// The grants to reconcile as `events` of one kind come: those naming an object that came or
    /// went, and those with a selector where labels changed. Wakes the projector too.
    fn follow<D, P>(
        &self,
        events: Events<D>,
        relation: Relation,
        labels: fn(&D) -> P,
    ) -> impl futures::Stream<Item = ObjectRef<AccessGrant>> + Send + 'static
    where
        D: kube::Resource + Send + 'static,
        P: Hash + 'static,
    {
        let (tx, rx) = mpsc::unbounded_channel();
        let this = Targets {
            grants: self.grants.clone(),
            index: self.index.clone(),
            wake: self.wake.clone(),
        };
        let (mut existing, mut labelled) = (
            ChangeTracker::new(exists_view::<D>),
            ChangeTracker::new(labels),
        );
        tokio::spawn(events.for_each(move |event| {
            if let Ok(event) = event {
                let came_or_went = existing.observe(&event);
                let relabelled = labelled.observe(&event);
                if let Some(projection) = &this.wake
                    && !relabelled.is_empty()
                {
                    projection.wake();
                }
                for (namespace, name) in &relabelled {
                    let named = came_or_went
                        .iter()
                        .any(|(n, m)| n == namespace && m == name);
                    for grant in this.dependents(relation, namespace, name, named, true) {
                        let _ = tx.send(grant);
                    }
                }
            }
            futures::future::ready(())
        }));
        receive(rx)
    }
}

/// Keeps `index` in step with the edges of each event's object.
fn keep_edges<K: Primary>(
    index: Index,
    edges: fn(&K) -> Vec<(Relation, String)>,
) -> impl FnMut(&Event<K>) + Send + 'static {
    move |event| {
        index
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .observe(event, edges)
    }
}

/// The grants and the services to reconcile when an Agent appears or goes (or, for grants
/// with a selector, is relabelled); the projector is woken when what the data reads of it
/// changed (not by a change to any other field).
fn agent_dependents(
    events: Events<AgentView>,
    targets: &Targets,
    services: &Index,
) -> (
    impl futures::Stream<Item = ObjectRef<AccessGrant>> + Send + 'static,
    impl futures::Stream<Item = ObjectRef<ThirdPartyService>> + Send + 'static,
) {
    let (grant_tx, grant_rx) = mpsc::unbounded_channel();
    let (service_tx, service_rx) = mpsc::unbounded_channel();
    let services = services.clone();
    let targets = Targets {
        grants: targets.grants.clone(),
        index: targets.index.clone(),
        wake: targets.wake.clone(),
    };
    let mut existing = ChangeTracker::new(exists_view::<AgentView>);
    let mut labelled = ChangeTracker::new(agent_labels);
    let mut data = ChangeTracker::new(agent_data);
    tokio::spawn(events.for_each(move |event| {
        if let Ok(event) = event {
            if let Some(projection) = &targets.wake
                && !data.observe(&event).is_empty()
            {
                projection.wake();
            }
            let came_or_went = existing.observe(&event);
            let relabelled = labelled.observe(&event);
            for (namespace, name) in &came_or_went {
                for service in services
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .dependents(AGENT, namespace, name)
                {
                    let _ = service_tx.send(ObjectRef::new(&service).within(namespace));
                }
                for grant in targets.dependents(AGENT, namespace, name, true, false) {
                    let _ = grant_tx.send(grant);
                }
            }
            for (namespace, name) in &relabelled {
                for grant in targets.dependents(AGENT, namespace, name, false, true) {
                    let _ = grant_tx.send(grant);
                }
            }
        }
        futures::future::ready(())
    }));
    (receive(grant_rx), receive(service_rx))
}

impl Reconciles<AccessGrant> for Context {
    fn core(&self) -> &Core {
        &self.grants
    }

    async fn apply(&self, grant: Arc<AccessGrant>) -> Result<Action, ReconcileError> {
        apply_grant(grant, self).await
    }
}

impl Reconciles<ThirdPartyService> for Context {
    fn core(&self) -> &Core {
        &self.services
    }

    async fn apply(&self, service: Arc<ThirdPartyService>) -> Result<Action, ReconcileError> {
        apply_service(service, self).await
    }
}

async fn apply_grant(g: Arc<AccessGrant>, ctx: &Context) -> Result<Action, ReconcileError> {
    let namespace = g.namespace().unwrap_or_default();
    let missing = unresolved(&grant_edges(&g), |relation, name| {
        ctx.exists.has(&namespace, relation, name)
    });
    let problem = not_found(&missing, &namespace).or_else(|| {
        let empty: Vec<String> = g
            .spec
            .resources
            .iter()
            .enumerate()
            .filter_map(|(i, r)| {
                let selector = r.selector.as_ref()?;
                (!ctx.exists.any_selected(&namespace, selector))
                    .then(|| format!("spec.resources[{i}].selector"))
            })
            .collect();
        (!empty.is_empty()).then(|| {
            (
                SELECTOR_MATCHES_NOTHING,
                format!(
                    "{} matches no Agent, MCPServer, ModelAPI or MemoryStore in namespace \
                     {namespace}; label the resources or fix the selector",
                    empty.join(", ")
                ),
            )
        })
    });
    let verdict = enforcement::verdict(&ctx.security, || {
        ctx.projection
            .verdict(&namespace, &g.name_any(), g.metadata.generation)
    });
    let previous = conditions(g.status.as_ref().map(|s| &s.conditions));
    // KAOS warns when the grant is not enforced; a reference problem is the more useful warning.
    let not_enforced = verdict
        .as_ref()
        .filter(|v| !v.status)
        .map(|v| (v.reason, v.message.clone()));
    let warning = problem.clone().or(not_enforced);
    let desired = AccessGrantStatus {
        conditions: status::conditions(
            previous,
            verdict,
            &problem,
            g.metadata.generation,
            kaos_workload::conditions::now(),
        ),
    };
    ctx.grants
        .finish(
            g.as_ref(),
            g.status.as_ref().map(status_digest),
            &desired,
            warning.map(|(reason, message)| (reason.to_string(), message)),
            &Converged::default(),
        )
        .await
}

async fn apply_service(s: Arc<ThirdPartyService>, ctx: &Context) -> Result<Action, ReconcileError> {
    let namespace = s.namespace().unwrap_or_default();
    let secret = &s.spec.client_secret_ref;
    let required = (secret.optional != Some(true)).then(|| Reference {
        source: Source::Secret,
        name: secret.name.clone(),
        key: Some(secret.key.clone()),
        reader: "spec.clientSecretRef".into(),
    });
    let converged = Converged {
        missing: references::missing(
            &ctx.services.runtime.client,
            &namespace,
            required.into_iter().collect(),
        )
        .await,
        ..Default::default()
    };
    let agents = unresolved(&service_edges(&s), |relation, name| {
        ctx.exists.has(&namespace, relation, name)
    });
    let scopes = undeclared_scopes(&s);
    let problem = not_found(&agents, &namespace)
        .or_else(|| converged.problem())
        .or_else(|| {
            (!scopes.is_empty()).then(|| {
                (
                    UNDECLARED_SCOPE,
                    format!(
                        "access grants scopes that spec.scopes does not declare ({}); declare them or fix the names",
                        scopes.join(", ")
                    ),
                )
            })
        });
    let previous = conditions(s.status.as_ref().map(|s| &s.conditions));
    let desired = ThirdPartyServiceStatus {
        conditions: status::conditions(
            previous,
            Some(token_exchange_disabled()),
            &problem,
            s.metadata.generation,
            kaos_workload::conditions::now(),
        ),
    };
    ctx.services
        .finish(
            s.as_ref(),
            s.status.as_ref().map(status_digest),
            &desired,
            problem.map(|(r, m)| (r.to_string(), m)),
            &converged,
        )
        .await
}
