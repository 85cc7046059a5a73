//! The audit log: one record per request, so tests can count API calls per reconcile, find
//! writes during an idle window, or check that two leaders never wrote at the same time.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use http::{Method, Uri};

use super::path::Target;

#[derive(Clone, Debug, PartialEq)]
pub struct AuditRecord {
    pub time: SystemTime,
    pub user: String,
    /// The credential used (see `Identity::client`).
    pub client: String,
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`
    /// (non-resource requests are `get`).
    pub verb: String,
    pub method: String,
    pub path: String,
    /// The raw query string (e.g. `fieldManager=x&fieldValidation=Strict`).
    pub query: String,
    pub group: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    pub code: u16,
    /// Time to the response headers (a watch's stream goes on after that).
    pub latency: Duration,
}

impl AuditRecord {
    pub fn new(
        identity: (String, String),
        verb: &str,
        method: &Method,
        uri: &Uri,
        target: Option<&Target>,
        code: u16,
        latency: Duration,
    ) -> Self {
        let field = |f: fn(&Target) -> Option<&str>| target.and_then(f).unwrap_or("").to_string();
        Self {
            time: SystemTime::now(),
            user: identity.0,
            client: identity.1,
            verb: verb.to_string(),
            method: method.to_string(),
            path: uri.path().to_string(),
            query: uri.query().unwrap_or("").to_string(),
            group: field(|t| Some(t.group.as_str())),
            resource: field(|t| Some(t.plural.as_str())),
            subresource: field(|t| t.subresource.as_deref()),
            namespace: field(|t| t.namespace.as_deref()),
            name: field(|t| t.name.as_deref()),
            code,
            latency,
        }
    }

    /// A request that changes state (whatever its outcome).
    pub fn is_write(&self) -> bool {
        matches!(
            self.verb.as_str(),
            "create" | "update" | "patch" | "delete" | "deletecollection"
        )
    }
}

/// A shared, append-only log of requests.
#[derive(Clone, Default)]
pub struct Audit {
    records: Arc<Mutex<Vec<AuditRecord>>>,
}

impl Audit {
    pub fn record(&self, record: AuditRecord) {
        self.records
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(record);
    }

    /// Every record so far.
    pub fn records(&self) -> Vec<AuditRecord> {
        self.records
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Records at or after `since`.
    pub fn since(&self, since: SystemTime) -> Vec<AuditRecord> {
        self.records()
            .into_iter()
            .filter(|r| r.time >= since)
            .collect()
    }

    pub fn clear(&self) {
        self.records
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }
}
