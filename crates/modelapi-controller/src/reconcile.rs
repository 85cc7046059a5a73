//! One reconcile: build, converge (the LiteLLM config first, so new pods find it), status.

use std::sync::Arc;

use kaos_api::modelapi::ModelAPI;
use kaos_runtime::error::ReconcileError;
use kaos_workload::converge::{Child, ChildKind, ChildSet, WorkloadChildren};
use kaos_workload::identity::{SharedSecurityIds, build_unless_claimed};
use kaos_workload::reconciler::{Core, Reconciles, status_digest};
use kube::ResourceExt;
use kube::runtime::controller::Action;

use crate::build::{self, Desired, build};
use crate::settings::Settings;
use crate::status::status;

pub const FINALIZER: &str = "kaos.tools/modelapi-finalizer";

pub struct Context {
    pub core: Core,
    pub settings: Settings,
    /// Who holds each `security.id` of ModelAPIs.
    pub ids: SharedSecurityIds,
}

impl Reconciles<ModelAPI> for Context {
    fn core(&self) -> &Core {
        &self.core
    }

    async fn apply(&self, m: Arc<ModelAPI>) -> Result<Action, ReconcileError> {
        let name = m.name_any();
        let built = build_unless_claimed(&self.ids, m.as_ref(), || build(&m, &self.settings));
        let current = m.status.as_ref().map(status_digest);
        let deployment = build::deployment_name(&name);
        let children = |desired: &Desired| child_set(&name, desired);
        let status_of =
            |conflict, deployment: Option<&_>, now| status(&m, &built, conflict, deployment, now);
        self.core
            .converge_built(&*m, current, &built, &deployment, children, status_of)
            .await
    }
}

/// The ConfigMap and the API key Secret (or their absence), then the workload's children, so
/// new pods find what they mount and read.
fn child_set(name: &str, desired: &Desired) -> ChildSet {
    let mut set = ChildSet::default();
    match &desired.config_map {
        Some(config_map) => set
            .apply
            .push(Child::ConfigMap(Box::new(config_map.clone()))),
        None => set
            .absent
            .push((ChildKind::ConfigMap, build::config_map_name(name))),
    }
    match &desired.api_key_secret {
        Some(secret) => set.apply.push(Child::Secret(Box::new(secret.clone()))),
        None => set
            .absent
            .push((ChildKind::Secret, build::api_key_secret_name(name))),
    }
    let workload = WorkloadChildren::plain(
        desired.deployment.clone(),
        Some(desired.service.clone()),
        desired.http_route.clone(),
    )
    .scaled(desired.scaled.clone())
    .fenced(desired.network_policy.clone())
    .into_set();
    set.apply.extend(workload.apply);
    set.absent.extend(workload.absent);
    set.autoscaled_replicas = workload.autoscaled_replicas;
    set
}

/// The phase of a ModelAPI, for `kaos_resources`.
pub fn phase_of(m: &ModelAPI) -> Option<&'static str> {
    m.status.as_ref().and_then(|s| s.phase).map(|p| p.as_str())
}
