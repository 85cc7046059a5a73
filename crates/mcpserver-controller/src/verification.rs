//! When an MCPServer is checked, and what the last check found. A check is due once per
//! rollout: when the server is Ready on a Deployment that observed its latest spec and that
//! rollout (the Deployment's uid and generation, and the endpoint) has not been checked; again
//! after a failure, with backoff. The leader keeps the records in memory, so a new leader checks
//! each Ready server once. A cap bounds the checks in flight in the process.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kaos_api::mcpserver::MCPServerStatus;
use kaos_workload::cache::deployment_view::DeploymentView;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::verify::{MCP_PATH, McpClient, Outcome};

/// The first retry after a failed check; each further failure doubles it, up to the cap.
const FIRST_RETRY: Duration = Duration::from_secs(10);
const MAX_RETRY: Duration = Duration::from_secs(600);

/// One rollout of a server: what a check is valid for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rollout {
    deployment_uid: String,
    deployment_generation: i64,
    pub endpoint: String,
}

impl Rollout {
    /// The rollout `status` reports as available on `deployment`, if any: the server Ready and
    /// the Deployment's controller caught up with its spec.
    pub fn available(
        status: &MCPServerStatus,
        deployment: Option<&DeploymentView>,
    ) -> Option<Self> {
        let deployment = deployment?;
        let meta = &deployment.metadata.meta;
        let generation = meta.generation?;
        let observed = deployment.status().observed_generation;
        (status.ready && observed == Some(generation)).then_some(())?;
        Some(Rollout {
            deployment_uid: meta.uid.clone()?,
            deployment_generation: generation,
            endpoint: status.endpoint.clone()?,
        })
    }
}

/// The last check of one server.
#[derive(Debug, Clone)]
pub struct Record {
    pub rollout: Rollout,
    pub outcome: Outcome,
    failures: u32,
    retry_at: Instant,
}

/// What the reconcile does after writing the status.
pub enum Next {
    /// Nothing to check (not available, or this rollout's check passed).
    Nothing,
    /// A check ran: reconcile again at once to show its outcome.
    Checked,
    /// The last check failed: look again after this long.
    RetryIn(Duration),
}

/// The records and the client, shared by every namespace's reconciles.
#[derive(Clone)]
pub struct Verifications {
    records: Arc<Mutex<HashMap<String, Record>>>,
    in_flight: Arc<Semaphore>,
    client: McpClient,
    overrides: Arc<Vec<(String, String)>>,
}

impl Verifications {
    /// At most `in_flight` checks at once, each request within `timeout`.
    pub fn new(in_flight: usize, timeout: Duration, overrides: &AddressOverrides) -> Self {
        Self {
            records: Arc::default(),
            in_flight: Arc::new(Semaphore::new(in_flight.max(1))),
            client: McpClient::new(timeout),
            overrides: Arc::new(overrides.0.clone()),
        }
    }

    /// The last check of the server `key` (`namespace/name`).
    pub fn recorded(&self, key: &str) -> Option<Record> {
        self.lock().get(key).cloned()
    }

    /// Checks the server when its `rollout` is due one.
    pub async fn check_if_due(&self, key: &str, rollout: Option<Rollout>) -> Next {
        let Some(rollout) = rollout else {
            return Next::Nothing;
        };
        let failures = match self.recorded(key) {
            Some(last) if last.rollout == rollout => {
                if last.outcome.verified {
                    return Next::Nothing;
                }
                let now = Instant::now();
                if now < last.retry_at {
                    return Next::RetryIn(last.retry_at - now);
                }
                last.failures
            }
            _ => 0,
        };
        let outcome = {
            let _permit = self.in_flight.acquire().await;
            self.client.verify(&self.url(&rollout.endpoint)).await
        };
        let failures = if outcome.verified { 0 } else { failures + 1 };
        let record = Record {
            rollout,
            outcome,
            failures,
            retry_at: Instant::now() + backoff(failures),
        };
        self.lock().insert(key.to_string(), record);
        Next::Checked
    }

    /// Forgets a deleted server.
    pub fn forget(&self, key: &str) {
        self.lock().remove(key);
    }

    /// The MCP URL of `endpoint`, its host and port replaced when an override names them.
    fn url(&self, endpoint: &str) -> String {
        let authority = endpoint.strip_prefix("http://").unwrap_or(endpoint);
        let authority = authority.trim_end_matches('/');
        let mapped = self
            .overrides
            .iter()
            .find(|(from, _)| from == authority)
            .map_or(authority, |(_, to)| to.as_str());
        format!("http://{mapped}{MCP_PATH}")
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Record>> {
        // A panic while holding it leaves plain data: still usable.
        self.records.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The wait before the next check after `failures` failed ones in a row.
fn backoff(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    (FIRST_RETRY * 2u32.pow(doublings)).min(MAX_RETRY)
}

/// `MCP_ADDRESS_OVERRIDES`: Service `host:port` → the `host:port` this process reaches it at.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AddressOverrides(pub Vec<(String, String)>);

impl std::str::FromStr for AddressOverrides {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        parse_overrides(text).map(AddressOverrides)
    }
}

/// Reads `host:port=host:port` entries separated by commas, each mapping an MCPServer's Service
/// address to where this process reaches it (tests, a local sandbox).
fn parse_overrides(text: &str) -> Result<Vec<(String, String)>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(|entry| {
            let invalid = |why: &str| {
                format!("invalid MCP address override {entry:?}: {why} (expected service-host:port=host:port)")
            };
            let (from, to) = entry.split_once('=').ok_or_else(|| invalid("no `=`"))?;
            for address in [from.trim(), to.trim()] {
                let (host, port) = address
                    .rsplit_once(':')
                    .ok_or_else(|| invalid("an address has no port"))?;
                if host.is_empty() || host.contains(['/', ' ']) {
                    return Err(invalid("an address has no valid host"));
                }
                if port.parse::<u16>().map_or(true, |p| p == 0) {
                    return Err(invalid("a port is not a number from 1 to 65535"));
                }
            }
            Ok((from.trim().to_string(), to.trim().to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_map_a_service_address_and_bad_entries_are_named() {
        let parsed = parse_overrides(" mcpserver-t.ns.svc.cluster.local:8000=127.0.0.1:9000 ,");
        assert_eq!(
            parsed,
            Ok(vec![(
                "mcpserver-t.ns.svc.cluster.local:8000".to_string(),
                "127.0.0.1:9000".to_string()
            )])
        );
        assert_eq!(
            parse_overrides("a:1=b"),
            Err("invalid MCP address override \"a:1=b\": an address has no port (expected service-host:port=host:port)".to_string())
        );
    }

    #[test]
    fn retries_back_off_from_ten_seconds_to_ten_minutes() {
        let secs: Vec<u64> = [1, 2, 3, 7, 30].map(|f| backoff(f).as_secs()).to_vec();
        assert_eq!(secs, [10, 20, 40, 600, 600]);
    }
}
