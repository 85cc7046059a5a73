//! One reconcile: the desired state (unless another ModelAPI holds its `security.id`),
//! converged, then the status; then the model check of a rollout not checked yet started (its
//! outcome wakes the next reconcile, which shows it).

use std::sync::Arc;

use kaos_api::modelapi::ModelAPI;
use kaos_runtime::error::ReconcileError;
use kaos_workload::reconcile::{Core, Reconciles};
use kaos_workload::trigger::claims::{SharedSecurityIds, build_unless_claimed};
use kaos_workload::verification::rollout::Rollout;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use tokio::sync::mpsc::UnboundedSender;

use crate::agent_budgets::{AgentOfModelApi, budgeted_agents};
use crate::build::{deployment_name, desired};
use crate::models::Expected;
use crate::settings::Settings;
use crate::status::status;
use crate::verification::Verifier;

pub const FINALIZER: &str = "kaos.tools/modelapi-finalizer";

pub struct Context {
    pub core: Core,
    pub settings: Settings,
    /// Who holds each `security.id` of ModelAPIs.
    pub ids: SharedSecurityIds,
    /// The Agents of the namespace, as far as their budgets go.
    pub agents: Store<AgentOfModelApi>,
    /// The model checks of the ModelAPIs' rollouts, shared by every namespace.
    pub verifier: Verifier,
    /// Reconciles a ModelAPI of this namespace (when its check ends).
    pub wake: UnboundedSender<ObjectRef<ModelAPI>>,
}

impl Reconciles<ModelAPI> for Context {
    fn core(&self) -> &Core {
        &self.core
    }

    async fn apply(&self, m: Arc<ModelAPI>) -> Result<Action, ReconcileError> {
        let agents = budgeted_agents(&self.agents, &m);
        let result = build_unless_claimed(&self.ids, m.as_ref(), || {
            desired(&m, &self.settings, &agents)
        });
        let key = key_of(&m);
        let checked = self.verifier.checks.recorded(&key);
        let mut available = None;
        let status = |conflict, deployment: Option<&_>, now| {
            let status = status(&m, &result, conflict, deployment, checked.as_ref(), now);
            available = Rollout::available(status.ready, status.endpoint.as_deref(), deployment);
            status
        };
        let deployment = deployment_name(&m.name_any());
        let action = self
            .core
            .converge_built(&*m, &result, &deployment, status)
            .await?;
        let namespace = m.namespace().unwrap_or_default();
        // Right after this reconcile rolled the Deployment, the cache still shows the last one.
        if let Ok(desired) = &result
            && self.settings.protocol.protocol_checks
            && self.core.children.deployment_shown(&namespace, &deployment)
        {
            let (wake, object) = (self.wake.clone(), ObjectRef::from_obj(&*m));
            let expected = || Expected::of(&m, desired);
            self.verifier
                .check_if_due(&key, available, expected, move || {
                    let _ = wake.send(object.clone());
                });
        }
        Ok(action)
    }

    async fn finalize(&self, m: &ModelAPI) {
        self.verifier.checks.forget(&key_of(m));
    }
}

/// The key of a ModelAPI's check records: `namespace/name`.
fn key_of(m: &ModelAPI) -> String {
    format!("{}/{}", m.namespace().unwrap_or_default(), m.name_any())
}

/// The phase of a ModelAPI, for `kaos_resources`.
pub fn phase_of(m: &ModelAPI) -> Option<&'static str> {
    m.status.as_ref().and_then(|s| s.phase).map(|p| p.as_str())
}
