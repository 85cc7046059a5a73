//! One reconcile: the desired state (waiting while a ModelAPI it names is missing or not
//! ready, unless another MemoryStore holds its `security.id`), converged, then the status.

use std::sync::Arc;

use kaos_api::memorystore::MemoryStore;
use kaos_api::modelapi::ModelAPI;
use kaos_runtime::error::ReconcileError;
use kaos_workload::cache::cached;
use kaos_workload::reconcile::{Core, Reconciles};
use kaos_workload::trigger::claims::{SharedSecurityIds, build_unless_claimed};
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::reflector::Store;

use crate::build::{deployment_name, desired};
use crate::settings::Settings;
use crate::status::status;

pub struct Context {
    pub core: Core,
    pub settings: Settings,
    /// The ModelAPIs the stores name (woken by the relation index when one changes).
    pub model_apis: Store<ModelAPI>,
    /// Who holds each `security.id` of MemoryStores.
    pub ids: SharedSecurityIds,
}

impl Reconciles<MemoryStore> for Context {
    fn core(&self) -> &Core {
        &self.core
    }

    async fn apply(&self, s: Arc<MemoryStore>) -> Result<Action, ReconcileError> {
        let namespace = s.namespace().unwrap_or_default();
        // While a ModelAPI it names is missing or not ready nothing is written but the status:
        // the ModelAPI's change wakes the store.
        let result = build_unless_claimed(&self.ids, s.as_ref(), || {
            let model_api = |name: &str| cached(&self.model_apis, &namespace, name);
            desired(&s, model_api, &self.settings)
        });
        let status =
            |conflict, deployment: Option<&_>, now| status(&s, &result, conflict, deployment, now);
        self.core
            .converge_built(&*s, &result, &deployment_name(&s.name_any()), status)
            .await
    }
}

/// The phase of a MemoryStore, for `kaos_resources`.
pub fn phase_of(s: &MemoryStore) -> Option<&'static str> {
    s.status.as_ref().and_then(|s| s.phase).map(|p| p.as_str())
}
