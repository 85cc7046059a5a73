//! One reconcile: read the registry, the desired state (unless another MCPServer holds its
//! `security.id`), converged, then the status; then the MCP check of a rollout not checked yet
//! started (its outcome wakes the next reconcile, which shows it).

use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use kaos_api::mcpserver::MCPServer;
use kaos_runtime::error::ReconcileError;
use kaos_workload::cache::cached;
use kaos_workload::reconcile::{Core, Reconciles};
use kaos_workload::trigger::claims::{SharedSecurityIds, build_unless_claimed};
use kaos_workload::verification::rollout::Rollout;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use tokio::sync::mpsc::UnboundedSender;

use crate::build::{deployment_name, desired};
use crate::registry;
use crate::settings::Settings;
use crate::status::status;
use crate::verification::Verifier;

pub const FINALIZER: &str = "kaos.tools/mcpserver-finalizer";

pub struct Context {
    pub core: Core,
    pub settings: Settings,
    /// The registry ConfigMap, watched so that editing a runtime rolls its MCPServers.
    pub registry: Store<ConfigMap>,
    /// Who holds each `security.id` of MCPServers.
    pub ids: SharedSecurityIds,
    /// The MCP checks of the servers' rollouts, shared by every namespace.
    pub verifier: Verifier,
    /// Reconciles a server of this namespace (when its check ends).
    pub wake: UnboundedSender<ObjectRef<MCPServer>>,
}

impl Reconciles<MCPServer> for Context {
    fn core(&self) -> &Core {
        &self.core
    }

    async fn apply(&self, s: Arc<MCPServer>) -> Result<Action, ReconcileError> {
        let system_namespace = &self.settings.system_namespace;
        let registry_map = cached(&self.registry, system_namespace, registry::CONFIG_MAP);
        let registry = registry::from_config_map(registry_map.as_deref(), system_namespace);
        let result = build_unless_claimed(&self.ids, s.as_ref(), || {
            desired(&s, &registry, &self.settings)
        });
        let key = format!("{}/{}", s.namespace().unwrap_or_default(), s.name_any());
        let checked = self.verifier.checks.recorded(&key);
        let mut available = None;
        let status = |conflict, deployment: Option<&_>, now| {
            let status = status(&s, &result, conflict, deployment, checked.as_ref(), now);
            let workload = &status.workload;
            available =
                Rollout::available(workload.ready, workload.endpoint.as_deref(), deployment);
            status
        };
        let deployment = deployment_name(&s.name_any());
        let action = self
            .core
            .converge_built(&*s, &result, &deployment, status)
            .await?;
        let namespace = s.namespace().unwrap_or_default();
        // Right after this reconcile rolled the Deployment, the cache still shows the last one.
        if self.settings.protocol.protocol_checks
            && self.core.children.deployment_shown(&namespace, &deployment)
        {
            let (wake, object) = (self.wake.clone(), ObjectRef::from_obj(&*s));
            self.verifier.check_if_due(&key, available, move || {
                let _ = wake.send(object.clone());
            });
        }
        Ok(action)
    }

    async fn finalize(&self, s: &MCPServer) {
        let key = format!("{}/{}", s.namespace().unwrap_or_default(), s.name_any());
        self.verifier.checks.forget(&key);
    }
}

pub fn phase_of(s: &MCPServer) -> Option<&'static str> {
    s.status
        .as_ref()
        .and_then(|s| s.workload.phase)
        .map(|p| p.as_str())
}
