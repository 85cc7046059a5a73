//! ModelAPI spec (+ operator settings) → the children that serve it. Pure: no IO.

use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::{DeploymentStrategy, RollingUpdateDeployment};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, Container, ContainerPort, EmptyDirVolumeSource, EnvVar,
    EnvVarSource, KeyToPath, PodSpec, Secret, SecretKeySelector, SecretVolumeSource, Volume,
    VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kaos_api::conditions::{
    MISSING_HOSTED_CONFIG, MISSING_PROXY_CONFIG, NO_IMAGE, NOT_SUPPORTED_IN_HOSTED_MODE,
};
use kaos_api::modelapi::{ModelAPI, ModelAPIMode, ProxyConfig};
use kaos_workload::build::container::{
    apply_container_override, env, http_probe, image, log_level, merge_telemetry, with_user_env,
};
use kaos_workload::build::network_policy;
use kaos_workload::build::podspec::workload_pod;
use kaos_workload::build::scaling::ScaledChildren;
use kaos_workload::build::workload::{Workload, owner_of};
use kaos_workload::conditions::ConditionUpdate;
use kaos_workload::desired::{ChildSet, WorkloadChildren};
use kaos_workload::hash::{secret_hash, stable_hash};
use kube::ResourceExt;

use crate::agent_budgets::BudgetedAgent;
use crate::budget_entries::{REDIS_PASSWORD_ENV, with_budgets};
use crate::litellm;
use crate::settings::Settings;
pub use kaos_workload::desired::{Desired, Problem};

pub const PROXY_PORT: i32 = 8000;
pub const OLLAMA_PORT: i32 = 11434;
pub const CONTAINER: &str = "model-api";
/// Pod-template annotation: the hash of the LiteLLM config the pods mount.
pub const CONFIG_HASH_ANNOTATION: &str = "kaos.tools/config-hash";
/// Pod-template annotation: a one-way hash of an inline API key, so a new key rolls the pods
/// (they read it from the owned Secret, which does not restart them by itself).
pub const API_KEY_HASH_ANNOTATION: &str = "kaos.tools/api-key-hash";
/// The key of the owned Secret holding an inline `apiKey.value`.
pub const API_KEY_SECRET_KEY: &str = "api-key";
/// LiteLLM ≥ 1.104 refuses to start without a master key unless this is `true`. The agent
/// runtime (pydantic-ai-server 0.8.4) can present no key (it sends `Bearer not-needed`), so the
/// proxy runs keyless, as KAOS's always did, behind the NetworkPolicy that admits only the
/// namespace's agents and memory stores (docs/security.md, "The LiteLLM proxy runs keyless").
/// Set as env, not in the config, so it holds for a user's `configYaml` too.
pub const PERMIT_KEYLESS_ENV: &str = "LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY";
const CONFIG_DIR: &str = "/etc/litellm";
/// The key of the LiteLLM config in its ConfigMap.
pub const CONFIG_KEY: &str = "config.yaml";
const OLLAMA_DATA: &str = "/root/.ollama";

pub use kaos_api::conditions::TELEMETRY_SUPPORTED;

pub fn deployment_name(name: &str) -> String {
    format!("modelapi-{name}")
}

pub fn config_map_name(name: &str) -> String {
    format!("litellm-config-{name}")
}

pub fn api_key_secret_name(name: &str) -> String {
    format!("modelapi-{name}-api-key")
}

/// The inline API key of a Proxy ModelAPI, if it has one.
fn inline_api_key(m: &ModelAPI) -> Option<&str> {
    let proxy = m.spec.proxy_config.as_ref()?;
    proxy.api_key.as_ref()?.value.as_deref()
}

/// The labels of every child; also the selector.
pub fn labels(name: &str) -> std::collections::BTreeMap<String, String> {
    [
        ("app".to_string(), "modelapi".to_string()),
        ("modelapi".to_string(), name.to_string()),
    ]
    .into()
}

/// Selects every child of every ModelAPI (the controller's watch caches).
pub const CHILD_SELECTOR: &str = "app=modelapi";

fn port(container_port: i32) -> Vec<ContainerPort> {
    vec![ContainerPort {
        container_port,
        name: Some("http".into()),
        protocol: Some("TCP".into()),
        ..Default::default()
    }]
}

/// LiteLLM's log levels: TRACE is DEBUG, anything else passes through; INFO by default.
fn litellm_log(level: &str) -> String {
    match level.to_ascii_uppercase().as_str() {
        "TRACE" => "DEBUG".into(),
        other => other.to_string(),
    }
}

/// `PROXY_API_KEY` from a Secret or ConfigMap key: the user's reference, or for an inline value
/// the owned Secret holding it.
fn api_key_env(name: &str, proxy: &ProxyConfig) -> Option<EnvVar> {
    let key = proxy.api_key.as_ref()?;
    let source = match (&key.value, &key.value_from) {
        (Some(_), _) => EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: api_key_secret_name(name),
                key: API_KEY_SECRET_KEY.into(),
                optional: None,
            }),
            ..Default::default()
        },
        (None, Some(from)) => EnvVarSource {
            secret_key_ref: from.secret_key_ref.clone(),
            config_map_key_ref: from.config_map_key_ref.clone(),
            ..Default::default()
        },
        (None, None) => return None,
    };
    Some(EnvVar {
        name: "PROXY_API_KEY".into(),
        value: None,
        value_from: Some(source),
    })
}

/// A Proxy ModelAPI's pod, its config text (unless read from a Secret) and its
/// `BudgetsEnforced` condition (with budgeted `agents`).
fn proxy_pod(
    m: &ModelAPI,
    proxy: &ProxyConfig,
    settings: &Settings,
    telemetry: Option<&kaos_api::common::Telemetry>,
    agents: &[BudgetedAgent],
) -> Result<(PodSpec, Option<String>, Option<ConditionUpdate<'static>>), Problem> {
    let name = m.name_any();
    let container_override = m.spec.workload.container.as_ref();
    let image = image(
        container_override,
        settings.default_litellm_image.as_deref(),
    )
    .ok_or_else(|| {
        Problem::failed(
            NO_IMAGE,
            "no LiteLLM image: set spec.container.image or the operator's DEFAULT_LITELLM_IMAGE"
                .into(),
        )
    })?;
    let mut generated = Vec::new();
    if let Some(base) = proxy.api_base.as_deref().filter(|b| !b.is_empty()) {
        generated.push(env("PROXY_API_BASE", base));
    }
    generated.extend(api_key_env(&name, proxy));
    let user_at = generated.len();
    generated.push(env(
        "LITELLM_LOG",
        litellm_log(&log_level(&settings.data_plane)),
    ));
    generated.push(env(PERMIT_KEYLESS_ENV, "true"));
    if let Some(secret) = proxy
        .redis
        .as_ref()
        .and_then(|r| r.password_secret_ref.clone())
    {
        generated.push(EnvVar {
            name: REDIS_PASSWORD_ENV.into(),
            value: None,
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(secret),
                ..Default::default()
            }),
        });
    }
    if let Some(t) = telemetry.filter(|t| t.enabled) {
        generated.push(env("OTEL_EXPORTER", "otlp_grpc"));
        generated.push(env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            t.endpoint.clone().unwrap_or_default(),
        ));
        generated.push(env("OTEL_SERVICE_NAME", name.clone()));
        generated.push(env("OTEL_PYTHON_EXCLUDED_URLS", "/health"));
    }
    let user_env = container_override
        .map(|c| c.env.as_slice())
        .unwrap_or_default();
    let mut budgets = None;
    let (volume, config_text) = match proxy.config_yaml.as_ref() {
        Some(c) if c.from_secret_key_ref.is_some() => {
            let secret: &SecretKeySelector = c.from_secret_key_ref.as_ref().expect("checked above");
            let volume = Volume {
                name: "litellm-config".into(),
                secret: Some(SecretVolumeSource {
                    secret_name: Some(secret.name.clone()),
                    items: Some(vec![KeyToPath {
                        key: secret.key.clone(),
                        path: CONFIG_KEY.into(),
                        mode: None,
                    }]),
                    ..Default::default()
                }),
                ..Default::default()
            };
            (volume, None)
        }
        other => {
            let text = match other.and_then(|c| c.from_string.clone()) {
                Some(text) => {
                    litellm::validate(&text, &proxy.models)?;
                    text
                }
                None => litellm::generate(
                    proxy,
                    telemetry.is_some_and(|t| t.enabled),
                    settings.litellm_prometheus_metrics,
                ),
            };
            let (text, condition) = with_budgets(text, proxy, agents)?;
            budgets = condition;
            let volume = Volume {
                name: "litellm-config".into(),
                config_map: Some(ConfigMapVolumeSource {
                    name: config_map_name(&name),
                    ..Default::default()
                }),
                ..Default::default()
            };
            (volume, Some(text))
        }
    };
    let mut container = Container {
        name: CONTAINER.into(),
        image: Some(image),
        args: Some(vec![
            "--config".into(),
            format!("{CONFIG_DIR}/{CONFIG_KEY}"),
            "--port".into(),
            PROXY_PORT.to_string(),
        ]),
        ports: Some(port(PROXY_PORT)),
        env: Some(with_user_env(generated, user_env, user_at)),
        volume_mounts: Some(vec![VolumeMount {
            name: "litellm-config".into(),
            mount_path: CONFIG_DIR.into(),
            read_only: Some(true),
            ..Default::default()
        }]),
        liveness_probe: Some(http_probe("/health/liveliness", PROXY_PORT, 30, 10)),
        // `/health/readiness` checks the proxy's own state; never `/health`, which calls every
        // model upstream (tokens and rate limits spent on each probe).
        readiness_probe: Some(http_probe("/health/readiness", PROXY_PORT, 15, 5)),
        ..Default::default()
    };
    apply_container_override(&mut container, container_override)?;
    let pod = PodSpec {
        containers: vec![container],
        volumes: Some(vec![volume]),
        ..Default::default()
    };
    Ok((pod, config_text, budgets))
}

/// Ollama keeps its key and models in `$HOME/.ollama`, the data volume. The image sets no HOME
/// and the restricted default runs it as a user with no home directory, so it is named here.
fn ollama_home() -> EnvVar {
    env("HOME", "/root")
}

/// Single-quotes a value for `/bin/sh`.
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

fn hosted_pod(m: &ModelAPI, model: &str, settings: &Settings) -> Result<PodSpec, Problem> {
    let container_override = m.spec.workload.container.as_ref();
    let image =
        image(container_override, settings.default_ollama_image.as_deref()).ok_or_else(|| {
            Problem::failed(
                NO_IMAGE,
                "no Ollama image: set spec.container.image or the operator's DEFAULT_OLLAMA_IMAGE"
                    .into(),
            )
        })?;
    let data_mount = VolumeMount {
        name: "ollama-data".into(),
        mount_path: OLLAMA_DATA.into(),
        ..Default::default()
    };
    // Start a server, wait for it, pull the model into the shared volume, stop the server.
    let script = format!(
        "ollama serve & pid=$!; until ollama list >/dev/null 2>&1; do sleep 1; done; ollama pull {}; status=$?; kill $pid; wait $pid 2>/dev/null; exit $status",
        shell_quote(model)
    );
    let pull = Container {
        name: "pull-model".into(),
        image: Some(image.clone()),
        command: Some(vec!["/bin/sh".into(), "-c".into()]),
        args: Some(vec![script]),
        volume_mounts: Some(vec![data_mount.clone()]),
        env: Some(vec![ollama_home()]),
        ..Default::default()
    };
    let mut generated = vec![ollama_home()];
    match log_level(&settings.data_plane)
        .to_ascii_uppercase()
        .as_str()
    {
        "TRACE" => generated.push(env("OLLAMA_DEBUG", "2")),
        "DEBUG" => generated.push(env("OLLAMA_DEBUG", "1")),
        _ => {}
    }
    let user_env = container_override
        .map(|c| c.env.as_slice())
        .unwrap_or_default();
    let mut container = Container {
        name: CONTAINER.into(),
        image: Some(image),
        ports: Some(port(OLLAMA_PORT)),
        env: Some(with_user_env(generated, user_env, 0)).filter(|e| !e.is_empty()),
        volume_mounts: Some(vec![data_mount]),
        liveness_probe: Some(http_probe("/", OLLAMA_PORT, 30, 10)),
        readiness_probe: Some(http_probe("/", OLLAMA_PORT, 10, 5)),
        ..Default::default()
    };
    apply_container_override(&mut container, container_override)?;
    Ok(PodSpec {
        init_containers: Some(vec![pull]),
        containers: vec![container],
        volumes: Some(vec![Volume {
            name: "ollama-data".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        }]),
        ..Default::default()
    })
}

/// What `m` should have in the cluster, given the `agents` using it that have a budget, or why
/// it can have nothing.
pub fn desired(
    m: &ModelAPI,
    settings: &Settings,
    agents: &[BudgetedAgent],
) -> Result<Desired, Problem> {
    let name = m.name_any();
    let namespace = m.namespace().unwrap_or_else(|| "default".into());
    let telemetry = merge_telemetry(m.spec.telemetry.as_ref(), &settings.data_plane);
    let mut budgets = None;
    let (generated, config_text, port, telemetry_ignored) = match m.spec.mode {
        ModelAPIMode::Proxy => {
            let proxy = m.spec.proxy_config.as_ref().ok_or_else(|| {
                Problem::failed(
                    MISSING_PROXY_CONFIG,
                    "mode Proxy requires spec.proxyConfig".into(),
                )
            })?;
            let (pod, text, condition) = proxy_pod(m, proxy, settings, telemetry.as_ref(), agents)?;
            budgets = condition;
            (pod, text, PROXY_PORT, false)
        }
        ModelAPIMode::Hosted => {
            let hosted = m.spec.hosted_config.as_ref().ok_or_else(|| {
                Problem::failed(
                    MISSING_HOSTED_CONFIG,
                    "mode Hosted requires spec.hostedConfig".into(),
                )
            })?;
            let pod = hosted_pod(m, &hosted.model, settings)?;
            (
                pod,
                None,
                OLLAMA_PORT,
                telemetry.as_ref().is_some_and(|t| t.enabled),
            )
        }
    };
    // Neither LiteLLM nor Ollama calls the Kubernetes API.
    let level = settings.data_plane.pod_security;
    let pod = workload_pod(generated, level, false, m.spec.workload.pod_spec.as_deref())?;
    let workload = Workload {
        name: deployment_name(&name),
        namespace: namespace.clone(),
        labels: labels(&name),
        owner: owner_of(m),
        port,
    };
    workload.check_name(&name)?;
    let config_map = config_text.map(|text| ConfigMap {
        metadata: ObjectMeta {
            name: Some(config_map_name(&name)),
            namespace: Some(namespace.clone()),
            labels: Some(labels(&name)),
            owner_references: Some(vec![owner_of(m)]),
            ..Default::default()
        },
        data: Some([(CONFIG_KEY.to_string(), text)].into()),
        ..Default::default()
    });
    let timeout = m.spec.workload.route_timeout();
    let scaled = ScaledChildren::of(&workload, &m.spec.scaling);
    let policies = &settings.data_plane.network_policy;
    let mut deployment = workload.deployment(pod, scaled.replicas.in_spec());
    if !agents.is_empty()
        && let Some(spec) = deployment.spec.as_mut()
    {
        // A new budget rolls the pods: no moment without a ready proxy, whatever the replicas
        // (the default 25% lets one of four go first).
        spec.strategy = Some(DeploymentStrategy {
            type_: Some("RollingUpdate".into()),
            rolling_update: Some(RollingUpdateDeployment {
                max_unavailable: Some(IntOrString::Int(0)),
                max_surge: Some(IntOrString::Int(1)),
            }),
        });
    }
    if let Some(text) = config_map
        .as_ref()
        .and_then(|c| c.data.as_ref())
        .and_then(|d| d.get(CONFIG_KEY))
    {
        // The config is mounted, not part of the pod spec: its hash rolls the pods when it changes.
        let template = deployment
            .spec
            .as_mut()
            .and_then(|s| s.template.metadata.as_mut());
        if let Some(annotations) = template.and_then(|m| m.annotations.as_mut()) {
            annotations.insert(CONFIG_HASH_ANNOTATION.into(), stable_hash(text));
        }
    }
    let api_key_secret = inline_api_key(m).map(|key| {
        // The key is in the Secret, not the pod spec: its hash rolls the pods when it changes.
        let template = deployment
            .spec
            .as_mut()
            .and_then(|s| s.template.metadata.as_mut());
        if let Some(annotations) = template.and_then(|m| m.annotations.as_mut()) {
            annotations.insert(API_KEY_HASH_ANNOTATION.into(), secret_hash(&key));
        }
        Secret {
            metadata: ObjectMeta {
                name: Some(api_key_secret_name(&name)),
                namespace: Some(namespace.clone()),
                labels: Some(labels(&name)),
                owner_references: Some(vec![owner_of(m)]),
                ..Default::default()
            },
            type_: Some("Opaque".into()),
            data: Some(
                [(
                    API_KEY_SECRET_KEY.to_string(),
                    ByteString(key.as_bytes().to_vec()),
                )]
                .into(),
            ),
            ..Default::default()
        }
    });
    // The config and the key first, so new pods find what they mount and read.
    let mut first = ChildSet::default();
    first.wanted(config_map, &config_map_name(&name));
    first.wanted(api_key_secret, &api_key_secret_name(&name));
    let http_route = workload.http_route(
        "modelapi",
        &name,
        timeout,
        &settings.gateway_default_timeout,
        &settings.gateway,
    );
    let network_policy = policies
        .applies_to(&namespace)
        .then(|| network_policy::model_api_policy(&workload, policies));
    let conditions = telemetry_ignored
        .then(|| ConditionUpdate {
            type_: TELEMETRY_SUPPORTED,
            status: false,
            reason: NOT_SUPPORTED_IN_HOSTED_MODE,
            message: "telemetry is not supported by Hosted (Ollama) ModelAPIs: spec.telemetry is kept but has no effect".into(),
        })
        .into_iter()
        .chain(budgets)
        .collect();
    Ok(Desired {
        first,
        workload: WorkloadChildren::plain(deployment, Some(workload.service()), http_route)
            .scaled(scaled)
            .fenced(network_policy),
        endpoint: Some(workload.endpoint()),
        conditions,
    })
}
