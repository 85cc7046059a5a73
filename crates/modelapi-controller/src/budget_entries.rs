//! Budgets in a LiteLLM config: one `model_list` entry per budgeted agent (its alias, the same
//! upstream and credentials as the entry serving its model, its limits, `model_info.id` its
//! UID), LiteLLM's rate-limit check and Prometheus callback on, the ModelAPI's prices and Redis.
//! Applied to the generated config and to a user's inline `configYaml` alike, adding to what is
//! there and never removing it. Pure.

use kaos_api::budget::{Budget, alias};
use kaos_api::conditions::{
    BUDGETS_ENFORCED, CONFIG_TOO_LARGE, COUNTERS_IN_PROCESS, COUNTERS_IN_REDIS,
    INVALID_CONFIG_YAML, MODEL_NOT_IN_CONFIG,
};
use kaos_api::modelapi::{ModelPrice, ProxyConfig, model_pattern_matches};
use kaos_workload::conditions::ConditionUpdate;
use kaos_workload::desired::Problem;
use serde_json::{Map, Value, json};

use crate::agent_budgets::BudgetedAgent;

/// The env var the Redis password is read from (never written into the config).
pub const REDIS_PASSWORD_ENV: &str = "REDIS_PASSWORD";
/// The largest config the controller writes: a ConfigMap holds 1 MiB with its metadata.
pub const MAX_CONFIG_BYTES: usize = 900 * 1024;
/// LiteLLM's pre-call check that enforces the entries' `tpm`/`rpm`/`tpd`/`rpd`.
const RATE_LIMIT_CHECK: &str = "enforce_model_rate_limits";

/// The config `text` with the budgets, prices and Redis of `proxy` and `agents`, and the
/// ModelAPI's `BudgetsEnforced` condition (none without budgeted agents). Unchanged, byte for
/// byte, when there is nothing to add, so a ModelAPI without budgets keeps KAOS's config.
pub fn with_budgets(
    text: String,
    proxy: &ProxyConfig,
    agents: &[BudgetedAgent],
) -> Result<(String, Option<ConditionUpdate<'static>>), Problem> {
    if agents.is_empty() && proxy.prices.is_empty() && proxy.redis.is_none() {
        return Ok((text, None));
    }
    let mut config: Value = serde_saphyr::from_str(&text).map_err(|_| {
        Problem::failed(
            INVALID_CONFIG_YAML,
            "spec.proxyConfig.configYaml.fromString is not valid YAML".into(),
        )
    })?;
    let root = object(&mut config);
    let entries = root
        .entry("model_list")
        .or_insert_with(|| json!([]))
        .as_array_mut()
        .ok_or_else(|| {
            Problem::failed(
                INVALID_CONFIG_YAML,
                "spec.proxyConfig.configYaml.fromString: model_list is not a list".into(),
            )
        })?;
    for entry in entries.iter_mut() {
        price_entry(entry, &proxy.prices);
    }
    let mut unserved = Vec::new();
    let mut added = Vec::new();
    for agent in agents {
        match agent_entry(entries, agent, &proxy.prices) {
            Some(entry) => added.push(entry),
            None => unserved.push(format!("{} ({})", agent.name, agent.model)),
        }
    }
    entries.extend(added);
    if !agents.is_empty() {
        push_unique(
            object(root.entry("router_settings").or_insert_with(|| json!({}))),
            "optional_pre_call_checks",
            RATE_LIMIT_CHECK,
        );
        push_unique(
            object(root.entry("litellm_settings").or_insert_with(|| json!({}))),
            "callbacks",
            "prometheus",
        );
    }
    if let Some(redis) = &proxy.redis {
        let router = object(root.entry("router_settings").or_insert_with(|| json!({})));
        router.insert("redis_host".into(), json!(redis.host));
        router.insert("redis_port".into(), json!(redis.port()));
        if redis.password_secret_ref.is_some() {
            router.insert(
                "redis_password".into(),
                json!(format!("os.environ/{REDIS_PASSWORD_ENV}")),
            );
        }
    }
    let text = serde_saphyr::to_string(&config)
        .map_err(|e| Problem::failed(INVALID_CONFIG_YAML, format!("the LiteLLM config: {e}")))?;
    if text.len() > MAX_CONFIG_BYTES {
        return Err(Problem::failed(
            CONFIG_TOO_LARGE,
            format!(
                "the LiteLLM config with the entries of {} budgeted agents is {} KiB, more than the {} KiB a ConfigMap holds with its metadata: spread the budgeted agents over more ModelAPIs",
                agents.len(),
                text.len() / 1024,
                MAX_CONFIG_BYTES / 1024
            ),
        ));
    }
    let condition = (!agents.is_empty()).then(|| enforced(proxy, agents.len(), &unserved));
    Ok((text, condition))
}

fn enforced(proxy: &ProxyConfig, count: usize, unserved: &[String]) -> ConditionUpdate<'static> {
    let (status, reason, message) = if !unserved.is_empty() {
        (
            false,
            MODEL_NOT_IN_CONFIG,
            format!(
                "no model_list entry of spec.proxyConfig.configYaml serves the model of these budgeted agents, so their budgets are not enforced: {}; add an entry for each model",
                unserved.join(", ")
            ),
        )
    } else if let Some(redis) = &proxy.redis {
        (
            true,
            COUNTERS_IN_REDIS,
            format!(
                "the budgets of {count} agents are enforced; their counters are kept in Redis {}:{} (a LiteLLM pod that cannot reach it or is refused by it counts alone, and says so in its log)",
                redis.host,
                redis.port()
            ),
        )
    } else {
        (
            true,
            COUNTERS_IN_PROCESS,
            format!(
                "the budgets of {count} agents are enforced; their counters live in each LiteLLM pod: they restart from zero when a pod restarts (a new budget rolls the pods) and each replica enforces each limit alone; set spec.proxyConfig.redis to keep them"
            ),
        )
    };
    ConditionUpdate {
        type_: BUDGETS_ENFORCED,
        status,
        reason,
        message,
    }
}

/// The object `value` is, made one if it is not.
fn object(value: &mut Value) -> &mut Map<String, Value> {
    if !value.is_object() {
        *value = json!({});
    }
    value.as_object_mut().expect("made an object")
}

/// Adds `item` to the list at `key` unless it is there (a single string becomes a list).
fn push_unique(map: &mut Map<String, Value>, key: &str, item: &str) {
    let list = map.entry(key).or_insert_with(|| json!([]));
    if let Value::String(one) = list {
        *list = json!([one.clone()]);
    }
    if let Some(items) = list.as_array_mut()
        && !items.iter().any(|i| i.as_str() == Some(item))
    {
        items.push(json!(item));
    }
}

/// The entry of `agent`: a copy of the first entry serving its model, under its alias, with
/// the concrete model where that entry is a wildcard, and its limits. None when no entry
/// serves its model.
fn agent_entry(entries: &[Value], agent: &BudgetedAgent, prices: &[ModelPrice]) -> Option<Value> {
    let serving = entries
        .iter()
        .find(|e| name_of(e) == Some(agent.model.as_str()))
        .or_else(|| {
            entries
                .iter()
                .find(|e| name_of(e).is_some_and(|n| model_pattern_matches(n, &agent.model)))
        })?;
    let pattern = name_of(serving)?;
    let mut params = serving
        .get("litellm_params")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    if let Some(routed) = params.get("model").and_then(Value::as_str) {
        params.insert(
            "model".into(),
            json!(concrete(routed, pattern, &agent.model)),
        );
    }
    for key in [
        "tpm",
        "rpm",
        "tpd",
        "rpd",
        "daily_reset_time",
        "max_budget",
        "budget_duration",
    ] {
        params.remove(key);
    }
    limits(&mut params, &agent.budget);
    let mut entry = json!({
        "model_name": alias_of(agent),
        "litellm_params": params,
        "model_info": {"id": agent.uid},
    });
    price_of(&mut entry, &agent.model, prices);
    Some(entry)
}

fn alias_of(agent: &BudgetedAgent) -> String {
    alias(&agent.namespace, &agent.name)
}

fn name_of(entry: &Value) -> Option<&str> {
    entry.get("model_name").and_then(Value::as_str)
}

/// The upstream model of `model` behind an entry named `pattern` routing to `routed`: a
/// wildcard entry (`openai/*` → `openai/*`) routes `openai/gpt-4o` to `openai/gpt-4o`.
fn concrete(routed: &str, pattern: &str, model: &str) -> String {
    match (routed.strip_suffix('*'), pattern.strip_suffix('*')) {
        (Some(routed_prefix), Some(pattern_prefix)) => {
            format!(
                "{routed_prefix}{}",
                model.strip_prefix(pattern_prefix).unwrap_or(model)
            )
        }
        _ => routed.to_string(),
    }
}

/// The budget as LiteLLM's entry parameters.
fn limits(params: &mut Map<String, Value>, budget: &Budget) {
    for (key, limit) in [
        ("tpd", budget.tokens_per_day),
        ("rpd", budget.requests_per_day),
        ("tpm", budget.tokens_per_minute),
        ("rpm", budget.requests_per_minute),
    ] {
        if let Some(limit) = limit {
            params.insert(key.into(), json!(limit));
        }
    }
    // Midnight UTC is LiteLLM's own default; a later time only with day request limits
    // (the API refuses it with `tokensPerDay`: docs/budgets.md).
    if budget.daily_reset_time() != "00:00" {
        params.insert("daily_reset_time".into(), json!(budget.daily_reset_time()));
    }
    if let Some(cost) = &budget.cost {
        params.insert("max_budget".into(), json!(dollars(&cost.limit)));
        params.insert("budget_duration".into(), json!(cost.period()));
    }
}

/// A dollar amount the API admitted (`USD_PATTERN`) as LiteLLM's float.
fn dollars(amount: &str) -> f64 {
    amount.parse().unwrap_or(0.0)
}

/// The ModelAPI's price of an entry's model, on the entry.
fn price_entry(entry: &mut Value, prices: &[ModelPrice]) {
    if let Some(name) = name_of(entry).map(str::to_string) {
        price_of(entry, &name, prices);
    }
}

fn price_of(entry: &mut Value, model: &str, prices: &[ModelPrice]) {
    let Some(price) = prices.iter().find(|p| p.model == model) else {
        return;
    };
    let Some(params) = entry
        .get_mut("litellm_params")
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    params.insert(
        "input_cost_per_token".into(),
        json!(dollars(&price.input_per_million_tokens) / 1e6),
    );
    params.insert(
        "output_cost_per_token".into(),
        json!(dollars(&price.output_per_million_tokens) / 1e6),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use kaos_api::budget::CostLimit;
    use kaos_api::modelapi::RedisConfig;

    const GENERATED: &str = "model_list:\n  - model_name: \"gpt-4o\"\n    litellm_params:\n      model: \"openai/gpt-4o\"\n      api_base: \"os.environ/PROXY_API_BASE\"\n      api_key: \"os.environ/PROXY_API_KEY\"\nlitellm_settings:\n  drop_params: true\n";

    fn agent(name: &str, model: &str, budget: Budget) -> BudgetedAgent {
        BudgetedAgent {
            namespace: "team".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            model: model.into(),
            budget,
        }
    }

    fn tokens(limit: i64) -> Budget {
        Budget {
            tokens_per_day: Some(limit),
            ..Default::default()
        }
    }

    fn parsed(text: &str) -> Value {
        serde_saphyr::from_str(text).expect("YAML")
    }

    #[test]
    fn without_budgets_prices_or_redis_the_config_is_unchanged() {
        let (text, condition) =
            with_budgets(GENERATED.into(), &ProxyConfig::default(), &[]).expect("built");
        assert_eq!(text, GENERATED);
        assert_eq!(condition, None);
    }

    #[test]
    fn a_budgeted_agent_gets_its_alias_with_the_shared_upstream_and_its_limits() {
        let budget = Budget {
            tokens_per_day: Some(2_000_000),
            requests_per_minute: Some(60),
            cost: Some(CostLimit {
                limit: "5.25".into(),
                period: None,
            }),
            ..Default::default()
        };
        let (text, condition) = with_budgets(
            GENERATED.into(),
            &ProxyConfig::default(),
            &[agent("researcher", "gpt-4o", budget)],
        )
        .expect("built");
        let config = parsed(&text);
        assert_eq!(config["model_list"][0]["model_name"], "gpt-4o");
        assert_eq!(
            config["model_list"][1],
            json!({
                "model_name": "kaos.team.researcher",
                "litellm_params": {
                    "model": "openai/gpt-4o",
                    "api_base": "os.environ/PROXY_API_BASE",
                    "api_key": "os.environ/PROXY_API_KEY",
                    "tpd": 2_000_000, "rpm": 60, "max_budget": 5.25, "budget_duration": "1d",
                },
                "model_info": {"id": "uid-researcher"},
            })
        );
        assert_eq!(
            config["router_settings"]["optional_pre_call_checks"],
            json!(["enforce_model_rate_limits"])
        );
        assert_eq!(
            config["litellm_settings"]["callbacks"],
            json!(["prometheus"])
        );
        assert_eq!(config["litellm_settings"]["drop_params"], true);
        let condition = condition.expect("a condition");
        assert_eq!(
            (condition.status, condition.reason),
            (true, COUNTERS_IN_PROCESS)
        );
        assert!(
            condition.message.contains("restart from zero"),
            "{}",
            condition.message
        );
    }

    #[test]
    fn a_wildcard_entry_routes_the_agents_concrete_model() {
        let text = "model_list:\n  - model_name: \"openai/*\"\n    litellm_params:\n      model: \"openai/*\"\n  - model_name: \"*\"\n    litellm_params:\n      model: \"ollama/*\"\n";
        let (text, _) = with_budgets(
            text.into(),
            &ProxyConfig::default(),
            &[
                agent("a", "openai/gpt-4o", tokens(10)),
                agent("b", "llama3", tokens(10)),
            ],
        )
        .expect("built");
        let config = parsed(&text);
        assert_eq!(
            config["model_list"][2]["litellm_params"]["model"],
            "openai/gpt-4o"
        );
        assert_eq!(
            config["model_list"][3]["litellm_params"]["model"],
            "ollama/llama3"
        );
    }

    #[test]
    fn a_users_config_keeps_its_settings_and_gains_the_budgets() {
        let text = "model_list:\n  - model_name: gpt-4o\n    litellm_params: {model: azure/gpt-4o, tpm: 100000}\nrouter_settings:\n  routing_strategy: usage-based-routing-v2\n  optional_pre_call_checks: [prompt_caching]\nlitellm_settings:\n  callbacks: otel\n";
        let (text, _) = with_budgets(
            text.into(),
            &ProxyConfig::default(),
            &[agent("a", "gpt-4o", tokens(10))],
        )
        .expect("built");
        let config = parsed(&text);
        assert_eq!(
            config["router_settings"]["routing_strategy"],
            "usage-based-routing-v2"
        );
        assert_eq!(
            config["router_settings"]["optional_pre_call_checks"],
            json!(["prompt_caching", "enforce_model_rate_limits"])
        );
        assert_eq!(
            config["litellm_settings"]["callbacks"],
            json!(["otel", "prometheus"])
        );
        // The shared entry's own limit stays on it; the agent's entry has only the agent's.
        assert_eq!(config["model_list"][0]["litellm_params"]["tpm"], 100000);
        assert_eq!(
            config["model_list"][1]["litellm_params"],
            json!({"model": "azure/gpt-4o", "tpd": 10})
        );
    }

    #[test]
    fn an_agent_whose_model_the_users_config_lacks_is_named_in_the_condition() {
        let text =
            "model_list:\n  - model_name: gpt-4o\n    litellm_params: {model: openai/gpt-4o}\n";
        let (text, condition) = with_budgets(
            text.into(),
            &ProxyConfig::default(),
            &[
                agent("a", "gpt-4o", tokens(10)),
                agent("b", "claude", tokens(10)),
            ],
        )
        .expect("built");
        assert_eq!(
            parsed(&text)["model_list"].as_array().map(Vec::len),
            Some(2)
        );
        let condition = condition.expect("a condition");
        assert_eq!(
            (condition.status, condition.reason),
            (false, MODEL_NOT_IN_CONFIG)
        );
        assert!(
            condition
                .message
                .ends_with(": b (claude); add an entry for each model")
        );
    }

    #[test]
    fn prices_redis_and_a_later_reset_time() {
        let proxy = ProxyConfig {
            prices: vec![ModelPrice {
                model: "gpt-4o".into(),
                input_per_million_tokens: "2.5".into(),
                output_per_million_tokens: "10".into(),
            }],
            redis: Some(RedisConfig {
                host: "redis.kaos-system".into(),
                port: None,
                password_secret_ref: Some(Default::default()),
            }),
            ..Default::default()
        };
        let budget = Budget {
            requests_per_day: Some(100),
            daily_reset_time: Some("06:30".into()),
            ..Default::default()
        };
        let (text, condition) =
            with_budgets(GENERATED.into(), &proxy, &[agent("a", "gpt-4o", budget)]).expect("built");
        let config = parsed(&text);
        for entry in 0..2 {
            let params = &config["model_list"][entry]["litellm_params"];
            assert_eq!(params["input_cost_per_token"], 2.5e-6);
            assert_eq!(params["output_cost_per_token"], 1e-5);
        }
        assert_eq!(
            config["model_list"][1]["litellm_params"]["daily_reset_time"],
            "06:30"
        );
        assert_eq!(config["router_settings"]["redis_host"], "redis.kaos-system");
        assert_eq!(config["router_settings"]["redis_port"], 6379);
        assert_eq!(
            config["router_settings"]["redis_password"],
            "os.environ/REDIS_PASSWORD"
        );
        assert_eq!(condition.expect("a condition").reason, COUNTERS_IN_REDIS);
    }

    #[test]
    fn a_config_too_large_for_its_config_map_is_refused_with_what_to_do() {
        let agents: Vec<_> = (0..6000)
            .map(|i| agent(&format!("agent-{i:05}"), "gpt-4o", tokens(1000)))
            .collect();
        let problem = with_budgets(GENERATED.into(), &ProxyConfig::default(), &agents)
            .expect_err("too large");
        assert_eq!(problem.reason, CONFIG_TOO_LARGE);
        assert!(
            problem.message.contains("6000 budgeted agents"),
            "{}",
            problem.message
        );
        // 3 000 fit (~230 bytes an entry with these names and a UID: about 4 000 would).
        let (text, _) =
            with_budgets(GENERATED.into(), &ProxyConfig::default(), &agents[..3000]).expect("fits");
        assert!(text.len() < MAX_CONFIG_BYTES);
    }
}
