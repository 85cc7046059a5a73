//! The world around a namespace's workloads: the pods and addresses the matrix tests place
//! where [`test_args`] points, pods that are none of the graph's, and the resources of one
//! namespace as the controllers see them.

use std::net::IpAddr;

use k8s_openapi::api::networking::v1::NetworkPolicy;

use super::super::tests::{NAMESPACE, workload};
use super::super::*;
use super::evaluator::Endpoint;

pub(super) fn ip(text: &str) -> IpAddr {
    text.parse().expect("ip")
}

pub(super) fn outside(
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
pub(super) fn surroundings() -> Vec<Endpoint> {
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
        // The operator's controllers where the chart installs them; reachable-from only when the
        // settings name them, and then each only what it checks.
        controller("agent-controller", "10.2.0.6"),
        controller("modelapi-controller", "10.2.0.7"),
        controller("mcpserver-controller", "10.2.0.8"),
        controller("memorystore-controller", "10.2.0.9"),
        controller("authz-controller", "10.2.0.10"),
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
        // The cloud metadata service, at its IPv4 and AWS's IPv6 address: inside every
        // external range and never reachable.
        outside(
            Node::Metadata,
            None,
            &[],
            "169.254.169.254",
            vec![(80, "TCP")],
        ),
        outside(
            Node::Metadata,
            None,
            &[],
            "fd00:ec2::254",
            vec![(80, "TCP")],
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

fn controller(name: &'static str, ip: &str) -> Endpoint {
    let labels = [
        ("app.kubernetes.io/name", name),
        ("app.kubernetes.io/instance", "kaos"),
        ("app.kubernetes.io/part-of", "kaos"),
    ];
    outside(
        Node::Controller(name),
        Some("kaos-system"),
        &labels,
        ip,
        vec![],
    )
}

/// A pod that wears a checking controller's labels outside the operator's namespace.
pub(super) fn controller_lookalike() -> Endpoint {
    outside(
        Node::Agent("controller-lookalike".into()),
        Some("other"),
        &[
            ("app.kubernetes.io/name", "agent-controller"),
            ("app.kubernetes.io/instance", "kaos"),
            ("app.kubernetes.io/part-of", "kaos"),
        ],
        "10.1.9.4",
        vec![],
    )
}

/// A pod that is none of the graph's: it reaches nothing of the workloads.
pub(super) fn intruders() -> Vec<Endpoint> {
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
        controller_lookalike(),
    ]
}

pub(super) fn workflow_lookalike() -> Endpoint {
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
pub(super) struct Namespace {
    pub(super) agents: Vec<(&'static str, AgentDeps)>,
    /// Name and port (8000 LiteLLM, 11434 Ollama).
    pub(super) model_apis: Vec<(&'static str, i32)>,
    /// Name, runtime, extra container ports.
    pub(super) mcp_servers: Vec<(&'static str, &'static str, Vec<i32>)>,
    /// Name, ModelAPIs, external storage.
    pub(super) memory_stores: Vec<(&'static str, Vec<Target>, bool)>,
}

impl Namespace {
    pub(super) fn graph(&self, args: &NetworkPolicyArgs) -> Graph {
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
            controllers: args.admits_controllers(),
        }
    }

    /// Every workload's policy, each built from its controller's view (an agent's listers come
    /// from the reverse index, here the graph).
    pub(super) fn policies(&self, args: &NetworkPolicyArgs) -> Vec<NetworkPolicy> {
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

    pub(super) fn endpoints(&self) -> Vec<Endpoint> {
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
