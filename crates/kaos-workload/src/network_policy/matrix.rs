//! Connectivity-matrix tests: a small NetworkPolicy evaluator (as a CNI enforces the API's
//! semantics) runs every pair of endpoints against the built policies, and the matrix must equal
//! [`allowed_pairs`] of the same graph.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicyPeer, NetworkPolicyPort};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::tests::{NAMESPACE, test_args, workload};
use super::*;

/// Something that connects or is connected to: a pod (with a namespace) or an address outside.
#[derive(Clone, Debug)]
struct Endpoint {
    node: Node,
    ip: IpAddr,
    namespace: Option<String>,
    labels: BTreeMap<String, String>,
    /// What it listens on.
    ports: Vec<(i32, &'static str)>,
}

fn ip(text: &str) -> IpAddr {
    text.parse().expect("ip")
}

fn outside(
    node: Node,
    namespace: Option<&str>,
    labels: &[(&str, &str)],
    address: &str,
    ports: Vec<(i32, &'static str)>,
) -> Endpoint {
    Endpoint {
        node,
        ip: ip(address),
        namespace: namespace.map(String::from),
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ports,
    }
}

/// The endpoints around the namespace's workloads, placed where [`test_args`] points.
fn surroundings() -> Vec<Endpoint> {
    vec![
        outside(
            Node::Gateway,
            Some("envoy-gateway-system"),
            &[("app", "envoy")],
            "10.2.0.1",
            vec![],
        ),
        outside(
            Node::Scraper,
            Some("monitoring"),
            &[("app.kubernetes.io/name", "prometheus")],
            "10.2.0.2",
            vec![],
        ),
        // Where the chart installs it; only reachable-from when the settings name it.
        outside(
            Node::WorkflowController,
            Some("kaos-system"),
            &[("app.kubernetes.io/name", "workflow-controller")],
            "10.2.0.5",
            vec![],
        ),
        outside(
            Node::Dns,
            Some("kube-system"),
            &[("k8s-app", "kube-dns")],
            "10.2.0.3",
            vec![(53, "UDP"), (53, "TCP")],
        ),
        outside(
            Node::ExtraEgress,
            Some("observability"),
            &[("app", "otel-collector")],
            "10.2.0.4",
            vec![(4317, "TCP")],
        ),
        // The provider, outside the cluster.
        outside(
            Node::External,
            None,
            &[],
            "203.0.113.10",
            vec![(443, "TCP")],
        ),
        // kind's API server: a node address, inside 172.16.0.0/12.
        outside(
            Node::ApiServer,
            None,
            &[],
            "172.18.0.2",
            vec![(6443, "TCP")],
        ),
        // An in-cluster pgvector behind a Service of another namespace.
        outside(
            Node::Database,
            Some("db"),
            &[("app", "pgvector")],
            "10.50.0.5",
            vec![(5432, "TCP")],
        ),
    ]
}

/// A pod that is none of the graph's: it reaches nothing of the workloads.
fn intruders() -> Vec<Endpoint> {
    vec![
        outside(
            Node::Agent("not-an-agent".into()),
            Some(NAMESPACE),
            &[("app", "other")],
            "10.1.9.1",
            vec![],
        ),
        // A pod that wears agent labels in another namespace.
        outside(
            Node::Agent("elsewhere".into()),
            Some("other"),
            &[("app", "agent"), ("agent", "a")],
            "10.1.9.2",
            vec![],
        ),
        // One that wears the workflow controller's labels outside its namespace.
        workflow_lookalike(),
    ]
}

fn workflow_lookalike() -> Endpoint {
    outside(
        Node::Agent("workflow-lookalike".into()),
        Some("other"),
        &[("app.kubernetes.io/name", "workflow-controller")],
        "10.1.9.3",
        vec![],
    )
}

/// The resources of one namespace, as the controllers see them.
#[derive(Clone, Default)]
struct Namespace {
    agents: Vec<(&'static str, AgentDeps)>,
    /// Name and port (8000 LiteLLM, 11434 Ollama).
    model_apis: Vec<(&'static str, i32)>,
    /// Name, runtime, extra container ports.
    mcp_servers: Vec<(&'static str, &'static str, Vec<i32>)>,
    /// Name, ModelAPIs, external storage.
    memory_stores: Vec<(&'static str, Vec<Target>, bool)>,
}

impl Namespace {
    fn graph(&self, args: &NetworkPolicyArgs) -> Graph {
        Graph {
            agents: self
                .agents
                .iter()
                .map(|(n, d)| (n.to_string(), AgentEdges::from(d)))
                .collect(),
            model_apis: self.model_apis.iter().map(|(n, _)| n.to_string()).collect(),
            mcp_servers: self
                .mcp_servers
                .iter()
                .map(|(n, runtime, _)| (n.to_string(), args.mcp_egress_of(runtime)))
                .collect(),
            memory_stores: self
                .memory_stores
                .iter()
                .map(|(n, m, e)| (n.to_string(), MemoryStoreEdges::new(m, *e)))
                .collect(),
            extra_egress: !args.extra_egress.0.is_empty(),
            workflow_controller: args.admits_workflow_controller(),
        }
    }

    /// Every workload's policy, each built from its controller's view (an agent's listers come
    /// from the reverse index, here the graph).
    fn policies(&self, args: &NetworkPolicyArgs) -> Vec<NetworkPolicy> {
        let graph = self.graph(args);
        let agents = self.agents.iter().map(|(name, deps)| {
            agent_policy(
                &workload(Kind::Agent, name, 8000),
                deps,
                &graph.listers(name),
                args,
            )
        });
        let model_apis = self
            .model_apis
            .iter()
            .map(|(name, port)| model_api_policy(&workload(Kind::ModelApi, name, *port), args));
        let mcp_servers = self.mcp_servers.iter().map(|(name, runtime, ports)| {
            mcp_server_policy(&workload(Kind::McpServer, name, 8000), ports, runtime, args)
        });
        let stores = self.memory_stores.iter().map(|(name, models, external)| {
            memory_store_policy(
                &workload(Kind::MemoryStore, name, 8080),
                models,
                *external,
                args,
            )
        });
        agents
            .chain(model_apis)
            .chain(mcp_servers)
            .chain(stores)
            .collect()
    }

    fn endpoints(&self) -> Vec<Endpoint> {
        let mut pods: Vec<(Kind, &str, Vec<i32>)> = Vec::new();
        pods.extend(
            self.agents
                .iter()
                .map(|(n, _)| (Kind::Agent, *n, vec![8000])),
        );
        pods.extend(
            self.model_apis
                .iter()
                .map(|(n, p)| (Kind::ModelApi, *n, vec![*p])),
        );
        pods.extend(self.mcp_servers.iter().map(|(n, _, extra)| {
            (
                Kind::McpServer,
                *n,
                std::iter::once(8000).chain(extra.iter().copied()).collect(),
            )
        }));
        pods.extend(
            self.memory_stores
                .iter()
                .map(|(n, _, _)| (Kind::MemoryStore, *n, vec![8080])),
        );
        let mut endpoints: Vec<Endpoint> = pods
            .into_iter()
            .enumerate()
            .map(|(i, (kind, name, ports))| Endpoint {
                node: match kind {
                    Kind::Agent => Node::Agent(name.into()),
                    Kind::ModelApi => Node::ModelApi(name.into()),
                    Kind::McpServer => Node::McpServer(name.into()),
                    Kind::MemoryStore => Node::MemoryStore(name.into()),
                },
                ip: ip(&format!("10.1.0.{}", i + 1)),
                namespace: Some(NAMESPACE.into()),
                labels: kind.pod_labels(name),
                ports: ports.into_iter().map(|p| (p, "TCP")).collect(),
            })
            .collect();
        endpoints.extend(surroundings());
        endpoints
    }
}

fn selects(selector: Option<&LabelSelector>, labels: &BTreeMap<String, String>) -> bool {
    let Some(selector) = selector else {
        return true;
    };
    let labels_match = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let expressions_match = selector.match_expressions.iter().flatten().all(|e| {
        let values = e.values.clone().unwrap_or_default();
        let value = labels.get(&e.key);
        match e.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            other => panic!("operator {other}"),
        }
    });
    labels_match && expressions_match
}

fn namespace_labels(namespace: &str) -> BTreeMap<String, String> {
    [(
        "kubernetes.io/metadata.name".to_string(),
        namespace.to_string(),
    )]
    .into()
}

/// Whether `peer`, of a policy in `policy_namespace`, is `endpoint`.
fn peer_matches(peer: &NetworkPolicyPeer, policy_namespace: &str, endpoint: &Endpoint) -> bool {
    if let Some(block) = &peer.ip_block {
        let cidr = Cidr::parse(&block.cidr).expect("canonical cidr");
        let excepted = block.except.iter().flatten().any(|e| {
            Cidr::parse(e)
                .expect("canonical except")
                .contains_ip(endpoint.ip)
        });
        return cidr.contains_ip(endpoint.ip) && !excepted;
    }
    let Some(namespace) = &endpoint.namespace else {
        return false;
    };
    let namespace_ok = match &peer.namespace_selector {
        Some(selector) => selects(Some(selector), &namespace_labels(namespace)),
        None => namespace == policy_namespace,
    };
    namespace_ok && selects(peer.pod_selector.as_ref(), &endpoint.labels)
}

fn port_matches(ports: Option<&Vec<NetworkPolicyPort>>, port: i32, protocol: &str) -> bool {
    let Some(ports) = ports.filter(|p| !p.is_empty()) else {
        return true;
    };
    ports.iter().any(|p| {
        let protocol_ok = p.protocol.as_deref().unwrap_or("TCP") == protocol;
        let port_ok = match &p.port {
            None => true,
            Some(IntOrString::Int(first)) => {
                *first == port
                    || p.end_port
                        .is_some_and(|last| *first <= port && port <= last)
            }
            Some(IntOrString::String(name)) => panic!("named port {name}"),
        };
        protocol_ok && port_ok
    })
}

/// The policies of `endpoint`'s namespace that select it for `policy_type`.
fn selecting<'a>(
    policies: &'a [NetworkPolicy],
    endpoint: &Endpoint,
    policy_type: &str,
) -> Vec<&'a NetworkPolicy> {
    policies
        .iter()
        .filter(|p| {
            let spec = p.spec.as_ref().expect("spec");
            endpoint.namespace.is_some()
                && p.metadata.namespace == endpoint.namespace
                && spec.policy_types.iter().flatten().any(|t| t == policy_type)
                && selects(spec.pod_selector.as_ref(), &endpoint.labels)
        })
        .collect()
}

/// Whether `from` may open a connection to `to` on `port`/`protocol`: `from`'s egress and
/// `to`'s ingress both allow it (a side no policy selects allows everything).
fn allows(
    policies: &[NetworkPolicy],
    from: &Endpoint,
    to: &Endpoint,
    port: i32,
    protocol: &str,
) -> bool {
    let egress = selecting(policies, from, "Egress");
    let egress_ok = egress.is_empty()
        || egress.iter().any(|p| {
            let namespace = p.metadata.namespace.as_deref().unwrap_or_default();
            p.spec
                .as_ref()
                .and_then(|s| s.egress.as_ref())
                .into_iter()
                .flatten()
                .any(|rule| {
                    port_matches(rule.ports.as_ref(), port, protocol)
                        && rule.to.as_ref().is_none_or(|to_| {
                            to_.is_empty()
                                || to_.iter().any(|peer| peer_matches(peer, namespace, to))
                        })
                })
        });
    let ingress = selecting(policies, to, "Ingress");
    let ingress_ok = ingress.is_empty()
        || ingress.iter().any(|p| {
            let namespace = p.metadata.namespace.as_deref().unwrap_or_default();
            p.spec
                .as_ref()
                .and_then(|s| s.ingress.as_ref())
                .into_iter()
                .flatten()
                .any(|rule| {
                    port_matches(rule.ports.as_ref(), port, protocol)
                        && rule.from.as_ref().is_none_or(|from_| {
                            from_.is_empty()
                                || from_.iter().any(|peer| peer_matches(peer, namespace, from))
                        })
                })
        });
    egress_ok && ingress_ok
}

fn connects(policies: &[NetworkPolicy], from: &Endpoint, to: &Endpoint) -> bool {
    to.ports
        .iter()
        .any(|(port, protocol)| allows(policies, from, to, *port, protocol))
}

/// Every pair of distinct endpoints, one of them the namespace's, that connects (what the
/// surroundings do among themselves is none of the policies' business).
fn matrix(policies: &[NetworkPolicy], endpoints: &[Endpoint]) -> BTreeSet<(Node, Node)> {
    let ours = |e: &Endpoint| e.namespace.as_deref() == Some(NAMESPACE);
    let mut pairs = BTreeSet::new();
    for from in endpoints {
        for to in endpoints {
            if from.node != to.node && (ours(from) || ours(to)) && connects(policies, from, to) {
                pairs.insert((from.node.clone(), to.node.clone()));
            }
        }
    }
    pairs
}

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
