//! The model check of a ModelAPI's rollout: `kaos_workload::verification` says when it is due
//! and runs it off the reconcile; this says what it asks (`verify`, for what `models` expects)
//! and where (the Service's address, or its override).

use std::sync::Arc;

use kaos_workload::verification::checks::Checks;
use kaos_workload::verification::overrides::AddressOverrides;
use kaos_workload::verification::rollout::{self, Rollout};
use kaos_workload::verification::settings::ProtocolCheckArgs;

use crate::models::{Expected, Outcome};
use crate::verify::ModelsClient;

impl rollout::Outcome for Outcome {
    fn passed(&self) -> bool {
        self.loaded
    }
}

/// The checks of the ModelAPIs, the client that makes them and where it reaches them; shared
/// by every namespace's reconciles.
#[derive(Clone)]
pub struct Verifier {
    pub checks: Checks<Outcome>,
    client: ModelsClient,
    overrides: Arc<AddressOverrides>,
}

impl Verifier {
    pub fn new(settings: &ProtocolCheckArgs, overrides: &AddressOverrides) -> Self {
        Self {
            checks: Checks::new(settings.protocol_checks_in_flight),
            client: ModelsClient::new(settings.timeout()),
            overrides: Arc::new(overrides.clone()),
        }
    }

    /// Checks the ModelAPI `key` on `rollout` when a check is due, for what `expected` says
    /// (worked out only then: it reads the whole config); `wake` reconciles it after.
    pub fn check_if_due(
        &self,
        key: &str,
        rollout: Option<Rollout>,
        expected: impl FnOnce() -> Expected,
        wake: impl Fn() + Send + 'static,
    ) {
        self.checks.check_if_due(
            key,
            rollout,
            |rollout| {
                let (client, overrides) = (self.client.clone(), self.overrides.clone());
                let (endpoint, expected) = (rollout.endpoint.clone(), expected());
                async move { client.verify(&endpoint, &overrides, &expected).await }
            },
            wake,
        );
    }
}
