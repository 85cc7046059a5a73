//! The status a ModelAPI should show, from what was built and the observed Deployment. Pure.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kaos_api::modelapi::{ModelAPI, ModelAPIStatus};
use kaos_workload::conditions::{ConditionUpdate, remove_condition, set_condition};
use kaos_workload::deployment_view::DeploymentView;
use kaos_workload::rollout::{WorkloadReport, built_endpoint, observe, summarize_built};

use crate::build::{BuildError, Desired, labels};

pub const READY: &str = "Ready";
/// False when `spec.telemetry` asks for what Hosted mode (Ollama) cannot do.
pub const TELEMETRY_SUPPORTED: &str = "TelemetrySupported";

pub fn status(
    m: &ModelAPI,
    built: &Result<Desired, BuildError>,
    conflict: Option<(&'static str, String)>,
    deployment: Option<&DeploymentView>,
    now: Time,
) -> ModelAPIStatus {
    let previous = m.status.clone().unwrap_or_default();
    let generation = m.metadata.generation;
    let rollout = observe(deployment);
    let mut status = WorkloadReport {
        summary: summarize_built(built, conflict.as_ref(), &rollout),
        endpoint: built_endpoint(built, |d| d.endpoint.clone(), &previous),
        rollout,
        labels: &labels(m.metadata.name.as_deref().unwrap_or_default()),
        generation,
        now: now.clone(),
        conditions: previous.conditions,
    }
    .status();
    if built.as_ref().is_ok_and(|d| d.telemetry_ignored) {
        let update = ConditionUpdate {
            type_: TELEMETRY_SUPPORTED,
            status: false,
            reason: "NotSupportedInHostedMode",
            message: "telemetry is not supported by Hosted (Ollama) ModelAPIs: spec.telemetry is kept but has no effect".into(),
        };
        set_condition(&mut status.conditions, update, generation, now);
    } else {
        remove_condition(&mut status.conditions, TELEMETRY_SUPPORTED);
    }
    status
}
