//! Secrets never leave their Secret (issue 18): a marker planted in every secret-bearing field
//! appears in nothing the controllers emit — the objects they write, their status, events, logs
//! and metrics — except the owned Secret that holds an inline API key. The controllers run as
//! released binaries under the chart's RBAC, logging at debug level.

use std::time::{Duration, Instant};

use kaos_api::modelapi::ModelAPI;
use kaos_harness::processes::{ChartCluster, POLL, Scratch, apply_yaml, family_total, scrape};
use kube::Api;
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::Value;

/// (marker, its base64 when it is a whole Secret value, where it was planted)
const MARKERS: &[(&str, &str, &str)] = &[
    (
        "sk-inline-7f3a9c",
        "c2staW5saW5lLTdmM2E5Yw==",
        "proxyConfig.apiKey.value",
    ),
    (
        "sk-referenced-51d2e8",
        "c2stcmVmZXJlbmNlZC01MWQyZTg=",
        "a Secret apiKey.valueFrom reads",
    ),
    (
        "sk-in-config-0b8e44",
        "",
        "a Secret configYaml.fromSecretKeyRef mounts",
    ),
    ("sk-pasted-c29e13", "", "an invalid configYaml.fromString"),
    (
        "xoxb-env-a4d1f0",
        "eG94Yi1lbnYtYTRkMWYw",
        "a Secret container.env reads",
    ),
];

const MANIFESTS: &str = r#"
apiVersion: v1
kind: Secret
metadata: {name: openai-key, namespace: default}
stringData: {api-key: sk-referenced-51d2e8}
---
apiVersion: v1
kind: Secret
metadata: {name: litellm-config, namespace: default}
stringData:
  config.yaml: |
    model_list:
      - model_name: gpt-4o
        litellm_params: {model: openai/gpt-4o, api_key: sk-in-config-0b8e44}
---
apiVersion: v1
kind: Secret
metadata: {name: slack, namespace: default}
stringData: {token: xoxb-env-a4d1f0}
---
apiVersion: kaos.tools/v1alpha1
kind: ModelAPI
metadata: {name: inline, namespace: default}
spec: {mode: Proxy, proxyConfig: {models: ["*"], apiKey: {value: sk-inline-7f3a9c}}}
---
apiVersion: kaos.tools/v1alpha1
kind: ModelAPI
metadata: {name: referenced, namespace: default}
spec:
  mode: Proxy
  proxyConfig: {models: ["*"], apiKey: {valueFrom: {secretKeyRef: {name: openai-key, key: api-key}}}}
---
apiVersion: kaos.tools/v1alpha1
kind: ModelAPI
metadata: {name: mounted, namespace: default}
spec:
  mode: Proxy
  proxyConfig:
    models: ["gpt-4o"]
    configYaml: {fromSecretKeyRef: {name: litellm-config, key: config.yaml}}
---
apiVersion: kaos.tools/v1alpha1
kind: ModelAPI
metadata: {name: broken, namespace: default}
spec:
  mode: Proxy
  proxyConfig:
    models: ["*"]
    configYaml:
      fromString: "model_list:\n  - model_name: a\n    litellm_params: {api_key: sk-pasted-c29e13, model: [}\n"
---
apiVersion: kaos.tools/v1alpha1
kind: MCPServer
metadata: {name: slack-tools, namespace: default}
spec:
  runtime: custom
  container:
    image: ghcr.io/example/slack-mcp:1
    env: [{name: SLACK_BOT_TOKEN, valueFrom: {secretKeyRef: {name: slack, key: token}}}]
---
apiVersion: kaos.tools/v1alpha1
kind: Agent
metadata: {name: assistant, namespace: default}
spec:
  modelAPI: inline
  model: gpt-4o
  mcpServers: [slack-tools]
  container:
    env: [{name: SLACK_TOKEN, valueFrom: {secretKeyRef: {name: slack, key: token}}}]
"#;

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// What the cluster holds that the controllers may have written or reported: (what, JSON).
/// The users' own Secrets are left out, and so is the spec of the kaos objects (the user put
/// the inline and the pasted key there); their metadata and status are in.
async fn emitted_objects(admin: &kube::Client) -> Vec<(String, String)> {
    let kinds = [
        resource("apps", "v1", "Deployment", "deployments"),
        resource("apps", "v1", "ReplicaSet", "replicasets"),
        resource("", "v1", "Service", "services"),
        resource("", "v1", "ConfigMap", "configmaps"),
        resource("", "v1", "Secret", "secrets"),
        resource("", "v1", "Event", "events"),
        resource("events.k8s.io", "v1", "Event", "events"),
        resource("coordination.k8s.io", "v1", "Lease", "leases"),
        resource("kaos.tools", "v1alpha1", "Agent", "agents"),
        resource("kaos.tools", "v1alpha1", "ModelAPI", "modelapis"),
        resource("kaos.tools", "v1alpha1", "MCPServer", "mcpservers"),
    ];
    let users_secrets = ["openai-key", "litellm-config", "slack"];
    let mut texts = Vec::new();
    for kind in kinds {
        for namespace in ["default", "kaos-system"] {
            let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), namespace, &kind);
            let Ok(list) = api.list(&Default::default()).await else {
                continue;
            };
            for object in list.items {
                let name = object.metadata.name.clone().unwrap_or_default();
                if kind.kind == "Secret" && users_secrets.contains(&name.as_str()) {
                    continue;
                }
                let mut value = serde_json::to_value(&object).expect("serializes");
                if kind.group == "kaos.tools" {
                    value.as_object_mut().expect("object").remove("spec");
                }
                texts.push((
                    format!("{} {namespace}/{name}", kind.kind),
                    value.to_string(),
                ));
            }
        }
    }
    texts
}

async fn phase(model_apis: &Api<ModelAPI>, name: &str) -> Option<String> {
    let m = model_apis.get_opt(name).await.ok()??;
    Some(m.status?.phase?.as_str().to_string())
}

/// The kaos objects of [`MANIFESTS`] (plural, name) and the phase each settles in.
const SETTLED: &[(&str, &str, &str)] = &[
    ("modelapis", "inline", "Ready"),
    ("modelapis", "referenced", "Ready"),
    ("modelapis", "mounted", "Ready"),
    ("modelapis", "broken", "Failed"),
    ("mcpservers", "slack-tools", "Ready"),
    ("agents", "assistant", "Ready"),
];

/// The objects of [`SETTLED`] not yet in their phase for their current generation (their
/// controller has not finished the reconcile of what the test applied).
async fn unsettled(admin: &kube::Client) -> Vec<String> {
    let mut unsettled = Vec::new();
    for (plural, name, phase) in SETTLED {
        let kind = resource("kaos.tools", "v1alpha1", "", plural);
        let api: Api<DynamicObject> = Api::default_namespaced_with(admin.clone(), &kind);
        let object = api.get_opt(name).await.ok().flatten();
        let status = object.as_ref().map(|o| &o.data["status"]);
        let generation = object.as_ref().and_then(|o| o.metadata.generation);
        let observed = status.and_then(|s| s["observedGeneration"].as_i64());
        let now = status.and_then(|s| s["phase"].as_str());
        if now != Some(*phase) || observed.is_none() || observed != generation {
            unsettled.push(format!(
                "{plural}/{name}: {now:?} at generation {observed:?} of {generation:?}"
            ));
        }
    }
    unsettled
}

/// Every replica's (work queue depth + running reconciles, reconciles so far), from its metrics.
async fn queues(cluster: &ChartCluster) -> Vec<(f64, f64)> {
    let mut queues = Vec::new();
    for (_, replicas) in &cluster.controllers {
        for replica in replicas {
            let metrics = scrape(replica.process.metrics_port).await;
            let sum = |family: &str| family_total(&metrics, family);
            // A replica that serves no metrics (not up) is never idle.
            let busy = if metrics.is_empty() {
                f64::INFINITY
            } else {
                sum("workqueue_depth") + sum("controller_runtime_active_workers")
            };
            queues.push((busy, sum("controller_runtime_reconcile_total")));
        }
    }
    queues
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_value_leaves_its_secret() {
    let scratch = Scratch::new("secrets");
    let mut cluster =
        ChartCluster::start(&scratch, &[], 1, &[("CONTROLLER_LOG_LEVEL", "debug")]).await;
    let admin = cluster.admin.clone();
    apply_yaml(&admin, MANIFESTS).await;

    let model_apis: Api<ModelAPI> = Api::default_namespaced(admin.clone());
    let started = Instant::now();
    loop {
        let mut phases = Vec::new();
        for name in ["inline", "referenced", "mounted", "broken"] {
            phases.push(phase(&model_apis, name).await);
        }
        let want = ["Ready", "Ready", "Ready", "Failed"].map(|p| Some(p.to_string()));
        if phases == want {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the ModelAPIs did not settle: {phases:?}"
        );
        // The poll of this wait, not a fence.
        tokio::time::sleep(POLL).await;
    }
    let broken = model_apis.get("broken").await.expect("broken");
    let message = broken.status.and_then(|s| s.message).unwrap_or_default();
    assert!(
        message.contains("is not valid YAML at line 3, column"),
        "{message}"
    );
    // Fenced, instead of a pause for the controllers to log, count and report what they do
    // after settling: every object is in its phase at its current generation (the agent and its
    // MCPServer too, whose Deployments carry the Secret references), then every controller's
    // work queue is empty with no reconcile running, on two scrapes in a row with no reconcile
    // counted between them. The events are posted within a reconcile, the logs written by it.
    let started = Instant::now();
    loop {
        let waiting = unsettled(&admin).await;
        if waiting.is_empty() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "not settled: {waiting:?}"
        );
        // The poll of this wait, not a fence.
        tokio::time::sleep(POLL).await;
    }
    let mut last = queues(&cluster).await;
    loop {
        // The poll of this wait, not a fence: the gap between two scrapes.
        tokio::time::sleep(POLL).await;
        let now = queues(&cluster).await;
        if now == last && now.iter().all(|(busy, _)| *busy == 0.0) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "the controllers did not go idle (queued + running, reconciles): {now:?}"
        );
        last = now;
    }

    let mut emitted = emitted_objects(&admin).await;
    for entry in std::fs::read_dir(&scratch.0).expect("scratch") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "log") {
            let text = std::fs::read_to_string(&path).expect("log");
            emitted.push((format!("log {}", path.display()), text));
        }
    }
    for (binary, replicas) in &cluster.controllers {
        for replica in replicas {
            let metrics = scrape(replica.process.metrics_port).await;
            emitted.push((format!("metrics of {binary}"), metrics));
        }
    }
    // What is searched must be there, or an empty search would pass: every controller's log
    // and metrics, and the objects made from the secret-bearing fields.
    for (binary, replicas) in &cluster.controllers {
        for replica in replicas {
            let log = format!("{}.log", replica.process.name);
            assert!(
                emitted.iter().any(|(what, text)| what.starts_with("log ")
                    && what.ends_with(&log)
                    && !text.is_empty()),
                "{binary}'s log {log} is read"
            );
        }
        assert!(
            emitted
                .iter()
                .any(|(what, text)| *what == format!("metrics of {binary}")
                    && text.contains("controller_runtime_reconcile_total")),
            "{binary}'s metrics are read"
        );
    }
    assert_eq!(cluster.controllers.len(), 6, "every controller runs");
    for made in [
        "Deployment default/modelapi-inline",
        "Deployment default/modelapi-referenced",
        "Deployment default/modelapi-mounted",
        "Deployment default/mcpserver-slack-tools",
        "Deployment default/agent-assistant",
        "Secret default/modelapi-inline-api-key",
        "ModelAPI default/broken",
    ] {
        assert!(
            emitted.iter().any(|(what, _)| what == made),
            "{made} is searched"
        );
    }
    assert!(
        emitted
            .iter()
            .any(|(what, _)| what.starts_with("Event default/")),
        "the events are searched"
    );

    let owned = "Secret default/modelapi-inline-api-key";
    let mut leaks = Vec::new();
    for (marker, encoded, planted) in MARKERS {
        for (what, text) in &emitted {
            let found = text.contains(marker) || (!encoded.is_empty() && text.contains(encoded));
            let allowed = *marker == "sk-inline-7f3a9c" && what == owned;
            if found && !allowed {
                leaks.push(format!("{marker} ({planted}) appears in {what}"));
            }
        }
    }
    assert!(
        leaks.is_empty(),
        "secret values leaked:\n{}",
        leaks.join("\n")
    );

    let holder = emitted.iter().find(|(what, _)| what == owned);
    let holder = holder.map(|(_, text)| text.as_str()).unwrap_or_default();
    assert!(
        holder.contains("c2staW5saW5lLTdmM2E5Yw=="),
        "the inline key is kept in {owned}"
    );
    let deployment = emitted
        .iter()
        .find(|(what, _)| what == "Deployment default/modelapi-inline")
        .map(|(_, text)| serde_json::from_str::<Value>(text).expect("json"))
        .expect("the inline ModelAPI's Deployment");
    let env = &deployment["spec"]["template"]["spec"]["containers"][0]["env"];
    let key = env
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["name"] == "PROXY_API_KEY")
        .expect("PROXY_API_KEY");
    assert_eq!(
        key["valueFrom"]["secretKeyRef"],
        serde_json::json!({"name": "modelapi-inline-api-key", "key": "api-key"})
    );

    // No controller replica crashed meanwhile (one restarted after losing its Lease is no crash).
    if let Err(crashes) = cluster.restart_exited(&scratch, &[]) {
        panic!("{crashes}\nlogs in {}", scratch.0.display());
    }
}
