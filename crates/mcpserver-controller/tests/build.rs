//! The pure MCPServer builder against every line of the contract (`docs/contract.md` §2).

use clap::Parser;
use kaos_api::mcpserver::MCPServer;
use kaos_harness::built::{assert_name_labels_and_owner, assert_serves_http_on};
use kaos_harness::deployments::{env_with_sources, expected_env};
use mcpserver_controller::build::{Desired, Problem, desired};
use mcpserver_controller::registry::{self, Registry, RegistryError};
use mcpserver_controller::settings::{Args, Settings};
use serde_json::{Value, json};

fn settings(extra: &[&str]) -> Settings {
    let mut argv = vec!["mcpserver-controller"];
    argv.extend_from_slice(extra);
    Args::try_parse_from(argv).expect("flags").settings
}

fn default_registry() -> Result<Registry, RegistryError> {
    Ok(registry::parse(registry::DEFAULT_RUNTIMES_YAML).expect("valid"))
}

fn server(spec: Value) -> MCPServer {
    serde_json::from_value(
        json!({"apiVersion": "kaos.tools/v1alpha1", "kind": "MCPServer",
        "metadata": {"name": "tools", "namespace": "team", "uid": "u-1"}, "spec": spec}),
    )
    .expect("MCPServer")
}

fn built(spec: Value, extra: &[&str]) -> Desired {
    desired(&server(spec), &default_registry(), &settings(extra)).expect("builds")
}

/// Why the builder refuses this spec (default registry and flags).
fn refused(spec: Value) -> Problem {
    desired(&server(spec), &default_registry(), &settings(&[])).expect_err("refused")
}

fn json_of<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).expect("serializes")
}

fn pod(d: &Desired) -> Value {
    json_of(&d.workload.deployment)["spec"]["template"]["spec"].clone()
}

#[test]
fn a_name_admitted_before_the_name_rule_fails() {
    let mut dotted = server(json!({"runtime": "python-string", "params": "x = 1"}));
    dotted.metadata.name = Some("team.tools".into());
    let err = desired(&dotted, &default_registry(), &settings(&[])).expect_err("no Service name");
    assert_eq!(err.reason, "InvalidName");
}

#[test]
fn python_string_names_labels_port_probes_and_params() {
    let d = built(
        json!({"runtime": "python-string", "params": "def echo(x): return x"}),
        &[],
    );
    assert_name_labels_and_owner(
        &d.workload.deployment,
        "mcpserver-tools",
        &[("app", "mcpserver"), ("mcpserver", "tools")],
        "MCPServer",
    );
    let c = &pod(&d)["containers"][0];
    assert_eq!(c["name"], "mcp-server");
    assert_eq!(c["image"], "axsauze/kaos-agent:latest");
    assert_eq!(c["command"], json!(["python", "-m", "mcptools.server"]));
    assert!(c.get("args").is_none());
    let service = d.workload.service.as_ref().expect("service");
    assert_serves_http_on(&d.workload.deployment, service, 8000);
    assert_eq!(
        c["livenessProbe"],
        json!({"tcpSocket": {"port": 8000}, "initialDelaySeconds": 20, "periodSeconds": 10, "timeoutSeconds": 3, "failureThreshold": 3})
    );
    assert_eq!(
        c["readinessProbe"],
        json!({"tcpSocket": {"port": 8000}, "initialDelaySeconds": 15, "periodSeconds": 5, "timeoutSeconds": 3, "failureThreshold": 2})
    );
    assert_eq!(
        env_with_sources(&d.workload.deployment),
        expected_env(&[
            ("MCP_TOOLS_STRING", "def echo(x): return x"),
            ("LOG_LEVEL", "INFO"),
        ])
    );
    assert_eq!(
        d.endpoint.as_deref(),
        Some("http://mcpserver-tools.team.svc.cluster.local:8000")
    );
}

/// What `kaos mcp deploy IMAGE` writes (kaos-cli 0.8.4): a custom image with its `http` port
/// and the params in its env.
#[test]
fn a_kaos_cli_custom_server_keeps_its_port_and_gets_extra_ones() {
    let d = built(
        json!({"runtime": "custom", "container": {"image": "tools:1",
            "ports": [{"containerPort": 8000, "name": "http"}, {"containerPort": 9090, "name": "metrics"}],
            "env": [{"name": "MCP_PARAMS", "value": "x"}]}}),
        &[],
    );
    let c = &pod(&d)["containers"][0];
    assert_eq!(
        c["ports"],
        json!([{"containerPort": 8000, "name": "http"}, {"containerPort": 9090, "name": "metrics"}])
    );
    let http_off_8000 = json!({"runtime": "custom", "container": {"image": "tools:1",
        "ports": [{"containerPort": 9000, "name": "http"}]}});
    let moved = refused(http_off_8000);
    assert_eq!(moved.reason, "InvalidContainerPorts");
    assert_eq!(
        moved.message,
        "spec.container.ports: port http must be 8000: the Service and the probes use it"
    );
}

/// KAOS 0.8.4's sample 6: the `kubernetes` runtime, its params as YAML and its ServiceAccount.
#[test]
fn the_kubernetes_runtime_gets_its_yaml_params_in_mcp_params() {
    let params = "allowedNamespaces:\n  - kaos-autonomous\n";
    let d = built(
        json!({"runtime": "kubernetes", "serviceAccountName": "k8s-monitor-sa", "params": params}),
        &[],
    );
    let p = pod(&d);
    assert_eq!(p["serviceAccountName"], "k8s-monitor-sa");
    assert_eq!(
        env_with_sources(&d.workload.deployment),
        expected_env(&[("MCP_PARAMS", params), ("LOG_LEVEL", "INFO")])
    );
}

#[test]
fn kubernetes_and_slack_runtimes_use_args_not_command() {
    let d = built(
        json!({"runtime": "kubernetes", "serviceAccountName": "k8s-reader"}),
        &[],
    );
    let p = pod(&d);
    assert_eq!(p["serviceAccountName"], "k8s-reader");
    assert_eq!(p["containers"][0]["args"], json!(["--port", "8000"]));
    assert!(p["containers"][0].get("command").is_none());
    let slack = json!({"runtime": "slack", "container": {"env": [
        {"name": "SLACK_BOT_TOKEN", "valueFrom": {"secretKeyRef": {"name": "slack", "key": "token"}}},
        {"name": "SLACK_TEAM_ID", "value": "T1"}]}});
    let slack = built(slack, &[]);
    let c = &pod(&slack)["containers"][0];
    assert_eq!(c["args"], json!(["--transport", "http", "--port", "8000"]));
    assert!(c.get("command").is_none());
    assert_eq!(
        env_with_sources(&slack.workload.deployment),
        expected_env(&[
            ("SLACK_BOT_TOKEN", "<secret slack/token>"),
            ("SLACK_TEAM_ID", "T1"),
            ("LOG_LEVEL", "INFO"),
        ])
    );
}

#[test]
fn missing_required_env_is_failed_naming_the_variables() {
    // The token is missing.
    let err = refused(
        json!({"runtime": "slack", "container": {"env": [{"name": "SLACK_TEAM_ID", "value": "T"}]}}),
    );
    assert_eq!(err.reason, "MissingRequiredEnv");
    assert_eq!(
        err.message,
        "runtime \"slack\" requires the environment variables SLACK_BOT_TOKEN: set them in spec.container.env (from a Secret)"
    );
    // A podSpec env counts too.
    let via_pod_spec = json!({"runtime": "slack", "podSpec": {"containers": [{"name": "mcp-server", "env": [
        {"name": "SLACK_BOT_TOKEN", "value": "x"}, {"name": "SLACK_TEAM_ID", "value": "T"}]}]}});
    desired(&server(via_pod_spec), &default_registry(), &settings(&[]))
        .expect("satisfied through podSpec");
}

#[test]
fn custom_takes_everything_from_the_container() {
    let d = built(
        json!({"runtime": "custom", "params": "region: eu",
        "container": {"image": "ghcr.io/me/tools:1", "command": ["/srv"], "args": ["--port", "8000"],
                      "resources": {"requests": {"cpu": "100m"}}}}),
        &[],
    );
    let c = &pod(&d)["containers"][0];
    assert_eq!(c["image"], "ghcr.io/me/tools:1");
    assert_eq!(c["command"], json!(["/srv"]));
    assert_eq!(c["args"], json!(["--port", "8000"]));
    assert_eq!(c["resources"], json!({"requests": {"cpu": "100m"}}));
    assert_eq!(
        env_with_sources(&d.workload.deployment),
        expected_env(&[("MCP_PARAMS", "region: eu"), ("LOG_LEVEL", "INFO")]),
        "a custom image gets the params in MCP_PARAMS"
    );
    let err = refused(json!({"runtime": "custom"}));
    assert_eq!(err.message, "runtime custom requires spec.container.image");
}

#[test]
fn overrides_telemetry_user_env_and_pod_spec() {
    let spec = json!({"runtime": "python-string", "params": "p",
        "telemetry": {"enabled": true, "endpoint": "http://otel:4317"},
        "container": {"image": "mine:2", "args": ["--x"], "env": [{"name": "EXTRA", "value": "1"}, {"name": "LOG_LEVEL", "value": "DEBUG"}]},
        "podSpec": {"tolerations": [{"key": "gpu", "operator": "Exists"}], "containers": [{"name": "sidecar", "image": "s"}]}});
    let d = built(spec, &["--default-log-level=WARNING"]);
    let p = pod(&d);
    // A podSpec naming only a new container puts it first, as apimachinery (and KAOS) merge.
    assert_eq!(p["containers"][0]["name"], "sidecar");
    let c = &p["containers"][1];
    assert_eq!(c["image"], "mine:2");
    assert_eq!(
        c["command"],
        json!(["python", "-m", "mcptools.server"]),
        "the runtime's command stays"
    );
    assert_eq!(c["args"], json!(["--x"]));
    let env = c["env"].as_array().expect("the server's env");
    let names: Vec<&str> = env.iter().filter_map(|e| e["name"].as_str()).collect();
    assert_eq!(
        names,
        [
            "MCP_TOOLS_STRING",
            "EXTRA",
            "OTEL_SDK_DISABLED",
            "OTEL_SERVICE_NAME",
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_RESOURCE_ATTRIBUTES",
            "OTEL_PYTHON_FASTAPI_EXCLUDED_URLS",
            "LOG_LEVEL"
        ]
    );
    assert_eq!(
        env.last().and_then(|e| e["value"].as_str()),
        Some("DEBUG"),
        "the user's LOG_LEVEL replaces the default in place"
    );
    assert_eq!(
        p["tolerations"],
        json!([{"key": "gpu", "operator": "Exists"}])
    );
}

#[test]
fn registry_problems_and_unknown_runtimes_say_what_to_fix() {
    let missing = Err(RegistryError::Missing {
        namespace: "kaos-system".into(),
    });
    let err = desired(
        &server(json!({"runtime": "python-string"})),
        &missing,
        &settings(&[]),
    )
    .expect_err("no registry");
    assert_eq!(err.reason, "RegistryUnavailable");
    assert!(
        err.message.contains("kaos-system/kaos-mcp-runtimes"),
        "{}",
        err.message
    );
    desired(
        &server(json!({"runtime": "custom", "container": {"image": "i"}})),
        &missing,
        &settings(&[]),
    )
    .expect("custom needs no registry");
    let err = refused(json!({"runtime": "github"}));
    assert_eq!(err.reason, "UnknownRuntime");
    assert!(
        err.message.contains("\"github\"")
            && err.message.contains("kubernetes, python-string, slack"),
        "{}",
        err.message
    );
}

#[test]
fn http_route_uses_the_mcp_prefix_and_timeouts() {
    let gateway = ["--gateway-api-enabled=true", "--gateway-name=gw"];
    let route = json_of(
        &built(json!({"runtime": "kubernetes"}), &gateway)
            .workload
            .http_route
            .expect("route"),
    );
    assert_eq!(route["metadata"]["name"], "mcp-tools");
    assert_eq!(
        route["spec"]["rules"][0]["matches"][0]["path"]["value"],
        "/team/mcp/tools"
    );
    assert_eq!(
        route["spec"]["rules"][0]["backendRefs"],
        json!([{"name": "mcpserver-tools", "port": 8000}])
    );
    assert_eq!(
        route["spec"]["rules"][0]["timeouts"],
        json!({"request": "30s"})
    );
    let zero = json_of(
        &built(
            json!({"runtime": "kubernetes", "gatewayRoute": {"timeout": "0s"}}),
            &gateway,
        )
        .workload
        .http_route
        .expect("route"),
    );
    assert!(zero["spec"]["rules"][0].get("timeouts").is_none());
}

fn pod_spec(d: &Desired) -> k8s_openapi::api::core::v1::PodSpec {
    serde_json::from_value(pod(d)).expect("a pod spec")
}

#[test]
fn every_pod_meets_the_restricted_pod_security_standard_and_only_a_service_account_gets_a_token() {
    use kaos_workload::build::pod_security::restricted_violations;
    let custom = json!({"runtime": "custom", "container": {"image": "ghcr.io/x/tools:1"}});
    let python = json!({"runtime": "python-string", "params": "def f(): pass"});
    let kubernetes = json!({"runtime": "kubernetes", "serviceAccountName": "mcp-reader"});
    for spec in [&custom, &python, &kubernetes] {
        let pod = pod_spec(&built(spec.clone(), &[]));
        assert_eq!(restricted_violations(&pod), Vec::<String>::new(), "{spec}");
        let relaxed = pod_spec(&built(spec.clone(), &["--pod-security=baseline"]));
        assert_eq!(relaxed.security_context, None, "{spec}");
    }
    let token = |spec: &Value| pod_spec(&built(spec.clone(), &[])).automount_service_account_token;
    assert_eq!(token(&python), Some(false));
    assert_eq!(token(&custom), Some(false));
    assert_eq!(token(&kubernetes), Some(true));
}
