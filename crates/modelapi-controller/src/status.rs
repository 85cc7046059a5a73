//! The status a ModelAPI should show, from what was built and the observed Deployment. Pure.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kaos_api::common::Phase;
use kaos_api::modelapi::{ModelAPI, ModelAPIStatus};
use kaos_runtime::conditions::{ConditionUpdate, remove_condition, set_condition};
use kaos_runtime::rollout;

use crate::build::{BuildError, Desired};

pub const READY: &str = "Ready";
/// False when `spec.telemetry` asks for what Hosted mode (Ollama) cannot do.
pub const TELEMETRY_SUPPORTED: &str = "TelemetrySupported";

pub fn status(
    m: &ModelAPI,
    built: &Result<Desired, BuildError>,
    deployment: Option<&Deployment>,
    now: Time,
) -> ModelAPIStatus {
    let previous = m.status.clone().unwrap_or_default();
    let generation = m.metadata.generation;
    let rollout = rollout::observe(deployment);
    let mut conditions = previous.conditions.clone();
    let (phase, message, endpoint) = match built {
        Err(e) => {
            set_condition(
                &mut conditions,
                ConditionUpdate {
                    type_: READY,
                    status: false,
                    reason: e.reason,
                    message: e.message.clone(),
                },
                generation,
                now,
            );
            remove_condition(&mut conditions, TELEMETRY_SUPPORTED);
            // The running children are left as they were; only the spec is wrong.
            (Phase::Failed, e.message.clone(), previous.endpoint.clone())
        }
        Ok(desired) => {
            let (phase, reason, message) = match (&rollout.failure, rollout.ready) {
                (Some(failure), _) => (
                    Phase::Failed,
                    "RolloutFailed",
                    format!("{}: {failure}", rollout.message),
                ),
                (None, true) => (Phase::Ready, "DeploymentReady", rollout.message.clone()),
                (None, false) => (
                    Phase::Pending,
                    "DeploymentNotReady",
                    rollout.message.clone(),
                ),
            };
            set_condition(
                &mut conditions,
                ConditionUpdate {
                    type_: READY,
                    status: phase == Phase::Ready,
                    reason,
                    message: message.clone(),
                },
                generation,
                now.clone(),
            );
            if desired.telemetry_ignored {
                let update = ConditionUpdate {
                    type_: TELEMETRY_SUPPORTED,
                    status: false,
                    reason: "NotSupportedInHostedMode",
                    message: "telemetry is not supported by Hosted (Ollama) ModelAPIs: spec.telemetry is kept but has no effect".into(),
                };
                set_condition(&mut conditions, update, generation, now);
            } else {
                remove_condition(&mut conditions, TELEMETRY_SUPPORTED);
            }
            (phase, message, Some(desired.endpoint.clone()))
        }
    };
    ModelAPIStatus {
        phase: Some(phase),
        ready: phase == Phase::Ready,
        endpoint,
        message: Some(message),
        deployment: rollout.mirror,
        observed_generation: generation,
        conditions,
    }
}
