//! Kubernetes events (`events.k8s.io/v1`) about the custom resources: children created or
//! updated, and failures. Publishing is best effort: a failed event never fails a reconcile.
//!
//! An event that repeats (same object, type, reason and note) within [`SERIES_WINDOW`] is not
//! created again: the first one's `series` counts it, as client-go's recorder does. kube-runtime's
//! `Recorder` does this too, but it keeps a whole copy of every event it sent for six minutes
//! (~3 KiB per reconciled object, most of the agent controller's memory after a burst of
//! creations), scans all of them on every publish, and merges events whose notes differ into the
//! first one's note. [`Recent`] keeps a hash and the event's name per series, and expires them
//! oldest first: memory and work per event stay constant whatever the number of objects.

use std::collections::{HashMap, VecDeque};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Resource;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

/// How long a repeat of an event counts in its series (client-go and kube-runtime use 6 min).
pub const SERIES_WINDOW: SignedDuration = SignedDuration::from_mins(6);

/// At most this many series are remembered; past it the oldest are forgotten (a repeat of one of
/// them is then a new event, never a lost one).
const MAX_SERIES: usize = 65_536;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Type {
    Normal,
    Warning,
}

impl Type {
    fn as_str(self) -> &'static str {
        match self {
            Type::Normal => "Normal",
            Type::Warning => "Warning",
        }
    }
}

#[derive(Clone)]
pub struct Events {
    client: kube::Client,
    controller: String,
    instance: String,
    recent: Arc<Mutex<Recent>>,
}

impl Events {
    pub fn new(client: kube::Client, controller: &str, instance: Option<String>) -> Self {
        Self {
            client,
            controller: controller.to_string(),
            instance: instance.unwrap_or_else(|| controller.to_string()),
            recent: Arc::default(),
        }
    }

    pub async fn normal<K: Resource<DynamicType = ()>>(
        &self,
        object: &K,
        reason: &str,
        note: String,
    ) {
        self.publish(object, Type::Normal, reason, note).await;
    }

    pub async fn warning<K: Resource<DynamicType = ()>>(
        &self,
        object: &K,
        reason: &str,
        note: String,
    ) {
        self.publish(object, Type::Warning, reason, note).await;
    }

    async fn publish<K: Resource<DynamicType = ()>>(
        &self,
        object: &K,
        type_: Type,
        reason: &str,
        note: String,
    ) {
        let regarding = object.object_ref(&());
        let namespace = regarding.namespace.clone().unwrap_or("default".into());
        let key = series_key(&regarding, type_, reason, &note);
        let now = Timestamp::now();
        let api = Api::<Event>::namespaced(self.client.clone(), &namespace);
        let repeat = self.recent().repeat(key, now);
        if let Some((name, count)) = repeat {
            let series = json!({"series": EventSeries {
                count,
                last_observed_time: MicroTime(now),
            }});
            match api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&series))
                .await
            {
                Ok(_) => return,
                // Gone (events expire on the server): a new event starts a new series.
                Err(kube::Error::Api(s)) if s.is_not_found() => {}
                Err(e) => return tracing::debug!("could not publish an event: {e}"),
            }
        }
        let event = self.event(regarding, type_, reason, note, now);
        let name = event.metadata.name.clone().unwrap_or_default();
        match api.create(&PostParams::default(), &event).await {
            Ok(_) => self.recent().started(key, name, now),
            Err(e) => tracing::debug!("could not publish an event: {e}"),
        }
    }

    fn recent(&self) -> std::sync::MutexGuard<'_, Recent> {
        self.recent.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn event(
        &self,
        regarding: ObjectReference,
        type_: Type,
        reason: &str,
        note: String,
        now: Timestamp,
    ) -> Event {
        let base = regarding.name.as_deref().unwrap_or(&self.controller);
        Event {
            metadata: ObjectMeta {
                name: Some(format!("{base}.{:x}", now.as_nanosecond())),
                namespace: regarding.namespace.clone(),
                ..Default::default()
            },
            event_time: Some(MicroTime(now)),
            type_: Some(type_.as_str().into()),
            reason: Some(reason.into()),
            action: Some("Reconcile".into()),
            note: Some(note),
            regarding: Some(regarding),
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            ..Default::default()
        }
    }
}

/// The identity of a series: the object (by uid, so a recreated object starts afresh), the
/// type, reason and note.
fn series_key(regarding: &ObjectReference, type_: Type, reason: &str, note: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    (
        &regarding.uid,
        &regarding.kind,
        &regarding.namespace,
        &regarding.name,
        type_.as_str(),
        reason,
        note,
    )
        .hash(&mut hasher);
    hasher.finish()
}

/// The series started in the last [`SERIES_WINDOW`]: by key, the event's name, how many times
/// it happened and when last; and the keys in the order they were last seen, to expire them.
#[derive(Default)]
struct Recent {
    series: HashMap<u64, Series>,
    /// (when, key) per sighting; a key seen again has a later entry, and only its latest one
    /// expires it.
    order: VecDeque<(Timestamp, u64)>,
}

struct Series {
    name: Box<str>,
    count: i32,
    last: Timestamp,
}

impl Recent {
    /// If `key` happened within the window: its event's name and its new count.
    fn repeat(&mut self, key: u64, now: Timestamp) -> Option<(String, i32)> {
        self.expire(now);
        let series = self.series.get_mut(&key)?;
        series.count += 1;
        series.last = now;
        self.order.push_back((now, key));
        Some((series.name.to_string(), series.count))
    }

    /// `key`'s first event was created as `name`.
    fn started(&mut self, key: u64, name: String, now: Timestamp) {
        self.series.insert(
            key,
            Series {
                name: name.into(),
                count: 1,
                last: now,
            },
        );
        self.order.push_back((now, key));
        self.expire(now);
    }

    /// Forgets the series last seen before the window, and the oldest past [`MAX_SERIES`].
    fn expire(&mut self, now: Timestamp) {
        while let Some(&(seen, key)) = self.order.front() {
            let full = self.series.len() > MAX_SERIES;
            if !full && seen + SERIES_WINDOW > now {
                break;
            }
            self.order.pop_front();
            if self.series.get(&key).is_some_and(|s| s.last == seen) {
                self.series.remove(&key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(name: &str, uid: &str) -> ObjectReference {
        ObjectReference {
            kind: Some("Agent".into()),
            namespace: Some("ns".into()),
            name: Some(name.into()),
            uid: Some(uid.into()),
            ..Default::default()
        }
    }

    #[test]
    fn a_repeat_within_the_window_counts_in_the_first_events_series() {
        let mut recent = Recent::default();
        let t0 = Timestamp::UNIX_EPOCH;
        let key = series_key(&reference("a", "u1"), Type::Warning, "SecretNotFound", "n");
        assert_eq!(recent.repeat(key, t0), None, "the first is a new event");
        recent.started(key, "a.1".into(), t0);
        let t1 = t0 + SignedDuration::from_mins(5);
        assert_eq!(recent.repeat(key, t1), Some(("a.1".into(), 2)));
        // The window runs from the last sighting, as a series' lastObservedTime does.
        let t2 = t1 + SignedDuration::from_mins(5);
        assert_eq!(recent.repeat(key, t2), Some(("a.1".into(), 3)));
    }

    #[test]
    fn after_the_window_the_series_is_forgotten() {
        let mut recent = Recent::default();
        let t0 = Timestamp::UNIX_EPOCH;
        let key = series_key(&reference("a", "u1"), Type::Normal, "Applied", "n");
        recent.started(key, "a.1".into(), t0);
        assert_eq!(recent.repeat(key, t0 + SERIES_WINDOW), None);
        assert!(recent.series.is_empty() && recent.order.is_empty());
    }

    #[test]
    fn a_different_note_object_or_type_is_another_series() {
        let a = reference("a", "u1");
        let key = series_key(&a, Type::Warning, "R", "note");
        assert_ne!(key, series_key(&a, Type::Warning, "R", "other note"));
        assert_ne!(key, series_key(&a, Type::Normal, "R", "note"));
        assert_ne!(key, series_key(&a, Type::Warning, "S", "note"));
        assert_ne!(
            key,
            series_key(&reference("b", "u2"), Type::Warning, "R", "note")
        );
        // The same name recreated (another uid) starts afresh.
        assert_ne!(
            key,
            series_key(&reference("a", "u3"), Type::Warning, "R", "note")
        );
    }

    #[test]
    fn memory_is_bounded_by_the_oldest_first() {
        let mut recent = Recent::default();
        let t0 = Timestamp::UNIX_EPOCH;
        for key in 0..(MAX_SERIES as u64 + 10) {
            recent.started(key, format!("e{key}"), t0);
        }
        assert_eq!(recent.series.len(), MAX_SERIES);
        assert_eq!(recent.repeat(0, t0), None, "the oldest went first");
        assert!(recent.repeat(MAX_SERIES as u64 + 9, t0).is_some());
    }
}
