//! End to end: `kaos-testkit serve` and each controller binary as two processes with leader
//! election. Every replica turns ready (`/readyz` 200) once its caches sync, leader or standby;
//! the examples, a peer pair and a mesh reach Ready, then the leaders go quiet (no reconcile);
//! killing a leader hands over to its standby, which reconciles a new change within the lease
//! duration without any Ready agent leaving Ready; SIGTERM hands over in about a second; only
//! leaders' reconcile counters move. A MemoryStore waits for its two ModelAPIs, then serves the
//! agent bound to it. An AccessGrant says it is not enforced and follows what it names.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Service};
use kaos_api::agent::Agent;
use kaos_api::mcpserver::MCPServer;
use kaos_api::memorystore::MemoryStore;
use kaos_api::modelapi::ModelAPI;
use kaos_harness::processes::{
    POLL, Process, Scratch, apply_yaml, client, http_get, sample, scrape, serve_testkit,
    start_controller,
};
use kaos_harness::{EXAMPLE_CREDENTIALS, example_files, repo_root};
use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};

const LEASE_DURATION: Duration = Duration::from_secs(3);

struct Pair {
    binary: &'static str,
    lease: &'static str,
    controller: &'static str,
    processes: Vec<Process>,
}

fn settings() -> BTreeMap<String, String> {
    [
        ("LEASE_DURATION", "3s"),
        ("RENEW_DEADLINE", "2s"),
        ("RETRY_PERIOD", "500ms"),
        ("SYSTEM_NAMESPACE", "kaos-system"),
        ("DEFAULT_AGENT_IMAGE", "kaos-agent:e2e"),
        ("DEFAULT_LITELLM_IMAGE", "litellm:e2e"),
        ("DEFAULT_OLLAMA_IMAGE", "ollama:e2e"),
        ("DEFAULT_MEMORY_SERVICE_IMAGE", "kaos-memory:e2e"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

async fn lease_holder(leases: &Api<Lease>, name: &str) -> Option<String> {
    leases
        .get_opt(name)
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .filter(|h| !h.is_empty())
}

/// Waits for a holder and returns the index of the process holding the lease.
async fn leader_of(leases: &Api<Lease>, pair: &Pair, not: Option<&str>) -> (usize, Duration) {
    let started = Instant::now();
    loop {
        if let Some(holder) = lease_holder(leases, pair.lease).await
            && Some(holder.as_str()) != not
            && let Some(i) = pair
                .processes
                .iter()
                .position(|p| holder.starts_with(&format!("{}_", p.name)))
        {
            return (i, started.elapsed());
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no leader for {}",
            pair.lease
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every kind a controller reconciles that turns Ready.
const KINDS: [&str; 4] = ["Agent", "ModelAPI", "MCPServer", "MemoryStore"];
/// The kinds never Ready on kaos-rs (it enforces neither), and the condition that says so.
const NOT_ENFORCED: [(&str, &str); 2] =
    [("AccessGrant", "Enforced"), ("ThirdPartyService", "Ready")];

fn kind_api(client: &kube::Client, kind: &str) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk("kaos.tools", "v1alpha1", kind));
    Api::default_namespaced_with(client.clone(), &resource)
}

/// The condition `type_` of an object's status.
fn condition<'a>(object: &'a DynamicObject, type_: &str) -> Option<&'a serde_json::Value> {
    object
        .data
        .pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

/// (metadata.generation, the observedGeneration of condition `type_`).
async fn condition_generation(
    api: &Api<DynamicObject>,
    name: &str,
    type_: &str,
) -> (Option<i64>, Option<i64>) {
    let Ok(object) = api.get(name).await else {
        return (None, None);
    };
    let observed = condition(&object, type_).and_then(|c| c["observedGeneration"].as_i64());
    (object.metadata.generation, observed)
}

/// Whether every workload is Ready, and every AccessGrant and ThirdPartyService says it is not
/// enforced and that what it names exists, at its current generation.
async fn all_ready(client: &kube::Client) -> Result<(), String> {
    let mut waiting = Vec::new();
    for kind in KINDS {
        for object in kind_api(client, kind)
            .list(&Default::default())
            .await
            .map_err(|e| e.to_string())?
        {
            if object.data.pointer("/status/ready") != Some(&true.into()) {
                waiting.push(format!(
                    "{kind} {:?}: {}",
                    object.metadata.name,
                    object.data.pointer("/status/message").unwrap_or(&().into())
                ));
            }
        }
    }
    for (kind, type_) in NOT_ENFORCED {
        for object in kind_api(client, kind)
            .list(&Default::default())
            .await
            .map_err(|e| e.to_string())?
        {
            let current = condition(&object, type_).is_some_and(|c| {
                c["status"] == "False"
                    && c["observedGeneration"].as_i64() == object.metadata.generation
            });
            let resolved =
                condition(&object, "ResolvedRefs").is_some_and(|c| c["status"] == "True");
            if !(current && resolved) {
                waiting.push(format!(
                    "{kind} {:?}: {:?}",
                    object.metadata.name,
                    object.data.pointer("/status/conditions")
                ));
            }
        }
    }
    if waiting.is_empty() {
        Ok(())
    } else {
        Err(waiting.join("; "))
    }
}

async fn observed_generation<K>(api: &Api<K>, name: &str) -> (Option<i64>, Option<i64>)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + serde::Serialize,
{
    let Ok(object) = api.get(name).await else {
        return (None, None);
    };
    let value = serde_json::to_value(&object).unwrap_or_default();
    (
        value
            .pointer("/metadata/generation")
            .and_then(|v| v.as_i64()),
        value
            .pointer("/status/observedGeneration")
            .and_then(|v| v.as_i64()),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_per_controller_converge_hand_over_and_count_on_the_leader_only() {
    let scratch = Scratch::new("replicas");
    let (_testkit, kubeconfig) = serve_testkit(&scratch, &[]);
    let client = client(&kubeconfig).await;
    let registry: String = mcpserver_registry();
    apply_yaml(
        &client,
        &format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: kaos-system}}\n---\n{registry}"
        ),
    )
    .await;

    let env = settings();
    let mut pairs: Vec<Pair> = [
        ("agent-controller", "kaos-agent-controller", "agent"),
        (
            "modelapi-controller",
            "kaos-modelapi-controller",
            "modelapi",
        ),
        (
            "mcpserver-controller",
            "kaos-mcpserver-controller",
            "mcpserver",
        ),
        (
            "memorystore-controller",
            "kaos-memorystore-controller",
            "memorystore",
        ),
        ("authz-controller", "kaos-authz-controller", "authz"),
        (
            "workflow-controller",
            "kaos-workflow-controller",
            "workflow",
        ),
    ]
    .into_iter()
    .map(|(binary, lease, controller)| Pair {
        binary,
        lease,
        controller,
        processes: ["a", "b"]
            .iter()
            .map(|r| {
                start_controller(
                    &scratch,
                    binary,
                    &format!("{controller}-{r}"),
                    &kubeconfig,
                    &env,
                )
            })
            .collect(),
    })
    .collect();

    // Every replica is ready once its caches have synced, whether it leads or not.
    for process in pairs.iter().flat_map(|p| &p.processes) {
        let started = Instant::now();
        loop {
            let ready = http_get(process.probe_port, "/readyz")
                .await
                .map(|(c, _)| c);
            let live = http_get(process.probe_port, "/healthz")
                .await
                .map(|(c, _)| c);
            if ready == Some(200) && live == Some(200) {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "{} not ready: /readyz {ready:?}, /healthz {live:?}",
                process.name
            );
            tokio::time::sleep(POLL).await;
        }
    }

    apply_yaml(&client, &peer_shapes()).await;
    apply_yaml(&client, EXAMPLE_CREDENTIALS).await;
    // Every example, each resource of which must reach Ready.
    for example in example_files() {
        apply_yaml(&client, &std::fs::read_to_string(example).expect("example")).await;
    }
    apply_yaml(&client, ACCESS).await;
    let started = Instant::now();
    loop {
        match all_ready(&client).await {
            Ok(()) => break,
            Err(waiting) if started.elapsed() > Duration::from_secs(60) => panic!(
                "not Ready after 60 s: {waiting}\nlogs in {}",
                scratch.0.display()
            ),
            Err(_) => tokio::time::sleep(POLL).await,
        }
    }

    // Only the leaders reconciled.
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kaos-system");
    let mut leaders = Vec::new();
    let mut leaders_export = BTreeSet::new();
    for pair in &pairs {
        let (leader, _) = leader_of(&leases, pair, None).await;
        for (i, process) in pair.processes.iter().enumerate() {
            let metrics = scrape(process.metrics_port).await;
            if i == leader {
                leaders_export.extend(exported_series(&metrics));
            }
            // Reconciles that ended well: done, or to look again at a set time (a workflow with a
            // schedule always asks to be woken at its next fire).
            let success = ["success", "requeue_after"]
                .iter()
                .map(|result| {
                    sample(
                        &metrics,
                        &format!(
                            "controller_runtime_reconcile_total{{controller=\"{}\",result=\"{result}\"}}",
                            pair.controller
                        ),
                    )
                })
                .sum::<f64>();
            let leading = sample(
                &metrics,
                &format!("leader_election_master_status{{name=\"{}\"}}", pair.lease),
            );
            let queue = |family: &str| {
                sample(
                    &metrics,
                    &format!(
                        "{family}{{name=\"{0}\",controller=\"{0}\"}}",
                        pair.controller
                    ),
                )
            };
            let adds = queue("workqueue_adds_total");
            let waited = queue("workqueue_queue_duration_seconds_count");
            let worked = queue("workqueue_work_duration_seconds_count");
            if i == leader {
                assert!(
                    success > 0.0,
                    "{} leads but counted no reconcile",
                    process.name
                );
                assert_eq!(leading, 1.0, "{} reports it leads", process.name);
                // Every reconcile was queued first: a trigger's add or a requeue come due.
                assert!(
                    waited > 0.0 && adds >= waited && worked >= success,
                    "{}: adds {adds}, queue durations {waited}, work durations {worked}, successes {success}",
                    process.name
                );
                let queued_sum = queue("workqueue_queue_duration_seconds_sum");
                assert!(
                    queued_sum / waited < 10.0,
                    "{}: objects waited {}s on average",
                    process.name,
                    queued_sum / waited
                );
                assert!(
                    metrics.contains("kaos_resources{kind="),
                    "the leader {} exports kaos_resources",
                    process.name
                );
            } else {
                assert_eq!(success, 0.0, "standby {} reconciled", process.name);
                assert_eq!(leading, 0.0);
                assert_eq!(
                    (adds, worked),
                    (0.0, 0.0),
                    "standby {} queued",
                    process.name
                );
                assert!(
                    !metrics.contains("kaos_resources{"),
                    "standby {} exports kaos_resources (alerts would count them twice)",
                    process.name
                );
            }
            for family in [
                "workqueue_depth",
                "workqueue_retries_total",
                "workqueue_unfinished_work_seconds",
                "workqueue_longest_running_processor_seconds",
            ] {
                assert!(
                    metrics.contains(&format!("{family}{{name=\"{}\"", pair.controller)),
                    "{} exports no {family}",
                    process.name
                );
            }
        }
        leaders.push(leader);
    }

    // The chart's dashboards and alerts query only what the controllers export.
    let queried = charted_metrics();
    assert!(queried.len() > 10, "{queried:?}");
    let missing: Vec<_> = queried.difference(&leaders_export).collect();
    assert!(
        missing.is_empty(),
        "the dashboards or alerts query series no controller exports: {missing:?}"
    );

    // Converged: the leaders go quiet, peer cycles included.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = reconciles_of(&pairs).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        reconciles_of(&pairs).await,
        before,
        "reconciles in a 5 s idle window"
    );
    // Converged: nothing waits in any queue and nothing runs.
    for pair in &pairs {
        for process in &pair.processes {
            let metrics = scrape(process.metrics_port).await;
            for family in ["workqueue_depth", "workqueue_unfinished_work_seconds"] {
                let value = sample(&metrics, &format!("{family}{{name=\"{}\"", pair.controller));
                assert_eq!(value, 0.0, "{} {family} when idle", process.name);
            }
        }
    }

    // Kill every leader; each standby takes over and reconciles a new change within the lease.
    let holders: Vec<Option<String>> = {
        let mut holders = Vec::new();
        for pair in &pairs {
            holders.push(lease_holder(&leases, pair.lease).await);
        }
        holders
    };
    for (pair, leader) in pairs.iter_mut().zip(&leaders) {
        let _ = pair.processes[*leader].child.kill();
    }
    let killed = Instant::now();
    let agents: Api<Agent> = Api::default_namespaced(client.clone());
    let was_ready: Vec<String> = agents
        .list(&Default::default())
        .await
        .expect("agents")
        .items
        .into_iter()
        .filter(|a| a.status.as_ref().is_some_and(|s| s.ready))
        .filter_map(|a| a.metadata.name)
        .filter(|n| n != "worker")
        .collect();
    let model_apis: Api<ModelAPI> = Api::default_namespaced(client.clone());
    let servers: Api<MCPServer> = Api::default_namespaced(client.clone());
    let stores: Api<MemoryStore> = Api::default_namespaced(client.clone());
    let grants = kind_api(&client, "AccessGrant");
    let change = PatchParams::default();
    agents
        .patch(
            "worker",
            &change,
            &Patch::Merge(
                serde_json::json!({"spec": {"config": {"instructions": "after failover"}}}),
            ),
        )
        .await
        .expect("patch");
    model_apis
        .patch(
            "llm-proxy",
            &change,
            &Patch::Merge(
                serde_json::json!({"spec": {"proxyConfig": {"models": ["openai/*", "gpt-4.1"]}}}),
            ),
        )
        .await
        .expect("patch");
    servers
        .patch(
            "echo-tools",
            &change,
            &Patch::Merge(serde_json::json!({"spec": {"params": "def echo(t): return t"}})),
        )
        .await
        .expect("patch");
    stores
        .patch(
            "support-memory",
            &change,
            &Patch::Merge(serde_json::json!({"spec": {"shortTerm": {"tokenBudget": 8192}}})),
        )
        .await
        .expect("patch");
    grants
        .patch(
            "researchers",
            &change,
            &Patch::Merge(
                serde_json::json!({"spec": {"subjects": [{"kind": "Group", "name": "analysts"}]}}),
            ),
        )
        .await
        .expect("patch");
    loop {
        for agent in agents.list(&Default::default()).await.expect("agents") {
            let name = agent.metadata.name.clone().unwrap_or_default();
            assert!(
                !was_ready.contains(&name) || agent.status.as_ref().is_some_and(|s| s.ready),
                "{name} left Ready during the failover: {:?}",
                agent.status
            );
        }
        let a = observed_generation(&agents, "worker").await;
        let m = observed_generation(&model_apis, "llm-proxy").await;
        let s = observed_generation(&servers, "echo-tools").await;
        let st = observed_generation(&stores, "support-memory").await;
        let g = condition_generation(&grants, "researchers", "Enforced").await;
        if [a, m, s, st, g]
            .iter()
            .all(|(generation, observed)| generation.is_some() && generation == observed)
        {
            break;
        }
        assert!(
            killed.elapsed() < LEASE_DURATION + Duration::from_secs(5),
            "the standbys did not reconcile the change in time: {a:?} {m:?} {s:?} {st:?} {g:?}"
        );
        tokio::time::sleep(POLL).await;
    }
    for ((pair, holder), killed_leader) in pairs.iter().zip(&holders).zip(&leaders) {
        let (new_leader, _) = leader_of(&leases, pair, holder.as_deref()).await;
        assert_ne!(
            new_leader, *killed_leader,
            "{}: the standby took over",
            pair.lease
        );
    }

    // SIGTERM the new agent leader with a fresh standby started: the lease moves in about a second.
    let agent_pair = &mut pairs[0];
    let standby_name = "agent-c";
    agent_pair.processes.push(start_controller(
        &scratch,
        agent_pair.binary,
        standby_name,
        &kubeconfig,
        &env,
    ));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (leader, _) = leader_of(&leases, agent_pair, None).await;
    let holder = lease_holder(&leases, agent_pair.lease).await;
    let terminated = Instant::now();
    agent_pair.processes[leader].sigterm();
    let (new_leader, _) = leader_of(&leases, agent_pair, holder.as_deref()).await;
    let handover = terminated.elapsed();
    assert_eq!(agent_pair.processes[new_leader].name, standby_name);
    assert!(
        handover < Duration::from_millis(1500),
        "handover took {handover:?}"
    );
    let exited = Instant::now();
    while agent_pair.processes[leader].is_running() {
        assert!(
            exited.elapsed() < Duration::from_secs(5),
            "the terminated leader did not exit"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let status = agent_pair.processes[leader].child.try_wait().ok().flatten();
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(0),
        "SIGTERM is a clean exit"
    );
}

/// Polls `check` until it returns Some, for at most `timeout`; panics with `what` and where the
/// controllers' logs are.
async fn wait_until<T, F, Fut>(scratch: &Scratch, what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            started.elapsed() < timeout,
            "timed out after {timeout:?} waiting until {what}\nlogs in {}",
            scratch.0.display()
        );
        tokio::time::sleep(POLL).await;
    }
}

/// The value of `name` in the env of a Deployment's first container.
fn env_of(deployment: &Deployment, name: &str) -> Option<String> {
    deployment
        .spec
        .as_ref()?
        .template
        .spec
        .as_ref()?
        .containers
        .first()?
        .env
        .as_ref()?
        .iter()
        .find(|e| e.name == name)?
        .value
        .clone()
}

const NOTES: &str = "apiVersion: kaos.tools/v1alpha1\nkind: MemoryStore\nmetadata: {name: notes, namespace: default}\nspec: {storage: {type: local}, models: {summarization: {modelAPI: summarizer, model: openai/gpt-4o-mini}, embedding: {modelAPI: embedder, model: nomic-embed-text}}}\n---\napiVersion: kaos.tools/v1alpha1\nkind: Agent\nmetadata: {name: helper, namespace: default}\nspec: {modelAPI: summarizer, model: openai/gpt-4o-mini, config: {memory: {memoryStore: notes}}}\n";
const SUMMARIZER: &str = "apiVersion: kaos.tools/v1alpha1\nkind: ModelAPI\nmetadata: {name: summarizer, namespace: default}\nspec: {mode: Proxy, proxyConfig: {models: ['openai/*']}}\n";
const EMBEDDER: &str = "apiVersion: kaos.tools/v1alpha1\nkind: ModelAPI\nmetadata: {name: embedder, namespace: default}\nspec: {mode: Hosted, hostedConfig: {model: nomic-embed-text}}\n";

/// A served kaos-testkit with the namespace `kaos-system`: its process, kubeconfig and a client.
async fn testkit_with_system_namespace(
    scratch: &Scratch,
) -> (Process, std::path::PathBuf, kube::Client) {
    let (testkit, kubeconfig) = serve_testkit(scratch, &[]);
    let client = client(&kubeconfig).await;
    apply_yaml(
        &client,
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: kaos-system}\n",
    )
    .await;
    (testkit, kubeconfig, client)
}

/// The memorystore-controller binary with the modelapi and agent ones: a MemoryStore waits
/// (Pending, nothing created) until both ModelAPIs it names are Ready, then runs its Deployment,
/// Service and claim called at the summarization ModelAPI's endpoint and publishes its endpoint;
/// the Agent bound to it waits for it, then gets that endpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_store_waits_for_its_model_apis_then_serves_its_agent() {
    let scratch = Scratch::new("memorystore");
    let (_testkit, kubeconfig, client) = testkit_with_system_namespace(&scratch).await;
    let env = settings();
    let _controllers: Vec<Process> = [
        "modelapi-controller",
        "memorystore-controller",
        "agent-controller",
    ]
    .into_iter()
    .map(|binary| start_controller(&scratch, binary, binary, &kubeconfig, &env))
    .collect();
    let stores: Api<MemoryStore> = Api::default_namespaced(client.clone());
    let agents: Api<Agent> = Api::default_namespaced(client.clone());
    let deployments: Api<Deployment> = Api::default_namespaced(client.clone());
    let store_message = |expected: &'static str| {
        let stores = stores.clone();
        async move {
            let status = stores.get("notes").await.ok()?.status?;
            (status.message.as_deref() == Some(expected)).then_some(status)
        }
    };

    // Neither ModelAPI exists: Pending, and nothing runs.
    apply_yaml(&client, NOTES).await;
    let status = wait_until(
        &scratch,
        "notes waits for its summarization ModelAPI",
        Duration::from_secs(30),
        || store_message("summarization ModelAPI \"summarizer\" not found"),
    )
    .await;
    assert_eq!(
        status.phase.map(|p| p.as_str()),
        Some("Pending"),
        "{status:?}"
    );
    assert!(!status.ready);

    // The summarization ModelAPI turns Ready: the store waits for the embedding one, the agent
    // for its store.
    apply_yaml(&client, SUMMARIZER).await;
    wait_until(
        &scratch,
        "notes waits for its embedding ModelAPI",
        Duration::from_secs(30),
        || store_message("embedding ModelAPI \"embedder\" not found"),
    )
    .await;
    wait_until(
        &scratch,
        "helper waits for its MemoryStore",
        Duration::from_secs(30),
        || async {
            let status = agents.get("helper").await.ok()?.status?;
            (status.message.as_deref() == Some("MemoryStore notes is not ready")).then_some(())
        },
    )
    .await;
    for name in ["memorystore-notes", "agent-helper"] {
        assert!(
            deployments.get_opt(name).await.expect("get").is_none(),
            "{name} created while its dependencies wait"
        );
    }

    // Both Ready: the store runs and publishes its endpoint, the agent is bound to it.
    apply_yaml(&client, EMBEDDER).await;
    let endpoint = "http://memorystore-notes.default.svc.cluster.local:8080";
    let status = wait_until(
        &scratch,
        "notes is Ready",
        Duration::from_secs(30),
        || async {
            let status = stores.get("notes").await.ok()?.status?;
            status.ready.then_some(status)
        },
    )
    .await;
    assert_eq!(status.phase.map(|p| p.as_str()), Some("Ready"));
    assert_eq!(status.endpoint.as_deref(), Some(endpoint));
    let summarizer = Api::<ModelAPI>::default_namespaced(client.clone())
        .get("summarizer")
        .await
        .expect("summarizer")
        .status
        .and_then(|s| s.endpoint)
        .expect("the summarizer's endpoint");
    let deployment = deployments
        .get("memorystore-notes")
        .await
        .expect("Deployment");
    assert_eq!(
        env_of(&deployment, "KAOS_MEMORY_MODEL_BASE_URL"),
        Some(format!("{summarizer}/v1"))
    );
    let pod = deployment
        .spec
        .and_then(|s| s.template.spec)
        .expect("pod spec");
    assert_eq!(pod.containers[0].image.as_deref(), Some("kaos-memory:e2e"));
    let service = Api::<Service>::default_namespaced(client.clone())
        .get("memorystore-notes")
        .await
        .expect("Service");
    assert_eq!(
        service
            .spec
            .and_then(|s| s.ports)
            .map(|p| p.iter().map(|p| p.port).collect::<Vec<_>>()),
        Some(vec![8080])
    );
    let claim = Api::<PersistentVolumeClaim>::default_namespaced(client.clone())
        .get("memorystore-notes-data")
        .await
        .expect("the data claim");
    let volume = pod.volumes.unwrap_or_default();
    assert_eq!(
        volume
            .first()
            .and_then(|v| v.persistent_volume_claim.as_ref())
            .map(|c| c.claim_name.as_str()),
        claim.metadata.name.as_deref()
    );

    wait_until(
        &scratch,
        "helper is Ready",
        Duration::from_secs(30),
        || async {
            let ready = agents.get("helper").await.ok()?.status?.ready;
            ready.then_some(())
        },
    )
    .await;
    let agent = deployments
        .get("agent-helper")
        .await
        .expect("agent Deployment");
    assert_eq!(
        env_of(&agent, "MEMORY_STORE_ENDPOINT").as_deref(),
        Some(endpoint)
    );
}

/// An AccessGrant and a ThirdPartyService (with its client Secret) on the quickstart's agents
/// and MCP server, everything they name existing.
const ACCESS: &str = "apiVersion: v1\nkind: Secret\nmetadata: {name: github-oauth, namespace: default}\nstringData: {client-secret: s3cret}\n---\napiVersion: kaos.tools/v1alpha1\nkind: AccessGrant\nmetadata: {name: researchers, namespace: default}\nspec: {subjects: [{kind: Group, name: researchers}, {kind: Agent, name: coordinator}], resources: [{kind: Agent, name: worker}, {kind: MCPServer, name: echo-tools}]}\n---\napiVersion: kaos.tools/v1alpha1\nkind: ThirdPartyService\nmetadata: {name: github, namespace: default}\nspec: {clientID: kaos, clientSecretRef: {name: github-oauth, key: client-secret}, issuerURI: 'https://github.com', scopes: [{name: repo}], protectedResources: ['https://api.github.com'], routeRef: {name: github-egress}, access: [{agent: worker, scopes: [repo]}]}\n";

/// (status, reason, message) of a condition.
fn state(object: &DynamicObject, type_: &str) -> Option<(String, String, String)> {
    let c = condition(object, type_)?;
    let text = |k: &str| c[k].as_str().unwrap_or("").to_string();
    Some((text("status"), text("reason"), text("message")))
}

/// The authz-controller binary: an AccessGrant naming an Agent that exists and an MCPServer
/// that does not says, in KAOS's words, that it is not enforced and which reference is missing;
/// once the MCPServer is created its references resolve.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_access_grant_is_not_enforced_and_follows_what_it_names() {
    let scratch = Scratch::new("authz");
    let (_testkit, kubeconfig, client) = testkit_with_system_namespace(&scratch).await;
    let _controller = start_controller(
        &scratch,
        "authz-controller",
        "authz-controller",
        &kubeconfig,
        &settings(),
    );
    apply_yaml(
        &client,
        "apiVersion: kaos.tools/v1alpha1\nkind: Agent\nmetadata: {name: researcher, namespace: default}\nspec: {modelAPI: llm, model: openai/gpt-4o}\n---\napiVersion: kaos.tools/v1alpha1\nkind: AccessGrant\nmetadata: {name: researchers, namespace: default}\nspec: {subjects: [{kind: Agent, name: researcher}], resources: [{kind: MCPServer, name: tools}]}\n",
    )
    .await;
    let grants = kind_api(&client, "AccessGrant");
    let resolved = |status: &'static str| {
        let grants = grants.clone();
        async move {
            let grant = grants.get("researchers").await.ok()?;
            (state(&grant, "ResolvedRefs")?.0 == status).then_some(grant)
        }
    };
    let grant = wait_until(
        &scratch,
        "the grant reports the missing MCPServer",
        Duration::from_secs(30),
        || resolved("False"),
    )
    .await;
    assert_eq!(
        state(&grant, "Enforced"),
        Some((
            "False".into(),
            "AuthorizationDisabled".into(),
            "Gateway authorization is not enabled; this AccessGrant is not enforced".into()
        ))
    );
    assert_eq!(
        state(&grant, "ResolvedRefs"),
        Some((
            "False".into(),
            "ReferenceNotFound".into(),
            "MCPServer tools not found in namespace default; create them or fix the names".into()
        ))
    );

    apply_yaml(
        &client,
        "apiVersion: kaos.tools/v1alpha1\nkind: MCPServer\nmetadata: {name: tools, namespace: default}\nspec: {runtime: python-string}\n",
    )
    .await;
    let grant = wait_until(
        &scratch,
        "the grant's references resolve",
        Duration::from_secs(30),
        || resolved("True"),
    )
    .await;
    assert_eq!(
        state(&grant, "ResolvedRefs").map(|(_, reason, _)| reason),
        Some("ReferencesResolved".into())
    );
    assert_eq!(
        state(&grant, "Enforced").map(|(status, reason, _)| (status, reason)),
        Some(("False".into(), "AuthorizationDisabled".into()))
    );
}

/// Reconciles of every controller replica so far (all outcomes).
async fn reconciles_of(pairs: &[Pair]) -> Vec<f64> {
    let mut counts = Vec::new();
    for pair in pairs {
        for process in &pair.processes {
            let metrics = scrape(process.metrics_port).await;
            counts.push(
                RESULTS
                    .iter()
                    .map(|result| {
                        sample(
                            &metrics,
                            &format!(
                                "controller_runtime_reconcile_total{{controller=\"{}\",result=\"{result}\"}}",
                                pair.controller
                            ),
                        )
                    })
                    .sum(),
            );
        }
    }
    counts
}

const RESULTS: [&str; 4] = ["success", "error", "requeue", "requeue_after"];

/// A pair of agents that list each other and a mesh of five where everyone lists everyone.
fn peer_shapes() -> String {
    let agent = |name: &str, peers: &[String]| {
        format!(
            "---\napiVersion: kaos.tools/v1alpha1\nkind: Agent\nmetadata: {{name: {name}, namespace: default}}\nspec: {{modelAPI: llm-proxy, model: openai/gpt-4o, agentNetwork: {{access: [{}]}}}}\n",
            peers.join(", ")
        )
    };
    let mut yaml = agent("pair-a", &["pair-b".into()]) + &agent("pair-b", &["pair-a".into()]);
    let mesh: Vec<String> = (1..=5).map(|i| format!("mesh-{i}")).collect();
    for me in &mesh {
        let others: Vec<String> = mesh.iter().filter(|p| *p != me).cloned().collect();
        yaml += &agent(me, &others);
    }
    yaml
}

fn mcpserver_registry() -> String {
    let body: String = std::fs::read_to_string(
        repo_root().join("crates/mcpserver-controller/src/default-runtimes.yaml"),
    )
    .expect("registry")
    .lines()
    .map(|l| format!("    {l}\n"))
    .collect();
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: kaos-mcp-runtimes, namespace: kaos-system}}\ndata:\n  runtimes.yaml: |\n{body}"
    )
}

/// The series names of a Prometheus text exposition (histograms' `_bucket`, `_sum`, `_count`).
fn exported_series(metrics: &str) -> impl Iterator<Item = String> + '_ {
    metrics
        .lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .filter_map(|line| line.split(['{', ' ']).next())
        .map(str::to_owned)
}

/// The series the chart's Grafana dashboards and PrometheusRule query: their expressions'
/// identifiers with one of the families' prefixes.
fn charted_metrics() -> BTreeSet<String> {
    let chart = repo_root().join("charts/kaos");
    let mut sources = vec![chart.join("templates/prometheusrule.yaml")];
    for entry in std::fs::read_dir(chart.join("dashboards")).expect("charts/kaos/dashboards") {
        sources.push(entry.expect("a dashboard file").path());
    }
    const FAMILIES: [&str; 6] = [
        "controller_runtime_",
        "workqueue_",
        "leader_election_",
        "rest_client_",
        "process_",
        "kaos_",
    ];
    sources
        .iter()
        .flat_map(|path| {
            let text = std::fs::read_to_string(path)
                .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
            text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|word| FAMILIES.iter().any(|family| word.starts_with(family)))
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect()
}
