//! Agent spec + resolved dependencies → the children that run it. Pure: no IO.

use k8s_openapi::api::core::v1::{Container, ContainerPort, EnvVar, PodSpec, Probe};
use kaos_api::agent::{Agent, MemoryConfig};
use kaos_api::conditions::{MEMORY_HEALTHY, MEMORY_STORE_NOT_READY, NO_IMAGE};
use kaos_workload::build::container::{
    self, apply_container_override, env, image, log_level, merge_telemetry, push_if_set,
    python_otel_env, with_user_env,
};
use kaos_workload::build::podspec::workload_pod;
use kaos_workload::build::scaling::ScaledChildren;
use kaos_workload::conditions::ConditionUpdate;
use kaos_workload::desired::WorkloadChildren;
use kube::ResourceExt;

use crate::conditions::MEMORY_DEGRADED;
use crate::naming::{PORT, endpoint, workload};
use crate::resolve::{BoundMemory, Resolved};
use crate::settings::Settings;
pub use kaos_workload::desired::{Desired, Problem};

pub const CONTAINER: &str = "agent";
/// `PEER_AGENT_<NAME>_CARD_URL`: upper-cased, `-` → `_`.
fn peer_variable(name: &str) -> String {
    format!(
        "PEER_AGENT_{}_CARD_URL",
        name.to_ascii_uppercase().replace('-', "_")
    )
}

/// Liveness: the process answers (no dependency checks).
pub const LIVENESS_PATH: &str = "/health";
/// Readiness: the agent card loads, which a peer or a workflow needs before it can call the agent
/// (KAOS probes `/ready`, which answers as soon as the server runs).
pub const READINESS_PATH: &str = "/.well-known/agent.json";

/// KAOS's agent probes carry no timeout or failure threshold (the API's defaults apply).
fn http_probe(path: &str, initial_delay: i32, period: i32) -> Probe {
    Probe {
        timeout_seconds: None,
        failure_threshold: None,
        ..container::http_probe(path, PORT, initial_delay, period)
    }
}

/// The environment in the contract's order; the user's entries go right after
/// `AGENT_INSTRUCTIONS` (or replace a generated variable of the same name where it stands).
pub fn environment(agent: &Agent, resolved: &Resolved, settings: &Settings) -> Vec<EnvVar> {
    let name = agent.name_any();
    let namespace = agent.namespace().unwrap_or_else(|| "default".into());
    let spec = &agent.spec;
    let config = spec.config.as_ref();
    let mut vars = vec![env("AGENT_NAME", name.clone())];
    if let Some(description) = config
        .and_then(|c| c.description.as_deref())
        .filter(|d| !d.is_empty())
    {
        vars.push(env("AGENT_DESCRIPTION", description));
    }
    if let Some(instructions) = config
        .and_then(|c| c.instructions.as_deref())
        .filter(|i| !i.is_empty())
    {
        vars.push(env("AGENT_INSTRUCTIONS", instructions));
    }
    if let Some(prompt) = config
        .and_then(|c| c.system_prompt.as_deref())
        .filter(|p| !p.is_empty())
    {
        vars.push(env("AGENT_SYSTEM_PROMPT", prompt));
    }
    let user_at = vars.len();
    vars.push(env("MODEL_API_URL", resolved.model_api_url.clone()));
    vars.push(env("MODEL_NAME", resolved.model_name.clone()));
    if let Some(config) = config {
        vars.push(env(
            "AGENTIC_LOOP_MAX_STEPS",
            config.reasoning_loop_max_steps.to_string(),
        ));
        if let Some(mode) = config.tool_call_mode {
            vars.push(env("TOOL_CALL_MODE", mode.as_str()));
        }
        if let Some(memory) = &config.memory {
            memory_environment(&mut vars, agent, memory, resolved.memory.as_ref());
        }
        if let Some(autonomous) = &config.autonomous {
            if let Some(goal) = autonomous.goal.as_deref().filter(|g| !g.is_empty()) {
                vars.push(env("AUTONOMOUS_GOAL", goal));
            }
            push_if_set(
                &mut vars,
                "AUTONOMOUS_INTERVAL_SECONDS",
                autonomous.interval_seconds,
            );
            push_if_set(
                &mut vars,
                "AUTONOMOUS_MAX_ITER_RUNTIME_SECONDS",
                autonomous.max_iter_runtime_seconds,
            );
        }
        if let Some(task) = &config.task_config {
            push_if_set(&mut vars, "TASK_MAX_ITERATIONS", task.max_iterations);
            push_if_set(
                &mut vars,
                "TASK_MAX_RUNTIME_SECONDS",
                task.max_runtime_seconds,
            );
            push_if_set(&mut vars, "TASK_MAX_TOOL_CALLS", task.max_tool_calls);
        }
    }
    if !resolved.mcp_servers.is_empty() {
        let names: Vec<&str> = resolved
            .mcp_servers
            .iter()
            .map(|(n, _)| n.as_str())
            .collect();
        vars.push(env("MCP_SERVERS", names.join(",")));
        for (server, endpoint) in &resolved.mcp_servers {
            vars.push(env(&format!("MCP_SERVER_{server}_URL"), endpoint.clone()));
        }
    }
    if !resolved.peers.is_empty() {
        let names: Vec<&str> = resolved.peers.iter().map(|(n, _)| n.as_str()).collect();
        vars.push(env("PEER_AGENTS", names.join(",")));
        for (peer, endpoint) in &resolved.peers {
            vars.push(env(&peer_variable(peer), endpoint.clone()));
        }
    }
    // A budgeted agent's model calls say who makes them (`x-actor`), as a bound memory's do.
    if resolved.budgeted && !vars.iter().any(|v| v.name == "AGENT_IDENTITY") {
        vars.push(env("AGENT_IDENTITY", identity(agent)));
    }
    let telemetry = merge_telemetry(
        config.and_then(|c| c.telemetry.as_ref()),
        &settings.data_plane,
    );
    vars.extend(python_otel_env(&name, &namespace, telemetry.as_ref()));
    vars.push(env("LOG_LEVEL", log_level(&settings.data_plane)));
    with_user_env(vars, spec.workload.user_env(), user_at)
}

/// The `MEMORY_*` variables. The local knobs keep KAOS's January order; what 0.8.4 added comes
/// after them and only when used, so the pods of an Agent that does not use it are not rolled.
fn memory_environment(
    vars: &mut Vec<EnvVar>,
    agent: &Agent,
    memory: &MemoryConfig,
    bound: Option<&BoundMemory>,
) {
    vars.push(env("MEMORY_ENABLED", memory.enabled.to_string()));
    vars.push(env("MEMORY_TYPE", memory.effective_type().as_str()));
    vars.push(env(
        "MEMORY_CONTEXT_LIMIT",
        memory.context_limit.to_string(),
    ));
    vars.push(env("MEMORY_MAX_SESSIONS", memory.max_sessions.to_string()));
    vars.push(env(
        "MEMORY_MAX_SESSION_EVENTS",
        memory.max_session_events.to_string(),
    ));
    if let Some(bound) = bound {
        vars.push(env("MEMORY_STORE_ENDPOINT", bound.endpoint.clone()));
    }
    let scope = bound.map(|b| b.max_read_scope).or(memory.max_read_scope);
    if let Some(scope) = scope {
        vars.push(env("MEMORY_MAX_READ_SCOPE", scope.as_str()));
    }
    if let Some(tools) = memory.tools {
        vars.push(env("MEMORY_TOOLS", tools.as_str()));
    }
    if let Some(mode) = memory.failure_mode {
        vars.push(env("MEMORY_FAILURE_MODE", mode.as_str()));
    }
    if let Some(params) = &memory.client_params {
        push_if_set(vars, "MEMORY_SHORT_TERM_TOKEN_BUDGET", params.token_budget);
        if let Some(rolling) = params.rolling_summary {
            vars.push(env("MEMORY_ROLLING_SUMMARY", rolling.to_string()));
        }
    }
    if bound.is_some() {
        vars.push(env("AGENT_IDENTITY", identity(agent)));
    }
}

/// `kaos://agent/<security.id>`, or `kaos://agent/<namespace>/<name>` without one.
pub fn identity(agent: &Agent) -> String {
    match agent
        .spec
        .workload
        .security
        .as_ref()
        .and_then(|s| s.id.as_deref())
    {
        Some(id) => format!("kaos://agent/{id}"),
        None => format!(
            "kaos://agent/{}/{}",
            agent.namespace().unwrap_or_else(|| "default".into()),
            agent.name_any()
        ),
    }
}

/// The children that run `agent` with its `resolved` dependencies, and its `MemoryDegraded`
/// condition when it binds to a MemoryStore (see [`crate::desired`] for the whole of it).
pub fn build(agent: &Agent, resolved: &Resolved, settings: &Settings) -> Result<Desired, Problem> {
    let name = agent.name_any();
    let spec = &agent.spec;
    let user = spec.workload.container.as_ref();
    let image = image(user, settings.default_agent_image.as_deref()).ok_or_else(|| {
        Problem::failed(
            NO_IMAGE,
            "no agent image: set spec.container.image or the operator's DEFAULT_AGENT_IMAGE".into(),
        )
    })?;
    let mut container = Container {
        name: CONTAINER.into(),
        image: Some(image),
        ports: Some(vec![ContainerPort {
            container_port: PORT,
            name: Some("http".into()),
            protocol: Some("TCP".into()),
            ..Default::default()
        }]),
        env: Some(environment(agent, resolved, settings)),
        liveness_probe: Some(http_probe(LIVENESS_PATH, 30, 10)),
        readiness_probe: Some(http_probe(READINESS_PATH, 10, 5)),
        ..Default::default()
    };
    apply_container_override(&mut container, user)?;
    let generated = PodSpec {
        containers: vec![container],
        ..Default::default()
    };
    // The agent runtime never calls the Kubernetes API.
    let level = settings.data_plane.pod_security;
    let pod = workload_pod(generated, level, false, spec.workload.pod_spec.as_deref())?;
    let workload = workload(agent);
    workload.check_name(&name)?;
    let scaled = ScaledChildren::of(&workload, &spec.scaling);
    let exposed = spec.exposed();
    let timeout = spec.workload.route_timeout();
    let mut desired = Desired::of(
        WorkloadChildren::plain(
            workload.deployment(pod, scaled.replicas.in_spec()),
            exposed.then(|| workload.service()),
            workload
                .http_route(
                    "agent",
                    &name,
                    timeout,
                    &settings.gateway_default_timeout,
                    &settings.gateway,
                )
                .filter(|_| exposed),
        )
        .scaled(scaled),
        endpoint(agent),
    );
    desired
        .conditions
        .extend(resolved.memory.as_ref().map(memory_degraded));
    Ok(desired)
}

/// `MemoryDegraded` of a bound agent: True while its store is missing or not ready (it serves
/// with short-term memory only).
fn memory_degraded(bound: &BoundMemory) -> ConditionUpdate<'static> {
    match &bound.degraded {
        Some(message) => ConditionUpdate {
            type_: MEMORY_DEGRADED,
            status: true,
            reason: MEMORY_STORE_NOT_READY,
            message: message.clone(),
        },
        None => ConditionUpdate {
            type_: MEMORY_DEGRADED,
            status: false,
            reason: MEMORY_HEALTHY,
            message: format!("MemoryStore {} is ready", bound.store),
        },
    }
}
