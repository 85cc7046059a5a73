//! The checks of one controller process. Per object: the record of its last check, the rollout
//! a check is running for, and when a failed one is retried (10 s, doubling up to 10 minutes).
//! Each check is a task of its own, so a reconcile never waits on a workload's answer; at most
//! `in_flight` run at once across every watched namespace; when one ends it wakes the object's
//! reconcile, which shows the outcome, and a failed one wakes it again when its retry is due.
//! The records live in the leader's memory: a new leader checks each available workload once.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::rollout::{Outcome, Record, Rollout};

/// The first retry after a failed check; each further failure doubles it, up to the cap.
const FIRST_RETRY: Duration = Duration::from_secs(10);
const MAX_RETRY: Duration = Duration::from_secs(600);

/// What is known of one object's checks.
struct Entry<O> {
    last: Option<Record<O>>,
    /// Failures in a row of `last`'s rollout, and when it may be checked again.
    failures: u32,
    retry_at: Instant,
    /// The rollout a check is running for.
    running: Option<Rollout>,
}

type Entries<O> = Arc<Mutex<HashMap<String, Entry<O>>>>;

/// The checks of a controller's objects, shared by every namespace's reconciles.
pub struct Checks<O> {
    entries: Entries<O>,
    in_flight: Arc<Semaphore>,
}

impl<O> Clone for Checks<O> {
    fn clone(&self) -> Self {
        Self {
            entries: self.entries.clone(),
            in_flight: self.in_flight.clone(),
        }
    }
}

impl<O: Outcome> Checks<O> {
    /// At most `in_flight` checks at once (at least one).
    pub fn new(in_flight: usize) -> Self {
        Self {
            entries: Arc::default(),
            in_flight: Arc::new(Semaphore::new(in_flight.max(1))),
        }
    }

    /// The last check of the object `key` (`namespace/name`).
    pub fn recorded(&self, key: &str) -> Option<Record<O>> {
        lock(&self.entries).get(key).and_then(|e| e.last.clone())
    }

    /// Starts `check` of `rollout` (the one the object `key` is available on, if any) when one
    /// is due: not checked yet, or failed and its retry due, and none running for it. `wake`
    /// asks for a reconcile of the object. Returns whether a check started.
    pub fn check_if_due<F>(
        &self,
        key: &str,
        rollout: Option<Rollout>,
        check: impl FnOnce(&Rollout) -> F,
        wake: impl Fn() + Send + 'static,
    ) -> bool
    where
        F: Future<Output = O> + Send + 'static,
    {
        let Some(rollout) = rollout else {
            return false;
        };
        let failures = {
            let mut entries = lock(&self.entries);
            let entry = entries.entry(key.to_string()).or_insert_with(|| Entry {
                last: None,
                failures: 0,
                retry_at: Instant::now(),
                running: None,
            });
            if entry.running.as_ref() == Some(&rollout) {
                return false;
            }
            let failures = match &entry.last {
                Some(last) if last.rollout == rollout => {
                    if last.outcome.passed() || Instant::now() < entry.retry_at {
                        return false;
                    }
                    entry.failures
                }
                _ => 0,
            };
            entry.running = Some(rollout.clone());
            failures
        };
        let task = check(&rollout);
        let (entries, in_flight, key) = (
            self.entries.clone(),
            self.in_flight.clone(),
            key.to_string(),
        );
        tokio::spawn(async move {
            let outcome = {
                let _permit = in_flight.acquire().await;
                task.await
            };
            let passed = outcome.passed();
            let failures = if passed { 0 } else { failures + 1 };
            let retry_at = Instant::now() + backoff(failures);
            {
                let mut entries = lock(&entries);
                // Forgotten (deleted), or a check of a newer rollout started meanwhile: this
                // outcome is no news.
                let Some(entry) = entries
                    .get_mut(&key)
                    .filter(|e| e.running.as_ref() == Some(&rollout))
                else {
                    return;
                };
                entry.running = None;
                entry.last = Some(Record { rollout, outcome });
                entry.failures = failures;
                entry.retry_at = retry_at;
            }
            wake();
            if !passed {
                tokio::time::sleep_until(retry_at).await;
                if lock(&entries).contains_key(&key) {
                    wake();
                }
            }
        });
        true
    }

    /// Forgets a deleted object (a check still running for it is dropped when it ends).
    pub fn forget(&self, key: &str) {
        lock(&self.entries).remove(key);
    }
}

fn lock<O>(entries: &Entries<O>) -> MutexGuard<'_, HashMap<String, Entry<O>>> {
    // A panic while holding it leaves plain data: still usable.
    entries.lock().unwrap_or_else(|e| e.into_inner())
}

/// The wait before the next check after `failures` failed ones in a row.
fn backoff(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    (FIRST_RETRY * 2u32.pow(doublings)).min(MAX_RETRY)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::deployment_view::DeploymentView;
    use std::sync::atomic::{AtomicUsize, Ordering};

    impl Outcome for bool {
        fn passed(&self) -> bool {
            *self
        }
    }

    fn rollout(generation: i64) -> Option<Rollout> {
        let deployment: DeploymentView = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "d", "uid": "u", "generation": generation},
            "status": {"observedGeneration": generation},
        }))
        .expect("a view");
        Rollout::available(true, Some("http://svc:8000"), Some(&deployment))
    }

    /// Checks of `key` whose outcome is `passes`, counting the checks and the wakes.
    fn start(
        checks: &Checks<bool>,
        key: &str,
        generation: i64,
        passes: bool,
        counts: &Arc<(AtomicUsize, AtomicUsize)>,
    ) -> bool {
        let (ran, woken) = (counts.clone(), counts.clone());
        checks.check_if_due(
            key,
            rollout(generation),
            move |_| async move {
                ran.0.fetch_add(1, Ordering::SeqCst);
                passes
            },
            move || {
                woken.1.fetch_add(1, Ordering::SeqCst);
            },
        )
    }

    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_rollout_is_checked_once_and_a_new_one_again() {
        let checks = Checks::new(1);
        let counts = Arc::default();
        assert!(
            !checks.check_if_due("ns/a", None, |_| async { true }, || {}),
            "not available"
        );
        assert!(start(&checks, "ns/a", 1, true, &counts));
        assert!(!start(&checks, "ns/a", 1, true, &counts), "already running");
        settle().await;
        assert_eq!(checks.recorded("ns/a").map(|r| r.outcome), Some(true));
        assert!(!start(&checks, "ns/a", 1, true, &counts), "passed");
        assert!(start(&checks, "ns/a", 2, true, &counts), "a new rollout");
        settle().await;
        assert_eq!(counts.0.load(Ordering::SeqCst), 2);
        assert_eq!(counts.1.load(Ordering::SeqCst), 2, "a wake per outcome");
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_check_is_retried_after_its_backoff_with_a_wake() {
        let checks = Checks::new(1);
        let counts: Arc<(AtomicUsize, AtomicUsize)> = Arc::default();
        assert!(start(&checks, "ns/a", 1, false, &counts));
        settle().await;
        assert_eq!(counts.1.load(Ordering::SeqCst), 1, "woken with the outcome");
        assert!(
            !start(&checks, "ns/a", 1, false, &counts),
            "before the retry"
        );
        tokio::time::advance(FIRST_RETRY).await;
        settle().await;
        assert_eq!(counts.1.load(Ordering::SeqCst), 2, "woken for the retry");
        assert!(start(&checks, "ns/a", 1, true, &counts), "the retry");
        settle().await;
        assert_eq!(checks.recorded("ns/a").map(|r| r.outcome), Some(true));
    }

    #[tokio::test(start_paused = true)]
    async fn a_forgotten_object_keeps_no_record_of_a_check_that_was_running() {
        let checks = Checks::new(1);
        let counts = Arc::default();
        assert!(start(&checks, "ns/a", 1, true, &counts));
        checks.forget("ns/a");
        settle().await;
        assert!(checks.recorded("ns/a").is_none());
        assert_eq!(counts.1.load(Ordering::SeqCst), 0, "no wake");
    }

    #[test]
    fn retries_back_off_from_ten_seconds_to_ten_minutes() {
        let secs: Vec<u64> = [1, 2, 3, 7, 30].map(|f| backoff(f).as_secs()).to_vec();
        assert_eq!(secs, [10, 20, 40, 600, 600]);
    }
}
