//! Leader election on a `coordination.k8s.io/v1` Lease with client-go's semantics.
//!
//! - A held lease counts as expired only by *this process's* clock: `lease_duration` after the
//!   moment we last saw its record change. The holder's timestamps are never compared with ours.
//! - Every write carries the `resourceVersion` it read, so two candidates cannot both win.
//! - Every API call has its own timeout.
//! - A leader that has not renewed for `renew_deadline` gives up: [`LeaderElector::run`]
//!   returns [`ElectionError::Lost`] and the process is expected to exit non-zero.
//! - On shutdown the leader releases the lease (empty holder) so a standby takes over at its
//!   next retry.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::PostParams;
use tokio::sync::watch;
use tokio::time::Instant;

/// Timings and names of one election.
#[derive(Clone, Debug, PartialEq)]
pub struct ElectionConfig {
    pub lease_name: String,
    pub namespace: String,
    /// This candidate's identity: pod name plus a random suffix.
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
    /// Limit of each API call.
    pub call_timeout: Duration,
}

impl ElectionConfig {
    /// client-go's defaults: 15 s lease, 10 s renew deadline, 2 s retry.
    pub fn new(lease_name: &str, namespace: &str, identity: &str) -> Self {
        Self {
            lease_name: lease_name.into(),
            namespace: namespace.into(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            call_timeout: Duration::from_secs(5),
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LeaseError {
    #[error("the lease changed since it was read")]
    Conflict,
    #[error("lease API call failed: {0}")]
    Api(String),
    #[error("lease API call timed out")]
    Timeout,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ElectionError {
    #[error("lost leadership of lease {lease}: not renewed within {deadline:?}")]
    Lost { lease: String, deadline: Duration },
}

/// Where the lease lives; the Kubernetes API in production, a fake in unit tests.
pub trait LeaseStore: Send + Sync {
    fn get(&self) -> impl Future<Output = Result<Option<Lease>, LeaseError>> + Send;
    fn create(&self, lease: Lease) -> impl Future<Output = Result<Lease, LeaseError>> + Send;
    /// Replaces the lease; fails with [`LeaseError::Conflict`] on a stale `resourceVersion`.
    fn replace(&self, lease: Lease) -> impl Future<Output = Result<Lease, LeaseError>> + Send;
}

/// The lease in the cluster.
pub struct KubeLeaseStore {
    api: Api<Lease>,
    name: String,
}

impl KubeLeaseStore {
    pub fn new(client: kube::Client, namespace: &str, name: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            name: name.into(),
        }
    }
}

fn api_error(e: kube::Error) -> LeaseError {
    match e {
        // Another holder wrote it first: an update's Conflict, or a create's AlreadyExists.
        kube::Error::Api(s) if s.is_conflict() || s.is_already_exists() => LeaseError::Conflict,
        other => LeaseError::Api(other.to_string()),
    }
}

impl LeaseStore for KubeLeaseStore {
    async fn get(&self) -> Result<Option<Lease>, LeaseError> {
        self.api.get_opt(&self.name).await.map_err(api_error)
    }

    async fn create(&self, lease: Lease) -> Result<Lease, LeaseError> {
        self.api
            .create(&PostParams::default(), &lease)
            .await
            .map_err(api_error)
    }

    async fn replace(&self, lease: Lease) -> Result<Lease, LeaseError> {
        self.api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
            .map_err(api_error)
    }
}

/// One candidate.
pub struct LeaderElector<S> {
    store: S,
    config: ElectionConfig,
    /// The last lease record seen and when (by our clock) it was first seen.
    observed: Option<(LeaseSpec, Instant)>,
    leading: bool,
}

fn wall_now() -> MicroTime {
    MicroTime(jiff::Timestamp::now())
}

impl<S: LeaseStore> LeaderElector<S> {
    pub fn new(store: S, config: ElectionConfig) -> Self {
        Self {
            store,
            config,
            observed: None,
            leading: false,
        }
    }

    pub fn is_leader(&self) -> bool {
        self.leading
    }

    async fn call<T>(
        &self,
        f: impl Future<Output = Result<T, LeaseError>>,
    ) -> Result<T, LeaseError> {
        tokio::time::timeout(self.config.call_timeout, f)
            .await
            .unwrap_or(Err(LeaseError::Timeout))
    }

    fn our_record(&self, previous: Option<&LeaseSpec>) -> LeaseSpec {
        let now = wall_now();
        let held_by_us = previous.and_then(|p| p.holder_identity.as_deref())
            == Some(self.config.identity.as_str());
        let transitions = previous.and_then(|p| p.lease_transitions).unwrap_or(0);
        LeaseSpec {
            holder_identity: Some(self.config.identity.clone()),
            lease_duration_seconds: Some(self.config.lease_duration.as_secs().max(1) as i32),
            acquire_time: if held_by_us {
                previous.and_then(|p| p.acquire_time.clone())
            } else {
                Some(now.clone())
            },
            renew_time: Some(now),
            lease_transitions: Some(if held_by_us || previous.is_none() {
                transitions
            } else {
                transitions + 1
            }),
            ..LeaseSpec::default()
        }
    }

    /// One attempt to acquire or renew the lease (client-go's `tryAcquireOrRenew`).
    pub async fn try_acquire_or_renew(&mut self) -> Result<bool, LeaseError> {
        let now = Instant::now();
        let Some(mut lease) = self.call(self.store.get()).await? else {
            let record = self.our_record(None);
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.lease_name.clone()),
                    namespace: Some(self.config.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(record.clone()),
            };
            self.call(self.store.create(lease)).await?;
            self.observed = Some((record, now));
            self.leading = true;
            return Ok(true);
        };
        let record = lease.spec.clone().unwrap_or_default();
        if self
            .observed
            .as_ref()
            .is_none_or(|(seen, _)| *seen != record)
        {
            self.observed = Some((record.clone(), now));
        }
        let holder = record.holder_identity.as_deref().unwrap_or("");
        let held_by_other = !holder.is_empty() && holder != self.config.identity;
        if held_by_other {
            let duration =
                Duration::from_secs(record.lease_duration_seconds.unwrap_or(0).max(0) as u64);
            let first_seen = self.observed.as_ref().map_or(now, |(_, at)| *at);
            if first_seen + duration > now {
                self.leading = false;
                return Ok(false);
            }
        }
        let ours = self.our_record(Some(&record));
        lease.spec = Some(ours.clone());
        match self.call(self.store.replace(lease)).await {
            Ok(_) => {
                self.observed = Some((ours, now));
                self.leading = true;
                Ok(true)
            }
            Err(e) => Err(e),
        }
    }

    /// Gives the lease up if we hold it: an empty holder lets a standby acquire at once.
    pub async fn release(&mut self) -> Result<(), LeaseError> {
        if !self.leading {
            return Ok(());
        }
        self.leading = false;
        let Some(mut lease) = self.call(self.store.get()).await? else {
            return Ok(());
        };
        let spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return Ok(());
        }
        let now = wall_now();
        lease.spec = Some(LeaseSpec {
            holder_identity: None,
            lease_duration_seconds: Some(1),
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            ..spec
        });
        self.call(self.store.replace(lease)).await.map(drop)
    }

    /// Campaigns until `shutdown` turns true or leadership is lost. `leading` follows our state.
    /// On shutdown a held lease is released and `Ok` returned.
    pub async fn run(
        mut self,
        leading: watch::Sender<bool>,
        mut shutdown: watch::Receiver<bool>,
    ) -> Result<(), ElectionError> {
        let retry = self.config.retry_period;
        // Acquire.
        loop {
            if *shutdown.borrow() {
                return Ok(());
            }
            match self.try_acquire_or_renew().await {
                Ok(true) => break,
                Ok(false) => {}
                Err(e) => {
                    tracing::debug!(lease = %self.config.lease_name, "cannot acquire the lease yet: {e}")
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(retry) => {}
                _ = shutdown.changed() => {}
            }
        }
        tracing::info!(lease = %self.config.lease_name, identity = %self.config.identity, "became the leader");
        let _ = leading.send(true);
        // Renew.
        let mut last_renewal = Instant::now();
        loop {
            tokio::select! {
                _ = tokio::time::sleep(retry) => {}
                _ = shutdown.changed() => {}
            }
            if *shutdown.borrow() {
                if let Err(e) = self.release().await {
                    tracing::warn!(lease = %self.config.lease_name, "could not release the lease: {e}");
                }
                let _ = leading.send(false);
                return Ok(());
            }
            // The attempt may not outlast the deadline: a renewal that hangs (a slow API server,
            // a starved process) must not keep us leading past the moment a standby may take
            // over. A success counts from when the attempt *started*: the record it wrote is no
            // newer than that, so a standby's view of its expiry is never earlier.
            let started = Instant::now();
            let remaining = self
                .config
                .renew_deadline
                .saturating_sub(last_renewal.elapsed());
            let attempt = tokio::time::timeout(remaining, self.try_acquire_or_renew())
                .await
                .unwrap_or(Err(LeaseError::Timeout));
            match attempt {
                Ok(true) => last_renewal = started,
                Ok(false) => {
                    // Someone else holds it now: we are no longer the leader, whatever the deadline.
                    let _ = leading.send(false);
                    return Err(ElectionError::Lost {
                        lease: self.config.lease_name.clone(),
                        deadline: self.config.renew_deadline,
                    });
                }
                Err(e) => {
                    tracing::warn!(lease = %self.config.lease_name, "lease renewal failed: {e}")
                }
            }
            if last_renewal.elapsed() >= self.config.renew_deadline {
                self.leading = false;
                let _ = leading.send(false);
                return Err(ElectionError::Lost {
                    lease: self.config.lease_name.clone(),
                    deadline: self.config.renew_deadline,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests;
