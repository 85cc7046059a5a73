//! Bad input a controller can only see (references to things that do not exist or do not fit):
//! each case ends in phase Failed (AccessGrants and ThirdPartyServices, which have no phase:
//! `ResolvedRefs` False) with a condition reason and a message that says what to fix, makes no
//! writes while it stands, and recovers once fixed. (What the CRDs reject up front is in `validation_rules.rs`.)

use std::time::Duration;

use clap::Parser;
use kaos_api::access::{AccessGrant, ResourceKind, SubjectKind, ThirdPartyService};
use kaos_api::agent::Agent;
use kaos_api::mcpserver::MCPServer;
use kaos_api::memorystore::{MemoryStore, ReadScope};
use kaos_api::modelapi::ModelAPI;
use kaos_harness::cluster::{TestCluster, eventually};
use kaos_harness::controller::RunningController;
use kaos_harness::fixtures::*;
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use serde::Serialize;
use serde_json::Value;

/// A registry of one runtime, `python-string`.
const RUNTIMES: &str =
    "runtimes:\n  python-string: {image: 'py:1', paramsEnvVar: MCP_TOOLS_STRING}\n";

/// Every controller but the workflow controller, running until dropped.
fn start_controllers(cluster: &TestCluster) -> Vec<RunningController> {
    let mut controllers = Vec::new();
    let args =
        agent_controller::settings::Args::try_parse_from(["a", "--default-agent-image=agent:1"])
            .expect("flags");
    controllers.push(RunningController::start(
        cluster,
        agent_controller::ID,
        args.runtime,
        |rt| agent_controller::controller::run(rt, args.settings),
    ));
    let args = modelapi_controller::settings::Args::try_parse_from([
        "m",
        "--default-litellm-image=litellm:1",
        "--default-ollama-image=ollama:1",
    ])
    .expect("flags");
    controllers.push(RunningController::start(
        cluster,
        modelapi_controller::ID,
        args.runtime,
        |rt| modelapi_controller::controller::run(rt, args.settings),
    ));
    let args = mcpserver_controller::settings::Args::try_parse_from([
        "s",
        "--system-namespace=kaos-system",
    ])
    .expect("flags");
    controllers.push(RunningController::start(
        cluster,
        mcpserver_controller::ID,
        args.runtime,
        |rt| mcpserver_controller::controller::run(rt, args.settings),
    ));
    let args = memorystore_controller::settings::Args::try_parse_from([
        "ms",
        "--default-memory-service-image=memory:1",
    ])
    .expect("flags");
    controllers.push(RunningController::start(
        cluster,
        memorystore_controller::ID,
        args.runtime,
        |rt| memorystore_controller::controller::run(rt, args.settings),
    ));
    let args = authz_controller::settings::Args::try_parse_from(["az"]).expect("flags");
    controllers.push(RunningController::start(
        cluster,
        authz_controller::ID,
        args.runtime,
        |rt| authz_controller::controller::run(rt, args.settings),
    ));
    controllers
}

/// Reconciles so far, of all of them (`controller_runtime_reconcile_total`, every result).
fn reconciles(controllers: &[RunningController]) -> u64 {
    controllers
        .iter()
        .map(RunningController::reconciles)
        .sum::<f64>() as u64
}

/// One case: objects that fail, what the resource must then say, and the fix.
struct Case {
    name: &'static str,
    kind: &'static str,
    object: &'static str,
    bad: Vec<DynamicObject>,
    reason: &'static str,
    message: &'static str,
    fix: Vec<DynamicObject>,
}

/// An object of any kind, to list with others.
fn object(object: impl Serialize) -> DynamicObject {
    let value = serde_json::to_value(object).expect("the object serializes");
    serde_json::from_value(value).expect("an object with its kind")
}

fn apply_all(cluster: &TestCluster, objects: &[DynamicObject]) {
    for object in objects {
        cluster.apply(object);
    }
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "missing ModelAPI",
            kind: "Agent",
            object: "a1",
            bad: vec![object(Agent::test("a1"))],
            reason: "ModelAPINotFound",
            message: "Failed to resolve ModelAPI llm: no ModelAPI of that name in namespace default",
            fix: vec![object(ModelAPI::test("llm").proxy(["openai/*"]))],
        },
        Case {
            name: "missing MCPServer",
            kind: "Agent",
            object: "a2",
            bad: vec![object(Agent::test("a2").mcp_servers(["tools"]))],
            reason: "MCPServerNotFound",
            message: "Failed to resolve MCPServer tools: no MCPServer of that name in namespace default",
            fix: vec![object(MCPServer::test("tools"))],
        },
        Case {
            name: "unsupported model",
            kind: "Agent",
            object: "a3",
            bad: vec![object(Agent::test("a3").model("anthropic/claude"))],
            reason: "ModelNotSupported",
            message: "model anthropic/claude not found in models list of ModelAPI llm: [openai/*]",
            fix: vec![object(Agent::test("a3"))],
        },
        Case {
            name: "memory read scope above the store's ceiling",
            kind: "Agent",
            object: "a4",
            bad: vec![
                object(MemoryStore::test("mem")),
                object(
                    Agent::test("a4")
                        .memory_store("mem")
                        .memory_read_scope(ReadScope::User),
                ),
            ],
            reason: "InvalidMemoryReadScope",
            message: "config.memory.maxReadScope user exceeds MemoryStore mem maxReadScope agent",
            // Not waiting for the store: deployed at once, whether or not it is ready yet.
            fix: vec![object(
                Agent::test("a4")
                    .wait_for_dependencies(false)
                    .memory_store("mem")
                    .memory_read_scope(ReadScope::Agent),
            )],
        },
        Case {
            name: "unknown runtime",
            kind: "MCPServer",
            object: "s1",
            bad: vec![object(MCPServer::test("s1").runtime("github"))],
            reason: "UnknownRuntime",
            message: "runtime \"github\" is not in the MCP runtime registry (ConfigMap kaos-mcp-runtimes, key runtimes.yaml); known runtimes: python-string, or use \"custom\" with spec.container.image",
            fix: vec![object(MCPServer::test("s1"))],
        },
        Case {
            name: "configYaml with a model not in models",
            kind: "ModelAPI",
            object: "m1",
            bad: vec![object(
                ModelAPI::test("m1")
                    .proxy(["gpt-4o"])
                    .config_yaml("model_list:\n  - model_name: o3\n"),
            )],
            reason: "ModelNotAllowed",
            message: "spec.proxyConfig.configYaml.fromString: model_name \"o3\" is not allowed by proxyConfig.models [gpt-4o]; add it to proxyConfig.models or remove it from the config",
            fix: vec![object(
                ModelAPI::test("m1")
                    .proxy(["gpt-4o", "o3"])
                    .config_yaml("model_list:\n  - model_name: o3\n"),
            )],
        },
        Case {
            name: "configYaml that is not YAML",
            kind: "ModelAPI",
            object: "m2",
            bad: vec![object(ModelAPI::test("m2").config_yaml("model_list: ["))],
            reason: "InvalidConfigYaml",
            message: "spec.proxyConfig.configYaml.fromString is not valid YAML",
            fix: vec![object(ModelAPI::test("m2").config_yaml("model_list: []"))],
        },
        Case {
            name: "env from a Secret that does not exist",
            kind: "Agent",
            object: "a4",
            bad: vec![object(Agent::test("a4").env_from_secret(
                "SLACK_TOKEN",
                "slack",
                "token",
            ))],
            reason: "SecretNotFound",
            message: "Secret slack does not exist in namespace default (env SLACK_TOKEN of container agent reads its key token); create it and the resource recovers by itself",
            fix: vec![object(secret("slack", [("token", "xoxb-1")]))],
        },
        Case {
            name: "API key from a Secret without that key",
            kind: "ModelAPI",
            object: "m3",
            bad: vec![
                object(secret("creds", [("apikey", "sk-1")])),
                object(ModelAPI::test("m3").api_key_from_secret("creds", "api-key")),
            ],
            reason: "SecretKeyNotFound",
            message: "Secret creds has no key api-key (env PROXY_API_KEY of container model-api reads it); add the key or fix the reference",
            fix: vec![object(secret(
                "creds",
                [("apikey", "sk-1"), ("api-key", "sk-1")],
            ))],
        },
        Case {
            name: "configYaml from a Secret that does not exist",
            kind: "ModelAPI",
            object: "m4",
            bad: vec![object(
                ModelAPI::test("m4").config_yaml_from_secret("litellm", "config.yaml"),
            )],
            reason: "SecretNotFound",
            message: "Secret litellm does not exist in namespace default (volume litellm-config reads its key config.yaml)",
            fix: vec![object(secret(
                "litellm",
                [("config.yaml", "model_list: []")],
            ))],
        },
        Case {
            name: "external storage whose DSN Secret does not exist",
            kind: "MemoryStore",
            object: "mem2",
            // Its own ModelAPI, Ready by itself: the store gets as far as its pod.
            bad: vec![
                object(ModelAPI::test("mem-llm")),
                object(
                    MemoryStore::test("mem2")
                        .external("pg", "dsn")
                        .summarization("mem-llm", "gpt-4o-mini")
                        .embedding("mem-llm", "text-embedding-3-small"),
                ),
            ],
            reason: "SecretNotFound",
            message: "Secret pg does not exist in namespace default (env KAOS_MEMORY_EXTERNAL_DSN of container memory reads its key dsn)",
            fix: vec![object(secret(
                "pg",
                [("dsn", "postgresql://memory@db/memory")],
            ))],
        },
        Case {
            name: "grant naming an Agent that does not exist",
            kind: "AccessGrant",
            object: "g1",
            bad: vec![object(
                AccessGrant::test("g1")
                    .subject(SubjectKind::Group, "ops")
                    .resource(ResourceKind::Agent, "ghost"),
            )],
            reason: "ReferenceNotFound",
            message: "Agent ghost not found in namespace default; create them or fix the names",
            fix: vec![object(Agent::test("ghost"))],
        },
        Case {
            name: "third-party service whose client Secret does not exist",
            kind: "ThirdPartyService",
            object: "t1",
            // Access for a1, which the first case creates.
            bad: vec![object(ThirdPartyService::test("t1").access("a1", ["read"]))],
            reason: "SecretNotFound",
            message: "Secret oauth does not exist in namespace default (spec.clientSecretRef reads its key client-secret); create it and the resource recovers by itself",
            fix: vec![object(secret("oauth", [("client-secret", "s3cret")]))],
        },
        Case {
            name: "env from a ConfigMap that does not exist",
            kind: "MCPServer",
            object: "s2",
            bad: vec![object(
                MCPServer::test("s2").env_from_config_map("MODE", "settings", "mode"),
            )],
            reason: "ConfigMapNotFound",
            message: "ConfigMap settings does not exist in namespace default (env MODE of container mcp-server reads its key mode)",
            fix: vec![object(config_map("settings", [("mode", "fast")]))],
        },
    ]
}

fn kind_api(cluster: &TestCluster, kind: &str) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk("kaos.tools", "v1alpha1", kind));
    Api::namespaced_with(cluster.client.clone(), "default", &resource)
}

async fn status_of(api: &Api<DynamicObject>, name: &str) -> Option<Value> {
    api.get(name)
        .await
        .ok()
        .and_then(|o| o.data.get("status").cloned())
}

/// The condition a case's failure shows in: `Ready` (with phase Failed) for the kinds with a
/// workload; `ResolvedRefs` for AccessGrants and ThirdPartyServices, which have no phase and are
/// never Ready on kaos-rs whatever they name.
fn failure_condition(kind: &str) -> &'static str {
    match kind {
        "AccessGrant" | "ThirdPartyService" => "ResolvedRefs",
        _ => "Ready",
    }
}

fn condition(status: &Value, type_: &str) -> Value {
    status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == type_)
        .cloned()
        .unwrap_or_default()
}

/// Whether a status shows the case's failure (`healthy` false) or its recovery (true).
fn shows(case: &Case, status: &Value, healthy: bool) -> bool {
    match failure_condition(case.kind) {
        "Ready" => status["phase"] == if healthy { "Ready" } else { "Failed" },
        type_ => condition(status, type_)["status"] == if healthy { "True" } else { "False" },
    }
}

/// Waits for the case's object to show its failure and returns its status.
async fn failed_status(api: &Api<DynamicObject>, case: &Case) -> Value {
    eventually(
        &format!("{}: {} has failed", case.name, case.object),
        || async {
            status_of(api, case.object)
                .await
                .filter(|s| shows(case, s, false))
        },
    )
    .await
}

#[tokio::test]
async fn a_missing_registry_fails_and_recovers_once_installed() {
    let cluster = TestCluster::start();
    let _controllers = start_controllers(&cluster);
    cluster.apply(&MCPServer::test("tools"));
    let api = kind_api(&cluster, "MCPServer");
    let failed = eventually("tools is Failed", || async {
        status_of(&api, "tools")
            .await
            .filter(|s| s["phase"] == "Failed")
    })
    .await;
    let ready = failed["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready")
        .cloned()
        .unwrap_or_default();
    assert_eq!(ready["reason"], "RegistryUnavailable");
    assert!(
        failed["message"]
            .as_str()
            .unwrap_or("")
            .contains("kaos-system/kaos-mcp-runtimes was not found"),
        "{failed}"
    );
    cluster.install_runtime_registry(RUNTIMES);
    eventually("tools recovers", || async {
        status_of(&api, "tools")
            .await
            .filter(|s| s["phase"] == "Ready")
    })
    .await;
}

#[tokio::test]
async fn every_reference_error_is_failed_with_a_reason_and_recovers_once_fixed() {
    let cluster = TestCluster::start();
    cluster.install_runtime_registry(RUNTIMES);
    let _controllers = start_controllers(&cluster);
    for case in cases() {
        apply_all(&cluster, &case.bad);
        let api = kind_api(&cluster, case.kind);
        let failed = failed_status(&api, &case).await;
        let failure = condition(&failed, failure_condition(case.kind));
        assert_eq!(
            (failure["status"].as_str(), failure["reason"].as_str()),
            (Some("False"), Some(case.reason)),
            "{}",
            case.name
        );
        // The kinds without a phase have no status.message either: the condition's says it.
        let message = failed["message"]
            .as_str()
            .or(failure["message"].as_str())
            .unwrap_or("");
        assert!(
            message.starts_with(case.message),
            "{}: message {message:?}",
            case.name
        );
        apply_all(&cluster, &case.fix);
        eventually(
            &format!("{}: {} recovers", case.name, case.object),
            || async {
                status_of(&api, case.object)
                    .await
                    .filter(|s| shows(&case, s, true))
            },
        )
        .await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
}

/// While every reference error stands, the controllers write nothing new (no retry storm of
/// statuses or events) and reconcile only to look again at what no watch shows them: a missing
/// Secret or ConfigMap, from 1 s apart doubling to a minute (at most 3 looks in 10 s).
#[tokio::test]
async fn standing_reference_errors_cause_no_write_storm() {
    let cluster = TestCluster::start();
    cluster.install_runtime_registry(RUNTIMES);
    let controllers = start_controllers(&cluster);
    let cases = cases();
    for case in &cases {
        apply_all(&cluster, &case.bad);
    }
    for case in &cases {
        failed_status(&kind_api(&cluster, case.kind), case).await;
    }
    // Let the last status and event writes land, then watch for ten seconds.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let reconciles_before = reconciles(&controllers);
    let writes = cluster.writes_during(Duration::from_secs(10)).await;
    let reconciles = reconciles(&controllers) - reconciles_before;
    assert!(
        writes.is_empty(),
        "{} writes over 10 s for {} standing errors: {writes:#?}",
        writes.len(),
        cases.len()
    );
    let looking_again = cases
        .iter()
        .filter(|c| {
            c.reason.contains("NotFound")
                && (c.reason.starts_with("Secret") || c.reason.starts_with("ConfigMap"))
        })
        .count();
    assert!(
        reconciles <= 3 * looking_again as u64,
        "{reconciles} reconciles over 10 s; only the {looking_again} missing Secrets and ConfigMaps may be looked at again, at most 3 times each"
    );
}
