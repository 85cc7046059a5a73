//! The ModelAPI controller against kaos-testkit with the deployment simulator.

use std::time::Duration;

use clap::Parser;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use kaos_api::agent::Agent;
use kaos_api::common::Phase;
use kaos_api::modelapi::ModelAPI;
use kaos_harness::cluster::TestCluster;
use kaos_harness::controller::ControllerTest;
use kaos_harness::deployments::template_annotation;
use kaos_harness::fixtures::*;
use kaos_harness::status::{Conditioned, Phased};
use kaos_testkit::faults::FaultConfig;
use modelapi_controller::settings::Args;
use serde_json::json;

/// The controller without its model checks: these tests are about what it writes (the checks
/// against real and fake servers: `tests/models_loaded.rs`).
fn start() -> ControllerTest {
    let args = Args::try_parse_from([
        "modelapi-controller",
        "--default-litellm-image=litellm:test",
        "--default-ollama-image=ollama:test",
        "--protocol-checks=false",
    ])
    .expect("flags");
    ControllerTest::start(
        TestCluster::start(),
        modelapi_controller::ID,
        args.runtime,
        |runtime| modelapi_controller::controller::run(runtime, args.settings),
    )
}

/// A proxy to OpenAI of these models.
fn openai(name: &str, models: &[&str]) -> ModelAPI {
    ModelAPI::test(name).proxy(models).provider("openai")
}

#[tokio::test]
async fn proxy_and_hosted_become_ready_with_their_endpoints() {
    let h = start();
    h.create(&openai("proxy", &["gpt-4o"])).await;
    h.create(&ModelAPI::test("local").hosted("smollm2:135m"))
        .await;
    let proxy = h.until_phase::<ModelAPI>("proxy", Phase::Ready).await;
    let status = proxy.status.expect("status");
    assert!(status.ready);
    assert_eq!(
        status.endpoint.as_deref(),
        Some("http://modelapi-proxy.default.svc.cluster.local:8000")
    );
    assert_eq!(
        status.message.as_deref(),
        Some("Deployment ready replicas: 1/1")
    );
    assert_eq!(status.observed_generation, Some(1));
    assert!(
        status
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True" && c.reason == "DeploymentReady")
    );
    assert_eq!(status.scale.deployment.map(|d| d.ready_replicas), Some(1));
    assert!(
        proxy
            .metadata
            .finalizers
            .unwrap_or_default()
            .contains(&"kaos.tools/modelapi-finalizer".to_string())
    );

    let local = h.until_phase::<ModelAPI>("local", Phase::Ready).await;
    assert_eq!(
        local.status.and_then(|s| s.endpoint).as_deref(),
        Some("http://modelapi-local.default.svc.cluster.local:11434")
    );
    assert!(
        h.get_opt::<ConfigMap>("litellm-config-proxy")
            .await
            .is_some()
    );
    assert!(
        h.get_opt::<ConfigMap>("litellm-config-local")
            .await
            .is_none(),
        "Hosted has no LiteLLM config"
    );
}

#[tokio::test]
async fn editing_models_updates_the_config_and_rolls_the_deployment_once() {
    let h = start();
    h.create(&openai("proxy", &["gpt-4o"])).await;
    h.until_phase::<ModelAPI>("proxy", Phase::Ready).await;
    let before = h.get::<Deployment>("modelapi-proxy").await;

    let edit = json!({"spec": {"proxyConfig": {"models": ["gpt-4o", "o3"]}}});
    h.merge_patch::<ModelAPI>("proxy", edit).await;
    h.until("proxy", "observed at generation 2", |m: &ModelAPI| {
        m.status.as_ref().and_then(|s| s.observed_generation) == Some(2)
    })
    .await;
    let config = h.get::<ConfigMap>("litellm-config-proxy").await;
    assert!(config.data.expect("data")["config.yaml"].contains("model_name: \"o3\""));
    let after = h.get::<Deployment>("modelapi-proxy").await;
    assert_eq!(
        after.metadata.generation,
        Some(before.metadata.generation.unwrap_or(0) + 1),
        "one rollout"
    );
    let config_hash = |d: &Deployment| template_annotation(d, "kaos.tools/config-hash");
    assert_ne!(config_hash(&before), config_hash(&after));
}

/// A Ready ModelAPI `proxy` whose Deployment watch is cut every 200 ms (and resumed), and the
/// faults that do so: faults added to them reach that watch at once.
async fn ready_with_the_deployment_watch_cut() -> (ControllerTest, FaultConfig) {
    let cut = FaultConfig {
        watch_cut_after: Some(Duration::from_millis(200)),
        resources: vec!["deployments".into()],
        ..Default::default()
    };
    let h = start();
    h.api.faults.set(cut.clone());
    h.create(&openai("proxy", &["gpt-4o"])).await;
    h.until_phase::<ModelAPI>("proxy", Phase::Ready).await;
    (h, cut)
}

/// A watch that keeps failing (every start of the Deployment watch answered 410 Gone, every
/// relist 500) holds up no reconcile that reads other caches: an edit of the ModelAPI reaches
/// its ConfigMap at once. Before, every watch error paused all the caches of the Controller, for
/// a backoff doubling from 0.8 s that only a passed event reset: after 12 s it was 3–25 s.
#[tokio::test]
async fn a_failing_watch_holds_up_no_reconcile_of_the_other_caches() {
    let (h, cut) = ready_with_the_deployment_watch_cut().await;
    h.api.faults.set(FaultConfig {
        gone_rate: 1.0,
        error_rate: 1.0,
        ..cut
    });
    tokio::time::sleep(Duration::from_secs(12)).await;
    let edit = json!({"spec": {"proxyConfig": {"models": ["gpt-4o", "o3"]}}});
    h.merge_patch::<ModelAPI>("proxy", edit).await;
    h.until_within(
        Duration::from_secs(2),
        "litellm-config-proxy",
        "listing o3",
        |c: &ConfigMap| {
            let config = c.data.as_ref().and_then(|d| d.get("config.yaml"));
            config.is_some_and(|c| c.contains("model_name: \"o3\""))
        },
    )
    .await;

    // Once the watch works again, the rollout the faults held back happens.
    h.api.faults.set(FaultConfig::default());
    h.until("proxy", "Ready at generation 2", |m: &ModelAPI| {
        m.status
            .as_ref()
            .is_some_and(|s| s.ready && s.observed_generation == Some(2))
    })
    .await;
}

/// A child deleted while its watch was down (no event comes for it; the relist just no longer
/// shows it) is created again: its owner is woken by the relist.
#[tokio::test]
async fn a_child_deleted_while_its_watch_was_down_is_created_again() {
    let (h, cut) = ready_with_the_deployment_watch_cut().await;
    let before = h.get::<Deployment>("modelapi-proxy").await;

    // From now on every Deployment watch fails as it starts: only relists show them.
    h.api.faults.set(FaultConfig {
        gone_rate: 1.0,
        ..cut
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    h.delete::<Deployment>("modelapi-proxy").await;
    let again = h
        .until("modelapi-proxy", "created again", |d: &Deployment| {
            d.metadata.uid != before.metadata.uid
        })
        .await;
    assert_eq!(again.spec, before.spec);
}

#[tokio::test]
async fn switching_proxy_to_hosted_changes_the_port_and_removes_the_config() {
    let h = start();
    h.create(&openai("m", &["*"])).await;
    h.until_phase::<ModelAPI>("m", Phase::Ready).await;
    let to_hosted = json!({"spec": {"mode": "Hosted", "hostedConfig": {"model": "llama3"}, "proxyConfig": null}});
    h.merge_patch::<ModelAPI>("m", to_hosted).await;
    let m = h
        .until("m", "Hosted", |m: &ModelAPI| {
            m.status.as_ref().and_then(|s| s.endpoint.as_deref())
                == Some("http://modelapi-m.default.svc.cluster.local:11434")
        })
        .await;
    assert_eq!(m.phase(), Some(Phase::Ready));
    let port = h
        .get::<Service>("modelapi-m")
        .await
        .spec
        .and_then(|s| s.ports)
        .expect("ports")[0]
        .port;
    assert_eq!(port, 11434);
    h.until_gone::<ConfigMap>("litellm-config-m").await;
}

#[tokio::test]
async fn a_bad_config_yaml_fails_naming_the_model_and_recovers_when_fixed() {
    let h = start();
    let bad = ModelAPI::test("bad").proxy(["gpt-4o"]).config_yaml(
        "model_list:\n  - model_name: claude-3\n    litellm_params: {model: anthropic/claude-3}\n",
    );
    h.create(&bad).await;
    let failed = h.until_phase::<ModelAPI>("bad", Phase::Failed).await;
    let message = failed.message();
    assert!(
        message.contains("\"claude-3\"") && message.contains("proxyConfig.models"),
        "{message}"
    );
    let ready = failed.condition("Ready").expect("Ready condition");
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "ModelNotAllowed")
    );

    let fix = json!({"spec": {"proxyConfig": {"models": ["gpt-4o", "claude-3"]}}});
    h.merge_patch::<ModelAPI>("bad", fix).await;
    h.until_phase::<ModelAPI>("bad", Phase::Ready).await;
}

#[tokio::test]
async fn deleting_a_modelapi_removes_its_children() {
    let h = start();
    h.create(&openai("gone", &["*"])).await;
    h.until_phase::<ModelAPI>("gone", Phase::Ready).await;
    h.delete::<ModelAPI>("gone").await;
    h.until_gone_with_workload::<ModelAPI>("gone").await;
    h.until_gone::<ConfigMap>("litellm-config-gone").await;
}

#[tokio::test]
async fn a_steady_state_makes_no_writes_over_ten_seconds() {
    let h = start();
    h.create(&openai("p", &["*"]).api_key("sk-test")).await;
    let hosted = ModelAPI::test("o").hosted("m").telemetry(true);
    h.create(&hosted).await;
    h.until_phase::<ModelAPI>("p", Phase::Ready).await;
    let o = h.until_phase::<ModelAPI>("o", Phase::Ready).await;
    let telemetry = o.condition("TelemetrySupported");
    assert_eq!(
        telemetry.map(|c| (c.status.as_str(), c.reason.as_str())),
        Some(("False", "NotSupportedInHostedMode"))
    );
    // Let the last status and event writes settle, then watch for ten seconds.
    tokio::time::sleep(Duration::from_millis(500)).await;
    h.assert_no_writes_during(Duration::from_secs(10)).await;
}

#[tokio::test]
async fn an_inline_key_is_kept_in_an_owned_secret_rotated_and_removed_when_referenced() {
    let h = start();
    h.create(&openai("k", &["*"]).api_key("sk-first")).await;
    h.until_phase::<ModelAPI>("k", Phase::Ready).await;
    let key = |s: Secret| s.data.unwrap_or_default()["api-key"].0.clone();
    let secret = h.get::<Secret>("modelapi-k-api-key").await;
    assert_eq!(key(secret), b"sk-first");
    let before = h.get::<Deployment>("modelapi-k").await;

    let rotate = json!({"spec": {"proxyConfig": {"apiKey": {"value": "sk-second"}}}});
    h.merge_patch::<ModelAPI>("k", rotate).await;
    h.until("k", "observed at generation 2", |m: &ModelAPI| {
        m.status.as_ref().and_then(|s| s.observed_generation) == Some(2)
    })
    .await;
    let secret = h.get::<Secret>("modelapi-k-api-key").await;
    assert_eq!(key(secret), b"sk-second");
    let after = h.get::<Deployment>("modelapi-k").await;
    assert_eq!(
        after.metadata.generation,
        Some(before.metadata.generation.unwrap_or(0) + 1),
        "a new key rolls the pods once"
    );

    let referenced =
        json!({"value": null, "valueFrom": {"secretKeyRef": {"name": "mine", "key": "k"}}});
    let to_reference = json!({"spec": {"proxyConfig": {"apiKey": referenced}}});
    h.merge_patch::<ModelAPI>("k", to_reference).await;
    h.until_gone::<Secret>("modelapi-k-api-key").await;
}

#[tokio::test]
async fn a_failed_rollout_is_failed_and_warned_of() {
    let h = start();
    h.create(&openai("llm", &["gpt-4o"])).await;
    h.until_phase::<ModelAPI>("llm", Phase::Ready).await;
    // The Deployment's rollout exceeds its progress deadline with nothing ready (the
    // simulator's `failed` outcome, as the deployment controller would report it).
    let failed = json!({"metadata": {"annotations": {(kaos_testkit::simulator::ROLLOUT_ANNOTATION): "failed"}}});
    h.merge_patch::<Deployment>("modelapi-llm", failed).await;
    let m = h
        .until("llm", "Failed by its rollout", |m: &ModelAPI| {
            m.phase() == Some(Phase::Failed) && m.reason("Ready") == "RolloutFailed"
        })
        .await;
    assert!(
        m.message().starts_with("Deployment ready replicas: 0/1: "),
        "{}",
        m.message()
    );
    h.until_warning("RolloutFailed").await;
}

/// The `model_list` entries of ModelAPI `name`'s config: (model_name, model_info.id, tpd).
async fn entries(h: &ControllerTest, name: &str) -> Vec<(String, Option<String>, Option<i64>)> {
    let config = h.get::<ConfigMap>(&format!("litellm-config-{name}")).await;
    let text = &config.data.expect("data")["config.yaml"];
    let config: serde_json::Value = serde_saphyr::from_str(text).expect("YAML");
    config["model_list"]
        .as_array()
        .expect("a model_list")
        .iter()
        .map(|e| {
            (
                e["model_name"].as_str().unwrap_or_default().to_string(),
                e["model_info"]["id"].as_str().map(String::from),
                e["litellm_params"]["tpd"].as_i64(),
            )
        })
        .collect()
}

#[tokio::test]
async fn budgeted_agents_get_entries_keyed_on_their_uid_and_a_burst_rolls_litellm_once() {
    let h = start();
    h.create(&openai("llm", &["openai/*"])).await;
    h.until_phase::<ModelAPI>("llm", Phase::Ready).await;
    let before = h.get::<Deployment>("modelapi-llm").await;
    // An agent without a budget is not the ModelAPI's concern.
    h.create(&Agent::test("plain")).await;
    let mut uids = Vec::new();
    for i in 0..5 {
        let agent = h
            .create(&Agent::test(&format!("a{i}")).tokens_per_day(1000 * (i + 1)))
            .await;
        uids.push(agent.metadata.uid.expect("a uid"));
    }
    let want: Vec<_> = std::iter::once(("openai/*".to_string(), None, None))
        .chain((0..5).map(|i| {
            (
                format!("kaos.default.a{i}"),
                Some(uids[i as usize].clone()),
                Some(1000 * (i + 1)),
            )
        }))
        .collect();
    h.until_within::<ConfigMap>(
        Duration::from_secs(20),
        "litellm-config-llm",
        "five budget entries",
        |c| {
            c.data
                .as_ref()
                .is_some_and(|d| d["config.yaml"].matches("kaos.default.").count() == 5)
        },
    )
    .await;
    assert_eq!(entries(&h, "llm").await, want);
    let ready = h
        .until("llm", "BudgetsEnforced", |m: &ModelAPI| {
            m.condition("BudgetsEnforced").is_some()
        })
        .await;
    assert_eq!(ready.reason("BudgetsEnforced"), "CountersInProcess");
    let after = h.get::<Deployment>("modelapi-llm").await;
    let strategy = after
        .spec
        .as_ref()
        .and_then(|s| s.strategy.clone())
        .expect("a strategy");
    assert_eq!(
        strategy.rolling_update.and_then(|r| r.max_unavailable),
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(0)),
        "no pod of the proxy goes before its replacement is ready"
    );
    let generation = |d: &Deployment| d.metadata.generation.unwrap_or(0);
    assert_eq!(
        generation(&after) - generation(&before),
        1,
        "a burst of five budgets rolls LiteLLM once"
    );

    // A budget removed takes its entry away; the others keep theirs (their counters' ids).
    h.merge_patch::<Agent>("a0", json!({"spec": {"budget": null}}))
        .await;
    h.delete::<Agent>("a1").await;
    h.until_within::<ConfigMap>(
        Duration::from_secs(20),
        "litellm-config-llm",
        "three budget entries",
        |c| {
            c.data
                .as_ref()
                .is_some_and(|d| d["config.yaml"].matches("kaos.default.").count() == 3)
        },
    )
    .await;
    assert_eq!(
        entries(&h, "llm").await,
        [
            want[0].clone(),
            want[3].clone(),
            want[4].clone(),
            want[5].clone()
        ]
    );

    // Steady: no write, even as agents without a budget come and go.
    tokio::time::sleep(Duration::from_millis(500)).await;
    h.create(&Agent::test("plain-2")).await;
    h.assert_no_writes_during(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn a_default_budget_covers_the_agents_without_one_of_their_own() {
    let h = start();
    let mut llm = openai("llm", &["openai/*"]);
    llm.spec
        .proxy_config
        .as_mut()
        .expect("proxy")
        .default_agent_budget = Some(kaos_api::budget::Budget {
        requests_per_day: Some(50),
        ..Default::default()
    });
    h.create(&llm).await;
    h.create(&Agent::test("own").tokens_per_day(10)).await;
    h.create(&Agent::test("defaulted")).await;
    h.until_within::<ConfigMap>(
        Duration::from_secs(20),
        "litellm-config-llm",
        "two budget entries",
        |c| {
            c.data
                .as_ref()
                .is_some_and(|d| d["config.yaml"].matches("kaos.default.").count() == 2)
        },
    )
    .await;
    let config = h.get::<ConfigMap>("litellm-config-llm").await;
    let config: serde_json::Value =
        serde_saphyr::from_str(&config.data.expect("data")["config.yaml"]).expect("YAML");
    let entry = |name: &str| {
        config["model_list"]
            .as_array()
            .expect("list")
            .iter()
            .find(|e| e["model_name"] == name)
            .cloned()
            .expect("an entry")
    };
    assert_eq!(entry("kaos.default.defaulted")["litellm_params"]["rpd"], 50);
    assert_eq!(entry("kaos.default.own")["litellm_params"]["tpd"], 10);
    assert!(
        entry("kaos.default.own")["litellm_params"]
            .get("rpd")
            .is_none()
    );
}
