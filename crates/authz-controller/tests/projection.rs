//! The access controller with KAOS's security plane on, against kaos-testkit: each grant's
//! `Enforced` condition in KAOS's reasons, the policy ConfigMap written once per change of what
//! it holds (not per Agent reconcile, never at steady state, not when an Agent field it does not
//! read changes), and a thousand Agents with a hundred grants.

mod support;

use std::time::{Duration, SystemTime};

use authz_controller::settings::{DataSource, Security};
use kaos_api::access::{AccessGrant, ResourceKind, SubjectKind};
use kaos_api::agent::Agent;
use kaos_api::mcpserver::MCPServer;
use kaos_harness::cluster::eventually_within;
use kaos_harness::controller::ControllerTest;
use kaos_harness::fixtures::*;
use kaos_harness::status::Conditioned;
use kube::Resource;
use serde_json::{Value, json};
use support::{ISSUER, KeyServer, configmap_writes, policy_data, security_on, start};

fn keys() -> Value {
    json!({"keys": [{"kty": "RSA", "kid": "k1", "use": "sig", "alg": "RS256", "n": "sXch", "e": "AQAB"}]})
}

fn readers() -> AccessGrant {
    AccessGrant::test("readers")
        .subject(SubjectKind::Group, "researchers")
        .resource(ResourceKind::Agent, "researcher")
}

fn labelled(mut agent: Agent, key: &str, value: &str) -> Agent {
    agent
        .meta_mut()
        .labels
        .get_or_insert_default()
        .insert(key.into(), value.into());
    agent
}

async fn until_reason(h: &ControllerTest, grant: &str, reason: &str) -> AccessGrant {
    h.until(
        grant,
        &format!("Enforced reason {reason}"),
        |g: &AccessGrant| g.reason("Enforced") == reason,
    )
    .await
}

#[tokio::test]
async fn each_missing_piece_of_the_plane_is_the_reason_a_grant_is_not_enforced() {
    let cases = [
        (Security::default(), "AuthorizationDisabled"),
        (
            Security {
                user_issuer: String::new(),
                ..security_on("http://127.0.0.1:9/certs")
            },
            "NoUserIdentityProvider",
        ),
        (
            Security {
                policy_data_source: DataSource::Manual,
                ..security_on("http://127.0.0.1:9/certs")
            },
            "PolicyProjectionInactive",
        ),
    ];
    for (security, reason) in cases {
        let h = start(security);
        // What it names exists: the warning is about enforcement, not a missing Agent.
        h.apply(&Agent::test("researcher"));
        h.apply(&readers());
        let grant = until_reason(&h, "readers", reason).await;
        let (status, _, message) = grant.condition_state("Enforced").expect("Enforced");
        assert_eq!(status, "False", "{reason}");
        assert!(message.contains("AccessGrant"), "{message}");
        h.until_warning(reason).await;
    }
}

#[tokio::test]
async fn an_unreachable_key_set_fails_the_projection_and_says_why() {
    // Port 9 (discard) answers nothing: the users' keys cannot be read.
    let h = start(security_on("http://127.0.0.1:9/certs"));
    h.apply(&readers());
    let grant = until_reason(&h, "readers", "ProjectionFailed").await;
    let (_, _, message) = grant.condition_state("Enforced").expect("Enforced");
    assert!(
        message.starts_with("Policy projection failed; this AccessGrant is not currently enforced: reading the users' signing keys from http://127.0.0.1:9/certs"),
        "{message}"
    );
}

#[tokio::test]
async fn a_grant_is_enforced_once_projected_with_one_write_per_change_and_none_at_rest() {
    let server = KeyServer::start(&keys()).await;
    let h = start(security_on(&server.url));
    h.apply(&Agent::test("researcher").mcp_servers(["tools"]));
    h.apply(&labelled(Agent::test("writer"), "team", "research"));
    h.apply(&MCPServer::test("tools").params("x"));
    // The first pass writes the policy even before any grant (the PDP mounts it).
    let data = policy_data(&h).await;
    assert_eq!(
        data["kaos"]["grants"]["kaos://agent/default/researcher"],
        json!([
            "kaos://mcpserver/default/tools",
            "kaos://modelapi/default/llm"
        ])
    );
    assert_eq!(
        data["kaos"]["agents"]["kaos://agent/default/researcher"]["issuer_sub"],
        "system:serviceaccount:default:kaos-agent-researcher"
    );
    assert_eq!(data["kaos"]["jwks"][ISSUER], keys());
    h.assert_no_writes_during(Duration::from_millis(800)).await;

    // One grant: one ConfigMap write, and the grant says it is enforced.
    let since = SystemTime::now();
    h.apply(&readers().resources_labelled("team", "research"));
    let grant = until_reason(&h, "readers", "Enforced").await;
    assert_eq!(
        grant.condition_state("Enforced"),
        Some((
            "True".into(),
            "Enforced".into(),
            "AccessGrant is included in the successfully projected authorization policy".into()
        ))
    );
    let data = policy_data(&h).await;
    assert_eq!(
        data["kaos"]["user_grants"]["group:researchers"],
        json!([
            "kaos://agent/default/researcher",
            "kaos://agent/default/writer"
        ])
    );
    assert_eq!(
        data["kaos"]["user"],
        json!({"issuer": ISSUER, "audience": "kaos"})
    );
    tokio::time::sleep(Duration::from_millis(600)).await;
    let writes = h.writes_since(since);
    assert_eq!(configmap_writes(&writes).len(), 1, "{writes:?}");

    // At rest: nothing at all.
    h.assert_no_writes_during(Duration::from_millis(800)).await;

    // A field the data does not read: the Agent changes, the ConfigMap does not.
    let since = SystemTime::now();
    h.apply(
        &Agent::test("researcher")
            .mcp_servers(["tools"])
            .instructions("be brief"),
    );
    tokio::time::sleep(Duration::from_millis(800)).await;
    let writes = h.writes_since(since);
    assert!(configmap_writes(&writes).is_empty(), "{writes:?}");

    // A field it reads: one write.
    let since = SystemTime::now();
    h.apply(
        &Agent::test("researcher")
            .mcp_servers(["tools", "search"])
            .instructions("be brief"),
    );
    eventually_within(
        Duration::from_secs(10),
        "the new edge projected",
        || async {
            let data = policy_data(&h).await;
            data["kaos"]["grants"]["kaos://agent/default/researcher"]
                .as_array()
                .is_some_and(|a| a.len() == 3)
                .then_some(())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    let writes = h.writes_since(since);
    assert_eq!(configmap_writes(&writes).len(), 1, "{writes:?}");

    // Drift is put back: someone empties data.json.
    h.merge_patch::<k8s_openapi::api::core::v1::ConfigMap>(
        support::POLICY_CONFIGMAP,
        json!({"data": {"data.json": "{}"}}),
    )
    .await;
    eventually_within(Duration::from_secs(10), "data.json restored", || async {
        let data = policy_data(&h).await;
        data["kaos"]["grants"].is_object().then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_selector_that_matches_nothing_says_what_to_fix_until_something_matches() {
    let server = KeyServer::start(&keys()).await;
    let h = start(security_on(&server.url));
    h.apply(
        &AccessGrant::test("readers")
            .subject(SubjectKind::User, "alice")
            .resources_labelled("team", "research"),
    );
    let grant = h
        .until(
            "readers",
            "reporting its empty selector",
            |g: &AccessGrant| g.reason("ResolvedRefs") == "SelectorMatchesNothing",
        )
        .await;
    assert_eq!(
        grant.condition_state("ResolvedRefs").map(|(_, _, m)| m),
        Some("spec.resources[0].selector matches no Agent, MCPServer, ModelAPI or MemoryStore in namespace default; label the resources or fix the selector".into())
    );
    h.apply(&labelled(Agent::test("writer"), "team", "research"));
    h.until(
        "readers",
        "resolved once an Agent matches",
        |g: &AccessGrant| g.reason("ResolvedRefs") == "ReferencesResolved",
    )
    .await;
    eventually_within(
        Duration::from_secs(10),
        "the Agent projected for alice",
        || async {
            let data = policy_data(&h).await;
            (data["kaos"]["user_grants"]["user:alice"] == json!(["kaos://agent/default/writer"]))
                .then_some(())
        },
    )
    .await;
}

/// A thousand Agents and a hundred grants (each a group on ten Agents by selector): every grant
/// enforced, the projection done in a few writes, none once settled.
#[tokio::test]
async fn a_thousand_agents_and_a_hundred_grants_settle_with_few_writes() {
    let server = KeyServer::start(&keys()).await;
    let h = start(security_on(&server.url));
    let since = SystemTime::now();
    for i in 0..1_000 {
        let agent =
            Agent::test(&format!("agent-{i:04}")).peers([format!("agent-{:04}", (i + 1) % 1_000)]);
        h.apply(&labelled(agent, "squad", &format!("squad-{:03}", i / 10)));
    }
    for i in 0..100 {
        h.apply(
            &AccessGrant::test(&format!("grant-{i:03}"))
                .subject(SubjectKind::Group, &format!("group-{i:03}"))
                .resources_labelled("squad", &format!("squad-{i:03}")),
        );
    }
    eventually_within(Duration::from_secs(60), "every grant enforced", || async {
        let grants = h
            .api::<AccessGrant>()
            .list(&Default::default())
            .await
            .ok()?;
        (grants.items.len() == 100
            && grants
                .items
                .iter()
                .all(|g| g.reason("Enforced") == "Enforced"))
        .then_some(())
    })
    .await;
    let data = policy_data(&h).await;
    assert_eq!(
        data["kaos"]["grants"].as_object().map(|g| g.len()),
        Some(1_000)
    );
    assert_eq!(
        data["kaos"]["user_grants"].as_object().map(|g| g.len()),
        Some(100)
    );
    assert_eq!(
        data["kaos"]["user_grants"]["group:042"]
            .as_array()
            .map(Vec::len),
        None,
        "keys are group:<name>"
    );
    assert_eq!(
        data["kaos"]["user_grants"]["group:group-042"]
            .as_array()
            .map(Vec::len),
        Some(10)
    );
    let writes = h.writes_since(since);
    let configmap = configmap_writes(&writes).len();
    // Bursts are debounced into passes: far fewer writes than the 1 100 objects created.
    assert!(
        (1..=40).contains(&configmap),
        "{configmap} ConfigMap writes"
    );
    println!("1 000 agents, 100 grants: {configmap} ConfigMap writes");
    h.assert_no_writes_during(Duration::from_secs(1)).await;
}
