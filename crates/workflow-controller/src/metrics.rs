//! The workflow controller's own metrics, added to the process's registry: runs and steps by
//! how they ended, and how long steps took. Labelled by outcome only: a label per workflow or
//! run would grow without bound.

use kaos_api::workflow::{RunPhase, StepPhase};
use kaos_runtime::metrics::{Buckets, Metrics, starting_at_zero};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;

/// Step durations, from a second to a day (a step's longest timeout).
pub const STEP_DURATION_BUCKETS: &[f64] = &[
    0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 10800.0, 86400.0,
];

/// The outcomes a finished run is counted under.
pub const RUN_OUTCOMES: [RunPhase; 3] = [RunPhase::Succeeded, RunPhase::Failed, RunPhase::Canceled];
/// The outcomes a finished step is counted under.
pub const STEP_OUTCOMES: [StepPhase; 4] = [
    StepPhase::Succeeded,
    StepPhase::Failed,
    StepPhase::Skipped,
    StepPhase::Canceled,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub outcome: String,
}

/// `kaos_workflow_runs_total`, `kaos_workflow_steps_total` and
/// `kaos_workflow_step_duration_seconds`.
#[derive(Clone, Debug)]
pub struct WorkflowMetrics {
    runs: Family<OutcomeLabels, Counter>,
    steps: Family<OutcomeLabels, Counter>,
    step_duration: Family<OutcomeLabels, Histogram, Buckets>,
}

impl WorkflowMetrics {
    /// Registers the families in `metrics`, every outcome at 0 from the start.
    pub fn register(metrics: &Metrics) -> Self {
        let families = Self {
            runs: Family::default(),
            steps: Family::default(),
            step_duration: Family::new_with_constructor(Buckets(STEP_DURATION_BUCKETS)),
        };
        metrics.register(
            "kaos_workflow_runs",
            "AgentWorkflowRuns finished, by outcome (Succeeded, Failed, Canceled)",
            starting_at_zero(&families.runs, RUN_OUTCOMES.map(|o| label(o.as_str()))),
        );
        metrics.register(
            "kaos_workflow_steps",
            "Steps of AgentWorkflowRuns finished, by outcome (Succeeded, Failed, Skipped, Canceled)",
            starting_at_zero(&families.steps, STEP_OUTCOMES.map(|o| label(o.as_str()))),
        );
        let timed = [StepPhase::Succeeded, StepPhase::Failed];
        metrics.register(
            "kaos_workflow_step_duration_seconds",
            "How long the steps that ran took, from their first send to their end, by outcome",
            starting_at_zero(&families.step_duration, timed.map(|o| label(o.as_str()))),
        );
        families
    }

    pub fn run_finished(&self, outcome: RunPhase) {
        self.runs.get_or_create(&label(outcome.as_str())).inc();
    }

    /// A step ended; `seconds` is how long it ran, when it ran at all.
    pub fn step_finished(&self, outcome: StepPhase, seconds: Option<f64>) {
        self.steps.get_or_create(&label(outcome.as_str())).inc();
        if let Some(seconds) = seconds {
            self.step_duration
                .get_or_create(&label(outcome.as_str()))
                .observe(seconds.max(0.0));
        }
    }
}

fn label(outcome: &str) -> OutcomeLabels {
    OutcomeLabels {
        outcome: outcome.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_outcome_is_exported_from_the_start_without_object_labels() {
        let metrics = Metrics::new("workflow", "kaos-workflow-controller", "h", &[]);
        let workflow = WorkflowMetrics::register(&metrics);
        workflow.run_finished(RunPhase::Failed);
        workflow.step_finished(StepPhase::Succeeded, Some(3.0));
        let text = metrics.encode();
        for line in [
            "kaos_workflow_runs_total{outcome=\"Succeeded\"} 0",
            "kaos_workflow_runs_total{outcome=\"Failed\"} 1",
            "kaos_workflow_runs_total{outcome=\"Canceled\"} 0",
            "kaos_workflow_steps_total{outcome=\"Skipped\"} 0",
            "kaos_workflow_steps_total{outcome=\"Succeeded\"} 1",
            "kaos_workflow_step_duration_seconds_count{outcome=\"Succeeded\"} 1",
            "kaos_workflow_step_duration_seconds_bucket{le=\"5.0\",outcome=\"Succeeded\"} 1",
        ] {
            assert!(text.contains(line), "missing {line}:\n{text}");
        }
    }
}
