//! One reconcile: resolve the ModelAPIs (wait while they are missing or not ready), build,
//! converge, status.

use std::sync::Arc;

use kaos_api::memorystore::MemoryStore;
use kaos_api::modelapi::ModelAPI;
use kaos_runtime::error::ReconcileError;
use kaos_workload::identity::{SharedSecurityIds, conflict_of};
use kaos_workload::reconciler::{Core, Reconciles, status_digest};
use kaos_workload::stores::cached;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::reflector::Store;

use crate::build::{self, BuildError, Desired, build};
use crate::models;
use crate::settings::Settings;
use crate::status::{Progress, status};

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
        let name = s.name_any();
        let namespace = s.namespace().unwrap_or_default();
        let current = s.status.as_ref().map(status_digest);
        // A claimed `security.id` comes first, as in KAOS: the store does nothing else.
        let conflict = conflict_of(&self.ids, s.as_ref())
            .map(|(reason, message)| BuildError { reason, message });
        let models = models::resolve(&s, |model_api| {
            cached(&self.model_apis, &namespace, model_api)
        });
        let built = match (conflict, models) {
            (Some(conflict), _) => Err(conflict),
            (None, Ok(service)) => build(&s, &service, &self.settings),
            (None, Err(waiting)) => {
                // Nothing is written while waiting: a ModelAPI's change wakes the store.
                let deployment = self
                    .core
                    .children
                    .deployment(&namespace, &build::deployment_name(&name));
                let now = kaos_workload::conditions::now();
                let desired = status(
                    &s,
                    Progress::Waiting(&waiting),
                    None,
                    deployment.as_deref(),
                    now,
                );
                return self
                    .core
                    .finish(s.as_ref(), current, &desired, None, &Default::default())
                    .await;
            }
        };
        let children = |desired: &Desired| desired.clone().into_set();
        let status_of = |conflict, deployment: Option<&_>, now| {
            status(&s, Progress::Built(&built), conflict, deployment, now)
        };
        let deployment = build::deployment_name(&name);
        self.core
            .converge_built(&*s, current, &built, &deployment, children, status_of)
            .await
    }
}

/// The phase of a MemoryStore, for `kaos_resources`.
pub fn phase_of(s: &MemoryStore) -> Option<&'static str> {
    s.status.as_ref().and_then(|s| s.phase).map(|p| p.as_str())
}
