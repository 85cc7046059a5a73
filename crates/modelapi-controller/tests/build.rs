//! The pure ModelAPI builder against every line of the contract (`docs/contract.md` §2).

use clap::Parser;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use kaos_api::modelapi::ModelAPI;
use kaos_harness::built::assert_serves_http_on;
use kaos_harness::deployments::{env_with_sources, expected_env};
use kaos_workload::desired::Child;
use kube::core::DynamicObject;
use modelapi_controller::build::{
    Desired, PERMIT_KEYLESS_ENV as PERMIT_KEYLESS, Problem, TELEMETRY_SUPPORTED, desired,
};
use modelapi_controller::settings::{Args, Settings};
use serde_json::{Value, json};

fn settings(extra: &[&str]) -> Settings {
    let mut argv = vec![
        "modelapi-controller",
        "--default-litellm-image=litellm:main",
        "--default-ollama-image=ollama:latest",
    ];
    argv.extend_from_slice(extra);
    Args::try_parse_from(argv).expect("flags").settings
}

fn modelapi(spec: Value) -> ModelAPI {
    serde_json::from_value(json!({
        "apiVersion": "kaos.tools/v1alpha1", "kind": "ModelAPI",
        "metadata": {"name": "llm", "namespace": "team", "uid": "uid-1"}, "spec": spec
    }))
    .expect("valid ModelAPI")
}

/// The typed children of a ModelAPI's desired state, as the tests read them.
struct Built {
    deployment: Deployment,
    service: Service,
    config_map: Option<ConfigMap>,
    api_key_secret: Option<Secret>,
    http_route: Option<DynamicObject>,
    endpoint: String,
    telemetry_ignored: bool,
}

fn view(desired: Desired) -> Built {
    let config_map = desired.first.apply.iter().find_map(Child::get).cloned();
    let api_key_secret = desired.first.apply.iter().find_map(Child::get).cloned();
    Built {
        deployment: desired.workload.deployment,
        service: desired
            .workload
            .service
            .expect("a ModelAPI always has its Service"),
        config_map,
        api_key_secret,
        http_route: desired.workload.http_route,
        endpoint: desired.endpoint.expect("a ModelAPI always has an endpoint"),
        telemetry_ignored: desired
            .conditions
            .iter()
            .any(|c| c.type_ == TELEMETRY_SUPPORTED && !c.status),
    }
}

fn built(spec: Value, extra: &[&str]) -> Built {
    view(desired(&modelapi(spec), &settings(extra), &[]).expect("builds"))
}

fn json_of<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).expect("serializes")
}

fn container(desired: &Built) -> Value {
    json_of(&desired.deployment)["spec"]["template"]["spec"]["containers"][0].clone()
}

/// The LiteLLM config the ConfigMap carries.
fn config_yaml(d: &Built) -> String {
    d.config_map
        .as_ref()
        .and_then(|c| c.data.as_ref())
        .map(|data| data["config.yaml"].clone())
        .expect("config")
}

fn proxy() -> Value {
    json!({"mode": "Proxy", "proxyConfig": {
        "models": ["gpt-4o", "gpt-4o-mini"], "provider": "openai", "apiBase": "https://api.openai.com/v1",
        "apiKey": {"valueFrom": {"secretKeyRef": {"name": "openai", "key": "api-key"}}}
    }})
}

#[test]
fn proxy_names_labels_owner_port_and_endpoint() {
    let d = built(proxy(), &[]);
    let deployment = json_of(&d.deployment);
    assert_eq!(deployment["metadata"]["name"], "modelapi-llm");
    assert_eq!(deployment["metadata"]["namespace"], "team");
    assert_eq!(
        deployment["metadata"]["labels"],
        json!({"app": "modelapi", "modelapi": "llm"})
    );
    assert_eq!(
        deployment["spec"]["selector"]["matchLabels"],
        json!({"app": "modelapi", "modelapi": "llm"})
    );
    assert_eq!(
        deployment["metadata"]["ownerReferences"],
        json!([{
            "apiVersion": "kaos.tools/v1alpha1", "kind": "ModelAPI", "name": "llm", "uid": "uid-1",
            "controller": true, "blockOwnerDeletion": true
        }])
    );
    let c = container(&d);
    assert_eq!(c["name"], "model-api");
    assert_eq!(c["image"], "litellm:main");
    assert_serves_http_on(&d.deployment, &d.service, 8000);
    assert_eq!(
        c["args"],
        json!(["--config", "/etc/litellm/config.yaml", "--port", "8000"])
    );
    assert_eq!(json_of(&d.service)["metadata"]["name"], "modelapi-llm");
    assert_eq!(
        d.endpoint,
        "http://modelapi-llm.team.svc.cluster.local:8000"
    );
    assert!(
        d.deployment
            .spec
            .as_ref()
            .and_then(|s| s.replicas)
            .is_none(),
        "replicas left to the server default"
    );
}

#[test]
fn proxy_probes_have_the_contracted_timings() {
    let c = container(&built(proxy(), &[]));
    let probe = |path: &str, initial: i32, period: i32| {
        json!({
            "httpGet": {"path": path, "port": 8000},
            "initialDelaySeconds": initial, "periodSeconds": period, "timeoutSeconds": 5, "failureThreshold": 3
        })
    };
    assert_eq!(c["livenessProbe"], probe("/health/liveliness", 30, 10));
    // Never `/health`: LiteLLM answers it by calling every model upstream.
    assert_eq!(c["readinessProbe"], probe("/health/readiness", 15, 5));
}

#[test]
fn proxy_config_map_is_mounted_and_its_hash_rolls_the_pods() {
    let d = built(proxy(), &[]);
    let cm = json_of(d.config_map.as_ref().expect("a ConfigMap"));
    assert_eq!(cm["metadata"]["name"], "litellm-config-llm");
    assert_eq!(
        cm["metadata"]["labels"],
        json!({"app": "modelapi", "modelapi": "llm"})
    );
    let text = cm["data"]["config.yaml"].as_str().expect("config.yaml");
    assert!(text.starts_with("model_list:\n  - model_name: \"gpt-4o\"\n    litellm_params:\n      model: \"openai/gpt-4o\"\n"), "{text}");
    let pod = json_of(&d.deployment)["spec"]["template"].clone();
    assert_eq!(
        pod["spec"]["volumes"],
        json!([{"name": "litellm-config", "configMap": {"name": "litellm-config-llm"}}, {"name": "tmp", "emptyDir": {}}])
    );
    assert_eq!(
        container(&d)["volumeMounts"],
        json!([{"name": "litellm-config", "mountPath": "/etc/litellm", "readOnly": true}, {"name": "tmp", "mountPath": "/tmp"}])
    );

    let mut more = proxy();
    more["proxyConfig"]["models"] = json!(["gpt-4o", "gpt-4o-mini", "o3"]);
    let other = built(more, &[]);
    let hash =
        |d: &Built| json_of(&d.deployment)["spec"]["template"]["metadata"]["annotations"].clone();
    assert_ne!(
        hash(&d)["kaos.tools/config-hash"],
        hash(&other)["kaos.tools/config-hash"]
    );
    assert_eq!(
        hash(&d)["kaos.tools/pod-spec-hash"],
        hash(&other)["kaos.tools/pod-spec-hash"]
    );
}

#[test]
fn proxy_env_order_and_sources() {
    let d = built(
        proxy(),
        &[
            "--default-log-level=TRACE",
            "--default-telemetry-enabled=true",
            "--default-telemetry-endpoint=http://otel:4317",
        ],
    );
    assert_eq!(
        env_with_sources(&d.deployment),
        expected_env(&[
            ("PROXY_API_BASE", "https://api.openai.com/v1"),
            ("PROXY_API_KEY", "<secret openai/api-key>"),
            ("LITELLM_LOG", "DEBUG"),
            (PERMIT_KEYLESS, "true"),
            ("OTEL_EXPORTER", "otlp_grpc"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel:4317"),
            ("OTEL_SERVICE_NAME", "llm"),
            ("OTEL_PYTHON_EXCLUDED_URLS", "/health"),
        ])
    );
    let text = config_yaml(&d);
    assert!(text.ends_with("litellm_settings:\n  drop_params: true\n  success_callback: [\"otel\"]\n  failure_callback: [\"otel\"]\n"), "{text}");

    // A literal key, a ConfigMap key; INFO by default; the user's env after PROXY_*, and a
    // user LITELLM_LOG replacing the generated one in place.
    let mut spec = proxy();
    spec["proxyConfig"]["apiKey"] = json!({"value": "sk-1"});
    spec["container"] = json!({"env": [{"name": "EXTRA", "value": "1"}, {"name": "LITELLM_LOG", "value": "ERROR"}]});
    assert_eq!(
        env_with_sources(&built(spec, &[]).deployment),
        expected_env(&[
            ("PROXY_API_BASE", "https://api.openai.com/v1"),
            ("PROXY_API_KEY", "<secret modelapi-llm-api-key/api-key>"),
            ("EXTRA", "1"),
            ("LITELLM_LOG", "ERROR"),
            (PERMIT_KEYLESS, "true"),
        ])
    );
    let mut spec = proxy();
    spec["proxyConfig"]["apiKey"] =
        json!({"valueFrom": {"configMapKeyRef": {"name": "keys", "key": "k"}}});
    spec["proxyConfig"]
        .as_object_mut()
        .expect("object")
        .remove("apiBase");
    assert_eq!(
        env_with_sources(&built(spec, &[]).deployment),
        expected_env(&[
            ("PROXY_API_KEY", "<configMap keys/k>"),
            ("LITELLM_LOG", "INFO"),
            (PERMIT_KEYLESS, "true"),
        ])
    );
}

#[test]
fn config_yaml_from_string_is_checked_and_from_secret_is_mounted() {
    let mut spec = proxy();
    spec["proxyConfig"]["configYaml"] = json!({"fromString": "model_list:\n  - model_name: gpt-4o\n    litellm_params: {model: azure/gpt-4o}\n"});
    assert_eq!(
        config_yaml(&built(spec.clone(), &[])),
        "model_list:\n  - model_name: gpt-4o\n    litellm_params: {model: azure/gpt-4o}\n",
        "used verbatim"
    );

    spec["proxyConfig"]["configYaml"] =
        json!({"fromString": "model_list:\n  - model_name: claude-3\n"});
    let err = desired(&modelapi(spec.clone()), &settings(&[]), &[]).expect_err("not allowed");
    assert_eq!(err.reason, "ModelNotAllowed");
    assert!(
        err.message.contains("\"claude-3\"") && err.message.contains("[gpt-4o, gpt-4o-mini]"),
        "{}",
        err.message
    );

    spec["proxyConfig"]["configYaml"] =
        json!({"fromSecretKeyRef": {"name": "litellm", "key": "config"}});
    let d = built(spec, &[]);
    assert!(
        d.config_map.is_none(),
        "no ConfigMap when the config comes from a Secret"
    );
    let pod = json_of(&d.deployment)["spec"]["template"]["spec"].clone();
    assert_eq!(
        pod["volumes"],
        json!([{"name": "litellm-config", "secret": {"secretName": "litellm", "items": [{"key": "config", "path": "config.yaml"}]}}, {"name": "tmp", "emptyDir": {}}])
    );
}

#[test]
fn litellm_may_start_keyless_whatever_the_config_source() {
    // LiteLLM >= 1.104 refuses to start without a master key (tests/runtime/test_litellm.py shows
    // it); the permit is env, so it holds for the generated config and for a user's own.
    let permit = |d: &Built| {
        env_with_sources(&d.deployment)
            .into_iter()
            .find(|(name, _)| name == PERMIT_KEYLESS)
            .map(|(_, value)| value)
    };
    let mut spec = proxy();
    assert_eq!(permit(&built(spec.clone(), &[])).as_deref(), Some("true"));
    spec["proxyConfig"]["configYaml"] = json!({"fromString": "model_list: []\n"});
    assert_eq!(permit(&built(spec.clone(), &[])).as_deref(), Some("true"));
    spec["proxyConfig"]["configYaml"] =
        json!({"fromSecretKeyRef": {"name": "litellm", "key": "config"}});
    assert_eq!(permit(&built(spec.clone(), &[])).as_deref(), Some("true"));
    // A user who wants the check back says so, and wins.
    spec["container"] = json!({"env": [{"name": PERMIT_KEYLESS, "value": "false"}]});
    assert_eq!(permit(&built(spec, &[])).as_deref(), Some("false"));
    // Ollama is not LiteLLM.
    let hosted = json!({"mode": "Hosted", "hostedConfig": {"model": "m"}});
    assert_eq!(permit(&built(hosted, &[])), None);
}

#[test]
fn a_name_admitted_before_the_name_rule_fails() {
    let mut dotted = modelapi(proxy());
    dotted.metadata.name = Some("team.llm".into());
    let err = desired(&dotted, &settings(&[]), &[]).expect_err("no Service name");
    assert_eq!(err.reason, "InvalidName");
}

/// Ollama's home, where its data volume is (docs/security.md).
const HOME: (&str, &str) = ("HOME", "/root");

#[test]
fn hosted_runs_ollama_with_a_pull_init_container() {
    let spec = json!({"mode": "Hosted", "hostedConfig": {"model": "smollm2:135m"}, "telemetry": {"enabled": true}});
    let d = built(spec, &["--default-log-level=DEBUG"]);
    assert!(d.config_map.is_none());
    assert!(
        d.telemetry_ignored,
        "telemetry on Hosted is reported, not silently dropped"
    );
    assert_eq!(
        d.endpoint,
        "http://modelapi-llm.team.svc.cluster.local:11434"
    );
    assert_serves_http_on(&d.deployment, &d.service, 11434);
    let pod = json_of(&d.deployment)["spec"]["template"]["spec"].clone();
    assert_eq!(
        pod["volumes"],
        json!([{"name": "ollama-data", "emptyDir": {}}, {"name": "tmp", "emptyDir": {}}])
    );
    let init = &pod["initContainers"][0];
    assert_eq!(init["name"], "pull-model");
    assert_eq!(init["image"], "ollama:latest");
    assert_eq!(init["command"], json!(["/bin/sh", "-c"]));
    let script = init["args"][0].as_str().expect("script");
    assert!(
        script.starts_with("ollama serve &") && script.contains("ollama pull 'smollm2:135m'"),
        "{script}"
    );
    assert_eq!(
        init["volumeMounts"],
        json!([{"name": "ollama-data", "mountPath": "/root/.ollama"}, {"name": "tmp", "mountPath": "/tmp"}])
    );
    let c = &pod["containers"][0];
    assert_eq!(
        (c["name"].as_str(), c["image"].as_str()),
        (Some("model-api"), Some("ollama:latest"))
    );
    assert_eq!(
        c["livenessProbe"]["httpGet"],
        json!({"path": "/", "port": 11434})
    );
    assert_eq!(
        c["readinessProbe"]["httpGet"],
        json!({"path": "/", "port": 11434})
    );
    assert_eq!(
        c["volumeMounts"],
        json!([{"name": "ollama-data", "mountPath": "/root/.ollama"}, {"name": "tmp", "mountPath": "/tmp"}])
    );
    assert_eq!(
        env_with_sources(&d.deployment),
        expected_env(&[HOME, ("OLLAMA_DEBUG", "1")])
    );
    let trace = built(
        json!({"mode": "Hosted", "hostedConfig": {"model": "m"}}),
        &["--default-log-level=TRACE"],
    );
    assert_eq!(
        env_with_sources(&trace.deployment),
        expected_env(&[HOME, ("OLLAMA_DEBUG", "2")])
    );
    let user = built(
        json!({"mode": "Hosted", "hostedConfig": {"model": "m"}, "container": {"env": [{"name": "OLLAMA_DEBUG", "value": "0"}]}}),
        &["--default-log-level=TRACE"],
    );
    assert_eq!(
        env_with_sources(&user.deployment),
        expected_env(&[HOME, ("OLLAMA_DEBUG", "0")]),
        "the user's value wins"
    );
    // At INFO, the default, Ollama gets no OLLAMA_DEBUG.
    let at_info = built(
        json!({"mode": "Hosted", "hostedConfig": {"model": "m"}}),
        &[],
    );
    assert_eq!(env_with_sources(&at_info.deployment), expected_env(&[HOME]));
}

#[test]
fn container_overrides_pod_spec_merge_and_replicas() {
    let mut spec = proxy();
    spec["replicas"] = json!(3);
    spec["container"] = json!({"image": "my-litellm:2", "command": ["litellm"], "args": ["--port", "8000"],
                               "resources": {"limits": {"memory": "1Gi"}}});
    spec["podSpec"] = json!({"containers": [{"name": "model-api", "env": [{"name": "FROM_POD", "value": "1"}]},
                                            {"name": "sidecar", "image": "envoy"}],
                             "nodeSelector": {"pool": "cpu"}});
    let d = built(spec, &[]);
    let pod = json_of(&d.deployment)["spec"].clone();
    assert_eq!(pod["replicas"], 3);
    let c = &pod["template"]["spec"]["containers"][0];
    assert_eq!(c["image"], "my-litellm:2");
    assert_eq!(c["command"], json!(["litellm"]));
    assert_eq!(c["args"], json!(["--port", "8000"]));
    assert_eq!(c["resources"], json!({"limits": {"memory": "1Gi"}}));
    assert_eq!(
        env_with_sources(&d.deployment).first(),
        Some(&("FROM_POD".to_string(), "1".to_string())),
        "podSpec env merged by name, first (apimachinery puts the patch's items first)"
    );
    assert_eq!(pod["template"]["spec"]["containers"][1]["name"], "sidecar");
    assert_eq!(
        pod["template"]["spec"]["nodeSelector"],
        json!({"pool": "cpu"})
    );
}

#[test]
fn http_route_with_default_custom_and_zero_timeouts() {
    let gateway = [
        "--gateway-api-enabled=true",
        "--gateway-name=gw",
        "--gateway-namespace=infra",
        "--gateway-default-modelapi-timeout=300s",
    ];
    assert!(
        built(proxy(), &[]).http_route.is_none(),
        "no route when the gateway is disabled"
    );
    let route = json_of(&built(proxy(), &gateway).http_route.expect("route"));
    assert_eq!(route["metadata"]["name"], "modelapi-llm");
    assert_eq!(
        route["spec"]["parentRefs"],
        json!([{"name": "gw", "namespace": "infra"}])
    );
    let rule = &route["spec"]["rules"][0];
    assert_eq!(
        rule["matches"],
        json!([{"path": {"type": "PathPrefix", "value": "/team/modelapi/llm"}}])
    );
    assert_eq!(
        rule["filters"],
        json!([{"type": "URLRewrite", "urlRewrite": {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}}}])
    );
    assert_eq!(
        rule["backendRefs"],
        json!([{"name": "modelapi-llm", "port": 8000}])
    );
    assert_eq!(rule["timeouts"], json!({"request": "300s"}));
    let mut spec = proxy();
    spec["gatewayRoute"] = json!({"timeout": "45s"});
    assert_eq!(
        json_of(&built(spec.clone(), &gateway).http_route.expect("route"))["spec"]["rules"][0]["timeouts"],
        json!({"request": "45s"})
    );
    spec["gatewayRoute"] = json!({"timeout": "0s"});
    assert!(
        json_of(&built(spec, &gateway).http_route.expect("route"))["spec"]["rules"][0]
            .get("timeouts")
            .is_none()
    );
}

#[test]
fn missing_images_are_clear_errors() {
    let bare = Args::try_parse_from(["modelapi-controller"])
        .expect("flags")
        .settings;
    let err = desired(&modelapi(proxy()), &bare, &[]).expect_err("no image");
    assert_eq!(
        err,
        Problem::failed(
            "NoImage",
            "no LiteLLM image: set spec.container.image or the operator's DEFAULT_LITELLM_IMAGE"
                .into()
        )
    );
    let hosted = modelapi(json!({"mode": "Hosted", "hostedConfig": {"model": "m"}}));
    assert_eq!(
        desired(&hosted, &bare, &[]).expect_err("no image").reason,
        "NoImage"
    );
}

fn pod_spec(desired: &Built) -> k8s_openapi::api::core::v1::PodSpec {
    let template = desired.deployment.spec.as_ref().map(|s| &s.template);
    template.and_then(|t| t.spec.clone()).expect("a pod spec")
}

#[test]
fn every_pod_meets_the_restricted_pod_security_standard_unless_relaxed() {
    use kaos_workload::build::pod_security::restricted_violations;
    let hosted = json!({"mode": "Hosted", "hostedConfig": {"model": "smollm2:135m"}});
    for spec in [proxy(), hosted.clone()] {
        let pod = pod_spec(&built(spec.clone(), &[]));
        assert_eq!(restricted_violations(&pod), Vec::<String>::new(), "{spec}");
        assert_eq!(pod.automount_service_account_token, Some(false));
        let relaxed = pod_spec(&built(spec.clone(), &["--pod-security=baseline"]));
        assert!(!restricted_violations(&relaxed).is_empty(), "{spec}");
        assert_eq!(relaxed.security_context, None);
    }
    // Ollama finds its key and models in the data volume, for the pull and the server alike.
    let pod = pod_spec(&built(hosted, &[]));
    for c in pod
        .containers
        .iter()
        .chain(pod.init_containers.iter().flatten())
    {
        let home = c.env.iter().flatten().find(|e| e.name == "HOME");
        assert_eq!(
            home.and_then(|e| e.value.as_deref()),
            Some("/root"),
            "{}",
            c.name
        );
    }
    // A user's podSpec still wins over the defaults.
    let mut spec = proxy();
    spec["podSpec"] = json!({"containers": [{"name": "model-api",
        "securityContext": {"readOnlyRootFilesystem": false}}]});
    let pod = pod_spec(&built(spec, &[]));
    let context = pod.containers[0].security_context.clone().expect("kept");
    assert_eq!(context.read_only_root_filesystem, Some(false));
    assert_eq!(context.allow_privilege_escalation, Some(false));
}

#[test]
fn an_inline_api_key_lives_in_an_owned_secret_and_rolls_the_pods_by_its_hash() {
    let mut spec = proxy();
    spec["proxyConfig"]["apiKey"] = json!({"value": "sk-inline-MARKER"});
    let d = built(spec.clone(), &[]);
    let secret = json_of(d.api_key_secret.as_ref().expect("an owned Secret"));
    assert_eq!(secret["metadata"]["name"], "modelapi-llm-api-key");
    assert_eq!(secret["metadata"]["ownerReferences"][0]["uid"], "uid-1");
    assert_eq!(
        secret["metadata"]["labels"],
        json!({"app": "modelapi", "modelapi": "llm"})
    );
    assert_eq!(secret["type"], "Opaque");
    // base64 of the key, as the API stores it.
    assert_eq!(secret["data"]["api-key"], "c2staW5saW5lLU1BUktFUg==");
    let deployment = json_of(&d.deployment).to_string();
    assert!(!deployment.contains("MARKER") && !deployment.contains("c2staW5saW5lLU1BUktFUg"));
    let config = json_of(&d.config_map).to_string();
    assert!(!config.contains("MARKER"), "{config}");

    let hash = |d: &Built| {
        json_of(&d.deployment)["spec"]["template"]["metadata"]["annotations"]
            ["kaos.tools/api-key-hash"]
            .clone()
    };
    let first = hash(&d);
    assert!(first.as_str().is_some_and(|h| h.len() == 32), "{first}");
    spec["proxyConfig"]["apiKey"] = json!({"value": "sk-rotated"});
    assert_ne!(hash(&built(spec, &[])), first, "a new key rolls the pods");

    let by_reference = built(proxy(), &[]);
    assert!(
        by_reference.api_key_secret.is_none(),
        "a referenced key needs no Secret of ours"
    );
    assert_eq!(hash(&by_reference), Value::Null);
}
