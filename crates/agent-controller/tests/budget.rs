//! An Agent with a budget: the alias it calls, the identity it sends, and the ModelAPIs that
//! cannot enforce it (docs/budgets.md).

use agent_controller::resolve::resolve;
use agent_controller::settings::Settings;
use kaos_api::agent::Agent;
use kaos_api::conditions::DEPENDENCIES_READY;
use kaos_api::modelapi::ModelAPI;
use kaos_workload::desired::{Problem, Stuck};
use serde_json::{Value, json};

fn agent(name: &str, spec: Value) -> Agent {
    serde_json::from_value(json!({"apiVersion": "kaos.tools/v1alpha1", "kind": "Agent",
        "metadata": {"name": name, "namespace": "team"}, "spec": spec}))
    .expect("Agent")
}

fn model_api(spec: Value) -> ModelAPI {
    serde_json::from_value(json!({"apiVersion": "kaos.tools/v1alpha1", "kind": "ModelAPI", "metadata": {"name": "llm", "namespace": "team"},
        "spec": spec, "status": {"ready": true, "endpoint": "http://modelapi-llm.team.svc.cluster.local:8000"}}))
    .expect("ModelAPI")
}

/// The env of `agent` built on `model_api` (ready), as the reconcile builds it.
fn env_on(agent: &Agent, model_api: &ModelAPI) -> Result<Vec<(String, String)>, Problem> {
    let resolved = resolve(agent, Some(model_api), |_| None, |_| None)?;
    let env = agent_controller::build::environment(agent, &resolved, &Settings::default());
    Ok(env
        .into_iter()
        .map(|v| (v.name, v.value.unwrap_or_default()))
        .collect())
}

fn value<'a>(env: &'a [(String, String)], name: &str) -> Option<&'a str> {
    env.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
}

#[test]
fn a_budgeted_agent_calls_its_own_alias_and_says_who_it_is() {
    let llm = model_api(json!({"mode": "Proxy", "proxyConfig": {"models": ["openai/*"]}}));
    let budgeted = agent(
        "researcher",
        json!({"modelAPI": "llm", "model": "openai/gpt-4o", "budget": {"tokensPerDay": 1000}}),
    );
    let env = env_on(&budgeted, &llm).expect("resolved");
    assert_eq!(value(&env, "MODEL_NAME"), Some("kaos.team.researcher"));
    assert_eq!(
        value(&env, "AGENT_IDENTITY"),
        Some("kaos://agent/team/researcher")
    );
    // Without a budget: KAOS's environment, the model as written and no identity.
    let plain = agent(
        "plain",
        json!({"modelAPI": "llm", "model": "openai/gpt-4o"}),
    );
    let env = env_on(&plain, &llm).expect("resolved");
    assert_eq!(value(&env, "MODEL_NAME"), Some("openai/gpt-4o"));
    assert_eq!(value(&env, "AGENT_IDENTITY"), None);
    // The ModelAPI's default budget gives it one.
    let defaulted = model_api(
        json!({"mode": "Proxy", "proxyConfig": {"models": ["openai/*"], "defaultAgentBudget": {"requestsPerDay": 10}}}),
    );
    let env = env_on(&plain, &defaulted).expect("resolved");
    assert_eq!(value(&env, "MODEL_NAME"), Some("kaos.team.plain"));
}

#[test]
fn a_budget_no_proxy_can_enforce_fails_saying_what_to_do() {
    let budgeted = agent(
        "a",
        json!({"modelAPI": "llm", "model": "m", "budget": {"tokensPerDay": 1000}}),
    );
    let hosted = model_api(json!({"mode": "Hosted", "hostedConfig": {"model": "m"}}));
    let err = env_on(&budgeted, &hosted).expect_err("Hosted cannot enforce");
    assert_eq!(
        (err.stuck, err.reason, err.condition),
        (
            Stuck::Failed,
            "BudgetNotEnforceable",
            Some(DEPENDENCIES_READY)
        )
    );
    assert_eq!(
        err.message,
        "spec.budget: ModelAPI llm is Hosted (Ollama), which cannot enforce a budget; use a Proxy ModelAPI (LiteLLM) or remove the budget"
    );
    let from_secret = model_api(
        json!({"mode": "Proxy", "proxyConfig": {"models": ["m"], "configYaml": {"fromSecretKeyRef": {"name": "s", "key": "k"}}}}),
    );
    let err = env_on(&budgeted, &from_secret).expect_err("a Secret's config");
    assert_eq!(err.reason, "BudgetNotEnforceable");
    assert!(
        err.message.contains("configYaml.fromSecretKeyRef"),
        "{}",
        err.message
    );
}
