//! One reconcile: the desired state (unless another ModelAPI holds its `security.id`),
//! converged, then the status.

use std::sync::Arc;

use kaos_api::modelapi::ModelAPI;
use kaos_runtime::error::ReconcileError;
use kaos_workload::reconcile::{Core, Reconciles};
use kaos_workload::trigger::claims::{SharedSecurityIds, build_unless_claimed};
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::reflector::Store;

use crate::agent_budgets::{AgentOfModelApi, budgeted_agents};
use crate::build::{deployment_name, desired};
use crate::settings::Settings;
use crate::status::status;

pub const FINALIZER: &str = "kaos.tools/modelapi-finalizer";

pub struct Context {
    pub core: Core,
    pub settings: Settings,
    /// Who holds each `security.id` of ModelAPIs.
    pub ids: SharedSecurityIds,
    /// The Agents of the namespace, as far as their budgets go.
    pub agents: Store<AgentOfModelApi>,
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
        let status =
            |conflict, deployment: Option<&_>, now| status(&m, &result, conflict, deployment, now);
        self.core
            .converge_built(&*m, &result, &deployment_name(&m.name_any()), status)
            .await
    }
}

/// The phase of a ModelAPI, for `kaos_resources`.
pub fn phase_of(m: &ModelAPI) -> Option<&'static str> {
    m.status.as_ref().and_then(|s| s.phase).map(|p| p.as_str())
}
