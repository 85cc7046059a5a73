//! The projector: one task per process that keeps the policy ConfigMap equal to what the cluster
//! says (`data::document` over the caches), and tells each AccessGrant whether it is in force.
//!
//! Bounded by design. Caches' events only wake it when something the data reads changed (an
//! Agent's edges or autonomy, a resource appearing, going or relabelled, a grant's generation;
//! see `controller.rs`); wakes within `DEBOUNCE` are one pass; a pass writes only when the
//! content differs from the ConfigMap the watch holds (drift is put back, a steady cluster
//! writes nothing), with one server-side apply. Only the leader writes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kaos_api::access::AccessGrant;
use kaos_api::access::ResourceKind;
use kaos_api::mcpserver::MCPServer;
use kaos_api::memorystore::MemoryStore;
use kaos_api::modelapi::ModelAPI;
use kaos_runtime::Runtime;
use kaos_workload::cache::meta_view::MetaView;
use kaos_workload::cache::packed::SlimMeta;
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use serde_json::Value;
use tokio::sync::{Notify, mpsc};

use crate::projection::agent_view::AgentView;
use crate::projection::configmap::Content;
use crate::projection::data::{self, Grant, Options, Target, UserPlane};
use crate::projection::jwks;
use crate::settings::{IdentityProvider, Security};

/// How long a pass waits for more changes after the first wake (a burst is one write).
pub const DEBOUNCE: Duration = Duration::from_millis(200);

/// A grant by namespace and name.
type Key = (String, String);

/// Where the last pass left the policy.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Outcome {
    /// No pass has finished yet.
    #[default]
    Pending,
    /// The ConfigMap holds the data; these grants (at these generations) are in it.
    Projected(HashMap<Key, Option<i64>>),
    /// The data could not be written; why.
    Failed(String),
}

/// What the projection says of one grant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Pending,
    Enforced,
    Failed(String),
}

/// The projection's state, shared with the grants' reconciles, and its wake-up call.
#[derive(Default)]
pub struct Projection {
    outcome: Mutex<Outcome>,
    wake: Notify,
}

impl Projection {
    /// Something the data reads changed.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// The verdict on grant `namespace/name` at `generation`.
    pub fn verdict(&self, namespace: &str, name: &str, generation: Option<i64>) -> Verdict {
        let outcome = self.outcome.lock().unwrap_or_else(|e| e.into_inner());
        verdict_of(&outcome, namespace, name, generation)
    }
}

fn verdict_of(outcome: &Outcome, namespace: &str, name: &str, generation: Option<i64>) -> Verdict {
    match outcome {
        Outcome::Pending => Verdict::Pending,
        Outcome::Failed(why) => Verdict::Failed(why.clone()),
        Outcome::Projected(grants) => {
            match grants.get(&(namespace.to_string(), name.to_string())) {
                Some(projected) if *projected == generation => Verdict::Enforced,
                _ => Verdict::Pending,
            }
        }
    }
}

/// The caches the data is read from: one of each kind per watched namespace.
#[derive(Clone, Default)]
pub struct Sources {
    pub agents: Vec<Store<AgentView>>,
    pub mcp_servers: Vec<Store<MetaView<MCPServer>>>,
    pub model_apis: Vec<Store<MetaView<ModelAPI>>>,
    pub memory_stores: Vec<Store<MetaView<MemoryStore>>>,
    pub grants: Vec<Store<AccessGrant>>,
}

impl Sources {
    async fn synced(&self) {
        for s in &self.agents {
            let _ = s.wait_until_ready().await;
        }
        tracing::debug!("policy projection: agents ready");
        for s in &self.mcp_servers {
            let _ = s.wait_until_ready().await;
        }
        tracing::debug!("policy projection: mcpservers ready");
        for s in &self.model_apis {
            let _ = s.wait_until_ready().await;
        }
        tracing::debug!("policy projection: modelapis ready");
        for s in &self.memory_stores {
            let _ = s.wait_until_ready().await;
        }
        tracing::debug!("policy projection: memorystores ready");
        for s in &self.grants {
            let _ = s.wait_until_ready().await;
        }
    }

    fn grants(&self) -> Vec<Arc<AccessGrant>> {
        self.grants.iter().flat_map(|s| s.state()).collect()
    }

    fn targets(&self) -> Vec<Target> {
        let target = |kind, meta: &SlimMeta| Target {
            kind,
            namespace: meta.meta.namespace.clone().unwrap_or_default(),
            name: meta.meta.name.clone().unwrap_or_default(),
            labels: meta
                .labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        let mut targets: Vec<Target> = Vec::new();
        for s in &self.agents {
            targets.extend(
                s.state()
                    .iter()
                    .map(|a| target(ResourceKind::Agent, &a.metadata)),
            );
        }
        for s in &self.mcp_servers {
            targets.extend(
                s.state()
                    .iter()
                    .map(|m| target(ResourceKind::MCPServer, &m.metadata)),
            );
        }
        for s in &self.model_apis {
            targets.extend(
                s.state()
                    .iter()
                    .map(|m| target(ResourceKind::ModelAPI, &m.metadata)),
            );
        }
        for s in &self.memory_stores {
            targets.extend(
                s.state()
                    .iter()
                    .map(|m| target(ResourceKind::MemoryStore, &m.metadata)),
            );
        }
        targets
    }
}

/// Sends a grant to the reconciles of its namespace (`None`: the one Controller of every
/// namespace).
#[derive(Clone, Default)]
pub struct GrantTriggers(
    pub HashMap<Option<String>, mpsc::UnboundedSender<ObjectRef<AccessGrant>>>,
);

impl GrantTriggers {
    fn send(&self, namespace: &str, name: &str) {
        let sender = self
            .0
            .get(&Some(namespace.to_string()))
            .or_else(|| self.0.get(&None));
        if let Some(sender) = sender {
            let _ = sender.send(ObjectRef::new(name).within(namespace));
        }
    }
}

/// The users' keys, read at most every `jwks::REFRESH`.
#[derive(Default)]
struct UserKeys {
    read: Option<(Instant, Value)>,
}

impl UserKeys {
    async fn get(&mut self, uri: &str) -> Result<Value, String> {
        if let Some((at, keys)) = &self.read
            && at.elapsed() < jwks::REFRESH
        {
            return Ok(keys.clone());
        }
        let keys = jwks::fetch(uri).await?;
        self.read = Some((Instant::now(), keys.clone()));
        Ok(keys)
    }
}

/// Runs the projector until shutdown; `security.writes_policy()` must hold.
pub async fn run(
    runtime: Runtime,
    security: Security,
    sources: Sources,
    projection: Arc<Projection>,
    triggers: GrantTriggers,
) {
    let Some((namespace, name)) = security.policy_configmap() else {
        return;
    };
    let (namespace, name) = (namespace.to_string(), name.to_string());
    let api: Api<ConfigMap> = Api::namespaced(runtime.client.clone(), &namespace);
    // The one ConfigMap, watched by name: its content is compared before every write.
    let (current, writer) = reflector::store();
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let woken = projection.clone();
    tokio::spawn(
        watcher(api.clone(), config)
            .default_backoff()
            .reflect(writer)
            .for_each(move |_| {
                woken.wake();
                futures::future::ready(())
            }),
    );
    let woken = projection.clone();
    tokio::spawn(runtime.leadership_gained().for_each(move |()| {
        woken.wake();
        futures::future::ready(())
    }));
    if security.projects_grants() {
        // Rotated keys reach the data without any object changing.
        let woken = projection.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(jwks::REFRESH);
            loop {
                every.tick().await;
                woken.wake();
            }
        });
    }
    let _ = current.wait_until_ready().await;
    tracing::debug!(configmap = %name, "policy projection: the policy ConfigMap's cache is ready");
    sources.synced().await;
    tracing::debug!("policy projection: the resources' caches are ready");
    let shutdown = runtime.shutdown_signal();
    tokio::pin!(shutdown);
    let mut keys = UserKeys::default();
    // The first pass needs no event: an empty cluster still gets its policy (the PDP mounts it).
    projection.wake();
    loop {
        tokio::select! {
            () = projection.wake.notified() => {}
            () = &mut shutdown => return,
        }
        tokio::time::sleep(DEBOUNCE).await;
        if !runtime.is_leader() {
            continue;
        }
        let grants = sources.grants();
        tracing::debug!(grants = grants.len(), "policy projection: a pass");
        let outcome = pass(
            &runtime, &security, &sources, &grants, &api, &current, &name, &mut keys,
        )
        .await;
        let previous = std::mem::replace(
            &mut *projection.outcome.lock().unwrap_or_else(|e| e.into_inner()),
            outcome.clone(),
        );
        if let Outcome::Failed(why) = &outcome {
            tracing::warn!(reason = %why, "policy projection failed");
        }
        // Only the grants whose verdict changed are reconciled again.
        for grant in &grants {
            let (ns, n) = (grant.namespace().unwrap_or_default(), grant.name_any());
            let generation = grant.metadata.generation;
            if verdict_of(&previous, &ns, &n, generation)
                != verdict_of(&outcome, &ns, &n, generation)
            {
                triggers.send(&ns, &n);
            }
        }
    }
}

/// One pass: the content, its size, the comparison and at most one write.
#[allow(clippy::too_many_arguments)]
async fn pass(
    runtime: &Runtime,
    security: &Security,
    sources: &Sources,
    grants: &[Arc<AccessGrant>],
    api: &Api<ConfigMap>,
    current: &Store<ConfigMap>,
    name: &str,
    keys: &mut UserKeys,
) -> Outcome {
    let mut options = Options {
        map_service_accounts: security.identity_provider == IdentityProvider::ServiceAccount,
        project_grants: security.projects_grants(),
        ..Default::default()
    };
    if options.project_grants {
        let issuer = security.user_issuer.trim().to_string();
        let uri = security.user_jwks_uri().unwrap_or_default();
        match keys.get(&uri).await {
            Ok(jwks) => {
                options.jwks.insert(issuer.clone(), jwks);
            }
            Err(why) => return Outcome::Failed(why),
        }
        options.user = Some(UserPlane {
            issuer,
            audience: security.user_audience.trim().to_string(),
        });
    }
    let data = security.projects_data().then(|| {
        let agents: Vec<_> = sources
            .agents
            .iter()
            .flat_map(|s| s.state())
            .map(|a| a.edges())
            .collect();
        let targets = sources.targets();
        let projected: Vec<Grant<'_>> = grants
            .iter()
            .map(|g| Grant {
                namespace: g.metadata.namespace.as_deref().unwrap_or_default(),
                spec: &g.spec,
            })
            .collect();
        data::document(&agents, &targets, &projected, &options).to_json()
    });
    let content = Content::new(true, data);
    if let Some(why) = content.too_big() {
        return Outcome::Failed(why);
    }
    let existing = current.get(&ObjectRef::new(name).within(api.namespace().unwrap_or_default()));
    if !content.is_in(existing.as_deref()) {
        let body = content.apply_body(api.namespace().unwrap_or_default(), name);
        let params = PatchParams::apply(runtime.field_manager()).force();
        if let Err(error) = api.patch(name, &params, &Patch::Apply(&body)).await {
            return Outcome::Failed(format!("writing ConfigMap {name}: {error}"));
        }
    }
    let in_force = if options.project_grants {
        grants
            .iter()
            .map(|g| {
                (
                    (g.namespace().unwrap_or_default(), g.name_any()),
                    g.metadata.generation,
                )
            })
            .collect()
    } else {
        HashMap::new()
    };
    Outcome::Projected(in_force)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_is_enforced_only_at_the_generation_projected() {
        let key = ("team".to_string(), "readers".to_string());
        let projected = Outcome::Projected(HashMap::from([(key, Some(2))]));
        assert_eq!(
            verdict_of(&projected, "team", "readers", Some(2)),
            Verdict::Enforced
        );
        assert_eq!(
            verdict_of(&projected, "team", "readers", Some(3)),
            Verdict::Pending
        );
        assert_eq!(
            verdict_of(&projected, "team", "writers", Some(1)),
            Verdict::Pending
        );
        let failed = Outcome::Failed("too big".into());
        assert_eq!(
            verdict_of(&failed, "team", "readers", Some(2)),
            Verdict::Failed("too big".into())
        );
        assert_eq!(
            verdict_of(&Outcome::Pending, "t", "r", None),
            Verdict::Pending
        );
    }
}
