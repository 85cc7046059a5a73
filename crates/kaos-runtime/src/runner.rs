//! The life of a controller process: logging, client, metrics and probes, leader election,
//! signals, and the exit code. A controller's `main` hands its reconcile loop to [`run`].

use std::future::Future;
use std::hash::{BuildHasher, RandomState};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::Stream;
use kube::runtime::controller::Action;
use tokio::sync::watch;

use crate::admin::{self, Health};
use crate::backoff::Backoff;
use crate::leader::{ElectionConfig, KubeLeaseStore, LeaderElector};
use crate::metrics::{Metrics, Outcome};
use crate::settings::{RuntimeArgs, bind_address};

/// What distinguishes one controller binary from another.
#[derive(Clone, Copy, Debug)]
pub struct ControllerId {
    /// `agent`, `modelapi`, `mcpserver`: the `controller` label of metrics.
    pub name: &'static str,
    /// The default Lease name, e.g. `kaos-agent-controller`; also the field manager.
    pub lease: &'static str,
    /// Kinds and phases for `kaos_resources`.
    pub kinds: &'static [(&'static str, &'static [&'static str])],
}

/// The handle a controller gets: client, metrics, leadership and shutdown.
#[derive(Clone)]
pub struct Runtime {
    pub client: kube::Client,
    pub metrics: Arc<Metrics>,
    pub args: RuntimeArgs,
    pub id: ControllerId,
    leading: watch::Receiver<bool>,
    shutdown: watch::Receiver<bool>,
    /// True once every cache the controllers read has synced.
    synced: Arc<watch::Sender<bool>>,
    health: Arc<Health>,
    backoff: Arc<Backoff>,
}

impl Runtime {
    /// A runtime for tests: always the leader, never shut down unless `shutdown` says so.
    pub fn for_tests(
        client: kube::Client,
        id: ControllerId,
        args: RuntimeArgs,
    ) -> (Self, watch::Sender<bool>) {
        let (_, leading) = watch::channel(true);
        let (runtime, shutdown) = Self::for_tests_with_leader(client, id, args, leading);
        runtime.metrics.set_leader(id.lease, true);
        (runtime, shutdown)
    }

    /// A runtime for tests whose leadership follows `leading` (`leader_election_master_status`
    /// and the leader-only metrics follow it once a Tokio runtime runs the mirroring task).
    pub fn for_tests_with_leader(
        client: kube::Client,
        id: ControllerId,
        args: RuntimeArgs,
        leading: watch::Receiver<bool>,
    ) -> (Self, watch::Sender<bool>) {
        let (shutdown_tx, shutdown) = watch::channel(false);
        let metrics = Arc::new(Metrics::new(id.name, id.lease, "test", id.kinds));
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(mirror_leadership(
                metrics.clone(),
                id.lease.to_string(),
                leading.clone(),
            ));
        }
        let runtime = Self {
            client,
            metrics,
            args,
            id,
            leading,
            shutdown,
            synced: Arc::new(watch::Sender::new(false)),
            health: Arc::default(),
            backoff: Arc::default(),
        };
        (runtime, shutdown_tx)
    }

    /// The field manager of every write this controller makes.
    pub fn field_manager(&self) -> &'static str {
        self.id.lease
    }

    pub fn is_leader(&self) -> bool {
        *self.leading.borrow()
    }

    /// Emits once each time this replica becomes the leader (and at once if it already is), to
    /// reconcile everything from the warm caches; never before the caches have synced.
    pub fn leadership_gained(&self) -> impl Stream<Item = ()> + Send + 'static {
        let leading = self.leading.clone();
        let synced = self.synced.subscribe();
        futures::stream::unfold((leading, false), move |(mut rx, mut was)| {
            let mut synced = synced.clone();
            async move {
                let _ = synced.wait_for(|s| *s).await;
                loop {
                    let now = *rx.borrow_and_update();
                    if now && !was {
                        return Some(((), (rx, true)));
                    }
                    was = now;
                    rx.changed().await.ok()?;
                }
            }
        })
    }

    /// Whether every cache the controllers read has synced (readiness).
    pub fn is_synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// Resolves when the process is asked to stop.
    pub fn shutdown_signal(&self) -> impl Future<Output = ()> + Send + Sync + 'static {
        let mut shutdown = self.shutdown.clone();
        async move {
            let _ = shutdown.wait_for(|s| *s).await;
        }
    }

    /// Marks the process ready, and lets the leader reconcile, once every one of `synced` has
    /// resolved (the caches the controllers read): a new leader never acts on half-filled
    /// caches ("ModelAPI not found" for one that exists).
    pub fn mark_ready_when(&self, synced: Vec<futures::future::BoxFuture<'static, ()>>) {
        let health = self.health.clone();
        let flag = self.synced.clone();
        tokio::spawn(async move {
            futures::future::join_all(synced).await;
            health.set_ready();
            flag.send_replace(true);
            tracing::info!("caches synced: ready");
        });
    }

    /// Keeps `kaos_resources{kind,phase}` up to date, every 5 s and at once when this replica
    /// becomes the leader: `visit` calls its argument with the phase of every object of `kind`
    /// (None counts as `Pending`), whose phases are those of [`ControllerId::kinds`]. A standby
    /// exports none (see [`Metrics::set_leader`]), so summing over replicas counts each
    /// resource once.
    pub fn track_phases(
        &self,
        kind: &'static str,
        visit: impl Fn(&mut dyn FnMut(Option<&'static str>)) + Send + 'static,
    ) {
        let phases = self
            .id
            .kinds
            .iter()
            .find(|(k, _)| *k == kind)
            .map_or(&[][..], |(_, phases)| phases);
        let metrics = self.metrics.clone();
        let mut shutdown = self.shutdown.clone();
        // Not `self.leading`: a tracker woken by the election before the metrics have opened the
        // family would count into a closed family and export nothing until the next tick.
        let mut leading = metrics.leading_exported();
        tokio::spawn(async move {
            loop {
                if *leading.borrow_and_update() {
                    let mut counts: Vec<(String, i64)> = Vec::new();
                    visit(&mut |phase| {
                        let phase = phase.unwrap_or("Pending");
                        match counts.iter_mut().find(|(p, _)| p == phase) {
                            Some((_, n)) => *n += 1,
                            None => counts.push((phase.to_string(), 1)),
                        }
                    });
                    metrics.set_resource_counts(kind, phases, &counts);
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(5)) => {}
                    Ok(()) = leading.changed() => {}
                    _ = shutdown.wait_for(|s| *s) => return,
                }
            }
        });
    }

    /// The namespaces to watch: the configured ones, or None for all namespaces.
    pub fn watch_namespaces(&self) -> Option<&[String]> {
        (!self.args.watch_namespaces.is_empty()).then_some(self.args.watch_namespaces.as_slice())
    }

    /// One entry per Controller to run: each configured namespace, or `None` for all namespaces.
    pub fn namespaces(&self) -> Vec<Option<String>> {
        match self.watch_namespaces() {
            Some(list) => list.iter().cloned().map(Some).collect(),
            None => vec![None],
        }
    }

    /// The event recorder of this controller (reported as its field manager and pod).
    pub fn events(&self) -> crate::events::Events {
        crate::events::Events::new(
            self.client.clone(),
            self.field_manager(),
            self.args.pod_name.clone(),
        )
    }

    /// Runs one reconcile of `key` if this replica leads (a standby does nothing and counts
    /// nothing), timing it and recording its outcome.
    pub async fn reconcile<E>(
        &self,
        key: &str,
        work: impl Future<Output = Result<Action, E>>,
    ) -> Result<Action, E> {
        if !self.is_leader() {
            self.metrics.workqueue.forget(key);
            return Ok(Action::await_change());
        }
        if !self.is_synced() {
            let _ = self.synced.subscribe().wait_for(|s| *s).await;
        }
        let timer = self.metrics.reconcile_started(key);
        let started = std::time::Instant::now();
        let result = work.await;
        let outcome = match &result {
            Ok(action) if *action == Action::await_change() => Outcome::Success,
            Ok(_) => Outcome::RequeueAfter,
            Err(_) => Outcome::Error,
        };
        // Inside kube-runtime's span, which names the object and why it was reconciled.
        tracing::debug!(?outcome, elapsed = ?started.elapsed(), "reconciled");
        timer.finish(outcome);
        if result.is_ok() {
            self.backoff.reset(key);
        }
        result
    }

    /// Notes that `key` (`namespace/name`) was queued for a reconcile (`workqueue_adds_total`,
    /// `workqueue_depth`). A standby reconciles nothing, so it queues nothing either.
    pub fn enqueued(&self, key: &str) {
        if self.is_leader() {
            self.metrics.workqueue.add(key);
        }
    }

    /// The retry after a failed reconcile of `key`: exponential per object.
    pub fn retry_after_error(&self, key: &str) -> Action {
        Action::requeue(self.backoff.next_delay(key))
    }
}

/// Keeps the leader-dependent metrics in step with `leading`.
async fn mirror_leadership(
    metrics: Arc<Metrics>,
    lease: String,
    mut leading: watch::Receiver<bool>,
) {
    loop {
        metrics.set_leader(&lease, *leading.borrow_and_update());
        if leading.changed().await.is_err() {
            return;
        }
    }
}

/// A unique election identity: the pod name plus a random suffix.
fn identity(pod_name: Option<&str>) -> String {
    let host = pod_name
        .map(String::from)
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "kaos-controller".into());
    // A randomly keyed hash: two replicas started in the same instant still differ.
    let suffix = RandomState::new().hash_one((std::process::id(), SystemTime::now()));
    format!("{host}_{:08x}", suffix as u32)
}

fn lease_namespace(args: &RuntimeArgs, client: &kube::Client) -> String {
    args.leader_election_namespace
        .clone()
        .or_else(|| args.pod_namespace.clone())
        .or_else(|| {
            std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
                .ok()
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| client.default_namespace().to_string())
}

async fn signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Runs a controller process to its end and returns its exit code: 0 after SIGTERM or Ctrl-C,
/// 1 when leadership was lost or anything failed.
pub async fn run<F, Fut>(args: RuntimeArgs, id: ControllerId, controller: F) -> ExitCode
where
    F: FnOnce(Runtime) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    crate::logging::init(args.log_format, args.log_level.as_deref());
    let result = match kube::Config::infer().await {
        Ok(config) => run_with(config, args, id, signal(), controller).await,
        Err(e) => Err(anyhow::anyhow!(
            "cannot find a Kubernetes configuration (in-cluster or KUBECONFIG): {e}"
        )),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

/// [`run`] with an explicit cluster configuration and shutdown trigger (for tests and tools).
pub async fn run_with<F, Fut>(
    config: kube::Config,
    args: RuntimeArgs,
    id: ControllerId,
    stop: impl Future<Output = ()> + Send + 'static,
    controller: F,
) -> anyhow::Result<()>
where
    F: FnOnce(Runtime) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let lease_name = args
        .leader_election_id
        .clone()
        .unwrap_or_else(|| id.lease.to_string());
    let metrics = Arc::new(Metrics::new(
        id.name,
        &lease_name,
        &crate::client::api_host(&config),
        id.kinds,
    ));
    metrics.set_max_concurrent_reconciles(args.max_concurrent_reconciles);
    let client = crate::client::build(config, metrics.clone())?;
    let health = Arc::new(Health::default());
    let metrics_address = bind_address(&args.metrics_bind_address).map_err(anyhow::Error::msg)?;
    let probe_address =
        bind_address(&args.health_probe_bind_address).map_err(anyhow::Error::msg)?;
    let secure = if args.metrics_secure && metrics_address.is_some() {
        Some(admin::SecureMetrics {
            tls: crate::metrics_tls::server_config(&args.metrics_cert_source())?,
            auth: Arc::new(crate::metrics_auth::MetricsAuth::new(client.clone())),
        })
    } else {
        None
    };
    let secure_metrics = secure.is_some();
    let (bound, _admin) = admin::serve(
        metrics_address,
        probe_address,
        metrics.clone(),
        health.clone(),
        secure,
    )
    .await?;
    tracing::info!(controller = id.name, addresses = ?bound, secure_metrics, "admin endpoints serving");

    let (shutdown_tx, shutdown) = watch::channel(false);
    let (release_tx, release) = watch::channel(false);
    let (leading_tx, leading) = watch::channel(!args.leader_elect);
    let election = if args.leader_elect {
        let namespace = lease_namespace(&args, &client);
        let mut election =
            ElectionConfig::new(&lease_name, &namespace, &identity(args.pod_name.as_deref()));
        election.lease_duration = args.lease_duration;
        election.renew_deadline = args.renew_deadline;
        election.retry_period = args.retry_period;
        election.call_timeout = args
            .renew_deadline
            .min(Duration::from_secs(5))
            .max(args.retry_period);
        tracing::info!(lease = %lease_name, %namespace, identity = %election.identity, "campaigning for leadership");
        let elector = LeaderElector::new(
            KubeLeaseStore::new(client.clone(), &namespace, &lease_name),
            election,
        );
        Some(tokio::spawn(elector.run(leading_tx, release)))
    } else {
        drop(leading_tx);
        None
    };
    tokio::spawn(mirror_leadership(
        metrics.clone(),
        lease_name.clone(),
        leading.clone(),
    ));
    tokio::spawn(async move {
        stop.await;
        tracing::info!("shutting down");
        let _ = shutdown_tx.send(true);
    });

    let elected = args.leader_elect;
    let runtime = Runtime {
        client,
        metrics,
        args,
        id,
        leading: leading.clone(),
        shutdown,
        synced: Arc::new(watch::Sender::new(false)),
        health,
        backoff: Arc::default(),
    };
    let mut lost = leading.clone();
    let lost_leadership = async move {
        // Only a replica that led and then stopped leading has lost it.
        let _ = lost.wait_for(|l| *l).await;
        let _ = lost.wait_for(|l| !*l).await;
    };
    let outcome = tokio::select! {
        result = controller(runtime) => result,
        _ = lost_leadership, if elected => Err(anyhow::anyhow!("lost leadership: exiting so a fresh process can campaign again")),
    };
    // Stop reconciling first, then hand the lease over.
    let _ = release_tx.send(true);
    if let Some(election) = election {
        match tokio::time::timeout(Duration::from_secs(5), election).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => return Err(e.into()),
            Ok(Err(e)) => return Err(e.into()),
            Err(_) => tracing::warn!("the lease was not released in time"),
        }
    }
    outcome
}
