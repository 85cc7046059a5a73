//! Seeded, reproducible fault injection: error answers per verb, added latency, watch streams
//! cut after N events or T seconds, and forced 410 Gone on watch starts.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::error::ApiError;

/// What to inject. Rates are probabilities per request, from 0.0 to 1.0.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FaultConfig {
    pub seed: u64,
    /// 500 InternalError on any verb but watch.
    pub error_rate: f64,
    /// 429 TooManyRequests on any verb but watch.
    pub throttle_rate: f64,
    /// 409 Conflict on writes (update, patch).
    pub conflict_rate: f64,
    /// Added before every request.
    pub latency: Duration,
    /// Watch streams end after this many events.
    pub watch_cut_events: Option<usize>,
    /// Watch streams end after this long.
    pub watch_cut_after: Option<Duration>,
    /// Watch starts answered with 410 Gone.
    pub gone_rate: f64,
    /// Never fault the admin identity (the test driving the cluster), only the clients under test.
    pub spare_admin: bool,
    /// Fault only requests for these resources (plural names, e.g. `deployments`); every
    /// resource when empty.
    pub resources: Vec<String>,
}

impl FaultConfig {
    /// Whether requests for `resource` (its plural) may be faulted.
    pub fn targets(&self, resource: &str) -> bool {
        self.resources.is_empty() || self.resources.iter().any(|r| r == resource)
    }
}

pub enum Fault {
    Error(ApiError),
    Delay(Duration),
}

struct State {
    config: FaultConfig,
    rng: u64,
}

impl State {
    /// splitmix64: small, seeded, good enough to spread faults.
    fn next(&mut self) -> f64 {
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Shared fault switchboard; off by default.
#[derive(Clone)]
pub struct Faults {
    state: Arc<Mutex<State>>,
}

impl Default for Faults {
    fn default() -> Self {
        Self::new(FaultConfig::default())
    }
}

impl Faults {
    pub fn new(config: FaultConfig) -> Self {
        let rng = config.seed;
        Self {
            state: Arc::new(Mutex::new(State { config, rng })),
        }
    }

    pub fn set(&self, config: FaultConfig) {
        let mut state = self.lock();
        state.rng = config.seed;
        state.config = config;
    }

    pub fn config(&self) -> FaultConfig {
        self.lock().config.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The fault for one request of `verb`, if any.
    pub fn draw(&self, verb: &str) -> Option<Fault> {
        let mut state = self.lock();
        if verb == "watch" {
            return None;
        }
        let config = state.config.clone();
        if config.error_rate > 0.0 && state.next() < config.error_rate {
            return Some(Fault::Error(ApiError::internal(
                "injected fault: internal error",
            )));
        }
        if config.throttle_rate > 0.0 && state.next() < config.throttle_rate {
            return Some(Fault::Error(ApiError::too_many_requests()));
        }
        if matches!(verb, "update" | "patch")
            && config.conflict_rate > 0.0
            && state.next() < config.conflict_rate
        {
            return Some(Fault::Error(ApiError::conflict("objects", "", "injected")));
        }
        (!config.latency.is_zero()).then_some(Fault::Delay(config.latency))
    }

    /// Whether this watch start is answered with 410 Gone.
    pub fn take_forced_gone(&self) -> bool {
        let mut state = self.lock();
        let rate = state.config.gone_rate;
        rate > 0.0 && state.next() < rate
    }

    /// When watch streams are cut: (after N events, after T).
    pub fn watch_cut(&self) -> Option<(Option<usize>, Duration)> {
        let config = &self.lock().config;
        match (config.watch_cut_events, config.watch_cut_after) {
            (None, None) => None,
            (events, after) => Some((events, after.unwrap_or(Duration::from_secs(86_400)))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_faults_are_reproducible_and_near_their_rate() {
        let config = FaultConfig {
            seed: 7,
            error_rate: 0.1,
            ..Default::default()
        };
        let count = |faults: &Faults| (0..10_000).filter(|_| faults.draw("get").is_some()).count();
        let a = count(&Faults::new(config.clone()));
        let b = count(&Faults::new(config));
        assert_eq!(a, b, "same seed, same faults");
        assert!((800..1200).contains(&a), "about 10%: {a}");
        assert!(Faults::default().draw("get").is_none(), "off by default");
    }
}
