//! Fences: waiting until the in-process controller has seen every change made so far and
//! finished the work those changes caused, so that a test asserting "nothing else happened" (no
//! reconcile, no write) asserts it *after* the work would have happened, not before it started.
//!
//! Three things are observed, none of them a clock:
//! - **the watches**: the client of a cluster started with [`TestCluster::start_fenced`] reads
//!   every watch response as its reader (the controller) consumes it, so the harness knows, per
//!   open watch, the resourceVersion up to which everything was delivered: its events and the
//!   testkit's bookmarks (sent every 25 ms on such a cluster), each of which promises that every
//!   earlier event of its watch was sent;
//! - **the deployment simulator**: every Deployment has the status the simulator settles it to;
//! - **the controller** ([`ControllerTest::caught_up`]): its work queue is empty and no reconcile
//!   runs (`workqueue_depth`, `controller_runtime_active_workers` of its metrics).
//!
//! [`TestCluster::caught_up_and`] waits until all three hold for the cluster's resourceVersion
//! when it started, then again for whatever was written meanwhile (the controller's own writes,
//! the simulator's), until a round sees no new write. A fence is meant for a controller that has
//! started its watches (after its first convergence).

use std::time::{Duration, Instant};

use kaos_testkit::ApiServer;
use kaos_testkit::cluster::ListOptions;
use serde_json::Value;

use crate::cluster::{PATIENCE, TestCluster};
use crate::controller::ControllerTest;
use crate::processes::family_total;
use crate::watch_tap::{Watches, tapped_client};

/// How often the testkit of a fenced cluster sends each watch a bookmark: a fence on a watch
/// with nothing to deliver waits this long.
pub const BOOKMARK_INTERVAL: Duration = Duration::from_millis(25);

impl TestCluster {
    /// [`TestCluster::start`] with the watches of its client observed and bookmarks every
    /// [`BOOKMARK_INTERVAL`], for [`ControllerTest::caught_up`] and [`TestCluster::caught_up_and`].
    pub fn start_fenced() -> Self {
        let mut api = ApiServer::new(kaos_testkit::Cluster::default());
        api.bookmark_interval = BOOKMARK_INTERVAL;
        let watches = Watches::tapped();
        let client = tapped_client(&api, &watches);
        Self::start_on(api, client, watches)
    }

    /// Deployments the simulator has yet to settle (their status is not the one it writes).
    fn unsettled_deployments(&self) -> Vec<String> {
        let cluster = &self.api.cluster;
        let Some(rt) = cluster.resource("apps", "v1", "deployments") else {
            return Vec::new();
        };
        let Ok(list) = cluster.list(&rt, "", &ListOptions::default()) else {
            return Vec::new();
        };
        let strip = |status: &Value| {
            let mut status = status.clone();
            for condition in status["conditions"].as_array_mut().into_iter().flatten() {
                if let Some(condition) = condition.as_object_mut() {
                    condition.remove("lastUpdateTime");
                    condition.remove("lastTransitionTime");
                }
            }
            status
        };
        list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|d| d["metadata"]["deletionTimestamp"].is_null())
            .filter(|d| {
                let settled = kaos_testkit::simulator::settled_status(d);
                d.get("status").map(strip) != Some(strip(&settled))
            })
            .map(|d| {
                format!(
                    "Deployment {}/{} not settled by the simulator",
                    d["metadata"]["namespace"].as_str().unwrap_or(""),
                    d["metadata"]["name"].as_str().unwrap_or("")
                )
            })
            .collect()
    }

    /// Waits until every watch of the client has delivered every change made so far, the
    /// simulator has settled every Deployment and `busy` (what else must be done: a
    /// controller's queue) says None; then again for the changes made meanwhile, until a round
    /// sees none. Panics after [`PATIENCE`] with what was still pending.
    pub async fn caught_up_and(&self, busy: impl Fn() -> Option<String>) {
        const POLL: Duration = Duration::from_millis(5);
        let deadline = Instant::now() + PATIENCE;
        let mut version = self.api.cluster.resource_version();
        loop {
            loop {
                let mut pending = self.watches.behind(version);
                pending.extend(self.unsettled_deployments());
                pending.extend(busy());
                if pending.is_empty() {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "not caught up with resourceVersion {version} after {PATIENCE:?}: {pending:#?}"
                );
                // The poll of a wait on the conditions above, not a fence itself.
                tokio::time::sleep(POLL).await;
            }
            let now = self.api.cluster.resource_version();
            if now == version {
                return;
            }
            version = now;
        }
    }

    /// [`Self::caught_up_and`] with nothing else to wait for (no controller in process).
    pub async fn caught_up(&self) {
        self.caught_up_and(|| None).await;
    }
}

impl ControllerTest {
    /// The fence before asserting that nothing else happened: waits until the controller has
    /// been delivered every change made so far and has finished the reconciles they queued,
    /// the simulator has settled every Deployment, and the writes all that made were delivered
    /// and handled in turn ([`TestCluster::caught_up_and`]). The cluster must have been started
    /// with [`TestCluster::start_fenced`].
    pub async fn caught_up(&self) {
        let metrics = self.controller.runtime.metrics.clone();
        self.cluster
            .caught_up_and(|| {
                let text = metrics.encode();
                let (queued, running) = (
                    family_total(&text, "workqueue_depth"),
                    family_total(&text, "controller_runtime_active_workers"),
                );
                (queued > 0.0 || running > 0.0).then(|| {
                    format!("the controller has {queued} objects queued, {running} reconciling")
                })
            })
            .await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use futures::StreamExt;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::PostParams;
    use kube::runtime::watcher;
    use kube::{Api, ResourceExt};
    use serde_json::json;

    use super::*;

    /// A watcher of ConfigMaps in a task of its own: the names it was sent so far.
    fn names_seen(client: kube::Client) -> Arc<Mutex<Vec<String>>> {
        let seen: Arc<Mutex<Vec<String>>> = Arc::default();
        let noted = seen.clone();
        let api = Api::<ConfigMap>::default_namespaced(client);
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(watcher(api, watcher::Config::default()));
            while let Some(event) = stream.next().await {
                if let Ok(watcher::Event::Apply(cm) | watcher::Event::InitApply(cm)) = event {
                    noted.lock().expect("names").push(cm.name_any());
                }
            }
        });
        seen
    }

    async fn create(cluster: &TestCluster, name: &str) {
        let cm: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": name}})).expect("ConfigMap");
        cluster
            .api::<ConfigMap>()
            .create(&PostParams::default(), &cm)
            .await
            .expect("created");
    }

    /// After the fence, what was written before it was delivered to the open watches: no poll
    /// of what the watcher saw, and no pause.
    #[tokio::test]
    async fn a_fence_waits_until_the_watches_delivered_every_change() {
        let cluster = TestCluster::start_fenced();
        let seen = names_seen(cluster.client.clone());
        crate::cluster::eventually("the watch is open", || async {
            (cluster.watches.started() == 1).then_some(())
        })
        .await;
        for round in 0..20 {
            let name = format!("cm-{round}");
            create(&cluster, &name).await;
            cluster.caught_up().await;
            assert!(
                seen.lock().expect("names").contains(&name),
                "{name} was delivered before the fence returned"
            );
        }
        // A watch with nothing to deliver catches up by the testkit's bookmarks: a Secret is
        // no change of ConfigMaps, but the version the fence waits for.
        let secret: k8s_openapi::api::core::v1::Secret =
            serde_json::from_value(json!({"metadata": {"name": "s"}})).expect("Secret");
        let secrets = cluster.api::<k8s_openapi::api::core::v1::Secret>();
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .expect("created");
        let version = cluster.api.cluster.resource_version();
        cluster.caught_up().await;
        assert!(cluster.watches.behind(version).is_empty());
        assert_eq!(cluster.watches.started(), 1, "one watch, never cut");
    }
}
