//! What an AccessGrant or a ThirdPartyService names, and which of it is missing. Pure: the
//! controller feeds it from its caches (existence only) and the relation index from the edges.

use kaos_api::access::{AccessGrant, ResourceKind, SubjectKind, ThirdPartyService};
use kaos_workload::trigger::index::Relation;

pub const AGENT: Relation = "Agent";
pub const MCP_SERVER: Relation = "MCPServer";
pub const MODEL_API: Relation = "ModelAPI";
pub const MEMORY_STORE: Relation = "MemoryStore";

/// The objects a grant names: its Agent subjects and its resources named by kind and name
/// (selectors name none; users and groups are claims, not objects).
pub fn grant_edges(grant: &AccessGrant) -> Vec<(Relation, String)> {
    let subjects = grant
        .spec
        .subjects
        .iter()
        .filter(|s| s.kind == SubjectKind::Agent)
        .map(|s| (AGENT, s.name.clone()));
    let resources = grant.spec.resources.iter().filter_map(|r| {
        let relation = match r.kind? {
            ResourceKind::Agent => AGENT,
            ResourceKind::MCPServer => MCP_SERVER,
            ResourceKind::ModelAPI => MODEL_API,
            ResourceKind::MemoryStore => MEMORY_STORE,
        };
        Some((relation, r.name.clone()?))
    });
    subjects.chain(resources).collect()
}

/// The Agents a ThirdPartyService grants access to.
pub fn service_edges(service: &ThirdPartyService) -> Vec<(Relation, String)> {
    service
        .spec
        .access
        .iter()
        .map(|a| (AGENT, a.agent.clone()))
        .collect()
}

/// The edges whose object does not exist, as `Kind name`, each once, in order.
pub fn unresolved(
    edges: &[(Relation, String)],
    exists: impl Fn(Relation, &str) -> bool,
) -> Vec<String> {
    let mut missing: Vec<String> = Vec::new();
    for (relation, name) in edges {
        let entry = format!("{relation} {name}");
        if !exists(relation, name) && !missing.contains(&entry) {
            missing.push(entry);
        }
    }
    missing
}

/// The scopes an `access` entry grants that `spec.scopes` does not declare, as
/// `agent: scope` (KAOS does not check this; a typo would silently grant nothing).
pub fn undeclared_scopes(service: &ThirdPartyService) -> Vec<String> {
    let declared: Vec<&str> = service
        .spec
        .scopes
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    service
        .spec
        .access
        .iter()
        .flat_map(|a| {
            a.scopes
                .iter()
                .filter(|s| !declared.contains(&s.as_str()))
                .map(move |s| format!("{}: {s}", a.agent))
        })
        .collect()
}
