//! Resolving an Agent's dependencies from the watch caches, in the contract's order: the
//! ModelAPI, the model, each MCPServer, then the peers. Pure: the caller passes lookups.

use kaos_api::agent::Agent;
use kaos_api::mcpserver::MCPServer;
use kaos_api::modelapi::ModelAPI;
use kube::ResourceExt;

/// What the Deployment needs to know about the dependencies.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Resolved {
    pub model_api_url: String,
    /// (name, endpoint), sorted by name.
    pub mcp_servers: Vec<(String, String)>,
    /// (name, endpoint) of the peers that have one (`build::advertised_endpoint`), sorted by
    /// name. The agent itself, when it lists itself, has its own (deterministic) endpoint.
    pub peers: Vec<(String, String)>,
}

/// Why the Agent cannot be deployed (yet): phase `Failed` or `Waiting`, with a reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Blocked {
    pub waiting: bool,
    pub reason: &'static str,
    pub message: String,
}

impl Blocked {
    fn failed(reason: &'static str, message: String) -> Self {
        Self {
            waiting: false,
            reason,
            message,
        }
    }

    fn waiting(reason: &'static str, message: String) -> Self {
        Self {
            waiting: true,
            reason,
            message,
        }
    }
}

pub fn resolve<'a>(
    agent: &Agent,
    model_api: Option<&'a ModelAPI>,
    mcp_server: impl Fn(&str) -> Option<&'a MCPServer>,
    peer_endpoint: impl Fn(&str) -> Option<String>,
) -> Result<Resolved, Blocked> {
    let spec = &agent.spec;
    let namespace = agent.metadata.namespace.as_deref().unwrap_or("default");
    let wait = spec.wait_for_dependencies;
    let Some(model_api) = model_api else {
        return Err(Blocked::failed(
            "ModelAPINotFound",
            format!(
                "Failed to resolve ModelAPI {}: no ModelAPI of that name in namespace {namespace}",
                spec.model_api
            ),
        ));
    };
    let model_status = model_api.status.clone().unwrap_or_default();
    if wait && !model_status.ready {
        return Err(Blocked::waiting(
            "ModelAPINotReady",
            format!("ModelAPI {} is not ready", spec.model_api),
        ));
    }
    if !model_api.spec.serves(&spec.model) {
        return Err(Blocked::failed(
            "ModelNotSupported",
            format!(
                "model {} is not supported by ModelAPI {}; supported models: [{}]",
                spec.model,
                spec.model_api,
                model_api.spec.supported_models().join(", ")
            ),
        ));
    }
    let mut mcp_servers = Vec::new();
    for name in &spec.mcp_servers {
        let Some(server) = mcp_server(name) else {
            return Err(Blocked::failed(
                "MCPServerNotFound",
                format!(
                    "Failed to resolve MCPServer {name}: no MCPServer of that name in namespace {namespace}"
                ),
            ));
        };
        let status = server.status.clone().unwrap_or_default();
        if wait && !status.ready {
            return Err(Blocked::waiting(
                "MCPServerNotReady",
                format!("MCPServer {name} is not ready"),
            ));
        }
        mcp_servers.push((name.clone(), status.endpoint.unwrap_or_default()));
    }
    mcp_servers.sort();
    mcp_servers.dedup();
    let mut peers: Vec<(String, String)> = spec
        .peers()
        .iter()
        .filter_map(|name| {
            let endpoint = if *name == agent.name_any() {
                crate::build::endpoint(agent)?
            } else {
                peer_endpoint(name)?
            };
            Some((name.clone(), endpoint))
        })
        .collect();
    peers.sort();
    peers.dedup();
    Ok(Resolved {
        model_api_url: model_status.endpoint.unwrap_or_default(),
        mcp_servers,
        peers,
    })
}
