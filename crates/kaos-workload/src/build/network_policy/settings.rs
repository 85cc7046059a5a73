//! The NetworkPolicy settings: flags, each also read from an environment variable, parsed into
//! the typed values of `values.rs`. A malformed value is an error that names its variable.

use std::collections::BTreeSet;

use clap::{ArgAction, Args};
use k8s_openapi::api::networking::v1::{IPBlock, NetworkPolicyEgressRule, NetworkPolicyPeer};

use super::values::{Cidr, ExtraEgress, Labels, McpEgress, McpEgressMap, PortSpec};

pub const ENABLED_ENV: &str = "NETWORK_POLICY_ENABLED";
pub const NAMESPACES_ENV: &str = "NETWORK_POLICY_NAMESPACES";
pub const CLUSTER_CIDRS_ENV: &str = "NETWORK_POLICY_CLUSTER_CIDRS";
pub const EXTERNAL_CIDRS_ENV: &str = "NETWORK_POLICY_EXTERNAL_CIDRS";
pub const EXTERNAL_PORTS_ENV: &str = "NETWORK_POLICY_EXTERNAL_PORTS";
pub const DNS_NAMESPACE_LABELS_ENV: &str = "NETWORK_POLICY_DNS_NAMESPACE_LABELS";
pub const DNS_POD_LABELS_ENV: &str = "NETWORK_POLICY_DNS_POD_LABELS";
pub const DNS_PORTS_ENV: &str = "NETWORK_POLICY_DNS_PORTS";
pub const GATEWAY_NAMESPACE_LABELS_ENV: &str = "NETWORK_POLICY_GATEWAY_NAMESPACE_LABELS";
pub const GATEWAY_POD_LABELS_ENV: &str = "NETWORK_POLICY_GATEWAY_POD_LABELS";
pub const SCRAPER_NAMESPACE_LABELS_ENV: &str = "NETWORK_POLICY_SCRAPER_NAMESPACE_LABELS";
pub const SCRAPER_POD_LABELS_ENV: &str = "NETWORK_POLICY_SCRAPER_POD_LABELS";
pub const WORKFLOW_NAMESPACE_LABELS_ENV: &str = "NETWORK_POLICY_WORKFLOW_NAMESPACE_LABELS";
pub const WORKFLOW_POD_LABELS_ENV: &str = "NETWORK_POLICY_WORKFLOW_POD_LABELS";
pub const CONTROLLER_NAMESPACE_LABELS_ENV: &str = "NETWORK_POLICY_CONTROLLER_NAMESPACE_LABELS";
pub const CONTROLLER_POD_LABELS_ENV: &str = "NETWORK_POLICY_CONTROLLER_POD_LABELS";
pub const APISERVER_CIDRS_ENV: &str = "NETWORK_POLICY_APISERVER_CIDRS";
pub const APISERVER_PORTS_ENV: &str = "NETWORK_POLICY_APISERVER_PORTS";
pub const DATABASE_CIDRS_ENV: &str = "NETWORK_POLICY_DATABASE_CIDRS";
pub const DATABASE_PORTS_ENV: &str = "NETWORK_POLICY_DATABASE_PORTS";
pub const MCP_EGRESS_ENV: &str = "NETWORK_POLICY_MCP_EGRESS";
pub const EXTRA_EGRESS_ENV: &str = "NETWORK_POLICY_EXTRA_EGRESS";
pub const DENIED_CIDRS_ENV: &str = "NETWORK_POLICY_DENIED_CIDRS";

const DEFAULT_CLUSTER_CIDRS: &str = "10.0.0.0/8,172.16.0.0/12,192.168.0.0/16";
const DEFAULT_EXTERNAL_CIDRS: &str = "0.0.0.0/0";
const DEFAULT_DNS_NAMESPACE_LABELS: &str = "kubernetes.io/metadata.name=kube-system";
const DEFAULT_DNS_POD_LABELS: &str = "k8s-app=kube-dns";
const DEFAULT_DNS_PORTS: &str = "53/UDP,53/TCP";
const DEFAULT_GATEWAY_NAMESPACE_LABELS: &str = "kubernetes.io/metadata.name=envoy-gateway-system";
const DEFAULT_SCRAPER_NAMESPACE_LABELS: &str = "kubernetes.io/metadata.name=monitoring";
const DEFAULT_SCRAPER_POD_LABELS: &str = "app.kubernetes.io/name=prometheus";
const DEFAULT_APISERVER_CIDRS: &str = "0.0.0.0/0";
const DEFAULT_APISERVER_PORTS: &str = "443/TCP,6443/TCP";
const DEFAULT_DATABASE_CIDRS: &str = "0.0.0.0/0";
const DEFAULT_DATABASE_PORTS: &str = "5432/TCP";
const DEFAULT_MCP_EGRESS: &str = r#"{"*":["external"],"kubernetes":["apiserver"]}"#;
const DEFAULT_EXTRA_EGRESS: &str = "[]";
/// The cloud metadata service (AWS, GCP, Azure, OCI and others answer at 169.254.169.254; AWS
/// also at fd00:ec2::254): it hands out the node's cloud credentials to any pod that reaches it.
const DEFAULT_DENIED_CIDRS: &str = "169.254.169.254/32,fd00:ec2::254/128";

/// NetworkPolicies of the generated pods (`docs/network-policy.md`). Off by default; when on,
/// every generated workload of an applicable namespace gets one policy that denies all ingress
/// and egress but what the dependency graph needs.
///
/// A list is one comma-separated value (typed `::std::vec::Vec` so clap does not split it and
/// parses the whole text): an empty value is an empty list, and a repeated flag replaces it.
#[derive(Args, Clone, Debug, PartialEq)]
pub struct NetworkPolicyArgs {
    /// Create a NetworkPolicy per generated workload.
    #[arg(
        id = "network_policy_enabled",
        long = "network-policy-enabled",
        env = ENABLED_ENV,
        default_value_t = false,
        action = ArgAction::Set
    )]
    pub enabled: bool,
    /// Only these namespaces get policies (comma-separated); none means every namespace the
    /// controller watches.
    #[arg(
        id = "network_policy_namespaces",
        long = "network-policy-namespaces",
        env = NAMESPACES_ENV,
        default_value = "",
        value_parser = names
    )]
    pub namespaces: ::std::vec::Vec<String>,
    /// The cluster's own address ranges: set them to the pod and service CIDRs. They are cut
    /// out of the external CIDRs, so "external" egress never reaches in-cluster addresses.
    #[arg(
        id = "network_policy_cluster_cidrs",
        long = "network-policy-cluster-cidrs",
        env = CLUSTER_CIDRS_ENV,
        default_value = DEFAULT_CLUSTER_CIDRS,
        value_parser = cidrs_of(CLUSTER_CIDRS_ENV)
    )]
    pub cluster_cidrs: ::std::vec::Vec<Cidr>,
    /// Where ModelAPIs reach their provider (and MCP servers with `external` egress the
    /// outside world), minus the cluster CIDRs they contain. Empty: nowhere.
    #[arg(
        id = "network_policy_external_cidrs",
        long = "network-policy-external-cidrs",
        env = EXTERNAL_CIDRS_ENV,
        default_value = DEFAULT_EXTERNAL_CIDRS,
        value_parser = cidrs_of(EXTERNAL_CIDRS_ENV)
    )]
    pub external_cidrs: ::std::vec::Vec<Cidr>,
    /// Ports of external egress (`443`, `443/TCP`, `8000-8100/TCP`); none means every port.
    #[arg(
        id = "network_policy_external_ports",
        long = "network-policy-external-ports",
        env = EXTERNAL_PORTS_ENV,
        default_value = "",
        value_parser = ports_of(EXTERNAL_PORTS_ENV)
    )]
    pub external_ports: ::std::vec::Vec<PortSpec>,
    /// Labels of the DNS server's namespace (`k=v,k2=v2`; empty: every namespace).
    #[arg(
        id = "network_policy_dns_namespace_labels",
        long = "network-policy-dns-namespace-labels",
        env = DNS_NAMESPACE_LABELS_ENV,
        default_value = DEFAULT_DNS_NAMESPACE_LABELS,
        value_parser = labels_of(DNS_NAMESPACE_LABELS_ENV)
    )]
    pub dns_namespace_labels: Labels,
    /// Labels of the DNS server's pods (`k=v,k2=v2`; empty: every pod of those namespaces).
    #[arg(
        id = "network_policy_dns_pod_labels",
        long = "network-policy-dns-pod-labels",
        env = DNS_POD_LABELS_ENV,
        default_value = DEFAULT_DNS_POD_LABELS,
        value_parser = labels_of(DNS_POD_LABELS_ENV)
    )]
    pub dns_pod_labels: Labels,
    /// Ports of the DNS server; none means every port.
    #[arg(
        id = "network_policy_dns_ports",
        long = "network-policy-dns-ports",
        env = DNS_PORTS_ENV,
        default_value = DEFAULT_DNS_PORTS,
        value_parser = ports_of(DNS_PORTS_ENV)
    )]
    pub dns_ports: ::std::vec::Vec<PortSpec>,
    /// Labels of the namespace of the gateway's proxy pods, the ones that forward HTTPRoute
    /// traffic (Envoy Gateway runs them in `envoy-gateway-system`). Empty: every namespace.
    #[arg(
        id = "network_policy_gateway_namespace_labels",
        long = "network-policy-gateway-namespace-labels",
        env = GATEWAY_NAMESPACE_LABELS_ENV,
        default_value = DEFAULT_GATEWAY_NAMESPACE_LABELS,
        value_parser = labels_of(GATEWAY_NAMESPACE_LABELS_ENV)
    )]
    pub gateway_namespace_labels: Labels,
    /// Labels of the gateway's proxy pods. Empty: every pod of those namespaces.
    #[arg(
        id = "network_policy_gateway_pod_labels",
        long = "network-policy-gateway-pod-labels",
        env = GATEWAY_POD_LABELS_ENV,
        default_value = "",
        value_parser = labels_of(GATEWAY_POD_LABELS_ENV)
    )]
    pub gateway_pod_labels: Labels,
    /// Labels of the metrics scraper's namespace. Empty: every namespace.
    #[arg(
        id = "network_policy_scraper_namespace_labels",
        long = "network-policy-scraper-namespace-labels",
        env = SCRAPER_NAMESPACE_LABELS_ENV,
        default_value = DEFAULT_SCRAPER_NAMESPACE_LABELS,
        value_parser = labels_of(SCRAPER_NAMESPACE_LABELS_ENV)
    )]
    pub scraper_namespace_labels: Labels,
    /// Labels of the metrics scraper's pods. Empty: every pod of those namespaces.
    #[arg(
        id = "network_policy_scraper_pod_labels",
        long = "network-policy-scraper-pod-labels",
        env = SCRAPER_POD_LABELS_ENV,
        default_value = DEFAULT_SCRAPER_POD_LABELS,
        value_parser = labels_of(SCRAPER_POD_LABELS_ENV)
    )]
    pub scraper_pod_labels: Labels,
    /// Labels of the workflow controller's namespace (it sends A2A tasks to agents). Empty:
    /// every namespace, so any pod wearing the pod labels below reaches every agent; the chart
    /// pins its own namespace.
    #[arg(
        id = "network_policy_workflow_namespace_labels",
        long = "network-policy-workflow-namespace-labels",
        env = WORKFLOW_NAMESPACE_LABELS_ENV,
        default_value = "",
        value_parser = labels_of(WORKFLOW_NAMESPACE_LABELS_ENV)
    )]
    pub workflow_namespace_labels: Labels,
    /// Labels of the workflow controller's pods. Empty (the default): agents admit no workflow
    /// controller at all, unlike the gateway's and scraper's "every pod", so an install without
    /// one opens nothing.
    #[arg(
        id = "network_policy_workflow_pod_labels",
        long = "network-policy-workflow-pod-labels",
        env = WORKFLOW_POD_LABELS_ENV,
        default_value = "",
        value_parser = labels_of(WORKFLOW_POD_LABELS_ENV)
    )]
    pub workflow_pod_labels: Labels,
    /// Labels of the operator's controllers' namespace (they check the protocols their
    /// workloads speak and read LiteLLM's usage). Empty: every namespace; the chart pins its own.
    #[arg(
        id = "network_policy_controller_namespace_labels",
        long = "network-policy-controller-namespace-labels",
        env = CONTROLLER_NAMESPACE_LABELS_ENV,
        default_value = "",
        value_parser = labels_of(CONTROLLER_NAMESPACE_LABELS_ENV)
    )]
    pub controller_namespace_labels: Labels,
    /// Labels every controller pod of the operator wears, besides its `app.kubernetes.io/name`
    /// (which the policies name per kind). Empty (the default): no workload admits a controller,
    /// so the checks of a namespace with policies fail (docs/network-policy.md).
    #[arg(
        id = "network_policy_controller_pod_labels",
        long = "network-policy-controller-pod-labels",
        env = CONTROLLER_POD_LABELS_ENV,
        default_value = "",
        value_parser = labels_of(CONTROLLER_POD_LABELS_ENV)
    )]
    pub controller_pod_labels: Labels,
    /// Addresses of the Kubernetes API server, for MCP servers with `apiserver` egress (the
    /// endpoints of the `kubernetes` Service, not its ClusterIP). Not cut by the cluster CIDRs.
    #[arg(
        id = "network_policy_apiserver_cidrs",
        long = "network-policy-apiserver-cidrs",
        env = APISERVER_CIDRS_ENV,
        default_value = DEFAULT_APISERVER_CIDRS,
        value_parser = cidrs_of(APISERVER_CIDRS_ENV)
    )]
    pub apiserver_cidrs: ::std::vec::Vec<Cidr>,
    /// Ports of the Kubernetes API server; none means every port.
    #[arg(
        id = "network_policy_apiserver_ports",
        long = "network-policy-apiserver-ports",
        env = APISERVER_PORTS_ENV,
        default_value = DEFAULT_APISERVER_PORTS,
        value_parser = ports_of(APISERVER_PORTS_ENV)
    )]
    pub apiserver_ports: ::std::vec::Vec<PortSpec>,
    /// Addresses of the database of `external` MemoryStores (pgvector), in or outside the
    /// cluster. Not cut by the cluster CIDRs.
    #[arg(
        id = "network_policy_database_cidrs",
        long = "network-policy-database-cidrs",
        env = DATABASE_CIDRS_ENV,
        default_value = DEFAULT_DATABASE_CIDRS,
        value_parser = cidrs_of(DATABASE_CIDRS_ENV)
    )]
    pub database_cidrs: ::std::vec::Vec<Cidr>,
    /// Ports of that database; none means every port.
    #[arg(
        id = "network_policy_database_ports",
        long = "network-policy-database-ports",
        env = DATABASE_PORTS_ENV,
        default_value = DEFAULT_DATABASE_PORTS,
        value_parser = ports_of(DATABASE_PORTS_ENV)
    )]
    pub database_ports: ::std::vec::Vec<PortSpec>,
    /// Egress of MCP servers per runtime, as JSON: runtime name → list of `external`,
    /// `apiserver`; the key `*` is for runtimes not listed (none listed and no `*`: no egress
    /// but DNS).
    #[arg(
        id = "network_policy_mcp_egress",
        long = "network-policy-mcp-egress",
        env = MCP_EGRESS_ENV,
        default_value = DEFAULT_MCP_EGRESS,
        value_parser = json_of::<McpEgressMap>(MCP_EGRESS_ENV)
    )]
    pub mcp_egress: McpEgressMap,
    /// NetworkPolicy egress rules (a JSON list, as in a NetworkPolicy's `spec.egress`) added to
    /// every generated pod, e.g. to an OpenTelemetry collector.
    #[arg(
        id = "network_policy_extra_egress",
        long = "network-policy-extra-egress",
        env = EXTRA_EGRESS_ENV,
        default_value = DEFAULT_EXTRA_EGRESS,
        value_parser = json_of::<ExtraEgress>(EXTRA_EGRESS_ENV)
    )]
    pub extra_egress: ExtraEgress,
    /// Addresses no generated pod may reach, whatever the other settings allow: cut out of
    /// every ipBlock the policies hold (external, API server, database and the extra egress).
    /// By default the cloud metadata service; empty: nothing is cut.
    #[arg(
        id = "network_policy_denied_cidrs",
        long = "network-policy-denied-cidrs",
        env = DENIED_CIDRS_ENV,
        default_value = DEFAULT_DENIED_CIDRS,
        value_parser = cidrs_of(DENIED_CIDRS_ENV)
    )]
    pub denied_cidrs: ::std::vec::Vec<Cidr>,
}

impl Default for NetworkPolicyArgs {
    /// The values of an empty command line.
    fn default() -> Self {
        let cidrs = |text: &str| list(text, Cidr::parse).expect("default CIDRs");
        let ports = |text: &str| list(text, PortSpec::parse).expect("default ports");
        let labels = |text: &str| Labels::parse(text).expect("default labels");
        NetworkPolicyArgs {
            enabled: false,
            namespaces: Vec::new(),
            cluster_cidrs: cidrs(DEFAULT_CLUSTER_CIDRS),
            external_cidrs: cidrs(DEFAULT_EXTERNAL_CIDRS),
            external_ports: Vec::new(),
            dns_namespace_labels: labels(DEFAULT_DNS_NAMESPACE_LABELS),
            dns_pod_labels: labels(DEFAULT_DNS_POD_LABELS),
            dns_ports: ports(DEFAULT_DNS_PORTS),
            gateway_namespace_labels: labels(DEFAULT_GATEWAY_NAMESPACE_LABELS),
            gateway_pod_labels: Labels::default(),
            scraper_namespace_labels: labels(DEFAULT_SCRAPER_NAMESPACE_LABELS),
            scraper_pod_labels: labels(DEFAULT_SCRAPER_POD_LABELS),
            workflow_namespace_labels: Labels::default(),
            workflow_pod_labels: Labels::default(),
            controller_namespace_labels: Labels::default(),
            controller_pod_labels: Labels::default(),
            apiserver_cidrs: cidrs(DEFAULT_APISERVER_CIDRS),
            apiserver_ports: ports(DEFAULT_APISERVER_PORTS),
            database_cidrs: cidrs(DEFAULT_DATABASE_CIDRS),
            database_ports: ports(DEFAULT_DATABASE_PORTS),
            mcp_egress: serde_json::from_str(DEFAULT_MCP_EGRESS).expect("default MCP egress"),
            extra_egress: ExtraEgress::default(),
            denied_cidrs: cidrs(DEFAULT_DENIED_CIDRS),
        }
    }
}

impl NetworkPolicyArgs {
    /// Whether the workloads of `namespace` get a NetworkPolicy: policies are on, and the
    /// namespace is listed (or none is). When false the controller deletes the policy it may
    /// have created before.
    pub fn applies_to(&self, namespace: &str) -> bool {
        self.enabled
            && (self.namespaces.is_empty() || self.namespaces.iter().any(|n| n == namespace))
    }

    /// Whether agents admit the workflow controller: only when its pod labels are set (an
    /// empty set would mean every pod of the selected namespaces).
    pub fn admits_workflow_controller(&self) -> bool {
        !self.workflow_pod_labels.0.is_empty()
    }

    /// Whether workloads admit the operator's controllers: only when their pod labels are set.
    pub fn admits_controllers(&self) -> bool {
        !self.controller_pod_labels.0.is_empty()
    }

    /// The egress of an MCP server of `runtime` (see [`McpEgressMap::for_runtime`]).
    pub fn mcp_egress_of(&self, runtime: &str) -> BTreeSet<McpEgress> {
        self.mcp_egress.for_runtime(runtime)
    }

    /// The external CIDRs as ipBlocks, each without the cluster CIDRs strictly inside it. An
    /// external CIDR that lies inside a cluster CIDR (a chosen in-cluster range) stays whole.
    pub fn external_blocks(&self) -> Vec<IPBlock> {
        self.blocks(&self.external_cidrs, &self.cluster_cidrs)
    }

    /// `cidrs` as ipBlocks without the denied CIDRs (nor the `cut` ones strictly inside each): a
    /// CIDR a denied one covers is left out whole.
    pub fn blocks(&self, cidrs: &[Cidr], cut: &[Cidr]) -> Vec<IPBlock> {
        cidrs
            .iter()
            .filter(|cidr| !self.denied_cidrs.iter().any(|d| d.covers(cidr)))
            .map(|cidr| {
                let except: BTreeSet<Cidr> = cut
                    .iter()
                    .chain(&self.denied_cidrs)
                    .filter(|c| cidr.strictly_contains(c))
                    .copied()
                    .collect();
                ip_block(cidr, except.iter().map(Cidr::to_string).collect())
            })
            .collect()
    }

    /// The extra egress rules with the denied CIDRs cut out of their ipBlocks: an ipBlock a
    /// denied CIDR covers is left out, and a rule left with no peer (which would allow every
    /// destination) is left out whole.
    pub fn extra_egress_rules(&self) -> Vec<NetworkPolicyEgressRule> {
        self.extra_egress
            .0
            .iter()
            .filter_map(|rule| {
                let Some(to) = &rule.to else {
                    return Some(rule.clone());
                };
                let kept: Vec<NetworkPolicyPeer> = to
                    .iter()
                    .filter_map(|peer| self.allowed_peer(peer))
                    .collect();
                (!kept.is_empty()).then(|| NetworkPolicyEgressRule {
                    to: Some(kept),
                    ..rule.clone()
                })
            })
            .collect()
    }

    /// A peer of the extra egress, its ipBlock without the denied CIDRs (None: all denied). An
    /// ipBlock the schema accepted but that is no canonical CIDR is kept as written.
    fn allowed_peer(&self, peer: &NetworkPolicyPeer) -> Option<NetworkPolicyPeer> {
        let Some(block) = &peer.ip_block else {
            return Some(peer.clone());
        };
        let Ok(cidr) = Cidr::parse(&block.cidr) else {
            return Some(peer.clone());
        };
        let [mut cut] = <[IPBlock; 1]>::try_from(self.blocks(&[cidr], &[])).ok()?;
        let mut except: BTreeSet<String> = block
            .except
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect();
        except.extend(cut.except.take().unwrap_or_default());
        cut.except = (!except.is_empty()).then(|| except.into_iter().collect());
        Some(NetworkPolicyPeer {
            ip_block: Some(cut),
            ..peer.clone()
        })
    }
}

pub(crate) fn ip_block(cidr: &Cidr, except: Vec<String>) -> IPBlock {
    IPBlock {
        cidr: cidr.to_string(),
        except: (!except.is_empty()).then_some(except),
    }
}

/// The value parsers name the environment variable in their errors (clap names the flag).
fn labels_of(
    setting: &'static str,
) -> impl Fn(&str) -> Result<Labels, String> + Clone + Send + Sync + 'static {
    move |text| Labels::parse(text).map_err(|e| format!("{setting}: {e}"))
}

fn cidrs_of(
    setting: &'static str,
) -> impl Fn(&str) -> Result<Vec<Cidr>, String> + Clone + Send + Sync + 'static {
    move |text| list(text, Cidr::parse).map_err(|e| format!("{setting}: {e}"))
}

fn ports_of(
    setting: &'static str,
) -> impl Fn(&str) -> Result<Vec<PortSpec>, String> + Clone + Send + Sync + 'static {
    move |text| list(text, PortSpec::parse).map_err(|e| format!("{setting}: {e}"))
}

/// A comma-separated list; empty entries (and an empty text) are skipped.
fn list<T>(text: &str, parse: impl Fn(&str) -> Result<T, String>) -> Result<Vec<T>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(parse)
        .collect()
}

fn names(text: &str) -> Result<Vec<String>, String> {
    list(text, |name| Ok(name.to_string()))
}

fn json_of<T: serde::de::DeserializeOwned + Clone + Send + Sync + 'static>(
    setting: &'static str,
) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static {
    move |text| {
        serde_json::from_str(text).map_err(|e| format!("{setting}: invalid JSON value: {e}"))
    }
}

#[cfg(test)]
mod tests;
