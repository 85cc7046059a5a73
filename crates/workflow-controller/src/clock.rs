//! The controller's clock: the system time, shifted by an offset that tests set, so a scheduled
//! run can be tested without waiting for a real minute boundary. It runs at the system's speed,
//! so the delays a reconcile asks for (`Action::requeue`) mean the same on either.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use jiff::{SignedDuration, Timestamp};

/// A clock shared by every reconcile of a process; cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct Clock {
    offset_nanos: Arc<AtomicI64>,
}

impl Clock {
    /// The system time.
    pub fn system() -> Self {
        Self::default()
    }

    /// The time now, truncated to whole seconds as Kubernetes stores times, so a time the
    /// controller writes reads back equal.
    pub fn now(&self) -> Timestamp {
        let now = self.precise_now();
        Timestamp::from_second(now.as_second()).unwrap_or(now)
    }

    /// The time now, to the nanosecond.
    pub fn precise_now(&self) -> Timestamp {
        let offset = SignedDuration::from_nanos(self.offset_nanos.load(Ordering::Relaxed));
        let now = Timestamp::now();
        now.checked_add(offset).unwrap_or(now)
    }

    /// From now on the clock reads `at`, and moves on from there.
    pub fn set(&self, at: Timestamp) {
        let offset = at.duration_since(Timestamp::now());
        self.offset_nanos
            .store(saturating_nanos(offset), Ordering::Relaxed);
    }

    /// Moves the clock forward by `by` (backward when negative).
    pub fn advance(&self, by: SignedDuration) {
        let by = saturating_nanos(by);
        // fetch_update cannot fail with a closure that always returns Some.
        let _ = self
            .offset_nanos
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |offset| {
                Some(offset.saturating_add(by))
            });
    }
}

fn saturating_nanos(duration: SignedDuration) -> i64 {
    i64::try_from(duration.as_nanos()).unwrap_or(if duration.is_negative() {
        i64::MIN
    } else {
        i64::MAX
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_time_it_was_set_to_and_moves_on() {
        let clock = Clock::system();
        let at: Timestamp = "2030-01-01T11:59:58.5Z".parse().expect("an instant");
        clock.set(at);
        let now = clock.precise_now();
        assert!(
            now >= at && now < at + SignedDuration::from_secs(1),
            "{now}"
        );
        assert_eq!(clock.now().subsec_nanosecond(), 0);
        clock.advance(SignedDuration::from_mins(1));
        assert!(clock.precise_now() >= at + SignedDuration::from_mins(1));
    }
}
