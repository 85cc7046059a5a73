//! Which finished runs a workflow keeps: the newest `successfulRunsHistoryLimit` that
//! succeeded and the newest `failedRunsHistoryLimit` that failed or were canceled, newest by
//! completion time. The rest are deleted.

use jiff::Timestamp;
use kaos_api::workflow::RunPhase;

/// What history reads of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinishedRun {
    pub name: String,
    pub phase: RunPhase,
    /// When it finished (else when it was created, for a run finished without one).
    pub finished: Option<Timestamp>,
}

/// The runs to delete, oldest first. Runs not finished are never among them.
pub fn runs_to_delete(
    runs: &[FinishedRun],
    successful_limit: i32,
    failed_limit: i32,
) -> Vec<String> {
    let beyond = |succeeded: bool, limit: i32| {
        let mut kind: Vec<&FinishedRun> = runs
            .iter()
            .filter(|run| run.phase.is_finished())
            .filter(|run| (run.phase == RunPhase::Succeeded) == succeeded)
            .collect();
        // Newest first; ties by name, so the choice is the same on every reconcile.
        kind.sort_by(|a, b| {
            b.finished
                .cmp(&a.finished)
                .then_with(|| b.name.cmp(&a.name))
        });
        let keep = usize::try_from(limit).unwrap_or(0);
        kind.into_iter()
            .skip(keep)
            .map(|run| run.name.clone())
            .rev()
            .collect::<Vec<_>>()
    };
    let mut doomed = beyond(true, successful_limit);
    doomed.extend(beyond(false, failed_limit));
    doomed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(name: &str, phase: RunPhase, minute: i64) -> FinishedRun {
        FinishedRun {
            name: name.into(),
            phase,
            finished: Timestamp::from_second(minute * 60).ok(),
        }
    }

    #[test]
    fn keeps_the_newest_of_each_outcome() {
        let runs = [
            run("s1", RunPhase::Succeeded, 1),
            run("s3", RunPhase::Succeeded, 3),
            run("s2", RunPhase::Succeeded, 2),
            run("f1", RunPhase::Failed, 1),
            run("c2", RunPhase::Canceled, 2),
            run("going", RunPhase::Running, 0),
        ];
        assert_eq!(runs_to_delete(&runs, 2, 1), ["s1", "f1"]);
        assert_eq!(runs_to_delete(&runs, 0, 0), ["s1", "s2", "s3", "f1", "c2"]);
        assert!(runs_to_delete(&runs, 3, 2).is_empty());
    }
}
