//! The NetworkPolicy of one workload, from what its controller knows. Every policy selects the
//! workload's pods by its labels, has both policy types (so whatever no rule allows is denied),
//! and is named, labelled and owned as the workload's Deployment.
//!
//! Ingress is one rule: from the workload's clients, the gateway and the scraper (and, for an
//! agent, the workflow controller when configured), to the workload's ports. Egress is DNS,
//! then the in-namespace targets (grouped by port, sorted), then the addresses outside
//! (external, API server, database), then the extra egress.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyIngressRule, NetworkPolicyPeer,
    NetworkPolicyPort, NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta,
};

use super::graph::{AgentEdges, MemoryStoreEdges};
use super::settings::NetworkPolicyArgs;
use super::values::{Cidr, Labels, McpEgress, PortSpec};
use crate::build::workload::Workload;

/// The kinds of generated workloads, and the labels of their pods.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Agent,
    ModelApi,
    McpServer,
    MemoryStore,
}

impl Kind {
    /// The `app` label of the kind's pods; the resource's name is under the same key.
    pub fn app(self) -> &'static str {
        match self {
            Kind::Agent => "agent",
            Kind::ModelApi => "modelapi",
            Kind::McpServer => "mcpserver",
            Kind::MemoryStore => "memorystore",
        }
    }

    /// The labels of the pods of the resource `name` (`app=<kind>, <kind>=<name>`), as each
    /// controller's `labels(name)`.
    pub fn pod_labels(self, name: &str) -> BTreeMap<String, String> {
        [
            ("app".to_string(), self.app().to_string()),
            (self.app().to_string(), name.to_string()),
        ]
        .into()
    }
}

/// A workload another one connects to: its resource's name and, when the caller knows it, the
/// port it serves on. Without a port, egress to its pods is open on every port (their own
/// policy still admits only their ports).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Target {
    pub name: String,
    pub port: Option<i32>,
}

impl Target {
    pub fn new(name: impl Into<String>, port: i32) -> Self {
        Target {
            name: name.into(),
            port: Some(port),
        }
    }

    pub fn any_port(name: impl Into<String>) -> Self {
        Target {
            name: name.into(),
            port: None,
        }
    }

    /// The port of a published endpoint (`http://modelapi-x.ns.svc.cluster.local:11434/...`),
    /// any port when there is none or it names no port.
    pub fn from_endpoint(name: impl Into<String>, endpoint: Option<&str>) -> Self {
        Target {
            name: name.into(),
            port: endpoint.and_then(endpoint_port),
        }
    }
}

/// The explicit port of an `http(s)://host:port/...` URL.
pub fn endpoint_port(url: &str) -> Option<i32> {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next()?;
    let (host, port) = authority.rsplit_once(':')?;
    if host.is_empty() || host.ends_with(':') {
        return None;
    }
    port.parse::<i32>().ok().filter(|p| (1..=65535).contains(p))
}

/// What an Agent connects to (its controller resolves these from the spec: `modelAPI`,
/// `mcpServers`, `agentNetwork.access`, `config.memory.memoryStore`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AgentDeps {
    pub model_api: Option<Target>,
    pub mcp_servers: Vec<Target>,
    /// Agents it lists; its own name is ignored.
    pub peers: Vec<Target>,
    pub memory_store: Option<Target>,
}

impl From<&AgentDeps> for AgentEdges {
    fn from(deps: &AgentDeps) -> Self {
        let names = |targets: &[Target]| targets.iter().map(|t| t.name.clone()).collect();
        AgentEdges {
            model_api: deps.model_api.as_ref().map(|t| t.name.clone()),
            mcp_servers: names(&deps.mcp_servers),
            peers: names(&deps.peers),
            memory_store: deps.memory_store.as_ref().map(|t| t.name.clone()),
        }
    }
}

impl MemoryStoreEdges {
    pub fn new(model_apis: &[Target], external: bool) -> Self {
        MemoryStoreEdges {
            model_apis: model_apis.iter().map(|t| t.name.clone()).collect(),
            external,
        }
    }
}

/// The policy of an Agent's pods: ingress from the agents that list it (`listers`: the
/// reverse of `agentNetwork.access`), the gateway, the scraper and, when its pod labels are
/// set, the workflow controller, on its port; egress to DNS, its ModelAPI, MCP servers, memory
/// store and peers, and the extra egress.
pub fn agent_policy(
    workload: &Workload,
    deps: &AgentDeps,
    listers: &[String],
    args: &NetworkPolicyArgs,
) -> NetworkPolicy {
    let own = workload.owner.name.as_str();
    let listers: BTreeSet<&String> = listers.iter().filter(|l| *l != own).collect();
    let clients = listers
        .into_iter()
        .map(|lister| pod_peer(Kind::Agent.pod_labels(lister)))
        .collect();
    let targets = deps
        .model_api
        .iter()
        .map(|t| (Kind::ModelApi, t))
        .chain(deps.memory_store.iter().map(|t| (Kind::MemoryStore, t)))
        .chain(deps.mcp_servers.iter().map(|t| (Kind::McpServer, t)))
        .chain(
            deps.peers
                .iter()
                .filter(|t| t.name != own)
                .map(|t| (Kind::Agent, t)),
        );
    let mut egress = vec![dns_rule(args)];
    egress.extend(target_rules(targets));
    egress.extend(args.extra_egress_rules());
    let workflow = workflow_peer(args);
    policy(workload, &[workload.port], clients, workflow, egress, args)
}

/// The workflow controller's pods, when configured (it sends A2A tasks to agents). No pod
/// labels: none, rather than every pod of its namespace.
fn workflow_peer(args: &NetworkPolicyArgs) -> Option<NetworkPolicyPeer> {
    args.admits_workflow_controller()
        .then(|| namespaced_peer(&args.workflow_namespace_labels, &args.workflow_pod_labels))
}

/// The controllers that open connections to a ModelAPI's pods: the agent controller reads
/// LiteLLM's usage of budgeted agents, the ModelAPI controller checks the models it serves.
pub const MODEL_API_CHECKERS: &[&str] = &["agent-controller", "modelapi-controller"];
/// The controller that opens connections to an MCP server's pods (its tools check).
pub const MCP_SERVER_CHECKERS: &[&str] = &["mcpserver-controller"];

/// The operator's controllers named `names` (`app.kubernetes.io/name`), when their labels are
/// configured: they check the protocols of the workloads and read LiteLLM's usage.
fn controller_peer(args: &NetworkPolicyArgs, names: &[&str]) -> Option<NetworkPolicyPeer> {
    args.admits_controllers().then(|| {
        let mut peer = namespaced_peer(
            &args.controller_namespace_labels,
            &args.controller_pod_labels,
        );
        if let Some(pods) = peer.pod_selector.as_mut() {
            pods.match_expressions = Some(vec![LabelSelectorRequirement {
                key: "app.kubernetes.io/name".into(),
                operator: "In".into(),
                values: Some(names.iter().map(|n| n.to_string()).collect()),
            }]);
        }
        peer
    })
}

/// The policy of a ModelAPI's pods: ingress from every agent and memory store pod of the
/// namespace (their own egress picks which ModelAPI they reach), the gateway, the scraper and
/// (when configured) the controllers that check it, on its port (8000 for LiteLLM, 11434 for Ollama); egress to DNS, the provider (the external
/// CIDRs and ports) and the extra egress.
pub fn model_api_policy(workload: &Workload, args: &NetworkPolicyArgs) -> NetworkPolicy {
    let clients = vec![
        pod_peer([("app".to_string(), Kind::Agent.app().to_string())].into()),
        pod_peer([("app".to_string(), Kind::MemoryStore.app().to_string())].into()),
    ];
    let mut egress = vec![dns_rule(args)];
    egress.extend(external_rule(args));
    egress.extend(args.extra_egress_rules());
    let checkers = controller_peer(args, MODEL_API_CHECKERS);
    policy(workload, &[workload.port], clients, checkers, egress, args)
}

/// The policy of an MCP server's pods: ingress from every agent pod of the namespace, the
/// gateway, the scraper and (when configured) the MCPServer controller, on the workload's port and `ports` (a custom container's other
/// container ports); egress to DNS, what the runtime's entry of `NETWORK_POLICY_MCP_EGRESS`
/// allows, and the extra egress.
pub fn mcp_server_policy(
    workload: &Workload,
    ports: &[i32],
    runtime: &str,
    args: &NetworkPolicyArgs,
) -> NetworkPolicy {
    let clients = vec![pod_peer(
        [("app".to_string(), Kind::Agent.app().to_string())].into(),
    )];
    let mut egress = vec![dns_rule(args)];
    for kind in args.mcp_egress_of(runtime) {
        egress.extend(match kind {
            McpEgress::External => external_rule(args),
            McpEgress::Apiserver => block_rule(args, &args.apiserver_cidrs, &args.apiserver_ports),
        });
    }
    egress.extend(args.extra_egress_rules());
    let mut all_ports = vec![workload.port];
    all_ports.extend_from_slice(ports);
    let checkers = controller_peer(args, MCP_SERVER_CHECKERS);
    policy(workload, &all_ports, clients, checkers, egress, args)
}

/// The policy of a MemoryStore's pods: ingress from every agent pod of the namespace, the
/// gateway and the scraper, on its port; egress to DNS, its summarization and embedding
/// ModelAPIs, the database when its storage is `external`, and the extra egress.
pub fn memory_store_policy(
    workload: &Workload,
    model_apis: &[Target],
    external: bool,
    args: &NetworkPolicyArgs,
) -> NetworkPolicy {
    let clients = vec![pod_peer(
        [("app".to_string(), Kind::Agent.app().to_string())].into(),
    )];
    let mut egress = vec![dns_rule(args)];
    egress.extend(target_rules(model_apis.iter().map(|t| (Kind::ModelApi, t))));
    if external {
        egress.extend(block_rule(args, &args.database_cidrs, &args.database_ports));
    }
    egress.extend(args.extra_egress_rules());
    policy(workload, &[workload.port], clients, None, egress, args)
}

/// `from` is the workload's clients, then the gateway and the scraper, then `last` (a peer only
/// some kinds admit: appended, so the others keep their places with it on or off).
fn policy(
    workload: &Workload,
    ports: &[i32],
    mut from: Vec<NetworkPolicyPeer>,
    last: Option<NetworkPolicyPeer>,
    egress: Vec<NetworkPolicyEgressRule>,
    args: &NetworkPolicyArgs,
) -> NetworkPolicy {
    from.push(namespaced_peer(
        &args.gateway_namespace_labels,
        &args.gateway_pod_labels,
    ));
    from.push(namespaced_peer(
        &args.scraper_namespace_labels,
        &args.scraper_pod_labels,
    ));
    from.extend(last);
    let ports: BTreeSet<i32> = ports.iter().copied().collect();
    NetworkPolicy {
        metadata: ObjectMeta {
            name: Some(workload.name.clone()),
            namespace: Some(workload.namespace.clone()),
            labels: Some(workload.labels.clone()),
            owner_references: Some(vec![workload.owner.clone()]),
            ..ObjectMeta::default()
        },
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(selector(workload.labels.clone())),
            policy_types: Some(vec!["Ingress".into(), "Egress".into()]),
            ingress: Some(vec![NetworkPolicyIngressRule {
                from: Some(from),
                ports: Some(
                    ports
                        .into_iter()
                        .map(|p| PortSpec::tcp(p).to_policy_port())
                        .collect(),
                ),
            }]),
            egress: Some(egress),
        }),
    }
}

fn selector(labels: BTreeMap<String, String>) -> LabelSelector {
    LabelSelector {
        match_labels: (!labels.is_empty()).then_some(labels),
        match_expressions: None,
    }
}

/// Pods of the policy's namespace.
fn pod_peer(labels: BTreeMap<String, String>) -> NetworkPolicyPeer {
    NetworkPolicyPeer {
        pod_selector: Some(selector(labels)),
        ..NetworkPolicyPeer::default()
    }
}

/// Pods of other namespaces (an empty label set selects all).
fn namespaced_peer(namespace: &Labels, pods: &Labels) -> NetworkPolicyPeer {
    NetworkPolicyPeer {
        namespace_selector: Some(LabelSelector {
            match_labels: namespace.match_labels(),
            match_expressions: None,
        }),
        pod_selector: Some(LabelSelector {
            match_labels: pods.match_labels(),
            match_expressions: None,
        }),
        ip_block: None,
    }
}

fn policy_ports(ports: &[PortSpec]) -> Option<Vec<NetworkPolicyPort>> {
    (!ports.is_empty()).then(|| ports.iter().map(PortSpec::to_policy_port).collect())
}

fn dns_rule(args: &NetworkPolicyArgs) -> NetworkPolicyEgressRule {
    NetworkPolicyEgressRule {
        to: Some(vec![namespaced_peer(
            &args.dns_namespace_labels,
            &args.dns_pod_labels,
        )]),
        ports: policy_ports(&args.dns_ports),
    }
}

/// One rule per port (any port first), each listing its targets' pods by kind then name.
fn target_rules<'a>(
    targets: impl Iterator<Item = (Kind, &'a Target)>,
) -> Vec<NetworkPolicyEgressRule> {
    let mut by_port: BTreeMap<Option<i32>, BTreeSet<(Kind, &str)>> = BTreeMap::new();
    for (kind, target) in targets {
        by_port
            .entry(target.port)
            .or_default()
            .insert((kind, target.name.as_str()));
    }
    by_port
        .into_iter()
        .map(|(port, targets)| NetworkPolicyEgressRule {
            to: Some(
                targets
                    .into_iter()
                    .map(|(kind, name)| pod_peer(kind.pod_labels(name)))
                    .collect(),
            ),
            ports: port.map(|p| vec![PortSpec::tcp(p).to_policy_port()]),
        })
        .collect()
}

/// The external CIDRs minus the cluster's, on the external ports (none when no CIDR is set).
fn external_rule(args: &NetworkPolicyArgs) -> Option<NetworkPolicyEgressRule> {
    let blocks = args.external_blocks();
    (!blocks.is_empty()).then(|| NetworkPolicyEgressRule {
        to: Some(
            blocks
                .into_iter()
                .map(|block| NetworkPolicyPeer {
                    ip_block: Some(block),
                    ..NetworkPolicyPeer::default()
                })
                .collect(),
        ),
        ports: policy_ports(&args.external_ports),
    })
}

/// `cidrs` on `ports`, not cut by the cluster CIDRs, only by the denied ones (none when no
/// CIDR is left).
fn block_rule(
    args: &NetworkPolicyArgs,
    cidrs: &[Cidr],
    ports: &[PortSpec],
) -> Option<NetworkPolicyEgressRule> {
    let blocks = args.blocks(cidrs, &[]);
    (!blocks.is_empty()).then(|| NetworkPolicyEgressRule {
        to: Some(
            blocks
                .into_iter()
                .map(|block| NetworkPolicyPeer {
                    ip_block: Some(block),
                    ..NetworkPolicyPeer::default()
                })
                .collect(),
        ),
        ports: policy_ports(ports),
    })
}
