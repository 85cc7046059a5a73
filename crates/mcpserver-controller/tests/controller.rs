//! The MCPServer controller against kaos-testkit with the deployment simulator.

use std::time::Duration;

use clap::Parser;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use kaos_api::common::Phase;
use kaos_api::mcpserver::MCPServer;
use kaos_harness::cluster::{TestCluster, eventually};
use kaos_runtime::Runtime;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use mcpserver_controller::registry::DEFAULT_RUNTIMES_YAML;
use mcpserver_controller::settings::Args;
use serde_json::json;

struct Harness {
    cluster: TestCluster,
    servers: Api<MCPServer>,
    deployments: Api<Deployment>,
    _stop: tokio::sync::watch::Sender<bool>,
}

fn registry_manifest(runtimes_yaml: &str) -> String {
    let indented: String = runtimes_yaml
        .lines()
        .map(|l| format!("    {l}\n"))
        .collect();
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: kaos-mcp-runtimes, namespace: kaos-system}}\ndata:\n  runtimes.yaml: |\n{indented}"
    )
}

async fn start() -> Harness {
    let cluster = TestCluster::start();
    cluster.apply("apiVersion: v1\nkind: Namespace\nmetadata: {name: kaos-system}\n");
    cluster.apply(&registry_manifest(DEFAULT_RUNTIMES_YAML));
    let args = Args::try_parse_from(["mcpserver-controller", "--system-namespace=kaos-system"])
        .expect("flags");
    let (runtime, stop) = Runtime::for_tests(
        cluster.client.clone(),
        mcpserver_controller::ID,
        args.runtime,
    );
    tokio::spawn(mcpserver_controller::controller::run(
        runtime,
        args.settings,
    ));
    let servers = Api::default_namespaced(cluster.client.clone());
    let deployments = Api::default_namespaced(cluster.client.clone());
    Harness {
        cluster,
        servers,
        deployments,
        _stop: stop,
    }
}

fn apply_server(h: &Harness, name: &str, spec: serde_json::Value) {
    let manifest = json!({"apiVersion": "kaos.tools/v1alpha1", "kind": "MCPServer", "metadata": {"name": name, "namespace": "default"}, "spec": spec});
    h.cluster.apply(&manifest.to_string());
}

async fn until_phase(h: &Harness, name: &str, phase: Phase) -> MCPServer {
    eventually(&format!("{name} is {phase:?}"), || async {
        h.servers
            .get(name)
            .await
            .ok()
            .filter(|s| s.status.as_ref().and_then(|s| s.phase) == Some(phase))
    })
    .await
}

fn template_hash(d: &Deployment) -> String {
    d.spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.annotations.as_ref())
        .and_then(|a| a.get("kaos.tools/pod-spec-hash").cloned())
        .unwrap_or_default()
}

async fn deployment_changes(h: &Harness, name: &str, from_hash: &str) -> Deployment {
    eventually("the Deployment rolls", || async {
        h.deployments
            .get(name)
            .await
            .ok()
            .filter(|d| template_hash(d) != from_hash)
    })
    .await
}

#[tokio::test]
async fn python_string_becomes_ready_and_params_roll_it() {
    let h = start().await;
    apply_server(
        &h,
        "tools",
        json!({"runtime": "python-string", "params": "def a(): return 1"}),
    );
    let ready = until_phase(&h, "tools", Phase::Ready).await;
    let status = ready.status.expect("status");
    assert_eq!(
        status.endpoint.as_deref(),
        Some("http://mcpserver-tools.default.svc.cluster.local:8000")
    );
    assert!(status.available_tools.is_empty());
    let before = h
        .deployments
        .get("mcpserver-tools")
        .await
        .expect("deployment");

    let patch = json!({"spec": {"params": "def b(): return 2"}});
    h.servers
        .patch("tools", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch");
    let after = deployment_changes(&h, "mcpserver-tools", &template_hash(&before)).await;
    let env = after
        .spec
        .and_then(|s| s.template.spec)
        .map(|p| p.containers[0].env.clone().unwrap_or_default())
        .unwrap_or_default();
    assert_eq!(env[0].value.as_deref(), Some("def b(): return 2"));
}

#[tokio::test]
async fn editing_the_registry_rolls_the_servers_that_use_it() {
    let h = start().await;
    apply_server(&h, "k8s", json!({"runtime": "kubernetes"}));
    until_phase(&h, "k8s", Phase::Ready).await;
    let before = h
        .deployments
        .get("mcpserver-k8s")
        .await
        .expect("deployment");
    let edited = DEFAULT_RUNTIMES_YAML.replace(
        "ghcr.io/containers/kubernetes-mcp-server:latest",
        "ghcr.io/containers/kubernetes-mcp-server:v2",
    );
    h.cluster.apply(&registry_manifest(&edited));
    let after = deployment_changes(&h, "mcpserver-k8s", &template_hash(&before)).await;
    let image = after
        .spec
        .and_then(|s| s.template.spec)
        .and_then(|p| p.containers[0].image.clone());
    assert_eq!(
        image.as_deref(),
        Some("ghcr.io/containers/kubernetes-mcp-server:v2")
    );
}

#[tokio::test]
async fn an_unknown_runtime_fails_and_recovers_when_the_registry_gains_it() {
    let h = start().await;
    apply_server(&h, "gh", json!({"runtime": "github"}));
    let failed = until_phase(&h, "gh", Phase::Failed).await;
    let status = failed.status.expect("status");
    assert!(
        status
            .message
            .unwrap_or_default()
            .contains("runtime \"github\" is not in the MCP runtime registry")
    );
    assert_eq!(
        status
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .map(|c| c.reason.as_str()),
        Some("UnknownRuntime")
    );
    let with_github = format!(
        "{DEFAULT_RUNTIMES_YAML}  github:\n    image: ghcr.io/github/github-mcp-server:1\n    args: [\"http\"]\n"
    );
    h.cluster.apply(&registry_manifest(&with_github));
    until_phase(&h, "gh", Phase::Ready).await;
}

#[tokio::test]
async fn deleting_a_server_removes_its_children_and_idle_makes_no_writes() {
    let h = start().await;
    apply_server(&h, "keep", json!({"runtime": "kubernetes"}));
    apply_server(
        &h,
        "gone",
        json!({"runtime": "python-string", "params": "x = 1"}),
    );
    until_phase(&h, "keep", Phase::Ready).await;
    until_phase(&h, "gone", Phase::Ready).await;
    h.servers
        .delete("gone", &DeleteParams::default())
        .await
        .expect("delete");
    let services: Api<Service> = Api::default_namespaced(h.cluster.client.clone());
    eventually("the server and its children are gone", || async {
        let gone = h.servers.get("gone").await.is_err()
            && h.deployments.get("mcpserver-gone").await.is_err()
            && services.get("mcpserver-gone").await.is_err();
        gone.then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let writes = h.cluster.writes_during(Duration::from_secs(10)).await;
    assert!(writes.is_empty(), "writes while idle: {writes:?}");
}

#[tokio::test]
async fn a_claimed_security_id_fails_the_newer_server_until_the_holder_goes() {
    let h = start().await;
    let spec = json!({"runtime": "python-string", "params": "def a(): return 1", "security": {"id": "tools"}});
    apply_server(&h, "a-old", spec.clone());
    until_phase(&h, "a-old", Phase::Ready).await;
    apply_server(&h, "b-new", spec);
    let failed = until_phase(&h, "b-new", Phase::Failed).await;
    let status = failed.status.expect("status");
    assert_eq!(
        status.message.as_deref(),
        Some("security.id \"tools\" already in use by default/a-old")
    );
    assert_eq!(
        status
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .map(|c| c.reason.as_str()),
        Some("SecurityIdConflict")
    );
    assert!(
        h.deployments
            .get_opt("mcpserver-b-new")
            .await
            .expect("get")
            .is_none(),
        "the loser creates nothing"
    );
    assert_eq!(
        until_phase(&h, "a-old", Phase::Ready)
            .await
            .metadata
            .name
            .as_deref(),
        Some("a-old"),
        "the holder is untouched"
    );

    h.servers
        .delete("a-old", &DeleteParams::default())
        .await
        .expect("delete");
    until_phase(&h, "b-new", Phase::Ready).await;
}
