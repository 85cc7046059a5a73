//! The status vocabulary of the workload kinds (Agent, ModelAPI, MCPServer, MemoryStore): the
//! condition types their controllers set and the reasons they give, each defined once, so the
//! controllers, their tests and `docs/troubleshooting.md` (kept complete by
//! `tests/troubleshooting.rs`) name the same ones. A reason written as a literal where a status is
//! made is refused by `tests/architecture.rs`. The authz and workflow kinds keep theirs beside
//! their status code (`authz-controller/src/status.rs`, `workflow-controller/src/engine/validation.rs`),
//! apart from `Ready`.

/// The condition every kind has: whether the resource serves.
pub const READY: &str = "Ready";
/// The Agent's: whether its ModelAPI, model, MCP servers, peers and MemoryStore resolved.
pub const DEPENDENCIES_READY: &str = "DependenciesReady";
/// The Agent's, while it is bound to a MemoryStore: True while the store is missing or not
/// ready (the agent serves with short-term memory only).
pub const MEMORY_DEGRADED: &str = "MemoryDegraded";
/// The Agent's, while `spec.suspend` is true: True while its Deployment is at zero, False while a
/// workflow step keeps it awake. Also the `Ready` reason of a suspended agent.
pub const SUSPENDED: &str = "Suspended";
/// The MCPServer's: whether the controller spoke MCP with the server it runs (`initialize`, then
/// `tools/list`) once its last rollout became available. Reports only: `Ready` does not wait
/// for it (docs/readiness.md).
pub const PROTOCOL_VERIFIED: &str = "ProtocolVerified";
/// The ModelAPI's: whether the server it runs lists the models its config (LiteLLM) or spec
/// (Ollama) names, asked once its last rollout became available. Reports only: `Ready` does not
/// wait for it (docs/readiness.md).
pub const MODELS_LOADED: &str = "ModelsLoaded";
/// The ModelAPI's: False when `spec.telemetry` asks for what Hosted mode (Ollama) cannot do;
/// absent otherwise.
pub const TELEMETRY_SUPPORTED: &str = "TelemetrySupported";
/// The ModelAPI's, while agents with a budget use it: whether its LiteLLM config carries their
/// entries, and where the counters live. Absent without budgeted agents.
pub const BUDGETS_ENFORCED: &str = "BudgetsEnforced";

// The rollout (every workload kind's `Ready`).

/// The `Ready` reason once the Deployment has its replicas ready.
pub const DEPLOYMENT_READY: &str = "DeploymentReady";
/// The `Ready` reason while the Deployment rolls out.
pub const DEPLOYMENT_NOT_READY: &str = "DeploymentNotReady";
/// The `Ready` reason when the Deployment passed its progress deadline with nothing ready.
pub const ROLLOUT_FAILED: &str = "RolloutFailed";

// What the user must fix in the resource (`Failed`).

/// The `Ready` reason for a name its children's Service could not take (a '.').
pub const INVALID_NAME: &str = "InvalidName";
/// The `Ready` reason for a `spec.podSpec` that cannot be merged over the generated one.
pub const INVALID_POD_SPEC: &str = "InvalidPodSpec";
/// The `Ready` reason for a `spec.container.ports` entry that moves a port the Service and the
/// probes use.
pub const INVALID_CONTAINER_PORTS: &str = "InvalidContainerPorts";
/// The `Ready` reason when no image is set and the operator has no default for the kind.
pub const NO_IMAGE: &str = "NoImage";

// An Agent's dependencies (its `DependenciesReady`, and `Ready` with it).

/// The `DependenciesReady` reason once every dependency resolved.
pub const RESOLVED: &str = "Resolved";
/// The reason when a named ModelAPI does not exist.
pub const MODEL_API_NOT_FOUND: &str = "ModelAPINotFound";
/// The reason while a named ModelAPI is not ready.
pub const MODEL_API_NOT_READY: &str = "ModelAPINotReady";
/// The reason when the agent's model is not one its ModelAPI serves.
pub const MODEL_NOT_SUPPORTED: &str = "ModelNotSupported";
/// The reason when a named MCPServer does not exist.
pub const MCP_SERVER_NOT_FOUND: &str = "MCPServerNotFound";
/// The reason while a named MCPServer is not ready.
pub const MCP_SERVER_NOT_READY: &str = "MCPServerNotReady";
/// The reason for a `config.memory.maxReadScope` wider than the MemoryStore's.
pub const INVALID_MEMORY_READ_SCOPE: &str = "InvalidMemoryReadScope";
/// The reason while the bound MemoryStore does not exist.
pub const MEMORY_STORE_NOT_FOUND: &str = "MemoryStoreNotFound";
/// The reason while the bound MemoryStore is not ready.
pub const MEMORY_STORE_NOT_READY: &str = "MemoryStoreNotReady";
/// The `MemoryDegraded=False` reason: the bound MemoryStore serves.
pub const MEMORY_HEALTHY: &str = "MemoryHealthy";

// An Agent's suspension (docs/scaling.md, "Suspend").

/// The `Suspended=True` reason: `spec.suspend` holds the Deployment at zero pods.
pub const SCALED_TO_ZERO: &str = "ScaledToZero";
/// The `Suspended=False` reason: `spec.suspend` is true, but a workflow step sent to the agent
/// keeps one pod up until no step runs on it.
pub const WOKEN_BY_WORKFLOW: &str = "WokenByWorkflow";

// A ModelAPI's configuration.

/// The `Ready` reason for a `proxyConfig.configYaml` that is not valid YAML or no LiteLLM config.
pub const INVALID_CONFIG_YAML: &str = "InvalidConfigYaml";
/// The `Ready` reason for a `model_name` in the LiteLLM config that `proxyConfig.models` does
/// not allow.
pub const MODEL_NOT_ALLOWED: &str = "ModelNotAllowed";
/// The `Ready` reason for a Proxy ModelAPI without `proxyConfig`.
pub const MISSING_PROXY_CONFIG: &str = "MissingProxyConfig";
/// The `Ready` reason for a Hosted ModelAPI without `hostedConfig`.
pub const MISSING_HOSTED_CONFIG: &str = "MissingHostedConfig";
/// The `TelemetrySupported=False` reason: Ollama (Hosted mode) exports no telemetry.
pub const NOT_SUPPORTED_IN_HOSTED_MODE: &str = "NotSupportedInHostedMode";

// An MCPServer's protocol check (its `ProtocolVerified`).

/// The `ProtocolVerified=True` reason: `initialize` and every page of `tools/list` answered.
pub const TOOLS_LISTED: &str = "ToolsListed";
/// The `ProtocolVerified=True` reason when the server answered 401 or 403: it is reachable and
/// asks for credentials the controller does not present, so its tools are not listed.
pub const AUTHENTICATION_REQUIRED: &str = "AuthenticationRequired";
/// The `ProtocolVerified=False` reason when nothing answered at the server's address (no
/// connection, a name that does not resolve, or no answer within the timeout); also a Hosted
/// ModelAPI's `ModelsLoaded=False` reason when its Ollama server did not answer.
pub const SERVER_UNREACHABLE: &str = "ServerUnreachable";
/// The `ProtocolVerified=False` reason when the server answered `initialize` with an error or
/// with something that is not an MCP answer.
pub const INITIALIZE_FAILED: &str = "InitializeFailed";
/// The `ProtocolVerified=False` reason when `initialize` answered but `tools/list` failed.
pub const TOOLS_LIST_FAILED: &str = "ToolsListFailed";

// A ModelAPI's model check (its `ModelsLoaded`).

/// The `ModelsLoaded=True` reason: the server lists every model expected of it.
pub const MODELS_LISTED: &str = "ModelsListed";
/// The `ModelsLoaded=False` reason when the server answered but does not list some of the models
/// expected of it (LiteLLM could not load a config entry; Ollama has not pulled the model).
pub const MODELS_MISSING: &str = "ModelsMissing";
/// The `ModelsLoaded=False` reason when nothing answered at a Proxy ModelAPI's address.
pub const PROXY_UNREACHABLE: &str = "ProxyUnreachable";
/// The `ModelsLoaded=False` reason when the server answered the readiness or model list request
/// with an HTTP error or with something that is not a model list.
pub const MODELS_LIST_FAILED: &str = "ModelsListFailed";

// An MCPServer's runtime.

/// The `Ready` reason when the runtime registry (the ConfigMap `kaos-mcp-runtimes`) is missing
/// or cannot be read.
pub const REGISTRY_UNAVAILABLE: &str = "RegistryUnavailable";
/// The `Ready` reason for a runtime the registry does not know.
pub const UNKNOWN_RUNTIME: &str = "UnknownRuntime";
/// The `Ready` reason when an environment variable the runtime requires is not set.
pub const MISSING_REQUIRED_ENV: &str = "MissingRequiredEnv";

// Budgets (docs/budgets.md).

/// The `BudgetsEnforced` reason (True) when the counters are kept in the ModelAPI's Redis.
pub const COUNTERS_IN_REDIS: &str = "CountersInRedis";
/// The `BudgetsEnforced` reason (True) when the counters live in each LiteLLM pod (no Redis): they restart from
/// zero with the pod, and each replica enforces each limit alone.
pub const COUNTERS_IN_PROCESS: &str = "CountersInProcess";
/// The `BudgetsEnforced` reason (False) when an agent's model has no entry in the user's `configYaml`, so its
/// budget entry cannot be made.
pub const MODEL_NOT_IN_CONFIG: &str = "ModelNotInConfig";
/// The `Ready` reason of a ModelAPI whose config with every budgeted agent's entry would not
/// fit in its ConfigMap.
pub const CONFIG_TOO_LARGE: &str = "ConfigTooLarge";
/// The Agent's `DependenciesReady` reason when its budget cannot be enforced by its ModelAPI
/// (Hosted, or a config read from a Secret).
pub const BUDGET_NOT_ENFORCEABLE: &str = "BudgetNotEnforceable";

// An Agent's budget (docs/budgets.md, "Usage in the status"): conditions on agents with a
// budget only.

/// The Agent's, with a budget: whether a limit of it is reached, as the usage its ModelAPI's
/// proxy counted shows (which limit: [`TOKENS_PER_DAY`] and the like).
pub const BUDGET_EXCEEDED: &str = "BudgetExceeded";
/// The Agent's, with a budget: whether its usage could be read from its ModelAPI's proxy.
pub const USAGE_REPORTED: &str = "UsageReported";
/// The `BudgetExceeded=True` reason: the tokens of the day window reached `tokensPerDay`.
pub const TOKENS_PER_DAY: &str = "TokensPerDay";
/// The `BudgetExceeded=True` reason: the requests of the day window reached `requestsPerDay`.
pub const REQUESTS_PER_DAY: &str = "RequestsPerDay";
/// The `BudgetExceeded=True` reason: the proxy refused calls (429) for the `tokensPerMinute`
/// limit.
pub const TOKENS_PER_MINUTE: &str = "TokensPerMinute";
/// The `BudgetExceeded=True` reason: the proxy refused calls (429) for the `requestsPerMinute`
/// limit.
pub const REQUESTS_PER_MINUTE: &str = "RequestsPerMinute";
/// The `BudgetExceeded=True` reason: the spend of the cost period reached `cost.limit`.
pub const COST: &str = "Cost";
/// The `BudgetExceeded=False` reason: no limit is reached.
pub const WITHIN_BUDGET: &str = "WithinBudget";
/// The `BudgetExceeded=Unknown` reason: the agent has a cost limit, made requests, and they cost
/// nothing: LiteLLM knows no price for its model.
pub const PRICE_UNKNOWN: &str = "PriceUnknown";
/// The `UsageReported=True` reason: every ready pod of the ModelAPI's proxy was read.
pub const SCRAPED: &str = "Scraped";
/// The `UsageReported=False` reason: a pod of the ModelAPI's proxy could not be read (or there is
/// none).
pub const SCRAPE_FAILED: &str = "ScrapeFailed";
