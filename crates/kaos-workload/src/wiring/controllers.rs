//! Every Controller of one process, whatever its kinds: readiness once every cache it reads has
//! synced, the `kaos_resources` gauge of each kind, and shutdown, written once for every
//! controller binary.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;
use kaos_runtime::Runtime;
use kube::Resource;
use kube::runtime::reflector::Store;

use super::Wiring;
use crate::reconcile::{Primary, Reconciles};

/// Reads the phase of every object of one kind in one cache.
type PhaseReader = Box<dyn Fn(&mut dyn FnMut(Option<&'static str>)) + Send + Sync>;

/// Every Controller one process runs (a kind per watched namespace, or one for all), and the
/// caches they read. [`Controllers::run`] marks the process ready once all of them have synced,
/// keeps each kind's `kaos_resources` gauge, and runs them until shutdown.
pub struct Controllers {
    runtime: Runtime,
    synced: Vec<BoxFuture<'static, ()>>,
    running: Vec<BoxFuture<'static, ()>>,
    phases: BTreeMap<&'static str, Vec<PhaseReader>>,
}

impl Controllers {
    pub fn new(runtime: &Runtime) -> Self {
        Self {
            runtime: runtime.clone(),
            synced: Vec::new(),
            running: Vec::new(),
            phases: BTreeMap::new(),
        }
    }

    /// A dependency's cache the reconciles read: the process is ready once it has synced too.
    pub fn reads<D>(&mut self, cache: &Store<D>)
    where
        D: Resource + Clone + Send + Sync + 'static,
        D::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync,
    {
        let cache = cache.clone();
        self.synced.push(
            async move {
                let _ = cache.wait_until_ready().await;
            }
            .boxed(),
        );
    }

    /// Runs `wiring`'s Controller with `context`'s reconcile; `phase_of` gives the phase each
    /// object counts under in `kaos_resources` (none: `Pending`).
    pub fn add<K, C>(
        &mut self,
        mut wiring: Wiring<K>,
        context: Arc<C>,
        phase_of: fn(&K) -> Option<&'static str>,
    ) where
        K: Primary,
        C: Reconciles<K>,
    {
        self.synced.append(&mut wiring.synced);
        let store = wiring.store.clone();
        let kind = K::kind(&());
        let Some(&(kind, _)) = self.runtime.id.kinds.iter().find(|(k, _)| *k == kind) else {
            panic!("the controller's ControllerId lists no phases of {kind}");
        };
        self.phases
            .entry(kind)
            .or_default()
            .push(Box::new(move |count| {
                for object in store.state() {
                    count(phase_of(&object));
                }
            }));
        let runtime = self.runtime.clone();
        self.running.push(wiring.run(&runtime, context).boxed());
    }

    /// Runs every Controller until shutdown.
    pub async fn run(self) -> anyhow::Result<()> {
        let Self {
            runtime,
            synced,
            running,
            phases,
        } = self;
        runtime.mark_ready_when(synced);
        for (kind, readers) in phases {
            runtime.track_phases(kind, move |count| {
                for read in &readers {
                    read(count);
                }
            });
        }
        futures::future::join_all(running).await;
        Ok(())
    }
}
