//! Where this process reaches a workload whose Service name it cannot resolve (tests, a local
//! sandbox): `service-host:port=host:port` entries separated by commas, the same for every
//! kind (`MCP_ADDRESS_OVERRIDES`, `MODELAPI_ADDRESS_OVERRIDES`).

/// Service `host:port` → the `host:port` this process reaches it at.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AddressOverrides(pub Vec<(String, String)>);

impl std::str::FromStr for AddressOverrides {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        text.split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(entry)
            .collect::<Result<_, _>>()
            .map(AddressOverrides)
    }
}

impl AddressOverrides {
    /// The URL of `path` under `endpoint` (`http://host:port`), its host and port replaced when
    /// an entry names them.
    pub fn url(&self, endpoint: &str, path: &str) -> String {
        let authority = endpoint.strip_prefix("http://").unwrap_or(endpoint);
        let authority = authority.trim_end_matches('/');
        let mapped = self
            .0
            .iter()
            .find(|(from, _)| from == authority)
            .map_or(authority, |(_, to)| to.as_str());
        format!("http://{mapped}{path}")
    }
}

/// One `host:port=host:port` entry.
fn entry(entry: &str) -> Result<(String, String), String> {
    let invalid = |why: &str| {
        format!("invalid address override {entry:?}: {why} (expected service-host:port=host:port)")
    };
    let (from, to) = entry.split_once('=').ok_or_else(|| invalid("no `=`"))?;
    for address in [from.trim(), to.trim()] {
        let (host, port) = address
            .rsplit_once(':')
            .ok_or_else(|| invalid("an address has no port"))?;
        if host.is_empty() || host.contains(['/', ' ']) {
            return Err(invalid("an address has no valid host"));
        }
        if port.parse::<u16>().map_or(true, |p| p == 0) {
            return Err(invalid("a port is not a number from 1 to 65535"));
        }
    }
    Ok((from.trim().to_string(), to.trim().to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_map_a_service_address_and_bad_entries_are_named() {
        let parsed: Result<AddressOverrides, _> =
            " mcpserver-t.ns.svc.cluster.local:8000=127.0.0.1:9000 ,".parse();
        let parsed = parsed.expect("valid");
        assert_eq!(
            parsed.0,
            [(
                "mcpserver-t.ns.svc.cluster.local:8000".to_string(),
                "127.0.0.1:9000".to_string()
            )]
        );
        assert_eq!(
            parsed.url("http://mcpserver-t.ns.svc.cluster.local:8000", "/mcp"),
            "http://127.0.0.1:9000/mcp"
        );
        assert_eq!(
            parsed.url("http://other.ns.svc.cluster.local:8000/", "/v1/models"),
            "http://other.ns.svc.cluster.local:8000/v1/models"
        );
        assert_eq!(
            "a:1=b".parse::<AddressOverrides>(),
            Err("invalid address override \"a:1=b\": an address has no port (expected service-host:port=host:port)".to_string())
        );
    }
}
