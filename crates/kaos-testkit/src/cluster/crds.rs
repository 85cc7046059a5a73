//! Custom resource definitions: a stored CRD makes the cluster serve its kinds (and says so in
//! its status); a deleted one takes them, and their objects, away.

use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::state::State;
use super::{EventType, WatchEvent};
use crate::meta;
use crate::resources::{self, ResourceType};

/// Whether `rt` is the CustomResourceDefinition type itself.
pub(super) fn is_crd_type(rt: &ResourceType) -> bool {
    rt.group == "apiextensions.k8s.io" && rt.plural == "customresourcedefinitions"
}

impl State {
    /// Serves (or stops serving) the kinds a CRD defines, and reports it in the CRD's status.
    pub(super) fn establish_crd(
        &mut self,
        crd_type: &ResourceType,
        crd: &Value,
        events: &broadcast::Sender<Arc<WatchEvent>>,
    ) {
        let name = meta::name(crd).to_string();
        // Objects of versions no longer served stay stored (as in etcd) but are unreachable.
        self.types
            .retain(|t| t.crd.as_deref() != Some(name.as_str()));
        let (conditions, accepted) = match resources::from_crd(crd) {
            Ok(types) => {
                let accepted = crd.pointer("/spec/names").cloned().unwrap_or(Value::Null);
                self.types.extend(types.into_iter().map(Arc::new));
                let now = meta::now();
                (
                    json!([
                        {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": now},
                        {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": now}
                    ]),
                    accepted,
                )
            }
            Err(message) => (
                json!([{"type": "Established", "status": "False", "reason": "Invalid", "message": message, "lastTransitionTime": meta::now()}]),
                Value::Null,
            ),
        };
        let mut updated = crd.clone();
        updated["status"] = json!({
            "conditions": conditions,
            "acceptedNames": accepted,
            "storedVersions": crd.pointer("/spec/versions").and_then(Value::as_array).map(|v| {
                v.iter().filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
                    .filter_map(|v| v.get("name").cloned()).collect::<Vec<_>>()
            }),
        });
        if updated != *crd {
            self.commit(
                crd_type,
                updated,
                EventType::Modified,
                Some(crd.clone()),
                events,
            );
        }
    }

    /// Removes a CRD's kinds and all their objects (called when the CRD itself is deleted).
    pub(super) fn forget_crd(
        &mut self,
        crd_name: &str,
        events: &broadcast::Sender<Arc<WatchEvent>>,
    ) {
        let removed: Vec<Arc<ResourceType>> = self
            .types
            .iter()
            .filter(|t| t.crd.as_deref() == Some(crd_name))
            .cloned()
            .collect();
        for rt in removed.iter() {
            let key = rt.storage_key();
            let objects: Vec<Value> = self
                .objects
                .get(&key)
                .map(|o| o.values().map(|s| s.object.clone()).collect())
                .unwrap_or_default();
            for object in objects {
                self.commit(rt, object.clone(), EventType::Deleted, Some(object), events);
            }
        }
        self.types.retain(|t| t.crd.as_deref() != Some(crd_name));
    }
}
