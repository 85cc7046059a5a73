//! The model check of a ModelAPI's rollout (`ModelsLoaded`), on kaos-testkit with the controller
//! reaching local servers through `--modelapi-address-overrides`: the real LiteLLM proxy
//! (`scripts/python-tool litellm bin litellm`, installed if missing, the test failing if it
//! cannot be) started on the config the controller wrote, and small fakes here of Ollama's
//! `/api/tags` and of a proxy that fails.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use clap::Parser;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kaos_api::agent::Agent;
use kaos_api::common::Phase;
use kaos_api::conditions::{
    DEPLOYMENT_READY, MODELS_LIST_FAILED, MODELS_LISTED, MODELS_LOADED, MODELS_MISSING,
    PROXY_UNREACHABLE,
};
use kaos_api::modelapi::ModelAPI;
use kaos_harness::cluster::TestCluster;
use kaos_harness::controller::ControllerTest;
use kaos_harness::fixtures::*;
use kaos_harness::local_process::{free_port, python_tool};
use kaos_harness::status::Conditioned;
use modelapi_controller::settings::Args;
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};

/// The controller, with `flags` besides the default images.
fn start(flags: &[String]) -> ControllerTest {
    let base = [
        "modelapi-controller".to_string(),
        "--default-litellm-image=litellm:test".to_string(),
        "--default-ollama-image=ollama:test".to_string(),
    ];
    let args = Args::try_parse_from(base.iter().chain(flags)).expect("flags");
    ControllerTest::start(
        TestCluster::start(),
        modelapi_controller::ID,
        args.runtime,
        |runtime| modelapi_controller::controller::run(runtime, args.settings),
    )
}

/// The flag that sends the controller's requests for ModelAPI `name` (at `port` of its
/// Service) to `127.0.0.1:to`.
fn reach(name: &str, port: u16, to: u16) -> String {
    format!(
        "--modelapi-address-overrides=modelapi-{name}.default.svc.cluster.local:{port}=127.0.0.1:{to}"
    )
}

/// Waits until `ModelsLoaded` has `status` and a message `message` accepts.
async fn until_models(
    h: &ControllerTest,
    name: &str,
    status: &str,
    message: impl Fn(&str) -> bool,
    limit: Duration,
) -> ModelAPI {
    h.until_within(
        limit,
        name,
        &format!("{MODELS_LOADED}={status}"),
        |m: &ModelAPI| {
            m.condition(MODELS_LOADED)
                .is_some_and(|c| c.status == status && message(&c.message))
        },
    )
    .await
}

// The real LiteLLM proxy.

/// LiteLLM imports a lot: ~10 s alone, a minute or more on two busy cores.
const LITELLM_PATIENCE: Duration = Duration::from_secs(300);

/// The proxy's `litellm` script, from its pinned venv (made if missing).
fn litellm_script() -> PathBuf {
    PathBuf::from(python_tool("litellm", &["bin", "litellm"]))
}

/// The port the controller reaches "the proxy" at: each connection is forwarded to the LiteLLM
/// of the moment, held until there is one and it listens (LiteLLM listens once its config is
/// loaded). Counts the connections (the controller opens one per request).
#[derive(Clone, Default)]
struct Relay {
    backend: Arc<Mutex<Option<u16>>>,
    connections: Arc<AtomicUsize>,
}

impl Relay {
    async fn start(&self) -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("address").port();
        let relay = self.clone();
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                relay.connections.fetch_add(1, Ordering::SeqCst);
                let backend = relay.backend.clone();
                tokio::spawn(async move {
                    let mut outbound = loop {
                        let port = *backend.lock().expect("the backend");
                        if let Some(port) = port
                            && let Ok(stream) = TcpStream::connect(("127.0.0.1", port)).await
                        {
                            break stream;
                        }
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                });
            }
        });
        port
    }

    fn to(&self, backend: Option<u16>) {
        *self.backend.lock().expect("the backend") = backend;
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

/// A LiteLLM process, stopped when dropped.
struct Proxy {
    child: Child,
    log: PathBuf,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proxy {
    /// LiteLLM as the ModelAPI `name`'s Deployment runs it (its args and literal env), on
    /// `config` written to `dir`, on a port of its own. The provider is nowhere
    /// (`127.0.0.1:9`): listing the models calls no upstream.
    async fn start(
        h: &ControllerTest,
        script: &Path,
        dir: &Path,
        step: &str,
        config: &str,
    ) -> (Self, u16) {
        let deployment = h.get::<Deployment>("modelapi-llm").await;
        let container = deployment
            .spec
            .and_then(|s| s.template.spec)
            .map(|s| s.containers[0].clone())
            .expect("the LiteLLM container");
        let path = dir.join(format!("{step}.yaml"));
        std::fs::write(&path, config).expect("the config");
        let port = free_port();
        let args: Vec<String> = container
            .args
            .unwrap_or_default()
            .into_iter()
            .map(|a| match a.as_str() {
                "/etc/litellm/config.yaml" => path.display().to_string(),
                "8000" => port.to_string(),
                _ => a,
            })
            .collect();
        let mut command = Command::new(script);
        command.args(&args).env_clear().current_dir(dir);
        for var in container.env.unwrap_or_default() {
            if let Some(value) = var.value {
                command.env(var.name, value);
            }
        }
        let log = dir.join(format!("{step}.log"));
        let child = command
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", dir)
            // Hermetic: the cost map bundled in the package, not a fetch from GitHub.
            .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            .env("PROXY_API_BASE", "http://127.0.0.1:9/v1")
            .env("PROXY_API_KEY", "sk-upstream-test-key")
            .stdout(std::fs::File::create(&log).expect("the log"))
            .stderr(Stdio::from(
                std::fs::File::create(dir.join(format!("{step}.err"))).expect("the log"),
            ))
            .spawn()
            .expect("LiteLLM starts");
        (Proxy { child, log }, port)
    }

    fn log(&self) -> String {
        let err = self.log.with_extension("err");
        format!(
            "{}{}",
            std::fs::read_to_string(&self.log).unwrap_or_default(),
            std::fs::read_to_string(err).unwrap_or_default()
        )
    }
}

/// The config the controller wrote for ModelAPI `llm`, once it holds `text`.
async fn config_with(h: &ControllerTest, text: &str) -> String {
    let map = h
        .until(
            "litellm-config-llm",
            &format!("holding {text}"),
            |c: &ConfigMap| config_of(c).contains(text),
        )
        .await;
    config_of(&map)
}

fn config_of(c: &ConfigMap) -> String {
    c.data
        .as_ref()
        .and_then(|d| d.get("config.yaml"))
        .cloned()
        .unwrap_or_default()
}

/// An inline config with one entry LiteLLM cannot load (a provider it does not know): it skips
/// that entry, logs why, and serves the others.
const ONE_BROKEN: &str = r#"model_list:
  - model_name: gpt-4o
    litellm_params: {model: openai/gpt-4o, api_base: os.environ/PROXY_API_BASE, api_key: os.environ/PROXY_API_KEY}
  - model_name: claude-x
    litellm_params: {model: nosuchprovider/claude-x}
"#;

/// The same, fixed.
const FIXED: &str = r#"model_list:
  - model_name: gpt-4o
    litellm_params: {model: openai/gpt-4o, api_base: os.environ/PROXY_API_BASE, api_key: os.environ/PROXY_API_KEY}
  - model_name: claude-x
    litellm_params: {model: openai/claude-x, api_base: os.environ/PROXY_API_BASE, api_key: os.environ/PROXY_API_KEY}
"#;

#[tokio::test]
async fn the_real_litellm_lists_its_models_one_it_cannot_load_is_named_and_a_fix_is_checked_again()
{
    let script = litellm_script();
    let dir = std::env::temp_dir().join(format!("kaos-models-loaded-{}", free_port()));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let relay = Relay::default();
    let port = relay.start().await;
    // A check waits in the relay while LiteLLM starts: the timeout covers its start.
    let h = start(&[
        reach("llm", 8000, port),
        "--protocol-check-timeout-seconds=300".into(),
    ]);
    h.apply(
        &Agent::test("writer")
            .model_api("llm")
            .model("gpt-4o")
            .tokens_per_day(100_000),
    );
    h.apply(
        &ModelAPI::test("llm")
            .proxy(["gpt-4o", "gpt-4o-mini", "*"])
            .provider("openai")
            .api_key("sk-upstream-test-key"),
    );

    // Healthy: the generated config's models and the budgeted agent's alias are listed (the
    // wildcard entry is not expected: LiteLLM lists what its cost map knows under it).
    let config = config_with(&h, "kaos.default.writer").await;
    let (proxy, backend) = Proxy::start(&h, &script, &dir, "healthy", &config).await;
    relay.to(Some(backend));
    let three = |m: &str| m.contains(" 3 models");
    let loaded = until_models(&h, "llm", "True", three, LITELLM_PATIENCE).await;
    assert_eq!(
        loaded.condition_state(MODELS_LOADED),
        Some((
            "True".into(),
            MODELS_LISTED.into(),
            format!("LiteLLM at http://127.0.0.1:{port} lists the 3 models of its config")
        )),
        "{}",
        proxy.log()
    );

    // A config with an entry LiteLLM cannot load: a new rollout, checked again, names it.
    relay.to(None);
    drop(proxy);
    h.merge_patch::<ModelAPI>(
        "llm",
        json!({"spec": {"proxyConfig": {"models": ["gpt-4o", "claude-x"],
            "configYaml": {"fromString": ONE_BROKEN}}}}),
    )
    .await;
    let config = config_with(&h, "nosuchprovider").await;
    let (proxy, backend) = Proxy::start(&h, &script, &dir, "broken", &config).await;
    relay.to(Some(backend));
    let missing = until_models(&h, "llm", "False", |_| true, LITELLM_PATIENCE).await;
    let (_, reason, message) = missing
        .condition_state(MODELS_LOADED)
        .expect("the condition");
    assert_eq!(reason, MODELS_MISSING, "{message}");
    assert_eq!(
        message,
        format!(
            "LiteLLM at http://127.0.0.1:{port} does not list 1 of the 3 models of its config: claude-x; LiteLLM could not load them: find the entry's error in its log (kubectl logs deploy/modelapi-llm), then fix the entry in spec.proxyConfig (the config is ConfigMap litellm-config-llm) or the upstream credentials"
        )
    );
    assert!(
        proxy.log().contains("nosuchprovider/claude-x"),
        "LiteLLM's log names the entry it could not load: {}",
        proxy.log()
    );
    assert_eq!(
        missing.reason("Ready"),
        DEPLOYMENT_READY,
        "Report: Ready does not wait"
    );

    // Fixed: the next rollout is checked and passes.
    relay.to(None);
    drop(proxy);
    h.merge_patch::<ModelAPI>(
        "llm",
        json!({"spec": {"proxyConfig": {"configYaml": {"fromString": FIXED}}}}),
    )
    .await;
    let config = config_with(&h, "openai/claude-x").await;
    let (proxy, backend) = Proxy::start(&h, &script, &dir, "fixed", &config).await;
    relay.to(Some(backend));
    until_models(&h, "llm", "True", three, LITELLM_PATIENCE).await;

    // Verified: a steady ModelAPI gets no request and the controller writes nothing.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = relay.connections();
    let (_, writes) = h.idle(Duration::from_secs(10)).await;
    assert_eq!(writes, Vec::<String>::new(), "writes while idle");
    assert_eq!(relay.connections(), before, "no request while idle");
    drop(proxy);
    let _ = std::fs::remove_dir_all(&dir);
}

// Fakes: Ollama's `/api/tags`, and a proxy whose model list fails.

/// An Ollama listing `models`, counting its requests.
#[derive(Clone, Default)]
struct FakeOllama {
    models: Arc<Mutex<Vec<String>>>,
    requests: Arc<AtomicUsize>,
}

async fn tags(State(fake): State<FakeOllama>) -> Json<Value> {
    fake.requests.fetch_add(1, Ordering::SeqCst);
    let models = fake.models.lock().expect("the models").clone();
    let listed: Vec<Value> = models
        .iter()
        .map(|m| json!({"name": m, "model": m, "size": 270_000_000}))
        .collect();
    Json(json!({"models": listed}))
}

async fn serve(app: axum::Router) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("address").port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    port
}

async fn start_ollama(fake: &FakeOllama) -> u16 {
    let app = axum::Router::new()
        .route("/api/tags", axum::routing::get(tags))
        .with_state(fake.clone());
    serve(app).await
}

#[tokio::test]
async fn a_hosted_model_not_pulled_is_named_then_found_on_the_retry_and_idle_asks_nothing() {
    let ollama = FakeOllama::default();
    let port = start_ollama(&ollama).await;
    let h = start(&[reach("local", 11434, port)]);
    h.apply(&ModelAPI::test("local").hosted("smollm2:135m"));

    let missing = until_models(&h, "local", "False", |_| true, Duration::from_secs(30)).await;
    let (_, reason, message) = missing
        .condition_state(MODELS_LOADED)
        .expect("the condition");
    assert_eq!(reason, MODELS_MISSING);
    assert_eq!(
        message,
        format!(
            "Ollama at http://127.0.0.1:{port} has not pulled smollm2:135m (it lists none); the pull-model init container pulls it when the pod starts: see its log (kubectl logs deploy/modelapi-local -c pull-model), and check that spec.hostedConfig.model names a model of Ollama's library"
        )
    );
    assert_eq!(missing.reason("Ready"), DEPLOYMENT_READY);

    // Pulled: the retry (10 s after the failure) finds it.
    ollama
        .models
        .lock()
        .expect("the models")
        .push("smollm2:135m".into());
    let loaded = until_models(&h, "local", "True", |_| true, Duration::from_secs(40)).await;
    assert_eq!(
        loaded.condition_state(MODELS_LOADED),
        Some((
            "True".into(),
            MODELS_LISTED.into(),
            format!("Ollama at http://127.0.0.1:{port} has pulled smollm2:135m")
        ))
    );

    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = ollama.requests.load(Ordering::SeqCst);
    let (reconciles, writes) = h.idle(Duration::from_secs(12)).await;
    assert_eq!((reconciles, writes), (0.0, Vec::<String>::new()), "quiet");
    assert_eq!(
        ollama.requests.load(Ordering::SeqCst),
        before,
        "no request while idle"
    );
}

#[tokio::test]
async fn a_failing_list_and_an_unreachable_proxy_say_what_failed() {
    let app = axum::Router::new()
        .route(
            "/health/readiness",
            axum::routing::get(|| async { Json(json!({"status": "healthy"})) }),
        )
        .route(
            "/v1/models",
            axum::routing::get(|| async {
                (StatusCode::INTERNAL_SERVER_ERROR, "a secret stack trace")
            }),
        );
    let failing = serve(app).await;
    let closed = free_port();
    let h = start(&[format!(
        "--modelapi-address-overrides=modelapi-failing.default.svc.cluster.local:8000=127.0.0.1:{failing},modelapi-gone.default.svc.cluster.local:8000=127.0.0.1:{closed}"
    )]);
    h.apply(
        &ModelAPI::test("failing")
            .proxy(["gpt-4o"])
            .provider("openai"),
    );
    h.apply(&ModelAPI::test("gone").proxy(["gpt-4o"]).provider("openai"));

    let failed = until_models(&h, "failing", "False", |_| true, Duration::from_secs(30)).await;
    assert_eq!(
        failed.condition_state(MODELS_LOADED),
        Some((
            "False".into(),
            MODELS_LIST_FAILED.into(),
            format!(
                "LiteLLM at http://127.0.0.1:{failing}/v1/models answered HTTP 500 Internal Server Error; check its log (kubectl logs deploy/modelapi-failing)"
            )
        )),
        "what failed, never the body"
    );
    let gone = until_models(&h, "gone", "False", |_| true, Duration::from_secs(30)).await;
    let (_, reason, message) = gone.condition_state(MODELS_LOADED).expect("the condition");
    assert_eq!(reason, PROXY_UNREACHABLE);
    assert!(
        message.starts_with(&format!(
            "no LiteLLM proxy answered at http://127.0.0.1:{closed}/health/readiness: "
        )) && message.ends_with(
            "; check that its pod runs and listens on its port (kubectl logs deploy/modelapi-gone) and that no NetworkPolicy of yours blocks the controller"
        ),
        "{message}"
    );
}

/// With the checks off (kwok nodes, `kaosctl dev`: no pod could answer) a Ready ModelAPI gets
/// no `ModelsLoaded` and its server no request, and the controller goes quiet.
#[tokio::test]
async fn checks_off_leave_a_ready_model_api_unchecked_and_quiet() {
    let ollama = FakeOllama::default();
    let port = start_ollama(&ollama).await;
    let h = start(&[
        reach("local", 11434, port),
        "--protocol-checks=false".into(),
    ]);
    h.apply(&ModelAPI::test("local").hosted("smollm2:135m"));
    let ready = h.until_phase::<ModelAPI>("local", Phase::Ready).await;
    assert!(ready.condition(MODELS_LOADED).is_none());
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (reconciles, writes) = h.idle(Duration::from_secs(12)).await;
    assert_eq!((reconciles, writes), (0.0, Vec::<String>::new()));
    assert_eq!(ollama.requests.load(Ordering::SeqCst), 0);
}
