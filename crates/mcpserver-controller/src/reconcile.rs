//! One reconcile: read the registry, the desired state (unless another MCPServer holds its
//! `security.id`), converged, then the status; then the MCP check of a rollout not checked yet.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kaos_api::mcpserver::MCPServer;
use kaos_runtime::error::ReconcileError;
use kaos_workload::cache::cached;
use kaos_workload::reconcile::{Core, Reconciles};
use kaos_workload::trigger::claims::{SharedSecurityIds, build_unless_claimed};
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::reflector::Store;

use crate::build::{deployment_name, desired};
use crate::registry;
use crate::settings::Settings;
use crate::status::status;
use crate::verification::{Next, Rollout, Verifications};

pub const FINALIZER: &str = "kaos.tools/mcpserver-finalizer";

pub struct Context {
    pub core: Core,
    pub settings: Settings,
    /// The registry ConfigMap, watched so that editing a runtime rolls its MCPServers.
    pub registry: Store<ConfigMap>,
    /// Who holds each `security.id` of MCPServers.
    pub ids: SharedSecurityIds,
    /// The MCP checks of the servers' rollouts, shared by every namespace.
    pub verifications: Verifications,
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
        let checked = self.verifications.recorded(&key);
        let mut available = None;
        let status = |conflict, deployment: Option<&_>, now| {
            let status = status(&s, &result, conflict, deployment, checked.as_ref(), now);
            available = Rollout::available(&status, deployment);
            status
        };
        let action = self
            .core
            .converge_built(&*s, &result, &deployment_name(&s.name_any()), status)
            .await?;
        if !self.settings.protocol_checks {
            return Ok(action);
        }
        Ok(
            match self.verifications.check_if_due(&key, available).await {
                Next::Nothing => action,
                // The next reconcile writes what the check found.
                Next::Checked => Action::requeue(Duration::from_millis(10)),
                Next::RetryIn(wait) => Action::requeue(wait),
            },
        )
    }

    async fn finalize(&self, s: &MCPServer) {
        let key = format!("{}/{}", s.namespace().unwrap_or_default(), s.name_any());
        self.verifications.forget(&key);
    }
}

pub fn phase_of(s: &MCPServer) -> Option<&'static str> {
    s.status
        .as_ref()
        .and_then(|s| s.workload.phase)
        .map(|p| p.as_str())
}
