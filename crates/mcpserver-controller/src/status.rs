//! The status an MCPServer should show, from its desired state and the observed Deployment.
//! Pure.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kaos_api::mcpserver::{MCPServer, MCPServerStatus};
use kaos_workload::build::status_report::WorkloadReport;
use kaos_workload::cache::deployment_view::DeploymentView;

use crate::build::{Desired, Problem, labels};

pub fn status(
    s: &MCPServer,
    result: &Result<Desired, Problem>,
    conflict: Option<(&'static str, String)>,
    deployment: Option<&DeploymentView>,
    now: Time,
) -> MCPServerStatus {
    let previous = s.status.clone().unwrap_or_default().workload;
    let labels = labels(s.metadata.name.as_deref().unwrap_or_default());
    let report = WorkloadReport::of(
        result,
        conflict,
        deployment,
        &previous,
        &[],
        &labels,
        s.metadata.generation,
        now,
    );
    MCPServerStatus {
        workload: report.status(),
        // Discovering tools needs an MCP handshake with the running server: not done yet.
        available_tools: Vec::new(),
    }
}
