//! The access controller against kaos-testkit: AccessGrants and ThirdPartyServices say they are
//! not enforced, in KAOS's words, and whether what they name exists; they follow the named
//! objects as they appear, and write nothing while nothing changes.

use std::time::Duration;

use authz_controller::settings::Args;
use clap::Parser;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kaos_api::access::{AccessGrant, ThirdPartyService};
use kaos_api::agent::Agent;
use kaos_harness::cluster::{TestCluster, eventually};
use kaos_runtime::Runtime;
use kube::Api;
use kube::api::{DeleteParams, ListParams};
use serde_json::{Value, json};

struct Harness {
    cluster: TestCluster,
    _stop: tokio::sync::watch::Sender<bool>,
}

async fn start() -> Harness {
    let cluster = TestCluster::start();
    let args = Args::try_parse_from(["authz-controller"]).expect("flags");
    let (runtime, stop) =
        Runtime::for_tests(cluster.client.clone(), authz_controller::ID, args.runtime);
    tokio::spawn(authz_controller::controller::run(runtime));
    Harness {
        cluster,
        _stop: stop,
    }
}

fn apply(h: &Harness, kind: &str, name: &str, spec: Value) {
    let manifest = json!({"apiVersion": "kaos.tools/v1alpha1", "kind": kind,
        "metadata": {"name": name, "namespace": "default"}, "spec": spec});
    h.cluster.apply(&manifest.to_string());
}

fn condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// (status, reason, message) of a condition.
fn state(conditions: &[Condition], type_: &str) -> Option<(String, String, String)> {
    condition(conditions, type_).map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

async fn grant_until(
    h: &Harness,
    what: &str,
    check: impl Fn(&[Condition]) -> bool,
) -> Vec<Condition> {
    let grants: Api<AccessGrant> = Api::default_namespaced(h.cluster.client.clone());
    eventually(what, || async {
        let grant = grants.get("researchers").await.ok()?;
        let conditions = grant.status.map(|s| s.conditions).unwrap_or_default();
        check(&conditions).then_some(conditions)
    })
    .await
}

async fn service_until(
    h: &Harness,
    what: &str,
    check: impl Fn(&[Condition]) -> bool,
) -> Vec<Condition> {
    let services: Api<ThirdPartyService> = Api::default_namespaced(h.cluster.client.clone());
    eventually(what, || async {
        let service = services.get("github").await.ok()?;
        let conditions = service.status.map(|s| s.conditions).unwrap_or_default();
        check(&conditions).then_some(conditions)
    })
    .await
}

fn agent(h: &Harness, name: &str) {
    apply(
        h,
        "Agent",
        name,
        json!({"modelAPI": "llm", "model": "openai/gpt-4o"}),
    );
}

#[tokio::test]
async fn a_grant_is_never_claimed_enforced_and_follows_what_it_names() {
    let h = start().await;
    agent(&h, "researcher");
    apply(
        &h,
        "AccessGrant",
        "researchers",
        json!({"subjects": [{"kind": "Group", "name": "researchers"}, {"kind": "Agent", "name": "researcher"}],
               "resources": [{"kind": "Agent", "name": "researcher"}, {"kind": "MCPServer", "name": "tools"},
                             {"selector": {"matchLabels": {"team": "research"}}}]}),
    );
    let conditions = grant_until(&h, "the grant's status", |c| {
        condition(c, "ResolvedRefs").is_some()
    })
    .await;
    assert_eq!(
        state(&conditions, "Enforced"),
        Some((
            "False".into(),
            "AuthorizationDisabled".into(),
            "Gateway authorization is not enabled; this AccessGrant is not enforced".into()
        ))
    );
    assert_eq!(
        state(&conditions, "ResolvedRefs"),
        Some((
            "False".into(),
            "ReferenceNotFound".into(),
            "MCPServer tools not found in namespace default; create them or fix the names".into()
        ))
    );
    let events: Api<Event> = Api::default_namespaced(h.cluster.client.clone());
    eventually("a Warning event names the missing MCPServer", || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        list.items
            .iter()
            .any(|e| {
                e.type_.as_deref() == Some("Warning")
                    && e.reason.as_deref() == Some("ReferenceNotFound")
            })
            .then_some(())
    })
    .await;

    apply(
        &h,
        "MCPServer",
        "tools",
        json!({"runtime": "python-string", "params": "x"}),
    );
    let conditions = grant_until(&h, "resolved once the MCPServer exists", |c| {
        condition(c, "ResolvedRefs").is_some_and(|c| c.status == "True")
    })
    .await;
    assert_eq!(
        condition(&conditions, "Enforced").map(|c| c.status.as_str()),
        Some("False")
    );
    let writes = h.cluster.writes_during(Duration::from_millis(600)).await;
    assert!(
        writes.is_empty(),
        "nothing changes, nothing is written: {writes:?}"
    );

    let agents: Api<Agent> = Api::default_namespaced(h.cluster.client.clone());
    agents
        .delete("researcher", &DeleteParams::default())
        .await
        .expect("delete");
    grant_until(&h, "unresolved once the Agent goes", |c| {
        state(c, "ResolvedRefs")
            .is_some_and(|(s, _, m)| s == "False" && m.starts_with("Agent researcher"))
    })
    .await;
}

#[tokio::test]
async fn a_third_party_service_is_never_ready_and_checks_its_secret_agents_and_scopes() {
    let h = start().await;
    agent(&h, "researcher");
    let spec = |scopes: Value| {
        json!({"clientID": "kaos", "clientSecretRef": {"name": "github-oauth", "key": "secret"},
               "issuerURI": "https://github.com/login/oauth", "scopes": [{"name": "repo"}],
               "protectedResources": ["https://api.github.com"], "routeRef": {"name": "github-egress"},
               "access": [{"agent": "researcher", "scopes": scopes}]})
    };
    apply(&h, "ThirdPartyService", "github", spec(json!(["repo"])));
    let conditions = service_until(&h, "the missing Secret reported", |c| {
        state(c, "ResolvedRefs").is_some_and(|(_, r, _)| r == "SecretNotFound")
    })
    .await;
    assert_eq!(
        state(&conditions, "Ready"),
        Some((
            "False".into(),
            "FeatureDisabled".into(),
            "Token exchange is disabled".into()
        ))
    );
    h.cluster.apply(
        "apiVersion: v1\nkind: Secret\nmetadata: {name: github-oauth, namespace: default}\nstringData: {secret: s3cr3t}\n",
    );
    let conditions = service_until(
        &h,
        "resolved once the Secret exists (looked at again)",
        |c| condition(c, "ResolvedRefs").is_some_and(|c| c.status == "True"),
    )
    .await;
    assert!(
        !format!("{conditions:?}").contains("s3cr3t"),
        "no secret value in the status"
    );

    apply(
        &h,
        "ThirdPartyService",
        "github",
        spec(json!(["repo", "gist"])),
    );
    service_until(&h, "an undeclared scope reported", |c| {
        state(c, "ResolvedRefs")
            .is_some_and(|(_, r, m)| r == "UndeclaredScope" && m.contains("researcher: gist"))
    })
    .await;
}
