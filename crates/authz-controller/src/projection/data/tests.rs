//! The policy data, case by case: what each Agent and grant puts where, and its size at scale.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kaos_api::access::{AccessGrantSpec, GrantedResource, ResourceKind, Subject, SubjectKind};
use serde_json::json;

use super::*;
use crate::projection::configmap::Content;

fn agent(namespace: &str, name: &str) -> AgentEdges {
    AgentEdges {
        namespace: namespace.into(),
        name: name.into(),
        ..Default::default()
    }
}

fn target(kind: ResourceKind, namespace: &str, name: &str, labels: &[(&str, &str)]) -> Target {
    Target {
        kind,
        namespace: namespace.into(),
        name: name.into(),
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

fn subject(kind: SubjectKind, name: &str) -> Subject {
    Subject {
        kind,
        name: name.into(),
    }
}

fn named(kind: ResourceKind, name: &str) -> GrantedResource {
    GrantedResource {
        kind: Some(kind),
        name: Some(name.into()),
        selector: None,
    }
}

fn selected(pairs: &[(&str, &str)]) -> GrantedResource {
    GrantedResource {
        kind: None,
        name: None,
        selector: Some(LabelSelector {
            match_labels: Some(
                pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            match_expressions: None,
        }),
    }
}

fn on() -> Options {
    Options {
        map_service_accounts: true,
        project_grants: true,
        user: Some(UserPlane {
            issuer: "http://keycloak/realms/kaos".into(),
            audience: "kaos".into(),
        }),
        jwks: BTreeMap::new(),
    }
}

fn ids(ids: &[&str]) -> BTreeSet<String> {
    ids.iter().map(|s| s.to_string()).collect()
}

#[test]
fn an_agent_is_granted_what_it_declares_it_calls_as_kaos_projects_it() {
    let coordinator = AgentEdges {
        model_api: "llm".into(),
        mcp_servers: vec!["tools".into(), "search".into()],
        memory_store: Some("mem".into()),
        peers: vec!["worker".into(), "coordinator".into(), String::new()],
        autonomous: true,
        ..agent("team", "coordinator")
    };
    let idle = agent("team", "idle");
    let doc = document(&[coordinator, idle], &[], &[], &on());
    assert_eq!(
        doc.kaos.grants,
        BTreeMap::from([(
            "kaos://agent/team/coordinator".to_string(),
            ids(&[
                "kaos://agent/team/worker",
                "kaos://mcpserver/team/search",
                "kaos://mcpserver/team/tools",
                "kaos://memorystore/team/mem",
                "kaos://modelapi/team/llm",
            ])
        )]),
        "no self edge; an Agent that calls nothing has no entry"
    );
    assert_eq!(
        doc.kaos.agents,
        Some(BTreeMap::from([(
            "kaos://agent/team/coordinator".to_string(),
            AgentFacts {
                issuer_sub: "system:serviceaccount:team:kaos-agent-coordinator".into(),
                autonomous: true,
            }
        )]))
    );
}

#[test]
fn grants_give_users_groups_and_agents_what_they_name_or_select() {
    let targets = [
        target(
            ResourceKind::Agent,
            "team",
            "researcher",
            &[("tier", "gold")],
        ),
        target(ResourceKind::Agent, "team", "writer", &[]),
        target(
            ResourceKind::MCPServer,
            "team",
            "tools",
            &[("tier", "gold")],
        ),
        target(ResourceKind::ModelAPI, "other", "llm", &[("tier", "gold")]),
    ];
    let readers = AccessGrantSpec {
        subjects: vec![
            subject(SubjectKind::User, "alice@example.com"),
            subject(SubjectKind::Group, "researchers"),
            subject(SubjectKind::Agent, "writer"),
        ],
        resources: vec![
            named(ResourceKind::Agent, "writer"),
            // Missing: grants nothing until it exists.
            named(ResourceKind::MCPServer, "ghost"),
            // Every kind, this namespace only.
            selected(&[("tier", "gold")]),
        ],
    };
    let doc = document(
        &[],
        &targets,
        &[Grant {
            namespace: "team",
            spec: &readers,
        }],
        &on(),
    );
    let granted = ids(&[
        "kaos://agent/team/researcher",
        "kaos://agent/team/writer",
        "kaos://mcpserver/team/tools",
    ]);
    assert_eq!(
        doc.kaos.user_grants,
        Some(BTreeMap::from([
            ("group:researchers".to_string(), granted.clone()),
            ("user:alice@example.com".to_string(), granted.clone()),
        ]))
    );
    // Beyond KAOS (which drops Agent subjects): the Agent may reach them on internal hops.
    assert_eq!(
        doc.kaos.grants.get("kaos://agent/team/writer"),
        Some(&granted)
    );
    assert_eq!(
        doc.kaos.user,
        Some(UserPlane {
            issuer: "http://keycloak/realms/kaos".into(),
            audience: "kaos".into()
        })
    );
}

#[test]
fn without_grant_projection_only_the_agents_data_is_written() {
    let spec = AccessGrantSpec {
        subjects: vec![subject(SubjectKind::Group, "researchers")],
        resources: vec![named(ResourceKind::Agent, "a")],
    };
    let options = Options {
        project_grants: false,
        ..on()
    };
    let a = AgentEdges {
        model_api: "llm".into(),
        ..agent("team", "a")
    };
    let doc = document(
        &[a],
        &[target(ResourceKind::Agent, "team", "a", &[])],
        &[Grant {
            namespace: "team",
            spec: &spec,
        }],
        &options,
    );
    assert_eq!(doc.kaos.user_grants, None);
    assert_eq!(doc.kaos.user, None);
    assert_eq!(doc.kaos.grants.len(), 1);
}

#[test]
fn the_json_is_kaos_format_and_the_same_bytes_for_the_same_cluster() {
    let mut options = on();
    options.jwks.insert(
        "http://keycloak/realms/kaos".into(),
        json!({"keys": [{"kty": "RSA", "kid": "k1", "n": "abc", "e": "AQAB"}]}),
    );
    let a = AgentEdges {
        model_api: "llm".into(),
        ..agent("team", "a")
    };
    let first = document(std::slice::from_ref(&a), &[], &[], &options).to_json();
    let again = document(&[a], &[], &[], &options).to_json();
    assert_eq!(first, again);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&first).expect("json"),
        json!({"kaos": {
            "grants": {"kaos://agent/team/a": ["kaos://modelapi/team/llm"]},
            "user_grants": {},
            "agents": {"kaos://agent/team/a": {
                "issuer_sub": "system:serviceaccount:team:kaos-agent-a", "autonomous": false}},
            "jwks": {"http://keycloak/realms/kaos": {"keys": [
                {"kty": "RSA", "kid": "k1", "n": "abc", "e": "AQAB"}]}},
            "user": {"issuer": "http://keycloak/realms/kaos", "audience": "kaos"}
        }})
    );
}

/// `agents` Agents in 10 namespaces, each with a ModelAPI, two MCP servers and a peer; `grants`
/// grants, each a user and a group on one Agent by name and the Agents of a squad (10) by
/// selector: the ConfigMap's content and its size.
fn at_scale(agents: usize, grants: usize) -> (Document, Content) {
    let (edges, targets): (Vec<_>, Vec<_>) = (0..agents)
        .map(|i| {
            let namespace = format!("team-{:02}", i % 10);
            let name = format!("agent-{i:05}");
            let edges = AgentEdges {
                model_api: "llm".into(),
                mcp_servers: vec!["search".into(), format!("tools-{:03}", i % 100)],
                peers: vec![format!("agent-{:05}", (i + 10) % agents)],
                ..agent(&namespace, &name)
            };
            let squad = format!("squad-{:03}", i / 10);
            let target = target(ResourceKind::Agent, &namespace, &name, &[("squad", &squad)]);
            (edges, target)
        })
        .unzip();
    let specs: Vec<(String, AccessGrantSpec)> = (0..grants)
        .map(|i| {
            (
                "team-00".to_string(),
                AccessGrantSpec {
                    subjects: vec![
                        subject(SubjectKind::User, &format!("user-{i:04}@example.com")),
                        subject(SubjectKind::Group, &format!("group-{:03}", i % 100)),
                    ],
                    resources: vec![
                        named(
                            ResourceKind::Agent,
                            &format!("agent-{:05}", (i * 10) % agents),
                        ),
                        selected(&[("squad", &format!("squad-{i:03}"))]),
                    ],
                },
            )
        })
        .collect();
    let grants: Vec<Grant<'_>> = specs
        .iter()
        .map(|(namespace, spec)| Grant { namespace, spec })
        .collect();
    let doc = document(&edges, &targets, &grants, &on());
    let content = Content::new(true, Some(doc.to_json()));
    (doc, content)
}

/// The figures of docs/security.md ("Limits"): 10 000 Agents and 1 000 grants are about three
/// times what one ConfigMap holds, so the write is refused with the size (KAOS's PDP mounts one
/// ConfigMap and KAOS does not split its data either); 3 000 Agents with the same grants fit.
#[test]
fn ten_thousand_agents_are_refused_with_their_size_and_three_thousand_fit() {
    let started = std::time::Instant::now();
    let (doc, content) = at_scale(10_000, 1_000);
    println!(
        "10 000 agents, 1 000 grants: {} bytes, built in {:?}",
        content.size(),
        started.elapsed()
    );
    assert_eq!(doc.kaos.grants.len(), 10_000);
    assert_eq!(
        doc.kaos.user_grants.as_ref().map(BTreeMap::len),
        Some(1_100)
    );
    let refused = content.too_big().expect("over one ConfigMap");
    assert!(
        refused.contains(&format!("is {} bytes", content.size())),
        "{refused}"
    );
    assert!(
        (2_900_000..3_300_000).contains(&content.size()),
        "{}",
        content.size()
    );
    let (_, fits) = at_scale(3_000, 1_000);
    println!("3 000 agents, 1 000 grants: {} bytes", fits.size());
    assert!(fits.too_big().is_none(), "{} bytes", fits.size());
}
