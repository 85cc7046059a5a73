//! The MCP check of a server's rollout: `kaos_workload::verification` says when it is due and
//! runs it off the reconcile; this says what it asks (`verify`) and where (the Service's
//! address, or its override).

use std::sync::Arc;

use kaos_workload::verification::checks::Checks;
use kaos_workload::verification::overrides::AddressOverrides;
use kaos_workload::verification::rollout::{self, Rollout};
use kaos_workload::verification::settings::ProtocolCheckArgs;

use crate::verify::{MCP_PATH, McpClient, Outcome};

impl rollout::Outcome for Outcome {
    fn passed(&self) -> bool {
        self.verified
    }
}

/// The checks of the servers, the client that makes them and where it reaches them; shared by
/// every namespace's reconciles.
#[derive(Clone)]
pub struct Verifier {
    pub checks: Checks<Outcome>,
    client: McpClient,
    overrides: Arc<AddressOverrides>,
}

impl Verifier {
    pub fn new(settings: &ProtocolCheckArgs, overrides: &AddressOverrides) -> Self {
        Self {
            checks: Checks::new(settings.protocol_checks_in_flight),
            client: McpClient::new(settings.timeout()),
            overrides: Arc::new(overrides.clone()),
        }
    }

    /// Checks the server `key` on `rollout` when one is due; `wake` reconciles it after.
    pub fn check_if_due(
        &self,
        key: &str,
        rollout: Option<Rollout>,
        wake: impl Fn() + Send + 'static,
    ) {
        self.checks.check_if_due(
            key,
            rollout,
            |rollout| {
                let client = self.client.clone();
                let url = self.overrides.url(&rollout.endpoint, MCP_PATH);
                async move { client.verify(&url).await }
            },
            wake,
        );
    }
}
