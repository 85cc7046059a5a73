//! What every workload kind (Agent, ModelAPI, MCPServer, MemoryStore) sets of its pods, its
//! route and its identity: `spec.container`, `spec.podSpec`, `spec.gatewayRoute` and
//! `spec.security`, flattened into each spec.

use k8s_openapi::api::core::v1::PodSpec;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{ContainerOverride, GatewayRoute, Security};

/// The pod, route and identity settings of a workload kind. Flattened: the fields stand in
/// `spec` itself, as in KAOS.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadSpec {
    /// Overrides of the generated container (each kind's schema names it, see
    /// [`describe_workload_fields`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<ContainerOverride>,
    /// A pod spec merged over the generated one with strategic-merge semantics.
    // Boxed: inline, a PodSpec is 1.4 KiB of every cached object, set or not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_spec: Option<Box<PodSpec>>,
    /// Gateway API route settings, used only when the operator runs with
    /// `GATEWAY_API_ENABLED=true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway_route: Option<GatewayRoute>,
    /// A stable identity (each kind's schema names it, see [`describe_workload_fields`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security: Option<Security>,
}

impl WorkloadSpec {
    /// The user's `container.env`.
    pub fn user_env(&self) -> &[k8s_openapi::api::core::v1::EnvVar] {
        self.container.as_ref().map_or(&[], |c| c.env.as_slice())
    }

    /// The user's `gatewayRoute.timeout`.
    pub fn route_timeout(&self) -> Option<&str> {
        self.gateway_route.as_ref()?.timeout.as_deref()
    }
}

/// Names the kind in the schema's descriptions of the flattened [`WorkloadSpec`] fields: what
/// `container` overrides (`container`: its description) and the identity `security.id` gives
/// (`kind`: `agent`, `modelapi`, …).
pub(crate) fn describe_workload_fields(schema: &mut schemars::Schema, container: &str, kind: &str) {
    let identity = format!(
        "A stable identity, `kaos://{kind}/<id>`, in place of `kaos://{kind}/<namespace>/<name>`."
    );
    describe_fields(schema, &[("container", container), ("security", &identity)]);
}

/// Sets the description of each named property of an object schema: for a kind's own words
/// on a field it shares with others through a flattened type.
pub(crate) fn describe_fields(schema: &mut schemars::Schema, fields: &[(&str, &str)]) {
    let Some(properties) = schema
        .get_mut("properties")
        .and_then(serde_json::Value::as_object_mut)
    else {
        return;
    };
    for (field, description) in fields {
        if let Some(property) = properties.get_mut(*field).and_then(|p| p.as_object_mut()) {
            property.insert("description".into(), (*description).into());
        }
    }
}
