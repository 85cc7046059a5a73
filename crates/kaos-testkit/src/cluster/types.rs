//! The value types of the cluster's API: what a request asks for and what a watch delivers.

use std::sync::Arc;

use kaos_schema::UnknownFields;
use serde_json::Value;
use tokio::sync::broadcast;

use crate::selectors::{FieldSelector, LabelSelector};

/// Which part of an object a write addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Subresource {
    Main,
    Status,
}

/// The type of a watch event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change, as kept in the watch history.
#[derive(Debug)]
pub struct WatchEvent {
    pub resource_version: u64,
    pub storage_key: String,
    pub namespace: String,
    pub event_type: EventType,
    pub object: Value,
    /// The object before the change (for selector transitions).
    pub previous: Option<Value>,
}

/// Patch formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchType {
    Merge,
    Json,
    Strategic,
    Apply,
}

/// A patch: its format and body.
#[derive(Clone, Copy, Debug)]
pub struct Patch<'a> {
    pub kind: PatchType,
    pub body: &'a Value,
}

/// A started watch: the events to send first, then the live feed.
pub struct WatchStart {
    pub backlog: Vec<Arc<WatchEvent>>,
    pub receiver: broadcast::Receiver<Arc<WatchEvent>>,
    /// The cluster's resourceVersion when the watch started.
    pub resource_version: u64,
}

/// Options of a write request.
#[derive(Clone, Debug, Default)]
pub struct WriteOptions {
    pub field_manager: Option<String>,
    pub force: bool,
    pub dry_run: bool,
    pub unknown_fields: UnknownFields,
}

/// How dependents are treated when their owner is deleted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Propagation {
    #[default]
    Background,
    Foreground,
    Orphan,
}

/// A list request.
#[derive(Clone, Debug, Default)]
pub struct ListOptions {
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    pub limit: Option<usize>,
    pub continue_token: Option<String>,
}
