//! The election state machine under paused time, against an in-memory lease store.

use std::sync::{Arc, Mutex};

use super::*;

/// A lease store with optimistic concurrency and a switch that makes it unreachable.
#[derive(Clone, Default)]
struct FakeStore {
    lease: Arc<Mutex<Option<Lease>>>,
    version: Arc<Mutex<u64>>,
    unreachable: Arc<Mutex<bool>>,
    /// Calls never answer (a starved or overloaded API server).
    hanging: Arc<Mutex<bool>>,
}

impl FakeStore {
    fn holder(&self) -> Option<String> {
        let lease = self.lease.lock().expect("lock");
        lease
            .as_ref()
            .and_then(|l| l.spec.as_ref())
            .and_then(|s| s.holder_identity.clone())
    }

    fn set_unreachable(&self, down: bool) {
        *self.unreachable.lock().expect("lock") = down;
    }

    /// Overwrites the holder's record as a foreign writer would (e.g. with a skewed clock).
    fn set_renew_time(&self, time: jiff::Timestamp) {
        let mut lease = self.lease.lock().expect("lock");
        if let Some(spec) = lease.as_mut().and_then(|l| l.spec.as_mut()) {
            spec.renew_time = Some(MicroTime(time));
        }
    }

    fn set_hanging(&self, hang: bool) {
        *self.hanging.lock().expect("lock") = hang;
    }

    async fn check(&self) -> Result<(), LeaseError> {
        let hanging = *self.hanging.lock().expect("lock");
        if hanging {
            std::future::pending::<()>().await;
        }
        if *self.unreachable.lock().expect("lock") {
            Err(LeaseError::Api("connection refused".into()))
        } else {
            Ok(())
        }
    }
}

impl LeaseStore for FakeStore {
    async fn get(&self) -> Result<Option<Lease>, LeaseError> {
        self.check().await?;
        Ok(self.lease.lock().expect("lock").clone())
    }

    async fn create(&self, mut lease: Lease) -> Result<Lease, LeaseError> {
        self.check().await?;
        let mut stored = self.lease.lock().expect("lock");
        if stored.is_some() {
            return Err(LeaseError::Conflict);
        }
        let mut version = self.version.lock().expect("lock");
        *version += 1;
        lease.metadata.resource_version = Some(version.to_string());
        *stored = Some(lease.clone());
        Ok(lease)
    }

    async fn replace(&self, mut lease: Lease) -> Result<Lease, LeaseError> {
        self.check().await?;
        let mut stored = self.lease.lock().expect("lock");
        let current = stored
            .as_ref()
            .and_then(|l| l.metadata.resource_version.clone());
        if current != lease.metadata.resource_version {
            return Err(LeaseError::Conflict);
        }
        let mut version = self.version.lock().expect("lock");
        *version += 1;
        lease.metadata.resource_version = Some(version.to_string());
        *stored = Some(lease.clone());
        Ok(lease)
    }
}

fn elector(store: &FakeStore, id: &str) -> LeaderElector<FakeStore> {
    LeaderElector::new(
        store.clone(),
        ElectionConfig::new("kaos-agent-controller", "kaos-system", id),
    )
}

#[tokio::test(start_paused = true)]
async fn acquires_a_missing_lease_and_renews_it() {
    let store = FakeStore::default();
    let mut a = elector(&store, "a");
    assert_eq!(a.try_acquire_or_renew().await, Ok(true));
    assert_eq!(store.holder().as_deref(), Some("a"));
    tokio::time::advance(Duration::from_secs(2)).await;
    assert_eq!(a.try_acquire_or_renew().await, Ok(true));
    let lease = store.lease.lock().expect("lock").clone().expect("lease");
    let spec = lease.spec.expect("spec");
    assert_eq!(spec.lease_duration_seconds, Some(15));
    assert_eq!(spec.lease_transitions, Some(0));
}

#[tokio::test(start_paused = true)]
async fn takes_over_only_after_local_expiry_whatever_the_holders_timestamps_say() {
    let store = FakeStore::default();
    let mut a = elector(&store, "a");
    let mut b = elector(&store, "b");
    assert_eq!(a.try_acquire_or_renew().await, Ok(true));
    // The holder's renewTime is far in the past (clock skew): b must not trust it.
    store.set_renew_time(jiff::Timestamp::from_second(946_684_800).expect("2000-01-01"));
    assert_eq!(
        b.try_acquire_or_renew().await,
        Ok(false),
        "first sight starts b's own clock"
    );
    tokio::time::advance(Duration::from_secs(14)).await;
    assert_eq!(
        b.try_acquire_or_renew().await,
        Ok(false),
        "14 s after first sight: not expired"
    );
    tokio::time::advance(Duration::from_secs(2)).await;
    assert_eq!(
        b.try_acquire_or_renew().await,
        Ok(true),
        "16 s without a change: expired"
    );
    let spec = store
        .lease
        .lock()
        .expect("lock")
        .clone()
        .and_then(|l| l.spec)
        .expect("spec");
    assert_eq!(spec.holder_identity.as_deref(), Some("b"));
    assert_eq!(spec.lease_transitions, Some(1));
    // a sees someone else holding it and is no longer the leader.
    assert_eq!(a.try_acquire_or_renew().await, Ok(false));
    assert!(!a.is_leader());
}

#[tokio::test(start_paused = true)]
async fn renewals_keep_a_standby_waiting() {
    let store = FakeStore::default();
    let mut a = elector(&store, "a");
    let mut b = elector(&store, "b");
    assert_eq!(a.try_acquire_or_renew().await, Ok(true));
    // A renewal time far in the future must not extend anything either.
    store.set_renew_time(jiff::Timestamp::from_second(4_102_444_800).expect("2100-01-01"));
    for _ in 0..20 {
        assert_eq!(b.try_acquire_or_renew().await, Ok(false));
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(a.try_acquire_or_renew().await, Ok(true));
    }
}

#[tokio::test(start_paused = true)]
async fn a_stale_read_cannot_win() {
    let store = FakeStore::default();
    let mut a = elector(&store, "a");
    assert_eq!(a.try_acquire_or_renew().await, Ok(true));
    // b read the lease, then a renewed: b's replace carries an old resourceVersion.
    let stale = store.lease.lock().expect("lock").clone().expect("lease");
    tokio::time::advance(Duration::from_secs(2)).await;
    assert_eq!(a.try_acquire_or_renew().await, Ok(true));
    let mut grab = stale;
    grab.spec.as_mut().expect("spec").holder_identity = Some("b".into());
    assert_eq!(store.replace(grab).await, Err(LeaseError::Conflict));
    assert_eq!(store.holder().as_deref(), Some("a"));
}

#[tokio::test(start_paused = true)]
async fn a_leader_that_cannot_renew_gives_up_after_the_renew_deadline() {
    let store = FakeStore::default();
    let (leading_tx, leading) = watch::channel(false);
    let (_shutdown_tx, shutdown) = watch::channel(false);
    let run = tokio::spawn(elector(&store, "a").run(leading_tx, shutdown));
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(*leading.borrow(), "acquired");
    store.set_unreachable(true);
    let started = Instant::now();
    let result = run.await.expect("task");
    assert_eq!(
        result,
        Err(ElectionError::Lost {
            lease: "kaos-agent-controller".into(),
            deadline: Duration::from_secs(10)
        })
    );
    let waited = started.elapsed();
    assert!(
        // 10 s after the last renewal (the acquisition, 10 ms before the store went away).
        waited >= Duration::from_millis(9_990) && waited <= Duration::from_secs(10),
        "gave up after {waited:?}"
    );
    assert!(!*leading.borrow());
}

#[tokio::test(start_paused = true)]
async fn a_leader_whose_renewal_hangs_steps_down_at_the_deadline_not_after_the_call_timeout() {
    let store = FakeStore::default();
    let mut config = ElectionConfig::new("kaos-agent-controller", "kaos-system", "a");
    // Calls may take longer than the renew deadline: the deadline still wins.
    config.call_timeout = Duration::from_secs(30);
    let (leading_tx, mut leading) = watch::channel(false);
    let (_shutdown_tx, shutdown) = watch::channel(false);
    let acquired = Instant::now();
    let run = tokio::spawn(LeaderElector::new(store.clone(), config).run(leading_tx, shutdown));
    leading.wait_for(|l| *l).await.expect("acquired");
    // One more renewal, then every call hangs.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    store.set_hanging(true);
    let last_renewal_started = acquired + Duration::from_secs(2);
    leading.wait_for(|l| !*l).await.expect("stepped down");
    let stepped_down = Instant::now();
    assert!(
        stepped_down <= last_renewal_started + Duration::from_secs(10),
        "a standby may take over 15 s after it saw the last renewal; the leader stepped down \
         {:?} after that renewal started (deadline 10 s)",
        stepped_down - last_renewal_started
    );
    assert!(matches!(
        run.await.expect("task"),
        Err(ElectionError::Lost { .. })
    ));
}

#[tokio::test(start_paused = true)]
async fn shutdown_releases_the_lease_for_a_fast_handover() {
    let store = FakeStore::default();
    let (a_leading_tx, a_leading) = watch::channel(false);
    let (a_shutdown_tx, a_shutdown) = watch::channel(false);
    let a = tokio::spawn(elector(&store, "a").run(a_leading_tx, a_shutdown));
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(*a_leading.borrow());

    let (b_leading_tx, mut b_leading) = watch::channel(false);
    let (_b_shutdown_tx, b_shutdown) = watch::channel(false);
    let _b = tokio::spawn(elector(&store, "b").run(b_leading_tx, b_shutdown));
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(!*b_leading.borrow(), "b waits while a renews");

    let released_at = Instant::now();
    a_shutdown_tx.send(true).expect("shutdown");
    assert_eq!(a.await.expect("task"), Ok(()));
    assert_eq!(store.holder(), None, "released");
    b_leading.wait_for(|l| *l).await.expect("b leads");
    assert!(
        released_at.elapsed() <= Duration::from_secs(2),
        "handover within one retry period"
    );
}
