//! The NetworkPolicy settings as the chart and users give them: defaults, every flag and
//! variable, and errors that name the variable.

use super::*;
use crate::build::network_policy::values::Protocol;

#[derive(clap::Parser)]
struct Cli {
    #[command(flatten)]
    policy: NetworkPolicyArgs,
}

fn parse(flags: &[&str]) -> Result<NetworkPolicyArgs, String> {
    let argv = std::iter::once("x").chain(flags.iter().copied());
    <Cli as clap::Parser>::try_parse_from(argv)
        .map(|c| c.policy)
        .map_err(|e| e.to_string())
}

#[test]
fn defaults_agree_with_the_command_line() {
    let parsed = parse(&[]).expect("defaults parse");
    assert_eq!(parsed, NetworkPolicyArgs::default());
    assert!(!parsed.enabled);
    assert!(parsed.namespaces.is_empty());
    assert_eq!(
        parsed
            .cluster_cidrs
            .iter()
            .map(Cidr::to_string)
            .collect::<Vec<_>>(),
        ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"]
    );
    assert!(parsed.external_ports.is_empty());
    assert_eq!(
        parsed.dns_ports,
        [
            PortSpec {
                protocol: Protocol::Udp,
                ..PortSpec::tcp(53)
            },
            PortSpec::tcp(53)
        ]
    );
    assert_eq!(parsed.dns_pod_labels.to_string(), "k8s-app=kube-dns");
    assert!(parsed.gateway_pod_labels.0.is_empty());
    // No workflow controller unless told where it is.
    assert!(parsed.workflow_namespace_labels.0.is_empty());
    assert!(parsed.workflow_pod_labels.0.is_empty());
    assert!(!parsed.admits_workflow_controller());
    assert_eq!(
        parsed.mcp_egress_of("kubernetes"),
        [McpEgress::Apiserver].into()
    );
    assert_eq!(
        parsed.mcp_egress_of("python-string"),
        [McpEgress::External].into()
    );
    assert!(parsed.extra_egress.0.is_empty());
}

#[test]
fn flags_parse_into_typed_values() {
    let args = parse(&[
        "--network-policy-enabled=true",
        "--network-policy-namespaces=a,b",
        "--network-policy-cluster-cidrs=10.244.0.0/16,10.96.0.0/12,fd00::/8",
        "--network-policy-external-ports=443,8000-8100/tcp",
        "--network-policy-gateway-pod-labels=app=envoy, gateway.envoyproxy.io/owning-gateway-name=kaos",
        "--network-policy-workflow-namespace-labels=kubernetes.io/metadata.name=kaos-system",
        "--network-policy-workflow-pod-labels=app.kubernetes.io/name=workflow-controller,app.kubernetes.io/instance=kaos",
        r#"--network-policy-mcp-egress={"slack":["external"],"python-string":[]}"#,
        r#"--network-policy-extra-egress=[{"to":[{"ipBlock":{"cidr":"10.1.2.3/32"}}],"ports":[{"port":4317}]}]"#,
    ])
    .expect("flags parse");
    assert!(args.applies_to("a") && args.applies_to("b") && !args.applies_to("c"));
    assert_eq!(args.cluster_cidrs[2].to_string(), "fd00::/8");
    assert_eq!(
        args.external_ports,
        [
            PortSpec::tcp(443),
            PortSpec {
                end_port: Some(8100),
                ..PortSpec::tcp(8000)
            }
        ]
    );
    assert_eq!(
        args.gateway_pod_labels.to_string(),
        "app=envoy,gateway.envoyproxy.io/owning-gateway-name=kaos"
    );
    assert_eq!(
        args.workflow_namespace_labels.to_string(),
        "kubernetes.io/metadata.name=kaos-system"
    );
    assert_eq!(
        args.workflow_pod_labels.to_string(),
        "app.kubernetes.io/instance=kaos,app.kubernetes.io/name=workflow-controller"
    );
    assert!(args.admits_workflow_controller());
    assert_eq!(args.mcp_egress_of("slack"), [McpEgress::External].into());
    assert!(args.mcp_egress_of("python-string").is_empty());
    // No `*`: a runtime not listed gets no egress.
    assert!(args.mcp_egress_of("custom").is_empty());
    assert_eq!(args.extra_egress.0.len(), 1);
    // An empty value is an empty list or label set (as a chart's empty string gives).
    let args = parse(&[
        "--network-policy-dns-pod-labels=",
        "--network-policy-dns-ports=",
        "--network-policy-namespaces=",
        "--network-policy-external-cidrs= ",
        "--network-policy-enabled=true",
    ])
    .expect("empty values parse");
    assert!(args.dns_pod_labels.0.is_empty());
    assert!(args.dns_ports.is_empty() && args.namespaces.is_empty());
    assert!(args.external_cidrs.is_empty() && args.external_blocks().is_empty());
    assert!(args.applies_to("anything"));
    assert!(!NetworkPolicyArgs::default().applies_to("anything"));
    // The namespace alone admits nothing: the pod labels turn the workflow peer on.
    let args =
        parse(&["--network-policy-workflow-namespace-labels=kubernetes.io/metadata.name=kaos"])
            .expect("namespace only parses");
    assert!(!args.admits_workflow_controller());
    let args = parse(&["--network-policy-workflow-pod-labels=app=wf"]).expect("pods only parse");
    assert!(args.admits_workflow_controller() && args.workflow_namespace_labels.0.is_empty());
}

#[test]
fn malformed_values_name_their_setting() {
    for (flag, env, detail) in [
        (
            "--network-policy-dns-pod-labels=k8s-app",
            DNS_POD_LABELS_ENV,
            "expected key=value",
        ),
        (
            "--network-policy-gateway-namespace-labels=a=b,a=c",
            GATEWAY_NAMESPACE_LABELS_ENV,
            "given twice",
        ),
        (
            "--network-policy-scraper-pod-labels=-bad=x",
            SCRAPER_POD_LABELS_ENV,
            "not a valid label key",
        ),
        (
            "--network-policy-scraper-namespace-labels=a=b c",
            SCRAPER_NAMESPACE_LABELS_ENV,
            "not a valid label value",
        ),
        (
            "--network-policy-workflow-namespace-labels=kubernetes.io/metadata.name",
            WORKFLOW_NAMESPACE_LABELS_ENV,
            "expected key=value",
        ),
        (
            "--network-policy-workflow-pod-labels=app=workflow controller",
            WORKFLOW_POD_LABELS_ENV,
            "not a valid label value",
        ),
        (
            "--network-policy-cluster-cidrs=10.0.0.1/8",
            CLUSTER_CIDRS_ENV,
            "did you mean 10.0.0.0/8?",
        ),
        (
            "--network-policy-external-cidrs=example.com",
            EXTERNAL_CIDRS_ENV,
            "is not a CIDR",
        ),
        (
            "--network-policy-apiserver-cidrs=10.0.0.0/33",
            APISERVER_CIDRS_ENV,
            "0 to 32",
        ),
        (
            "--network-policy-database-ports=70000",
            DATABASE_PORTS_ENV,
            "is not a port",
        ),
        (
            "--network-policy-dns-ports=53/ICMP",
            DNS_PORTS_ENV,
            "TCP, UDP or SCTP",
        ),
        (
            "--network-policy-apiserver-ports=9-8",
            APISERVER_PORTS_ENV,
            "ends before it starts",
        ),
        (
            r#"--network-policy-mcp-egress={"x":["everywhere"]}"#,
            MCP_EGRESS_ENV,
            "unknown variant",
        ),
        (
            "--network-policy-extra-egress={}",
            EXTRA_EGRESS_ENV,
            "invalid JSON value",
        ),
    ] {
        let error = parse(&[flag]).expect_err(flag);
        assert!(
            error.contains(env) && error.contains(detail),
            "{flag}: {error}"
        );
    }
}

#[test]
fn external_blocks_cut_out_the_cluster() {
    let mut args = NetworkPolicyArgs::default();
    let blocks = args.external_blocks();
    assert_eq!(
        blocks,
        [IPBlock {
            cidr: "0.0.0.0/0".into(),
            except: Some(vec![
                "10.0.0.0/8".into(),
                "169.254.169.254/32".into(),
                "172.16.0.0/12".into(),
                "192.168.0.0/16".into()
            ])
        }]
    );
    // Per family; a range inside the cluster stays whole; duplicates go.
    args.cluster_cidrs = ["10.0.0.0/8", "fd00::/8", "10.0.0.0/8"]
        .map(|c| Cidr::parse(c).expect("cidr"))
        .into();
    args.external_cidrs = ["0.0.0.0/0", "::/0", "10.96.5.0/24"]
        .map(|c| Cidr::parse(c).expect("cidr"))
        .into();
    let blocks = args.external_blocks();
    assert_eq!(
        blocks
            .iter()
            .map(|b| (b.cidr.as_str(), b.except.clone().unwrap_or_default()))
            .collect::<Vec<_>>(),
        [
            // The metadata service is cut too (NETWORK_POLICY_DENIED_CIDRS).
            (
                "0.0.0.0/0",
                vec!["10.0.0.0/8".to_string(), "169.254.169.254/32".to_string()]
            ),
            (
                "::/0",
                vec!["fd00::/8".to_string(), "fd00:ec2::254/128".to_string()]
            ),
            ("10.96.5.0/24", vec![]),
        ]
    );
}
