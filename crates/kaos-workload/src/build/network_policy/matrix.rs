//! Connectivity-matrix tests: a small NetworkPolicy evaluator (as a CNI enforces the API's
//! semantics) runs every pair of endpoints against the built policies, and the matrix must equal
//! [`allowed_pairs`] of the same graph.

use std::collections::BTreeSet;

use super::tests::{NAMESPACE, test_args};
use super::*;

mod evaluator;
mod world;

use evaluator::{connects, matrix};
use world::{Namespace, intruders, workflow_lookalike};

/// Builds every policy of `namespace` and checks the matrix against the graph; returns the
/// pairs for the scenario's own assertions.
fn assert_matrix(namespace: &Namespace) -> BTreeSet<(Node, Node)> {
    assert_matrix_with(namespace, &test_args())
}

/// [`assert_matrix`] with other settings.
fn assert_matrix_with(namespace: &Namespace, args: &NetworkPolicyArgs) -> BTreeSet<(Node, Node)> {
    let policies = namespace.policies(args);
    let endpoints = namespace.endpoints();
    let present: BTreeSet<&Node> = endpoints.iter().map(|e| &e.node).collect();
    let expected: BTreeSet<(Node, Node)> = allowed_pairs(&namespace.graph(args))
        .into_iter()
        .filter(|(from, to)| present.contains(from) && present.contains(to))
        .collect();
    let actual = matrix(&policies, &endpoints);
    let missing: Vec<_> = expected.difference(&actual).collect();
    let extra: Vec<_> = actual.difference(&expected).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "denied but allowed by the graph: {missing:?}\nallowed but not in the graph: {extra:?}"
    );
    // Pods outside the graph reach no workload.
    for intruder in intruders() {
        for to in endpoints
            .iter()
            .filter(|e| e.namespace.as_deref() == Some(NAMESPACE))
        {
            assert!(
                !connects(&policies, &intruder, to),
                "{:?} → {:?}",
                intruder.node,
                to.node
            );
        }
    }
    actual
}

fn agent(model_api: &str, peers: &[&str]) -> AgentDeps {
    AgentDeps {
        model_api: Some(Target::new(model_api, 8000)),
        peers: peers.iter().map(|p| Target::new(*p, 8000)).collect(),
        ..AgentDeps::default()
    }
}

fn a(name: &str) -> Node {
    Node::Agent(name.into())
}

#[test]
fn star_coordinator_and_three_workers() {
    let namespace = Namespace {
        agents: vec![
            (
                "coordinator",
                AgentDeps {
                    mcp_servers: vec![Target::new("tools", 8000)],
                    memory_store: Some(Target::new("mem", 8080)),
                    ..agent("llm", &["w1", "w2", "w3"])
                },
            ),
            ("w1", agent("llm", &[])),
            (
                "w2",
                AgentDeps {
                    model_api: Some(Target::new("ollama", 11434)),
                    mcp_servers: vec![Target::new("k8s", 8000)],
                    ..AgentDeps::default()
                },
            ),
            // Its ModelAPI's port is not known yet: any port of those pods.
            (
                "w3",
                AgentDeps {
                    model_api: Some(Target::any_port("ollama")),
                    ..agent("llm", &[])
                },
            ),
        ],
        model_apis: vec![("llm", 8000), ("ollama", 11434)],
        mcp_servers: vec![
            ("tools", "python-string", vec![]),
            ("k8s", "kubernetes", vec![9000]),
        ],
        memory_stores: vec![
            ("mem", vec![Target::new("ollama", 11434)], false),
            ("pg", vec![Target::new("llm", 8000)], true),
        ],
    };
    let pairs = assert_matrix(&namespace);
    for worker in ["w1", "w2", "w3"] {
        assert!(pairs.contains(&(a("coordinator"), a(worker))));
        assert!(!pairs.contains(&(a(worker), a("coordinator"))));
        for other in ["w1", "w2", "w3"].into_iter().filter(|o| *o != worker) {
            assert!(!pairs.contains(&(a(worker), a(other))));
        }
    }
    // Only ModelAPIs and `external` MCP servers reach the outside; only `kubernetes` the API.
    let outside: BTreeSet<&Node> = pairs
        .iter()
        .filter(|(_, to)| *to == Node::External)
        .map(|(f, _)| f)
        .collect();
    assert_eq!(
        outside,
        [
            &Node::ModelApi("llm".into()),
            &Node::ModelApi("ollama".into()),
            &Node::McpServer("tools".into())
        ]
        .into()
    );
    assert!(pairs.contains(&(Node::McpServer("k8s".into()), Node::ApiServer)));
    assert!(pairs.contains(&(Node::MemoryStore("pg".into()), Node::Database)));
    assert!(!pairs.contains(&(Node::MemoryStore("mem".into()), Node::Database)));
    assert!(!pairs.contains(&(a("w1"), Node::ModelApi("ollama".into()))));
}

#[test]
fn pair_that_lists_each_other() {
    let namespace = Namespace {
        agents: vec![
            ("a", agent("llm", &["b"])),
            ("b", agent("llm", &["a", "b"])),
        ],
        model_apis: vec![("llm", 8000)],
        ..Namespace::default()
    };
    let pairs = assert_matrix(&namespace);
    assert!(pairs.contains(&(a("a"), a("b"))) && pairs.contains(&(a("b"), a("a"))));
}

#[test]
fn agent_without_peers_reaches_only_its_dependencies() {
    let namespace = Namespace {
        agents: vec![("alone", agent("llm", &[])), ("other", agent("llm", &[]))],
        model_apis: vec![("llm", 8000)],
        ..Namespace::default()
    };
    let pairs = assert_matrix(&namespace);
    let from_alone: BTreeSet<&Node> = pairs
        .iter()
        .filter(|(f, _)| *f == a("alone"))
        .map(|(_, t)| t)
        .collect();
    assert_eq!(
        from_alone,
        [
            &Node::ModelApi("llm".into()),
            &Node::Dns,
            &Node::ExtraEgress
        ]
        .into()
    );
    let to_alone: BTreeSet<&Node> = pairs
        .iter()
        .filter(|(_, t)| *t == a("alone"))
        .map(|(f, _)| f)
        .collect();
    assert_eq!(to_alone, [&Node::Gateway, &Node::Scraper].into());
}

#[test]
fn removed_peer_is_denied_both_ways_after_the_rebuild() {
    let mut namespace = Namespace {
        agents: vec![("a", agent("llm", &["b"])), ("b", agent("llm", &[]))],
        model_apis: vec![("llm", 8000)],
        ..Namespace::default()
    };
    let before = assert_matrix(&namespace);
    assert!(before.contains(&(a("a"), a("b"))));
    assert!(!before.contains(&(a("b"), a("a"))));
    let old_policies = namespace.policies(&test_args());

    namespace.agents[0].1.peers.clear();
    let after = assert_matrix(&namespace);
    assert!(!after.contains(&(a("a"), a("b"))) && !after.contains(&(a("b"), a("a"))));

    // Losing a peer takes effect with either side rebuilt; gaining one needs both: the new
    // peer's policy must admit its new lister (the agent controller's reverse relation).
    let new_policies = namespace.policies(&test_args());
    let endpoints = namespace.endpoints();
    let [pod_a, pod_b] =
        [a("a"), a("b")].map(|n| endpoints.iter().find(|e| e.node == n).expect("pod").clone());
    let a_rebuilt_only = vec![new_policies[0].clone(), old_policies[1].clone()];
    assert!(!connects(&a_rebuilt_only, &pod_a, &pod_b));
    let b_rebuilt_only = vec![old_policies[0].clone(), new_policies[1].clone()];
    assert!(!connects(&b_rebuilt_only, &pod_a, &pod_b));

    namespace.agents[0].1.peers.push(Target::new("b", 8000));
    let regained = namespace.policies(&test_args());
    let a_gained_only = vec![regained[0].clone(), new_policies[1].clone()];
    assert!(!connects(&a_gained_only, &pod_a, &pod_b));
    assert!(connects(&regained, &pod_a, &pod_b));
}

#[test]
fn without_policies_everything_connects() {
    // The evaluator's baseline: a namespace whose workloads have no policy is open.
    let namespace = Namespace {
        agents: vec![("a", agent("llm", &[])), ("b", agent("llm", &[]))],
        model_apis: vec![("llm", 8000)],
        ..Namespace::default()
    };
    let endpoints = namespace.endpoints();
    let pairs = matrix(&[], &endpoints);
    assert!(pairs.contains(&(a("b"), a("a"))));
    assert!(pairs.contains(&(Node::ModelApi("llm".into()), Node::Database)));
}

/// Agents and one workload of every other kind, for the workflow controller's cases.
fn every_kind() -> Namespace {
    Namespace {
        agents: vec![
            (
                "coordinator",
                AgentDeps {
                    mcp_servers: vec![Target::new("tools", 8000)],
                    memory_store: Some(Target::new("mem", 8080)),
                    ..agent("llm", &["worker"])
                },
            ),
            ("worker", agent("llm", &[])),
        ],
        model_apis: vec![("llm", 8000)],
        mcp_servers: vec![("tools", "python-string", vec![])],
        memory_stores: vec![("mem", vec![Target::new("llm", 8000)], false)],
    }
}

/// [`test_args`] with the workflow controller where the chart puts it.
fn workflow_args(namespace_labels: &str) -> NetworkPolicyArgs {
    NetworkPolicyArgs {
        workflow_namespace_labels: Labels::parse(namespace_labels).expect("labels"),
        workflow_pod_labels: Labels::parse("app.kubernetes.io/name=workflow-controller")
            .expect("labels"),
        ..test_args()
    }
}

fn touching_workflow(pairs: &BTreeSet<(Node, Node)>) -> BTreeSet<(Node, Node)> {
    pairs
        .iter()
        .filter(|(from, to)| *from == Node::WorkflowController || *to == Node::WorkflowController)
        .cloned()
        .collect()
}

#[test]
fn configured_workflow_controller_reaches_every_agent_and_nothing_else() {
    let pairs = assert_matrix_with(
        &every_kind(),
        &workflow_args("kubernetes.io/metadata.name=kaos-system"),
    );
    // Agents only (not the ModelAPI, MCP server or MemoryStore), and nothing reaches it; the
    // lookalike of another namespace is among the intruders `assert_matrix_with` turns away.
    assert_eq!(
        touching_workflow(&pairs),
        [
            (Node::WorkflowController, a("coordinator")),
            (Node::WorkflowController, a("worker")),
        ]
        .into()
    );
}

#[test]
fn unconfigured_workflow_controller_reaches_nothing() {
    let pairs = assert_matrix(&every_kind());
    assert!(touching_workflow(&pairs).is_empty());
    // The namespace alone is not enough: without pod labels there is no workflow peer.
    let namespace_only = NetworkPolicyArgs {
        workflow_namespace_labels: Labels::parse("kubernetes.io/metadata.name=kaos-system")
            .expect("labels"),
        ..test_args()
    };
    let pairs = assert_matrix_with(&every_kind(), &namespace_only);
    assert!(touching_workflow(&pairs).is_empty());
}

#[test]
fn workflow_pod_labels_without_a_namespace_match_every_namespace() {
    // The documented risk of leaving the namespace labels empty: a pod of any namespace that
    // wears the pod labels reaches every agent (still no other workload).
    let namespace = every_kind();
    let policies = namespace.policies(&workflow_args(""));
    let lookalike = workflow_lookalike();
    for to in namespace.endpoints() {
        if to.namespace.as_deref() == Some(NAMESPACE) {
            let is_agent = matches!(to.node, Node::Agent(_));
            assert_eq!(
                connects(&policies, &lookalike, &to),
                is_agent,
                "{:?}",
                to.node
            );
        }
    }
}

/// [`test_args`] with the operator's controllers where the chart puts them.
fn controller_args() -> NetworkPolicyArgs {
    NetworkPolicyArgs {
        controller_namespace_labels: Labels::parse("kubernetes.io/metadata.name=kaos-system")
            .expect("labels"),
        controller_pod_labels: Labels::parse(
            "app.kubernetes.io/instance=kaos,app.kubernetes.io/part-of=kaos",
        )
        .expect("labels"),
        ..test_args()
    }
}

fn touching_controllers(pairs: &BTreeSet<(Node, Node)>) -> BTreeSet<(Node, Node)> {
    let controller = |n: &Node| matches!(n, Node::Controller(_));
    pairs
        .iter()
        .filter(|(from, to)| controller(from) || controller(to))
        .cloned()
        .collect()
}

#[test]
fn configured_controllers_reach_what_they_check_and_nothing_else() {
    let pairs = assert_matrix_with(&every_kind(), &controller_args());
    // The agent and ModelAPI controllers reach the ModelAPI (usage, models), the MCPServer
    // controller the MCP server (tools); no controller reaches an agent or the MemoryStore,
    // the others nothing; the lookalike of another namespace is among the intruders.
    assert_eq!(
        touching_controllers(&pairs),
        [
            (
                Node::Controller("agent-controller"),
                Node::ModelApi("llm".into())
            ),
            (
                Node::Controller("modelapi-controller"),
                Node::ModelApi("llm".into())
            ),
            (
                Node::Controller("mcpserver-controller"),
                Node::McpServer("tools".into())
            ),
        ]
        .into()
    );
}

#[test]
fn unconfigured_controllers_reach_nothing() {
    let pairs = assert_matrix(&every_kind());
    assert!(touching_controllers(&pairs).is_empty());
}

/// Every range as wide as it gets, IPv4 and IPv6: external, API server and database
/// everywhere, and extra egress rules to any address and to the metadata address itself.
fn widest_args(denied: &str) -> NetworkPolicyArgs {
    let cidrs = |text: &str| {
        text.split(',')
            .filter(|c| !c.is_empty())
            .map(|c| Cidr::parse(c).expect("cidr"))
            .collect()
    };
    NetworkPolicyArgs {
        external_cidrs: cidrs("0.0.0.0/0,::/0"),
        apiserver_cidrs: cidrs("0.0.0.0/0,::/0"),
        database_cidrs: cidrs("0.0.0.0/0,::/0"),
        extra_egress: serde_json::from_value(serde_json::json!([
            {"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}, {"ipBlock": {"cidr": "::/0"}}]},
            {"to": [{"ipBlock": {"cidr": "169.254.169.254/32"}}], "ports": [{"port": 80}]}
        ]))
        .expect("extra egress"),
        denied_cidrs: cidrs(denied),
        ..test_args()
    }
}

/// Every kind, with an MCP server that reaches the API server and a MemoryStore that reaches
/// its database: each kind of egress the settings can open.
fn every_egress() -> Namespace {
    let mut namespace = every_kind();
    namespace
        .mcp_servers
        .push(("kube", "kubernetes", Vec::new()));
    namespace
        .memory_stores
        .push(("pg", vec![Target::new("llm", 8000)], true));
    namespace
}

fn reaching_metadata(args: &NetworkPolicyArgs) -> BTreeSet<Node> {
    let namespace = every_egress();
    matrix(&namespace.policies(args), &namespace.endpoints())
        .into_iter()
        .filter(|(_, to)| *to == Node::Metadata)
        .map(|(from, _)| from)
        .collect()
}

#[test]
fn the_metadata_service_is_unreachable_however_wide_the_egress() {
    // The default denied CIDRs hold, over IPv4 and IPv6, even against an extra egress rule that
    // names the metadata address (that rule is left out: with no peer left it would allow all).
    assert_eq!(
        reaching_metadata(&widest_args("169.254.169.254/32,fd00:ec2::254/128")),
        BTreeSet::new()
    );
    assert_eq!(
        reaching_metadata(&NetworkPolicyArgs {
            denied_cidrs: NetworkPolicyArgs::default().denied_cidrs,
            ..widest_args("")
        }),
        BTreeSet::new()
    );
    // Denied nothing (an explicit empty setting), the same settings reach it from every pod.
    let open = reaching_metadata(&widest_args(""));
    assert!(open.contains(&Node::ModelApi("llm".into())), "{open:?}");
    assert!(open.contains(&Node::Agent("worker".into())), "{open:?}");
}
