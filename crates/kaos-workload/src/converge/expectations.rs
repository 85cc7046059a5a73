//! What this process wrote and the watch cache may not show yet.
//!
//! A reconcile can start before the watch delivers the controller's own previous write; without
//! a memory of that write it would send the same object again. For each object it records the
//! hash of what was written, the resourceVersion the cache showed before (while the cache still
//! shows it, the cache is behind) and the resourceVersion the write returned (once the cache
//! shows that, the object *is* our write, whatever the server normalised in it). It also keeps
//! the object's content version with exactly that content (its generation, or its
//! resourceVersion for kinds without one): while it stays, the content is still ours, which is
//! how drift is told for children cached without their spec.
//!
//! One entry per child and per status, for as long as the parent lives, so entries are small
//! (48 bytes with the key): every key, hash and version is kept as a 64-bit digest (only ever
//! compared for equality; two different strings share a digest with odds of ~1 in 2^64), the
//! time of the write as milliseconds in a `u32`.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::num::NonZeroU64;
use std::sync::{LazyLock, Mutex};
use std::time::Instant;

/// How long a write may stay unseen by the cache before it is no longer trusted (a watch that
/// restarted may never report it), in milliseconds.
const PATIENCE_MS: u32 = 30_000;

/// The instant write times count from.
static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

/// Milliseconds since [`EPOCH`], wrapping every 49 days (only differences under that are read).
fn now_ms() -> u32 {
    EPOCH.elapsed().as_millis() as u32
}

/// Identifies a written object: kind, namespace, name.
pub type Key = (&'static str, String, String);

/// The digest a key, hash or version is kept as.
type Digest = u64;

fn digest<T: Hash + ?Sized>(value: &T) -> Digest {
    let mut hasher = DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

/// The digest of a version, if there is one (non-zero, so that an absent one costs no room).
fn digest_of(value: Option<&str>) -> Option<NonZeroU64> {
    value.map(|v| NonZeroU64::new(digest(v)).unwrap_or(NonZeroU64::MIN))
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Written {
    hash: Digest,
    before: Option<NonZeroU64>,
    after: Option<NonZeroU64>,
    content_version: Option<NonZeroU64>,
    /// When it was written ([`now_ms`]).
    at: u32,
    /// Whether this process wrote it (a write can be pending in the cache; a read cannot).
    by_us: bool,
}

impl Written {
    /// `hash` as the server holds it at `after` and `content_version`.
    fn seen(hash: &str, after: Option<&str>, content_version: Option<&str>) -> Self {
        Written {
            hash: digest(hash),
            before: None,
            after: digest_of(after),
            content_version: digest_of(content_version),
            by_us: false,
            at: now_ms(),
        }
    }
}

/// What the cache shows of an object now.
#[derive(Clone, Copy, Debug)]
pub struct Observed<'a> {
    pub resource_version: Option<&'a str>,
}

/// The last write per object, shared by every reconcile of one controller.
#[derive(Debug, Default)]
pub struct Expectations {
    written: Mutex<HashMap<Digest, Written>>,
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
    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<Digest, Written>> {
        self.written.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `hash` was written and what the cache shows of that write.
    pub fn verdict(&self, key: &Key, hash: &str, observed: Option<Observed<'_>>) -> Verdict {
        let written = self.entries();
        let Some(w) = written.get(&digest(key)).filter(|w| w.hash == digest(hash)) else {
            return Verdict::Unknown;
        };
        let now = digest_of(observed.and_then(|o| o.resource_version));
        if now.is_some() && now == w.after {
            Verdict::Written
        } else if w.by_us && now == w.before && now_ms().wrapping_sub(w.at) < PATIENCE_MS {
            Verdict::Pending
        } else {
            Verdict::Unknown
        }
    }

    /// Whether this process wrote the object and the cache, showing `observed`, has not shown
    /// that write yet (whatever it wrote).
    pub fn pending(&self, key: &Key, observed: Option<Observed<'_>>) -> bool {
        let now = digest_of(observed.and_then(|o| o.resource_version));
        self.entries().get(&digest(key)).is_some_and(|w| {
            w.by_us
                && now == w.before
                && now != w.after
                && now_ms().wrapping_sub(w.at) < PATIENCE_MS
        })
    }

    /// Records a write of `hash`: the cache showed `before`, the server answered `after` at
    /// `content_version`.
    pub fn wrote(
        &self,
        key: Key,
        hash: String,
        before: Option<&str>,
        after: Option<String>,
        content_version: Option<String>,
    ) {
        let write = Written {
            before: digest_of(before),
            by_us: true,
            ..Written::seen(&hash, after.as_deref(), content_version.as_deref())
        };
        self.entries().insert(digest(&key), write);
    }

    /// Records that the server's object holds exactly `hash` at `resource_version` and
    /// `content_version` (read, not written: nothing is pending).
    pub fn confirmed(
        &self,
        key: Key,
        hash: String,
        resource_version: Option<String>,
        content_version: Option<String>,
    ) {
        let seen = Written::seen(
            &hash,
            resource_version.as_deref(),
            content_version.as_deref(),
        );
        self.entries().insert(digest(&key), seen);
    }

    /// Whether the object's content is still the one that held `hash`: its content version is
    /// the one it had then.
    pub fn unchanged_since(&self, key: &Key, hash: &str, content_version: Option<&str>) -> bool {
        let version = digest_of(content_version);
        version.is_some()
            && self
                .entries()
                .get(&digest(key))
                .is_some_and(|w| w.hash == digest(hash) && w.content_version == version)
    }

    /// Whether `resource_version` is the one this process's last write of the object returned:
    /// the object is exactly what that write made of it.
    pub fn is_own_write(&self, key: &Key, resource_version: Option<&str>) -> bool {
        let version = digest_of(resource_version);
        version.is_some()
            && self
                .entries()
                .get(&digest(key))
                .is_some_and(|w| w.by_us && w.after == version)
    }

    /// Forgets an object (deleted, or its parent is gone): a create of it is not pending any
    /// more, whatever the cache shows.
    pub fn forget(&self, key: &Key) {
        self.entries().remove(&digest(key));
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
        e.wrote(
            key(),
            "h1".into(),
            Some("5"),
            Some("9".into()),
            Some("2".into()),
        );
        assert_eq!(e.verdict(&key(), "h1", at("5")), Verdict::Pending);
        assert_eq!(e.verdict(&key(), "h1", at("9")), Verdict::Written);
        assert!(
            e.is_own_write(&key(), Some("9")),
            "the watch's echo of the write"
        );
        assert!(!e.is_own_write(&key(), Some("10")), "changed since");
        assert!(!e.is_own_write(&key(), None));
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
    fn a_write_of_any_content_is_pending_until_the_cache_shows_it() {
        let e = Expectations::default();
        assert!(!e.pending(&key(), at("5")), "nothing written");
        e.wrote(key(), "h1".into(), Some("5"), Some("9".into()), None);
        assert!(e.pending(&key(), at("5")));
        assert!(!e.pending(&key(), at("9")), "shown");
        assert!(!e.pending(&key(), at("12")), "changed since");
        // A write that changed nothing keeps the version: nothing to wait for.
        e.wrote(key(), "h2".into(), Some("12"), Some("12".into()), None);
        assert!(!e.pending(&key(), at("12")));
        e.confirmed(key(), "h3".into(), Some("13".into()), None);
        assert!(!e.pending(&key(), None), "read, not written");
    }

    #[test]
    fn an_entry_is_a_key_and_40_bytes() {
        assert_eq!(std::mem::size_of::<Written>(), 40);
    }

    #[test]
    fn a_create_is_pending_until_the_object_appears() {
        let e = Expectations::default();
        e.wrote(key(), "h1".into(), None, Some("3".into()), Some("1".into()));
        assert_eq!(e.verdict(&key(), "h1", None), Verdict::Pending);
        assert_eq!(e.verdict(&key(), "h1", at("3")), Verdict::Written);
        e.forget(&key());
        assert_eq!(e.verdict(&key(), "h1", None), Verdict::Unknown);
    }

    #[test]
    fn the_content_is_ours_while_its_version_stays() {
        let e = Expectations::default();
        e.wrote(key(), "h1".into(), None, Some("3".into()), Some("1".into()));
        assert!(
            e.unchanged_since(&key(), "h1", Some("1")),
            "a status change"
        );
        assert!(
            !e.unchanged_since(&key(), "h1", Some("2")),
            "someone edited it"
        );
        assert!(!e.unchanged_since(&key(), "h2", Some("1")), "other content");
        assert!(!e.unchanged_since(&key(), "h1", None), "no version");
        e.confirmed(key(), "h1".into(), Some("7".into()), Some("2".into()));
        assert!(e.unchanged_since(&key(), "h1", Some("2")));
        assert!(!e.is_own_write(&key(), Some("7")), "read, not written");
        assert_eq!(e.verdict(&key(), "h1", at("7")), Verdict::Written);
        assert_eq!(
            e.verdict(&key(), "h1", None),
            Verdict::Unknown,
            "deleted since"
        );
    }
}
