//! What the garbage collector must know to tell, without a pass over the store, that no
//! object can be garbage.
//!
//! A pass of the collector reads every stored object, and it used to run after every delete,
//! under the store's lock. With tens of thousands of objects each pass took tens of milliseconds
//! and every request waited for it: deleting a hundred ConfigMaps that own nothing stalled the
//! whole server for a minute. Garbage can only appear when an object goes away that others name
//! as owner, when an object names an owner that does not exist, or while something is being
//! deleted (foreground, orphan, a namespace, a CRD); this index, kept by every commit, says when
//! one of those holds, and the collector skips its pass otherwise.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use crate::meta;

#[derive(Debug, Default)]
pub struct GcIndex {
    /// The uids of the stored objects.
    live: HashSet<String>,
    /// Owner uid → how many stored objects name it in their ownerReferences.
    dependents: HashMap<String, usize>,
    /// Stored objects with a deletionTimestamp (waiting for finalizers).
    deleting: usize,
    /// Something happened since the last pass that can have made garbage.
    pass_needed: bool,
}

impl GcIndex {
    /// `new` is stored, replacing `old` (None for a create).
    pub fn stored(&mut self, old: Option<&Value>, new: &Value) {
        if let Some(old) = old {
            self.forget(old);
        }
        self.live.insert(meta::uid(new).to_string());
        for owner in meta::owner_uids(new) {
            if !self.live.contains(&owner) {
                // An owner that does not exist (or no longer): the object may be garbage.
                self.pass_needed = true;
            }
            *self.dependents.entry(owner).or_default() += 1;
        }
        if meta::is_deleting(new) {
            self.deleting += 1;
        }
    }

    /// `old` is removed from the store for good: its dependents may now be orphans.
    pub fn deleted(&mut self, old: &Value) {
        self.forget(old);
        if self.dependents.contains_key(meta::uid(old)) {
            self.pass_needed = true;
        }
    }

    /// Whether a pass of the collector can find anything; clears the reason it had, as the
    /// pass about to run looks at everything.
    pub fn take_pass(&mut self) -> bool {
        let needed = self.pass_needed || self.deleting > 0;
        self.pass_needed = false;
        needed
    }

    /// Drops what `old`, a stored state, contributed.
    fn forget(&mut self, old: &Value) {
        self.live.remove(meta::uid(old));
        for owner in meta::owner_uids(old) {
            if let Some(count) = self.dependents.get_mut(&owner) {
                *count -= 1;
                if *count == 0 {
                    self.dependents.remove(&owner);
                }
            }
        }
        if meta::is_deleting(old) {
            self.deleting = self.deleting.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(uid: &str, owners: &[&str], deleting: bool) -> Value {
        let mut o = json!({"metadata": {"uid": uid,
            "ownerReferences": owners.iter().map(|u| json!({"uid": u})).collect::<Vec<_>>()}});
        if deleting {
            o["metadata"]["deletionTimestamp"] = json!("2026-11-24T00:00:00Z");
        }
        o
    }

    #[test]
    fn no_pass_for_objects_that_own_nothing() {
        let mut index = GcIndex::default();
        let config_map = object("c", &[], false);
        index.stored(None, &config_map);
        assert!(!index.take_pass());
        index.deleted(&config_map);
        assert!(!index.take_pass());
    }

    #[test]
    fn a_pass_when_an_owner_with_dependents_goes() {
        let mut index = GcIndex::default();
        let owner = object("o", &[], false);
        index.stored(None, &owner);
        index.stored(None, &object("c", &["o"], false));
        assert!(!index.take_pass(), "the owner exists");
        index.deleted(&owner);
        assert!(index.take_pass());
        assert!(!index.take_pass(), "one pass per reason");
    }

    #[test]
    fn a_pass_for_an_object_whose_owner_does_not_exist() {
        let mut index = GcIndex::default();
        index.stored(None, &object("c", &["gone"], false));
        assert!(index.take_pass());
    }

    #[test]
    fn passes_while_anything_is_being_deleted() {
        let mut index = GcIndex::default();
        let live = object("n", &[], false);
        let terminating = object("n", &[], true);
        index.stored(None, &live);
        index.stored(Some(&live), &terminating);
        assert!(index.take_pass());
        assert!(index.take_pass(), "still deleting");
        index.deleted(&terminating);
        assert!(!index.take_pass());
    }

    #[test]
    fn an_update_that_drops_an_owner_is_no_longer_its_dependent() {
        let mut index = GcIndex::default();
        let owner = object("o", &[], false);
        let child = object("c", &["o"], false);
        index.stored(None, &owner);
        index.stored(None, &child);
        index.stored(Some(&child), &object("c", &[], false));
        index.deleted(&owner);
        assert!(!index.take_pass(), "nobody names the owner any more");
    }
}
