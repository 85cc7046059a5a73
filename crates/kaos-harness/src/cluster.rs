//! An in-process cluster for controller tests: kaos-testkit with the CRDs installed, the
//! deployment simulator running, and a kube client talking to it without a network. Tests
//! apply typed objects ([`crate::fixtures`]), write a dependency's status as its controller
//! would, and wait until what they read holds.

use std::fmt::Debug;
use std::future::Future;
use std::time::{Duration, SystemTime};

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::events::v1::Event;
use kaos_testkit::{ApiServer, Cluster};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::fixtures;
use crate::status::Phased;
use crate::watch_tap::Watches;

/// What a test may read and write: a namespaced kind of the in-process cluster.
pub trait Kind:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + Debug
    + DeserializeOwned
    + Serialize
{
}

impl<K> Kind for K where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + Debug
        + DeserializeOwned
        + Serialize
{
}

pub struct TestCluster {
    pub api: ApiServer,
    pub client: kube::Client,
    /// The watches of `client`, observed when started with [`TestCluster::start_fenced`]
    /// (`crate::fence`).
    pub watches: Watches,
}

impl TestCluster {
    /// A cluster whose Deployments turn ready 20 ms after each change.
    pub fn start() -> Self {
        let api = ApiServer::new(Cluster::default());
        let client = kube::Client::new(api.clone().router(), "default");
        Self::start_on(api, client, Watches::default())
    }

    /// Installs the CRDs on `api` and starts the simulator (Deployments ready 20 ms after each
    /// change); `client` talks to `api`.
    pub(crate) fn start_on(api: ApiServer, client: kube::Client, watches: Watches) -> Self {
        kaos_testkit::manifests::apply_path(&api.cluster, &crate::repo_root().join("deploy/crds"))
            .expect("CRDs install");
        tokio::spawn(kaos_testkit::simulator::run(
            api.cluster.clone(),
            Duration::from_millis(20),
        ));
        Self {
            api,
            client,
            watches,
        }
    }

    /// The kind's objects in namespace `default`.
    pub fn api<K: Kind>(&self) -> Api<K> {
        Api::default_namespaced(self.client.clone())
    }

    /// The object `name` of namespace `default`; panics if it does not exist.
    pub async fn get<K: Kind>(&self, name: &str) -> K {
        let found = self.get_opt(name).await;
        found.unwrap_or_else(|| panic!("{} {name} exists", K::kind(&())))
    }

    /// The object `name` of namespace `default`, None if it does not exist.
    pub async fn get_opt<K: Kind>(&self, name: &str) -> Option<K> {
        self.api::<K>()
            .get_opt(name)
            .await
            .expect("the API answers")
    }

    /// Deletes the object `name` of namespace `default` (as `kubectl delete`: its finalizers and
    /// garbage collection then run).
    pub async fn delete<K: Kind>(&self, name: &str) {
        self.api::<K>()
            .delete(name, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("{} {name} deleted: {e}", K::kind(&())));
    }

    /// A JSON merge patch of the object `name`, as a user's edit.
    pub async fn merge_patch<K: Kind>(&self, name: &str, patch: Value) {
        self.api::<K>()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap_or_else(|e| panic!("{} {name} patched: {e}", K::kind(&())));
    }

    /// Creates the object (a POST, as `kubectl create` does); returns it as stored.
    pub async fn create<K: Kind>(&self, object: &K) -> K {
        let namespace = object.namespace();
        let api: Api<K> = Api::namespaced(
            self.client.clone(),
            namespace.as_deref().unwrap_or("default"),
        );
        api.create(&PostParams::default(), object)
            .await
            .unwrap_or_else(|e| panic!("{} {} created: {e}", K::kind(&()), object.name_any()))
    }

    /// Server-side applies an object (its metadata and spec, or a Secret's data: whatever it
    /// holds but its status) as the test's own field manager.
    pub fn apply<K: Resource + Serialize>(&self, object: &K) {
        let mut object = serde_json::to_value(object).expect("the object serializes");
        if let Some(fields) = object.as_object_mut() {
            fields.remove("status");
        }
        kaos_testkit::manifests::apply_object(&self.api.cluster, &object)
            .unwrap_or_else(|e| panic!("{} applies: {e:#}", describe(&object)));
    }

    /// Applies YAML manifests (server-side apply as the test's own field manager).
    pub fn apply_yaml(&self, yaml: &str) {
        kaos_testkit::manifests::apply_yaml(&self.api.cluster, yaml).expect("manifests apply");
    }

    /// Installs the MCP runtime registry (`kaos-system/kaos-mcp-runtimes`) listing
    /// `runtimes_yaml`, or replaces what it lists.
    pub fn install_runtime_registry(&self, runtimes_yaml: &str) {
        self.apply(&fixtures::namespace("kaos-system"));
        self.apply(&fixtures::runtime_registry(runtimes_yaml));
    }

    /// Writes the object's status as its own controller would: a merge patch of the status
    /// subresource with the fields the fixture set.
    pub async fn write_status<K: Kind>(&self, object: &K) {
        let status = serde_json::to_value(object).expect("the object serializes")["status"].take();
        assert!(
            !status.is_null(),
            "{} has no status to write",
            object.name_any()
        );
        let api: Api<K> = Api::namespaced(
            self.client.clone(),
            object.namespace().as_deref().unwrap_or("default"),
        );
        api.patch_status(
            &object.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&json!({ "status": status })),
        )
        .await
        .expect("status written");
    }

    /// A dependency as it stands once its controller has looked at it: applied, then its status
    /// written.
    pub async fn apply_with_status<K: Kind>(&self, object: &K) {
        self.apply(object);
        self.write_status(object).await;
    }

    /// Waits until the object `name` (namespace `default`) exists and `check` holds; returns it.
    pub async fn until<K: Kind>(&self, name: &str, what: &str, check: impl Fn(&K) -> bool) -> K {
        self.until_within(PATIENCE, name, what, check).await
    }

    /// [`Self::until`], waiting at most `limit`.
    pub async fn until_within<K: Kind>(
        &self,
        limit: Duration,
        name: &str,
        what: &str,
        check: impl Fn(&K) -> bool,
    ) -> K {
        let api = self.api::<K>();
        let what = format!("{} {name} is {what}", K::kind(&()));
        eventually_within(limit, &what, || async {
            api.get_opt(name).await.ok().flatten().filter(|o| check(o))
        })
        .await
    }

    /// Waits until the object `name` is in `phase`; returns it.
    pub async fn until_phase<K: Kind + Phased>(&self, name: &str, phase: K::Phase) -> K {
        self.until(name, &format!("{phase:?}"), |o: &K| {
            o.phase() == Some(phase)
        })
        .await
    }

    /// Waits until the object `name` is gone.
    pub async fn until_gone<K: Kind>(&self, name: &str) {
        let api = self.api::<K>();
        let what = format!("{} {name} is gone", K::kind(&()));
        eventually(&what, || async {
            api.get_opt(name)
                .await
                .ok()
                .and_then(|o| o.is_none().then_some(()))
        })
        .await
    }

    /// Waits until the object `name` and the Deployment and Service its controller made for it
    /// (`<kind>-<name>`) are gone: what deleting a workload does.
    pub async fn until_gone_with_workload<K: Kind>(&self, name: &str) {
        let children = format!("{}-{name}", K::kind(&()).to_lowercase());
        self.until_gone::<K>(name).await;
        self.until_gone::<Deployment>(&children).await;
        self.until_gone::<Service>(&children).await;
    }

    /// The events of namespace `default` with this reason.
    pub async fn events(&self, reason: &str) -> Vec<Event> {
        let events = self.api::<Event>().list(&ListParams::default()).await;
        let events = events.expect("events list").items;
        events
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .collect()
    }

    /// Waits until a Warning event with this reason is recorded.
    pub async fn until_warning(&self, reason: &str) {
        eventually(&format!("a Warning event {reason}"), || async {
            let events = self.events(reason).await;
            events
                .iter()
                .any(|e| e.type_.as_deref() == Some("Warning"))
                .then_some(())
        })
        .await
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

    /// Waits `window` and fails if anything was written meanwhile: what a settled controller
    /// does.
    pub async fn assert_no_writes_during(&self, window: Duration) {
        let writes = self.writes_during(window).await;
        assert!(writes.is_empty(), "writes while idle: {writes:?}");
    }
}

/// `Kind name` of a manifest, for messages.
fn describe(object: &Value) -> String {
    format!(
        "{} {}",
        object["kind"].as_str().unwrap_or("object"),
        object["metadata"]["name"].as_str().unwrap_or("")
    )
}

/// How long [`eventually`] waits.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// Polls `check` every 20 ms until it returns Some, for at most 10 s; panics with `what`.
pub async fn eventually<T, F, Fut>(what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    eventually_within(PATIENCE, what, check).await
}

/// [`eventually`], polling at most `limit / 20 ms` times.
pub async fn eventually_within<T, F, Fut>(limit: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    const POLL: Duration = Duration::from_millis(20);
    for _ in 0..limit.as_millis() / POLL.as_millis() {
        if let Some(value) = check().await {
            return value;
        }
        tokio::time::sleep(POLL).await;
    }
    panic!("timed out after {limit:?} waiting until {what}");
}
