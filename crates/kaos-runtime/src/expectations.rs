//! What this process wrote and the watch cache may not show yet.
//!
//! A reconcile can start before the watch delivers the controller's own previous write; without
//! a memory of that write it would send the same object again. For each object it records the
//! hash of what was written, the resourceVersion the cache showed before (while the cache still
//! shows it, the cache is behind) and the resourceVersion the write returned (once the cache
//! shows that, the object *is* our write, whatever the server normalised in it).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a write may stay unseen by the cache before it is no longer trusted (a watch that
/// restarted may never report it).
const PATIENCE: Duration = Duration::from_secs(30);

/// Identifies a written object: kind, namespace, name.
pub type Key = (&'static str, String, String);

#[derive(Clone, Debug, PartialEq, Eq)]
struct Written {
    hash: String,
    before: Option<String>,
    after: Option<String>,
    at: Instant,
}

/// What the cache shows of an object now.
#[derive(Clone, Copy, Debug)]
pub struct Observed<'a> {
    pub resource_version: Option<&'a str>,
}

/// The last write per object, shared by every reconcile of one controller.
#[derive(Debug, Default)]
pub struct Expectations {
    written: Mutex<HashMap<Key, Written>>,
}

/// What to do about a desired object, given the cache and the writes this process made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The cache has not shown our write of exactly this yet: sending it again changes nothing.
    Pending,
    /// The cache shows the result of our write of exactly this.
    Written,
    /// Nothing known: compare the cache with the desired object.
    Unknown,
}

impl Expectations {
    /// Whether `hash` was written and what the cache shows of that write.
    pub fn verdict(&self, key: &Key, hash: &str, observed: Option<Observed<'_>>) -> Verdict {
        let written = self.written.lock().unwrap_or_else(|e| e.into_inner());
        let Some(w) = written.get(key).filter(|w| w.hash == hash) else {
            return Verdict::Unknown;
        };
        let now = observed.and_then(|o| o.resource_version);
        if now.is_some() && now == w.after.as_deref() {
            Verdict::Written
        } else if now == w.before.as_deref() && w.at.elapsed() < PATIENCE {
            Verdict::Pending
        } else {
            Verdict::Unknown
        }
    }

    /// Records a write of `hash`: the cache showed `before`, the server answered `after`.
    pub fn wrote(&self, key: Key, hash: String, before: Option<&str>, after: Option<String>) {
        let mut written = self.written.lock().unwrap_or_else(|e| e.into_inner());
        written.insert(
            key,
            Written {
                hash,
                before: before.map(String::from),
                after,
                at: Instant::now(),
            },
        );
    }

    /// Forgets an object (deleted, or its parent is gone): a create of it is not pending any
    /// more, whatever the cache shows.
    pub fn forget(&self, key: &Key) {
        let mut written = self.written.lock().unwrap_or_else(|e| e.into_inner());
        written.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> Key {
        ("Deployment", "default".into(), "agent-a".into())
    }

    fn at(rv: &str) -> Option<Observed<'_>> {
        Some(Observed {
            resource_version: Some(rv),
        })
    }

    #[test]
    fn a_write_the_cache_has_not_shown_is_pending() {
        let e = Expectations::default();
        e.wrote(key(), "h1".into(), Some("5"), Some("9".into()));
        assert_eq!(e.verdict(&key(), "h1", at("5")), Verdict::Pending);
        assert_eq!(e.verdict(&key(), "h1", at("9")), Verdict::Written);
        assert_eq!(
            e.verdict(&key(), "h1", at("12")),
            Verdict::Unknown,
            "changed since"
        );
        assert_eq!(
            e.verdict(&key(), "h2", at("5")),
            Verdict::Unknown,
            "other content"
        );
    }

    #[test]
    fn a_create_is_pending_until_the_object_appears() {
        let e = Expectations::default();
        e.wrote(key(), "h1".into(), None, Some("3".into()));
        assert_eq!(e.verdict(&key(), "h1", None), Verdict::Pending);
        assert_eq!(e.verdict(&key(), "h1", at("3")), Verdict::Written);
        e.forget(&key());
        assert_eq!(e.verdict(&key(), "h1", None), Verdict::Unknown);
    }
}
