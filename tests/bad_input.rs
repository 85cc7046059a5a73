//! Bad input a controller can only see (references to things that do not exist or do not fit):
//! each case ends in phase Failed (AccessGrants and ThirdPartyServices, which have no phase:
//! `ResolvedRefs` False) with a condition reason and a message that says what to fix, makes no
//! writes while it stands, and recovers once fixed. (What the CRDs reject up front is in `validation_rules.rs`.)

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use kaos_harness::cluster::{TestCluster, eventually};
use kaos_runtime::metrics::Metrics;
use kaos_runtime::{ControllerId, Runtime, RuntimeArgs};
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::Value;

const REGISTRY: &str = "apiVersion: v1\nkind: Namespace\nmetadata: {name: kaos-system}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: kaos-mcp-runtimes, namespace: kaos-system}\ndata:\n  runtimes.yaml: |\n    runtimes:\n      python-string: {image: 'py:1', paramsEnvVar: MCP_TOOLS_STRING}\n";

/// The controllers, running until dropped.
#[derive(Default)]
struct Controllers {
    _stops: Vec<tokio::sync::watch::Sender<bool>>,
    metrics: Vec<Arc<Metrics>>,
}

impl Controllers {
    /// Runs one controller against `cluster` until dropped.
    fn spawn<F, Fut>(&mut self, cluster: &TestCluster, id: ControllerId, args: RuntimeArgs, run: F)
    where
        F: FnOnce(Runtime) -> Fut,
        Fut: Future + Send + 'static,
        Fut::Output: Send + 'static,
    {
        let (rt, stop) = Runtime::for_tests(cluster.client.clone(), id, args);
        self.metrics.push(rt.metrics.clone());
        tokio::spawn(run(rt));
        self._stops.push(stop);
    }

    /// Reconciles so far, of all of them (`controller_runtime_reconcile_total`, every result).
    fn reconciles(&self) -> u64 {
        self.metrics
            .iter()
            .flat_map(|m| {
                m.encode()
                    .lines()
                    .filter(|l| l.starts_with("controller_runtime_reconcile_total{"))
                    .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                    .collect::<Vec<_>>()
            })
            .sum::<f64>() as u64
    }
}

fn start_controllers(cluster: &TestCluster) -> Controllers {
    let mut controllers = Controllers::default();
    let args =
        agent_controller::settings::Args::try_parse_from(["a", "--default-agent-image=agent:1"])
            .expect("flags");
    controllers.spawn(cluster, agent_controller::ID, args.runtime, |rt| {
        agent_controller::controller::run(rt, args.settings)
    });
    let args = modelapi_controller::settings::Args::try_parse_from([
        "m",
        "--default-litellm-image=litellm:1",
        "--default-ollama-image=ollama:1",
    ])
    .expect("flags");
    controllers.spawn(cluster, modelapi_controller::ID, args.runtime, |rt| {
        modelapi_controller::controller::run(rt, args.settings)
    });
    let args = mcpserver_controller::settings::Args::try_parse_from([
        "s",
        "--system-namespace=kaos-system",
    ])
    .expect("flags");
    controllers.spawn(cluster, mcpserver_controller::ID, args.runtime, |rt| {
        mcpserver_controller::controller::run(rt, args.settings)
    });
    let args = memorystore_controller::settings::Args::try_parse_from([
        "ms",
        "--default-memory-service-image=memory:1",
    ])
    .expect("flags");
    controllers.spawn(cluster, memorystore_controller::ID, args.runtime, |rt| {
        memorystore_controller::controller::run(rt, args.settings)
    });
    let args = authz_controller::settings::Args::try_parse_from(["az"]).expect("flags");
    controllers.spawn(
        cluster,
        authz_controller::ID,
        args.runtime,
        authz_controller::controller::run,
    );
    controllers
}

/// One case: manifests that fail, what the resource must then say, and the fix.
struct Case {
    name: &'static str,
    kind: &'static str,
    object: &'static str,
    bad: &'static str,
    reason: &'static str,
    message: &'static str,
    fix: &'static str,
}

const PROXY: &str = "apiVersion: kaos.tools/v1alpha1\nkind: ModelAPI\nmetadata: {name: llm, namespace: default}\nspec: {mode: Proxy, proxyConfig: {models: ['openai/*']}}\n";
const TOOLS: &str = "apiVersion: kaos.tools/v1alpha1\nkind: MCPServer\nmetadata: {name: tools, namespace: default}\nspec: {runtime: python-string}\n";

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "missing ModelAPI",
            kind: "Agent",
            object: "a1",
            bad: "apiVersion: kaos.tools/v1alpha1\nkind: Agent\nmetadata: {name: a1, namespace: default}\nspec: {modelAPI: llm, model: openai/gpt-4o}\n",
            reason: "ModelAPINotFound",
            message: "Failed to resolve ModelAPI llm: no ModelAPI of that name in namespace default",
            fix: PROXY,
        },
        Case {
            name: "missing MCPServer",
            kind: "Agent",
            object: "a2",
            bad: "apiVersion: kaos.tools/v1alpha1\nkind: Agent\nmetadata: {name: a2, namespace: default}\nspec: {modelAPI: llm, model: openai/gpt-4o, mcpServers: [tools]}\n",
            reason: "MCPServerNotFound",
            message: "Failed to resolve MCPServer tools: no MCPServer of that name in namespace default",
            fix: TOOLS,
        },
        Case {
            name: "unsupported model",
            kind: "Agent",
            object: "a3",
            bad: "apiVersion: kaos.tools/v1alpha1\nkind: Agent\nmetadata: {name: a3, namespace: default}\nspec: {modelAPI: llm, model: anthropic/claude}\n",
            reason: "ModelNotSupported",
            message: "model anthropic/claude not found in models list of ModelAPI llm: [openai/*]",
            fix: "apiVersion: kaos.tools/v1alpha1\nkind: Agent\nmetadata: {name: a3, namespace: default}\nspec: {modelAPI: llm, model: openai/gpt-4o}\n",
        },
        Case {
            name: "memory read scope above the store's ceiling",
            kind: "Agent",
            object: "a4",
            bad: "apiVersion: kaos.tools/v1alpha1\nkind: MemoryStore\nmetadata: {name: mem, namespace: default}\nspec: {storage: {type: local}, models: {summarization: {modelAPI: llm, model: openai/gpt-4o-mini}, embedding: {modelAPI: llm, model: openai/text-embedding-3-small}}}\n---\napiVersion: kaos.tools/v1alpha1\nkind: Agent\nmetadata: {name: a4, namespace: default}\nspec: {modelAPI: llm, model: openai/gpt-4o, config: {memory: {memoryStore: mem, maxReadScope: user}}}\n",
            reason: "InvalidMemoryReadScope",
            message: "config.memory.maxReadScope user exceeds MemoryStore mem maxReadScope agent",
            // Not waiting for the store: deployed at once, whether or not it is ready yet.
            fix: "apiVersion: kaos.tools/v1alpha1\nkind: Agent\nmetadata: {name: a4, namespace: default}\nspec: {modelAPI: llm, model: openai/gpt-4o, waitForDependencies: false, config: {memory: {memoryStore: mem, maxReadScope: agent}}}\n",
        },
        Case {
            name: "unknown runtime",
            kind: "MCPServer",
            object: "s1",
            bad: "apiVersion: kaos.tools/v1alpha1\nkind: MCPServer\nmetadata: {name: s1, namespace: default}\nspec: {runtime: github}\n",
            reason: "UnknownRuntime",
            message: "runtime \"github\" is not in the MCP runtime registry (ConfigMap kaos-mcp-runtimes, key runtimes.yaml); known runtimes: python-string, or use \"custom\" with spec.container.image",
            fix: "apiVersion: kaos.tools/v1alpha1\nkind: MCPServer\nmetadata: {name: s1, namespace: default}\nspec: {runtime: python-string}\n",
        },
        Case {
            name: "configYaml with a model not in models",
            kind: "ModelAPI",
            object: "m1",
            bad: "apiVersion: kaos.tools/v1alpha1\nkind: ModelAPI\nmetadata: {name: m1, namespace: default}\nspec: {mode: Proxy, proxyConfig: {models: [gpt-4o], configYaml: {fromString: \"model_list:\\n  - model_name: o3\\n\"}}}\n",
            reason: "ModelNotAllowed",
            message: "spec.proxyConfig.configYaml.fromString: model_name \"o3\" is not allowed by proxyConfig.models [gpt-4o]; add it to proxyConfig.models or remove it from the config",
            fix: "apiVersion: kaos.tools/v1alpha1\nkind: ModelAPI\nmetadata: {name: m1, namespace: default}\nspec: {mode: Proxy, proxyConfig: {models: [gpt-4o, o3], configYaml: {fromString: \"model_list:\\n  - model_name: o3\\n\"}}}\n",
        },
        Case {
            name: "configYaml that is not YAML",
            kind: "ModelAPI",
            object: "m2",
            bad: "apiVersion: kaos.tools/v1alpha1\nkind: ModelAPI\nmetadata: {name: m2, namespace: default}\nspec: {mode: Proxy, proxyConfig: {models: ['*'], configYaml: {fromString: 'model_list: ['}}}\n",
            reason: "InvalidConfigYaml",
            message: "spec.proxyConfig.configYaml.fromString is not valid YAML",
            fix: "apiVersion: kaos.tools/v1alpha1\nkind: ModelAPI\nmetadata: {name: m2, namespace: default}\nspec: {mode: Proxy, proxyConfig: {models: ['*'], configYaml: {fromString: 'model_list: []'}}}\n",
        },
        Case {
            name: "env from a Secret that does not exist",
            kind: "Agent",
            object: "a4",
            bad: "apiVersion: kaos.tools/v1alpha1\nkind: Agent\nmetadata: {name: a4, namespace: default}\nspec: {modelAPI: llm, model: openai/gpt-4o, container: {env: [{name: SLACK_TOKEN, valueFrom: {secretKeyRef: {name: slack, key: token}}}]}}\n",
            reason: "SecretNotFound",
            message: "Secret slack does not exist in namespace default (env SLACK_TOKEN of container agent reads its key token); create it and the resource recovers by itself",
            fix: "apiVersion: v1\nkind: Secret\nmetadata: {name: slack, namespace: default}\nstringData: {token: xoxb-1}\n",
        },
        Case {
            name: "API key from a Secret without that key",
            kind: "ModelAPI",
            object: "m3",
            bad: "apiVersion: v1\nkind: Secret\nmetadata: {name: creds, namespace: default}\nstringData: {apikey: sk-1}\n---\napiVersion: kaos.tools/v1alpha1\nkind: ModelAPI\nmetadata: {name: m3, namespace: default}\nspec: {mode: Proxy, proxyConfig: {models: ['*'], apiKey: {valueFrom: {secretKeyRef: {name: creds, key: api-key}}}}}\n",
            reason: "SecretKeyNotFound",
            message: "Secret creds has no key api-key (env PROXY_API_KEY of container model-api reads it); add the key or fix the reference",
            fix: "apiVersion: v1\nkind: Secret\nmetadata: {name: creds, namespace: default}\nstringData: {apikey: sk-1, api-key: sk-1}\n",
        },
        Case {
            name: "configYaml from a Secret that does not exist",
            kind: "ModelAPI",
            object: "m4",
            bad: "apiVersion: kaos.tools/v1alpha1\nkind: ModelAPI\nmetadata: {name: m4, namespace: default}\nspec: {mode: Proxy, proxyConfig: {models: ['*'], configYaml: {fromSecretKeyRef: {name: litellm, key: config.yaml}}}}\n",
            reason: "SecretNotFound",
            message: "Secret litellm does not exist in namespace default (volume litellm-config reads its key config.yaml)",
            fix: "apiVersion: v1\nkind: Secret\nmetadata: {name: litellm, namespace: default}\nstringData: {config.yaml: 'model_list: []'}\n",
        },
        Case {
            name: "external storage whose DSN Secret does not exist",
            kind: "MemoryStore",
            object: "mem2",
            // Its own ModelAPI, Ready by itself: the store gets as far as its pod.
            bad: "apiVersion: kaos.tools/v1alpha1\nkind: ModelAPI\nmetadata: {name: mem-llm, namespace: default}\nspec: {mode: Proxy, proxyConfig: {models: ['*']}}\n---\napiVersion: kaos.tools/v1alpha1\nkind: MemoryStore\nmetadata: {name: mem2, namespace: default}\nspec: {storage: {type: external, external: {connectionSecretRef: {name: pg, key: dsn}}}, models: {summarization: {modelAPI: mem-llm, model: gpt-4o-mini}, embedding: {modelAPI: mem-llm, model: text-embedding-3-small}}}\n",
            reason: "SecretNotFound",
            message: "Secret pg does not exist in namespace default (env KAOS_MEMORY_EXTERNAL_DSN of container memory reads its key dsn)",
            fix: "apiVersion: v1\nkind: Secret\nmetadata: {name: pg, namespace: default}\nstringData: {dsn: 'postgresql://memory@db/memory'}\n",
        },
        Case {
            name: "grant naming an Agent that does not exist",
            kind: "AccessGrant",
            object: "g1",
            bad: "apiVersion: kaos.tools/v1alpha1\nkind: AccessGrant\nmetadata: {name: g1, namespace: default}\nspec: {subjects: [{kind: Group, name: ops}], resources: [{kind: Agent, name: ghost}]}\n",
            reason: "ReferenceNotFound",
            message: "Agent ghost not found in namespace default; create them or fix the names",
            fix: "apiVersion: kaos.tools/v1alpha1\nkind: Agent\nmetadata: {name: ghost, namespace: default}\nspec: {modelAPI: llm, model: openai/gpt-4o}\n",
        },
        Case {
            name: "third-party service whose client Secret does not exist",
            kind: "ThirdPartyService",
            object: "t1",
            // Access for a1, which the first case creates.
            bad: "apiVersion: kaos.tools/v1alpha1\nkind: ThirdPartyService\nmetadata: {name: t1, namespace: default}\nspec: {clientID: kaos, clientSecretRef: {name: oauth, key: client-secret}, issuerURI: 'https://issuer.example', scopes: [{name: read}], protectedResources: ['https://api.example'], routeRef: {name: egress}, access: [{agent: a1, scopes: [read]}]}\n",
            reason: "SecretNotFound",
            message: "Secret oauth does not exist in namespace default (spec.clientSecretRef reads its key client-secret); create it and the resource recovers by itself",
            fix: "apiVersion: v1\nkind: Secret\nmetadata: {name: oauth, namespace: default}\nstringData: {client-secret: s3cret}\n",
        },
        Case {
            name: "env from a ConfigMap that does not exist",
            kind: "MCPServer",
            object: "s2",
            bad: "apiVersion: kaos.tools/v1alpha1\nkind: MCPServer\nmetadata: {name: s2, namespace: default}\nspec: {runtime: python-string, container: {env: [{name: MODE, valueFrom: {configMapKeyRef: {name: settings, key: mode}}}]}}\n",
            reason: "ConfigMapNotFound",
            message: "ConfigMap settings does not exist in namespace default (env MODE of container mcp-server reads its key mode)",
            fix: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: default}\ndata: {mode: fast}\n",
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
    cluster.apply(TOOLS);
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
    cluster.apply(REGISTRY);
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
    cluster.apply(REGISTRY);
    let _controllers = start_controllers(&cluster);
    for case in cases() {
        cluster.apply(case.bad);
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
        cluster.apply(case.fix);
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
    cluster.apply(REGISTRY);
    let controllers = start_controllers(&cluster);
    let cases = cases();
    for case in &cases {
        cluster.apply(case.bad);
    }
    for case in &cases {
        failed_status(&kind_api(&cluster, case.kind), case).await;
    }
    // Let the last status and event writes land, then watch for ten seconds.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let reconciles_before = controllers.reconciles();
    let writes = cluster.writes_during(Duration::from_secs(10)).await;
    let reconciles = controllers.reconciles() - reconciles_before;
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
