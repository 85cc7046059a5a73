//! The status a MemoryStore should show, from its desired state (or what it waits for) and the
//! observed Deployment. Pure.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kaos_api::memorystore::{MemoryStore, MemoryStoreStatus};
use kaos_workload::build::status_report::WorkloadReport;
use kaos_workload::cache::deployment_view::DeploymentView;

use crate::build::{Desired, Problem, labels};

/// While it waits for its ModelAPIs: KAOS's hold, Pending with what is awaited, whatever runs
/// (agents see the store not ready and report MemoryDegraded).
pub fn status(
    store: &MemoryStore,
    result: &Result<Desired, Problem>,
    conflict: Option<(&'static str, String)>,
    deployment: Option<&DeploymentView>,
    now: Time,
) -> MemoryStoreStatus {
    let previous = store.status.clone().unwrap_or_default();
    let labels = labels(store.metadata.name.as_deref().unwrap_or_default());
    WorkloadReport::of(
        result,
        conflict,
        deployment,
        &previous,
        &[],
        &labels,
        store.metadata.generation,
        now,
    )
    .status()
}
