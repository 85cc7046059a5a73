//! The pure Agent resolver and builder against every line of the contract (`docs/contract.md` §2).

use agent_controller::build::{Desired, build};
use agent_controller::conditions::DEPENDENCIES_READY;
use agent_controller::naming::advertised_endpoint;
use agent_controller::resolve::{Resolved, resolve};
use agent_controller::settings::{Args, Settings};
use clap::Parser;
use kaos_api::agent::{Agent, AgentPhase};
use kaos_api::mcpserver::MCPServer;
use kaos_api::modelapi::ModelAPI;
use kaos_harness::built::{assert_name_labels_and_owner, assert_serves_http_on};
use kaos_harness::deployments::{env_with_sources, expected_env};
use kaos_workload::desired::{Problem, Stuck};
use serde_json::{Value, json};

fn settings(extra: &[&str]) -> Settings {
    let mut argv = vec!["agent-controller", "--default-agent-image=kaos-agent:1"];
    argv.extend_from_slice(extra);
    Args::try_parse_from(argv).expect("flags").settings
}

fn agent(name: &str, spec: Value) -> Agent {
    serde_json::from_value(json!({"apiVersion": "kaos.tools/v1alpha1", "kind": "Agent",
        "metadata": {"name": name, "namespace": "team", "uid": "u-a"}, "spec": spec}))
    .expect("Agent")
}

fn json_of<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).expect("serializes")
}

fn container(d: &Desired) -> Value {
    json_of(&d.workload.deployment)["spec"]["template"]["spec"]["containers"][0].clone()
}

fn rich_agent() -> Agent {
    agent(
        "coordinator",
        json!({
            "modelAPI": "llm", "model": "openai/gpt-4o",
            "mcpServers": ["web-search", "calc-tools"],
            "agentNetwork": {"access": ["research-bot", "code-writer"]},
            "config": {
                "description": "Plans work", "instructions": "Be brief",
                "reasoningLoopMaxSteps": 7,
                "memory": {"enabled": true, "type": "local", "contextLimit": 12, "maxSessions": 50, "maxSessionEvents": 80},
                "telemetry": {"enabled": true, "endpoint": "http://otel:4317"}
            },
            "container": {"env": [{"name": "EXTRA", "value": "x"}]}
        }),
    )
}

fn rich_resolved() -> Resolved {
    Resolved {
        model_api_url: "http://modelapi-llm.team.svc.cluster.local:8000".into(),
        model_name: "openai/gpt-4o".into(),
        budgeted: false,
        // Given out of order: the builder is handed what resolve returns, which sorts.
        mcp_servers: vec![
            (
                "calc-tools".into(),
                "http://mcpserver-calc-tools.team.svc.cluster.local:8000".into(),
            ),
            (
                "web-search".into(),
                "http://mcpserver-web-search.team.svc.cluster.local:8000".into(),
            ),
        ],
        peers: vec![
            (
                "code-writer".into(),
                "http://agent-code-writer.team.svc.cluster.local:8000".into(),
            ),
            (
                "research-bot".into(),
                "http://agent-research-bot.team.svc.cluster.local:8000".into(),
            ),
        ],
        memory: None,
    }
}

#[test]
fn the_full_env_list_of_a_rich_agent_in_the_contracts_order() {
    let d = build(
        &rich_agent(),
        &rich_resolved(),
        &settings(&["--default-log-level=DEBUG"]),
    )
    .expect("builds");
    assert_eq!(
        env_with_sources(&d.workload.deployment),
        expected_env(&[
            ("AGENT_NAME", "coordinator"),
            ("AGENT_DESCRIPTION", "Plans work"),
            ("AGENT_INSTRUCTIONS", "Be brief"),
            ("EXTRA", "x"),
            (
                "MODEL_API_URL",
                "http://modelapi-llm.team.svc.cluster.local:8000"
            ),
            ("MODEL_NAME", "openai/gpt-4o"),
            ("AGENTIC_LOOP_MAX_STEPS", "7"),
            ("MEMORY_ENABLED", "true"),
            ("MEMORY_TYPE", "local"),
            ("MEMORY_CONTEXT_LIMIT", "12"),
            ("MEMORY_MAX_SESSIONS", "50"),
            ("MEMORY_MAX_SESSION_EVENTS", "80"),
            ("MCP_SERVERS", "calc-tools,web-search"),
            (
                "MCP_SERVER_calc-tools_URL",
                "http://mcpserver-calc-tools.team.svc.cluster.local:8000"
            ),
            (
                "MCP_SERVER_web-search_URL",
                "http://mcpserver-web-search.team.svc.cluster.local:8000"
            ),
            ("PEER_AGENTS", "code-writer,research-bot"),
            (
                "PEER_AGENT_CODE_WRITER_CARD_URL",
                "http://agent-code-writer.team.svc.cluster.local:8000"
            ),
            (
                "PEER_AGENT_RESEARCH_BOT_CARD_URL",
                "http://agent-research-bot.team.svc.cluster.local:8000"
            ),
            ("OTEL_SDK_DISABLED", "false"),
            ("OTEL_SERVICE_NAME", "coordinator"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel:4317"),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "service.namespace=team,kaos.resource.name=coordinator"
            ),
            (
                "OTEL_PYTHON_FASTAPI_EXCLUDED_URLS",
                "/health,/ready,/.well-known/agent.json",
            ),
            ("LOG_LEVEL", "DEBUG"),
        ])
    );
}

#[test]
fn a_minimal_agent_and_a_user_override_in_place() {
    let minimal = agent(
        "w",
        json!({"modelAPI": "llm", "model": "m", "container": {"env": [{"name": "MODEL_NAME", "value": "other"}]}}),
    );
    let resolved = Resolved {
        model_api_url: "http://api".into(),
        ..Default::default()
    };
    let d = build(&minimal, &resolved, &settings(&[])).expect("builds");
    assert_eq!(
        env_with_sources(&d.workload.deployment),
        expected_env(&[
            ("AGENT_NAME", "w"),
            ("MODEL_API_URL", "http://api"),
            ("MODEL_NAME", "other"),
            ("LOG_LEVEL", "INFO")
        ]),
        "the user's MODEL_NAME replaces the generated one where it stands; no name twice"
    );
}

#[test]
fn a_name_admitted_before_the_name_rule_fails_instead_of_running_without_a_service() {
    let dotted = agent("team.alpha", json!({"modelAPI": "llm", "model": "m"}));
    let err = build(&dotted, &rich_resolved(), &settings(&[])).expect_err("no Service name");
    assert_eq!(err.reason, "InvalidName");
    assert!(
        err.message.contains("\"agent-team.alpha\""),
        "{}",
        err.message
    );
}

#[test]
fn names_labels_port_probes_service_and_endpoint() {
    let d = build(&rich_agent(), &rich_resolved(), &settings(&[])).expect("builds");
    assert_name_labels_and_owner(
        &d.workload.deployment,
        "agent-coordinator",
        &[("app", "agent"), ("agent", "coordinator")],
        "Agent",
    );
    let c = container(&d);
    assert_eq!(
        (c["name"].as_str(), c["image"].as_str()),
        (Some("agent"), Some("kaos-agent:1"))
    );
    let service = d.workload.service.as_ref().expect("exposed by default");
    assert_serves_http_on(&d.workload.deployment, service, 8000);
    assert_eq!(
        c["livenessProbe"],
        json!({"httpGet": {"path": "/health", "port": 8000}, "initialDelaySeconds": 30, "periodSeconds": 10})
    );
    assert_eq!(
        c["readinessProbe"],
        json!({"httpGet": {"path": "/.well-known/agent.json", "port": 8000}, "initialDelaySeconds": 10, "periodSeconds": 5})
    );
    assert_eq!(
        d.endpoint.as_deref(),
        Some("http://agent-coordinator.team.svc.cluster.local:8000")
    );
}

#[test]
fn not_exposed_means_no_service_route_or_endpoint() {
    let hidden = agent(
        "h",
        json!({"modelAPI": "llm", "model": "m", "agentNetwork": {"expose": false}}),
    );
    let d = build(
        &hidden,
        &Resolved::default(),
        &settings(&["--gateway-api-enabled=true"]),
    )
    .expect("builds");
    assert!(
        d.workload.service.is_none() && d.workload.http_route.is_none() && d.endpoint.is_none()
    );
}

#[test]
fn a_pod_spec_probe_overrides_the_generated_one_field_by_field() {
    // A runtime whose card is elsewhere: the user points readiness at another path and keeps
    // the generated timings.
    let a = agent(
        "a",
        json!({"modelAPI": "llm", "model": "m",
        "podSpec": {"containers": [{"name": "agent", "readinessProbe": {"httpGet": {"path": "/ready", "port": 8000}, "periodSeconds": 2}}]}}),
    );
    let d = build(&a, &Resolved::default(), &settings(&[])).expect("builds");
    let c = container(&d);
    assert_eq!(
        c["readinessProbe"],
        json!({"httpGet": {"path": "/ready", "port": 8000}, "initialDelaySeconds": 10, "periodSeconds": 2})
    );
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/health");
}

#[test]
fn overrides_pod_spec_replicas_and_route() {
    let a = agent(
        "a",
        json!({"modelAPI": "llm", "model": "m", "replicas": 2,
        "gatewayRoute": {"timeout": "0s"},
        "container": {"image": "mine:3", "command": ["python", "-m", "agent"], "args": ["--x"], "resources": {"limits": {"cpu": "1"}}},
        "podSpec": {"containers": [{"name": "agent", "env": [{"name": "LOG_LEVEL", "value": "ERROR"}]}], "serviceAccountName": "agent-sa"}}),
    );
    let d = build(
        &a,
        &Resolved::default(),
        &settings(&["--gateway-api-enabled=true"]),
    )
    .expect("builds");
    let deployment = json_of(&d.workload.deployment);
    assert_eq!(deployment["spec"]["replicas"], 2);
    let c = container(&d);
    assert_eq!(
        (c["image"].as_str(), c["command"].clone(), c["args"].clone()),
        (
            Some("mine:3"),
            json!(["python", "-m", "agent"]),
            json!(["--x"])
        )
    );
    assert_eq!(c["resources"], json!({"limits": {"cpu": "1"}}));
    assert_eq!(
        env_with_sources(&d.workload.deployment).last(),
        Some(&("LOG_LEVEL".to_string(), "ERROR".to_string())),
        "podSpec env merged by name"
    );
    assert_eq!(
        deployment["spec"]["template"]["spec"]["serviceAccountName"],
        "agent-sa"
    );
    let route = json_of(d.workload.http_route.as_ref().expect("route"));
    assert_eq!(route["metadata"]["name"], "agent-a");
    assert_eq!(
        route["spec"]["rules"][0]["matches"][0]["path"]["value"],
        "/team/agent/a"
    );
    assert!(
        route["spec"]["rules"][0].get("timeouts").is_none(),
        "0s sets no timeout"
    );
    let unset = build(
        &agent("b", json!({"modelAPI": "llm", "model": "m"})),
        &Resolved::default(),
        &settings(&["--gateway-api-enabled=true"]),
    )
    .expect("builds");
    assert_eq!(
        json_of(&unset.workload.http_route.expect("route"))["spec"]["rules"][0]["timeouts"],
        json!({"request": "120s"})
    );
    assert!(
        json_of(&unset.workload.deployment)["spec"]
            .get("replicas")
            .is_none()
    );
    let bare = Args::try_parse_from(["agent-controller"])
        .expect("flags")
        .settings;
    assert_eq!(
        build(
            &agent("c", json!({"modelAPI": "llm", "model": "m"})),
            &Resolved::default(),
            &bare
        )
        .expect_err("no image")
        .reason,
        "NoImage"
    );
}

fn model_api(ready: bool, spec: Value) -> ModelAPI {
    serde_json::from_value(json!({"apiVersion": "kaos.tools/v1alpha1", "kind": "ModelAPI", "metadata": {"name": "llm", "namespace": "team"},
        "spec": spec, "status": {"ready": ready, "endpoint": "http://modelapi-llm.team.svc.cluster.local:8000"}}))
    .expect("ModelAPI")
}

/// A Proxy ModelAPI's spec, serving these models.
fn proxy_serving(models: &[&str]) -> Value {
    json!({"mode": "Proxy", "proxyConfig": {"models": models}})
}

/// The peers `agent` is given, its ModelAPI ready and serving `m`, a peer's endpoint read by
/// `endpoint_of`.
fn peers_given(
    agent: &Agent,
    endpoint_of: impl Fn(&str) -> Option<String>,
) -> Vec<(String, String)> {
    let ready = model_api(true, proxy_serving(&["m"]));
    resolve(agent, Some(&ready), |_| None, endpoint_of)
        .expect("resolved")
        .peers
}

fn mcp(name: &str, ready: bool) -> MCPServer {
    serde_json::from_value(json!({"apiVersion": "kaos.tools/v1alpha1", "kind": "MCPServer", "metadata": {"name": name, "namespace": "team"},
        "spec": {"runtime": "python-string"}, "status": {"ready": ready, "endpoint": format!("http://mcpserver-{name}.team.svc.cluster.local:8000")}}))
    .expect("MCPServer")
}

fn peer(name: &str, endpoint: Option<&str>) -> Agent {
    let mut a = agent(name, json!({"modelAPI": "llm", "model": "m"}));
    a.status = Some(kaos_api::agent::AgentStatus {
        workload: kaos_api::common::WorkloadStatus {
            endpoint: endpoint.map(String::from),
            ..Default::default()
        },
        ..Default::default()
    });
    a
}

#[test]
fn resolution_follows_the_contracts_order() {
    let proxy = proxy_serving(&["openai/*", "llama3"]);
    let a = rich_agent();
    let servers = [mcp("web-search", true), mcp("calc-tools", true)];
    let peers = [
        peer(
            "research-bot",
            Some("http://agent-research-bot.team.svc.cluster.local:8000"),
        ),
        peer("code-writer", None),
    ];
    let find_server = |n: &str| {
        servers
            .iter()
            .find(|s| s.metadata.name.as_deref() == Some(n))
    };
    let find_peer = |n: &str| {
        let peer = peers
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(n))?;
        agent_controller::naming::advertised_endpoint(peer)
    };

    let missing = resolve(&a, None, find_server, find_peer).expect_err("no ModelAPI");
    assert_eq!(
        (missing.stuck, missing.reason, missing.condition),
        (Stuck::Failed, "ModelAPINotFound", Some(DEPENDENCIES_READY))
    );
    assert!(
        missing
            .message
            .starts_with("Failed to resolve ModelAPI llm"),
        "{}",
        missing.message
    );

    let unready = model_api(false, proxy.clone());
    assert_eq!(
        resolve(&a, Some(&unready), find_server, find_peer),
        Err(
            Problem::waiting("ModelAPINotReady", "ModelAPI llm is not ready".into())
                .about(DEPENDENCIES_READY)
        )
    );

    let narrow = model_api(true, proxy_serving(&["llama3", "mistral"]));
    let err = resolve(&a, Some(&narrow), find_server, find_peer).expect_err("unsupported");
    assert_eq!(err.reason, "ModelNotSupported");
    assert_eq!(
        err.message,
        "model openai/gpt-4o not found in models list of ModelAPI llm: [llama3, mistral]"
    );

    let ready = model_api(true, proxy.clone());
    let no_servers = |_: &str| None;
    let err = resolve(&a, Some(&ready), no_servers, find_peer).expect_err("missing MCPServer");
    assert_eq!(err.reason, "MCPServerNotFound");
    assert!(
        err.message
            .starts_with("Failed to resolve MCPServer web-search"),
        "{}",
        err.message
    );

    let unready_servers = [mcp("web-search", false), mcp("calc-tools", true)];
    let err = resolve(
        &a,
        Some(&ready),
        |n| {
            unready_servers
                .iter()
                .find(|s| s.metadata.name.as_deref() == Some(n))
        },
        find_peer,
    )
    .expect_err("waiting");
    assert_eq!(
        (err.stuck, err.message.as_str()),
        (Stuck::Waiting, "MCPServer web-search is not ready")
    );

    let resolved = resolve(&a, Some(&ready), find_server, find_peer).expect("resolved");
    assert_eq!(
        resolved.model_api_url,
        "http://modelapi-llm.team.svc.cluster.local:8000"
    );
    assert_eq!(
        resolved
            .mcp_servers
            .iter()
            .map(|(n, _)| n.as_str())
            .collect::<Vec<_>>(),
        ["calc-tools", "web-search"],
        "sorted"
    );
    assert_eq!(
        resolved.peers,
        vec![(
            "research-bot".to_string(),
            "http://agent-research-bot.team.svc.cluster.local:8000".to_string()
        )],
        "peers without an endpoint are skipped"
    );

    // waitForDependencies: false goes ahead with an unready ModelAPI and MCPServer.
    let mut eager = a.clone();
    eager.spec.wait_for_dependencies = false;
    resolve(
        &eager,
        Some(&unready),
        |n| {
            unready_servers
                .iter()
                .find(|s| s.metadata.name.as_deref() == Some(n))
        },
        find_peer,
    )
    .expect("not waiting");

    // Hosted: the model must equal hostedConfig.model.
    let hosted = model_api(
        true,
        json!({"mode": "Hosted", "hostedConfig": {"model": "smollm2:135m"}}),
    );
    let mut local = agent("l", json!({"modelAPI": "llm", "model": "smollm2:135m"}));
    resolve(&local, Some(&hosted), find_server, find_peer).expect("served");
    local.spec.model = "other".into();
    assert_eq!(
        resolve(&local, Some(&hosted), find_server, find_peer)
            .expect_err("not served")
            .reason,
        "ModelNotSupported"
    );
}

#[test]
fn a_self_listing_agent_lists_its_own_endpoint_before_it_has_a_status() {
    let me = agent(
        "solo",
        json!({"modelAPI": "llm", "model": "m", "agentNetwork": {"access": ["solo"]}}),
    );
    assert_eq!(
        peers_given(&me, |_| None),
        vec![(
            "solo".to_string(),
            "http://agent-solo.team.svc.cluster.local:8000".to_string()
        )]
    );

    let hidden = agent(
        "solo",
        json!({"modelAPI": "llm", "model": "m", "agentNetwork": {"access": ["solo"], "expose": false}}),
    );
    assert!(
        peers_given(&hidden, |_| None).is_empty(),
        "not exposed: no endpoint to list"
    );
}

#[test]
fn a_peer_is_listed_at_its_own_endpoint_until_its_status_says_otherwise() {
    let me = agent(
        "lead",
        json!({"modelAPI": "llm", "model": "m",
            "agentNetwork": {"access": ["fresh", "broken", "waiting"]}}),
    );
    // Not reconciled yet: listed at the endpoint its first build will publish.
    let fresh = agent("fresh", json!({"modelAPI": "llm", "model": "m"}));
    // Reconciled but could not be built: its status has no endpoint, so it is skipped.
    let mut broken = peer("broken", None);
    broken.status.as_mut().expect("status").workload.phase = Some(AgentPhase::Failed);
    // Waiting for its own ModelAPI: not built yet either, so listed at its future endpoint.
    let mut waiting = peer("waiting", None);
    waiting.status.as_mut().expect("status").workload.phase = Some(AgentPhase::Waiting);
    let find = |n: &str| match n {
        "fresh" => advertised_endpoint(&fresh),
        "broken" => advertised_endpoint(&broken),
        "waiting" => advertised_endpoint(&waiting),
        _ => None,
    };
    assert_eq!(
        peers_given(&me, find),
        vec![
            (
                "fresh".to_string(),
                "http://agent-fresh.team.svc.cluster.local:8000".to_string()
            ),
            (
                "waiting".to_string(),
                "http://agent-waiting.team.svc.cluster.local:8000".to_string()
            )
        ]
    );
}

#[test]
fn the_agent_pod_meets_the_restricted_pod_security_standard_unless_relaxed() {
    use kaos_workload::build::pod_security::restricted_violations;
    let pod_of = |extra: &[&str]| {
        let d = build(&rich_agent(), &rich_resolved(), &settings(extra)).expect("builds");
        d.workload
            .deployment
            .spec
            .and_then(|s| s.template.spec)
            .expect("a pod spec")
    };
    let pod = pod_of(&[]);
    assert_eq!(restricted_violations(&pod), Vec::<String>::new());
    assert_eq!(pod.automount_service_account_token, Some(false));
    let relaxed = pod_of(&["--pod-security=baseline"]);
    assert_eq!(relaxed.security_context, None);
    assert!(!restricted_violations(&relaxed).is_empty());
}
