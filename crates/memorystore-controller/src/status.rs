//! The status a MemoryStore should show, from its models, what was built and the observed
//! Deployment. Pure.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kaos_api::common::Phase;
use kaos_api::memorystore::{MemoryStore, MemoryStoreStatus};
use kaos_workload::deployment_view::DeploymentView;
use kaos_workload::rollout::{Summary, WorkloadReport, built_endpoint, observe, summarize_built};

use crate::build::{BuildError, Desired, labels};
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
            previous.endpoint.clone(),
        ),
        Progress::Built(built) => (
            summarize_built(built, conflict.as_ref(), &rollout),
            built_endpoint(built, |d| d.endpoint.clone(), &previous),
        ),
    };
    WorkloadReport {
        summary,
        endpoint,
        rollout,
        labels: &labels(store.metadata.name.as_deref().unwrap_or_default()),
        generation: store.metadata.generation,
        now,
        conditions: previous.conditions,
    }
    .status()
}
