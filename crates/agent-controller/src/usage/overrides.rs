//! `USAGE_ADDRESS_OVERRIDES`: where this process reads a ModelAPI's proxy instead of the ready
//! endpoints of its Service (tests, a local sandbox, where the pods' addresses are not reachable).

use std::collections::BTreeMap;

/// `namespace/modelapi` → `host:port`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AddressOverrides(BTreeMap<(String, String), String>);

impl AddressOverrides {
    /// Reads `namespace/modelapi=host:port` entries separated by commas (empty ones skipped); an
    /// invalid entry is named in the error.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut by_model_api = BTreeMap::new();
        for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let invalid = |why: &str| {
                format!(
                    "invalid usage address override {entry:?}: {why} (expected namespace/modelapi=host:port)"
                )
            };
            let (model_api, address) = entry.split_once('=').ok_or_else(|| invalid("no `=`"))?;
            let (namespace, name) = model_api
                .trim()
                .split_once('/')
                .filter(|(ns, name)| !ns.is_empty() && !name.is_empty() && !name.contains('/'))
                .ok_or_else(|| invalid("the ModelAPI is not namespace/name"))?;
            let address = address.trim();
            let (host, port) = address
                .rsplit_once(':')
                .ok_or_else(|| invalid("the address has no port"))?;
            if host.is_empty() || host.contains(['/', ' ']) {
                return Err(invalid("the address has no valid host"));
            }
            if port.parse::<u16>().map_or(true, |p| p == 0) {
                return Err(invalid("the port is not a number from 1 to 65535"));
            }
            by_model_api.insert(
                (namespace.to_string(), name.to_string()),
                address.to_string(),
            );
        }
        Ok(Self(by_model_api))
    }

    /// The `host:port` that replaces the endpoints of ModelAPI `name` in `namespace`.
    pub fn get(&self, namespace: &str, name: &str) -> Option<&str> {
        self.0
            .get(&(namespace.to_string(), name.to_string()))
            .map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_map_a_model_api_and_bad_ones_are_named() -> Result<(), String> {
        let overrides = AddressOverrides::parse(" team/llm=127.0.0.1:9000 , ,b/c=h:1")?;
        assert_eq!(overrides.get("team", "llm"), Some("127.0.0.1:9000"));
        assert_eq!(overrides.get("b", "c"), Some("h:1"));
        assert_eq!(overrides.get("team", "other"), None);
        assert_eq!(AddressOverrides::parse("")?, AddressOverrides::default());
        for (text, why) in [
            ("team/llm", "no `=`"),
            ("llm=h:1", "the ModelAPI is not namespace/name"),
            ("a/b/c=h:1", "the ModelAPI is not namespace/name"),
            ("a/b=host", "the address has no port"),
            ("a/b=:80", "the address has no valid host"),
            ("a/b=h:0", "the port is not a number from 1 to 65535"),
        ] {
            let error = AddressOverrides::parse(text).expect_err(text);
            assert!(error.contains(&format!("{text:?}: {why}")), "{error}");
        }
        Ok(())
    }
}
