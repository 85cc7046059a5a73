//! The access controller against kaos-testkit without KAOS's security plane (the default):
//! AccessGrants and ThirdPartyServices say they are not enforced, in KAOS's words, and whether
//! what they name exists; they follow the named objects as they appear, and write nothing while
//! nothing changes. With the plane: `projection.rs`.

use std::time::Duration;

use authz_controller::settings::Args;
use clap::Parser;
use kaos_api::access::{AccessGrant, ResourceKind, SubjectKind, ThirdPartyService};
use kaos_api::agent::Agent;
use kaos_api::mcpserver::MCPServer;
use kaos_harness::cluster::TestCluster;
use kaos_harness::controller::ControllerTest;
use kaos_harness::fixtures::*;
use kaos_harness::status::Conditioned;

fn start() -> ControllerTest {
    let args = Args::try_parse_from(["authz-controller"]).expect("flags");
    ControllerTest::start(
        TestCluster::start(),
        authz_controller::ID,
        args.runtime,
        move |runtime| authz_controller::controller::run(runtime, args.settings),
    )
}

/// `ThirdPartyService` `github`, giving Agent `researcher` these scopes.
fn github(scopes: &[&str]) -> ThirdPartyService {
    ThirdPartyService::test("github")
        .client_secret("github-oauth", "secret")
        .issuer("https://github.com/login/oauth")
        .scopes(["repo"])
        .protected_resources(["https://api.github.com"])
        .route("github-egress")
        .access("researcher", scopes)
}

#[tokio::test]
async fn a_grant_is_never_claimed_enforced_and_follows_what_it_names() {
    let h = start();
    h.apply(&Agent::test("researcher"));
    let grant = AccessGrant::test("researchers")
        .subject(SubjectKind::Group, "researchers")
        .subject(SubjectKind::Agent, "researcher")
        .resource(ResourceKind::Agent, "researcher")
        .resource(ResourceKind::MCPServer, "tools")
        .resources_labelled("team", "research");
    h.apply(&grant);
    let grant = h
        .until("researchers", "given a status", |g: &AccessGrant| {
            g.condition("ResolvedRefs").is_some()
        })
        .await;
    assert_eq!(
        grant.condition_state("Enforced"),
        Some((
            "False".into(),
            "AuthorizationDisabled".into(),
            "Gateway authorization is not enabled; this AccessGrant is not enforced".into()
        ))
    );
    assert_eq!(
        grant.condition_state("ResolvedRefs"),
        Some((
            "False".into(),
            "ReferenceNotFound".into(),
            "MCPServer tools not found in namespace default; create them or fix the names".into()
        ))
    );
    // The Warning event names the missing MCPServer.
    h.until_warning("ReferenceNotFound").await;

    h.apply(&MCPServer::test("tools").params("x"));
    // Every name resolves; the selector still matches nothing.
    h.until(
        "researchers",
        "reporting its empty selector once the MCPServer exists",
        |g: &AccessGrant| g.reason("ResolvedRefs") == "SelectorMatchesNothing",
    )
    .await;
    let mut researcher = Agent::test("researcher");
    researcher.metadata.labels = Some([("team".to_string(), "research".to_string())].into());
    h.apply(&researcher);
    let grant = h
        .until(
            "researchers",
            "resolved once an Agent carries the label",
            |g: &AccessGrant| {
                g.condition("ResolvedRefs")
                    .is_some_and(|c| c.status == "True")
            },
        )
        .await;
    assert_eq!(
        grant.condition("Enforced").map(|c| c.status.as_str()),
        Some("False")
    );
    // Nothing changes, nothing is written.
    h.assert_no_writes_during(Duration::from_millis(600)).await;

    h.delete::<Agent>("researcher").await;
    h.until(
        "researchers",
        "unresolved once the Agent goes",
        |g: &AccessGrant| {
            g.condition_state("ResolvedRefs")
                .is_some_and(|(s, _, m)| s == "False" && m.starts_with("Agent researcher"))
        },
    )
    .await;
}

#[tokio::test]
async fn a_third_party_service_is_never_ready_and_checks_its_secret_agents_and_scopes() {
    let h = start();
    h.apply(&Agent::test("researcher"));
    h.apply(&github(&["repo"]));
    let service = h
        .until(
            "github",
            "reporting its missing Secret",
            |s: &ThirdPartyService| s.reason("ResolvedRefs") == "SecretNotFound",
        )
        .await;
    assert_eq!(
        service.condition_state("Ready"),
        Some((
            "False".into(),
            "FeatureDisabled".into(),
            "Token exchange is disabled".into()
        ))
    );
    h.apply(&secret("github-oauth", [("secret", "s3cr3t")]));
    let service = h
        .until(
            "github",
            "resolved once the Secret exists (looked at again)",
            |s: &ThirdPartyService| {
                s.condition("ResolvedRefs")
                    .is_some_and(|c| c.status == "True")
            },
        )
        .await;
    assert!(
        !format!("{:?}", service.conditions()).contains("s3cr3t"),
        "no secret value in the status"
    );

    h.apply(&github(&["repo", "gist"]));
    h.until(
        "github",
        "reporting an undeclared scope",
        |s: &ThirdPartyService| {
            s.condition_state("ResolvedRefs")
                .is_some_and(|(_, r, m)| r == "UndeclaredScope" && m.contains("researcher: gist"))
        },
    )
    .await;
}

/// One process, two kinds: each kind's `kaos_resources` gauge counts its own objects by the
/// phase its status says (what the alerts and dashboards read).
#[tokio::test]
async fn each_kind_is_counted_by_phase() {
    let h = start();
    h.apply(
        &AccessGrant::test("researchers")
            .subject(SubjectKind::Agent, "researcher")
            .resource(ResourceKind::Agent, "researcher"),
    );
    h.apply(
        &AccessGrant::test("writers")
            .subject(SubjectKind::Agent, "writer")
            .resource(ResourceKind::MCPServer, "tools"),
    );
    h.apply(&github(&["repo"]));
    kaos_harness::cluster::eventually("both kinds counted by phase", || async {
        let metrics = h.controller.runtime.metrics.encode();
        let counted = |kind: &str, phase: &str, count: u32| {
            metrics.contains(&format!(
                "kaos_resources{{kind=\"{kind}\",phase=\"{phase}\"}} {count}"
            ))
        };
        (counted("AccessGrant", "AuthorizationDisabled", 2)
            && counted("ThirdPartyService", "FeatureDisabled", 1))
        .then_some(())
    })
    .await;
}
