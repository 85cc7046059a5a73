//! The MCP check of a server's rollout, on kaos-testkit with the controller reaching local
//! servers through `--mcp-address-overrides`: the real FastMCP server (KAOS's MCP runtime, from
//! the agent-runtime venv: `scripts/python-tool agent-runtime python`, installed if missing, the
//! test failing if it cannot be) and a small server here that can break `initialize`.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use clap::Parser;
use kaos_api::common::Phase;
use kaos_api::conditions::{DEPLOYMENT_READY, INITIALIZE_FAILED, PROTOCOL_VERIFIED, TOOLS_LISTED};
use kaos_api::mcpserver::MCPServer;
use kaos_harness::cluster::TestCluster;
use kaos_harness::controller::ControllerTest;
use kaos_harness::fixtures::*;
use kaos_harness::local_process::{LocalProcess, free_port, python_tool};
use kaos_harness::status::Conditioned;
use mcpserver_controller::registry::DEFAULT_RUNTIMES_YAML;
use mcpserver_controller::settings::Args;
use serde_json::{Value, json};

/// The controller, reaching server `name`'s Service at `address`.
fn start(name: &str, address: &str) -> ControllerTest {
    let cluster = TestCluster::start();
    cluster.install_runtime_registry(DEFAULT_RUNTIMES_YAML);
    let args = Args::try_parse_from([
        "mcpserver-controller".to_string(),
        "--system-namespace=kaos-system".to_string(),
        format!(
            "--mcp-address-overrides=mcpserver-{name}.default.svc.cluster.local:8000={address}"
        ),
    ])
    .expect("flags");
    ControllerTest::start(cluster, mcpserver_controller::ID, args.runtime, |runtime| {
        mcpserver_controller::controller::run(runtime, args.settings)
    })
}

async fn until_verified(
    h: &ControllerTest,
    name: &str,
    status: &str,
    limit: Duration,
) -> MCPServer {
    h.until_within(
        limit,
        name,
        &format!("{PROTOCOL_VERIFIED}={status}"),
        |s: &MCPServer| s.condition(PROTOCOL_VERIFIED).map(|c| c.status.as_str()) == Some(status),
    )
    .await
}

fn tools_of(s: &MCPServer) -> Vec<String> {
    s.status
        .as_ref()
        .map(|s| s.available_tools.clone())
        .unwrap_or_default()
}

/// A FastMCP server with two tools, as the KAOS `python-string` runtime serves one.
const FASTMCP: &str = r#"
import sys
from fastmcp import FastMCP

mcp = FastMCP("tools")

@mcp.tool
def echo(text: str) -> str:
    """Echoes the text back."""
    return text

@mcp.tool
def add(a: int, b: int) -> int:
    """Adds two numbers."""
    return a + b

mcp.run(transport="http", host="127.0.0.1", port=int(sys.argv[1]))
"#;

/// A server process and the directory of its script, both gone when dropped.
fn runtime_python() -> String {
    python_tool("agent-runtime", &["python"])
}

async fn start_fastmcp() -> (LocalProcess, u16) {
    let port = free_port();
    let dir = std::env::temp_dir().join(format!("kaos-fastmcp-{port}"));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let script = dir.join("server.py");
    std::fs::write(&script, FASTMCP).expect("the script");
    let child = Command::new(runtime_python())
        .arg(&script)
        .arg(port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("FastMCP starts");
    let process = LocalProcess(child, dir);
    for _ in 0..300 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return (process, port);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("FastMCP did not listen on {port} within 30s");
}

#[tokio::test]
async fn the_real_fastmcp_server_is_verified_and_its_tools_listed() {
    let (_server, port) = start_fastmcp().await;
    let h = start("tools", &format!("127.0.0.1:{port}"));
    h.apply(&MCPServer::test("tools").params("def echo(text): return text"));
    let verified = until_verified(&h, "tools", "True", Duration::from_secs(30)).await;
    assert_eq!(verified.reason(PROTOCOL_VERIFIED), TOOLS_LISTED);
    assert_eq!(tools_of(&verified), ["echo", "add"]);
    // Who answered, in the status: FastMCP's name for the server and the revision it chose.
    let info = verified.status.as_ref().and_then(|s| s.server_info.clone());
    let info = info.expect("status.serverInfo");
    assert_eq!(info.name, "tools");
    assert!(!info.version.is_empty(), "{info:?}");
    assert_eq!(info.protocol_version, "2025-06-18");
    let ready = h.until_phase::<MCPServer>("tools", Phase::Ready).await;
    assert_eq!(ready.reason("Ready"), DEPLOYMENT_READY);
}

/// A server that lists one tool per page, or answers 500 while `broken`; it counts requests.
#[derive(Clone, Default)]
struct Fake {
    broken: Arc<AtomicBool>,
    requests: Arc<AtomicUsize>,
}

async fn fake_mcp(State(fake): State<Fake>, Json(message): Json<Value>) -> Response {
    fake.requests.fetch_add(1, Ordering::SeqCst);
    if fake.broken.load(Ordering::SeqCst) {
        return (StatusCode::INTERNAL_SERVER_ERROR, "boom").into_response();
    }
    let id = message["id"].clone();
    let result = match message["method"].as_str() {
        Some("initialize") => {
            json!({"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
            "serverInfo": {"name": "fake", "version": "1"}})
        }
        Some("tools/list") => match message["params"]["cursor"].as_str() {
            None => json!({"tools": [{"name": "first", "inputSchema": {}}], "nextCursor": "2"}),
            Some(_) => json!({"tools": [{"name": "second", "inputSchema": {}}]}),
        },
        _ => return StatusCode::ACCEPTED.into_response(),
    };
    Json(json!({"jsonrpc": "2.0", "id": id, "result": result})).into_response()
}

async fn start_fake(fake: Fake) -> u16 {
    let app = axum::Router::new()
        .route(
            "/mcp",
            axum::routing::post(fake_mcp).delete(|| async { StatusCode::OK }),
        )
        .with_state(fake);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("address").port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    port
}

#[tokio::test]
async fn a_failing_initialize_is_reported_then_recovers_and_idle_sends_nothing() {
    let fake = Fake::default();
    fake.broken.store(true, Ordering::SeqCst);
    let port = start_fake(fake.clone()).await;
    let h = start("fake", &format!("127.0.0.1:{port}"));
    h.apply(&MCPServer::test("fake").params("x = 1"));

    let failed = until_verified(&h, "fake", "False", Duration::from_secs(30)).await;
    let (_, reason, message) = failed
        .condition_state(PROTOCOL_VERIFIED)
        .expect("condition");
    assert_eq!(reason, INITIALIZE_FAILED);
    assert!(
        message.starts_with(&format!(
            "MCP initialize at http://127.0.0.1:{port}/mcp failed: HTTP 500"
        )),
        "{message}"
    );
    assert!(message.contains("check the server's logs"), "{message}");
    assert!(tools_of(&failed).is_empty());
    assert_eq!(
        failed.status.as_ref().and_then(|s| s.server_info.clone()),
        None
    );
    assert_eq!(
        failed.reason("Ready"),
        DEPLOYMENT_READY,
        "Report: Ready does not wait"
    );

    // Fixed: the retry (after its backoff) lists the tools across both pages.
    fake.broken.store(false, Ordering::SeqCst);
    let verified = until_verified(&h, "fake", "True", Duration::from_secs(40)).await;
    assert_eq!(tools_of(&verified), ["first", "second"]);
    let info = verified.status.as_ref().and_then(|s| s.server_info.clone());
    assert_eq!(
        info.map(|i| (i.name, i.version)),
        Some(("fake".into(), "1".into()))
    );

    // Verified: a steady server gets no request and the controller writes nothing.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = fake.requests.load(Ordering::SeqCst);
    let (_, writes) = h.idle(Duration::from_secs(10)).await;
    assert_eq!(writes, Vec::<String>::new(), "writes while idle");
    assert_eq!(
        fake.requests.load(Ordering::SeqCst),
        before,
        "no MCP request while idle"
    );
}

#[tokio::test]
async fn a_new_rollout_is_checked_again() {
    let fake = Fake::default();
    let port = start_fake(fake.clone()).await;
    let h = start("fake", &format!("127.0.0.1:{port}"));
    h.apply(&MCPServer::test("fake").params("x = 1"));
    until_verified(&h, "fake", "True", Duration::from_secs(30)).await;
    let after_first = fake.requests.load(Ordering::SeqCst);
    // initialize, initialized, two pages of tools/list.
    assert_eq!(after_first, 4);

    h.merge_patch::<MCPServer>("fake", json!({"spec": {"params": "x = 2"}}))
        .await;
    kaos_harness::cluster::eventually("the new rollout is checked", || async {
        (fake.requests.load(Ordering::SeqCst) == after_first + 4).then_some(())
    })
    .await;
}
