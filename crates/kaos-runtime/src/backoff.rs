//! Per-object exponential backoff for failed reconciles, as controller-runtime's rate limiter:
//! 5 ms doubling on every consecutive failure up to 1000 s; a success resets it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

pub struct Backoff {
    base: Duration,
    max: Duration,
    failures: Mutex<HashMap<String, u32>>,
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new(Duration::from_millis(5), Duration::from_secs(1000))
    }
}

impl Backoff {
    pub fn new(base: Duration, max: Duration) -> Self {
        Self {
            base,
            max,
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// The delay before retrying `key` after one more failure.
    pub fn next_delay(&self, key: &str) -> Duration {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let count = failures.entry(key.to_string()).or_insert(0);
        let delay = self
            .base
            .saturating_mul(2u32.saturating_pow(*count))
            .min(self.max);
        *count = count.saturating_add(1);
        delay
    }

    /// Forgets the failures of `key` after a successful reconcile.
    pub fn reset(&self, key: &str) {
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_from_5ms_to_1000s_and_resets() {
        let backoff = Backoff::default();
        let delays: Vec<u128> = (0..4)
            .map(|_| backoff.next_delay("a").as_millis())
            .collect();
        assert_eq!(delays, [5, 10, 20, 40]);
        assert_eq!(backoff.next_delay("b").as_millis(), 5, "per object");
        for _ in 0..40 {
            backoff.next_delay("a");
        }
        assert_eq!(backoff.next_delay("a"), Duration::from_secs(1000));
        backoff.reset("a");
        assert_eq!(backoff.next_delay("a").as_millis(), 5);
    }
}
