//! Builder tests: the exact policy of each kind, the rendered YAML of each, determinism.

use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde_json::json;

use super::*;
use crate::build::workload::Workload;

pub(super) const NAMESPACE: &str = "team";

/// The workload of `kind` `name`, as its controller makes it.
pub(super) fn workload(kind: Kind, name: &str, port: i32) -> Workload {
    let resource = match kind {
        Kind::Agent => "Agent",
        Kind::ModelApi => "ModelAPI",
        Kind::McpServer => "MCPServer",
        Kind::MemoryStore => "MemoryStore",
    };
    Workload {
        name: format!("{}-{name}", kind.app()),
        namespace: NAMESPACE.into(),
        labels: kind.pod_labels(name),
        owner: OwnerReference {
            api_version: "kaos.tools/v1alpha1".into(),
            kind: resource.into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            controller: Some(true),
            block_owner_deletion: Some(true),
        },
        port,
    }
}

/// The defaults, with the API server and database where the matrix tests put them and an extra
/// egress to a telemetry collector.
pub(super) fn test_args() -> NetworkPolicyArgs {
    NetworkPolicyArgs {
        enabled: true,
        apiserver_cidrs: vec![Cidr::parse("172.18.0.2/32").expect("cidr")],
        database_cidrs: vec![Cidr::parse("10.50.0.0/24").expect("cidr")],
        extra_egress: serde_json::from_value(json!([{
            "to": [{
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "observability"}},
                "podSelector": {"matchLabels": {"app": "otel-collector"}}
            }],
            "ports": [{"port": 4317, "protocol": "TCP"}]
        }]))
        .expect("extra egress"),
        ..NetworkPolicyArgs::default()
    }
}

fn to_json(policy: &NetworkPolicy) -> serde_json::Value {
    serde_json::to_value(policy).expect("serializes")
}

fn ingress_from_gateway_and_scraper() -> [serde_json::Value; 2] {
    [
        json!({
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "envoy-gateway-system"}},
            "podSelector": {}
        }),
        json!({
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}
        }),
    ]
}

fn dns_egress() -> serde_json::Value {
    json!({
        "to": [{
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}
        }],
        "ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]
    })
}

fn external_egress() -> serde_json::Value {
    json!({
        "to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8", "169.254.169.254/32", "172.16.0.0/12", "192.168.0.0/16"]}}]
    })
}

/// The whole policy of the workload of `kind` `name` (as [`workload`] makes it): it admits
/// `ingress` (one rule: `from` and `ports`) and reaches `egress`, denying the rest.
fn expected_policy(
    kind: &str,
    name: &str,
    ingress: serde_json::Value,
    egress: serde_json::Value,
) -> serde_json::Value {
    let app = kind.to_lowercase();
    json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": format!("{app}-{name}"),
            "namespace": "team",
            "labels": {"app": app, &app: name},
            "ownerReferences": [{
                "apiVersion": "kaos.tools/v1alpha1", "kind": kind, "name": name, "uid": format!("uid-{name}"),
                "controller": true, "blockOwnerDeletion": true
            }]
        },
        "spec": {
            "podSelector": {"matchLabels": {"app": app, &app: name}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [ingress],
            "egress": egress
        }
    })
}

#[test]
fn agent_policy_admits_its_listers_and_reaches_its_dependencies() {
    let deps = AgentDeps {
        model_api: Some(Target::new("llm", 11434)),
        // Unsorted, with itself: sorted, itself dropped.
        mcp_servers: vec![Target::new("web", 8000), Target::new("files", 8000)],
        peers: vec![
            Target::new("w2", 8000),
            Target::new("coordinator", 8000),
            Target::new("w1", 8000),
        ],
        memory_store: Some(Target::any_port("mem")),
    };
    let listers = [
        "w1".to_string(),
        "coordinator".into(),
        "boss".into(),
        "w1".into(),
    ];
    let policy = agent_policy(
        &workload(Kind::Agent, "coordinator", 8000),
        &deps,
        &listers,
        &NetworkPolicyArgs::default(),
    );
    let [gateway, scraper] = ingress_from_gateway_and_scraper();
    assert_eq!(
        to_json(&policy),
        expected_policy(
            "Agent",
            "coordinator",
            json!({
                "from": [
                    {"podSelector": {"matchLabels": {"app": "agent", "agent": "boss"}}},
                    {"podSelector": {"matchLabels": {"app": "agent", "agent": "w1"}}},
                    gateway,
                    scraper,
                ],
                "ports": [{"port": 8000, "protocol": "TCP"}]
            }),
            json!([
                dns_egress(),
                {"to": [{"podSelector": {"matchLabels": {"app": "memorystore", "memorystore": "mem"}}}]},
                {
                    "to": [
                        {"podSelector": {"matchLabels": {"agent": "w1", "app": "agent"}}},
                        {"podSelector": {"matchLabels": {"agent": "w2", "app": "agent"}}},
                        {"podSelector": {"matchLabels": {"app": "mcpserver", "mcpserver": "files"}}},
                        {"podSelector": {"matchLabels": {"app": "mcpserver", "mcpserver": "web"}}},
                    ],
                    "ports": [{"port": 8000, "protocol": "TCP"}]
                },
                {
                    "to": [{"podSelector": {"matchLabels": {"app": "modelapi", "modelapi": "llm"}}}],
                    "ports": [{"port": 11434, "protocol": "TCP"}]
                },
            ])
        )
    );
}

#[test]
fn agent_policy_without_anything_still_denies_by_default() {
    let policy = agent_policy(
        &workload(Kind::Agent, "a", 8000),
        &AgentDeps::default(),
        &[],
        &NetworkPolicyArgs::default(),
    );
    let spec = to_json(&policy)["spec"].clone();
    assert_eq!(spec["policyTypes"], json!(["Ingress", "Egress"]));
    assert_eq!(spec["egress"], json!([dns_egress()]));
    assert_eq!(spec["ingress"][0]["from"].as_array().map(Vec::len), Some(2));
}

/// The defaults with the workflow controller as the chart sets it (`namespace_labels` may be
/// empty: every namespace).
fn workflow_args(namespace_labels: &str) -> NetworkPolicyArgs {
    NetworkPolicyArgs {
        workflow_namespace_labels: Labels::parse(namespace_labels).expect("labels"),
        workflow_pod_labels: Labels::parse(
            "app.kubernetes.io/name=workflow-controller,app.kubernetes.io/instance=kaos",
        )
        .expect("labels"),
        ..NetworkPolicyArgs::default()
    }
}

fn workflow_ingress(namespace_selector: serde_json::Value) -> serde_json::Value {
    json!({
        "namespaceSelector": namespace_selector,
        "podSelector": {"matchLabels": {
            "app.kubernetes.io/instance": "kaos",
            "app.kubernetes.io/name": "workflow-controller"
        }}
    })
}

#[test]
fn agent_policy_admits_the_workflow_controller_when_configured() {
    let args = workflow_args("kubernetes.io/metadata.name=kaos-system");
    let policy = agent_policy(
        &workload(Kind::Agent, "a", 8000),
        &AgentDeps::default(),
        &["c".into()],
        &args,
    );
    let [gateway, scraper] = ingress_from_gateway_and_scraper();
    assert_eq!(
        to_json(&policy),
        expected_policy(
            "Agent",
            "a",
            json!({
                // After the gateway and the scraper.
                "from": [
                    {"podSelector": {"matchLabels": {"app": "agent", "agent": "c"}}},
                    gateway,
                    scraper,
                    workflow_ingress(json!({"matchLabels": {"kubernetes.io/metadata.name": "kaos-system"}})),
                ],
                "ports": [{"port": 8000, "protocol": "TCP"}]
            }),
            json!([dns_egress()])
        )
    );
    // Without namespace labels: those pods in every namespace.
    let anywhere = agent_policy(
        &workload(Kind::Agent, "a", 8000),
        &AgentDeps::default(),
        &[],
        &workflow_args(""),
    );
    assert_eq!(
        to_json(&anywhere)["spec"]["ingress"][0]["from"][2],
        workflow_ingress(json!({}))
    );
}

#[test]
fn only_agents_admit_the_workflow_controller() {
    let args = workflow_args("kubernetes.io/metadata.name=kaos-system");
    let plain = NetworkPolicyArgs::default();
    let model_api = workload(Kind::ModelApi, "llm", 8000);
    assert_eq!(
        model_api_policy(&model_api, &args),
        model_api_policy(&model_api, &plain)
    );
    let server = workload(Kind::McpServer, "tools", 8000);
    assert_eq!(
        mcp_server_policy(&server, &[], "slack", &args),
        mcp_server_policy(&server, &[], "slack", &plain)
    );
    let store = workload(Kind::MemoryStore, "mem", 8080);
    assert_eq!(
        memory_store_policy(&store, &[], false, &args),
        memory_store_policy(&store, &[], false, &plain)
    );
}

#[test]
fn agent_policy_without_workflow_pod_labels_admits_no_workflow_controller() {
    let agent = workload(Kind::Agent, "a", 8000);
    let plain = agent_policy(
        &agent,
        &AgentDeps::default(),
        &[],
        &NetworkPolicyArgs::default(),
    );
    let [gateway, scraper] = ingress_from_gateway_and_scraper();
    assert_eq!(
        to_json(&plain)["spec"]["ingress"][0]["from"],
        json!([gateway, scraper])
    );
    // Namespace labels alone add nothing (not every pod of that namespace).
    let namespace_only = NetworkPolicyArgs {
        workflow_namespace_labels: Labels::parse("kubernetes.io/metadata.name=kaos-system")
            .expect("labels"),
        ..NetworkPolicyArgs::default()
    };
    assert_eq!(
        agent_policy(&agent, &AgentDeps::default(), &[], &namespace_only),
        plain
    );
}

#[test]
fn model_api_policy_admits_agents_and_stores_and_reaches_the_provider() {
    let args = NetworkPolicyArgs {
        external_ports: vec![PortSpec::tcp(443)],
        ..NetworkPolicyArgs::default()
    };
    let policy = model_api_policy(&workload(Kind::ModelApi, "ollama", 11434), &args);
    let [gateway, scraper] = ingress_from_gateway_and_scraper();
    let mut external = external_egress();
    external["ports"] = json!([{"port": 443, "protocol": "TCP"}]);
    assert_eq!(
        to_json(&policy),
        expected_policy(
            "ModelAPI",
            "ollama",
            json!({
                "from": [
                    {"podSelector": {"matchLabels": {"app": "agent"}}},
                    {"podSelector": {"matchLabels": {"app": "memorystore"}}},
                    gateway,
                    scraper,
                ],
                "ports": [{"port": 11434, "protocol": "TCP"}]
            }),
            json!([dns_egress(), external])
        )
    );
}

#[test]
fn mcp_server_policy_follows_its_runtime() {
    let args = NetworkPolicyArgs::default();
    let server = workload(Kind::McpServer, "k8s", 8000);
    let policy = mcp_server_policy(&server, &[9090, 8000], "kubernetes", &args);
    let [gateway, scraper] = ingress_from_gateway_and_scraper();
    assert_eq!(
        to_json(&policy),
        expected_policy(
            "MCPServer",
            "k8s",
            json!({
                "from": [{"podSelector": {"matchLabels": {"app": "agent"}}}, gateway, scraper],
                "ports": [{"port": 8000, "protocol": "TCP"}, {"port": 9090, "protocol": "TCP"}]
            }),
            json!([
                dns_egress(),
                {
                    "to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["169.254.169.254/32"]}}],
                    "ports": [{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}]
                }
            ])
        )
    );
    // The `*` entry: external; a runtime mapped to nothing: DNS only.
    let slack = to_json(&mcp_server_policy(&server, &[], "slack", &args));
    assert_eq!(
        slack["spec"]["egress"],
        json!([dns_egress(), external_egress()])
    );
    let mut args = args;
    args.mcp_egress =
        serde_json::from_str(r#"{"python-string":[],"both":["apiserver","external"]}"#)
            .expect("map");
    let none = to_json(&mcp_server_policy(&server, &[], "python-string", &args));
    assert_eq!(none["spec"]["egress"], json!([dns_egress()]));
    let both = to_json(&mcp_server_policy(&server, &[], "both", &args));
    assert_eq!(both["spec"]["egress"][1], external_egress());
    assert_eq!(
        both["spec"]["egress"][2]["to"],
        json!([{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["169.254.169.254/32"]}}])
    );
}

#[test]
fn memory_store_policy_reaches_its_models_and_database() {
    let args = NetworkPolicyArgs {
        extra_egress: test_args().extra_egress,
        ..NetworkPolicyArgs::default()
    };
    let models = [
        Target::new("embed", 11434),
        Target::new("llm", 8000),
        Target::new("llm", 8000),
    ];
    let policy = memory_store_policy(
        &workload(Kind::MemoryStore, "pg", 8080),
        &models,
        true,
        &args,
    );
    let [gateway, scraper] = ingress_from_gateway_and_scraper();
    assert_eq!(
        to_json(&policy),
        expected_policy(
            "MemoryStore",
            "pg",
            json!({
                "from": [{"podSelector": {"matchLabels": {"app": "agent"}}}, gateway, scraper],
                "ports": [{"port": 8080, "protocol": "TCP"}]
            }),
            json!([
                dns_egress(),
                {
                    "to": [{"podSelector": {"matchLabels": {"app": "modelapi", "modelapi": "llm"}}}],
                    "ports": [{"port": 8000, "protocol": "TCP"}]
                },
                {
                    "to": [{"podSelector": {"matchLabels": {"app": "modelapi", "modelapi": "embed"}}}],
                    "ports": [{"port": 11434, "protocol": "TCP"}]
                },
                {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["169.254.169.254/32"]}}], "ports": [{"port": 5432, "protocol": "TCP"}]},
                {
                    "to": [{
                        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "observability"}},
                        "podSelector": {"matchLabels": {"app": "otel-collector"}}
                    }],
                    "ports": [{"port": 4317, "protocol": "TCP"}]
                }
            ])
        )
    );
    // Local storage: no database.
    let local = to_json(&memory_store_policy(
        &workload(Kind::MemoryStore, "mem", 8080),
        &[],
        false,
        &args,
    ));
    assert_eq!(local["spec"]["egress"].as_array().map(Vec::len), Some(2));
}

#[test]
fn the_same_graph_gives_byte_identical_policies() {
    let args = test_args();
    let server = workload(Kind::Agent, "a", 8000);
    let deps = AgentDeps {
        model_api: Some(Target::new("llm", 8000)),
        mcp_servers: vec![Target::new("x", 8000), Target::new("y", 8000)],
        peers: vec![Target::new("b", 8000), Target::new("c", 8000)],
        memory_store: None,
    };
    let mut shuffled = deps.clone();
    shuffled.mcp_servers.reverse();
    shuffled.peers.reverse();
    let one = serde_json::to_string(&agent_policy(
        &server,
        &deps,
        &["c".into(), "b".into()],
        &args,
    ));
    let two = serde_json::to_string(&agent_policy(
        &server,
        &shuffled,
        &["b".into(), "c".into()],
        &args,
    ));
    assert_eq!(one.expect("json"), two.expect("json"));
    assert_eq!(
        crate::hash::stable_hash(&agent_policy(&server, &deps, &[], &args)),
        crate::hash::stable_hash(&agent_policy(&server, &shuffled, &[], &args))
    );
}

#[test]
fn endpoints_give_ports() {
    for (url, port) in [
        (
            "http://modelapi-llm.team.svc.cluster.local:11434",
            Some(11434),
        ),
        ("http://agent-a.team.svc.cluster.local:8000/", Some(8000)),
        ("https://[fd00::1]:8443/v1?x=1", Some(8443)),
        ("http://example.com/v1", None),
        ("http://[fd00::1]/v1", None),
        ("http://host:0", None),
        ("not a url", None),
    ] {
        assert_eq!(endpoint_port(url), port, "{url}");
    }
    assert_eq!(Target::from_endpoint("llm", None), Target::any_port("llm"));
    assert_eq!(
        Target::from_endpoint("llm", Some("http://modelapi-llm.team.svc:8000")),
        Target::new("llm", 8000)
    );
}

/// One rendered policy per kind (`rendered/`), as `kaosctl render` would print it; each was
/// checked with `kubernetes-validate --strict` (1.33).
#[test]
fn rendered_policies() {
    let args = NetworkPolicyArgs::default();
    let agent = agent_policy(
        &workload(Kind::Agent, "a", 8000),
        &AgentDeps {
            model_api: Some(Target::new("llm", 8000)),
            mcp_servers: vec![Target::new("tools", 8000)],
            peers: vec![Target::new("b", 8000)],
            memory_store: Some(Target::new("mem", 8080)),
        },
        &["c".into()],
        &args,
    );
    let model_api = model_api_policy(&workload(Kind::ModelApi, "llm", 8000), &args);
    let mcp_server = mcp_server_policy(
        &workload(Kind::McpServer, "tools", 8000),
        &[],
        "kubernetes",
        &args,
    );
    let memory_store = memory_store_policy(
        &workload(Kind::MemoryStore, "mem", 8080),
        &[Target::new("llm", 8000)],
        true,
        &args,
    );
    let workflow_agent = agent_policy(
        &workload(Kind::Agent, "w", 8000),
        &AgentDeps::default(),
        &[],
        &workflow_args("kubernetes.io/metadata.name=kaos-system"),
    );
    // `agent-with-workflow`: an agent with no references, the workflow controller configured
    // as the chart does.
    let rendered = [
        (&agent, include_str!("rendered/agent.yaml")),
        (
            &workflow_agent,
            include_str!("rendered/agent-with-workflow.yaml"),
        ),
        (&model_api, include_str!("rendered/model-api.yaml")),
        (&mcp_server, include_str!("rendered/mcp-server.yaml")),
        (&memory_store, include_str!("rendered/memory-store.yaml")),
    ]
    .map(|(policy, expected)| {
        let yaml = serde_saphyr::to_string(policy).expect("yaml");
        (policy, yaml, expected)
    });
    // `PRINT_RENDERED=1 cargo test -p kaos-workload --lib rendered_policies -- --nocapture`
    // prints them, e.g. for `kubernetes-validate --strict`.
    if std::env::var_os("PRINT_RENDERED").is_some() {
        for (_, yaml, _) in &rendered {
            println!("---\n{yaml}");
        }
    }
    for (policy, yaml, expected) in rendered {
        assert_eq!(yaml, expected);
        // And it reads back as the same object.
        let back: NetworkPolicy = serde_saphyr::from_str(&yaml).expect("parses back");
        assert_eq!(&back, policy);
    }
}
