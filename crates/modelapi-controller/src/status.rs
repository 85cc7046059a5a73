//! The status a ModelAPI should show, from its desired state, the observed Deployment and the
//! last model check of its server. Pure.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kaos_api::modelapi::{ModelAPI, ModelAPIStatus};
use kaos_workload::build::status_report::WorkloadReport;
use kaos_workload::cache::deployment_view::DeploymentView;
use kaos_workload::conditions::{ConditionUpdate, set_condition};
use kaos_workload::verification::rollout::{Record, Rollout};

use crate::build::{Desired, Problem, TELEMETRY_SUPPORTED, labels};
use crate::models::Outcome;

pub use kaos_api::conditions::READY;
use kaos_api::conditions::{BUDGETS_ENFORCED, MODELS_LOADED};

pub fn status(
    m: &ModelAPI,
    result: &Result<Desired, Problem>,
    conflict: Option<(&'static str, String)>,
    deployment: Option<&DeploymentView>,
    checked: Option<&Record<Outcome>>,
    now: Time,
) -> ModelAPIStatus {
    let previous = m.status.clone().unwrap_or_default();
    let labels = labels(m.metadata.name.as_deref().unwrap_or_default());
    let mut status = WorkloadReport::of(
        result,
        conflict,
        deployment,
        &previous,
        &[TELEMETRY_SUPPORTED, BUDGETS_ENFORCED],
        &labels,
        m.metadata.generation,
        now.clone(),
    )
    .status();
    // Until a check of the rollout now available, the last check's condition stays shown.
    let current = Rollout::available(status.ready, status.endpoint.as_deref(), deployment);
    if let Some(outcome) = checked.and_then(|r| r.of(current.as_ref())) {
        let update = ConditionUpdate {
            type_: MODELS_LOADED,
            status: outcome.loaded,
            reason: outcome.reason,
            message: outcome.message.clone(),
        };
        set_condition(&mut status.conditions, update, m.metadata.generation, now);
    }
    status
}
