//! The dependency graph of one namespace's workloads and the pairs of endpoints it lets open
//! connections. The builders turn each workload's slice of the same graph into its policy; the
//! connectivity-matrix tests check that the policies allow exactly [`allowed_pairs`].

use std::collections::{BTreeMap, BTreeSet};

use super::build::{MCP_SERVER_CHECKERS, MODEL_API_CHECKERS};
use super::values::McpEgress;

/// An endpoint of the graph: a generated workload (by its resource's name) or something outside
/// the namespace's workloads.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Node {
    Agent(String),
    ModelApi(String),
    McpServer(String),
    MemoryStore(String),
    /// The gateway's proxy pods (`NETWORK_POLICY_GATEWAY_*_LABELS`).
    Gateway,
    /// The metrics scraper's pods (`NETWORK_POLICY_SCRAPER_*_LABELS`).
    Scraper,
    /// The workflow controller's pods (`NETWORK_POLICY_WORKFLOW_*_LABELS`): it sends A2A tasks
    /// to agents only.
    WorkflowController,
    /// One of the operator's controllers (`NETWORK_POLICY_CONTROLLER_*_LABELS` and its
    /// `app.kubernetes.io/name`): they check the protocols of the workloads they run.
    Controller(&'static str),
    /// The cluster DNS pods (`NETWORK_POLICY_DNS_*`).
    Dns,
    /// An address in the external CIDRs outside the cluster CIDRs, on an external port: a
    /// ModelAPI's provider, the outside world of an `external` MCP server.
    External,
    /// An address of the API server CIDRs on an API server port.
    ApiServer,
    /// An address of the database CIDRs on a database port.
    Database,
    /// What `NETWORK_POLICY_EXTRA_EGRESS` lets every pod reach (e.g. a telemetry collector).
    ExtraEgress,
    /// The cloud metadata service (`NETWORK_POLICY_DENIED_CIDRS`): no workload reaches it.
    Metadata,
}

/// What one Agent connects to, by name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AgentEdges {
    pub model_api: Option<String>,
    pub mcp_servers: BTreeSet<String>,
    /// Agents this one lists in `agentNetwork.access` (itself excluded by [`allowed_pairs`]).
    pub peers: BTreeSet<String>,
    pub memory_store: Option<String>,
}

/// What one MemoryStore connects to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryStoreEdges {
    /// Its summarization and embedding ModelAPIs.
    pub model_apis: BTreeSet<String>,
    /// `external` storage: it reaches its database.
    pub external: bool,
}

/// The workloads of one namespace and their references.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Graph {
    pub agents: BTreeMap<String, AgentEdges>,
    pub model_apis: BTreeSet<String>,
    /// MCP servers with their egress (`NetworkPolicyArgs::mcp_egress_of` of their runtime).
    pub mcp_servers: BTreeMap<String, BTreeSet<McpEgress>>,
    pub memory_stores: BTreeMap<String, MemoryStoreEdges>,
    /// Whether `NETWORK_POLICY_EXTRA_EGRESS` has rules.
    pub extra_egress: bool,
    /// Whether agents admit the workflow controller
    /// (`NetworkPolicyArgs::admits_workflow_controller`).
    pub workflow_controller: bool,
    /// Whether workloads admit the operator's controllers
    /// (`NetworkPolicyArgs::admits_controllers`).
    pub controllers: bool,
}

impl Graph {
    /// The agents that list `agent` as a peer, sorted: those its policy admits. This is the
    /// reverse relation the agent controller must index.
    pub fn listers(&self, agent: &str) -> Vec<String> {
        self.agents
            .iter()
            .filter(|(name, edges)| *name != agent && edges.peers.contains(agent))
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Every workload of the graph, sorted.
    pub fn workloads(&self) -> Vec<Node> {
        let agents = self.agents.keys().cloned().map(Node::Agent);
        let model_apis = self.model_apis.iter().cloned().map(Node::ModelApi);
        let mcp_servers = self.mcp_servers.keys().cloned().map(Node::McpServer);
        let stores = self.memory_stores.keys().cloned().map(Node::MemoryStore);
        let mut nodes: Vec<Node> = agents
            .chain(model_apis)
            .chain(mcp_servers)
            .chain(stores)
            .collect();
        nodes.sort();
        nodes
    }
}

/// Who may open connections to whom: `(from, to)`.
///
/// - every workload → DNS, and → the extra egress when there is some;
/// - the gateway and the scraper → every workload (the gateway routes to all four kinds);
/// - the workflow controller, when configured → every agent (it talks A2A to agents, and to
///   nothing else);
/// - the controllers, when configured → what they check: the agent and ModelAPI controllers →
///   every ModelAPI (usage, models), the MCPServer controller → every MCP server (tools);
/// - an agent → its ModelAPI, its MCP servers, its memory store and the agents it lists (not
///   itself);
/// - a memory store → its ModelAPIs, and → the database when its storage is external;
/// - a ModelAPI → external (its provider);
/// - an MCP server → external and/or the API server, per its runtime.
///
/// References may name workloads that do not exist (yet): the pair is listed all the same, as
/// the policies allow it by label.
pub fn allowed_pairs(graph: &Graph) -> BTreeSet<(Node, Node)> {
    let mut pairs = BTreeSet::new();
    for workload in graph.workloads() {
        pairs.insert((workload.clone(), Node::Dns));
        if graph.extra_egress {
            pairs.insert((workload.clone(), Node::ExtraEgress));
        }
        pairs.insert((Node::Gateway, workload.clone()));
        pairs.insert((Node::Scraper, workload));
    }
    for (name, edges) in &graph.agents {
        let from = Node::Agent(name.clone());
        if graph.workflow_controller {
            pairs.insert((Node::WorkflowController, from.clone()));
        }
        let targets = edges
            .model_api
            .iter()
            .cloned()
            .map(Node::ModelApi)
            .chain(edges.mcp_servers.iter().cloned().map(Node::McpServer))
            .chain(edges.memory_store.iter().cloned().map(Node::MemoryStore))
            .chain(
                edges
                    .peers
                    .iter()
                    .filter(|peer| *peer != name)
                    .cloned()
                    .map(Node::Agent),
            );
        for to in targets {
            pairs.insert((from.clone(), to));
        }
    }
    for name in &graph.model_apis {
        pairs.insert((Node::ModelApi(name.clone()), Node::External));
        if graph.controllers {
            for checker in MODEL_API_CHECKERS {
                pairs.insert((Node::Controller(checker), Node::ModelApi(name.clone())));
            }
        }
    }
    for name in graph.mcp_servers.keys().filter(|_| graph.controllers) {
        for checker in MCP_SERVER_CHECKERS {
            pairs.insert((Node::Controller(checker), Node::McpServer(name.clone())));
        }
    }
    for (name, egress) in &graph.mcp_servers {
        for kind in egress {
            let to = match kind {
                McpEgress::External => Node::External,
                McpEgress::Apiserver => Node::ApiServer,
            };
            pairs.insert((Node::McpServer(name.clone()), to));
        }
    }
    for (name, edges) in &graph.memory_stores {
        let from = Node::MemoryStore(name.clone());
        for model_api in &edges.model_apis {
            pairs.insert((from.clone(), Node::ModelApi(model_api.clone())));
        }
        if edges.external {
            pairs.insert((from, Node::Database));
        }
    }
    pairs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listers_are_the_reverse_of_peers() {
        let mut graph = Graph::default();
        for (name, peers) in [("a", vec!["b", "c"]), ("b", vec!["b", "c"]), ("c", vec![])] {
            graph.agents.insert(
                name.into(),
                AgentEdges {
                    peers: peers.into_iter().map(String::from).collect(),
                    ..AgentEdges::default()
                },
            );
        }
        assert_eq!(graph.listers("c"), ["a", "b"]);
        // A self-listing agent is not its own lister.
        assert_eq!(graph.listers("b"), ["a"]);
        assert!(graph.listers("a").is_empty());
        let pairs = allowed_pairs(&graph);
        assert!(!pairs.contains(&(Node::Agent("b".into()), Node::Agent("b".into()))));
        assert!(pairs.contains(&(Node::Agent("b".into()), Node::Agent("c".into()))));
        assert!(!pairs.contains(&(Node::Agent("c".into()), Node::Agent("a".into()))));
    }

    #[test]
    fn the_workflow_controller_reaches_agents_only_when_configured() {
        let mut graph = Graph::default();
        graph.agents.insert("a".into(), AgentEdges::default());
        graph.agents.insert("b".into(), AgentEdges::default());
        graph.model_apis.insert("llm".into());
        graph.mcp_servers.insert("tools".into(), BTreeSet::new());
        graph
            .memory_stores
            .insert("mem".into(), MemoryStoreEdges::default());
        let from_workflow = |graph: &Graph| -> BTreeSet<Node> {
            allowed_pairs(graph)
                .into_iter()
                .filter(|(from, _)| *from == Node::WorkflowController)
                .map(|(_, to)| to)
                .collect()
        };
        assert!(from_workflow(&graph).is_empty());
        graph.workflow_controller = true;
        assert_eq!(
            from_workflow(&graph),
            [Node::Agent("a".into()), Node::Agent("b".into())].into()
        );
        // Nothing connects to it.
        assert!(
            !allowed_pairs(&graph)
                .iter()
                .any(|(_, to)| *to == Node::WorkflowController)
        );
    }

    #[test]
    fn every_workload_reaches_dns_and_is_reached_by_gateway_and_scraper() {
        let mut graph = Graph::default();
        graph.model_apis.insert("llm".into());
        graph
            .mcp_servers
            .insert("k8s".into(), [McpEgress::Apiserver].into());
        graph.memory_stores.insert(
            "mem".into(),
            MemoryStoreEdges {
                model_apis: ["llm".into()].into(),
                external: true,
            },
        );
        let llm = Node::ModelApi("llm".into());
        let k8s = Node::McpServer("k8s".into());
        let mem = Node::MemoryStore("mem".into());
        let expected: BTreeSet<(Node, Node)> = [
            (llm.clone(), Node::Dns),
            (k8s.clone(), Node::Dns),
            (mem.clone(), Node::Dns),
            (Node::Gateway, llm.clone()),
            (Node::Gateway, k8s.clone()),
            (Node::Gateway, mem.clone()),
            (Node::Scraper, llm.clone()),
            (Node::Scraper, k8s.clone()),
            (Node::Scraper, mem.clone()),
            (llm.clone(), Node::External),
            (k8s, Node::ApiServer),
            (mem.clone(), llm),
            (mem, Node::Database),
        ]
        .into();
        assert_eq!(allowed_pairs(&graph), expected);
    }
}
