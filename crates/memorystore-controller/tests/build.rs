//! The pure MemoryStore builder against KAOS 0.8.4's memorystore controller: names, probes,
//! storage, the exact ordered environment, the claim, the disruption budget.

use clap::Parser;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kaos_api::memorystore::MemoryStore;
use kaos_api::modelapi::ModelAPI;
use kaos_harness::built::{assert_name_labels_and_owner, assert_serves_http_on};
use kaos_harness::deployments::{env_with_sources, expected_env};
use kaos_workload::build::pod_security::restricted_violations;
use kaos_workload::desired::{Child, ChildKind, ChildType, Problem};
use memorystore_controller::build::{Desired, built as build};
use memorystore_controller::models::{self, ModelService};
use memorystore_controller::settings::{Args, Settings};
use serde_json::{Value, json};

fn settings(extra: &[&str]) -> Settings {
    let mut argv = vec![
        "memorystore-controller",
        "--default-memory-service-image=kaos-memory:test",
    ];
    argv.extend_from_slice(extra);
    Args::try_parse_from(argv).expect("flags").settings
}

fn store(spec: Value) -> MemoryStore {
    serde_json::from_value(
        json!({"apiVersion": "kaos.tools/v1alpha1", "kind": "MemoryStore",
        "metadata": {"name": "brain", "namespace": "team", "uid": "u-1"}, "spec": spec}),
    )
    .expect("MemoryStore")
}

fn models_spec() -> Value {
    json!({"summarization": {"modelAPI": "llm", "model": "gpt-4o-mini"},
           "embedding": {"modelAPI": "embedder", "model": "text-embedding-3-small"}})
}

fn service() -> ModelService {
    ModelService {
        base_url: "http://modelapi-llm.team.svc.cluster.local:8000/v1".into(),
    }
}

fn built(spec: Value, extra: &[&str]) -> Desired {
    build(&store(spec), &service(), &settings(extra)).expect("builds")
}

fn json_of<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).expect("serializes")
}

/// The claim `local` storage gets, first.
fn claim(d: &Desired) -> Option<PersistentVolumeClaim> {
    d.first.apply.iter().find_map(Child::get).cloned()
}

fn container(d: &Desired) -> Value {
    json_of(&d.workload.deployment)["spec"]["template"]["spec"]["containers"][0].clone()
}

#[test]
fn a_name_admitted_before_the_name_rule_fails() {
    let mut dotted = store(json!({"storage": {"type": "local"}, "models": models_spec()}));
    dotted.metadata.name = Some("team.memory".into());
    let err = build(&dotted, &service(), &settings(&[])).expect_err("no Service name");
    assert_eq!(err.reason, "InvalidName");
}

#[test]
fn a_local_store_is_one_pod_on_its_claim_with_kaos_names_probes_and_env() {
    let d = built(
        json!({"storage": {"type": "local"}, "models": models_spec()}),
        &[],
    );
    assert_name_labels_and_owner(
        &d.workload.deployment,
        "memorystore-brain",
        &[("app", "memorystore"), ("memorystore", "brain")],
        "MemoryStore",
    );
    let deployment = json_of(&d.workload.deployment);
    assert_eq!(deployment["spec"]["replicas"], 1);
    assert_eq!(deployment["spec"]["strategy"], json!({"type": "Recreate"}));
    let c = container(&d);
    assert_eq!(c["name"], "memory");
    assert_eq!(c["image"], "kaos-memory:test");
    let service = d.workload.service.as_ref().expect("a Service");
    assert_serves_http_on(&d.workload.deployment, service, 8080);
    assert_eq!(
        c["livenessProbe"],
        json!({"httpGet": {"path": "/healthz", "port": 8080}, "initialDelaySeconds": 10,
               "periodSeconds": 15, "timeoutSeconds": 5, "failureThreshold": 3})
    );
    assert_eq!(
        c["readinessProbe"],
        json!({"httpGet": {"path": "/readyz", "port": 8080}, "initialDelaySeconds": 5,
               "periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 3})
    );
    assert_eq!(
        env_with_sources(&d.workload.deployment),
        expected_env(&[
            ("KAOS_MEMORY_STORAGE_TYPE", "local"),
            ("KAOS_MEMORY_LOCAL_PATH", "/data/memory"),
            (
                "KAOS_MEMORY_MODEL_BASE_URL",
                "http://modelapi-llm.team.svc.cluster.local:8000/v1"
            ),
            ("KAOS_MEMORY_SUMMARIZATION_MODEL", "gpt-4o-mini"),
            ("KAOS_MEMORY_EMBEDDING_MODEL", "text-embedding-3-small"),
            ("KAOS_MEMORY_DEFAULT_FAILURE_MODE", "soft"),
        ]),
        "no tier variable when no tier is set: the service's defaults apply"
    );
    assert!(
        c["volumeMounts"]
            .as_array()
            .expect("mounts")
            .contains(&json!({"name": "data", "mountPath": "/data/memory"}))
    );
    let pod = &json_of(&d.workload.deployment)["spec"]["template"]["spec"];
    assert!(pod["volumes"].as_array().expect("volumes").contains(
        &json!({"name": "data", "persistentVolumeClaim": {"claimName": "memorystore-brain-data"}})
    ));
    assert_eq!(pod["automountServiceAccountToken"], false);
    let pvc = json_of(claim(&d).as_ref().expect("a claim"));
    assert_eq!(pvc["metadata"]["name"], "memorystore-brain-data");
    assert_eq!(
        pvc["spec"],
        json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "5Gi"}}}),
        "no storage class: the cluster's default"
    );
    assert!(
        d.workload.disruption_budget.is_none(),
        "one pod: a budget would block every drain"
    );
    assert_eq!(
        d.endpoint.as_deref(),
        Some("http://memorystore-brain.team.svc.cluster.local:8080")
    );
    let pod_spec = d
        .workload
        .deployment
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref());
    assert_eq!(
        restricted_violations(pod_spec.expect("pod")),
        Vec::<String>::new()
    );
}

#[test]
fn a_rich_external_store_lists_every_variable_in_kaos_order_with_user_env_last() {
    let d = built(
        json!({
            "storage": {"type": "external", "external": {
                "connectionSecretRef": {"name": "pg", "key": "dsn"}, "embeddingDims": 768,
                "collection": "team_memory"}},
            "models": models_spec(),
            "shortTerm": {"tokenBudget": 64, "hardEventCap": 500},
            "mediumTerm": {"enabled": true, "compactionTrigger": 48, "compactionTarget": 16,
                           "digestRetention": 5, "systemPrompt": "Summarise."},
            "longTerm": {"enabled": true, "defaultTopK": 4, "scoreThreshold": 0.4, "rerank": false,
                         "extraction": {"concurrency": 2, "maxRetries": 1, "systemPrompt": "Extract."}},
            "requestConcurrency": 16,
            "defaultFailureMode": "strict",
            "telemetry": {"enabled": true, "endpoint": "http://otel:4317"},
            "container": {"env": [{"name": "KAOS_MEMORY_TOKEN_BUDGET", "value": "128"},
                                  {"name": "KAOS_MEMORY_MODEL_API_KEY", "value": "kaos"}]},
        }),
        &[],
    );
    assert_eq!(
        env_with_sources(&d.workload.deployment),
        expected_env(&[
            ("KAOS_MEMORY_STORAGE_TYPE", "external"),
            ("KAOS_MEMORY_EXTERNAL_DSN", "<secret pg/dsn>"),
            ("KAOS_MEMORY_EXTERNAL_DIMS", "768"),
            ("KAOS_MEMORY_EXTERNAL_COLLECTION", "team_memory"),
            (
                "KAOS_MEMORY_MODEL_BASE_URL",
                "http://modelapi-llm.team.svc.cluster.local:8000/v1"
            ),
            ("KAOS_MEMORY_SUMMARIZATION_MODEL", "gpt-4o-mini"),
            ("KAOS_MEMORY_EMBEDDING_MODEL", "text-embedding-3-small"),
            ("KAOS_MEMORY_TOKEN_BUDGET", "128"),
            ("KAOS_MEMORY_HARD_EVENT_CAP", "500"),
            ("KAOS_MEMORY_ROLLING_SUMMARY", "true"),
            ("KAOS_MEMORY_COMPACTION_TRIGGER", "48"),
            ("KAOS_MEMORY_COMPACTION_TARGET", "16"),
            ("KAOS_MEMORY_DIGEST_RETENTION", "5"),
            ("KAOS_MEMORY_SUMMARIZATION_SYSTEM_PROMPT", "Summarise."),
            ("KAOS_MEMORY_LONG_TERM_ENABLED", "true"),
            ("KAOS_MEMORY_DEFAULT_TOP_K", "4"),
            ("KAOS_MEMORY_SCORE_THRESHOLD", "0.4"),
            ("KAOS_MEMORY_RERANK", "false"),
            ("KAOS_MEMORY_EXTRACTION_CONCURRENCY", "2"),
            ("KAOS_MEMORY_EXTRACTION_MAX_RETRIES", "1"),
            ("KAOS_MEMORY_EXTRACTION_SYSTEM_PROMPT", "Extract."),
            ("KAOS_MEMORY_REQUEST_CONCURRENCY", "16"),
            ("KAOS_MEMORY_DEFAULT_FAILURE_MODE", "strict"),
            ("OTEL_SDK_DISABLED", "false"),
            ("OTEL_SERVICE_NAME", "memorystore-brain"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel:4317"),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "service.namespace=team,kaos.resource.name=memorystore-brain"
            ),
            (
                "OTEL_PYTHON_FASTAPI_EXCLUDED_URLS",
                "/health,/ready,/.well-known/agent.json",
            ),
            ("KAOS_MEMORY_MODEL_API_KEY", "kaos"),
        ]),
        "a variable the user sets replaces ours where it stands; the others come last"
    );
    let deployment = json_of(&d.workload.deployment);
    assert_eq!(
        deployment["spec"]["replicas"], 2,
        "external storage: 2 pods by default"
    );
    assert!(
        deployment["spec"].get("strategy").is_none(),
        "rolling updates: no shared files"
    );
    assert!(claim(&d).is_none());
    let budget = json_of(
        d.workload
            .disruption_budget
            .as_ref()
            .expect("a budget at 2 pods"),
    );
    assert_eq!(budget["metadata"]["name"], "memorystore-brain");
    assert_eq!(
        budget["spec"],
        json!({"minAvailable": 1, "selector": {"matchLabels": {"app": "memorystore", "memorystore": "brain"}}})
    );
    let pod = &deployment["spec"]["template"]["spec"];
    assert!(
        !pod["volumes"]
            .as_array()
            .expect("volumes")
            .iter()
            .any(|v| v["name"] == "data"),
        "no data volume for external storage"
    );
}

#[test]
fn the_budget_follows_the_replicas_and_the_set_removes_it_below_two() {
    let external = |replicas: i32| {
        json!({"storage": {"type": "external", "external": {"connectionSecretRef": {"name": "pg", "key": "dsn"}}},
               "models": models_spec(), "replicas": replicas})
    };
    let one = built(external(1), &[]).into_set();
    assert!(
        one.absent
            .contains(&(PodDisruptionBudget::KIND, "memorystore-brain".into())),
        "at one pod the budget must go: {:?}",
        one.absent
    );
    let three = built(external(3), &[]).into_set();
    assert!(
        three
            .apply
            .iter()
            .any(|c| c.get::<PodDisruptionBudget>().is_some())
    );
    let kinds: Vec<ChildKind> = built(
        json!({"storage": {"type": "local"}, "models": models_spec()}),
        &[],
    )
    .into_set()
    .apply
    .iter()
    .map(Child::kind)
    .collect();
    assert_eq!(
        kinds,
        [PersistentVolumeClaim::KIND, Deployment::KIND, Service::KIND],
        "the claim first: the pod mounts it"
    );
}

#[test]
fn sizes_collections_and_the_gateway_route() {
    let d = built(
        json!({"storage": {"type": "local", "local": {"persistentVolume": {"size": "20Gi"}, "collection": "notes"}},
               "models": models_spec(), "gatewayRoute": {"timeout": "45s"}}),
        &["--gateway-api-enabled=true", "--gateway-name=edge"],
    );
    assert_eq!(
        json_of(claim(&d).as_ref().expect("claim"))["spec"]["resources"]["requests"]["storage"],
        "20Gi"
    );
    assert!(
        env_with_sources(&d.workload.deployment)
            .contains(&("KAOS_MEMORY_LOCAL_COLLECTION".into(), "notes".into()))
    );
    let route = json_of(d.workload.http_route.as_ref().expect("route"));
    assert_eq!(route["metadata"]["name"], "memorystore-brain");
    assert_eq!(
        route["spec"]["rules"][0]["matches"][0]["path"]["value"],
        "/team/memorystore/brain"
    );
    assert_eq!(route["spec"]["rules"][0]["timeouts"]["request"], "45s");
    assert_eq!(route["spec"]["rules"][0]["backendRefs"][0]["port"], 8080);
}

#[test]
fn no_image_is_a_clear_error() {
    let error = build(
        &store(json!({"storage": {"type": "local"}, "models": models_spec()})),
        &service(),
        &Args::try_parse_from(["memorystore-controller"])
            .expect("flags")
            .settings,
    )
    .expect_err("no image");
    assert_eq!(error.reason, "NoImage");
    assert!(
        error.message.contains("DEFAULT_MEMORY_SERVICE_IMAGE"),
        "{}",
        error.message
    );
}

fn model_api(name: &str, ready: bool) -> ModelAPI {
    serde_json::from_value(json!({"apiVersion": "kaos.tools/v1alpha1", "kind": "ModelAPI",
        "metadata": {"name": name, "namespace": "team"},
        "spec": {"mode": "Proxy", "proxyConfig": {"models": ["*"]}},
        "status": {"ready": ready, "endpoint": format!("http://modelapi-{name}.team.svc.cluster.local:8000")}}))
    .expect("ModelAPI")
}

#[test]
fn the_store_waits_for_each_model_api_with_kaos_messages() {
    let s = store(json!({"storage": {"type": "local"}, "models": models_spec()}));
    let resolve = |apis: Vec<ModelAPI>| {
        models::resolve(&s, |name| {
            apis.iter()
                .find(|m| m.metadata.name.as_deref() == Some(name))
                .cloned()
                .map(Box::new)
        })
    };
    let message = |r: Result<ModelService, Problem>| r.expect_err("waits").message;
    assert_eq!(
        message(resolve(vec![])),
        "summarization ModelAPI \"llm\" not found"
    );
    assert_eq!(
        message(resolve(vec![model_api("llm", false)])),
        "summarization ModelAPI \"llm\" is not ready"
    );
    assert_eq!(
        message(resolve(vec![model_api("llm", true)])),
        "embedding ModelAPI \"embedder\" not found"
    );
    assert_eq!(
        message(resolve(vec![
            model_api("llm", true),
            model_api("embedder", false)
        ])),
        "embedding ModelAPI \"embedder\" is not ready"
    );
    assert_eq!(
        resolve(vec![model_api("llm", true), model_api("embedder", true)]).expect("resolves"),
        ModelService {
            base_url: "http://modelapi-llm.team.svc.cluster.local:8000/v1".into()
        },
        "both roles at the summarization ModelAPI's endpoint"
    );
}
