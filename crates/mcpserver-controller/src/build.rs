//! MCPServer spec + runtime registry → the children that serve it. Pure: no IO.

use k8s_openapi::api::core::v1::{Container, ContainerPort, PodSpec, Probe, TCPSocketAction};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kaos_api::conditions::{MISSING_REQUIRED_ENV, NO_IMAGE, REGISTRY_UNAVAILABLE, UNKNOWN_RUNTIME};
use kaos_api::mcpserver::{CUSTOM_RUNTIME, MCPServer};
use kaos_workload::build::container::{
    apply_container_override, env, image, log_level, merge_telemetry, python_otel_env,
    with_user_env,
};
use kaos_workload::build::network_policy;
use kaos_workload::build::podspec::workload_pod;
use kaos_workload::build::scaling::ScaledChildren;
use kaos_workload::build::workload::{Workload, owner_of};
use kaos_workload::desired::WorkloadChildren;
use kube::ResourceExt;

use crate::registry::{Registry, RegistryError, RuntimeSpec};
use crate::settings::Settings;
pub use kaos_workload::desired::{Desired, Problem};

pub const PORT: i32 = 8000;
pub const CONTAINER: &str = "mcp-server";
/// Where `spec.params` goes when the runtime names no `paramsEnvVar`.
pub const DEFAULT_PARAMS_VAR: &str = "MCP_PARAMS";
/// Selects every child of every MCPServer (the controller's watch caches).
pub const CHILD_SELECTOR: &str = "app=mcpserver";

pub fn deployment_name(name: &str) -> String {
    format!("mcpserver-{name}")
}

pub fn labels(name: &str) -> std::collections::BTreeMap<String, String> {
    [
        ("app".to_string(), "mcpserver".to_string()),
        ("mcpserver".to_string(), name.to_string()),
    ]
    .into()
}

fn tcp_probe(initial_delay: i32, period: i32, failure: i32) -> Probe {
    Probe {
        tcp_socket: Some(TCPSocketAction {
            port: IntOrString::Int(PORT),
            host: None,
        }),
        initial_delay_seconds: Some(initial_delay),
        period_seconds: Some(period),
        timeout_seconds: Some(3),
        failure_threshold: Some(failure),
        ..Default::default()
    }
}

/// The runtime an MCPServer uses: from the registry, or its own container for `custom`.
fn runtime<'a>(
    s: &MCPServer,
    registry: &'a Result<Registry, RegistryError>,
) -> Result<Option<&'a RuntimeSpec>, Problem> {
    if s.spec.runtime == CUSTOM_RUNTIME {
        return Ok(None);
    }
    let registry = registry
        .as_ref()
        .map_err(|e| Problem::failed(REGISTRY_UNAVAILABLE, e.to_string()))?;
    registry.runtimes.get(&s.spec.runtime).map(Some).ok_or_else(|| {
        let known: Vec<&str> = registry.runtimes.keys().map(String::as_str).collect();
        Problem::failed(
            UNKNOWN_RUNTIME,
            format!(
                "runtime \"{}\" is not in the MCP runtime registry (ConfigMap kaos-mcp-runtimes, key runtimes.yaml); known runtimes: {}, or use \"custom\" with spec.container.image",
                s.spec.runtime,
                known.join(", ")
            ),
        )
    })
}

/// What `s` should have in the cluster, with its runtime from `registry` (the one input an
/// MCPServer reads), or why it can have nothing.
pub fn desired(
    s: &MCPServer,
    registry: &Result<Registry, RegistryError>,
    settings: &Settings,
) -> Result<Desired, Problem> {
    let name = s.name_any();
    let namespace = s.namespace().unwrap_or_else(|| "default".into());
    let runtime = runtime(s, registry)?;
    let user = s.spec.workload.container.as_ref();
    let image = image(user, runtime.and_then(|r| r.image.as_deref())).ok_or_else(|| match runtime {
        None => Problem::failed(NO_IMAGE, "runtime custom requires spec.container.image".into()),
        Some(_) => Problem::failed(
            NO_IMAGE,
            format!("runtime \"{}\" has no image in the registry: set spec.container.image or fix the registry", s.spec.runtime),
        ),
    })?;
    let mut generated = Vec::new();
    if let Some(params) = s.spec.params.as_deref() {
        // A runtime that names no variable (the `kubernetes` runtime, `custom` images) gets
        // the params in MCP_PARAMS, as KAOS documents: never dropped silently.
        let var = runtime
            .and_then(|r| r.params_env_var.as_deref())
            .unwrap_or(DEFAULT_PARAMS_VAR);
        generated.push(env(var, params));
    }
    let user_at = generated.len();
    let telemetry = merge_telemetry(s.spec.telemetry.as_ref(), &settings.data_plane);
    generated.extend(python_otel_env(&name, &namespace, telemetry.as_ref()));
    generated.push(env("LOG_LEVEL", log_level(&settings.data_plane)));
    let user_env = user.map(|c| c.env.as_slice()).unwrap_or_default();
    let mut container = Container {
        name: CONTAINER.into(),
        image: Some(image),
        command: runtime.map(|r| r.command.clone()).filter(|c| !c.is_empty()),
        args: runtime.map(|r| r.args.clone()).filter(|a| !a.is_empty()),
        ports: Some(vec![ContainerPort {
            container_port: PORT,
            name: Some("http".into()),
            protocol: Some("TCP".into()),
            ..Default::default()
        }]),
        env: Some(with_user_env(generated, user_env, user_at)),
        liveness_probe: Some(tcp_probe(20, 10, 3)),
        readiness_probe: Some(tcp_probe(15, 5, 2)),
        ..Default::default()
    };
    apply_container_override(&mut container, user)?;
    let service_account = s
        .spec
        .service_account_name
        .clone()
        .filter(|n| !n.is_empty());
    // A server given a ServiceAccount (the `kubernetes` runtime) calls the API with its token;
    // others get none.
    let token = service_account.is_some();
    let generated_pod = PodSpec {
        containers: vec![container],
        service_account_name: service_account,
        ..Default::default()
    };
    let level = settings.data_plane.pod_security;
    let pod = workload_pod(
        generated_pod,
        level,
        token,
        s.spec.workload.pod_spec.as_deref(),
    )?;
    if let Some(runtime) = runtime {
        let present: Vec<&str> = pod
            .containers
            .iter()
            .find(|c| c.name == CONTAINER)
            .and_then(|c| c.env.as_ref())
            .map(|e| e.iter().map(|v| v.name.as_str()).collect())
            .unwrap_or_default();
        let missing: Vec<&str> = runtime
            .required_env
            .iter()
            .map(String::as_str)
            .filter(|v| !present.contains(v))
            .collect();
        if !missing.is_empty() {
            return Err(Problem::failed(
                MISSING_REQUIRED_ENV,
                format!(
                    "runtime \"{}\" requires the environment variables {}: set them in spec.container.env (from a Secret)",
                    s.spec.runtime,
                    missing.join(", ")
                ),
            ));
        }
    }
    let workload = Workload {
        name: deployment_name(&name),
        namespace,
        labels: labels(&name),
        owner: owner_of(s),
        port: PORT,
    };
    workload.check_name(&name)?;
    let timeout = s.spec.workload.route_timeout();
    let scaled = ScaledChildren::of(&workload, &s.spec.scaling);
    let policies = &settings.data_plane.network_policy;
    let network_policy = policies.applies_to(&workload.namespace).then(|| {
        // Every port the server's containers open (a custom image may serve on others).
        let ports: Vec<i32> = pod
            .containers
            .iter()
            .flat_map(|c| c.ports.iter().flatten())
            .map(|p| p.container_port)
            .collect();
        network_policy::mcp_server_policy(&workload, &ports, &s.spec.runtime, policies)
    });
    Ok(Desired::of(
        WorkloadChildren::plain(
            workload.deployment(pod, scaled.replicas.in_spec()),
            Some(workload.service()),
            workload.http_route(
                "mcp",
                &name,
                timeout,
                &settings.gateway_default_timeout,
                &settings.gateway,
            ),
        )
        .scaled(scaled)
        .fenced(network_policy),
        Some(workload.endpoint()),
    ))
}
