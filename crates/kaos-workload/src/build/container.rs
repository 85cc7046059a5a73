//! What goes into a generated container: environment variables (the contract's order, then
//! the user's: `docs/contract.md` §2), the image and the user's container override, telemetry
//! defaults, the log level, and the HTTP probes.

use k8s_openapi::api::core::v1::{Container, ContainerPort, EnvVar, HTTPGetAction, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kaos_api::common::{ContainerOverride, Telemetry};
use kaos_api::conditions::INVALID_CONTAINER_PORTS;

use crate::build::settings::DataPlaneArgs;
use crate::desired::Problem;

/// An HTTP GET probe on `path` and `port` with KAOS's thresholds (5 s timeout, 3 failures).
pub fn http_probe(path: &str, port: i32, initial_delay: i32, period: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::Int(port),
            ..Default::default()
        }),
        initial_delay_seconds: Some(initial_delay),
        period_seconds: Some(period),
        timeout_seconds: Some(5),
        failure_threshold: Some(3),
        ..Default::default()
    }
}

pub fn env(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar {
        name: name.to_string(),
        value: Some(value.into()),
        value_from: None,
    }
}

/// Adds `name` when its field is set (the runtime's default applies otherwise), as Go prints
/// it: `42`, `true`, `0.4`.
pub fn push_if_set(vars: &mut Vec<EnvVar>, name: &str, value: Option<impl ToString>) {
    if let Some(value) = value {
        vars.push(env(name, value.to_string()));
    }
}

/// Adds the user's `container.env` to the generated variables: an entry named like a generated
/// variable replaces it where it stands; the others are inserted, in the user's order, at
/// `insert_at`. A name the user lists twice keeps its last entry. No name appears twice.
pub fn with_user_env(mut generated: Vec<EnvVar>, user: &[EnvVar], insert_at: usize) -> Vec<EnvVar> {
    let mut extra: Vec<EnvVar> = Vec::new();
    for entry in user {
        if let Some(existing) = generated.iter_mut().find(|e| e.name == entry.name) {
            *existing = entry.clone();
        } else if let Some(existing) = extra.iter_mut().find(|e| e.name == entry.name) {
            *existing = entry.clone();
        } else {
            extra.push(entry.clone());
        }
    }
    let at = insert_at.min(generated.len());
    generated.splice(at..at, extra);
    generated
}

/// The image: the user's `container.image`, else the operator default (None: neither is set).
pub fn image(container: Option<&ContainerOverride>, default: Option<&str>) -> Option<String> {
    container
        .and_then(|c| c.image.clone())
        .filter(|i| !i.is_empty())
        .or_else(|| default.filter(|d| !d.is_empty()).map(String::from))
}

/// Applies the user's `command`, `args`, `resources` and `ports` (image and env are handled
/// apart). A user port with the generated port's name or number replaces it, and must keep its
/// number (the Service and the probes use it): the error (`InvalidContainerPorts`) says so.
pub fn apply_container_override(
    container: &mut Container,
    user: Option<&ContainerOverride>,
) -> Result<(), Problem> {
    let Some(user) = user else { return Ok(()) };
    if !user.command.is_empty() {
        container.command = Some(user.command.clone());
    }
    if !user.args.is_empty() {
        container.args = Some(user.args.clone());
    }
    if user.resources.is_some() {
        container.resources = user.resources.clone();
    }
    if user.ports.is_empty() {
        // Untouched, so a pod spec (and its hash) is the same as before `ports` existed.
        return Ok(());
    }
    let ports = container.ports.get_or_insert_with(Vec::new);
    for port in &user.ports {
        let same = |p: &ContainerPort| {
            p.container_port == port.container_port || (p.name.is_some() && p.name == port.name)
        };
        match ports.iter_mut().find(|p| same(p)) {
            Some(generated) if generated.container_port != port.container_port => {
                return Err(Problem::failed(
                    INVALID_CONTAINER_PORTS,
                    format!(
                        "spec.container.ports: port {} must be {}: the Service and the probes use it",
                        port.name.as_deref().unwrap_or("http"),
                        generated.container_port
                    ),
                ));
            }
            Some(generated) => *generated = port.clone(),
            None => ports.push(port.clone()),
        }
    }
    Ok(())
}

/// The effective telemetry of a component: with no component value the operator default; with
/// no default the component's; with both the component's `enabled` and its endpoint, else the
/// default endpoint. None when neither is set.
pub fn merge_telemetry(
    component: Option<&Telemetry>,
    defaults: &DataPlaneArgs,
) -> Option<Telemetry> {
    let default = defaults.default_telemetry_enabled.map(|enabled| Telemetry {
        enabled,
        endpoint: defaults.default_telemetry_endpoint.clone(),
    });
    match (component, default) {
        (None, default) => default,
        (Some(c), None) => Some(c.clone()),
        (Some(c), Some(d)) => Some(Telemetry {
            enabled: c.enabled,
            endpoint: c.endpoint.clone().or(d.endpoint),
        }),
    }
}

/// The OpenTelemetry variables of the KAOS Python runtimes (agent and MCP servers), when
/// telemetry is enabled.
pub fn python_otel_env(name: &str, namespace: &str, telemetry: Option<&Telemetry>) -> Vec<EnvVar> {
    let Some(telemetry) = telemetry.filter(|t| t.enabled) else {
        return Vec::new();
    };
    vec![
        env("OTEL_SDK_DISABLED", "false"),
        env("OTEL_SERVICE_NAME", name),
        env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            telemetry.endpoint.clone().unwrap_or_default(),
        ),
        env(
            "OTEL_RESOURCE_ATTRIBUTES",
            format!("service.namespace={namespace},kaos.resource.name={name}"),
        ),
        // KAOS's two probe paths, and the agent card the agent's readiness probe now reads
        // (docs/readiness.md): no trace every few seconds for a probe.
        env(
            "OTEL_PYTHON_FASTAPI_EXCLUDED_URLS",
            "/health,/ready,/.well-known/agent.json",
        ),
    ]
}

/// The pods' log level: `DEFAULT_LOG_LEVEL`, else `INFO`.
pub fn log_level(defaults: &DataPlaneArgs) -> String {
    defaults
        .default_log_level
        .clone()
        .filter(|l| !l.is_empty())
        .unwrap_or_else(|| "INFO".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_env_replaces_in_place_and_inserts_the_rest() {
        let generated = vec![env("A", "1"), env("B", "2"), env("LOG_LEVEL", "INFO")];
        let user = vec![
            env("X", "x"),
            env("LOG_LEVEL", "DEBUG"),
            env("Y", "y"),
            env("X", "x2"),
        ];
        let names: Vec<(String, String)> = with_user_env(generated, &user, 2)
            .into_iter()
            .map(|e| (e.name, e.value.unwrap_or_default()))
            .collect();
        let expected: Vec<(String, String)> = [
            ("A", "1"),
            ("B", "2"),
            ("X", "x2"),
            ("Y", "y"),
            ("LOG_LEVEL", "DEBUG"),
        ]
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect();
        assert_eq!(names, expected);
    }

    #[test]
    fn telemetry_merge_rules() {
        let on = |endpoint: Option<&str>| Telemetry {
            enabled: true,
            endpoint: endpoint.map(String::from),
        };
        let off = Telemetry {
            enabled: false,
            endpoint: None,
        };
        let defaults = DataPlaneArgs {
            default_telemetry_enabled: Some(true),
            default_telemetry_endpoint: Some("http://otel:4317".into()),
            default_log_level: None,
            ..Default::default()
        };
        let none = DataPlaneArgs::default();
        assert_eq!(merge_telemetry(None, &none), None);
        assert_eq!(
            merge_telemetry(None, &defaults),
            Some(on(Some("http://otel:4317")))
        );
        assert_eq!(
            merge_telemetry(Some(&on(Some("http://mine:4317"))), &none),
            Some(on(Some("http://mine:4317")))
        );
        assert_eq!(
            merge_telemetry(Some(&on(None)), &defaults),
            Some(on(Some("http://otel:4317")))
        );
        assert_eq!(
            merge_telemetry(Some(&off), &defaults).map(|t| t.enabled),
            Some(false),
            "component's enabled wins"
        );
        assert_eq!(log_level(&none), "INFO");
    }

    #[test]
    fn image_and_overrides() {
        let user = ContainerOverride {
            image: Some("mine:1".into()),
            command: vec!["run".into()],
            args: vec![],
            resources: None,
            env: vec![],
            ports: vec![],
        };
        assert_eq!(
            image(Some(&user), Some("default:1")).as_deref(),
            Some("mine:1")
        );
        assert_eq!(image(None, Some("default:1")).as_deref(), Some("default:1"));
        assert_eq!(image(None, None), None);
        let mut container = Container {
            args: Some(vec!["--port".into()]),
            ..Default::default()
        };
        apply_container_override(&mut container, Some(&user)).expect("no ports");
        assert_eq!(container.command, Some(vec!["run".into()]));
        assert_eq!(
            container.ports, None,
            "no user ports leave the ports (and the pod-spec hash) as they were"
        );
        assert_eq!(
            container.args,
            Some(vec!["--port".into()]),
            "empty args keep the generated ones"
        );
    }
}
