//! The status a ModelAPI should show, from its desired state and the observed Deployment. Pure.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kaos_api::modelapi::{ModelAPI, ModelAPIStatus};
use kaos_workload::build::status_report::WorkloadReport;
use kaos_workload::cache::deployment_view::DeploymentView;

use crate::build::{Desired, Problem, TELEMETRY_SUPPORTED, labels};

use kaos_api::conditions::BUDGETS_ENFORCED;
pub use kaos_api::conditions::READY;

pub fn status(
    m: &ModelAPI,
    result: &Result<Desired, Problem>,
    conflict: Option<(&'static str, String)>,
    deployment: Option<&DeploymentView>,
    now: Time,
) -> ModelAPIStatus {
    let previous = m.status.clone().unwrap_or_default();
    let labels = labels(m.metadata.name.as_deref().unwrap_or_default());
    WorkloadReport::of(
        result,
        conflict,
        deployment,
        &previous,
        &[TELEMETRY_SUPPORTED, BUDGETS_ENFORCED],
        &labels,
        m.metadata.generation,
        now,
    )
    .status()
}
