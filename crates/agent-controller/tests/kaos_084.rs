//! What KAOS 0.8.4 added to the Agent (`docs/contract.md` §5.1, §5.6): the system prompt, the
//! tool call mode, autonomous goals, task budgets, remote memory bound to a MemoryStore, and the
//! identity.

use agent_controller::build::build;
use agent_controller::conditions::DEPENDENCIES_READY;
use agent_controller::resolve::{BoundMemory, Resolved, bind_memory};
use agent_controller::settings::{Args, Settings};
use clap::Parser;
use kaos_api::agent::{Agent, MemoryConfig, MemoryType};
use kaos_api::memorystore::{MemoryStore, ReadScope};
use kaos_harness::fixtures::*;
use kaos_workload::desired::Problem;
use serde_json::{Value, json};

fn settings() -> Settings {
    Args::try_parse_from(["agent-controller", "--default-agent-image=kaos-agent:1"])
        .expect("flags")
        .settings
}

/// Agent `support` of namespace `team`, as stored (with a uid), on model `m`.
fn support() -> Agent {
    Agent::test("support")
        .in_namespace("team")
        .with_uid("u-a")
        .model("m")
}

/// MemoryStore `mem` of namespace `team`, ready or not, with its own read scope ceiling.
fn store(ready: bool, max_read_scope: Option<ReadScope>) -> MemoryStore {
    let mut store = MemoryStore::test("mem").in_namespace("team");
    if let Some(scope) = max_read_scope {
        store = store.max_read_scope(scope);
    }
    if ready {
        store.ready()
    } else {
        store.pending()
    }
}

fn env_of(agent: &Agent, resolved: &Resolved) -> Vec<(String, String)> {
    let desired = build(agent, resolved, &settings()).expect("builds");
    let pod = desired
        .workload
        .deployment
        .spec
        .expect("spec")
        .template
        .spec;
    pod.expect("pod").containers[0]
        .env
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|e| (e.name, e.value.unwrap_or_default()))
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

/// Every field KAOS 0.8.4 added, as a manifest writes them (the spec is what is under test).
fn rich_084_agent() -> Agent {
    let spec: Value = json!({
        "modelAPI": "llm", "model": "gpt-4o-mini",
        "security": {"id": "support.bot"},
        "config": {
            "description": "Support", "instructions": "Help", "systemPrompt": "You are kind.",
            "toolCallMode": "native",
            "memory": {"memoryStore": "mem", "maxReadScope": "agent", "tools": "read",
                       "failureMode": "strict",
                       "clientParams": {"tokenBudget": 64, "rollingSummary": false}},
            "autonomous": {"goal": "Watch the queue", "intervalSeconds": 0, "maxIterRuntimeSeconds": 120},
            "taskConfig": {"maxIterations": 5, "maxRuntimeSeconds": 300, "maxToolCalls": 20}
        },
        "container": {"env": [{"name": "DEBUG_MOCK_RESPONSES", "value": "[\"hi\"]"}]}
    });
    Agent {
        spec: serde_json::from_value(spec).expect("an Agent spec"),
        ..support()
    }
}

#[test]
fn the_full_env_list_of_a_rich_084_agent_in_order() {
    let agent = rich_084_agent();
    let memory = bind_memory(&agent, Some(&store(true, None)), true).expect("bound");
    let resolved = Resolved {
        model_api_url: "http://modelapi-llm.team.svc.cluster.local:8000".into(),
        model_name: "gpt-4o-mini".into(),
        memory,
        ..Default::default()
    };
    assert_eq!(
        env_of(&agent, &resolved),
        pairs(&[
            ("AGENT_NAME", "support"),
            ("AGENT_DESCRIPTION", "Support"),
            ("AGENT_INSTRUCTIONS", "Help"),
            ("AGENT_SYSTEM_PROMPT", "You are kind."),
            ("DEBUG_MOCK_RESPONSES", "[\"hi\"]"),
            (
                "MODEL_API_URL",
                "http://modelapi-llm.team.svc.cluster.local:8000"
            ),
            ("MODEL_NAME", "gpt-4o-mini"),
            ("AGENTIC_LOOP_MAX_STEPS", "5"),
            ("TOOL_CALL_MODE", "native"),
            ("MEMORY_ENABLED", "true"),
            ("MEMORY_TYPE", "remote"),
            ("MEMORY_CONTEXT_LIMIT", "6"),
            ("MEMORY_MAX_SESSIONS", "1000"),
            ("MEMORY_MAX_SESSION_EVENTS", "500"),
            (
                "MEMORY_STORE_ENDPOINT",
                "http://memorystore-mem.team.svc.cluster.local:8080"
            ),
            ("MEMORY_MAX_READ_SCOPE", "agent"),
            ("MEMORY_TOOLS", "read"),
            ("MEMORY_FAILURE_MODE", "strict"),
            ("MEMORY_SHORT_TERM_TOKEN_BUDGET", "64"),
            ("MEMORY_ROLLING_SUMMARY", "false"),
            ("AGENT_IDENTITY", "kaos://agent/support.bot"),
            ("AUTONOMOUS_GOAL", "Watch the queue"),
            ("AUTONOMOUS_INTERVAL_SECONDS", "0"),
            ("AUTONOMOUS_MAX_ITER_RUNTIME_SECONDS", "120"),
            ("TASK_MAX_ITERATIONS", "5"),
            ("TASK_MAX_RUNTIME_SECONDS", "300"),
            ("TASK_MAX_TOOL_CALLS", "20"),
            ("LOG_LEVEL", "INFO"),
        ])
    );
}

#[test]
fn an_agent_without_the_new_fields_keeps_its_environment() {
    let agent = support().memory(MemoryConfig {
        enabled: false,
        ..MemoryConfig::default()
    });
    let resolved = Resolved {
        model_api_url: "http://api".into(),
        model_name: "m".into(),
        ..Default::default()
    };
    assert_eq!(
        bind_memory(&agent, None, true),
        Ok(None),
        "local memory binds nothing"
    );
    assert_eq!(
        env_of(&agent, &resolved),
        pairs(&[
            ("AGENT_NAME", "support"),
            ("MODEL_API_URL", "http://api"),
            ("MODEL_NAME", "m"),
            ("AGENTIC_LOOP_MAX_STEPS", "5"),
            ("MEMORY_ENABLED", "false"),
            ("MEMORY_TYPE", "local"),
            ("MEMORY_CONTEXT_LIMIT", "6"),
            ("MEMORY_MAX_SESSIONS", "1000"),
            ("MEMORY_MAX_SESSION_EVENTS", "500"),
            ("LOG_LEVEL", "INFO"),
        ])
    );
}

#[test]
fn the_identity_is_the_namespace_and_name_without_a_security_id() {
    let agent = support()
        .memory(MemoryConfig {
            memory_type: Some(MemoryType::Remote),
            ..MemoryConfig::default()
        })
        .memory_store("mem");
    let memory = bind_memory(&agent, Some(&store(true, None)), true).expect("bound");
    let resolved = Resolved {
        memory,
        ..Default::default()
    };
    let env = env_of(&agent, &resolved);
    assert!(env.contains(&("AGENT_IDENTITY".into(), "kaos://agent/team/support".into())));
    assert!(
        env.contains(&("MEMORY_MAX_READ_SCOPE".into(), "agent".into())),
        "without its own scope the agent reads up to the store's ceiling: {env:?}"
    );
}

#[test]
fn a_missing_or_unready_store_holds_back_only_the_first_deployment() {
    let agent = support().memory_store("mem");
    assert_eq!(
        bind_memory(&agent, None, true),
        Err(
            Problem::waiting("MemoryStoreNotFound", "MemoryStore mem not found".into())
                .about(DEPENDENCIES_READY)
        )
    );
    assert_eq!(
        bind_memory(&agent, Some(&store(false, None)), true),
        Err(
            Problem::waiting("MemoryStoreNotReady", "MemoryStore mem is not ready".into())
                .about(DEPENDENCIES_READY)
        )
    );
    // Once deployed the agent keeps serving, at the same endpoint (its pods are not rolled),
    // and reports the store as degraded.
    assert_eq!(
        bind_memory(&agent, Some(&store(false, None)), false),
        Ok(Some(BoundMemory {
            store: "mem".into(),
            endpoint: "http://memorystore-mem.team.svc.cluster.local:8080".into(),
            max_read_scope: ReadScope::Agent,
            degraded: Some("MemoryStore mem is not ready".into()),
        }))
    );
    let gone = bind_memory(&agent, None, false)
        .expect("not blocked")
        .expect("bound");
    assert_eq!(
        (gone.degraded.as_deref(), gone.max_read_scope),
        (Some("MemoryStore mem not found"), ReadScope::Session)
    );
    // waitForDependencies: false creates the Deployment degraded.
    let mut eager = agent.clone();
    eager.spec.wait_for_dependencies = false;
    assert!(
        bind_memory(&eager, None, true)
            .expect("not blocked")
            .is_some()
    );
}

#[test]
fn an_agent_may_not_read_wider_than_its_store_allows() {
    let agent = support()
        .memory_store("mem")
        .memory_read_scope(ReadScope::User);
    assert_eq!(
        bind_memory(&agent, Some(&store(true, Some(ReadScope::Agent))), false),
        Err(Problem::failed(
            "InvalidMemoryReadScope",
            "config.memory.maxReadScope user exceeds MemoryStore mem maxReadScope agent".into()
        )
        .about(DEPENDENCIES_READY))
    );
    let bound = bind_memory(&agent, Some(&store(true, Some(ReadScope::User))), false)
        .expect("allowed")
        .expect("bound");
    assert_eq!(bound.max_read_scope, ReadScope::User);
}
