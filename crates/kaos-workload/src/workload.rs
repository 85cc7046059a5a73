//! Pure builders of the children all three kinds share: the Deployment around a pod spec, the
//! ClusterIP Service, the Gateway API HTTPRoute, and the rules for user environment variables,
//! container overrides and telemetry defaults (`docs/contract.md` §1–§2).

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EnvVar, HTTPGetAction, PodSpec, PodTemplateSpec, Probe, Service,
    ServicePort, ServiceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kaos_api::common::{ContainerOverride, Telemetry};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::json;

use crate::podspec::stable_hash;
use crate::settings::{DataPlaneArgs, GatewayArgs};

/// Annotation on the pod template: the hash of the final pod spec. A changed hash is what rolls
/// the Deployment.
pub const POD_SPEC_HASH_ANNOTATION: &str = "kaos.tools/pod-spec-hash";

/// The identity of one workload: its children's name, namespace, labels, owner and port.
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    /// Name of the Deployment and the Service, e.g. `agent-<name>`.
    pub name: String,
    pub namespace: String,
    /// Labels of every child; also the Service and Deployment selector.
    pub labels: BTreeMap<String, String>,
    pub owner: OwnerReference,
    pub port: i32,
}

impl Workload {
    fn metadata(&self, name: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(self.namespace.clone()),
            labels: Some(self.labels.clone()),
            owner_references: Some(vec![self.owner.clone()]),
            ..ObjectMeta::default()
        }
    }

    /// `http://<service>.<ns>.svc.cluster.local:<port>`: a base URL, with no path.
    pub fn endpoint(&self) -> String {
        format!(
            "http://{}.{}.svc.cluster.local:{}",
            self.name, self.namespace, self.port
        )
    }

    /// A ClusterIP Service with one port named `http`, port = targetPort = the container port.
    pub fn service(&self) -> Service {
        Service {
            metadata: self.metadata(&self.name),
            spec: Some(ServiceSpec {
                type_: Some("ClusterIP".into()),
                selector: Some(self.labels.clone()),
                ports: Some(vec![ServicePort {
                    name: Some("http".into()),
                    port: self.port,
                    target_port: Some(IntOrString::Int(self.port)),
                    protocol: Some("TCP".into()),
                    ..ServicePort::default()
                }]),
                ..ServiceSpec::default()
            }),
            status: None,
        }
    }

    /// The Deployment running `pod_spec` (already merged with the user's podSpec). `replicas`
    /// None leaves the field out, so the API server's default (1) applies at creation and an
    /// HPA or `kubectl scale` owns it afterwards.
    pub fn deployment(&self, pod_spec: PodSpec, replicas: Option<i32>) -> Deployment {
        let hash = stable_hash(&pod_spec);
        Deployment {
            metadata: self.metadata(&self.name),
            spec: Some(DeploymentSpec {
                replicas,
                selector: LabelSelector {
                    match_labels: Some(self.labels.clone()),
                    ..LabelSelector::default()
                },
                template: PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(self.labels.clone()),
                        annotations: Some([(POD_SPEC_HASH_ANNOTATION.to_string(), hash)].into()),
                        ..ObjectMeta::default()
                    }),
                    spec: Some(pod_spec),
                },
                ..DeploymentSpec::default()
            }),
            status: None,
        }
    }

    /// The HTTPRoute `<prefix>-<name>` routing `/<ns>/<prefix>/<name>` to the Service, or None
    /// when the gateway is disabled. `timeout` is the resource's `gatewayRoute.timeout`, else
    /// `default_timeout`; `0s` sets none.
    pub fn http_route(
        &self,
        prefix: &str,
        resource_name: &str,
        timeout: Option<&str>,
        default_timeout: &str,
        gateway: &GatewayArgs,
    ) -> Option<DynamicObject> {
        if !gateway.gateway_api_enabled {
            return None;
        }
        let name = format!("{prefix}-{resource_name}");
        let mut parent = json!({"name": gateway.gateway_name.as_deref().unwrap_or("kaos-gateway")});
        if let Some(namespace) = &gateway.gateway_namespace {
            parent["namespace"] = json!(namespace);
        }
        let mut rule = json!({
            "matches": [{"path": {"type": "PathPrefix", "value": format!("/{}/{prefix}/{resource_name}", self.namespace)}}],
            "filters": [{"type": "URLRewrite", "urlRewrite": {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}}}],
            "backendRefs": [{"name": self.name, "port": self.port}],
        });
        let timeout = timeout.unwrap_or(default_timeout);
        if timeout != "0s" && !timeout.is_empty() {
            rule["timeouts"] = json!({"request": timeout});
        }
        let mut route = DynamicObject::new(&name, &http_route_resource()).within(&self.namespace);
        route.metadata = self.metadata(&name);
        route.data = json!({"spec": {"parentRefs": [parent], "rules": [rule]}});
        Some(route)
    }
}

/// A label selector as a string (`app=agent,agent=a`), as the scale subresource reports it.
pub fn selector_string(labels: &BTreeMap<String, String>) -> String {
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The controller reference a child carries to its custom resource (garbage collection deletes
/// the child with it). Works on objects not yet stored (empty uid), for `kaosctl render`.
pub fn owner_of<K: kube::Resource<DynamicType = ()>>(object: &K) -> OwnerReference {
    OwnerReference {
        api_version: K::api_version(&()).to_string(),
        kind: K::kind(&()).to_string(),
        name: object.meta().name.clone().unwrap_or_default(),
        uid: object.meta().uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// `gateway.networking.k8s.io/v1` HTTPRoute.
pub fn http_route_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        "gateway.networking.k8s.io",
        "v1",
        "HTTPRoute",
    ))
}

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
/// number (the Service and the probes use it): the error says so.
pub fn apply_container_override(
    container: &mut Container,
    user: Option<&ContainerOverride>,
) -> Result<(), String> {
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
                return Err(format!(
                    "spec.container.ports: port {} must be {}: the Service and the probes use it",
                    port.name.as_deref().unwrap_or("http"),
                    generated.container_port
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
        env("OTEL_PYTHON_FASTAPI_EXCLUDED_URLS", "/health,/ready"),
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

    fn workload() -> Workload {
        Workload {
            name: "agent-a".into(),
            namespace: "team".into(),
            labels: [
                ("app".to_string(), "agent".to_string()),
                ("agent".into(), "a".into()),
            ]
            .into(),
            owner: OwnerReference {
                name: "a".into(),
                uid: "u".into(),
                controller: Some(true),
                ..Default::default()
            },
            port: 8000,
        }
    }

    #[test]
    fn service_and_endpoint() {
        let w = workload();
        assert_eq!(w.endpoint(), "http://agent-a.team.svc.cluster.local:8000");
        let service = serde_json::to_value(w.service()).expect("json");
        assert_eq!(service["spec"]["type"], "ClusterIP");
        assert_eq!(
            service["spec"]["selector"],
            json!({"app": "agent", "agent": "a"})
        );
        assert_eq!(
            service["spec"]["ports"],
            json!([{"name": "http", "port": 8000, "targetPort": 8000, "protocol": "TCP"}])
        );
        assert_eq!(service["metadata"]["ownerReferences"][0]["uid"], "u");
    }

    #[test]
    fn deployment_carries_the_pod_spec_hash_and_leaves_replicas_unset() {
        let w = workload();
        let spec = PodSpec {
            containers: vec![Container {
                name: "agent".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let d = serde_json::to_value(w.deployment(spec.clone(), None)).expect("json");
        assert!(d["spec"].get("replicas").is_none());
        assert_eq!(
            d["spec"]["template"]["metadata"]["annotations"][POD_SPEC_HASH_ANNOTATION],
            stable_hash(&spec)
        );
        assert_eq!(
            d["spec"]["selector"]["matchLabels"],
            json!({"app": "agent", "agent": "a"})
        );
        let d = serde_json::to_value(w.deployment(spec, Some(3))).expect("json");
        assert_eq!(d["spec"]["replicas"], 3);
    }

    #[test]
    fn http_route_follows_the_contract() {
        let w = workload();
        let gateway = GatewayArgs {
            gateway_api_enabled: true,
            gateway_name: Some("gw".into()),
            gateway_namespace: Some("infra".into()),
        };
        let route = w
            .http_route("agent", "a", None, "120s", &gateway)
            .expect("enabled");
        let value = serde_json::to_value(&route).expect("json");
        assert_eq!(value["apiVersion"], "gateway.networking.k8s.io/v1");
        assert_eq!(value["kind"], "HTTPRoute");
        assert_eq!(value["metadata"]["name"], "agent-a");
        assert_eq!(
            value["spec"],
            json!({
                "parentRefs": [{"name": "gw", "namespace": "infra"}],
                "rules": [{
                    "matches": [{"path": {"type": "PathPrefix", "value": "/team/agent/a"}}],
                    "filters": [{"type": "URLRewrite", "urlRewrite": {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}}}],
                    "backendRefs": [{"name": "agent-a", "port": 8000}],
                    "timeouts": {"request": "120s"}
                }]
            })
        );
        let custom = w
            .http_route("agent", "a", Some("30s"), "120s", &gateway)
            .expect("enabled");
        assert_eq!(
            custom.data["spec"]["rules"][0]["timeouts"]["request"],
            "30s"
        );
        let none = w
            .http_route("agent", "a", Some("0s"), "120s", &gateway)
            .expect("enabled");
        assert!(
            none.data["spec"]["rules"][0].get("timeouts").is_none(),
            "0s sets no timeout"
        );
        assert!(
            w.http_route("agent", "a", None, "120s", &GatewayArgs::default())
                .is_none()
        );
    }

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
