//! The typed values of the NetworkPolicy settings: label sets, CIDRs, port specs, the MCP
//! egress map and the extra egress rules.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use k8s_openapi::api::networking::v1::{NetworkPolicyEgressRule, NetworkPolicyPort};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::{Deserialize, Serialize};

/// A label set, written `k=v,k2=v2` (empty text: no labels).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Labels(pub BTreeMap<String, String>);

impl Labels {
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut labels = BTreeMap::new();
        if text.trim().is_empty() {
            return Ok(Labels(labels));
        }
        for pair in text.split(',') {
            let pair = pair.trim();
            let Some((key, value)) = pair.split_once('=') else {
                return Err(format!("expected key=value, got {pair:?}"));
            };
            let (key, value) = (key.trim(), value.trim());
            check_label_key(key)?;
            check_label_value(value)?;
            if labels.insert(key.to_string(), value.to_string()).is_some() {
                return Err(format!("label {key:?} is given twice"));
            }
        }
        Ok(Labels(labels))
    }

    /// The map, or None when empty (an omitted `matchLabels`).
    pub(crate) fn match_labels(&self) -> Option<BTreeMap<String, String>> {
        (!self.0.is_empty()).then(|| self.0.clone())
    }
}

impl fmt::Display for Labels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pairs: Vec<String> = self.0.iter().map(|(k, v)| format!("{k}={v}")).collect();
        f.write_str(&pairs.join(","))
    }
}

fn label_name_ok(name: &str) -> bool {
    let alnum = |c: char| c.is_ascii_alphanumeric();
    name.len() <= 63
        && name.starts_with(alnum)
        && name.ends_with(alnum)
        && name
            .chars()
            .all(|c| alnum(c) || c == '-' || c == '_' || c == '.')
}

fn check_label_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|part| {
                !part.is_empty()
                    && part.len() <= 63
                    && part
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                    && !part.starts_with('-')
                    && !part.ends_with('-')
            })
    });
    if prefix_ok && label_name_ok(name) {
        Ok(())
    } else {
        Err(format!("{key:?} is not a valid label key"))
    }
}

fn check_label_value(value: &str) -> Result<(), String> {
    if value.is_empty() || label_name_ok(value) {
        Ok(())
    } else {
        Err(format!("{value:?} is not a valid label value"))
    }
}

/// An IPv4 or IPv6 network, `10.0.0.0/8` or `fd00::/8` (a bare address is a /32 or /128).
/// Written canonically, as the API server's strict IP validation wants it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cidr {
    pub addr: IpAddr,
    pub prefix: u8,
}

impl Cidr {
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let (addr, prefix) = match text.split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix)),
            None => (text, None),
        };
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| format!("{text:?} is not a CIDR (e.g. 10.0.0.0/8)"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| format!("{text:?}: the prefix length must be 0 to {max}"))?,
        };
        let cidr = Cidr { addr, prefix };
        let network = Cidr {
            addr: masked(addr, prefix),
            prefix,
        };
        if network != cidr {
            return Err(format!(
                "{text:?} has bits set after the prefix: did you mean {network}?"
            ));
        }
        Ok(cidr)
    }

    /// Whether `ip` is in this network.
    pub fn contains_ip(&self, ip: IpAddr) -> bool {
        ip.is_ipv4() == self.addr.is_ipv4() && masked(ip, self.prefix) == self.addr
    }

    /// Whether `other` is a smaller network inside this one (what an ipBlock's `except` must be).
    pub fn strictly_contains(&self, other: &Cidr) -> bool {
        other.prefix > self.prefix && self.contains_ip(other.addr)
    }

    /// Whether `other` is this network or one inside it.
    pub fn covers(&self, other: &Cidr) -> bool {
        other.prefix >= self.prefix && self.contains_ip(other.addr)
    }
}

fn masked(ip: IpAddr, prefix: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(u32::from(v4) & mask))
        }
        IpAddr::V6(v6) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask))
        }
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// A transport protocol of a NetworkPolicy port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

impl Protocol {
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
            Protocol::Sctp => "SCTP",
        }
    }
}

/// A port or port range with its protocol: `443` (TCP), `53/UDP`, `30000-32767/TCP`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PortSpec {
    pub port: i32,
    /// The last port of a range.
    pub end_port: Option<i32>,
    pub protocol: Protocol,
}

impl PortSpec {
    /// One TCP port.
    pub fn tcp(port: i32) -> Self {
        PortSpec {
            port,
            end_port: None,
            protocol: Protocol::Tcp,
        }
    }

    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let (ports, protocol) = match text.split_once('/') {
            Some((ports, protocol)) => (ports, protocol),
            None => (text, "TCP"),
        };
        let protocol = match protocol.to_ascii_uppercase().as_str() {
            "TCP" => Protocol::Tcp,
            "UDP" => Protocol::Udp,
            "SCTP" => Protocol::Sctp,
            _ => {
                return Err(format!("{text:?}: the protocol must be TCP, UDP or SCTP"));
            }
        };
        let number = |n: &str| {
            n.trim()
                .parse::<i32>()
                .ok()
                .filter(|p| (1..=65535).contains(p))
                .ok_or_else(|| {
                    format!("{text:?} is not a port (1-65535), a range (8000-8100) or either with /TCP, /UDP or /SCTP")
                })
        };
        let (port, end_port) = match ports.split_once('-') {
            Some((first, last)) => {
                let (first, last) = (number(first)?, number(last)?);
                if last < first {
                    return Err(format!("{text:?}: the range ends before it starts"));
                }
                (first, Some(last))
            }
            None => (number(ports)?, None),
        };
        Ok(PortSpec {
            port,
            end_port,
            protocol,
        })
    }

    pub fn to_policy_port(&self) -> NetworkPolicyPort {
        NetworkPolicyPort {
            port: Some(IntOrString::Int(self.port)),
            end_port: self.end_port,
            protocol: Some(self.protocol.as_str().into()),
        }
    }
}

impl fmt::Display for PortSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.end_port {
            Some(end) => write!(f, "{}-{end}/{}", self.port, self.protocol.as_str()),
            None => write!(f, "{}/{}", self.port, self.protocol.as_str()),
        }
    }
}

/// Where an MCP server may connect besides DNS.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(rename_all = "lowercase")]
pub enum McpEgress {
    /// The external CIDRs and ports (the outside world, as a ModelAPI's provider).
    External,
    /// The API server CIDRs and ports (the `kubernetes` runtime).
    Apiserver,
}

/// The egress of MCP servers per runtime name; `*` is the fallback.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(transparent)]
pub struct McpEgressMap(pub BTreeMap<String, BTreeSet<McpEgress>>);

impl McpEgressMap {
    /// The runtime's entry, else the `*` entry, else none.
    pub fn for_runtime(&self, runtime: &str) -> BTreeSet<McpEgress> {
        self.0
            .get(runtime)
            .or_else(|| self.0.get("*"))
            .cloned()
            .unwrap_or_default()
    }
}

/// Egress rules added to every generated pod.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(transparent)]
pub struct ExtraEgress(pub Vec<NetworkPolicyEgressRule>);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidrs_are_canonical() {
        assert_eq!(
            Cidr::parse("10.1.2.3").map(|c| c.to_string()),
            Ok("10.1.2.3/32".into())
        );
        assert_eq!(
            Cidr::parse("FD00:0::/8").map(|c| c.to_string()),
            Ok("fd00::/8".into())
        );
        assert!(Cidr::parse("010.0.0.0/8").is_err());
        let net = Cidr::parse("172.16.0.0/12").expect("cidr");
        assert!(net.contains_ip("172.18.0.2".parse().expect("ip")));
        assert!(!net.contains_ip("172.32.0.1".parse().expect("ip")));
        assert!(!net.strictly_contains(&net));
    }

    #[test]
    fn labels_and_ports_read_back_as_written() {
        let labels = Labels::parse(" b=2 , a.io/x=1,c=").expect("labels");
        assert_eq!(labels.to_string(), "a.io/x=1,b=2,c=");
        assert_eq!(Labels::parse(&labels.to_string()), Ok(labels));
        for text in ["443/TCP", "53/UDP", "30000-32767/SCTP"] {
            assert_eq!(
                PortSpec::parse(text).map(|p| p.to_string()),
                Ok(text.into())
            );
        }
        assert_eq!(PortSpec::parse("8080/tcp"), Ok(PortSpec::tcp(8080)));
        assert!(PortSpec::parse("0").is_err() && PortSpec::parse("http").is_err());
    }
}
