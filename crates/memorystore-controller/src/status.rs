//! The status a MemoryStore should show, from its models, what was built and the observed
//! Deployment. Pure.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kaos_api::common::Phase;
use kaos_api::memorystore::{MemoryStore, MemoryStoreStatus};
use kaos_workload::deployment_view::DeploymentView;
use kaos_workload::rollout::{Summary, observe, set_ready_condition, summarize_built};

use crate::build::{BuildError, Desired};
use crate::models::Waiting;

/// How far a reconcile got: waiting for the ModelAPIs, or built (or not).
pub enum Progress<'a> {
    Waiting(&'a Waiting),
    Built(&'a Result<Desired, BuildError>),
}

pub fn status(
    store: &MemoryStore,
    progress: Progress<'_>,
    conflict: Option<(&'static str, String)>,
    deployment: Option<&DeploymentView>,
    now: Time,
) -> MemoryStoreStatus {
    let previous = store.status.clone().unwrap_or_default();
    let generation = store.metadata.generation;
    let rollout = observe(deployment);
    let (summary, endpoint) = match progress {
        // KAOS's hold: Pending with what is awaited, whatever runs (agents see the store not
        // ready and report MemoryDegraded).
        Progress::Waiting(waiting) => (
            Summary {
                phase: Phase::Pending,
                reason: waiting.reason,
                message: waiting.message.clone(),
            },
            previous.endpoint,
        ),
        Progress::Built(built) => {
            let endpoint = match built {
                Ok(desired) => Some(desired.endpoint.clone()),
                // A spec that cannot be built leaves the running children as they were.
                Err(_) => previous.endpoint,
            };
            (
                summarize_built(built, conflict.as_ref(), &rollout),
                endpoint,
            )
        }
    };
    let mut conditions = previous.conditions.clone();
    set_ready_condition(&mut conditions, &summary, generation, now);
    MemoryStoreStatus {
        phase: Some(summary.phase),
        ready: summary.phase == Phase::Ready,
        endpoint,
        message: Some(summary.message),
        scale: rollout.into_scale_status(&crate::build::labels(
            store.metadata.name.as_deref().unwrap_or_default(),
        )),
        observed_generation: generation,
        conditions,
    }
}
