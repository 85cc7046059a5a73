//! A MemoryStore waits for its two ModelAPIs, then serves the agent bound to it.

use kaos_harness::deployments::env_value;

use super::*;

const NOTES: &str = "apiVersion: kaos.tools/v1alpha1\nkind: MemoryStore\nmetadata: {name: notes, namespace: default}\nspec: {storage: {type: local}, models: {summarization: {modelAPI: summarizer, model: openai/gpt-4o-mini}, embedding: {modelAPI: embedder, model: nomic-embed-text}}}\n---\napiVersion: kaos.tools/v1alpha1\nkind: Agent\nmetadata: {name: helper, namespace: default}\nspec: {modelAPI: summarizer, model: openai/gpt-4o-mini, config: {memory: {memoryStore: notes}}}\n";
const SUMMARIZER: &str = "apiVersion: kaos.tools/v1alpha1\nkind: ModelAPI\nmetadata: {name: summarizer, namespace: default}\nspec: {mode: Proxy, proxyConfig: {models: ['openai/*']}}\n";
const EMBEDDER: &str = "apiVersion: kaos.tools/v1alpha1\nkind: ModelAPI\nmetadata: {name: embedder, namespace: default}\nspec: {mode: Hosted, hostedConfig: {model: nomic-embed-text}}\n";

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
        env_value(&deployment, "KAOS_MEMORY_MODEL_BASE_URL"),
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
        env_value(&agent, "MEMORY_STORE_ENDPOINT").as_deref(),
        Some(endpoint)
    );
}
