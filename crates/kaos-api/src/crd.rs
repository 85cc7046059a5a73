//! CustomResourceDefinitions of the kinds, as installed in clusters.
//!
//! The embedded Kubernetes types (PodSpec, EnvVar, ResourceRequirements, key selectors,
//! conditions) keep their full validation schema but lose their upstream descriptions: with them
//! a CRD is several hundred KiB, too large for the `last-applied-configuration` annotation that a
//! plain `kubectl apply` writes (256 KiB). `kubectl explain` still documents our own fields.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use serde_json::Value;

use crate::access::{AccessGrant, ThirdPartyService};
use crate::agent::{self, Agent};
use crate::mcpserver::{self, MCPServer};
use crate::memorystore::{self, MemoryStore};
use crate::modelapi::{self, ModelAPI};
use crate::workflow::{AgentWorkflow, AgentWorkflowRun};

/// Properties whose schemas come from Kubernetes' own types; descriptions below them are dropped.
pub const EMBEDDED_KUBERNETES_TYPES: &[&str] = &[
    "podSpec",
    "resources",
    "env",
    "ports",
    "secretKeyRef",
    "configMapKeyRef",
    "fromSecretKeyRef",
    "conditions",
];

/// The CRDs in install order, each with the file name it is published under in `deploy/crds/`.
pub fn all() -> Vec<(&'static str, CustomResourceDefinition)> {
    vec![
        (
            "kaos.tools_agents.yaml",
            compact(Agent::crd(), agent::object_rules()),
        ),
        (
            "kaos.tools_modelapis.yaml",
            compact(ModelAPI::crd(), modelapi::object_rules()),
        ),
        (
            "kaos.tools_mcpservers.yaml",
            compact(MCPServer::crd(), mcpserver::object_rules()),
        ),
        (
            "kaos.tools_memorystores.yaml",
            compact(MemoryStore::crd(), memorystore::object_rules()),
        ),
        (
            "kaos.tools_accessgrants.yaml",
            compact(AccessGrant::crd(), serde_json::json!([])),
        ),
        (
            "kaos.tools_thirdpartyservices.yaml",
            compact(ThirdPartyService::crd(), serde_json::json!([])),
        ),
        (
            "kaos.tools_agentworkflows.yaml",
            compact(AgentWorkflow::crd(), serde_json::json!([])),
        ),
        (
            "kaos.tools_agentworkflowruns.yaml",
            compact(AgentWorkflowRun::crd(), serde_json::json!([])),
        ),
    ]
}

/// A CRD as the YAML document committed in `deploy/crds/` and printed by `crdgen`.
pub fn to_yaml(crd: &CustomResourceDefinition) -> Result<String, serde_saphyr::ser::Error> {
    serde_saphyr::to_string(crd)
}

/// A CRD as a template of the kaos-crds chart: annotated `helm.sh/resource-policy: keep` (so
/// `helm uninstall` keeps it), and with every `{{` of its text (a description that shows a
/// template, such as a workflow step's `{{ input }}`) written so that Helm renders it as it is
/// instead of reading an action there.
pub fn to_helm_template(
    crd: &CustomResourceDefinition,
) -> Result<String, serde_saphyr::ser::Error> {
    let mut crd = crd.clone();
    crd.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert("helm.sh/resource-policy".into(), "keep".into());
    Ok(escape_helm_actions(&to_yaml(&crd)?))
}

/// `text` with each `{{` replaced by a Go template action that prints `{{` (a raw string), so
/// Helm renders `text` unchanged.
pub fn escape_helm_actions(text: &str) -> String {
    text.replace("{{", "{{`{{`}}")
}

/// All CRDs as one multi-document YAML stream.
pub fn all_yaml() -> Result<String, serde_saphyr::ser::Error> {
    let mut out = String::new();
    for (_, crd) in all() {
        out.push_str("---\n");
        out.push_str(&to_yaml(&crd)?);
    }
    Ok(out)
}

/// The derived CRD without the embedded types' descriptions and with the kind's rules on the
/// whole object (which the derive cannot attach: they read `metadata.name`).
fn compact(crd: CustomResourceDefinition, object_rules: Value) -> CustomResourceDefinition {
    let mut value = serde_json::to_value(&crd).expect("a CRD always serializes to JSON");
    if let Some(versions) = value
        .pointer_mut("/spec/versions")
        .and_then(Value::as_array_mut)
    {
        for version in versions {
            if let Some(schema) = version.pointer_mut("/schema/openAPIV3Schema") {
                drop_embedded_descriptions(schema, false);
                if object_rules
                    .as_array()
                    .is_some_and(|rules| !rules.is_empty())
                {
                    schema["x-kubernetes-validations"] = object_rules.clone();
                }
            }
        }
    }
    serde_json::from_value(value).expect("removing descriptions keeps a valid CRD")
}

/// Walks a schema; below a property listed in [`EMBEDDED_KUBERNETES_TYPES`] removes descriptions
/// (the property keeps its own description, which is ours).
fn drop_embedded_descriptions(schema: &mut Value, embedded: bool) {
    let Some(node) = schema.as_object_mut() else {
        return;
    };
    if embedded {
        node.remove("description");
    }
    if let Some(Value::Object(properties)) = node.get_mut("properties") {
        for (name, child) in properties.iter_mut() {
            if embedded {
                drop_embedded_descriptions(child, true);
            } else if EMBEDDED_KUBERNETES_TYPES.contains(&name.as_str()) {
                for_each_subschema(child, |grandchild| {
                    drop_embedded_descriptions(grandchild, true)
                });
            } else {
                drop_embedded_descriptions(child, false);
            }
        }
    }
    for_each_subschema_except_properties(node, |child| drop_embedded_descriptions(child, embedded));
}

/// Calls `f` on every direct subschema of `schema`: properties, items, additionalProperties, *Of.
fn for_each_subschema(schema: &mut Value, mut f: impl FnMut(&mut Value)) {
    let Some(node) = schema.as_object_mut() else {
        return;
    };
    if let Some(Value::Object(properties)) = node.get_mut("properties") {
        properties.values_mut().for_each(&mut f);
    }
    for_each_subschema_except_properties(node, f);
}

fn for_each_subschema_except_properties(
    node: &mut serde_json::Map<String, Value>,
    mut f: impl FnMut(&mut Value),
) {
    for key in ["items", "additionalProperties"] {
        if let Some(child) = node.get_mut(key) {
            f(child);
        }
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(Value::Array(children)) = node.get_mut(key) {
            children.iter_mut().for_each(&mut f);
        }
    }
}
