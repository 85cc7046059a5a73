//! The identity of one workload (its children's name, labels, owner and port) and the pure
//! builders of the children every workload kind shares: the Deployment around a pod spec, the
//! ClusterIP Service and the Gateway API HTTPRoute (`docs/contract.md` §1–§2).

use kaos_api::conditions::INVALID_NAME;
use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{PodSpec, PodTemplateSpec, Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::core::DynamicObject;
use serde_json::json;

use crate::build::gateway::{GatewayArgs, http_route_resource};
use crate::desired::Problem;
use crate::hash::stable_hash;

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
    /// Whether the children can carry this name: a Service name must be a DNS-1035 label (at most
    /// 63 lowercase letters, digits and '-', starting with a letter). Admission refuses a
    /// resource name that breaks this (kaos-api's `child_name_rule`); this catches one admitted
    /// before that rule, which would otherwise run a Deployment whose Service the API server
    /// refuses.
    pub fn check_name(&self, resource: &str) -> Result<(), Problem> {
        let name = self.name.as_str();
        let label = name.len() <= 63
            && name.starts_with(|c: char| c.is_ascii_lowercase())
            && name.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if label {
            return Ok(());
        }
        Err(Problem::failed(
            INVALID_NAME,
            format!(
                "metadata.name {resource:?} cannot name a Service: {name:?} must be a DNS-1035 label (at most 63 lowercase letters, digits and '-'); recreate the resource under a name without '.'"
            ),
        ))
    }

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

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Container;

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
    fn a_name_that_cannot_name_a_service_is_refused() {
        let named = |name: &str| Workload {
            name: name.into(),
            ..workload()
        };
        assert_eq!(named("agent-a").check_name("a"), Ok(()));
        assert_eq!(
            named(&format!("agent-{}", "a".repeat(57))).check_name("x"),
            Ok(())
        );
        for bad in [
            "agent-team.alpha".to_string(),
            format!("agent-{}", "a".repeat(58)),
            "agent-A".into(),
            "agent-a-".into(),
            "9agent".into(),
        ] {
            let err = named(&bad).check_name("team.alpha").expect_err(&bad);
            assert_eq!(err.reason, "InvalidName");
            assert!(err.message.contains(&format!("{bad:?}")), "{}", err.message);
        }
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
}
