//! The policy data document, `data.json` in KAOS's format (`data.kaos.*`, KAOS's
//! `operator/internal/authz/data-schema.md`), built from what the caches hold. Pure: the
//! projector feeds it, the tests call it directly.
//!
//! - `grants`: each Agent's logical id → the ids of what it declares it calls (its ModelAPI,
//!   MCP servers, MemoryStore and peers), as KAOS projects them; plus, beyond KAOS (which drops
//!   them), the resources of AccessGrants whose subject is that Agent.
//! - `user_grants`: `user:<sub or email>` and `group:<name>` → resource ids, from AccessGrants
//!   (only when grants are projected at all: authorization, the user plane and automated data on).
//! - `agents`: each granted Agent's token subject (`system:serviceaccount:<ns>:kaos-agent-<name>`
//!   with the ServiceAccount provider) and whether it is autonomous (it may then be its own subject).
//! - `user`: the users' issuer and audience; `jwks`: signing keys by issuer.
//!
//! Ids are `kaos://<slug>/<namespace>/<name>`. Maps and lists are sorted, so the same cluster
//! gives the same bytes: the projector compares them with what the ConfigMap holds.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use kaos_api::access::{AccessGrantSpec, ResourceKind, SubjectKind};
use serde::Serialize;
use serde_json::Value;

use crate::projection::selector;

/// What the policy reads of an Agent.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct AgentEdges {
    pub namespace: String,
    pub name: String,
    pub model_api: String,
    pub mcp_servers: Vec<String>,
    pub memory_store: Option<String>,
    pub peers: Vec<String>,
    pub autonomous: bool,
}

/// Something a grant can name or select: an Agent, MCPServer, ModelAPI or MemoryStore.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub kind: ResourceKind,
    pub namespace: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
}

/// An AccessGrant to project.
#[derive(Clone, Copy, Debug)]
pub struct Grant<'a> {
    pub namespace: &'a str,
    pub spec: &'a AccessGrantSpec,
}

/// What goes into the document besides the cluster's objects.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Options {
    /// Map each granted Agent to its ServiceAccount token's subject.
    pub map_service_accounts: bool,
    /// Project AccessGrants (authorization, the user plane and automated data are on).
    pub project_grants: bool,
    /// The users' issuer and audience (the user plane).
    pub user: Option<UserPlane>,
    /// Signing keys (a JWKS document) by issuer.
    pub jwks: BTreeMap<String, Value>,
}

/// The user plane, as the policy checks users' tokens.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct UserPlane {
    pub issuer: String,
    pub audience: String,
}

/// `data.json`: everything under `kaos`.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Document {
    pub kaos: Kaos,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Kaos {
    pub grants: BTreeMap<String, BTreeSet<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_grants: Option<BTreeMap<String, BTreeSet<String>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agents: Option<BTreeMap<String, AgentFacts>>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub jwks: BTreeMap<String, Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<UserPlane>,
}

/// What the policy knows of an Agent's token.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct AgentFacts {
    pub issuer_sub: String,
    pub autonomous: bool,
}

/// The logical id of a resource, as the gateway path gives it to the policy.
pub fn resource_id(kind: ResourceKind, namespace: &str, name: &str) -> String {
    let slug = match kind {
        ResourceKind::Agent => "agent",
        ResourceKind::MCPServer => "mcpserver",
        ResourceKind::ModelAPI => "modelapi",
        ResourceKind::MemoryStore => "memorystore",
    };
    format!("kaos://{slug}/{namespace}/{name}")
}

/// The ServiceAccount an Agent's token comes from (KAOS's name).
pub fn agent_service_account(name: &str) -> String {
    format!("kaos-agent-{name}")
}

/// The objects a grant can reach, indexed for lookups by name and scans by namespace.
pub struct Targets<'a> {
    ids: HashSet<String>,
    by_namespace: HashMap<&'a str, Vec<&'a Target>>,
}

impl<'a> Targets<'a> {
    pub fn new(targets: &'a [Target]) -> Self {
        let mut ids = HashSet::with_capacity(targets.len());
        let mut by_namespace: HashMap<&str, Vec<&Target>> = HashMap::new();
        for target in targets {
            ids.insert(resource_id(target.kind, &target.namespace, &target.name));
            by_namespace
                .entry(target.namespace.as_str())
                .or_default()
                .push(target);
        }
        Targets { ids, by_namespace }
    }

    /// The ids a grant gives access to: named resources that exist (a name that does not exist
    /// grants nothing until it does: the grant's `ResolvedRefs` says so) and every object of its
    /// namespace its selectors match, of any kind, as KAOS selects.
    pub fn resolve(&self, grant: Grant<'_>) -> BTreeSet<String> {
        let mut ids = BTreeSet::new();
        for resource in &grant.spec.resources {
            if let (Some(kind), Some(name)) = (resource.kind, resource.name.as_deref()) {
                let id = resource_id(kind, grant.namespace, name);
                if self.ids.contains(&id) {
                    ids.insert(id);
                }
            } else if let Some(selector) = &resource.selector {
                for target in self.by_namespace.get(grant.namespace).into_iter().flatten() {
                    if selector::matches(selector, |k| target.labels.get(k).map(String::as_str)) {
                        ids.insert(resource_id(target.kind, &target.namespace, &target.name));
                    }
                }
            }
        }
        ids
    }
}

/// The document for these Agents, targets and grants.
pub fn document(
    agents: &[AgentEdges],
    targets: &[Target],
    grants: &[Grant<'_>],
    options: &Options,
) -> Document {
    let mut agent_grants: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut autonomous: HashMap<String, bool> = HashMap::new();
    for agent in agents {
        let id = |kind, name: &str| resource_id(kind, &agent.namespace, name);
        let mut edges: BTreeSet<String> = agent
            .mcp_servers
            .iter()
            .map(|s| id(ResourceKind::MCPServer, s))
            .collect();
        if !agent.model_api.is_empty() {
            edges.insert(id(ResourceKind::ModelAPI, &agent.model_api));
        }
        if let Some(store) = agent.memory_store.as_deref().filter(|s| !s.is_empty()) {
            edges.insert(id(ResourceKind::MemoryStore, store));
        }
        edges.extend(
            agent
                .peers
                .iter()
                .filter(|p| !p.is_empty() && **p != agent.name)
                .map(|p| id(ResourceKind::Agent, p)),
        );
        let me = resource_id(ResourceKind::Agent, &agent.namespace, &agent.name);
        autonomous.insert(me.clone(), agent.autonomous);
        // As KAOS: an Agent that declares nothing has no entry.
        if !edges.is_empty() {
            agent_grants.insert(me, edges);
        }
    }
    let mut user_grants: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    if options.project_grants {
        let targets = Targets::new(targets);
        for grant in grants {
            let ids = targets.resolve(*grant);
            for subject in &grant.spec.subjects {
                let entry = match subject.kind {
                    SubjectKind::User => user_grants.entry(format!("user:{}", subject.name)),
                    SubjectKind::Group => user_grants.entry(format!("group:{}", subject.name)),
                    SubjectKind::Agent => agent_grants.entry(resource_id(
                        ResourceKind::Agent,
                        grant.namespace,
                        &subject.name,
                    )),
                };
                entry.or_default().extend(ids.iter().cloned());
            }
        }
    }
    let agents_map = options.map_service_accounts.then(|| {
        agent_grants
            .keys()
            .filter_map(|id| {
                let (namespace, name) = id.strip_prefix("kaos://agent/")?.split_once('/')?;
                Some((
                    id.clone(),
                    AgentFacts {
                        issuer_sub: format!(
                            "system:serviceaccount:{namespace}:{}",
                            agent_service_account(name)
                        ),
                        autonomous: autonomous.get(id).copied().unwrap_or(false),
                    },
                ))
            })
            .collect()
    });
    let user_plane = options
        .project_grants
        .then(|| options.user.clone())
        .flatten();
    Document {
        kaos: Kaos {
            grants: agent_grants,
            user_grants: user_plane.as_ref().map(|_| user_grants),
            agents: agents_map,
            jwks: options.jwks.clone(),
            user: user_plane,
        },
    }
}

impl Document {
    /// The document as `data.json` holds it: compact JSON, keys sorted.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| String::from("{}"))
    }
}

#[cfg(test)]
mod tests;
