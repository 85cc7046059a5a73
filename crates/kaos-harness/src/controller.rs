//! A controller run in-process against a [`TestCluster`], as its binary runs it (always the
//! leader), until it is stopped or dropped.

use std::future::Future;
use std::ops::Deref;
use std::time::Duration;

use kaos_runtime::{ControllerId, Runtime, RuntimeArgs};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::cluster::TestCluster;

pub struct RunningController {
    pub runtime: Runtime,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl RunningController {
    /// Runs `run` (a controller's `controller::run`, given its settings) on a test runtime.
    pub fn start<F, Fut>(cluster: &TestCluster, id: ControllerId, args: RuntimeArgs, run: F) -> Self
    where
        F: FnOnce(Runtime) -> Fut,
        Fut: Future + Send + 'static,
        Fut::Output: Send + 'static,
    {
        let (runtime, stop) = Runtime::for_tests(cluster.client.clone(), id, args);
        let controller = run(runtime.clone());
        let task = tokio::spawn(async move {
            controller.await;
        });
        Self {
            runtime,
            stop,
            task,
        }
    }

    /// Reconciles run so far (every outcome), from the controller's metrics.
    pub fn reconciles(&self) -> f64 {
        self.runtime
            .metrics
            .encode()
            .lines()
            .filter(|l| l.starts_with("controller_runtime_reconcile_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// Stops the controller as a process stops (its work under way stops with it) and waits
    /// until it has.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let stopped = tokio::time::timeout(Duration::from_secs(10), self.task).await;
        assert!(stopped.is_ok(), "the controller stops");
    }
}

/// A cluster and one controller running against it: where a controller's tests start. It
/// derefs to its cluster, so tests read `h.apply(..)`, `h.until_phase(..)`.
pub struct ControllerTest {
    pub cluster: TestCluster,
    pub controller: RunningController,
}

impl ControllerTest {
    /// Runs the controller (`run`: its `controller::run`, given its settings) on `cluster`.
    pub fn start<F, Fut>(cluster: TestCluster, id: ControllerId, args: RuntimeArgs, run: F) -> Self
    where
        F: FnOnce(Runtime) -> Fut,
        Fut: Future + Send + 'static,
        Fut::Output: Send + 'static,
    {
        let controller = RunningController::start(&cluster, id, args, run);
        Self {
            cluster,
            controller,
        }
    }

    /// Waits `window` and returns the reconciles and the writes made meanwhile: both are none
    /// once the controller has settled.
    pub async fn idle(&self, window: Duration) -> (f64, Vec<String>) {
        let before = self.controller.reconciles();
        let writes = self.cluster.writes_during(window).await;
        (self.controller.reconciles() - before, writes)
    }
}

impl Deref for ControllerTest {
    type Target = TestCluster;

    fn deref(&self) -> &TestCluster {
        &self.cluster
    }
}
