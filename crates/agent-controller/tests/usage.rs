//! The usage of budgeted agents in their status (docs/budgets.md, "Usage in the status"), on
//! kaos-testkit: read from the real LiteLLM proxy (`scripts/python-tool litellm`, installed if
//! missing, the test failing if it cannot be) in front of tests/runtime/fake_openai.py, reached
//! through `--usage-address-overrides`; and from a small `/metrics/` server here, reached through
//! an EndpointSlice as Kubernetes would list the ModelAPI's pods. The ModelAPI controller is not
//! running: the tests write the ModelAPI's status and the proxy's config themselves.

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kaos_api::agent::{Agent, AgentPhase};
use kaos_api::budget::{Budget, BudgetUsage};
use kaos_api::conditions::{
    BUDGET_EXCEEDED, REQUESTS_PER_DAY, SCRAPE_FAILED, SCRAPED, TOKENS_PER_DAY, USAGE_REPORTED,
};
use kaos_harness::controller::{ControllerTest, RunningController};
use kaos_harness::fixtures::*;
use kaos_harness::local_process::{LocalProcess, free_port, python_tool};
use kaos_harness::repo_root;
use kaos_harness::status::Conditioned;
use serde_json::json;
use support::{llm, start_with};

/// Reads every second, and writes new counts at once.
const QUICK: [&str; 2] = [
    "--usage-scrape-interval-seconds=1",
    "--usage-status-interval-seconds=0",
];

fn budgeted(name: &str, budget: Budget) -> Agent {
    let mut agent = Agent::test(name);
    agent.spec.budget = Some(budget);
    agent
}

fn usage(agent: &Agent) -> Option<&BudgetUsage> {
    agent.status.as_ref()?.usage.as_ref()
}

/// `kaos_usage_scrapes_total`, both results.
fn scrapes(h: &ControllerTest) -> f64 {
    h.controller
        .runtime
        .metrics
        .encode()
        .lines()
        .filter(|l| l.starts_with("kaos_usage_scrapes_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The agent has neither a usage nor a usage condition.
fn assert_unbudgeted(agent: &Agent) {
    assert_eq!(usage(agent), None, "{:?}", agent.status);
    assert!(agent.condition(BUDGET_EXCEEDED).is_none());
    assert!(agent.condition(USAGE_REPORTED).is_none());
}

/// A process and its scratch directory, both gone when dropped.
/// `scripts/python-tool litellm ARGS...`: the LiteLLM venv's python or a script of it.
fn litellm_tool(args: &[&str]) -> String {
    python_tool("litellm", args)
}

/// tests/runtime/fake_openai.py on its own: 100 prompt and 50 completion tokens a call.
fn start_upstream(python: &str, dir: &std::path::Path) -> (LocalProcess, String) {
    let mut child = Command::new(python)
        .arg(repo_root().join("tests/runtime/fake_openai.py"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the fake upstream starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("its stdout"))
        .read_line(&mut line)
        .expect("its address");
    (
        LocalProcess(child, dir.join("upstream")),
        line.trim().to_string(),
    )
}

/// The real LiteLLM proxy on `config` (JSON, which is YAML) and `port`, as a Proxy ModelAPI's
/// pod runs it, once it answers `/health/readiness`.
async fn start_litellm(config: &serde_json::Value, upstream: &str, port: u16) -> LocalProcess {
    let litellm = litellm_tool(&["bin", "litellm"]);
    let dir = std::env::temp_dir().join(format!("kaos-usage-litellm-{port}"));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let config_path = dir.join("config.yaml");
    std::fs::write(&config_path, config.to_string()).expect("the config");
    let log = std::fs::File::create(dir.join("litellm.log")).expect("a log");
    let child = Command::new(litellm)
        .args(["--config", &config_path.to_string_lossy(), "--port"])
        .arg(port.to_string())
        .current_dir(&dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", &dir)
        // Hermetic: the cost map bundled in the package.
        .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        .env(
            "LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY",
            "true",
        )
        .env("PROXY_API_BASE", upstream)
        .env("PROXY_API_KEY", "sk-upstream-test-key")
        .stdout(log.try_clone().expect("the log"))
        .stderr(log)
        .spawn()
        .expect("LiteLLM starts");
    let mut process = LocalProcess(child, dir.clone());
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(180) {
        if let Ok(Some(status)) = process.0.try_wait() {
            let log = std::fs::read_to_string(dir.join("litellm.log")).unwrap_or_default();
            panic!("LiteLLM exited ({status}):\n{log}");
        }
        if get(&format!("http://127.0.0.1:{port}/health/readiness"))
            .await
            .is_some_and(|(status, _)| status == 200)
        {
            return process;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    panic!("LiteLLM did not answer within 180 s");
}

fn client() -> Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).build_http()
}

async fn get(url: &str) -> Option<(u16, String)> {
    let request = http::Request::get(url).body(Full::new(Bytes::new())).ok()?;
    let response = client().request(request).await.ok()?;
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.ok()?.to_bytes();
    Some((status, String::from_utf8_lossy(&body).into_owned()))
}

/// One chat completion as the agent runtime sends it; the HTTP status.
async fn chat(port: u16, model: &str) -> u16 {
    let body = json!({"model": model, "messages": [{"role": "user", "content": "hi"}]});
    let request = http::Request::post(format!("http://127.0.0.1:{port}/v1/chat/completions"))
        .header("content-type", "application/json")
        .header("authorization", "Bearer not-needed")
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("a request");
    let response = client().request(request).await.expect("LiteLLM answers");
    let status = response.status().as_u16();
    let _ = response.into_body().collect().await;
    status
}

#[tokio::test]
async fn the_real_litellm_proxy_counts_a_budgeted_agent_until_it_refuses() {
    let port = free_port();
    let mut flags = QUICK.to_vec();
    let overrides = format!("--usage-address-overrides=default/llm=127.0.0.1:{port}");
    flags.push(&overrides);
    let h = start_with(&flags);
    h.apply_with_status(&llm().ready()).await;

    // No agent has a budget: nothing is read, nothing is reported.
    h.apply(&Agent::test("plain"));
    h.until_phase::<Agent>("plain", AgentPhase::Ready).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(scrapes(&h), 0.0, "a read without a budgeted agent");
    assert_unbudgeted(&h.get::<Agent>("plain").await);

    // A budget of 400 tokens a day; its proxy is not up yet: the failure is reported.
    let budget = Budget {
        tokens_per_day: Some(400),
        ..Budget::default()
    };
    h.apply(&budgeted("worker", budget));
    let failing = h
        .until::<Agent>("worker", "UsageReported=False", |a| {
            a.condition(USAGE_REPORTED).map(|c| c.status.as_str()) == Some("False")
        })
        .await;
    let (_, reason, message) = failing.condition_state(USAGE_REPORTED).expect("condition");
    assert_eq!(reason, SCRAPE_FAILED);
    assert!(
        message.starts_with(&format!(
            "could not read the usage of ModelAPI llm from 127.0.0.1:{port}/metrics/: "
        )),
        "{message}"
    );
    let uid = failing.metadata.uid.clone().expect("a uid");

    // The proxy as the ModelAPI controller configures it for the agent: its own entry, under
    // its alias, keyed on its UID, with its limit.
    let python = litellm_tool(&["python"]);
    let scratch = std::env::temp_dir().join(format!("kaos-usage-upstream-{port}"));
    let (_upstream, upstream_url) = start_upstream(&python, &scratch);
    let shared = json!({"model": "openai/gpt-4o", "api_base": "os.environ/PROXY_API_BASE",
        "api_key": "os.environ/PROXY_API_KEY"});
    let mut limited = shared.clone();
    limited["tpd"] = json!(400);
    let alias = kaos_api::budget::alias("default", "worker");
    let config = json!({
        "model_list": [
            {"model_name": "gpt-4o", "litellm_params": shared},
            {"model_name": alias, "litellm_params": limited, "model_info": {"id": uid}},
        ],
        "router_settings": {"optional_pre_call_checks": ["enforce_model_rate_limits"]},
        "litellm_settings": {"drop_params": true, "callbacks": ["prometheus"]},
    });
    // On the port the override names.
    let litellm = start_litellm(&config, &upstream_url, port).await;

    // The agent's calls until the proxy refuses: 150 tokens each, the third finds 300 < 400.
    let mut statuses = Vec::new();
    for _ in 0..4 {
        statuses.push(chat(port, &alias).await);
        // LiteLLM counts a call after answering it.
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(statuses, [200, 200, 200, 429]);

    let exceeded = h
        .until_within(
            Duration::from_secs(30),
            "worker",
            "450 tokens and BudgetExceeded=True",
            |a: &Agent| {
                usage(a).is_some_and(|u| u.total_tokens == 450)
                    && a.reason(BUDGET_EXCEEDED) == TOKENS_PER_DAY
                    && a.reason(USAGE_REPORTED) == SCRAPED
            },
        )
        .await;
    let used = usage(&exceeded).expect("usage");
    assert_eq!(
        (
            used.prompt_tokens,
            used.completion_tokens,
            used.requests,
            used.cost.as_deref()
        ),
        (300, 150, 3, Some("0.00225"))
    );
    let lifetime = used.lifetime.as_ref().expect("lifetime");
    assert_eq!((lifetime.total_tokens, lifetime.requests), (450, 3));
    assert!(
        used.window_start.is_some() && used.window_reset.is_some() && used.observed_time.is_some()
    );
    let (status, _, message) = exceeded
        .condition_state(BUDGET_EXCEEDED)
        .expect("condition");
    assert_eq!(status, "True");
    assert!(
        message.starts_with("the tokensPerDay limit (400) is reached"),
        "{message}"
    );
    assert_unbudgeted(&h.get::<Agent>("plain").await);
    let metrics = h.controller.runtime.metrics.encode();
    for line in [
        "kaos_agent_usage_tokens{namespace=\"default\",agent=\"worker\"} 450",
        "kaos_agent_usage_requests{namespace=\"default\",agent=\"worker\"} 3",
        "kaos_agent_budget_used_ratio{namespace=\"default\",agent=\"worker\",limit=\"tokensPerDay\"} 1.125",
    ] {
        assert!(metrics.contains(line), "missing {line}:\n{metrics}");
    }
    assert!(!metrics.contains("agent=\"plain\""), "{metrics}");

    // Nothing new: no status write while the same counts are read again and again.
    let (_, writes) = h.idle(Duration::from_secs(3)).await;
    assert_eq!(writes, Vec::<String>::new(), "writes while the usage stays");

    // The budget removed: the usage and its conditions go, and nothing is read any more.
    h.merge_patch::<Agent>("worker", json!({"spec": {"budget": null}}))
        .await;
    h.until::<Agent>("worker", "no usage", |a| {
        usage(a).is_none() && a.condition(BUDGET_EXCEEDED).is_none()
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = scrapes(&h);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(scrapes(&h), before, "reads without a budgeted agent");
    assert!(
        !h.controller
            .runtime
            .metrics
            .encode()
            .contains("agent=\"worker\""),
        "the series go with the budget"
    );
    drop(litellm);
}

/// Stops the controller and starts another on the same cluster, as a new leader would.
async fn restart(h: ControllerTest) -> ControllerTest {
    let ControllerTest {
        cluster,
        controller,
    } = h;
    controller.stop().await;
    let mut argv = vec!["agent-controller", "--default-agent-image=kaos-agent:test"];
    argv.extend(QUICK);
    let args = agent_controller::settings::Args::try_parse_from(argv).expect("flags");
    let controller = RunningController::start(&cluster, agent_controller::ID, args.runtime, |rt| {
        agent_controller::controller::run(rt, args.settings)
    });
    ControllerTest {
        cluster,
        controller,
    }
}

/// A `/metrics/` server with one agent's requests and tokens, counting its reads.
#[derive(Clone, Default)]
struct FakeProxy {
    uid: Arc<std::sync::Mutex<String>>,
    requests: Arc<AtomicU64>,
    reads: Arc<AtomicUsize>,
}

async fn fake_metrics(axum::extract::State(proxy): axum::extract::State<FakeProxy>) -> String {
    proxy.reads.fetch_add(1, Ordering::SeqCst);
    let uid = proxy.uid.lock().expect("uid").clone();
    let requests = proxy.requests.load(Ordering::SeqCst);
    format!(
        "# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds 1.7e+09\n\
         litellm_requests_metric_total{{model_id=\"{uid}\",requested_model=\"kaos.default.worker\"}} {requests}.0\n\
         litellm_total_tokens_metric_total{{model_id=\"{uid}\",requested_model=\"kaos.default.worker\"}} {}.0\n",
        requests * 150
    )
}

async fn start_fake(proxy: FakeProxy) -> u16 {
    let app = axum::Router::new()
        .route("/metrics/", axum::routing::get(fake_metrics))
        .with_state(proxy);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("address").port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    port
}

/// The EndpointSlice Kubernetes keeps for Service `modelapi-llm`, its one pod at 127.0.0.1.
fn slice(port: u16, ready: bool) -> EndpointSlice {
    serde_json::from_value(json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "modelapi-llm-x1", "namespace": "default",
            "labels": {"kubernetes.io/service-name": "modelapi-llm", "app": "modelapi",
                "modelapi": "llm"}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
        "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": ready},
            "targetRef": {"kind": "Pod", "name": "modelapi-llm-abc", "namespace": "default"}}]}))
    .expect("an EndpointSlice")
}

#[tokio::test]
async fn a_model_apis_default_budget_is_read_from_its_endpointslice_pods() {
    let proxy = FakeProxy::default();
    let port = start_fake(proxy.clone()).await;
    let h = start_with(&QUICK);
    h.apply(&slice(port, true));
    // Every agent of the ModelAPI without a budget of its own: 2 requests a day.
    let mut model_api = llm().ready();
    model_api
        .spec
        .proxy_config
        .as_mut()
        .expect("a Proxy")
        .default_agent_budget = Some(Budget {
        requests_per_day: Some(2),
        ..Budget::default()
    });
    h.apply_with_status(&model_api).await;
    h.apply(&Agent::test("worker"));
    let agent = h.until_phase::<Agent>("worker", AgentPhase::Ready).await;
    *proxy.uid.lock().expect("uid") = agent.metadata.uid.clone().expect("a uid");

    proxy.requests.store(1, Ordering::SeqCst);
    h.until::<Agent>("worker", "1 request, within budget", |a| {
        usage(a).is_some_and(|u| u.requests == 1 && u.total_tokens == 150)
            && a.reason(USAGE_REPORTED) == SCRAPED
    })
    .await;
    proxy.requests.store(2, Ordering::SeqCst);
    h.until::<Agent>("worker", "RequestsPerDay", |a| {
        a.reason(BUDGET_EXCEEDED) == REQUESTS_PER_DAY
    })
    .await;

    // A restarted controller resumes from the status: the proxy's counts, which the status
    // already holds, are not counted again, and nothing is written.
    let h = restart(h).await;
    let (_, writes) = h.idle(Duration::from_secs(3)).await;
    assert_eq!(writes, Vec::<String>::new(), "writes after a restart");
    assert!(scrapes(&h) > 0.0, "read since the restart");
    proxy.requests.store(3, Ordering::SeqCst);
    h.until::<Agent>("worker", "3 requests", |a| {
        usage(a).is_some_and(|u| u.requests == 3 && u.total_tokens == 450)
    })
    .await;

    // Its one pod no longer ready: nothing to read, and the status says why.
    h.apply(&slice(port, false));
    let unready = h
        .until::<Agent>("worker", "ScrapeFailed", |a| {
            a.reason(USAGE_REPORTED) == SCRAPE_FAILED
        })
        .await;
    let (_, _, message) = unready.condition_state(USAGE_REPORTED).expect("condition");
    assert_eq!(
        message,
        "ModelAPI llm has no ready pod to read the usage from (the EndpointSlices of Service modelapi-llm)"
    );
    assert_eq!(usage(&unready).map(|u| u.requests), Some(3), "kept");
    h.apply(&slice(port, true));
    h.until::<Agent>("worker", "Scraped", |a| a.reason(USAGE_REPORTED) == SCRAPED)
        .await;

    // The default budget removed: the agent has no budget, its status no usage, and the pod is
    // read no more.
    let mut model_api = llm().ready();
    model_api
        .spec
        .proxy_config
        .as_mut()
        .expect("a Proxy")
        .default_agent_budget = None;
    h.apply(&model_api);
    let plain = h
        .until::<Agent>("worker", "no usage", |a| usage(a).is_none())
        .await;
    assert_unbudgeted(&plain);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let reads = proxy.reads.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        proxy.reads.load(Ordering::SeqCst),
        reads,
        "reads without a budget"
    );
}

#[tokio::test]
async fn only_the_leader_reads_and_a_new_leader_reports() {
    let proxy = FakeProxy::default();
    let port = start_fake(proxy.clone()).await;
    let cluster = kaos_harness::cluster::TestCluster::start();
    cluster.apply(&slice(port, true));
    cluster.apply_with_status(&llm().ready()).await;
    cluster.apply(&budgeted(
        "worker",
        Budget {
            requests_per_day: Some(10),
            ..Budget::default()
        },
    ));
    let uid = cluster.get::<Agent>("worker").await.metadata.uid;
    *proxy.uid.lock().expect("uid") = uid.expect("a uid");
    proxy.requests.store(1, Ordering::SeqCst);

    // A standby: caches warm, nothing read, nothing exported.
    let mut argv = vec!["agent-controller", "--default-agent-image=kaos-agent:test"];
    argv.extend(QUICK);
    let args = agent_controller::settings::Args::try_parse_from(argv).expect("flags");
    let (leading_tx, leading) = tokio::sync::watch::channel(false);
    let (runtime, _stop) = kaos_runtime::Runtime::for_tests_with_leader(
        cluster.client.clone(),
        agent_controller::ID,
        args.runtime,
        leading,
    );
    tokio::spawn(agent_controller::controller::run(
        runtime.clone(),
        args.settings,
    ));
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(proxy.reads.load(Ordering::SeqCst), 0, "a standby read");
    assert!(
        !runtime
            .metrics
            .encode()
            .contains("kaos_agent_usage_tokens{")
    );
    assert_eq!(usage(&cluster.get::<Agent>("worker").await), None);

    // It leads: it reads, and the agent's status shows the usage.
    leading_tx.send_replace(true);
    cluster
        .until::<Agent>("worker", "1 request", |a| {
            usage(a).is_some_and(|u| u.requests == 1) && a.reason(USAGE_REPORTED) == SCRAPED
        })
        .await;
    assert!(proxy.reads.load(Ordering::SeqCst) > 0);
    assert!(
        runtime
            .metrics
            .encode()
            .contains("kaos_agent_usage_requests{namespace=\"default\",agent=\"worker\"} 1")
    );
}
