//! The shapes users build — pairs, meshes, self-listing agents, stars — converge and then go
//! quiet (no reconcile, no write); a dependency change costs one Deployment write per agent;
//! hand edits are reverted; an object we do not own is never taken over.

mod support;

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use kaos_api::agent::{Agent, AgentPhase};
use kaos_api::modelapi::ModelAPI;
use kaos_harness::cluster::{TestCluster, eventually};
use kaos_harness::deployments::{env_value, image_of};
use kaos_harness::fixtures::*;
use kaos_harness::status::{Conditioned, Phased};
use kube::ResourceExt;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;
use support::{llm, reaction_to, start};

/// Agent `name` on `llm`, listing `peers`.
fn agent(cluster: &TestCluster, name: &str, peers: &[&str]) {
    cluster.apply(&Agent::test(name).peers(peers));
}

/// The Agent CRD as it was before its rules on the whole object (self-listing, name length).
fn install_crd_without_object_rules(cluster: &TestCluster) {
    let (_, mut crd) = kaos_api::crd::all()
        .into_iter()
        .find(|(file, _)| file.contains("agents"))
        .expect("the Agent CRD");
    let schema = crd.spec.versions[0]
        .schema
        .as_mut()
        .and_then(|s| s.open_api_v3_schema.as_mut())
        .expect("a schema");
    schema.x_kubernetes_validations = None;
    cluster.apply(&crd);
}

/// `PEER_AGENTS` of `agent-<name>`'s Deployment.
async fn peers_of(cluster: &TestCluster, name: &str) -> Option<String> {
    let d = cluster
        .get_opt::<Deployment>(&format!("agent-{name}"))
        .await?;
    env_value(&d, "PEER_AGENTS")
}

async fn all_ready(cluster: &TestCluster, names: &[&str]) {
    for name in names {
        cluster.until_phase::<Agent>(name, AgentPhase::Ready).await;
    }
}

/// Audit writes to `agent-<name>` Deployments.
fn deployment_writes(writes: &[String], name: &str) -> usize {
    let suffix = format!("/deployments/agent-{name}");
    writes.iter().filter(|w| w.ends_with(&suffix)).count()
}

#[tokio::test]
async fn a_pair_a_mesh_and_a_self_listing_agent_converge_then_go_quiet() {
    let h = start();
    h.apply_with_status(&llm().ready()).await;
    agent(&h, "a", &["b"]);
    agent(&h, "b", &["a"]);
    let mesh = ["m1", "m2", "m3", "m4", "m5"];
    for me in mesh {
        let others: Vec<&str> = mesh.iter().copied().filter(|p| *p != me).collect();
        agent(&h, me, &others);
    }
    // The CRD refuses a self-listing agent since issue 18; one stored before still converges.
    install_crd_without_object_rules(&h);
    agent(&h, "s", &["s"]);
    let expected = [
        ("a", "b"),
        ("b", "a"),
        ("m1", "m2,m3,m4,m5"),
        ("m3", "m1,m2,m4,m5"),
        ("m5", "m1,m2,m3,m4"),
        ("s", "s"),
    ];
    for (name, want) in expected {
        eventually(&format!("{name} has PEER_AGENTS={want}"), || async {
            (peers_of(&h, name).await.as_deref() == Some(want)).then_some(())
        })
        .await;
    }
    all_ready(&h, &["a", "b", "m1", "m2", "m3", "m4", "m5", "s"]).await;
    let own = h.get::<Deployment>("agent-s").await;
    assert_eq!(
        own.metadata.generation,
        Some(1),
        "a self-listing agent knows its own endpoint from its first build: never rolled"
    );
    // Fenced: converged, every change handled; then the idle window measured (its sleep).
    h.caught_up().await;
    let (reconciles, writes) = h.idle(Duration::from_secs(10)).await;
    assert_eq!(reconciles, 0.0, "reconciles while idle");
    assert!(writes.is_empty(), "writes while idle: {writes:?}");
}

#[tokio::test]
async fn a_pair_created_before_its_model_api_is_ready_is_built_once_with_its_peer() {
    let h = start();
    h.apply_with_status(&llm().pending()).await;
    agent(&h, "a", &["b"]);
    agent(&h, "b", &["a"]);
    for name in ["a", "b"] {
        h.until_phase::<Agent>(name, AgentPhase::Waiting).await;
    }
    h.write_status(&llm().ready()).await;
    all_ready(&h, &["a", "b"]).await;
    for (name, peer) in [("a", "b"), ("b", "a")] {
        assert_eq!(peers_of(&h, name).await.as_deref(), Some(peer));
        let d = h.get::<Deployment>(&format!("agent-{name}")).await;
        assert_eq!(
            d.metadata.generation,
            Some(1),
            "{name} is built with its waiting peer's future endpoint: never rolled for it"
        );
    }
}

#[tokio::test]
async fn a_star_coordinator_is_rolled_once_while_its_workers_get_endpoints() {
    let h = start();
    h.apply_with_status(&llm().ready()).await;
    let workers: Vec<String> = (1..=9).map(|i| format!("w{i}")).collect();
    let names: Vec<&str> = workers.iter().map(String::as_str).collect();
    agent(&h, "coordinator", &names);
    for name in &names {
        agent(&h, name, &[]);
    }
    let want = names.join(",");
    eventually("the coordinator lists its nine workers", || async {
        (peers_of(&h, "coordinator").await.as_deref() == Some(want.as_str())).then_some(())
    })
    .await;
    all_ready(&h, &["coordinator"]).await;
    // Fenced: every worker's endpoint reached the coordinator and every change was handled.
    h.caught_up().await;
    let coordinator = h.get::<Deployment>("agent-coordinator").await;
    assert!(
        coordinator.metadata.generation.unwrap_or(0) <= 2,
        "created, then rolled at most once for the nine endpoints: generation {:?}",
        coordinator.metadata.generation
    );
}

#[tokio::test]
async fn a_model_api_change_costs_one_deployment_write_per_agent() {
    let h = start();
    h.apply_with_status(&llm().ready()).await;
    let names = ["x1", "x2", "x3", "x4", "x5"];
    for name in names {
        agent(&h, name, &[]);
    }
    all_ready(&h, &names).await;
    // Fenced (in reaction_to, before the change and after it): nothing of the convergence is
    // counted, and every write the change caused is.
    let moved = llm().ready_at("http://modelapi-llm.default.svc.cluster.local:11434");
    let (_, writes) = reaction_to(&h, h.write_status(&moved)).await;
    for name in names {
        let d = h.get::<Deployment>(&format!("agent-{name}")).await;
        assert_eq!(
            env_value(&d, "MODEL_API_URL").as_deref(),
            Some("http://modelapi-llm.default.svc.cluster.local:11434"),
            "{name} uses the new endpoint"
        );
    }
    for name in names {
        assert_eq!(
            deployment_writes(&writes, name),
            1,
            "{name}: one Deployment write for one change: {writes:?}"
        );
    }
    // A change agents do not read (a label) reaches none of them.
    let label = json!({"metadata": {"labels": {"team": "ml"}}});
    let (reconciles, writes) = reaction_to(&h, h.merge_patch::<ModelAPI>("llm", label)).await;
    assert_eq!(
        (reconciles, writes),
        (
            0.0,
            vec!["patch /apis/kaos.tools/v1alpha1/namespaces/default/modelapis/llm".to_string()]
        ),
        "a ModelAPI's label wakes no agent"
    );
}

#[tokio::test]
async fn a_hand_edited_deployment_and_a_deleted_service_are_restored() {
    let h = start();
    h.apply_with_status(&llm().ready()).await;
    agent(&h, "d", &[]);
    all_ready(&h, &["d"]).await;
    let edit = json!([{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "evil:1"}]);
    h.api::<Deployment>()
        .patch(
            "agent-d",
            &PatchParams::default(),
            &Patch::Json::<()>(serde_json::from_value(edit).expect("patch")),
        )
        .await
        .expect("edit");
    h.until("agent-d", "restored to its image", |d: &Deployment| {
        image_of(d).as_deref() == Some("kaos-agent:test")
    })
    .await;
    h.delete::<Service>("agent-d").await;
    h.until("agent-d", "back", |_: &Service| true).await;
}

/// What the controller owns of a Service: its type, ports and selector, whole.
fn owned_part(service: &Service) -> serde_json::Value {
    let spec = service.spec.clone().unwrap_or_default();
    json!({"type": spec.type_, "ports": spec.ports, "selector": spec.selector})
}

#[tokio::test]
async fn a_hand_edited_service_is_put_back_whole_and_a_users_label_stays() {
    let h = start();
    h.apply_with_status(&llm().ready()).await;
    agent(&h, "s", &[]);
    all_ready(&h, &["s"]).await;
    let services = h.api::<Service>();
    let ours = owned_part(&services.get("agent-s").await.expect("service"));
    let edits = [
        ("the selector changed", Patch::Merge(json!({"spec": {"selector": {"agent": "other"}}}))),
        (
            "a port changed",
            Patch::Json(serde_json::from_value(json!([{"op": "replace", "path": "/spec/ports/0/port", "value": 9000}])).expect("patch")),
        ),
        (
            "a port added",
            Patch::Json(serde_json::from_value(json!([{"op": "add", "path": "/spec/ports/-", "value": {"name": "extra", "port": 9090, "targetPort": 9090}}])).expect("patch")),
        ),
        ("a label added", Patch::Merge(json!({"metadata": {"labels": {"team": "ml"}}}))),
    ];
    for (what, edit) in edits {
        let edited = services
            .patch("agent-s", &PatchParams::default(), &edit)
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        if what != "a label added" {
            assert_ne!(owned_part(&edited), ours, "{what}: the edit took");
        }
        h.until("agent-s", what, |s: &Service| owned_part(s) == ours)
            .await;
    }
    eventually("the user's label stays", || async {
        let s = services.get("agent-s").await.ok()?;
        (s.labels().get("team").map(String::as_str) == Some("ml")).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_status_written_by_hand_is_put_back() {
    let h = start();
    h.apply_with_status(&llm().ready()).await;
    agent(&h, "st", &[]);
    all_ready(&h, &["st"]).await;
    h.api::<Agent>()
        .patch_status(
            "st",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Failed", "ready": false}})),
        )
        .await
        .expect("status overwritten");
    h.until("st", "its status put back", |a: &Agent| {
        a.phase() == Some(AgentPhase::Ready) && a.status.as_ref().is_some_and(|s| s.ready)
    })
    .await;
}

#[tokio::test]
async fn a_name_admitted_before_the_name_rule_fails_and_gets_no_children() {
    let h = start();
    h.apply_with_status(&llm().ready()).await;
    install_crd_without_object_rules(&h);
    agent(&h, "team.alpha", &[]);
    let failed = h
        .until("team.alpha", "failed", |a: &Agent| {
            a.phase() == Some(AgentPhase::Failed) && a.reason("Ready") == "InvalidName"
        })
        .await;
    assert!(
        failed
            .message()
            .contains("\"agent-team.alpha\" must be a DNS-1035 label"),
        "{}",
        failed.message()
    );
    assert!(h.get_opt::<Deployment>("agent-team.alpha").await.is_none());
    assert!(h.get_opt::<Service>("agent-team.alpha").await.is_none());
}

#[tokio::test]
async fn a_foreign_service_is_left_untouched_and_the_agent_recovers_when_it_goes() {
    let h = start();
    h.apply_with_status(&llm().ready()).await;
    let services = h.api::<Service>();
    let foreign: Service = serde_json::from_value(json!({
        "metadata": {"name": "agent-f"},
        "spec": {"ports": [{"name": "web", "port": 1234}]}
    }))
    .expect("service");
    services
        .create(&PostParams::default(), &foreign)
        .await
        .expect("foreign");
    agent(&h, "f", &[]);
    let failed = h
        .until("f", "in conflict", |a: &Agent| {
            a.phase() == Some(AgentPhase::Failed) && a.reason("Ready") == "ChildConflict"
        })
        .await;
    assert!(
        failed
            .message()
            .contains("Service default/agent-f already exists and is not owned"),
        "{}",
        failed.message()
    );
    let kept = services.get("agent-f").await.expect("service");
    assert!(kept.metadata.owner_references.is_none(), "not adopted");
    assert_eq!(
        kept.spec.and_then(|s| s.ports).map(|p| p[0].port),
        Some(1234),
        "not overwritten"
    );
    h.until_warning("ChildConflict").await;

    services
        .delete("agent-f", &Default::default())
        .await
        .expect("delete");
    h.until_within(Duration::from_secs(15), "f", "Ready again", |a: &Agent| {
        a.phase() == Some(AgentPhase::Ready)
    })
    .await;
    let service = services.get("agent-f").await.expect("ours now");
    assert!(service.metadata.owner_references.is_some());
}
