//! What the cluster stores: the objects by type and key, the served types, the watch history and
//! the counters behind resourceVersions, uids and Service IPs; and the lookups the writes share.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use serde_json::Value;

use super::WatchEvent;
use crate::error::{ApiError, ApiResult};
use crate::gc_index::GcIndex;
use crate::meta;
use crate::resources::{self, ResourceType};

/// One stored object.
pub(super) struct Stored {
    pub(super) object: Value,
    /// Last applied configuration per server-side-apply field manager.
    pub(super) applied: BTreeMap<String, Value>,
}

/// Everything behind the cluster's lock.
pub(super) struct State {
    pub(super) types: Vec<Arc<ResourceType>>,
    /// Storage key of the type → (namespace, name) → object; cluster-scoped objects have an
    /// empty namespace.
    pub(super) objects: HashMap<String, BTreeMap<(String, String), Stored>>,
    pub(super) resource_version: u64,
    /// Storage key → the resourceVersion of the last change of one of its objects, so that
    /// what is derived from a kind's objects (RBAC's rules) is kept until they change.
    pub(super) changed: HashMap<String, u64>,
    pub(super) history: VecDeque<Arc<WatchEvent>>,
    /// The newest resourceVersion no longer in the history (watches from before it get 410).
    pub(super) compacted: u64,
    pub(super) history_limit: usize,
    pub(super) next_uid: u64,
    pub(super) next_cluster_ip: u32,
    /// Tells the garbage collector when a pass can find nothing (kept by `commit`).
    pub(super) gc: GcIndex,
}

impl State {
    /// An empty store serving the built-in kinds, keeping the last `history_limit` changes.
    pub(super) fn new(history_limit: usize) -> Self {
        State {
            types: resources::builtins().into_iter().map(Arc::new).collect(),
            objects: HashMap::new(),
            resource_version: 0,
            changed: HashMap::new(),
            history: VecDeque::new(),
            compacted: 0,
            history_limit: history_limit.max(1),
            next_uid: 1,
            next_cluster_ip: 1,
            gc: GcIndex::default(),
        }
    }

    pub(super) fn stored(&self, rt: &ResourceType, namespace: &str, name: &str) -> Option<&Stored> {
        let ns = if rt.namespaced { namespace } else { "" };
        self.objects
            .get(&rt.storage_key())?
            .get(&(ns.to_string(), name.to_string()))
    }

    /// A copy of the stored object, or NotFound.
    pub(super) fn existing(
        &self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
    ) -> ApiResult<Value> {
        self.stored(rt, namespace, name)
            .map(|s| s.object.clone())
            .ok_or_else(|| ApiError::not_found(&rt.plural, &rt.group, name))
    }

    pub(super) fn namespace_exists(&self, namespace: &str) -> bool {
        self.objects
            .get("/namespaces")
            .is_some_and(|n| n.contains_key(&(String::new(), namespace.to_string())))
    }

    pub(super) fn namespace_terminating(&self, namespace: &str) -> bool {
        self.objects
            .get("/namespaces")
            .and_then(|n| n.get(&(String::new(), namespace.to_string())))
            .is_some_and(|n| meta::is_deleting(&n.object))
    }

    /// Whether `rt` is a kind of a CRD being deleted (no new objects of it are accepted).
    pub(super) fn crd_terminating(&self, rt: &ResourceType) -> bool {
        let Some(crd) = rt.crd.as_deref() else {
            return false;
        };
        self.objects
            .get("apiextensions.k8s.io/customresourcedefinitions")
            .and_then(|c| c.get(&(String::new(), crd.to_string())))
            .is_some_and(|c| meta::is_deleting(&c.object))
    }

    pub(super) fn type_for_key(&self, key: &str) -> Option<Arc<ResourceType>> {
        self.types.iter().find(|t| t.storage_key() == key).cloned()
    }
}

/// Lists carry `apiVersion` and `kind` on every item (kube-apiserver's JSON does for CRs).
pub(super) fn with_type(rt: &ResourceType, mut object: Value) -> Value {
    if let Some(map) = object.as_object_mut() {
        map.insert("apiVersion".into(), Value::from(rt.api_version()));
        map.insert("kind".into(), Value::from(rt.kind.clone()));
    }
    object
}
