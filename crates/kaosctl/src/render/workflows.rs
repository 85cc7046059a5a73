//! What the workflow controller would say of the workflows and runs of some manifests.

use kaos_api::agent::Agent;
use kaos_api::workflow::{AgentWorkflow, AgentWorkflowRun};
use kube::ResourceExt;

use super::manifests::named;

/// What the workflow controller would say of the workflows and runs: a workflow that cannot
/// run (its `Ready` condition False: a cycle, a schedule it cannot read, an agent not in the
/// manifests), a run of a workflow not in the manifests.
pub fn workflow_problems(
    workflows: &[AgentWorkflow],
    runs: &[AgentWorkflowRun],
    agents: &[Agent],
) -> Vec<String> {
    let mut problems = Vec::new();
    for w in workflows {
        let ns = w.namespace();
        let validity = workflow_controller::engine::validation::validate(
            &w.spec,
            ns.as_deref().unwrap_or_default(),
            |agent| agents.iter().any(|a| named(a, &ns, agent)),
        );
        if let Some(problem) = validity.problem {
            problems.push(format!(
                "AgentWorkflow {}: {} ({})",
                w.name_any(),
                problem.message,
                problem.reason
            ));
        }
    }
    for r in runs {
        let ns = r.namespace();
        if !workflows
            .iter()
            .any(|w| named(w, &ns, &r.spec.workflow_ref))
        {
            problems.push(format!(
                "AgentWorkflowRun {}: AgentWorkflow {} not found in namespace {}",
                r.name_any(),
                r.spec.workflow_ref,
                ns.unwrap_or_default()
            ));
        }
    }
    problems
}
