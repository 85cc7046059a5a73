//! The ModelAPI controller against kaos-testkit with the deployment simulator.

use std::time::Duration;

use clap::Parser;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use kaos_api::common::Phase;
use kaos_api::modelapi::ModelAPI;
use kaos_harness::cluster::{TestCluster, eventually};
use kaos_runtime::Runtime;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use modelapi_controller::settings::Args;
use serde_json::{Value, json};

struct Harness {
    cluster: TestCluster,
    client: Client,
    modelapis: Api<ModelAPI>,
    _stop: tokio::sync::watch::Sender<bool>,
}

async fn start() -> Harness {
    let cluster = TestCluster::start();
    let client = cluster.client.clone();
    let args = Args::try_parse_from([
        "modelapi-controller",
        "--default-litellm-image=litellm:test",
        "--default-ollama-image=ollama:test",
    ])
    .expect("flags");
    let (runtime, stop) = Runtime::for_tests(client.clone(), modelapi_controller::ID, args.runtime);
    tokio::spawn(modelapi_controller::controller::run(runtime, args.settings));
    let modelapis = Api::default_namespaced(client.clone());
    Harness {
        cluster,
        client,
        modelapis,
        _stop: stop,
    }
}

fn manifest(name: &str, spec: Value) -> ModelAPI {
    serde_json::from_value(json!({"apiVersion": "kaos.tools/v1alpha1", "kind": "ModelAPI", "metadata": {"name": name}, "spec": spec}))
        .expect("ModelAPI")
}

/// Waits until `check` holds for the ModelAPI.
async fn until(h: &Harness, name: &str, what: &str, check: impl Fn(&ModelAPI) -> bool) -> ModelAPI {
    let what = format!("{name} is {what}");
    eventually(&what, || async {
        h.modelapis.get(name).await.ok().filter(|m| check(m))
    })
    .await
}

fn phase(m: &ModelAPI) -> Option<Phase> {
    m.status.as_ref().and_then(|s| s.phase)
}

async fn patch(h: &Harness, name: &str, body: Value) {
    h.modelapis
        .patch(name, &PatchParams::default(), &Patch::Merge(&body))
        .await
        .expect("patch");
}

fn proxy_spec(models: &[&str]) -> Value {
    json!({"mode": "Proxy", "proxyConfig": {"models": models, "provider": "openai"}})
}

#[tokio::test]
async fn proxy_and_hosted_become_ready_with_their_endpoints() {
    let h = start().await;
    h.modelapis
        .create(
            &PostParams::default(),
            &manifest("proxy", proxy_spec(&["gpt-4o"])),
        )
        .await
        .expect("create");
    h.modelapis
        .create(
            &PostParams::default(),
            &manifest(
                "local",
                json!({"mode": "Hosted", "hostedConfig": {"model": "smollm2:135m"}}),
            ),
        )
        .await
        .expect("create");
    let proxy = until(&h, "proxy", "Ready", |m| phase(m) == Some(Phase::Ready)).await;
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
    assert_eq!(status.deployment.map(|d| d.ready_replicas), Some(1));
    assert!(
        proxy
            .metadata
            .finalizers
            .unwrap_or_default()
            .contains(&"kaos.tools/modelapi-finalizer".to_string())
    );

    let local = until(&h, "local", "Ready", |m| phase(m) == Some(Phase::Ready)).await;
    assert_eq!(
        local.status.and_then(|s| s.endpoint).as_deref(),
        Some("http://modelapi-local.default.svc.cluster.local:11434")
    );
    let cms: Api<ConfigMap> = Api::default_namespaced(h.client.clone());
    assert!(cms.get("litellm-config-proxy").await.is_ok());
    assert!(
        cms.get("litellm-config-local").await.is_err(),
        "Hosted has no LiteLLM config"
    );
}

#[tokio::test]
async fn editing_models_updates_the_config_and_rolls_the_deployment_once() {
    let h = start().await;
    h.modelapis
        .create(
            &PostParams::default(),
            &manifest("proxy", proxy_spec(&["gpt-4o"])),
        )
        .await
        .expect("create");
    until(&h, "proxy", "Ready", |m| phase(m) == Some(Phase::Ready)).await;
    let deployments: Api<Deployment> = Api::default_namespaced(h.client.clone());
    let before = deployments.get("modelapi-proxy").await.expect("deployment");

    patch(
        &h,
        "proxy",
        json!({"spec": {"proxyConfig": {"models": ["gpt-4o", "o3"]}}}),
    )
    .await;
    until(&h, "proxy", "observed generation 2", |m| {
        m.status.as_ref().and_then(|s| s.observed_generation) == Some(2)
    })
    .await;
    let cms: Api<ConfigMap> = Api::default_namespaced(h.client.clone());
    let config = cms.get("litellm-config-proxy").await.expect("config");
    assert!(config.data.expect("data")["config.yaml"].contains("model_name: \"o3\""));
    let after = deployments.get("modelapi-proxy").await.expect("deployment");
    assert_eq!(
        after.metadata.generation,
        Some(before.metadata.generation.unwrap_or(0) + 1),
        "one rollout"
    );
    let annotation = |d: &Deployment| {
        d.spec
            .as_ref()
            .and_then(|s| s.template.metadata.as_ref())
            .and_then(|m| m.annotations.clone())
            .unwrap_or_default()["kaos.tools/config-hash"]
            .clone()
    };
    assert_ne!(annotation(&before), annotation(&after));
}

#[tokio::test]
async fn switching_proxy_to_hosted_changes_the_port_and_removes_the_config() {
    let h = start().await;
    h.modelapis
        .create(&PostParams::default(), &manifest("m", proxy_spec(&["*"])))
        .await
        .expect("create");
    until(&h, "m", "Ready", |m| phase(m) == Some(Phase::Ready)).await;
    patch(&h, "m", json!({"spec": {"mode": "Hosted", "hostedConfig": {"model": "llama3"}, "proxyConfig": null}})).await;
    let m = until(&h, "m", "Hosted", |m| {
        m.status.as_ref().and_then(|s| s.endpoint.as_deref())
            == Some("http://modelapi-m.default.svc.cluster.local:11434")
    })
    .await;
    assert_eq!(phase(&m), Some(Phase::Ready));
    let services: Api<Service> = Api::default_namespaced(h.client.clone());
    let port = services
        .get("modelapi-m")
        .await
        .expect("service")
        .spec
        .and_then(|s| s.ports)
        .expect("ports")[0]
        .port;
    assert_eq!(port, 11434);
    let cms: Api<ConfigMap> = Api::default_namespaced(h.client.clone());
    for _ in 0..100 {
        if cms.get("litellm-config-m").await.is_err() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the stale LiteLLM ConfigMap was not deleted");
}

#[tokio::test]
async fn a_bad_config_yaml_fails_naming_the_model_and_recovers_when_fixed() {
    let h = start().await;
    let spec = json!({"mode": "Proxy", "proxyConfig": {"models": ["gpt-4o"],
        "configYaml": {"fromString": "model_list:\n  - model_name: claude-3\n    litellm_params: {model: anthropic/claude-3}\n"}}});
    h.modelapis
        .create(&PostParams::default(), &manifest("bad", spec))
        .await
        .expect("create");
    let failed = until(&h, "bad", "Failed", |m| phase(m) == Some(Phase::Failed)).await;
    let status = failed.status.expect("status");
    let message = status.message.unwrap_or_default();
    assert!(
        message.contains("\"claude-3\"") && message.contains("proxyConfig.models"),
        "{message}"
    );
    let ready = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .expect("Ready condition");
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "ModelNotAllowed")
    );

    patch(
        &h,
        "bad",
        json!({"spec": {"proxyConfig": {"models": ["gpt-4o", "claude-3"]}}}),
    )
    .await;
    until(&h, "bad", "Ready", |m| phase(m) == Some(Phase::Ready)).await;
}

#[tokio::test]
async fn deleting_a_modelapi_removes_its_children() {
    let h = start().await;
    h.modelapis
        .create(
            &PostParams::default(),
            &manifest("gone", proxy_spec(&["*"])),
        )
        .await
        .expect("create");
    until(&h, "gone", "Ready", |m| phase(m) == Some(Phase::Ready)).await;
    h.modelapis
        .delete("gone", &DeleteParams::default())
        .await
        .expect("delete");
    let deployments: Api<Deployment> = Api::default_namespaced(h.client.clone());
    let services: Api<Service> = Api::default_namespaced(h.client.clone());
    let cms: Api<ConfigMap> = Api::default_namespaced(h.client.clone());
    for _ in 0..200 {
        let all_gone = h.modelapis.get("gone").await.is_err()
            && deployments.get("modelapi-gone").await.is_err()
            && services.get("modelapi-gone").await.is_err()
            && cms.get("litellm-config-gone").await.is_err();
        if all_gone {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the ModelAPI or its children are still there");
}

#[tokio::test]
async fn a_steady_state_makes_no_writes_over_ten_seconds() {
    let h = start().await;
    let mut inline_key = proxy_spec(&["*"]);
    inline_key["proxyConfig"]["apiKey"] = json!({"value": "sk-test"});
    h.modelapis
        .create(&PostParams::default(), &manifest("p", inline_key))
        .await
        .expect("create");
    h.modelapis
        .create(&PostParams::default(), &manifest("o", json!({"mode": "Hosted", "hostedConfig": {"model": "m"}, "telemetry": {"enabled": true}})))
        .await
        .expect("create");
    until(&h, "p", "Ready", |m| phase(m) == Some(Phase::Ready)).await;
    let o = until(&h, "o", "Ready", |m| phase(m) == Some(Phase::Ready)).await;
    let telemetry = o
        .status
        .expect("status")
        .conditions
        .into_iter()
        .find(|c| c.type_ == "TelemetrySupported");
    assert_eq!(
        telemetry.map(|c| (c.status, c.reason)),
        Some(("False".to_string(), "NotSupportedInHostedMode".to_string()))
    );
    // Let the last status and event writes settle, then watch for ten seconds.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let writes = h.cluster.writes_during(Duration::from_secs(10)).await;
    assert!(writes.is_empty(), "writes while idle: {writes:?}");
}

#[tokio::test]
async fn an_inline_key_is_kept_in_an_owned_secret_rotated_and_removed_when_referenced() {
    let h = start().await;
    let mut spec = proxy_spec(&["*"]);
    spec["proxyConfig"]["apiKey"] = json!({"value": "sk-first"});
    h.modelapis
        .create(&PostParams::default(), &manifest("k", spec))
        .await
        .expect("create");
    until(&h, "k", "Ready", |m| phase(m) == Some(Phase::Ready)).await;
    let secrets: Api<Secret> = Api::default_namespaced(h.client.clone());
    let key = |s: Secret| s.data.unwrap_or_default()["api-key"].0.clone();
    let secret = secrets
        .get("modelapi-k-api-key")
        .await
        .expect("the owned Secret");
    assert_eq!(key(secret), b"sk-first");
    let deployments: Api<Deployment> = Api::default_namespaced(h.client.clone());
    let before = deployments.get("modelapi-k").await.expect("deployment");

    patch(
        &h,
        "k",
        json!({"spec": {"proxyConfig": {"apiKey": {"value": "sk-second"}}}}),
    )
    .await;
    until(&h, "k", "observed generation 2", |m| {
        m.status.as_ref().and_then(|s| s.observed_generation) == Some(2)
    })
    .await;
    let secret = secrets
        .get("modelapi-k-api-key")
        .await
        .expect("the owned Secret");
    assert_eq!(key(secret), b"sk-second");
    let after = deployments.get("modelapi-k").await.expect("deployment");
    assert_eq!(
        after.metadata.generation,
        Some(before.metadata.generation.unwrap_or(0) + 1),
        "a new key rolls the pods once"
    );

    let referenced =
        json!({"value": null, "valueFrom": {"secretKeyRef": {"name": "mine", "key": "k"}}});
    patch(
        &h,
        "k",
        json!({"spec": {"proxyConfig": {"apiKey": referenced}}}),
    )
    .await;
    eventually("the owned Secret to be deleted", || async {
        secrets
            .get_opt("modelapi-k-api-key")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
}
