//! The status an MCPServer should show, from what was built and the observed Deployment. Pure.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kaos_api::mcpserver::{MCPServer, MCPServerStatus};
use kaos_workload::deployment_view::DeploymentView;
use kaos_workload::rollout::{WorkloadReport, built_endpoint, observe, summarize_built};

use crate::build::{BuildError, Desired, labels};

pub fn status(
    s: &MCPServer,
    built: &Result<Desired, BuildError>,
    conflict: Option<(&'static str, String)>,
    deployment: Option<&DeploymentView>,
    now: Time,
) -> MCPServerStatus {
    let previous = s.status.clone().unwrap_or_default().workload;
    let rollout = observe(deployment);
    let report = WorkloadReport {
        summary: summarize_built(built, conflict.as_ref(), &rollout),
        endpoint: built_endpoint(built, |d| d.endpoint.clone(), &previous),
        rollout,
        labels: &labels(s.metadata.name.as_deref().unwrap_or_default()),
        generation: s.metadata.generation,
        now,
        conditions: previous.conditions,
    };
    MCPServerStatus {
        workload: report.status(),
        // Discovering tools needs an MCP handshake with the running server: not done yet.
        available_tools: Vec::new(),
    }
}
