//! Resolving an Agent's dependencies from the watch caches, in the contract's order: the
//! ModelAPI, the model, each MCPServer, the peers, then the MemoryStore. Pure: the caller passes
//! lookups.

use kaos_api::agent::Agent;
use kaos_api::budget;
use kaos_api::conditions::{
    BUDGET_NOT_ENFORCEABLE, INVALID_MEMORY_READ_SCOPE, MCP_SERVER_NOT_FOUND, MCP_SERVER_NOT_READY,
    MEMORY_STORE_NOT_FOUND, MEMORY_STORE_NOT_READY, MODEL_API_NOT_FOUND, MODEL_API_NOT_READY,
    MODEL_NOT_SUPPORTED,
};
use kaos_api::mcpserver::MCPServer;
use kaos_api::memorystore::{self, MemoryStore, ReadScope};
use kaos_api::modelapi::{ModelAPI, ModelAPIMode, effective_budget};
use kaos_workload::desired::Problem;
use kube::ResourceExt;

use crate::conditions::DEPENDENCIES_READY;

/// What the Deployment needs to know about the dependencies.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Resolved {
    pub model_api_url: String,
    /// `MODEL_NAME`: the model, or with a budget the agent's alias at its ModelAPI.
    pub model_name: String,
    /// Whether the agent has a budget (its model calls then carry its identity).
    pub budgeted: bool,
    /// (name, endpoint), sorted by name.
    pub mcp_servers: Vec<(String, String)>,
    /// (name, endpoint) of the peers that have one (`naming::advertised_endpoint`), sorted by
    /// name. The agent itself, when it lists itself, has its own (deterministic) endpoint.
    pub peers: Vec<(String, String)>,
    /// The MemoryStore the agent binds to (`config.memory` of type `remote`).
    pub memory: Option<BoundMemory>,
}

/// An Agent's binding to its MemoryStore.
#[derive(Clone, Debug, PartialEq)]
pub struct BoundMemory {
    pub store: String,
    /// The store's Service endpoint. Known from its name, so the pods keep it (and are not rolled)
    /// while the store is away; the runtime's `failureMode` says what requests do meanwhile.
    pub endpoint: String,
    /// `MEMORY_MAX_READ_SCOPE`: the agent's own, else the store's ceiling; `session` while the
    /// store is missing, as in KAOS (so deleting the store rolls such an agent's pods once).
    pub max_read_scope: ReadScope,
    /// Why the store cannot serve now (missing or not ready): the `MemoryDegraded` message.
    pub degraded: Option<String>,
}

/// A dependency that cannot work as named (phase `Failed`), shown on `DependenciesReady`.
fn failed(reason: &'static str, message: String) -> Problem {
    Problem::failed(reason, message).about(DEPENDENCIES_READY)
}

/// A dependency not there or not ready yet (phase `Waiting`), shown on `DependenciesReady`.
fn waiting(reason: &'static str, message: String) -> Problem {
    Problem::waiting(reason, message).about(DEPENDENCIES_READY)
}

pub fn resolve<'a>(
    agent: &Agent,
    model_api: Option<&'a ModelAPI>,
    mcp_server: impl Fn(&str) -> Option<&'a MCPServer>,
    peer_endpoint: impl Fn(&str) -> Option<String>,
) -> Result<Resolved, Problem> {
    let spec = &agent.spec;
    let namespace = agent.metadata.namespace.as_deref().unwrap_or("default");
    let wait = spec.wait_for_dependencies;
    let Some(model_api) = model_api else {
        return Err(failed(
            MODEL_API_NOT_FOUND,
            format!(
                "Failed to resolve ModelAPI {}: no ModelAPI of that name in namespace {namespace}",
                spec.model_api
            ),
        ));
    };
    let model_status = model_api.status.clone().unwrap_or_default();
    if wait && !model_status.ready {
        return Err(waiting(
            MODEL_API_NOT_READY,
            format!("ModelAPI {} is not ready", spec.model_api),
        ));
    }
    if !model_api.spec.serves(&spec.model) {
        // KAOS users' scripts match "not found in models list".
        return Err(failed(
            MODEL_NOT_SUPPORTED,
            format!(
                "model {} not found in models list of ModelAPI {}: [{}]",
                spec.model,
                spec.model_api,
                model_api.spec.supported_models().join(", ")
            ),
        ));
    }
    let budgeted = effective_budget(spec.budget.as_ref(), Some(&model_api.spec)).is_some();
    if budgeted {
        enforceable(model_api)?;
    }
    let model_name = match budgeted {
        true => budget::alias(namespace, &agent.name_any()),
        false => spec.model.clone(),
    };
    let mut mcp_servers = Vec::new();
    for name in &spec.mcp_servers {
        let Some(server) = mcp_server(name) else {
            return Err(failed(
                MCP_SERVER_NOT_FOUND,
                format!(
                    "Failed to resolve MCPServer {name}: no MCPServer of that name in namespace {namespace}"
                ),
            ));
        };
        let status = server.status.clone().unwrap_or_default().workload;
        if wait && !status.ready {
            return Err(waiting(
                MCP_SERVER_NOT_READY,
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
                crate::naming::endpoint(agent)?
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
        model_name,
        budgeted,
        mcp_servers,
        peers,
        memory: None,
    })
}

/// A budget is enforced by a Proxy ModelAPI's LiteLLM, in a config the controller writes.
fn enforceable(model_api: &ModelAPI) -> Result<(), Problem> {
    let name = model_api.name_any();
    let proxy = match model_api.spec.mode {
        ModelAPIMode::Hosted => {
            return Err(failed(
                BUDGET_NOT_ENFORCEABLE,
                format!(
                    "spec.budget: ModelAPI {name} is Hosted (Ollama), which cannot enforce a budget; use a Proxy ModelAPI (LiteLLM) or remove the budget"
                ),
            ));
        }
        ModelAPIMode::Proxy => model_api.spec.proxy_config.as_ref(),
    };
    if proxy
        .and_then(|p| p.config_yaml.as_ref())
        .is_some_and(|c| c.from_secret_key_ref.is_some())
    {
        return Err(failed(
            BUDGET_NOT_ENFORCEABLE,
            format!(
                "spec.budget: ModelAPI {name} reads its LiteLLM config from a Secret (proxyConfig.configYaml.fromSecretKeyRef), which cannot be given the agent's budget entry; use configYaml.fromString or the generated config, or remove the budget"
            ),
        ));
    }
    Ok(())
}

/// The binding to the MemoryStore named by a `remote` memory, resolved after the rest. A
/// missing or unready store holds back the first Deployment (`first_deployment`, when the
/// agent waits for its dependencies), as in KAOS; afterwards the agent keeps serving and the
/// binding says it is degraded. An agent may not read wider than the store allows.
pub fn bind_memory(
    agent: &Agent,
    store: Option<&MemoryStore>,
    first_deployment: bool,
) -> Result<Option<BoundMemory>, Problem> {
    let Some(memory) = agent.spec.config.as_ref().and_then(|c| c.memory.as_ref()) else {
        return Ok(None);
    };
    let Some(name) = memory.bound_store() else {
        return Ok(None);
    };
    let namespace = agent.metadata.namespace.as_deref().unwrap_or("default");
    let ceiling = store.map(|s| s.spec.effective_max_read_scope());
    let max_read_scope = memory
        .max_read_scope
        .or(ceiling)
        .unwrap_or(ReadScope::Session);
    if let Some(ceiling) = ceiling.filter(|c| max_read_scope > *c) {
        return Err(failed(
            INVALID_MEMORY_READ_SCOPE,
            format!(
                "config.memory.maxReadScope {} exceeds MemoryStore {name} maxReadScope {}",
                max_read_scope.as_str(),
                ceiling.as_str()
            ),
        ));
    }
    let degraded = match store {
        None => Some(waiting(
            MEMORY_STORE_NOT_FOUND,
            format!("MemoryStore {name} not found"),
        )),
        Some(s) if !s.status.as_ref().is_some_and(|s| s.ready) => Some(waiting(
            MEMORY_STORE_NOT_READY,
            format!("MemoryStore {name} is not ready"),
        )),
        Some(_) => None,
    };
    if let Some(blocked) = degraded
        .clone()
        .filter(|_| first_deployment && agent.spec.wait_for_dependencies)
    {
        return Err(blocked);
    }
    Ok(Some(BoundMemory {
        store: name.to_string(),
        endpoint: memorystore::endpoint(name, namespace),
        max_read_scope,
        degraded: degraded.map(|blocked| blocked.message),
    }))
}
