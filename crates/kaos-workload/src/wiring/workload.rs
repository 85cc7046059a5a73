//! A workload kind's controller in one call: [`run_workload`] owns what every workload kind
//! wires the same way (the HTTPRoute decision, the `security.id` claims and their rechecks, one
//! Controller per watched namespace, the process's [`Controllers`]); the kind gives its children,
//! and per namespace its relations, dependency caches, triggers and reconcile context.

use std::sync::{Arc, Mutex};

use futures::Stream;
use kaos_runtime::Runtime;
use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher::Event;

use super::{ChildKinds, Controllers, Wiring, watch_routes, wire};
use crate::cache::{self, Events, Watched};
use crate::reconcile::{Core, Primary, Reconciles};
use crate::trigger::claims::{Claims, SecurityIdentity, SharedSecurityIds};

/// What a workload kind's controller is made of, besides its per-namespace wiring.
pub struct Workload<K> {
    kinds: ChildKinds,
    gateway_enabled: bool,
    selector: &'static str,
    finalizer: Option<&'static str>,
    phase_of: fn(&K) -> Option<&'static str>,
}

impl<K> Workload<K> {
    /// A kind whose children are labelled `selector` and whose objects count in
    /// `kaos_resources` under `phase_of`: the usual children ([`ChildKinds::workload`]), no
    /// finalizer (a MemoryStore, as in KAOS), no gateway.
    pub fn new(selector: &'static str, phase_of: fn(&K) -> Option<&'static str>) -> Self {
        Self {
            kinds: ChildKinds::workload(),
            gateway_enabled: false,
            selector,
            finalizer: None,
            phase_of,
        }
    }

    /// Its kinds of child; HTTPRoutes are added when the gateway is enabled or the Gateway API
    /// is installed.
    pub fn children(self, kinds: ChildKinds) -> Self {
        Self { kinds, ..self }
    }

    pub fn finalizer(self, finalizer: &'static str) -> Self {
        Self {
            finalizer: Some(finalizer),
            ..self
        }
    }

    /// Whether the gateway is enabled (its HTTPRoutes are then written).
    pub fn gateway(self, enabled: bool) -> Self {
        Self {
            gateway_enabled: enabled,
            ..self
        }
    }
}

/// A watch-event hook a kind adds to its primary's (see [`Namespace::on_event`]).
type Hook<K> = Box<dyn FnMut(&Event<K>) + Send>;

/// One namespace's Controller while the kind wires it (all namespaces when `namespace` is None).
pub struct Namespace<'a, K: Primary> {
    pub runtime: &'a Runtime,
    pub namespace: Option<&'a str>,
    wiring: Option<Wiring<K>>,
    hooks: Arc<Mutex<Vec<Hook<K>>>>,
    controllers: &'a mut Controllers,
    ids: SharedSecurityIds,
    finalizer: Option<&'static str>,
}

impl<K: Primary> Namespace<'_, K> {
    fn wiring(&mut self) -> &mut Wiring<K> {
        self.wiring.as_mut().expect("wired until added")
    }

    /// The reconcile's core: its children's caches, its events and its finalizer.
    pub fn core(&mut self) -> Core {
        let (runtime, finalizer) = (self.runtime.clone(), self.finalizer);
        Core::new(runtime, self.wiring().children.clone(), finalizer)
    }

    /// The cache of the kind's objects in this namespace.
    pub fn store(&mut self) -> Store<K> {
        self.wiring().store.clone()
    }

    /// The `security.id` claims of every namespace.
    pub fn ids(&self) -> SharedSecurityIds {
        self.ids.clone()
    }

    /// `hook` sees every event of the kind after its cache applied it (where relation indexes
    /// are kept); it runs once the Controller does.
    pub fn on_event(&mut self, hook: impl FnMut(&Event<K>) + Send + 'static) {
        self.hooks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Box::new(hook));
    }

    /// A cache of the dependency `D` in this namespace that the reconciles read (the process is
    /// ready once it has synced), and its events for triggers.
    pub fn watch<D: Watched>(&mut self) -> (Store<D>, Events<D>) {
        let (store, events) = cache::cache::<D>(&self.runtime.client, self.namespace, "");
        self.controllers.reads(&store);
        (store, events)
    }

    /// A cache the reconciles read that is shared by every namespace (the process is ready
    /// once it has synced).
    pub fn reads<D>(&mut self, shared: &Store<D>)
    where
        D: Resource + Clone + Send + Sync + 'static,
        D::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync,
    {
        self.controllers.reads(shared);
    }

    /// Objects to reconcile when `trigger` names them (dependents of another kind's change).
    pub fn reconcile_on(&mut self, trigger: impl Stream<Item = ObjectRef<K>> + Send + 'static) {
        self.map_wiring(|wiring| wiring.reconcile_on(trigger));
    }

    /// Every object to reconcile whenever `trigger` yields.
    pub fn reconcile_all_on(&mut self, trigger: impl Stream<Item = ()> + Send + 'static) {
        self.map_wiring(|wiring| wiring.reconcile_all_on(trigger));
    }

    fn map_wiring(&mut self, f: impl FnOnce(Wiring<K>) -> Wiring<K>) {
        let wiring = self.wiring.take().expect("wired until added");
        self.wiring = Some(f(wiring));
    }
}

/// Runs a workload kind's controller: in each watched namespace its Controller with the
/// children of `workload.kinds`, the `security.id` claims, and what `per_namespace` adds (it
/// returns the reconcile context).
pub async fn run_workload<K, C>(
    runtime: &Runtime,
    workload: Workload<K>,
    mut per_namespace: impl FnMut(&mut Namespace<'_, K>) -> C,
) -> anyhow::Result<()>
where
    K: Primary + Resource<DynamicType = ()> + SecurityIdentity,
    C: Reconciles<K>,
{
    let kinds = ChildKinds {
        routes: watch_routes(runtime, workload.gateway_enabled).await,
        ..workload.kinds
    };
    let mut controllers = Controllers::new(runtime);
    let mut claims = Claims::<K>::new(&runtime.namespaces());
    for namespace in runtime.namespaces() {
        let (mut track_claims, rechecks) = claims.for_namespace(&namespace);
        let hooks = Arc::new(Mutex::new(Vec::<Hook<K>>::new()));
        let on_event = {
            let hooks = hooks.clone();
            move |event: &Event<K>| {
                track_claims(event);
                for hook in hooks.lock().unwrap_or_else(|e| e.into_inner()).iter_mut() {
                    hook(event);
                }
            }
        };
        let ns = namespace.as_deref();
        let wiring = wire::<K>(runtime, ns, workload.selector, kinds, on_event);
        let mut scope = Namespace {
            runtime,
            namespace: ns,
            wiring: Some(wiring.reconcile_on(rechecks)),
            hooks,
            controllers: &mut controllers,
            ids: claims.ids.clone(),
            finalizer: workload.finalizer,
        };
        let context = per_namespace(&mut scope);
        let wiring = scope.wiring.take().expect("wired until added");
        controllers.add(wiring, Arc::new(context), workload.phase_of);
    }
    controllers.run().await
}
