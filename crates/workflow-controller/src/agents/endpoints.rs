//! Where a step's agent is reached: an address override when one is configured (where the
//! agent's Service DNS name does not resolve, e.g. a local sandbox), else the endpoint the
//! agent's status publishes, else its Service as the KAOS contract names it
//! (`http://agent-<name>.<namespace>:8000`).

use std::collections::BTreeMap;

/// The port of an agent's Service (the KAOS agent runtime's).
pub const AGENT_PORT: u16 = 8000;

/// Why `AGENT_ADDRESS_OVERRIDES` cannot be read: names the entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid agent address override {entry:?}: {reason} (expected namespace/agent=host:port)")]
pub struct OverrideError {
    pub entry: String,
    pub reason: &'static str,
}

/// `namespace/agent` → `http://host:port`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AddressOverrides {
    by_agent: BTreeMap<(String, String), String>,
}

impl AddressOverrides {
    /// Reads `namespace/agent=host:port` entries separated by commas (empty entries skipped).
    pub fn parse(text: &str) -> Result<Self, OverrideError> {
        let mut by_agent = BTreeMap::new();
        for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let fail = |reason| OverrideError {
                entry: entry.to_string(),
                reason,
            };
            let (agent, address) = entry.split_once('=').ok_or_else(|| fail("no `=`"))?;
            let (namespace, name) = agent
                .trim()
                .split_once('/')
                .ok_or_else(|| fail("the agent is not namespace/name"))?;
            if namespace.is_empty() || name.is_empty() || name.contains('/') {
                return Err(fail("the agent is not namespace/name"));
            }
            let address = address.trim();
            let (host, port) = address
                .rsplit_once(':')
                .ok_or_else(|| fail("the address has no port"))?;
            if host.is_empty() || host.contains('/') || host.contains(char::is_whitespace) {
                return Err(fail("the address has no valid host"));
            }
            if port.parse::<u16>().map_or(true, |port| port == 0) {
                return Err(fail("the port is not a number from 1 to 65535"));
            }
            by_agent.insert(
                (namespace.to_string(), name.to_string()),
                format!("http://{address}"),
            );
        }
        Ok(Self { by_agent })
    }

    /// The override of `namespace/name`, as an endpoint URL.
    pub fn get(&self, namespace: &str, name: &str) -> Option<String> {
        self.by_agent
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }

    /// The endpoint of agent `name` in `namespace`: its override, else the endpoint its status
    /// publishes, else its Service.
    pub fn endpoint(&self, namespace: &str, name: &str, published: Option<&str>) -> String {
        self.get(namespace, name)
            .or_else(|| {
                published
                    .map(str::trim)
                    .filter(|e| !e.is_empty())
                    .map(|e| e.trim_end_matches('/').to_string())
            })
            .unwrap_or_else(|| service_endpoint(namespace, name))
    }
}

/// The agent's Service URL, as KAOS names it.
pub fn service_endpoint(namespace: &str, name: &str) -> String {
    format!("http://agent-{name}.{namespace}:{AGENT_PORT}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_override_wins_then_the_published_endpoint_then_the_service() -> Result<(), OverrideError>
    {
        let overrides = AddressOverrides::parse(" team/writer=127.0.0.1:9000 , ,other/x=h:1")?;
        assert_eq!(
            overrides.endpoint("team", "writer", Some("http://agent-writer.team.svc:8000")),
            "http://127.0.0.1:9000"
        );
        assert_eq!(
            overrides.endpoint("team", "editor", Some("http://agent-editor.team.svc:8000/")),
            "http://agent-editor.team.svc:8000"
        );
        assert_eq!(
            overrides.endpoint("team", "editor", Some("")),
            "http://agent-editor.team:8000"
        );
        assert_eq!(overrides.get("other", "x").as_deref(), Some("http://h:1"));
        assert_eq!(AddressOverrides::parse("")?, AddressOverrides::default());
        Ok(())
    }

    #[test]
    fn invalid_entries_are_named() {
        for (text, entry) in [
            ("team/writer", "team/writer"),
            ("writer=h:1", "writer=h:1"),
            ("team/=h:1", "team/=h:1"),
            ("a/b=host", "a/b=host"),
            ("a/b=host:http", "a/b=host:http"),
            ("a/b=:80", "a/b=:80"),
            ("a/b=h:1,a/b/c=h:2", "a/b/c=h:2"),
        ] {
            let error = AddressOverrides::parse(text).expect_err(text);
            assert_eq!(error.entry, entry, "{text}");
            assert!(error.to_string().contains(&format!("{entry:?}")), "{error}");
        }
    }
}
