//! The MCPServer controller against kaos-testkit with the deployment simulator.

use std::time::Duration;

use clap::Parser;
use k8s_openapi::api::apps::v1::Deployment;
use kaos_api::common::Phase;
use kaos_api::mcpserver::MCPServer;
use kaos_harness::cluster::{TestCluster, eventually};
use kaos_harness::controller::ControllerTest;
use kaos_harness::deployments::{env_of, image_of, template_annotation};
use kaos_harness::fixtures::*;
use kaos_harness::status::{Conditioned, Phased};
use kube::Api;
use mcpserver_controller::registry::DEFAULT_RUNTIMES_YAML;
use mcpserver_controller::settings::Args;
use serde_json::json;

fn start() -> ControllerTest {
    start_on(cluster_with_registry(), &[])
}

/// A cluster with the default runtime registry installed.
fn cluster_with_registry() -> TestCluster {
    let cluster = TestCluster::start();
    cluster.install_runtime_registry(DEFAULT_RUNTIMES_YAML);
    cluster
}

/// The controller on `cluster` with `flags` besides the system namespace.
fn start_on(cluster: TestCluster, flags: &[&str]) -> ControllerTest {
    let base = ["mcpserver-controller", "--system-namespace=kaos-system"];
    let args = Args::try_parse_from(base.iter().chain(flags)).expect("flags");
    ControllerTest::start(cluster, mcpserver_controller::ID, args.runtime, |runtime| {
        mcpserver_controller::controller::run(runtime, args.settings)
    })
}

fn template_hash(d: &Deployment) -> String {
    template_annotation(d, "kaos.tools/pod-spec-hash")
}

/// Waits until the Deployment's pod template changes from the one hashed `from_hash`.
async fn deployment_changes(cluster: &TestCluster, name: &str, from_hash: &str) -> Deployment {
    cluster
        .until(name, "rolled", |d: &Deployment| {
            template_hash(d) != from_hash
        })
        .await
}

#[tokio::test]
async fn python_string_becomes_ready_and_params_roll_it() {
    let h = start();
    h.apply(&MCPServer::test("tools").params("def a(): return 1"));
    let ready = h.until_phase::<MCPServer>("tools", Phase::Ready).await;
    let status = ready.status.expect("status");
    assert_eq!(
        status.endpoint.as_deref(),
        Some("http://mcpserver-tools.default.svc.cluster.local:8000")
    );
    assert!(status.available_tools.is_empty());
    let before = h.get::<Deployment>("mcpserver-tools").await;

    let patch = json!({"spec": {"params": "def b(): return 2"}});
    h.merge_patch::<MCPServer>("tools", patch).await;
    let after = deployment_changes(&h, "mcpserver-tools", &template_hash(&before)).await;
    let env = env_of(&after);
    assert_eq!(env[0].1, "def b(): return 2");
}

#[tokio::test]
async fn editing_the_registry_rolls_the_servers_that_use_it() {
    let h = start();
    h.apply(&MCPServer::test("k8s").runtime("kubernetes"));
    h.until_phase::<MCPServer>("k8s", Phase::Ready).await;
    let before = h.get::<Deployment>("mcpserver-k8s").await;
    let edited = DEFAULT_RUNTIMES_YAML.replace(
        "ghcr.io/containers/kubernetes-mcp-server:latest",
        "ghcr.io/containers/kubernetes-mcp-server:v2",
    );
    h.install_runtime_registry(&edited);
    let after = deployment_changes(&h, "mcpserver-k8s", &template_hash(&before)).await;
    assert_eq!(
        image_of(&after).as_deref(),
        Some("ghcr.io/containers/kubernetes-mcp-server:v2")
    );
}

#[tokio::test]
async fn an_unknown_runtime_fails_and_recovers_when_the_registry_gains_it() {
    let h = start();
    h.apply(&MCPServer::test("gh").runtime("github"));
    let failed = h.until_phase::<MCPServer>("gh", Phase::Failed).await;
    assert!(
        failed
            .message()
            .contains("runtime \"github\" is not in the MCP runtime registry")
    );
    assert_eq!(failed.reason("Ready"), "UnknownRuntime");
    let with_github = format!(
        "{DEFAULT_RUNTIMES_YAML}  github:\n    image: ghcr.io/github/github-mcp-server:1\n    args: [\"http\"]\n"
    );
    h.install_runtime_registry(&with_github);
    h.until_phase::<MCPServer>("gh", Phase::Ready).await;
}

#[tokio::test]
async fn deleting_a_server_removes_its_children_and_idle_makes_no_writes() {
    let h = start();
    h.apply(&MCPServer::test("keep").runtime("kubernetes"));
    h.apply(&MCPServer::test("gone").params("x = 1"));
    h.until_phase::<MCPServer>("keep", Phase::Ready).await;
    h.until_phase::<MCPServer>("gone", Phase::Ready).await;
    h.delete::<MCPServer>("gone").await;
    h.until_gone_with_workload::<MCPServer>("gone").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    h.assert_no_writes_during(Duration::from_secs(10)).await;
}

#[tokio::test]
async fn a_claimed_security_id_fails_the_newer_server_until_the_holder_goes() {
    let h = start();
    let server = |name| {
        MCPServer::test(name)
            .params("def a(): return 1")
            .security_id("tools")
    };
    h.apply(&server("a-old"));
    h.until_phase::<MCPServer>("a-old", Phase::Ready).await;
    h.apply(&server("b-new"));
    let failed = h.until_phase::<MCPServer>("b-new", Phase::Failed).await;
    assert_eq!(
        failed.message(),
        "security.id \"tools\" already in use by default/a-old"
    );
    assert_eq!(failed.reason("Ready"), "SecurityIdConflict");
    assert!(
        h.get_opt::<Deployment>("mcpserver-b-new").await.is_none(),
        "the loser creates nothing"
    );
    assert_eq!(
        h.until_phase::<MCPServer>("a-old", Phase::Ready)
            .await
            .metadata
            .name
            .as_deref(),
        Some("a-old"),
        "the holder is untouched"
    );

    h.delete::<MCPServer>("a-old").await;
    h.until_phase::<MCPServer>("b-new", Phase::Ready).await;
}

/// The registry lives in the operator's namespace, whatever namespaces the servers are in: a
/// controller that watches several namespaces lists and watches it once, and a change of it
/// reaches the servers of every namespace through the work queue (counted in its metrics).
#[tokio::test]
async fn the_registry_is_watched_once_for_every_watched_namespace() {
    let cluster = cluster_with_registry();
    cluster.apply(&namespace("team-b"));
    // No protocol check: its wake of a server could merge with the registry's in the work
    // queue, and this counts the registry's adds.
    let h = start_on(
        cluster,
        &[
            "--watch-namespace=default,team-b",
            "--protocol-checks=false",
        ],
    );
    h.apply(&MCPServer::test("k8s").runtime("kubernetes"));
    let mut other = MCPServer::test("k8s").runtime("kubernetes");
    other.metadata.namespace = Some("team-b".into());
    h.apply(&other);
    h.until_phase::<MCPServer>("k8s", Phase::Ready).await;
    let team_b: Api<Deployment> = Api::namespaced(h.client.clone(), "team-b");
    let image_in_team_b = || async {
        let deployment = team_b.get_opt("mcpserver-k8s").await.ok().flatten()?;
        image_of(&deployment)
    };
    eventually("team-b's server is deployed", || async {
        image_in_team_b().await.map(|_| ())
    })
    .await;
    let registry_reads = h
        .api
        .audit
        .records()
        .into_iter()
        .filter(|r| r.resource == "configmaps" && r.namespace == "kaos-system")
        .map(|r| r.verb)
        .collect::<Vec<_>>();
    assert_eq!(
        registry_reads,
        ["list", "watch"],
        "one list and one watch of the registry for both namespaces"
    );

    let adds_before = metric(&h, "workqueue_adds_total");
    let edited = DEFAULT_RUNTIMES_YAML.replace(
        "ghcr.io/containers/kubernetes-mcp-server:latest",
        "ghcr.io/containers/kubernetes-mcp-server:v2",
    );
    h.install_runtime_registry(&edited);
    let v2 = Some("ghcr.io/containers/kubernetes-mcp-server:v2".to_string());
    h.until("mcpserver-k8s", "rolled to v2", |d: &Deployment| {
        image_of(d) == v2
    })
    .await;
    eventually("team-b's server rolls to v2", || async {
        (image_in_team_b().await == v2).then_some(())
    })
    .await;
    assert!(
        metric(&h, "workqueue_adds_total") >= adds_before + 2.0,
        "the registry's change queued both servers"
    );
    eventually("the work queue drains", || async {
        (metric(&h, "workqueue_depth") == 0.0).then_some(())
    })
    .await;
}

/// The sum of a metric's series in the controller's metrics.
fn metric(h: &ControllerTest, name: &str) -> f64 {
    h.controller
        .runtime
        .metrics
        .encode()
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// With protocol checks off (kwok nodes, `kaosctl dev`: no pod could answer) a Ready server gets
/// no `ProtocolVerified` condition and the controller goes quiet: no retry wakes it.
#[tokio::test]
async fn protocol_checks_off_leave_a_ready_server_unchecked_and_quiet() {
    let h = start_on(cluster_with_registry(), &["--protocol-checks=false"]);
    h.apply(&MCPServer::test("tools").params("def a(): return 1"));
    let ready = h.until_phase::<MCPServer>("tools", Phase::Ready).await;
    assert!(ready.condition("ProtocolVerified").is_none());
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (reconciles, writes) = h.idle(Duration::from_secs(12)).await;
    assert_eq!((reconciles, writes), (0.0, Vec::<String>::new()));
}
