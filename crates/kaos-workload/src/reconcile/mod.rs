//! The skeleton every workload controller shares, so each kind's reconcile reads "load
//! dependencies, build, converge, status":
//!
//! - [`crate::wiring`] builds the kube-runtime Controllers from slim caches and runs them;
//! - [`Core::reconcile`] runs one reconcile as the leader, once the caches have synced, with the
//!   finalizer added in the same pass and removed on deletion;
//! - the work queue's metrics (`workqueue_*`, [`kaos_runtime::workqueue`]) are observed around the
//!   Controller: every trigger stream counts its objects in, a reconcile takes them out;
//! - [`Core::converge`] writes the children ([`crate::converge`]), [`Core::write_status`] the
//!   status, each only when it differs from what the cache shows or this process just wrote.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kaos_runtime::Runtime;
use kaos_runtime::backoff::Backoff;
use kaos_runtime::error::{ReconcileError, Step, StepExt};
use kaos_runtime::events::Events;
use kube::api::{Api, Patch, PatchParams};
use kube::core::object::HasStatus;
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde_json::{Value, json};

use crate::build::status_report::{observe, summarize};
use crate::cache::Watched;
use crate::cache::deployment_view::DeploymentView;
use crate::conditions::now;
use crate::converge::expectations::{Expectations, Observed, Verdict};
use crate::converge::{Children, Converged, Parent};
use crate::desired::{ChildSet, Desired, Problem, Stuck};
use crate::hash::stable_hash;
use kaos_api::common::Phase;

/// How long a parent in conflict with an object it does not own waits before looking again
/// (the foreign object is outside our caches, so its deletion sends no event).
pub const CONFLICT_RECHECK: Duration = Duration::from_secs(10);

/// How often a parent whose pods read a missing Secret or ConfigMap looks again: from 1 s,
/// doubling to once a minute (those objects are outside our caches, so their creation sends no
/// event; reads only, never a write, while it waits).
fn reference_rechecks() -> Backoff {
    Backoff::new(Duration::from_secs(1), Duration::from_secs(60))
}

/// What a primary kind needs to be reconciled by the skeleton: a cached kind with a static type
/// whose status the controller writes and can tell apart.
pub trait Primary: Watched + Resource<DynamicType = ()> + StatusDigest {}

impl<K: Watched + Resource<DynamicType = ()> + StatusDigest> Primary for K {}

/// The [`status_digest`] of the status an object holds (None without one): the trigger compares
/// it with what it saw, so a status someone else wrote is put back.
pub trait StatusDigest {
    fn status_digest(&self) -> Option<u64>;
}

impl<K> StatusDigest for K
where
    K: HasStatus,
    K::Status: Serialize,
{
    fn status_digest(&self) -> Option<u64> {
        self.status().map(status_digest)
    }
}

/// A controller's context for kind `K`: the [`Core`] its objects are reconciled on, and the
/// reconcile of one object once the core has taken its turn (the finalizer added, a deletion
/// handled). [`crate::wiring::Controllers::add`] runs it with [`Core::reconcile`] and
/// [`Core::retry_after_error`] as the error policy.
pub trait Reconciles<K: Primary>: Send + Sync + 'static {
    fn core(&self) -> &Core;

    fn apply(&self, object: Arc<K>) -> impl Future<Output = Result<Action, ReconcileError>> + Send;

    /// What to do for an object being deleted before the core releases its finalizer (by
    /// default nothing: its children go by garbage collection).
    fn finalize(&self, object: &K) -> impl Future<Output = ()> + Send {
        let _ = object;
        std::future::ready(())
    }
}

/// What every reconcile of one controller shares.
#[derive(Clone)]
pub struct Core {
    pub runtime: Runtime,
    pub children: Children,
    pub events: Events,
    /// None for kinds that keep none (a MemoryStore, as in KAOS: nothing to finalize).
    pub finalizer: Option<&'static str>,
    /// Status writes this process made and the cache may not show yet (in the children's
    /// expectations, which forget a parent's entry when the watch reports it deleted).
    status_writes: Arc<Expectations>,
    /// Per parent, the next look at a missing reference.
    reference_rechecks: Arc<Backoff>,
}

impl Core {
    pub fn new(runtime: Runtime, children: Children, finalizer: Option<&'static str>) -> Self {
        let events = runtime.events();
        let status_writes = children.expectations.clone();
        Self {
            runtime,
            children,
            events,
            finalizer,
            status_writes,
            reference_rechecks: Arc::new(reference_rechecks()),
        }
    }

    /// Runs `apply` for `object` as the leader: adds the finalizer first (in the same pass),
    /// and on deletion releases the finalizer (children go by garbage collection).
    pub async fn reconcile<K, F, Fut>(
        &self,
        object: Arc<K>,
        apply: F,
    ) -> Result<Action, ReconcileError>
    where
        K: Primary,
        F: FnOnce(Arc<K>) -> Fut,
        Fut: Future<Output = Result<Action, ReconcileError>>,
    {
        let key = format!(
            "{}/{}",
            object.namespace().unwrap_or_default(),
            object.name_any()
        );
        let span = tracing::info_span!("reconcile", kind = %K::kind(&()), object = %key);
        let work = async {
            if object.meta().deletion_timestamp.is_some() {
                self.release(object.as_ref()).await?;
                return Ok(Action::await_change());
            }
            let object = self.ensure_finalizer(object).await?;
            match apply(object).await {
                // The namespace is being deleted and has taken a child first (the namespace
                // controller deletes kinds in no fixed order): nothing can be created there
                // again, and the object's own deletion event is on its way. Not an error.
                Err(e) if e.is_namespace_terminating() => {
                    tracing::debug!("namespace terminating, waiting for the deletion: {e}");
                    Ok(Action::await_change())
                }
                done => done,
            }
        };
        tracing::Instrument::instrument(self.runtime.reconcile(&key, work), span).await
    }

    /// Adds the finalizer if missing, returning the object as written. A cache behind the
    /// server does not hold the reconcile up: while it has not shown this process's own write
    /// of the finalizer, that write stands; a write refused because the server's object moved
    /// on (a 409, or a failed test of the finalizers) reads the server's object and goes on
    /// from it, rather than retrying on the stale cache until the watch catches up (its
    /// finalizer-only change triggers no reconcile, so only the growing error backoff did).
    async fn ensure_finalizer<K: Primary>(&self, object: Arc<K>) -> Result<Arc<K>, ReconcileError> {
        let Some(finalizer) = self.finalizer else {
            return Ok(object);
        };
        let key = finalizer_key(object.as_ref());
        if object.finalizers().iter().any(|f| f == finalizer) {
            // The cache shows it: no write of it is pending any more, so no entry is kept.
            self.status_writes.forget(&key);
            return Ok(object);
        }
        let seen = Observed {
            resource_version: object.meta().resource_version.as_deref(),
        };
        if self.status_writes.verdict(&key, finalizer, Some(seen)) == Verdict::Pending {
            return Ok(object);
        }
        let written = match self.add_finalizer(object.as_ref(), finalizer).await {
            Err(e) if e.is_conflict() => {
                let fresh = self
                    .api::<K>(&object)
                    .get(&object.name_any())
                    .await
                    .step(Step::AddFinalizer, || {
                        format!("{} {}", K::kind(&()), object.name_any())
                    })?;
                if fresh.meta().deletion_timestamp.is_some() {
                    // Its deletion event is on its way and releases it.
                    return Err(e);
                }
                if fresh.finalizers().iter().any(|f| f == finalizer) {
                    return Ok(Arc::new(fresh));
                }
                self.add_finalizer(&fresh, finalizer).await?
            }
            written => written?,
        };
        self.status_writes.wrote(
            key,
            finalizer.to_string(),
            seen.resource_version,
            written.meta().resource_version.clone(),
            None,
        );
        Ok(Arc::new(written))
    }

    /// Adds `finalizer` to the finalizers `object` shows, if the server's still are those.
    async fn add_finalizer<K: Primary>(
        &self,
        object: &K,
        finalizer: &str,
    ) -> Result<K, ReconcileError> {
        let patch = if object.meta().finalizers.is_none() {
            json!([
                {"op": "test", "path": "/metadata/finalizers", "value": null},
                {"op": "add", "path": "/metadata/finalizers", "value": [finalizer]},
            ])
        } else {
            json!([
                {"op": "test", "path": "/metadata/finalizers", "value": object.finalizers()},
                {"op": "add", "path": "/metadata/finalizers/-", "value": finalizer},
            ])
        };
        self.api::<K>(object)
            .patch(
                &object.name_any(),
                &PatchParams::default(),
                &json_patch(patch),
            )
            .await
            .step(Step::AddFinalizer, || {
                format!("{} {}", K::kind(&()), object.name_any())
            })
    }

    /// Removes the finalizer of an object being deleted.
    async fn release<K: Primary>(&self, object: &K) -> Result<(), ReconcileError> {
        let Some(finalizer) = self.finalizer else {
            return Ok(());
        };
        let Some(index) = object.finalizers().iter().position(|f| f == finalizer) else {
            return Ok(());
        };
        let path = format!("/metadata/finalizers/{index}");
        let patch = json!([
            {"op": "test", "path": path, "value": finalizer},
            {"op": "remove", "path": path},
        ]);
        match self
            .api::<K>(object)
            .patch(
                &object.name_any(),
                &PatchParams::default(),
                &json_patch(patch),
            )
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.is_not_found() => {}
            Err(e) => {
                return Err(ReconcileError::new(
                    Step::RemoveFinalizer,
                    format!("{} {}", K::kind(&()), object.name_any()),
                    e,
                ));
            }
        }
        let key = status_key(object);
        self.reference_rechecks
            .reset(&format!("{}/{}", key.1, key.2));
        for key in parent_keys(object) {
            self.status_writes.forget(&key);
        }
        Ok(())
    }

    fn api<K: Primary>(&self, object: &K) -> Api<K> {
        Api::namespaced(
            self.runtime.client.clone(),
            &object.namespace().unwrap_or_default(),
        )
    }

    /// Converges the children of `parent` to `set` and publishes a Normal event for the writes.
    pub async fn converge<K: Primary>(
        &self,
        parent: &K,
        set: ChildSet,
    ) -> Result<Converged, ReconcileError> {
        let namespace = parent.namespace().unwrap_or_default();
        let uid = parent.uid().unwrap_or_default();
        let converged = self
            .children
            .converge(
                &Parent {
                    namespace: &namespace,
                    uid: &uid,
                    field_manager: self.runtime.field_manager(),
                    client: &self.runtime.client,
                },
                set,
            )
            .await?;
        if !converged.changes.is_empty() {
            self.events
                .normal(parent, "Applied", converged.changes.join(", "))
                .await;
        }
        Ok(converged)
    }

    /// Server-side applies `desired` as the status of `object` unless the cache already shows
    /// it (`current`: the [`status_digest`] of the cached status) or this process just wrote
    /// it; when it writes and `problem` is set (a reason and a message), publishes it as a
    /// Warning event. Returns whether it wrote.
    pub async fn write_status<K, S>(
        &self,
        object: &K,
        current: Option<u64>,
        desired: &S,
        problem: Option<(&str, &str)>,
    ) -> Result<bool, ReconcileError>
    where
        K: Primary,
        S: Serialize,
    {
        if current == Some(status_digest(desired)) {
            return Ok(false);
        }
        let key = status_key(object);
        let hash = status_hash(desired);
        let seen = Observed {
            resource_version: object.meta().resource_version.as_deref(),
        };
        if self.status_writes.verdict(&key, &hash, Some(seen)) != Verdict::Unknown {
            return Ok(false);
        }
        let name = object.name_any();
        let body = json!({
            "apiVersion": K::api_version(&()),
            "kind": K::kind(&()),
            "metadata": {"name": name},
            "status": desired,
        });
        let written = self
            .api::<K>(object)
            .patch_status(
                &name,
                &PatchParams::apply(self.runtime.field_manager()).force(),
                &Patch::Apply(body),
            )
            .await
            .step(Step::PatchStatus, || format!("{} {name}", K::kind(&())))?;
        self.status_writes.wrote(
            key,
            hash,
            seen.resource_version,
            written.meta().resource_version.clone(),
            None,
        );
        if let Some((reason, message)) = problem {
            self.events
                .warning(object, reason, message.to_string())
                .await;
        }
        Ok(true)
    }

    /// The end of every reconcile: writes the status (see [`Core::write_status`]) and says
    /// when to look again: on the next change, every [`CONFLICT_RECHECK`] while a child's
    /// name is taken by an object this resource does not own, or with a growing interval (1 s
    /// to 60 s) while its pods read a Secret or ConfigMap that is missing.
    pub async fn finish<K, S>(
        &self,
        object: &K,
        current: Option<u64>,
        desired: &S,
        problem: Option<(String, String)>,
        converged: &Converged,
    ) -> Result<Action, ReconcileError>
    where
        K: Primary,
        S: Serialize,
    {
        let problem = problem.as_ref().map(|(r, m)| (r.as_str(), m.as_str()));
        self.write_status(object, current, desired, problem).await?;
        let (_, namespace, name) = status_key(object);
        let key = format!("{namespace}/{name}");
        if converged.missing.is_empty() {
            self.reference_rechecks.reset(&key);
        }
        Ok(if !converged.conflicts.is_empty() {
            Action::requeue(CONFLICT_RECHECK)
        } else if !converged.missing.is_empty() {
            Action::requeue(self.reference_rechecks.next_delay(&key))
        } else {
            Action::await_change()
        })
    }

    /// The end of every workload reconcile: the children `result` asks for converged (none
    /// while it is a problem: what runs is left as it is), then the status `status` makes of the
    /// outcome (a child conflict, if any), its Deployment `deployment` as the cache now shows it
    /// and the time, written with [`Core::finish`]. A `Failed` problem, a conflict or a failed
    /// rollout is also a Warning event (once, with the status that shows it); a wait is not.
    pub async fn converge_built<K, S>(
        &self,
        object: &K,
        result: &Result<Desired, Problem>,
        deployment: &str,
        status: impl FnOnce(Option<(&'static str, String)>, Option<&DeploymentView>, Time) -> S,
    ) -> Result<Action, ReconcileError>
    where
        K: Primary,
        S: Serialize,
    {
        let converged = match result {
            Ok(desired) => self.converge(object, desired.clone().into_set()).await?,
            Err(_) => Converged::default(),
        };
        let namespace = object.namespace().unwrap_or_default();
        let deployment = self.children.deployment(&namespace, deployment);
        let desired_status = status(converged.problem(), deployment.as_deref(), now());
        let problem = match result {
            Err(p) if p.stuck == Stuck::Failed => Some((p.reason.to_string(), p.message.clone())),
            Err(_) => None,
            Ok(_) => converged
                .problem()
                .map(|(r, m)| (r.to_string(), m))
                .or_else(|| {
                    // A rollout that failed (ProgressDeadlineExceeded with nothing ready).
                    let summary = summarize(None, &observe(deployment.as_deref()));
                    (summary.phase == Phase::Failed)
                        .then(|| (summary.reason.to_string(), summary.message))
                }),
        };
        let current = object.status_digest();
        self.finish(object, current, &desired_status, problem, &converged)
            .await
    }

    /// The error policy of every controller: log by step, count, warn, and retry with
    /// per-object backoff.
    pub fn retry_after_error<K: Primary>(&self, object: &K, error: &ReconcileError) -> Action {
        let key = format!(
            "{}/{}",
            object.namespace().unwrap_or_default(),
            object.name_any()
        );
        let step = error.step.metric_label();
        self.runtime.metrics.record_error_step(step);
        if error.is_conflict() {
            // A write based on a cache that had not caught up yet: the retry reads the newer object.
            tracing::debug!(object = %key, step, "reconcile raced a newer version, retrying: {error}");
        } else {
            tracing::warn!(object = %key, step, "reconcile failed: {error}");
            let events = self.events.clone();
            let object = object.clone();
            let (reason, note) = (error.step.event_reason(), error.to_string());
            tokio::spawn(async move { events.warning(&object, reason, note).await });
        }
        self.runtime.retry_after_error(&key)
    }
}

fn json_patch(patch: Value) -> Patch<()> {
    match serde_json::from_value(patch) {
        Ok(p) => Patch::Json(p),
        // The literals above are valid JSON patches.
        Err(_) => Patch::Json(json_patch::Patch(Vec::new())),
    }
}

/// A parent's own entries in the expectations (its status and its finalizer), forgotten with it.
pub(crate) fn parent_keys<K: Primary>(object: &K) -> [crate::converge::expectations::Key; 2] {
    [status_key(object), finalizer_key(object)]
}

/// The finalizer's entry in the expectations: this process added it at that resourceVersion.
fn finalizer_key<K: Primary>(object: &K) -> crate::converge::expectations::Key {
    (
        "finalizer",
        object.namespace().unwrap_or_default(),
        format!("{}/{}", K::kind(&()), object.name_any()),
    )
}

pub(crate) fn status_key<K: Primary>(object: &K) -> crate::converge::expectations::Key {
    (
        "status",
        object.namespace().unwrap_or_default(),
        format!("{}/{}", K::kind(&()), object.name_any()),
    )
}

/// A digest of a whole status, to tell whether a desired status equals the cached one without
/// the cache keeping the status (two statuses that serialize alike are equal; two different
/// ones share a digest with odds of ~1 in 2^64).
pub fn status_digest<S: Serialize>(status: &S) -> u64 {
    let mut hasher = std::hash::DefaultHasher::new();
    std::hash::Hash::hash(&serde_json::to_vec(status).unwrap_or_default(), &mut hasher);
    std::hash::Hasher::finish(&hasher)
}

/// The hash of a status without its conditions' transition times, which a reconcile sets to
/// "now" and which alone must not make two otherwise equal statuses differ.
fn status_hash<S: Serialize>(status: &S) -> String {
    let mut value = serde_json::to_value(status).unwrap_or(Value::Null);
    if let Some(conditions) = value.get_mut("conditions").and_then(Value::as_array_mut) {
        for condition in conditions {
            if let Some(c) = condition.as_object_mut() {
                c.remove("lastTransitionTime");
            }
        }
    }
    stable_hash(&value)
}
