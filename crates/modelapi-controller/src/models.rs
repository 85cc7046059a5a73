//! What a ModelAPI's model check expects of its server, and what it makes of the answer: the
//! `ModelsLoaded` condition's outcome. Pure; the requests are `verify`'s.
//!
//! LiteLLM (1.110) lists at `/v1/models` the `model_name` of each config entry it could load:
//! an entry it could not (an unknown provider, say) is left out, while the proxy stays ready. A
//! wildcard entry (`openai/*`, `*`) is never listed as such: it serves any name under its prefix
//! and LiteLLM lists instead what its cost map knows there. So the names expected are the
//! config's entries that are not wildcards, the budgeted agents' aliases among them. Ollama
//! lists its pulled models at `/api/tags`, a model pulled without a tag as `<name>:latest`.

use k8s_openapi::api::core::v1::ConfigMap;
use kaos_api::conditions::{
    MODELS_LIST_FAILED, MODELS_LISTED, MODELS_MISSING, PROXY_UNREACHABLE, SERVER_UNREACHABLE,
};
use kaos_api::modelapi::{ModelAPI, ModelAPIMode};
use kaos_workload::desired::Desired;
use serde_json::Value;

use crate::build::{CONFIG_KEY, config_map_name, deployment_name};

/// Missing names shown at most in a message; the rest are counted.
const NAMES_SHOWN: usize = 20;

/// What the check of one ModelAPI expects of its server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expected {
    /// The ModelAPI's name, for what to look at when the check fails.
    pub name: String,
    pub models: Models,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Models {
    /// A LiteLLM proxy (`/health/readiness`, then `/v1/models`) listing these names, or any
    /// (None) when its config comes from a Secret, which the controller does not read.
    Proxy(Option<Vec<String>>),
    /// An Ollama server (`/api/tags`) that has pulled this model.
    Hosted(String),
}

impl Expected {
    /// What `m`, built into `desired`, is checked for: its config's models (the config the
    /// controller writes) or its Ollama model.
    pub fn of(m: &ModelAPI, desired: &Desired) -> Self {
        let name = m.metadata.name.clone().unwrap_or_default();
        let models = match (&m.spec.mode, &m.spec.hosted_config) {
            (ModelAPIMode::Hosted, Some(hosted)) => Models::Hosted(hosted.model.clone()),
            _ => Models::Proxy(config_text(desired).map(model_names)),
        };
        Expected { name, models }
    }
}

/// The LiteLLM config `desired` writes, if it writes one.
fn config_text(desired: &Desired) -> Option<&str> {
    desired
        .first
        .apply
        .iter()
        .find_map(|child| child.get::<ConfigMap>())
        .and_then(|c| c.data.as_ref()?.get(CONFIG_KEY))
        .map(String::as_str)
}

/// The `model_name`s of a LiteLLM config that are not wildcards, each once, in order.
pub fn model_names(text: &str) -> Vec<String> {
    let config: Value = serde_saphyr::from_str(text).unwrap_or(Value::Null);
    let mut names: Vec<String> = Vec::new();
    let entries = config.get("model_list").and_then(Value::as_array);
    for entry in entries.into_iter().flatten() {
        if let Some(name) = entry.get("model_name").and_then(Value::as_str)
            && !name.contains('*')
            && !names.iter().any(|n| n == name)
        {
            names.push(name.to_string());
        }
    }
    names
}

/// The names of `expected` that `listed` lacks, in order.
pub fn missing(expected: &[String], listed: &[String]) -> Vec<String> {
    expected
        .iter()
        .filter(|name| !listed.contains(name))
        .cloned()
        .collect()
}

/// Whether Ollama's `listed` models hold `model`: a name without a tag is Ollama's `:latest`.
pub fn pulled(model: &str, listed: &[String]) -> bool {
    let tagged = |name: &str| {
        let last = name.rsplit('/').next().unwrap_or(name);
        if last.contains(':') {
            name.to_string()
        } else {
            format!("{name}:latest")
        }
    };
    listed.iter().any(|l| tagged(l) == tagged(model))
}

/// What one check found: the `ModelsLoaded` condition it makes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub loaded: bool,
    pub reason: &'static str,
    pub message: String,
}

impl Outcome {
    fn passed(message: String) -> Self {
        Outcome {
            loaded: true,
            reason: MODELS_LISTED,
            message,
        }
    }

    fn failed(reason: &'static str, message: String) -> Self {
        Outcome {
            loaded: false,
            reason,
            message,
        }
    }

    /// LiteLLM at `base` answered `/v1/models` with `listed`.
    pub fn proxy_listed(expected: &Expected, base: &str, listed: &[String]) -> Self {
        let Models::Proxy(Some(names)) = &expected.models else {
            return Outcome::passed(format!(
                "LiteLLM at {base} is ready and lists {} models; its config is read from a Secret, so none is expected",
                listed.len()
            ));
        };
        let gone = missing(names, listed);
        if gone.is_empty() {
            return Outcome::passed(format!(
                "LiteLLM at {base} lists the {} models of its config",
                names.len()
            ));
        }
        let name = &expected.name;
        Outcome::failed(
            MODELS_MISSING,
            format!(
                "LiteLLM at {base} does not list {} of the {} models of its config: {}; LiteLLM could not load them: find the entry's error in its log (kubectl logs deploy/{}), then fix the entry in spec.proxyConfig (the config is ConfigMap {}) or the upstream credentials",
                gone.len(),
                names.len(),
                shown(&gone),
                deployment_name(name),
                config_map_name(name),
            ),
        )
    }

    /// Ollama at `base` answered `/api/tags` with `listed`.
    pub fn hosted_listed(expected: &Expected, base: &str, listed: &[String]) -> Self {
        let Models::Hosted(model) = &expected.models else {
            return Outcome::proxy_listed(expected, base, listed);
        };
        if pulled(model, listed) {
            return Outcome::passed(format!("Ollama at {base} has pulled {model}"));
        }
        Outcome::failed(
            MODELS_MISSING,
            format!(
                "Ollama at {base} has not pulled {model} (it lists {}); the pull-model init container pulls it when the pod starts: see its log (kubectl logs deploy/{} -c pull-model), and check that spec.hostedConfig.model names a model of Ollama's library",
                if listed.is_empty() {
                    "none".to_string()
                } else {
                    shown(listed)
                },
                deployment_name(&expected.name),
            ),
        )
    }

    /// Nothing answered at `url`: `why`.
    pub fn unreachable(expected: &Expected, url: &str, why: &str) -> Self {
        let deployment = deployment_name(&expected.name);
        match expected.models {
            Models::Proxy(_) => Outcome::failed(
                PROXY_UNREACHABLE,
                format!(
                    "no LiteLLM proxy answered at {url}: {why}; check that its pod runs and listens on its port (kubectl logs deploy/{deployment}) and that no NetworkPolicy of yours blocks the controller"
                ),
            ),
            Models::Hosted(_) => Outcome::failed(
                SERVER_UNREACHABLE,
                format!(
                    "no Ollama server answered at {url}: {why}; check that its pod runs and listens on its port (kubectl logs deploy/{deployment}) and that no NetworkPolicy of yours blocks the controller"
                ),
            ),
        }
    }

    /// The server at `url` answered, but not with a model list: `why` (an HTTP status, or
    /// what the body is not; never the body itself).
    pub fn list_failed(expected: &Expected, url: &str, why: &str) -> Self {
        let server = match expected.models {
            Models::Proxy(_) => "LiteLLM",
            Models::Hosted(_) => "Ollama",
        };
        Outcome::failed(
            MODELS_LIST_FAILED,
            format!(
                "{server} at {url} answered {why}; check its log (kubectl logs deploy/{})",
                deployment_name(&expected.name)
            ),
        )
    }
}

/// The first names of `names`, the others counted.
fn shown(names: &[String]) -> String {
    let mut text = names
        .iter()
        .take(NAMES_SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > NAMES_SHOWN {
        text.push_str(&format!(" and {} more", names.len() - NAMES_SHOWN));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent_budgets::BudgetedAgent;
    use crate::build::desired;
    use crate::settings::Settings;
    use kaos_api::budget::Budget;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn model_api(spec: serde_json::Value) -> ModelAPI {
        let mut m = ModelAPI::new("llm", serde_json::from_value(spec).expect("a spec"));
        m.metadata.namespace = Some("team".into());
        m.metadata.uid = Some("u".into());
        m
    }

    fn settings() -> Settings {
        Settings {
            default_litellm_image: Some("litellm".into()),
            default_ollama_image: Some("ollama".into()),
            ..Default::default()
        }
    }

    #[test]
    fn the_generated_config_expects_its_concrete_models_and_the_agents_aliases() {
        let m = model_api(serde_json::json!({"mode": "Proxy", "proxyConfig": {
            "models": ["gpt-4o", "openai/*", "gpt-4o"], "provider": "openai"}}));
        let agent = BudgetedAgent {
            namespace: "team".into(),
            name: "writer".into(),
            uid: "uid-w".into(),
            model: "openai/gpt-4o-mini".into(),
            budget: Budget {
                tokens_per_day: Some(1000),
                ..Default::default()
            },
        };
        let built = desired(&m, &settings(), &[agent]).expect("built");
        assert_eq!(
            Expected::of(&m, &built),
            Expected {
                name: "llm".into(),
                models: Models::Proxy(Some(names(&["gpt-4o", "kaos.team.writer"]))),
            },
            "the wildcard is not expected, the alias is, a name once"
        );
    }

    #[test]
    fn a_config_from_a_secret_expects_no_names_and_hosted_its_model() {
        let secret = model_api(serde_json::json!({"mode": "Proxy", "proxyConfig": {
            "models": ["*"], "configYaml": {"fromSecretKeyRef": {"name": "s", "key": "k"}}}}));
        let built = desired(&secret, &settings(), &[]).expect("built");
        assert_eq!(Expected::of(&secret, &built).models, Models::Proxy(None));
        let hosted = model_api(serde_json::json!({"mode": "Hosted",
            "hostedConfig": {"model": "smollm2:135m"}}));
        let built = desired(&hosted, &settings(), &[]).expect("built");
        assert_eq!(
            Expected::of(&hosted, &built).models,
            Models::Hosted("smollm2:135m".into())
        );
    }

    #[test]
    fn an_inline_config_expects_its_own_entries() {
        let text = "model_list:\n  - model_name: a\n    litellm_params: {model: openai/a}\n  - model_name: 'anthropic/*'\n    litellm_params: {model: 'anthropic/*'}\n  - model_name: b\n    litellm_params: {model: openai/b}\n  - model_name: a\n    litellm_params: {model: azure/a}\n";
        assert_eq!(model_names(text), names(&["a", "b"]));
        assert_eq!(model_names("not: [a list"), Vec::<String>::new());
    }

    #[test]
    fn missing_names_are_those_not_listed_and_the_message_says_what_to_fix() {
        let expected = Expected {
            name: "llm".into(),
            models: Models::Proxy(Some(names(&["gpt-4o", "broken", "kaos.team.writer"]))),
        };
        let listed = names(&["kaos.team.writer", "gpt-4o", "openai/gpt-5"]);
        assert_eq!(
            missing(&names(&["gpt-4o", "broken"]), &listed),
            names(&["broken"])
        );
        let outcome = Outcome::proxy_listed(&expected, "http://l:8000", &listed);
        assert_eq!(
            outcome,
            Outcome {
                loaded: false,
                reason: MODELS_MISSING,
                message: "LiteLLM at http://l:8000 does not list 1 of the 3 models of its config: broken; LiteLLM could not load them: find the entry's error in its log (kubectl logs deploy/modelapi-llm), then fix the entry in spec.proxyConfig (the config is ConfigMap litellm-config-llm) or the upstream credentials".into(),
            }
        );
        let all = names(&["gpt-4o", "broken", "kaos.team.writer"]);
        let outcome = Outcome::proxy_listed(&expected, "http://l:8000", &all);
        assert_eq!(
            (outcome.loaded, outcome.reason, outcome.message.as_str()),
            (
                true,
                MODELS_LISTED,
                "LiteLLM at http://l:8000 lists the 3 models of its config"
            )
        );
        let many: Vec<String> = (0..25).map(|i| format!("m{i}")).collect();
        assert!(shown(&many).ends_with("m19 and 5 more"), "{}", shown(&many));
    }

    #[test]
    fn ollama_names_a_model_without_a_tag_latest() {
        let listed = names(&["smollm2:135m", "llama3:latest", "hf.co/org/repo:latest"]);
        assert!(pulled("smollm2:135m", &listed));
        assert!(pulled("llama3", &listed));
        assert!(pulled("llama3:latest", &listed));
        assert!(pulled("hf.co/org/repo", &listed));
        assert!(!pulled("smollm2", &listed), "another tag");
        assert!(!pulled("qwen3:0.6b", &listed));
        let expected = Expected {
            name: "local".into(),
            models: Models::Hosted("qwen3:0.6b".into()),
        };
        let outcome = Outcome::hosted_listed(&expected, "http://o:11434", &[]);
        assert_eq!(outcome.reason, MODELS_MISSING);
        assert!(
            outcome.message.starts_with(
                "Ollama at http://o:11434 has not pulled qwen3:0.6b (it lists none); the pull-model init container"
            ),
            "{}",
            outcome.message
        );
    }
}
