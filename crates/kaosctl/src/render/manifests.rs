//! The kaos.tools resources of some manifests, admitted as the API server would admit them
//! (CRD schema, defaults, CEL), and the runtime registry they bring or the default one.

use anyhow::{Context, bail};
use authz_controller::status::{AUTHORIZATION_DISABLED, ENFORCED, FEATURE_DISABLED, READY};
use k8s_openapi::api::core::v1::ConfigMap;
use kaos_api::access::{AccessGrant, ThirdPartyService};
use kaos_api::agent::Agent;
use kaos_api::mcpserver::MCPServer;
use kaos_api::memorystore::MemoryStore;
use kaos_api::modelapi::ModelAPI;
use kaos_api::workflow::{AgentWorkflow, AgentWorkflowRun};
use kaos_schema::{CrdSchema, UnknownFields};
use kube::{Resource, ResourceExt};
use mcpserver_controller::registry::{self, Registry, RegistryError};
use serde_json::Value;

/// The resources of a manifest stream, by kind, in input order.
#[derive(Default)]
pub struct Manifests {
    pub model_apis: Vec<ModelAPI>,
    pub servers: Vec<MCPServer>,
    pub stores: Vec<MemoryStore>,
    pub agents: Vec<Agent>,
    pub workflows: Vec<AgentWorkflow>,
    pub runs: Vec<AgentWorkflowRun>,
    /// The runtime registry's `runtimes.yaml`, when the manifests hold its ConfigMap.
    registry_text: Option<String>,
    /// Resources that create no objects, and why.
    pub notes: Vec<String>,
}

impl Manifests {
    /// Admits every kaos.tools resource of `documents` (an unknown kaos.tools kind is an
    /// error; other objects are left out, but the runtime registry's ConfigMap).
    pub fn read(documents: &[Value]) -> anyhow::Result<Self> {
        let mut m = Manifests::default();
        for document in documents {
            m.add(document)?;
        }
        Ok(m)
    }

    fn add(&mut self, document: &Value) -> anyhow::Result<()> {
        let kind = document.get("kind").and_then(Value::as_str).unwrap_or("");
        let api_version = document
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or("");
        match (api_version, kind) {
            ("kaos.tools/v1alpha1", "ModelAPI") => {
                self.model_apis.push(admit(kind, document.clone())?)
            }
            ("kaos.tools/v1alpha1", "MCPServer") => {
                self.servers.push(admit(kind, document.clone())?)
            }
            ("kaos.tools/v1alpha1", "MemoryStore") => {
                self.stores.push(admit(kind, document.clone())?)
            }
            ("kaos.tools/v1alpha1", "Agent") => self.agents.push(admit(kind, document.clone())?),
            // Status only: the authz controller says they are not enforced.
            ("kaos.tools/v1alpha1", "AccessGrant") => {
                let grant = admit::<AccessGrant>(kind, document.clone())?;
                self.notes
                    .push(no_objects(&grant, ENFORCED, AUTHORIZATION_DISABLED));
            }
            ("kaos.tools/v1alpha1", "ThirdPartyService") => {
                let service = admit::<ThirdPartyService>(kind, document.clone())?;
                self.notes
                    .push(no_objects(&service, READY, FEATURE_DISABLED));
            }
            // Status only: their steps are tasks sent to agents over A2A.
            ("kaos.tools/v1alpha1", "AgentWorkflow") => {
                let workflow = admit::<AgentWorkflow>(kind, document.clone())?;
                self.notes.push(workflow_note(
                    &workflow,
                    "sends its steps to their agents over A2A (for each AgentWorkflowRun, and on its schedule)",
                ));
                self.workflows.push(workflow);
            }
            ("kaos.tools/v1alpha1", "AgentWorkflowRun") => {
                let run = admit::<AgentWorkflowRun>(kind, document.clone())?;
                self.notes.push(workflow_note(
                    &run,
                    "sends the steps of its workflow to their agents over A2A",
                ));
                self.runs.push(run);
            }
            ("v1", "ConfigMap")
                if document.pointer("/metadata/name").and_then(Value::as_str)
                    == Some(registry::CONFIG_MAP) =>
            {
                let config_map: ConfigMap = serde_json::from_value(document.clone())
                    .context("the runtime registry ConfigMap cannot be read")?;
                self.registry_text = config_map.data.and_then(|d| d.get(registry::KEY).cloned());
            }
            ("kaos.tools/v1alpha1", other) => bail!("unknown kaos.tools kind {other:?}"),
            _ => {}
        }
        Ok(())
    }

    /// The runtime registry the manifests hold, or the one the operator ships.
    pub fn registry(&self) -> Result<Registry, RegistryError> {
        let text = self.registry_text.as_deref();
        registry::parse(text.unwrap_or(registry::DEFAULT_RUNTIMES_YAML)).map_err(|message| {
            RegistryError::Invalid {
                namespace: "(manifests)".into(),
                message,
            }
        })
    }
}

fn schema_for(kind: &str) -> Option<CrdSchema> {
    let (_, crd) = kaos_api::crd::all()
        .into_iter()
        .find(|(_, c)| c.spec.names.kind == kind)?;
    CrdSchema::from_crd(&serde_json::to_value(crd).ok()?, "v1alpha1")
}

/// Validates and defaults a custom resource as the API server would, then reads it.
fn admit<K: serde::de::DeserializeOwned>(kind: &str, mut object: Value) -> anyhow::Result<K> {
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if object.pointer("/metadata/namespace").is_none()
        && let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut)
    {
        metadata.insert("namespace".into(), Value::from("default"));
    }
    let schema = schema_for(kind).context("no CRD for this kind")?;
    if let Err(errors) = schema.admit(&mut object, None, UnknownFields::Reject) {
        let texts: Vec<String> = errors.iter().map(ToString::to_string).collect();
        bail!("{kind} {name} is invalid: {}", texts.join("; "));
    }
    serde_json::from_value(object).with_context(|| format!("{kind} {name} cannot be read"))
}

/// Whether `object` is `name` in `namespace`.
pub fn named<K: Resource>(object: &K, namespace: &Option<String>, name: &str) -> bool {
    object.meta().namespace == *namespace && object.meta().name.as_deref() == Some(name)
}

/// The note of a resource that creates no objects: only the status condition its controller
/// writes.
fn no_objects<K: Resource<DynamicType = ()>>(object: &K, condition: &str, reason: &str) -> String {
    format!(
        "{} {}/{}: creates no objects; the authz controller writes its status ({condition}=False, {reason}: kaos-rs does not enforce it)",
        K::kind(&()),
        object.namespace().unwrap_or_default(),
        object.name_any()
    )
}

/// The note of a workflow or a run: the workflow controller only calls agents and writes
/// statuses.
fn workflow_note<K: Resource<DynamicType = ()>>(object: &K, what: &str) -> String {
    format!(
        "{} {}/{}: creates no objects; the workflow controller {what} and writes its status",
        K::kind(&()),
        object.namespace().unwrap_or_default(),
        object.name_any()
    )
}
