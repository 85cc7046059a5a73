//! The MCP runtime registry: ConfigMap `kaos-mcp-runtimes`, key `runtimes.yaml`, in the
//! operator's namespace.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use serde::Deserialize;

pub const CONFIG_MAP: &str = "kaos-mcp-runtimes";
pub const KEY: &str = "runtimes.yaml";

/// The registry the operator ships (also in the Helm chart and `kaosctl dev`).
pub const DEFAULT_RUNTIMES_YAML: &str = include_str!("default-runtimes.yaml");

/// One runtime: how to start an MCP server of that kind. Every field may be left out.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct RuntimeSpec {
    #[serde(rename = "type")]
    pub runtime_type: Option<String>,
    pub image: Option<String>,
    pub description: Option<String>,
    pub command: Vec<String>,
    pub args: Vec<String>,
    /// The variable `spec.params` is passed in.
    pub params_env_var: Option<String>,
    pub transport: Option<String>,
    /// Variables the server cannot start without; checked against the container's env.
    pub required_env: Vec<String>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct Registry {
    #[serde(default)]
    pub runtimes: BTreeMap<String, RuntimeSpec>,
}

/// Why the registry cannot be used; each says which ConfigMap and key to fix.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    #[error(
        "the MCP runtime registry ConfigMap {namespace}/{CONFIG_MAP} was not found: install it (the Helm chart does) or set SYSTEM_NAMESPACE to where it is"
    )]
    Missing { namespace: String },
    #[error("the MCP runtime registry ConfigMap {namespace}/{CONFIG_MAP} has no key {KEY}")]
    MissingKey { namespace: String },
    #[error(
        "the MCP runtime registry {namespace}/{CONFIG_MAP} key {KEY} is not valid YAML: {message}"
    )]
    Invalid { namespace: String, message: String },
}

pub fn parse(text: &str) -> Result<Registry, String> {
    serde_saphyr::from_str(text).map_err(|e| e.to_string())
}

/// Reads the registry from its ConfigMap as cached (None: not found).
pub fn from_config_map(
    config_map: Option<&ConfigMap>,
    namespace: &str,
) -> Result<Registry, RegistryError> {
    let config_map = config_map.ok_or_else(|| RegistryError::Missing {
        namespace: namespace.into(),
    })?;
    let text = config_map
        .data
        .as_ref()
        .and_then(|d| d.get(KEY))
        .ok_or_else(|| RegistryError::MissingKey {
            namespace: namespace.into(),
        })?;
    parse(text).map_err(|message| RegistryError::Invalid {
        namespace: namespace.into(),
        message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_registry_has_the_three_contracted_runtimes() {
        let registry = parse(DEFAULT_RUNTIMES_YAML).expect("valid");
        let names: Vec<&str> = registry.runtimes.keys().map(String::as_str).collect();
        assert_eq!(names, ["kubernetes", "python-string", "slack"]);
        assert_eq!(
            registry.runtimes["python-string"].params_env_var.as_deref(),
            Some("MCP_TOOLS_STRING")
        );
        assert_eq!(registry.runtimes["kubernetes"].args, ["--port", "8000"]);
        let slack = &registry.runtimes["slack"];
        assert_eq!(slack.args, ["--transport", "http", "--port", "8000"]);
        assert!(
            slack.command.is_empty(),
            "slack starts with args, not a command"
        );
        assert_eq!(slack.required_env, ["SLACK_BOT_TOKEN", "SLACK_TEAM_ID"]);
    }

    #[test]
    fn registry_errors_name_the_config_map_and_key() {
        assert_eq!(
            from_config_map(None, "kaos-system")
                .expect_err("missing")
                .to_string(),
            "the MCP runtime registry ConfigMap kaos-system/kaos-mcp-runtimes was not found: install it (the Helm chart does) or set SYSTEM_NAMESPACE to where it is"
        );
        let empty = ConfigMap::default();
        assert!(
            from_config_map(Some(&empty), "ns")
                .expect_err("no key")
                .to_string()
                .contains("has no key runtimes.yaml")
        );
        let bad = ConfigMap {
            data: Some([(KEY.to_string(), "runtimes: [".to_string())].into()),
            ..Default::default()
        };
        assert!(matches!(
            from_config_map(Some(&bad), "ns"),
            Err(RegistryError::Invalid { .. })
        ));
    }
}
