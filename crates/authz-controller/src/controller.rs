//! Wires both kinds, per watched namespace: a status-only Controller each, over metadata-only
//! caches of the kinds they name. A grant or service is reconciled when its spec changes and
//! when an object it names appears or goes (found in relation indexes kept from their watch
//! events, never by scanning); a missing client Secret is looked at again with a growing
//! interval, as the workload controllers do.

use std::sync::{Arc, Mutex};

use futures::StreamExt;
use kaos_api::access::{
    AccessGrant, AccessGrantStatus, ThirdPartyService, ThirdPartyServiceStatus,
};
use kaos_api::agent::Agent;
use kaos_api::mcpserver::MCPServer;
use kaos_api::memorystore::MemoryStore;
use kaos_api::modelapi::ModelAPI;
use kaos_runtime::Runtime;
use kaos_runtime::error::ReconcileError;
use kaos_workload::cache::meta_view::MetaView;
use kaos_workload::cache::{self, Events, cached};
use kaos_workload::converge::Converged;
use kaos_workload::converge::references::{self, Reference, Source};
use kaos_workload::reconcile::{Core, Primary, Reconciles, status_digest};
use kaos_workload::trigger::index::{Relation, RelationIndex};
use kaos_workload::trigger::{ChangeTracker, dependents_of, receive};
use kaos_workload::wiring::{ChildKinds, Controllers, wire};
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher::Event;
use tokio::sync::mpsc;

use crate::references::{
    AGENT, MCP_SERVER, MEMORY_STORE, MODEL_API, grant_edges, service_edges, undeclared_scopes,
    unresolved,
};
use crate::status::{
    self, AUTHORIZATION_DISABLED, AUTHORIZATION_DISABLED_MESSAGE, ENFORCED, FEATURE_DISABLED,
    READY, UNDECLARED_SCOPE, not_enforced, not_found, token_exchange_disabled,
};

pub const GRANT_PHASES: &[&str] = &["Pending", AUTHORIZATION_DISABLED];
pub const SERVICE_PHASES: &[&str] = &["Pending", FEATURE_DISABLED];

type Index = Arc<Mutex<RelationIndex>>;

/// Which named objects exist (metadata-only caches).
struct Exists {
    agents: Store<MetaView<Agent>>,
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
}

pub struct Context {
    grants: Core,
    services: Core,
    exists: Exists,
}

pub async fn run(runtime: Runtime) -> anyhow::Result<()> {
    let status_only = ChildKinds::status_only();
    let mut controllers = Controllers::new(&runtime);
    for namespace in runtime.namespaces() {
        let ns = namespace.as_deref();
        let (grant_index, service_index) = (Index::default(), Index::default());
        let grants = wire::<AccessGrant>(
            &runtime,
            ns,
            "",
            status_only,
            keep_edges(grant_index.clone(), grant_edges),
        );
        let services = wire::<ThirdPartyService>(
            &runtime,
            ns,
            "",
            status_only,
            keep_edges(service_index.clone(), service_edges),
        );
        let client = &runtime.client;
        let (agents, agent_events) = cache::cache::<MetaView<Agent>>(client, ns, "");
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
        let context = Arc::new(Context {
            grants: Core::new(runtime.clone(), grants.children.clone(), None),
            services: Core::new(runtime.clone(), services.children.clone(), None),
            exists,
        });
        // Agents are named by both kinds: one watch, its changes sent to each.
        let (to_grants, to_services) = agent_dependents(agent_events, &grant_index, &service_index);
        let grants = grants
            .reconcile_on(to_grants)
            .reconcile_on(dependents_of(
                mcp_server_events,
                [(MCP_SERVER, exists_view)],
                grant_index.clone(),
            ))
            .reconcile_on(dependents_of(
                model_api_events,
                [(MODEL_API, exists_view)],
                grant_index.clone(),
            ))
            .reconcile_on(dependents_of(
                memory_store_events,
                [(MEMORY_STORE, exists_view)],
                grant_index,
            ));
        let services = services.reconcile_on(to_services);
        controllers.add(grants, context.clone(), grant_phase);
        controllers.add(services, context, service_phase);
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

/// The grants and the services to reconcile when an Agent appears or goes.
fn agent_dependents(
    events: Events<MetaView<Agent>>,
    grants: &Index,
    services: &Index,
) -> (
    impl futures::Stream<Item = ObjectRef<AccessGrant>> + Send + 'static,
    impl futures::Stream<Item = ObjectRef<ThirdPartyService>> + Send + 'static,
) {
    let (grant_tx, grant_rx) = mpsc::unbounded_channel();
    let (service_tx, service_rx) = mpsc::unbounded_channel();
    let (grants, services) = (grants.clone(), services.clone());
    let mut changes = ChangeTracker::new(exists_view::<MetaView<Agent>>);
    tokio::spawn(events.for_each(move |event| {
        if let Ok(event) = event {
            for (namespace, name) in changes.observe(&event) {
                let lock = |i: &Index| {
                    i.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .dependents(AGENT, &namespace, &name)
                };
                for grant in lock(&grants) {
                    let _ = grant_tx.send(ObjectRef::new(&grant).within(&namespace));
                }
                for service in lock(&services) {
                    let _ = service_tx.send(ObjectRef::new(&service).within(&namespace));
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
    let problem = not_found(&missing, &namespace);
    let previous = conditions(g.status.as_ref().map(|s| &s.conditions));
    let desired = AccessGrantStatus {
        conditions: status::conditions(
            previous,
            not_enforced(),
            &problem,
            g.metadata.generation,
            kaos_workload::conditions::now(),
        ),
    };
    // KAOS warns that the grant is not enforced; a missing reference is the more useful warning.
    let warning = problem.unwrap_or((
        AUTHORIZATION_DISABLED,
        AUTHORIZATION_DISABLED_MESSAGE.into(),
    ));
    ctx.grants
        .finish(
            g.as_ref(),
            g.status.as_ref().map(status_digest),
            &desired,
            Some((warning.0.to_string(), warning.1)),
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
            token_exchange_disabled(),
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
