//! The status an MCPServer should show, from what was built and the observed Deployment. Pure.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kaos_api::common::Phase;
use kaos_api::mcpserver::{MCPServer, MCPServerStatus};
use kaos_workload::deployment_view::DeploymentView;
use kaos_workload::rollout::{observe, set_ready_condition, summarize_built};

use crate::build::{BuildError, Desired};

pub fn status(
    s: &MCPServer,
    built: &Result<Desired, BuildError>,
    conflict: Option<(&'static str, String)>,
    deployment: Option<&DeploymentView>,
    now: Time,
) -> MCPServerStatus {
    let previous = s.status.clone().unwrap_or_default();
    let generation = s.metadata.generation;
    let rollout = observe(deployment);
    let summary = summarize_built(built, conflict.as_ref(), &rollout);
    let mut conditions = previous.conditions.clone();
    set_ready_condition(&mut conditions, &summary, generation, now);
    MCPServerStatus {
        phase: Some(summary.phase),
        ready: summary.phase == Phase::Ready,
        endpoint: match built {
            Ok(desired) => Some(desired.endpoint.clone()),
            Err(_) => previous.endpoint,
        },
        message: Some(summary.message),
        scale: rollout.into_scale_status(&crate::build::labels(
            s.metadata.name.as_deref().unwrap_or_default(),
        )),
        // Discovering tools needs an MCP handshake with the running server: not done yet.
        available_tools: Vec::new(),
        observed_generation: generation,
        conditions,
    }
}
