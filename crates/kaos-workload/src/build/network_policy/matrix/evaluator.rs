//! A small NetworkPolicy evaluator, as a CNI enforces the API's semantics: whether one endpoint
//! may open a connection to another under a namespace's policies.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyPeer, NetworkPolicyPort, NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::super::tests::NAMESPACE;
use super::super::{Cidr, Node};

/// Something that connects or is connected to: a pod (with a namespace) or an address outside.
#[derive(Clone, Debug)]
pub(super) struct Endpoint {
    pub(super) node: Node,
    pub(super) ip: IpAddr,
    pub(super) namespace: Option<String>,
    pub(super) labels: BTreeMap<String, String>,
    /// What it listens on.
    pub(super) ports: Vec<(i32, &'static str)>,
}

pub(super) fn selects(selector: Option<&LabelSelector>, labels: &BTreeMap<String, String>) -> bool {
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

pub(super) fn namespace_labels(namespace: &str) -> BTreeMap<String, String> {
    [(
        "kubernetes.io/metadata.name".to_string(),
        namespace.to_string(),
    )]
    .into()
}

/// Whether `peer`, of a policy in `policy_namespace`, is `endpoint`.
pub(super) fn peer_matches(
    peer: &NetworkPolicyPeer,
    policy_namespace: &str,
    endpoint: &Endpoint,
) -> bool {
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

pub(super) fn port_matches(
    ports: Option<&Vec<NetworkPolicyPort>>,
    port: i32,
    protocol: &str,
) -> bool {
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
pub(super) fn selecting<'a>(
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
pub(super) fn allows(
    policies: &[NetworkPolicy],
    from: &Endpoint,
    to: &Endpoint,
    port: i32,
    protocol: &str,
) -> bool {
    let egress_ok = side_allows(policies, from, "Egress", to, (port, protocol), |spec| {
        let rules = spec.egress.iter().flatten();
        rules.map(|r| (r.ports.as_ref(), r.to.as_ref())).collect()
    });
    let ingress_ok = side_allows(policies, to, "Ingress", from, (port, protocol), |spec| {
        let rules = spec.ingress.iter().flatten();
        rules.map(|r| (r.ports.as_ref(), r.from.as_ref())).collect()
    });
    egress_ok && ingress_ok
}

/// The ports and peers of one rule.
type Rule<'a> = (
    Option<&'a Vec<NetworkPolicyPort>>,
    Option<&'a Vec<NetworkPolicyPeer>>,
);

/// Whether the `policy_type` policies selecting `endpoint` let it reach (egress) or be reached
/// by (ingress) `peer` on `port`/`protocol`: none selects it, or one has a rule for both.
fn side_allows(
    policies: &[NetworkPolicy],
    endpoint: &Endpoint,
    policy_type: &str,
    peer: &Endpoint,
    (port, protocol): (i32, &str),
    rules: impl for<'a> Fn(&'a NetworkPolicySpec) -> Vec<Rule<'a>>,
) -> bool {
    let selected = selecting(policies, endpoint, policy_type);
    selected.is_empty()
        || selected.iter().any(|p| {
            let namespace = p.metadata.namespace.as_deref().unwrap_or_default();
            p.spec.iter().flat_map(&rules).any(|(ports, peers)| {
                port_matches(ports, port, protocol)
                    && peers.is_none_or(|peers| {
                        peers.is_empty() || peers.iter().any(|p| peer_matches(p, namespace, peer))
                    })
            })
        })
}

pub(super) fn connects(policies: &[NetworkPolicy], from: &Endpoint, to: &Endpoint) -> bool {
    to.ports
        .iter()
        .any(|(port, protocol)| allows(policies, from, to, *port, protocol))
}

/// Every pair of distinct endpoints, one of them the namespace's, that connects (what the
/// surroundings do among themselves is none of the policies' business).
pub(super) fn matrix(policies: &[NetworkPolicy], endpoints: &[Endpoint]) -> BTreeSet<(Node, Node)> {
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
