//! An in-process cluster for controller tests: kaos-testkit with the CRDs installed, the
//! deployment simulator running, and a kube client talking to it without a network.

use std::future::Future;
use std::time::{Duration, SystemTime};

use kaos_testkit::{ApiServer, Cluster};

pub struct TestCluster {
    pub api: ApiServer,
    pub client: kube::Client,
}

impl TestCluster {
    /// A cluster whose Deployments turn ready 20 ms after each change.
    pub fn start() -> Self {
        let api = ApiServer::new(Cluster::default());
        kaos_testkit::manifests::apply_path(&api.cluster, &crate::repo_root().join("deploy/crds"))
            .expect("CRDs install");
        tokio::spawn(kaos_testkit::simulator::run(
            api.cluster.clone(),
            Duration::from_millis(20),
        ));
        let client = kube::Client::new(api.clone().router(), "default");
        Self { api, client }
    }

    /// Applies YAML manifests (server-side apply as the test's own field manager).
    pub fn apply(&self, yaml: &str) {
        kaos_testkit::manifests::apply_yaml(&self.api.cluster, yaml).expect("manifests apply");
    }

    /// The writes (create, update, patch, delete) made through the API since `since`.
    pub fn writes_since(&self, since: SystemTime) -> Vec<String> {
        self.api
            .audit
            .since(since)
            .into_iter()
            .filter(|r| r.is_write())
            .map(|r| format!("{} {}", r.verb, r.path))
            .collect()
    }

    /// Waits `window` and returns the writes made meanwhile.
    pub async fn writes_during(&self, window: Duration) -> Vec<String> {
        let from = SystemTime::now();
        tokio::time::sleep(window).await;
        self.writes_since(from)
    }
}

/// Polls `check` every 20 ms until it returns Some, for at most 10 s; panics with `what`.
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    for _ in 0..500 {
        if let Some(value) = check().await {
            return value;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting until {what}");
}
