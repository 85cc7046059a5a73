//! The status an MCPServer should show, from its desired state, the observed Deployment and the
//! last MCP check of the server. Pure.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kaos_api::conditions::PROTOCOL_VERIFIED;
use kaos_api::mcpserver::{MCPServer, MCPServerStatus};
use kaos_workload::build::status_report::WorkloadReport;
use kaos_workload::cache::deployment_view::DeploymentView;
use kaos_workload::conditions::{ConditionUpdate, set_condition};

use crate::build::{Desired, Problem, labels};
use kaos_workload::verification::rollout::{Record, Rollout};

use crate::verify::Outcome;

pub fn status(
    s: &MCPServer,
    result: &Result<Desired, Problem>,
    conflict: Option<(&'static str, String)>,
    deployment: Option<&DeploymentView>,
    checked: Option<&Record<Outcome>>,
    now: Time,
) -> MCPServerStatus {
    let previous = s.status.clone().unwrap_or_default();
    let labels = labels(s.metadata.name.as_deref().unwrap_or_default());
    let report = WorkloadReport::of(
        result,
        conflict,
        deployment,
        &previous.workload,
        &[],
        &labels,
        s.metadata.generation,
        now.clone(),
    );
    let mut status = MCPServerStatus {
        workload: report.status(),
        // Until a check of the rollout now available, what the last check listed stays shown.
        available_tools: previous.available_tools,
        server_info: previous.server_info,
    };
    let workload = &status.workload;
    let current = Rollout::available(workload.ready, workload.endpoint.as_deref(), deployment);
    if let Some(outcome) = checked.and_then(|r| r.of(current.as_ref())) {
        let update = ConditionUpdate {
            type_: PROTOCOL_VERIFIED,
            status: outcome.verified,
            reason: outcome.reason,
            message: outcome.message.clone(),
        };
        set_condition(
            &mut status.workload.conditions,
            update,
            s.metadata.generation,
            now,
        );
        status.available_tools = outcome.tools.clone();
        status.server_info = outcome.server_info.clone();
    }
    status
}
