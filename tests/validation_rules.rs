//! The CRDs reject bad input with a message naming the field and what to fix, and their defaults
//! are the same as the Rust types' defaults (so `kaosctl render` and the API server agree).
//! Long because `rejected_cases` is one table, a row per rule, best read in one place.

use kaos_api::agent::Agent;
use kaos_api::mcpserver::MCPServer;
use kaos_api::modelapi::ModelAPI;
use kaos_api::workflow::{AgentWorkflow, AgentWorkflowRun, ConcurrencyPolicy, RunTrigger};
use kaos_harness::Schemas;
use kaos_schema::{CrdSchema, FieldError, UnknownFields};
use serde_json::{Value, json};

fn agent(spec: Value) -> Value {
    json!({"apiVersion": "kaos.tools/v1alpha1", "kind": "Agent", "metadata": {"name": "a"}, "spec": spec})
}
fn modelapi(spec: Value) -> Value {
    json!({"apiVersion": "kaos.tools/v1alpha1", "kind": "ModelAPI", "metadata": {"name": "m"}, "spec": spec})
}
fn mcpserver(spec: Value) -> Value {
    json!({"apiVersion": "kaos.tools/v1alpha1", "kind": "MCPServer", "metadata": {"name": "t"}, "spec": spec})
}
fn memorystore(extra: Value) -> Value {
    let mut spec = json!({"storage": {"type": "local"},
        "models": {"summarization": {"modelAPI": "m", "model": "gpt-4o-mini"},
                   "embedding": {"modelAPI": "m", "model": "text-embedding-3-small"}}});
    spec.as_object_mut()
        .expect("object")
        .extend(extra.as_object().expect("object").clone());
    json!({"apiVersion": "kaos.tools/v1alpha1", "kind": "MemoryStore", "metadata": {"name": "mem"}, "spec": spec})
}
fn grant(resources: Value) -> Value {
    grant_to(json!([{"kind": "Group", "name": "researchers"}]), resources)
}
fn grant_to(subjects: Value, resources: Value) -> Value {
    json!({"apiVersion": "kaos.tools/v1alpha1", "kind": "AccessGrant", "metadata": {"name": "g"},
           "spec": {"subjects": subjects, "resources": resources}})
}
/// An AgentWorkflow with these steps (`[name, agent]` pairs become `{name, agentRef}`) and
/// these other spec fields.
fn workflow(steps: Value, extra: Value) -> Value {
    let mut spec = json!({"steps": steps});
    spec.as_object_mut()
        .expect("object")
        .extend(extra.as_object().expect("object").clone());
    json!({"apiVersion": "kaos.tools/v1alpha1", "kind": "AgentWorkflow", "metadata": {"name": "wf"}, "spec": spec})
}
fn step(name: &str, depends_on: &[&str]) -> Value {
    json!({"name": name, "agentRef": "writer", "dependsOn": depends_on})
}
fn run(spec: Value) -> Value {
    json!({"apiVersion": "kaos.tools/v1alpha1", "kind": "AgentWorkflowRun", "metadata": {"name": "wf-1"}, "spec": spec})
}
fn memory(memory: Value) -> Value {
    agent(json!({"modelAPI": "m", "model": "x", "config": {"memory": memory}}))
}

fn budget(budget: Value) -> Value {
    agent(json!({"modelAPI": "m", "model": "x", "budget": budget}))
}

fn named(mut manifest: Value, name: &str) -> Value {
    manifest["metadata"]["name"] = json!(name);
    manifest
}

fn proxy(extra: Value) -> Value {
    let mut proxy = json!({"models": ["*"]});
    proxy
        .as_object_mut()
        .expect("object")
        .extend(extra.as_object().expect("object").clone());
    modelapi(json!({"mode": "Proxy", "proxyConfig": proxy}))
}

/// (case, manifest, the one error expected)
fn rejected_cases() -> Vec<(&'static str, Value, &'static str)> {
    let secret = json!({"name": "s", "key": "k"});
    vec![
        (
            "a granted resource named and selected",
            grant(
                json!([{"kind": "Agent", "name": "a", "selector": {"matchLabels": {"team": "x"}}}]),
            ),
            r#"spec.resources[0]: Invalid value: set kind and name together, or selector, not both"#,
        ),
        (
            "a granted resource of a kind that does not exist",
            grant(json!([{"kind": "Tool", "name": "search"}])),
            // `null`: the field is optional (a selector instead), as kube-apiserver lists it too.
            r#"spec.resources[0].kind: Unsupported value: "Tool": supported values: "Agent", "MCPServer", "ModelAPI", "MemoryStore", null"#,
        ),
        (
            "a grant to nobody",
            grant_to(json!([]), json!([{"kind": "Agent", "name": "a"}])),
            "spec.subjects: Invalid value: 0: spec.subjects in body should have at least 1 items",
        ),
        (
            "a subject of a kind that does not exist",
            grant_to(
                json!([{"kind": "Robot", "name": "r2"}]),
                json!([{"kind": "Agent", "name": "a"}]),
            ),
            r#"spec.subjects[0].kind: Unsupported value: "Robot": supported values: "User", "Group", "Agent""#,
        ),
        (
            "an Agent subject that cannot be an Agent's name",
            grant_to(
                json!([{"kind": "Agent", "name": "Research Bot"}]),
                json!([{"kind": "Agent", "name": "a"}]),
            ),
            "spec.subjects[0]: Invalid value: an Agent subject is the name of an Agent of this namespace (lower case letters, digits and '-', at most 63)",
        ),
        (
            "remote memory without a store",
            memory(json!({"type": "remote"})),
            r#"spec.config.memory: Invalid value: type 'remote' requires memoryStore to be set"#,
        ),
        (
            "local memory with a store",
            memory(json!({"type": "local", "memoryStore": "mem"})),
            r#"spec.config.memory: Invalid value: type 'local' must not set memoryStore"#,
        ),
        (
            "memory tools without a store",
            memory(json!({"tools": "read"})),
            r#"spec.config.memory: Invalid value: tools requires memoryStore to be set"#,
        ),
        (
            "a read scope wider than the session without a store",
            memory(json!({"maxReadScope": "agent"})),
            r#"spec.config.memory: Invalid value: non-session maxReadScope requires memoryStore to be set"#,
        ),
        (
            "a security id with upper case",
            agent(json!({"modelAPI": "m", "model": "x", "security": {"id": "Support-Bot"}})),
            r#"spec.security.id: Invalid value: "Support-Bot": spec.security.id in body should match '^[a-z0-9]([a-z0-9._-]*[a-z0-9])?$'"#,
        ),
        (
            "two replicas of local memory storage",
            memorystore(json!({"replicas": 2})),
            r#"spec.replicas: Invalid value: replicas must be 1 in local storage mode"#,
        ),
        (
            "external memory storage without its settings",
            memorystore(json!({"storage": {"type": "external"}})),
            r#"spec.storage: Invalid value: storage.external is required when storage.type is external"#,
        ),
        (
            "a compaction target above the trigger",
            memorystore(
                json!({"shortTerm": {"tokenBudget": 64}, "mediumTerm": {"compactionTrigger": 32, "compactionTarget": 48}}),
            ),
            r#"spec: Invalid value: short-term compaction marks must satisfy 0 < compactionTarget < compactionTrigger <= tokenBudget (0 or absent marks derive from the token budget)"#,
        ),
        (
            "a compaction trigger above the token budget",
            memorystore(
                json!({"shortTerm": {"tokenBudget": 64}, "mediumTerm": {"compactionTrigger": 100}}),
            ),
            r#"spec: Invalid value: short-term compaction marks must satisfy 0 < compactionTarget < compactionTrigger <= tokenBudget (0 or absent marks derive from the token budget)"#,
        ),
        (
            "Proxy without proxyConfig",
            modelapi(json!({"mode": "Proxy"})),
            r#"spec: Invalid value: mode Proxy requires proxyConfig (at least proxyConfig.models)"#,
        ),
        (
            "Hosted without hostedConfig",
            modelapi(json!({"mode": "Hosted"})),
            r#"spec: Invalid value: mode Hosted requires hostedConfig (at least hostedConfig.model)"#,
        ),
        (
            "configYaml with both sources",
            proxy(
                json!({"configYaml": {"fromString": "model_list: []", "fromSecretKeyRef": secret}}),
            ),
            r#"spec.proxyConfig.configYaml: Invalid value: configYaml: set exactly one of fromString or fromSecretKeyRef"#,
        ),
        (
            "configYaml with no source",
            proxy(json!({"configYaml": {}})),
            r#"spec.proxyConfig.configYaml: Invalid value: configYaml: set exactly one of fromString or fromSecretKeyRef"#,
        ),
        (
            "apiKey with value and valueFrom",
            proxy(json!({"apiKey": {"value": "sk", "valueFrom": {"secretKeyRef": secret}}})),
            r#"spec.proxyConfig.apiKey: Invalid value: apiKey: set exactly one of value or valueFrom"#,
        ),
        (
            "apiKey.valueFrom with both refs",
            proxy(
                json!({"apiKey": {"valueFrom": {"secretKeyRef": secret, "configMapKeyRef": secret}}}),
            ),
            r#"spec.proxyConfig.apiKey.valueFrom: Invalid value: apiKey.valueFrom: set exactly one of secretKeyRef or configMapKeyRef"#,
        ),
        (
            "custom runtime without image",
            mcpserver(json!({"runtime": "custom"})),
            r#"spec: Invalid value: runtime custom requires container.image (the MCP server image to run)"#,
        ),
        (
            "custom runtime with an empty image",
            mcpserver(json!({"runtime": "custom", "container": {"image": ""}})),
            r#"spec: Invalid value: runtime custom requires container.image (the MCP server image to run)"#,
        ),
        (
            "gateway timeout that is not a duration",
            agent(
                json!({"modelAPI": "m", "model": "x", "gatewayRoute": {"timeout": "30 seconds"}}),
            ),
            r#"spec.gatewayRoute.timeout: Invalid value: "30 seconds": timeout must be a duration such as 30s, 5m, 1h30m or 500ms (0s sets no timeout)"#,
        ),
        (
            "unknown mode",
            modelapi(json!({"mode": "Local", "hostedConfig": {"model": "x"}})),
            r#"spec.mode: Unsupported value: "Local": supported values: "Proxy", "Hosted""#,
        ),
        (
            "empty models list",
            modelapi(json!({"mode": "Proxy", "proxyConfig": {"models": []}})),
            "spec.proxyConfig.models: Invalid value: 0: spec.proxyConfig.models in body should have at least 1 items",
        ),
        (
            "missing model",
            agent(json!({"modelAPI": "m"})),
            "spec.model: Required value",
        ),
        (
            "missing modelAPI",
            agent(json!({"model": "x"})),
            "spec.modelAPI: Required value",
        ),
        (
            "missing runtime",
            mcpserver(json!({})),
            "spec.runtime: Required value",
        ),
        (
            "missing hosted model",
            modelapi(json!({"mode": "Hosted", "hostedConfig": {}})),
            "spec.hostedConfig.model: Required value",
        ),
        (
            "loop steps above 20",
            agent(json!({"modelAPI": "m", "model": "x", "config": {"reasoningLoopMaxSteps": 21}})),
            "spec.config.reasoningLoopMaxSteps: Invalid value: 21: spec.config.reasoningLoopMaxSteps in body should be less than or equal to 20",
        ),
        (
            "loop steps below 1",
            agent(json!({"modelAPI": "m", "model": "x", "config": {"reasoningLoopMaxSteps": 0}})),
            "spec.config.reasoningLoopMaxSteps: Invalid value: 0: spec.config.reasoningLoopMaxSteps in body should be greater than or equal to 1",
        ),
        (
            "context limit above 100",
            agent(
                json!({"modelAPI": "m", "model": "x", "config": {"memory": {"contextLimit": 101}}}),
            ),
            "spec.config.memory.contextLimit: Invalid value: 101: spec.config.memory.contextLimit in body should be less than or equal to 100",
        ),
        (
            "max sessions above 100000",
            agent(
                json!({"modelAPI": "m", "model": "x", "config": {"memory": {"maxSessions": 100001}}}),
            ),
            "spec.config.memory.maxSessions: Invalid value: 100001: spec.config.memory.maxSessions in body should be less than or equal to 100000",
        ),
        (
            "max session events 0",
            agent(
                json!({"modelAPI": "m", "model": "x", "config": {"memory": {"maxSessionEvents": 0}}}),
            ),
            "spec.config.memory.maxSessionEvents: Invalid value: 0: spec.config.memory.maxSessionEvents in body should be greater than or equal to 1",
        ),
        (
            "unknown memory type",
            agent(json!({"modelAPI": "m", "model": "x", "config": {"memory": {"type": "redis"}}})),
            r#"spec.config.memory.type: Unsupported value: "redis": supported values: "local", "remote""#,
        ),
        (
            "negative replicas",
            agent(json!({"modelAPI": "m", "model": "x", "replicas": -1})),
            "spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0",
        ),
        (
            "expose as a string",
            agent(json!({"modelAPI": "m", "model": "x", "agentNetwork": {"expose": "yes"}})),
            r#"spec.agentNetwork.expose: Invalid value: "string": spec.agentNetwork.expose in body must be of type boolean: "string""#,
        ),
        (
            "misspelt field under strict validation",
            agent(json!({"modelAPI": "m", "model": "x", "mcpServer": ["t"]})),
            r#"unknown field "spec.mcpServer""#,
        ),
        (
            "an Agent name too long for its children's names",
            named(
                agent(json!({"modelAPI": "m", "model": "x"})),
                &"a".repeat(58),
            ),
            "<nil>: Invalid value: metadata.name must be a DNS label of at most 57 characters (lowercase letters, digits and '-', no '.'): the Agent's Deployment and Service are named agent-<name>, a DNS-1035 label of at most 63",
        ),
        (
            "a ModelAPI name too long for its children's names",
            named(
                modelapi(json!({"mode": "Hosted", "hostedConfig": {"model": "x"}})),
                &"m".repeat(55),
            ),
            "<nil>: Invalid value: metadata.name must be a DNS label of at most 54 characters (lowercase letters, digits and '-', no '.'): the ModelAPI's Deployment and Service are named modelapi-<name>, a DNS-1035 label of at most 63",
        ),
        (
            "an MCPServer name too long for its children's names",
            named(mcpserver(json!({"runtime": "kubernetes"})), &"t".repeat(54)),
            "<nil>: Invalid value: metadata.name must be a DNS label of at most 53 characters (lowercase letters, digits and '-', no '.'): the MCPServer's Deployment and Service are named mcpserver-<name>, a DNS-1035 label of at most 63",
        ),
        (
            "an Agent name with a dot (its Service agent-team.alpha is no DNS-1035 label)",
            named(agent(json!({"modelAPI": "m", "model": "x"})), "team.alpha"),
            "<nil>: Invalid value: metadata.name must be a DNS label of at most 57 characters (lowercase letters, digits and '-', no '.'): the Agent's Deployment and Service are named agent-<name>, a DNS-1035 label of at most 63",
        ),
        (
            "a ModelAPI name with a dot",
            named(
                modelapi(json!({"mode": "Hosted", "hostedConfig": {"model": "x"}})),
                "team.llm",
            ),
            "<nil>: Invalid value: metadata.name must be a DNS label of at most 54 characters (lowercase letters, digits and '-', no '.'): the ModelAPI's Deployment and Service are named modelapi-<name>, a DNS-1035 label of at most 63",
        ),
        (
            "an MCPServer name with a dot",
            named(mcpserver(json!({"runtime": "kubernetes"})), "team.tools"),
            "<nil>: Invalid value: metadata.name must be a DNS label of at most 53 characters (lowercase letters, digits and '-', no '.'): the MCPServer's Deployment and Service are named mcpserver-<name>, a DNS-1035 label of at most 63",
        ),
        (
            "a MemoryStore name with a dot",
            named(memorystore(json!({})), "team.memory"),
            "<nil>: Invalid value: metadata.name must be a DNS label of at most 51 characters (lowercase letters, digits and '-', no '.'): the MemoryStore's Deployment and Service are named memorystore-<name>, a DNS-1035 label of at most 63",
        ),
        (
            "a budget with no limit",
            budget(json!({"onExceeded": "Reject"})),
            "spec.budget: Invalid value: a budget sets at least one of tokensPerDay, requestsPerDay, tokensPerMinute, requestsPerMinute or cost",
        ),
        (
            "a negative tokens-per-day limit",
            budget(json!({"tokensPerDay": -5})),
            "spec.budget.tokensPerDay: Invalid value: -5: spec.budget.tokensPerDay in body should be greater than or equal to 1",
        ),
        (
            "an absurd requests-per-minute limit",
            budget(json!({"requestsPerMinute": 10_000_000_000_i64})),
            "spec.budget.requestsPerMinute: Invalid value: 10000000000: spec.budget.requestsPerMinute in body should be less than or equal to 1000000000",
        ),
        (
            "a reset time that is no time of day",
            budget(json!({"requestsPerDay": 10, "dailyResetTime": "24:00"})),
            "spec.budget.dailyResetTime: Invalid value: \"24:00\": spec.budget.dailyResetTime in body should match '^([01][0-9]|2[0-3]):[0-5][0-9]$'",
        ),
        (
            "a tokens-per-day limit with a later reset time",
            budget(json!({"tokensPerDay": 1000, "dailyResetTime": "06:00"})),
            "spec.budget.dailyResetTime: Invalid value: dailyResetTime other than 00:00 cannot be combined with tokensPerDay: LiteLLM 1.110.2 does not enforce a tokens-per-day limit until a later reset time of the day (docs/budgets.md); use 00:00 or a requestsPerDay limit",
        ),
        (
            "a budget that suspends the agent",
            budget(json!({"tokensPerDay": 1000, "onExceeded": "Suspend"})),
            "spec.budget.onExceeded: Invalid value: onExceeded: Suspend needs agents that scale to zero, which this version does not have yet; use Reject (the proxy refuses the agent's model calls until the window resets)",
        ),
        (
            "a cost limit of zero",
            budget(json!({"cost": {"limit": "0"}})),
            "spec.budget.cost.limit: Invalid value: cost.limit must be more than 0",
        ),
        (
            "a cost limit that is no amount",
            budget(json!({"cost": {"limit": "-1"}})),
            "spec.budget.cost.limit: Invalid value: \"-1\": spec.budget.cost.limit in body should match '^(0|[1-9][0-9]{0,5})(\\.[0-9]{1,6})?$'",
        ),
        (
            "a cost period LiteLLM does not know",
            budget(json!({"cost": {"limit": "5", "period": "1w"}})),
            "spec.budget.cost.period: Invalid value: \"1w\": spec.budget.cost.period in body should match '^[1-9][0-9]{0,3}(s|m|h|d|mo)$'",
        ),
        (
            "a model priced twice",
            proxy(json!({"prices": [
                {"model": "m", "inputPerMillionTokens": "1", "outputPerMillionTokens": "2"},
                {"model": "m", "inputPerMillionTokens": "1", "outputPerMillionTokens": "2"}]})),
            "spec.proxyConfig.prices: Invalid value: prices must not name the same model twice",
        ),
        (
            "a Redis port out of range",
            proxy(json!({"redis": {"host": "redis", "port": 70000}})),
            "spec.proxyConfig.redis.port: Invalid value: 70000: spec.proxyConfig.redis.port in body should be less than or equal to 65535",
        ),
        (
            "an agent listing itself as a peer",
            agent(json!({"modelAPI": "m", "model": "x", "agentNetwork": {"access": ["b", "a"]}})),
            "spec.agentNetwork.access: Invalid value: an agent cannot list itself in agentNetwork.access",
        ),
        (
            "a peer listed twice",
            agent(
                json!({"modelAPI": "m", "model": "x", "agentNetwork": {"access": ["b", "c", "b"]}}),
            ),
            "spec.agentNetwork.access: Invalid value: access must not name the same agent twice",
        ),
        (
            "an MCPServer listed twice",
            agent(json!({"modelAPI": "m", "model": "x", "mcpServers": ["t", "t"]})),
            "spec.mcpServers: Invalid value: mcpServers must not name the same MCPServer twice",
        ),
        (
            "an empty modelAPI",
            agent(json!({"modelAPI": "", "model": "x"})),
            "spec.modelAPI: Invalid value: \"\": spec.modelAPI in body should be at least 1 chars long",
        ),
        (
            "an empty model",
            agent(json!({"modelAPI": "m", "model": ""})),
            "spec.model: Invalid value: \"\": spec.model in body should be at least 1 chars long",
        ),
        (
            "a peer name that is not a DNS label",
            agent(json!({"modelAPI": "m", "model": "x", "agentNetwork": {"access": ["Peer_1"]}})),
            "spec.agentNetwork.access[0]: Invalid value: \"Peer_1\": spec.agentNetwork.access[0] in body should match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'",
        ),
        (
            "an empty MCPServer name in mcpServers",
            agent(json!({"modelAPI": "m", "model": "x", "mcpServers": [""]})),
            "spec.mcpServers[0]: Invalid value: \"\": spec.mcpServers[0] in body should be at least 1 chars long",
        ),
        (
            "instructions over 64 KiB",
            agent(
                json!({"modelAPI": "m", "model": "x", "config": {"instructions": "i".repeat(65_537)}}),
            ),
            "spec.config.instructions: Too long: may not be more than 65536 bytes",
        ),
        (
            "MCP params over 64 KiB",
            mcpserver(json!({"runtime": "python-string", "params": "p".repeat(65_537)})),
            "spec.params: Too long: may not be more than 65536 bytes",
        ),
        (
            "configYaml over 256 KiB",
            proxy(json!({"configYaml": {"fromString": "#".repeat(262_145)}})),
            "spec.proxyConfig.configYaml.fromString: Too long: may not be more than 262144 bytes",
        ),
        (
            "an env var name a shell cannot read",
            agent(
                json!({"modelAPI": "m", "model": "x", "container": {"env": [{"name": "MY-VAR", "value": "1"}]}}),
            ),
            "spec.container.env[0].name: Invalid value: \"MY-VAR\": spec.container.env[0].name in body should match '^[A-Za-z_][A-Za-z0-9_]*$'",
        ),
        (
            "more than 128 peers",
            agent(
                json!({"modelAPI": "m", "model": "x", "agentNetwork": {"access": (0..129).map(|i| format!("p{i}")).collect::<Vec<_>>()}}),
            ),
            "spec.agentNetwork.access: Too many: 129: must have at most 128 items",
        ),
        (
            "a runtime name that is not a DNS label",
            mcpserver(json!({"runtime": "Python String"})),
            "spec.runtime: Invalid value: \"Python String\": spec.runtime in body should match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'",
        ),
        (
            "both proxyConfig and hostedConfig",
            modelapi(
                json!({"mode": "Proxy", "proxyConfig": {"models": ["*"]}, "hostedConfig": {"model": "x"}}),
            ),
            "spec: Invalid value: set proxyConfig (mode Proxy) or hostedConfig (mode Hosted), not both",
        ),
        (
            "a resource quantity that is not one",
            agent(
                json!({"modelAPI": "m", "model": "x", "container": {"resources": {"limits": {"memory": "1 GB"}}}}),
            ),
            r#"spec.container.resources.limits.memory: Invalid value: "1 GB": spec.container.resources.limits.memory in body should match '^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$'"#,
        ),
        (
            "two steps of the same name",
            workflow(json!([step("fetch", &[]), step("fetch", &[])]), json!({})),
            "spec.steps: Invalid value: step names must be unique within a workflow",
        ),
        (
            "a dependency on a step the workflow does not have",
            workflow(
                json!([step("fetch", &[]), step("summarize", &["fetch", "fecth"])]),
                json!({}),
            ),
            "spec.steps: Invalid value: every dependsOn entry must name a step of this workflow",
        ),
        (
            "a step that depends on itself",
            workflow(
                json!([
                    step("fetch", &[]),
                    step("summarize", &["fetch", "summarize"])
                ]),
                json!({}),
            ),
            "spec.steps[1].dependsOn: Invalid value: a step cannot depend on itself",
        ),
        (
            "a step name that is not a DNS label",
            workflow(json!([step("Fetch_Data", &[])]), json!({})),
            "spec.steps[0].name: Invalid value: \"Fetch_Data\": spec.steps[0].name in body should match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'",
        ),
        (
            "a workflow without steps",
            workflow(json!([]), json!({})),
            "spec.steps: Invalid value: 0: spec.steps in body should have at least 1 items",
        ),
        (
            "more than 32 steps",
            workflow(
                Value::Array((0..33).map(|i| step(&format!("s{i}"), &[])).collect()),
                json!({}),
            ),
            "spec.steps: Too many: 33: must have at most 32 items",
        ),
        (
            "a schedule that is not a cron expression",
            workflow(
                json!([step("fetch", &[])]),
                json!({"schedule": "every day"}),
            ),
            "spec.schedule: Invalid value: \"every day\": schedule must be a cron expression of five fields separated by spaces (minute hour day-of-month month day-of-week) or one of @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly",
        ),
        (
            "a schedule of six fields",
            workflow(
                json!([step("fetch", &[])]),
                json!({"schedule": "0 0 9 * * 1-5"}),
            ),
            "spec.schedule: Invalid value: \"0 0 9 * * 1-5\": schedule must be a cron expression of five fields separated by spaces (minute hour day-of-month month day-of-week) or one of @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly",
        ),
        (
            "an unknown concurrency policy",
            workflow(
                json!([step("fetch", &[])]),
                json!({"concurrencyPolicy": "Queue"}),
            ),
            r#"spec.concurrencyPolicy: Unsupported value: "Queue": supported values: "Allow", "Forbid", "Replace""#,
        ),
        (
            "a history limit above 100",
            workflow(
                json!([step("fetch", &[])]),
                json!({"successfulRunsHistoryLimit": 101}),
            ),
            "spec.successfulRunsHistoryLimit: Invalid value: 101: spec.successfulRunsHistoryLimit in body should be less than or equal to 100",
        ),
        (
            "a negative history limit",
            workflow(
                json!([step("fetch", &[])]),
                json!({"failedRunsHistoryLimit": -1}),
            ),
            "spec.failedRunsHistoryLimit: Invalid value: -1: spec.failedRunsHistoryLimit in body should be greater than or equal to 0",
        ),
        (
            "more than 10 retries",
            workflow(
                json!([{"name": "fetch", "agentRef": "writer", "retries": 11}]),
                json!({}),
            ),
            "spec.steps[0].retries: Invalid value: 11: spec.steps[0].retries in body should be less than or equal to 10",
        ),
        (
            "a step timeout of 0",
            workflow(
                json!([{"name": "fetch", "agentRef": "writer", "timeoutSeconds": 0}]),
                json!({}),
            ),
            "spec.steps[0].timeoutSeconds: Invalid value: 0: spec.steps[0].timeoutSeconds in body should be greater than or equal to 1",
        ),
        (
            "a step without an agent",
            workflow(json!([{"name": "fetch"}]), json!({})),
            "spec.steps[0].agentRef: Required value",
        ),
        (
            "a run without a workflow",
            run(json!({"input": "x"})),
            "spec.workflowRef: Required value",
        ),
        (
            "an unknown run trigger",
            run(json!({"workflowRef": "wf", "trigger": "Webhook"})),
            r#"spec.trigger: Unsupported value: "Webhook": supported values: "Manual", "Schedule""#,
        ),
        (
            "podSpec container without a name",
            agent(
                json!({"modelAPI": "m", "model": "x", "podSpec": {"containers": [{"image": "i"}]}}),
            ),
            "spec.podSpec.containers[0].name: Required value",
        ),
    ]
}

/// What kube-apiserver adds after a required, unsupported or mistyped value: the CEL rules were
/// not evaluated (tests/control_plane/test_differential.py compares it with the real one).
const CEL_SKIPPED: &str = "<nil>: Invalid value: null: some validation rules were not checked \
    because the object was invalid; correct the existing errors to complete validation";

#[test]
fn bad_manifests_are_rejected_with_a_message_that_says_what_to_fix() {
    let schemas = Schemas::default();
    let mut failures = Vec::new();
    for (case, manifest, expected) in rejected_cases() {
        let admitted = schemas.admit(&manifest).map_err(|errors| {
            let errors = errors.into_iter().filter(|e| e != CEL_SKIPPED);
            errors.collect::<Vec<_>>()
        });
        match admitted {
            Ok(_) => failures.push(format!("{case}: accepted")),
            Err(errors) if errors != [expected] => failures.push(format!(
                "{case}:\n  expected {expected}\n  got      {errors:?}"
            )),
            Err(_) => {}
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn good_manifests_near_each_rule_are_accepted() {
    let schemas = Schemas::default();
    let secret = json!({"name": "s", "key": "k"});
    let accepted = [
        modelapi(json!({"mode": "Hosted", "hostedConfig": {"model": "smollm2:135m"}})),
        proxy(json!({"configYaml": {"fromString": "model_list: []"}})),
        proxy(json!({"configYaml": {"fromSecretKeyRef": secret}})),
        proxy(json!({"apiKey": {"value": "sk-test"}})),
        proxy(json!({"apiKey": {"valueFrom": {"configMapKeyRef": secret}}})),
        mcpserver(json!({"runtime": "custom", "container": {"image": "ghcr.io/x/y:1"}})),
        mcpserver(json!({"runtime": "python-string", "params": "def f(): pass"})),
        agent(json!({"modelAPI": "m", "model": "x", "gatewayRoute": {"timeout": "0s"}})),
        budget(
            json!({"tokensPerDay": 2_000_000, "requestsPerMinute": 60, "dailyResetTime": "00:00",
                      "cost": {"limit": "5.25", "period": "1mo"}, "onExceeded": "Reject"}),
        ),
        budget(json!({"requestsPerDay": 100, "dailyResetTime": "06:30"})),
        proxy(json!({"defaultAgentBudget": {"tokensPerDay": 1000},
                     "prices": [{"model": "local", "inputPerMillionTokens": "0.1", "outputPerMillionTokens": "0.4"}],
                     "redis": {"host": "redis.kaos-system", "passwordSecretRef": {"name": "r", "key": "password"}}})),
        agent(
            json!({"modelAPI": "m", "model": "x", "container": {"resources": {"limits": {"cpu": "500m", "memory": "1Gi"}, "requests": {"cpu": 1}}}}),
        ),
        agent(json!({"modelAPI": "m", "model": "x", "gatewayRoute": {"timeout": "1h30m15s500ms"}})),
        agent(json!({"modelAPI": "m", "model": "x", "replicas": 0,
                     "podSpec": {"containers": [{"name": "agent"}], "nodeSelector": {"pool": "gpu"}}})),
        memory(
            json!({"type": "remote", "memoryStore": "mem", "tools": "all", "maxReadScope": "user"}),
        ),
        memory(json!({"memoryStore": "mem", "failureMode": "strict",
                      "clientParams": {"tokenBudget": 64, "rollingSummary": false}})),
        memory(json!({"type": "local", "maxReadScope": "session"})),
        agent(
            json!({"modelAPI": "m", "model": "x", "security": {"id": "support.bot-1"},
                     "config": {"systemPrompt": "Be brief.", "toolCallMode": "string",
                                "autonomous": {"goal": "watch", "intervalSeconds": 3600, "maxIterRuntimeSeconds": 0},
                                "taskConfig": {"maxIterations": 0, "maxRuntimeSeconds": 86400, "maxToolCalls": 10000}}}),
        ),
        memorystore(
            json!({"replicas": 1, "shortTerm": {"tokenBudget": 64}, "mediumTerm": {"enabled": true}}),
        ),
        memorystore(json!({"shortTerm": {"tokenBudget": 64},
                           "mediumTerm": {"compactionTrigger": 0, "compactionTarget": 0}})),
        memorystore(json!({"storage": {"type": "external",
                                       "external": {"connectionSecretRef": secret}}, "replicas": 3})),
        workflow(
            json!([step("a", &[]), step("b", &["a"]), step("c", &["a", "b"])]),
            json!({"schedule": "@daily", "timeZone": "Europe/Paris", "concurrencyPolicy": "Forbid",
                   "suspend": true, "successfulRunsHistoryLimit": 0, "failedRunsHistoryLimit": 100}),
        ),
        workflow(json!([step("a", &[])]), json!({"schedule": "0 9 * * 1-5"})),
        workflow(json!([step("a", &[])]), json!({"schedule": "@midnight"})),
        workflow(
            json!([step("a", &[])]),
            json!({"schedule": "*/15 0-6,22,23 1 jan-jun MON"}),
        ),
        workflow(
            json!([{"name": "research", "agentRef": "researcher", "input": "Find {{ input }}",
                    "when": "input != ''", "timeoutSeconds": 86400, "retries": 10,
                    "budgets": {"maxIterations": 1000, "maxRuntimeSeconds": 86400, "maxToolCalls": 0}}]),
            json!({"input": "the news"}),
        ),
        // The most steps, each depending on every step before it: the rules' worst case.
        workflow(
            Value::Array(
                (0..32)
                    .map(|i| {
                        let before: Vec<String> = (0..i).map(|j| format!("s{j}")).collect();
                        let before: Vec<&str> = before.iter().map(String::as_str).collect();
                        step(&format!("s{i}"), &before)
                    })
                    .collect(),
            ),
            json!({}),
        ),
        run(
            json!({"workflowRef": "wf", "input": "other", "trigger": "Schedule",
                   "scheduledTime": "2025-01-01T09:00:00Z"}),
        ),
    ];
    for manifest in accepted {
        if let Err(errors) = schemas.admit(&manifest) {
            panic!("{manifest} is rejected: {errors:?}");
        }
    }
}

/// What the API server stores for a minimal manifest reads into the same Rust value as the
/// manifest itself: the serde defaults equal the CRD defaults.
#[test]
fn schema_defaults_equal_rust_defaults() {
    let schemas = Schemas::default();
    let minimal_agent = agent(json!({"modelAPI": "m", "model": "x", "agentNetwork": {},
                                     "config": {"memory": {}, "telemetry": {}}}));
    let stored = schemas
        .admit(&minimal_agent)
        .expect("minimal agent is valid");
    let spec = &stored["spec"];
    assert_eq!(spec["waitForDependencies"], true);
    assert_eq!(spec["agentNetwork"]["expose"], true);
    assert_eq!(spec["config"]["reasoningLoopMaxSteps"], 5);
    assert_eq!(
        spec["config"]["memory"],
        json!({"enabled": true, "contextLimit": 6, "maxSessions": 1000, "maxSessionEvents": 500})
    );
    assert_eq!(spec["config"]["telemetry"], json!({"enabled": false}));
    let from_server: Agent = serde_json::from_value(stored).expect("reads");
    let from_manifest: Agent = serde_json::from_value(minimal_agent).expect("reads");
    assert_eq!(from_server.spec, from_manifest.spec);

    for (manifest, read) in [
        (
            modelapi(json!({"mode": "Hosted", "hostedConfig": {"model": "m"}, "telemetry": {}})),
            "ModelAPI",
        ),
        (
            mcpserver(json!({"runtime": "kubernetes", "telemetry": {}})),
            "MCPServer",
        ),
    ] {
        let stored = schemas.admit(&manifest).expect("valid");
        let same = match read {
            "ModelAPI" => {
                serde_json::from_value::<ModelAPI>(stored)
                    .expect("reads")
                    .spec
                    == serde_json::from_value::<ModelAPI>(manifest)
                        .expect("reads")
                        .spec
            }
            _ => {
                serde_json::from_value::<MCPServer>(stored)
                    .expect("reads")
                    .spec
                    == serde_json::from_value::<MCPServer>(manifest)
                        .expect("reads")
                        .spec
            }
        };
        assert!(same, "{read}: stored object and manifest read differently");
    }
}

/// A diamond (`b` and `c` after `a`, `d` after both) is a valid workflow; what the API server
/// stores has the schema's defaults, and reads into the same Rust value as the manifest.
#[test]
fn a_diamond_workflow_is_accepted_with_its_defaults() {
    let schemas = Schemas::default();
    let diamond = workflow(
        json!([
            {"name": "a", "agentRef": "planner"},
            {"name": "b", "agentRef": "researcher", "dependsOn": ["a"]},
            {"name": "c", "agentRef": "researcher", "dependsOn": ["a"]},
            {"name": "d", "agentRef": "writer", "dependsOn": ["b", "c"]},
        ]),
        json!({}),
    );
    let stored = schemas.admit(&diamond).expect("a diamond is valid");
    let spec = &stored["spec"];
    assert_eq!(spec["concurrencyPolicy"], "Allow");
    assert_eq!(spec["suspend"], false);
    assert_eq!(spec["successfulRunsHistoryLimit"], 3);
    assert_eq!(spec["failedRunsHistoryLimit"], 1);
    for (i, step) in spec["steps"].as_array().expect("steps").iter().enumerate() {
        assert_eq!(step["retries"], 0, "steps[{i}]");
    }
    assert_eq!(spec["steps"][0]["dependsOn"], json!([]));
    assert_eq!(spec["steps"][3]["dependsOn"], json!(["b", "c"]));

    let from_server: AgentWorkflow = serde_json::from_value(stored).expect("reads");
    let from_manifest: AgentWorkflow = serde_json::from_value(diamond).expect("reads");
    assert_eq!(from_server.spec, from_manifest.spec);
    assert_eq!(
        from_server.spec.concurrency_policy,
        ConcurrencyPolicy::Allow
    );
    let written = serde_json::to_value(&from_server).expect("writes");
    assert_eq!(
        schemas
            .admit(&written)
            .expect("what the types write is valid"),
        written,
        "the types write every default the schema would add"
    );
}

/// The schema of a kind, for updates (which [`Schemas::admit`] does not do).
fn schema_of(kind: &str) -> CrdSchema {
    let (_, crd) = kaos_api::crd::all()
        .into_iter()
        .find(|(_, crd)| crd.spec.names.kind == kind)
        .expect("a kaos.tools kind");
    CrdSchema::from_crd(&serde_json::to_value(crd).expect("serializes"), "v1alpha1")
        .expect("serves v1alpha1")
}

fn update(schema: &CrdSchema, old: &Value, new: &Value) -> Result<Value, Vec<String>> {
    let mut object = new.clone();
    schema
        .admit(&mut object, Some(old), UnknownFields::Reject)
        .map(|()| object)
        .map_err(|errors| errors.iter().map(FieldError::to_string).collect())
}

/// A run is what it was created as: its spec cannot change (its metadata and status can).
#[test]
fn a_run_spec_cannot_be_changed() {
    let schema = schema_of("AgentWorkflowRun");
    let mut created = run(json!({"workflowRef": "wf", "input": "first"}));
    schema
        .admit(&mut created, None, UnknownFields::Reject)
        .expect("a run is valid");
    assert_eq!(created["spec"]["trigger"], "Manual");
    let read: AgentWorkflowRun = serde_json::from_value(created.clone()).expect("reads");
    assert_eq!(read.spec.trigger, RunTrigger::Manual);

    let message = "spec: Invalid value: the spec of a run cannot be changed: create a new AgentWorkflowRun instead";
    for (change, patch) in [
        ("input", json!({"input": "second"})),
        ("workflowRef", json!({"workflowRef": "other"})),
        ("trigger", json!({"trigger": "Schedule"})),
        (
            "scheduledTime",
            json!({"scheduledTime": "2025-01-01T09:00:00Z"}),
        ),
    ] {
        let mut changed = created.clone();
        changed["spec"]
            .as_object_mut()
            .expect("object")
            .extend(patch.as_object().expect("object").clone());
        assert_eq!(
            update(&schema, &created, &changed),
            Err(vec![message.to_string()]),
            "changing {change}"
        );
    }
    let mut removed = created.clone();
    removed["spec"]
        .as_object_mut()
        .expect("object")
        .remove("input");
    assert_eq!(
        update(&schema, &created, &removed),
        Err(vec![message.to_string()]),
        "removing input"
    );

    let mut labelled = created.clone();
    labelled["metadata"]["labels"] = json!({"team": "research"});
    labelled["status"] =
        json!({"phase": "Running", "steps": [{"name": "a", "phase": "Dispatching", "attempt": 1}]});
    update(&schema, &created, &labelled).expect("metadata and status can change");
}

/// Readers ignore fields they do not know, so an older controller keeps working with a newer
/// CRD; writers leave unset optional fields out.
#[test]
fn readers_are_tolerant_and_writers_omit_unset_fields() {
    let newer = agent(
        json!({"modelAPI": "m", "model": "x", "futureField": {"a": 1},
                             "config": {"futureKnob": true}}),
    );
    let read: Agent = serde_json::from_value(newer).expect("unknown fields are ignored");
    assert_eq!(read.spec.model, "x");

    let written = serde_json::to_value(&read).expect("serializes");
    assert_eq!(
        written["spec"],
        json!({"modelAPI": "m", "model": "x", "waitForDependencies": true,
               "config": {"reasoningLoopMaxSteps": 5}})
    );
    assert!(
        !written.to_string().contains("null"),
        "no nulls are written: {written}"
    );
}
