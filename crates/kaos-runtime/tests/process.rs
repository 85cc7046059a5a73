//! The runtime against a served kaos-testkit: two electors never lead at once and hand over fast
//! on release; a whole controller process serves every metric family and its probes from startup.

use std::time::{Duration, Instant};

use kaos_runtime::leader::{ElectionConfig, KubeLeaseStore, LeaderElector};
use kaos_runtime::{ControllerId, RuntimeArgs};
use kaos_testkit::{ApiServer, Cluster, ServeOptions, TestServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

async fn served() -> TestServer {
    TestServer::start(ApiServer::new(Cluster::default()), &ServeOptions::default())
        .await
        .expect("serve")
}

async fn config(server: &TestServer) -> kube::Config {
    let kubeconfig: kube::config::Kubeconfig =
        serde_saphyr::from_str(&server.kubeconfig(None)).expect("kubeconfig");
    kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("config")
}

fn fast(identity: &str) -> ElectionConfig {
    let mut config = ElectionConfig::new("kaos-test-controller", "default", identity);
    config.lease_duration = Duration::from_millis(1500);
    config.renew_deadline = Duration::from_millis(1000);
    config.retry_period = Duration::from_millis(200);
    config.call_timeout = Duration::from_millis(500);
    config
}

struct Candidate {
    leading: watch::Receiver<bool>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<Result<(), kaos_runtime::leader::ElectionError>>,
}

fn candidate(client: &kube::Client, identity: &str) -> Candidate {
    let (leading_tx, leading) = watch::channel(false);
    let (stop, stop_rx) = watch::channel(false);
    let store = KubeLeaseStore::new(client.clone(), "default", "kaos-test-controller");
    let task = tokio::spawn(LeaderElector::new(store, fast(identity)).run(leading_tx, stop_rx));
    Candidate {
        leading,
        stop,
        task,
    }
}

#[tokio::test]
async fn two_electors_never_lead_together_and_hand_over_within_two_seconds_of_a_release() {
    let server = served().await;
    let client = kube::Client::try_from(config(&server).await).expect("client");
    let a = candidate(&client, "a");
    let b = candidate(&client, "b");

    // Watch both for four seconds (more than two lease durations): never two leaders.
    let started = Instant::now();
    let mut someone_led = false;
    while started.elapsed() < Duration::from_secs(4) {
        let (la, lb) = (*a.leading.borrow(), *b.leading.borrow());
        assert!(!(la && lb), "two leaders at once");
        someone_led |= la || lb;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(someone_led, "one of them leads");

    let (leader, mut standby) = if *a.leading.borrow() { (a, b) } else { (b, a) };
    let released = Instant::now();
    leader.stop.send(true).expect("stop");
    leader.task.await.expect("task").expect("clean release");
    tokio::time::timeout(Duration::from_secs(2), standby.leading.wait_for(|l| *l))
        .await
        .expect("the standby leads within 2 s of the release")
        .expect("channel open");
    assert!(released.elapsed() < Duration::from_secs(2));
    standby.stop.send(true).expect("stop");
}

async fn http_get(port: u16, path: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut response = String::new();
    stream.read_to_string(&mut response).await.expect("read");
    let code = response
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (code, body)
}

async fn wait_for_port(port: u16) {
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("port {port} never opened");
}

const ID: ControllerId = ControllerId {
    name: "test",
    lease: "kaos-test-controller",
    kinds: &[("Agent", &["Pending", "Ready", "Failed", "Waiting"])],
};

#[tokio::test]
async fn a_process_serves_every_metric_family_and_its_probes_from_startup() {
    let server = served().await;
    let (metrics_port, probe_port) = (kaos_testkit::free_port(), kaos_testkit::free_port());
    let args: RuntimeArgs = {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            runtime: RuntimeArgs,
        }
        <Cli as clap::Parser>::try_parse_from([
            "test",
            &format!("--metrics-bind-address=127.0.0.1:{metrics_port}"),
            &format!("--health-probe-bind-address=127.0.0.1:{probe_port}"),
            "--leader-election-namespace=default",
            "--lease-duration=2s",
            "--renew-deadline=1s",
            "--retry-period=200ms",
        ])
        .expect("flags")
        .runtime
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<()>();
    let process = tokio::spawn(kaos_runtime::runner::run_with(
        config(&server).await,
        args,
        ID,
        async move {
            let _ = stop_rx.await;
        },
        |runtime| async move {
            runtime.mark_ready_when(vec![Box::pin(async move {
                let _ = ready_rx.await;
            })]);
            runtime.shutdown_signal().await;
            Ok(())
        },
    ));
    wait_for_port(metrics_port).await;
    wait_for_port(probe_port).await;

    let (code, text) = http_get(metrics_port, "/metrics").await;
    assert_eq!(code, 200);
    for family in [
        "controller_runtime_reconcile_total{",
        "controller_runtime_reconcile_errors_total{",
        "kaos_reconcile_errors_total{controller=\"test\",step=\"apply_child\"} 0",
        "controller_runtime_reconcile_time_seconds_bucket{",
        "controller_runtime_max_concurrent_reconciles{controller=\"test\"} 4",
        "controller_runtime_active_workers{",
        "leader_election_master_status{name=\"kaos-test-controller\"}",
        "rest_client_requests_total{",
        "kaos_resources{kind=\"Agent\",phase=\"Waiting\"} 0",
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_start_time_seconds",
    ] {
        assert!(text.contains(family), "missing {family} in:\n{text}");
    }
    assert_eq!(http_get(probe_port, "/healthz").await.0, 200);
    assert_eq!(
        http_get(probe_port, "/readyz").await.0,
        503,
        "not ready before the caches sync"
    );
    ready_tx.send(()).expect("ready");
    for _ in 0..50 {
        if http_get(probe_port, "/readyz").await.0 == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(http_get(probe_port, "/readyz").await.0, 200);

    // It becomes the leader and says so.
    let mut leading = false;
    for _ in 0..100 {
        let (_, text) = http_get(metrics_port, "/metrics").await;
        if text.contains("leader_election_master_status{name=\"kaos-test-controller\"} 1") {
            leading = true;
            assert!(
                text.contains("rest_client_requests_total{code=\"201\",method=\"POST\""),
                "{text}"
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(leading, "the process took the lease");

    stop_tx.send(()).expect("stop");
    tokio::time::timeout(Duration::from_secs(5), process)
        .await
        .expect("stops promptly")
        .expect("task")
        .expect("clean exit");
    let lease: k8s_openapi::api::coordination::v1::Lease = kube::Api::namespaced(
        kube::Client::try_from(config(&server).await).expect("client"),
        "default",
    )
    .get("kaos-test-controller")
    .await
    .expect("lease");
    assert_eq!(
        lease.spec.and_then(|s| s.holder_identity),
        None,
        "released on shutdown"
    );
}
