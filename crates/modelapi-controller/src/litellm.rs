//! The LiteLLM `config.yaml` of a Proxy ModelAPI: generated from `proxyConfig`, or the user's own
//! text checked against `proxyConfig.models`.

use kaos_api::conditions::{INVALID_CONFIG_YAML, MODEL_NOT_ALLOWED};
use kaos_api::modelapi::{ProxyConfig, model_pattern_matches};
use serde_json::Value;

use kaos_workload::desired::Problem;

/// YAML double-quoted scalar (JSON string syntax is valid YAML).
fn quoted(text: &str) -> String {
    Value::String(text.to_string()).to_string()
}

/// The generated config: one `model_list` entry per model, in order, then `litellm_settings`
/// (OpenTelemetry callbacks with `telemetry`, the Prometheus `/metrics/` callback with
/// `prometheus`).
pub fn generate(proxy: &ProxyConfig, telemetry: bool, prometheus: bool) -> String {
    let mut text = String::from("model_list:\n");
    for model in &proxy.models {
        let routed = match proxy.provider.as_deref().filter(|p| !p.is_empty()) {
            Some(provider) => format!("{provider}/{model}"),
            None => model.clone(),
        };
        text.push_str(&format!("  - model_name: {}\n", quoted(model)));
        text.push_str("    litellm_params:\n");
        text.push_str(&format!("      model: {}\n", quoted(&routed)));
        if proxy.api_base.as_deref().is_some_and(|b| !b.is_empty()) {
            text.push_str("      api_base: \"os.environ/PROXY_API_BASE\"\n");
        }
        if proxy.api_key.is_some() {
            text.push_str("      api_key: \"os.environ/PROXY_API_KEY\"\n");
        }
    }
    text.push_str("litellm_settings:\n  drop_params: true\n");
    if telemetry {
        text.push_str("  success_callback: [\"otel\"]\n  failure_callback: [\"otel\"]\n");
    }
    if prometheus {
        text.push_str("  callbacks: [\"prometheus\"]\n");
    }
    text
}

/// Checks a user's config: valid YAML whose every `model_list[].model_name` is allowed by
/// `models` (exact, `provider/*` or `*`).
pub fn validate(text: &str, models: &[String]) -> Result<(), Problem> {
    // Only the position: the parser's message quotes the text around the error, which may be a
    // key the user pasted into the config.
    let config: Value = serde_saphyr::from_str(text).map_err(|e| {
        let at = e
            .location()
            .map(|l| format!(" at line {}, column {}", l.line(), l.column()))
            .unwrap_or_default();
        Problem::failed(
            INVALID_CONFIG_YAML,
            format!("spec.proxyConfig.configYaml.fromString is not valid YAML{at}"),
        )
    })?;
    let entries = config
        .get("model_list")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for (index, entry) in entries.iter().enumerate() {
        let Some(name) = entry.get("model_name").and_then(Value::as_str) else {
            return Err(Problem::failed(
                INVALID_CONFIG_YAML,
                format!(
                    "spec.proxyConfig.configYaml.fromString: model_list[{index}] has no model_name"
                ),
            ));
        };
        if !models.iter().any(|m| model_pattern_matches(m, name)) {
            return Err(Problem::failed(
                MODEL_NOT_ALLOWED,
                format!(
                    "spec.proxyConfig.configYaml.fromString: model_name {} is not allowed by proxyConfig.models [{}]; add it to proxyConfig.models or remove it from the config",
                    quoted(name),
                    models.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kaos_api::modelapi::ApiKey;

    #[test]
    fn generated_config_line_by_line() {
        let proxy = ProxyConfig {
            models: vec!["gpt-4o".into(), "gpt-4o-mini".into()],
            provider: Some("openai".into()),
            api_base: Some("https://api.openai.com/v1".into()),
            api_key: Some(ApiKey {
                value: Some("sk".into()),
                value_from: None,
            }),
            config_yaml: None,
            ..Default::default()
        };
        assert_eq!(
            generate(&proxy, false, false),
            "model_list:\n\
             \x20 - model_name: \"gpt-4o\"\n\
             \x20   litellm_params:\n\
             \x20     model: \"openai/gpt-4o\"\n\
             \x20     api_base: \"os.environ/PROXY_API_BASE\"\n\
             \x20     api_key: \"os.environ/PROXY_API_KEY\"\n\
             \x20 - model_name: \"gpt-4o-mini\"\n\
             \x20   litellm_params:\n\
             \x20     model: \"openai/gpt-4o-mini\"\n\
             \x20     api_base: \"os.environ/PROXY_API_BASE\"\n\
             \x20     api_key: \"os.environ/PROXY_API_KEY\"\n\
             litellm_settings:\n\
             \x20 drop_params: true\n"
        );
    }

    #[test]
    fn no_provider_no_base_no_key_and_telemetry_callbacks() {
        let proxy = ProxyConfig {
            models: vec!["ollama/*".into()],
            ..Default::default()
        };
        assert_eq!(
            generate(&proxy, true, false),
            "model_list:\n\
             \x20 - model_name: \"ollama/*\"\n\
             \x20   litellm_params:\n\
             \x20     model: \"ollama/*\"\n\
             litellm_settings:\n\
             \x20 drop_params: true\n\
             \x20 success_callback: [\"otel\"]\n\
             \x20 failure_callback: [\"otel\"]\n"
        );
        // The generated text is valid YAML that passes its own check.
        validate(&generate(&proxy, true, false), &proxy.models).expect("valid");
    }

    #[test]
    fn the_prometheus_callback_serves_metrics_when_asked() {
        let proxy = ProxyConfig {
            models: vec!["gpt-4o".into()],
            ..Default::default()
        };
        let text = generate(&proxy, false, true);
        assert!(
            text.ends_with(
                "litellm_settings:\n  drop_params: true\n  callbacks: [\"prometheus\"]\n"
            ),
            "{text}"
        );
        validate(&text, &proxy.models).expect("valid");
        assert!(!generate(&proxy, false, false).contains("prometheus"));
    }

    #[test]
    fn user_config_models_must_be_allowed() {
        let text = "model_list:\n  - model_name: gpt-4o\n    litellm_params: {model: openai/gpt-4o}\n  - model_name: claude\n    litellm_params: {model: anthropic/claude}\n";
        let allowed = vec!["gpt-4o".to_string(), "claude".to_string()];
        assert_eq!(validate(text, &allowed), Ok(()));
        assert_eq!(validate(text, &["*".to_string()]), Ok(()));
        let err = validate(text, &["gpt-4o".to_string()]).expect_err("claude not allowed");
        assert_eq!(err.reason, "ModelNotAllowed");
        assert_eq!(
            err.message,
            "spec.proxyConfig.configYaml.fromString: model_name \"claude\" is not allowed by proxyConfig.models [gpt-4o]; add it to proxyConfig.models or remove it from the config"
        );
        let err = validate("model_list: [", &allowed).expect_err("bad yaml");
        assert_eq!(err.reason, "InvalidConfigYaml");
        // The error names the place, never the text around it (a pasted key, say).
        let leaky =
            "model_list:\n  - model_name: a\n    litellm_params: {api_key: sk-SECRET, model: [}\n";
        let err = validate(leaky, &allowed).expect_err("bad yaml");
        assert!(!err.message.contains("SECRET"), "{}", err.message);
        assert!(
            err.message.contains(" at line 3, column "),
            "{}",
            err.message
        );
    }
}
