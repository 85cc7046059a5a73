//! Who depends on whom, kept from watch events so that a change reaches its dependents without
//! scanning every object.
//!
//! Each source object (an Agent) declares edges `(relation, target name)` in its namespace: its
//! ModelAPI, its MCPServers, its peers. A source's edges are replaced whenever it changes and
//! removed when it is deleted; [`RelationIndex::dependents`] answers in time proportional to the
//! number of dependents. Pure: callers feed it from their watch streams.
//!
//! Names are kept once and edges refer to them by number: in a mesh each agent is the target of
//! many edges and the source of as many, and a copy of its name (or even a pointer to it) per
//! edge would cost more memory than the agent itself.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use kube::Resource;

/// The kind of dependency, e.g. `"modelapi"`, `"mcpserver"`, `"peer"`.
pub type Relation = &'static str;

/// A (namespace, name) pair.
pub type Name = (String, String);

/// (namespace, name) of an object.
pub fn name_of<K: Resource>(object: &K) -> Name {
    let meta = object.meta();
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

/// A name's number in [`Names`].
type Id = u32;

/// A relation's number in [`RelationIndex::relations`].
type RelationId = u8;

/// A source's edges, sorted.
type Edges = Box<[(RelationId, Id)]>;

#[derive(Debug, Default)]
pub struct RelationIndex {
    /// (relation, namespace, target) → sources that point at it.
    dependents: HashMap<(RelationId, Id, Id), HashSet<Id>>,
    /// (namespace, source) → its edges, sorted, to remove them when they change.
    edges: HashMap<(Id, Id), Edges>,
    names: Names,
    /// The relations seen, by number (a handful).
    relations: Vec<Relation>,
}

impl RelationIndex {
    /// Replaces the edges of `source` (namespace, name) with `edges`.
    pub fn set(&mut self, source: &Name, edges: Vec<(Relation, String)>) {
        let (namespace, name) = source;
        let mut wanted: Vec<(RelationId, &str)> = edges
            .iter()
            .map(|(relation, target)| (self.relation_id(relation), target.as_str()))
            .collect();
        wanted.sort();
        wanted.dedup();
        let old = self.key(namespace, name).and_then(|k| self.edges.get(&k));
        let unchanged = match old {
            Some(old) => old
                .iter()
                .map(|(r, t)| (*r, self.names.name(*t)))
                .eq(wanted.iter().copied()),
            None => wanted.is_empty(),
        };
        if unchanged {
            return;
        }
        self.remove(source);
        if wanted.is_empty() {
            return;
        }
        let (namespace, name) = (self.names.acquire(namespace), self.names.acquire(name));
        let edges: Edges = wanted
            .into_iter()
            .map(|(relation, target)| (relation, self.names.acquire(target)))
            .collect();
        for (relation, target) in edges.iter() {
            self.dependents
                .entry((*relation, namespace, *target))
                .or_default()
                .insert(name);
        }
        self.edges.insert((namespace, name), edges);
    }

    /// Keeps the edges of an object from its watch event: replaced on every change (`edges`
    /// computes them from the object), removed on deletion.
    pub fn observe<K: kube::Resource>(
        &mut self,
        event: &kube::runtime::watcher::Event<K>,
        edges: impl Fn(&K) -> Vec<(Relation, String)>,
    ) {
        use kube::runtime::watcher::Event;
        match event {
            Event::Apply(object) | Event::InitApply(object) => {
                self.set(&name_of(object), edges(object))
            }
            Event::Delete(object) => self.remove(&name_of(object)),
            Event::Init | Event::InitDone => {}
        }
    }

    /// Removes every edge of `source`.
    pub fn remove(&mut self, source: &Name) {
        let (namespace, name) = source;
        let Some(key) = self.key(namespace, name) else {
            return;
        };
        let Some(old) = self.edges.remove(&key) else {
            return;
        };
        let (namespace, name) = key;
        for (relation, target) in old.iter() {
            let key = (*relation, namespace, *target);
            if let Some(set) = self.dependents.get_mut(&key) {
                set.remove(&name);
                if set.is_empty() {
                    self.dependents.remove(&key);
                }
            }
            self.names.release(*target);
        }
        self.names.release(namespace);
        self.names.release(name);
    }

    /// The sources in `namespace` with an edge `relation` to `target`, sorted by name.
    pub fn dependents(&self, relation: Relation, namespace: &str, target: &str) -> Vec<String> {
        let key = (|| {
            let relation = self.relations.iter().position(|r| *r == relation)?;
            Some((
                relation as RelationId,
                self.names.id(namespace)?,
                self.names.id(target)?,
            ))
        })();
        let mut names: Vec<String> = key
            .and_then(|key| self.dependents.get(&key))
            .into_iter()
            .flatten()
            .map(|id| self.names.name(*id).to_string())
            .collect();
        names.sort();
        names
    }

    /// The targets of `source`'s edges of `relation`, sorted by name.
    pub fn targets(&self, relation: Relation, source: &Name) -> Vec<String> {
        let (namespace, name) = source;
        let Some(relation) = self.relations.iter().position(|r| *r == relation) else {
            return Vec::new();
        };
        let mut names: Vec<String> = self
            .key(namespace, name)
            .and_then(|key| self.edges.get(&key))
            .into_iter()
            .flatten()
            .filter(|(r, _)| *r as usize == relation)
            .map(|(_, target)| self.names.name(*target).to_string())
            .collect();
        names.sort();
        names
    }

    /// How many sources have edges (for tests and metrics).
    pub fn sources(&self) -> usize {
        self.edges.len()
    }

    fn key(&self, namespace: &str, name: &str) -> Option<(Id, Id)> {
        Some((self.names.id(namespace)?, self.names.id(name)?))
    }

    fn relation_id(&mut self, relation: Relation) -> RelationId {
        let id = match self.relations.iter().position(|r| *r == relation) {
            Some(id) => id,
            None => {
                self.relations.push(relation);
                self.relations.len() - 1
            }
        };
        RelationId::try_from(id).expect("fewer than 256 relations")
    }
}

/// Every name an edge mentions, once, numbered, with how many mentions hold it.
#[derive(Debug, Default)]
struct Names {
    ids: HashMap<Arc<str>, Id>,
    /// By id: the name and its mentions (None: a free number).
    entries: Vec<Option<(Arc<str>, u32)>>,
    free: Vec<Id>,
}

impl Names {
    fn id(&self, name: &str) -> Option<Id> {
        self.ids.get(name).copied()
    }

    fn name(&self, id: Id) -> &str {
        self.entries[id as usize]
            .as_ref()
            .map_or("", |(name, _)| name)
    }

    /// The number of `name`, counting one more mention of it.
    fn acquire(&mut self, name: &str) -> Id {
        if let Some(id) = self.id(name) {
            if let Some((_, mentions)) = &mut self.entries[id as usize] {
                *mentions += 1;
            }
            return id;
        }
        let shared: Arc<str> = name.into();
        let entry = Some((shared.clone(), 1));
        let id = match self.free.pop() {
            Some(id) => {
                self.entries[id as usize] = entry;
                id
            }
            None => {
                self.entries.push(entry);
                Id::try_from(self.entries.len() - 1).expect("fewer than 2^32 names")
            }
        };
        self.ids.insert(shared, id);
        id
    }

    /// One mention of `id` fewer; the name goes with its last mention.
    fn release(&mut self, id: Id) {
        let slot = &mut self.entries[id as usize];
        if let Some((name, mentions)) = slot {
            *mentions -= 1;
            if *mentions == 0 {
                self.ids.remove(&**name);
                *slot = None;
                self.free.push(id);
            }
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.ids.len()
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(n: &str) -> Name {
        ("default".into(), n.into())
    }

    #[test]
    fn edges_are_replaced_on_change_and_removed_on_delete() {
        let mut index = RelationIndex::default();
        index.set(
            &name("a"),
            vec![("modelapi", "llm".into()), ("peer", "b".into())],
        );
        index.set(
            &name("b"),
            vec![("modelapi", "llm".into()), ("peer", "a".into())],
        );
        assert_eq!(index.dependents("modelapi", "default", "llm"), ["a", "b"]);
        assert_eq!(index.dependents("peer", "default", "b"), ["a"]);
        assert_eq!(index.targets("peer", &name("a")), ["b"]);
        assert_eq!(index.targets("modelapi", &name("b")), ["llm"]);

        index.set(&name("a"), vec![("modelapi", "other".into())]);
        assert!(index.targets("peer", &name("a")).is_empty());
        assert_eq!(index.dependents("modelapi", "default", "llm"), ["b"]);
        assert_eq!(index.dependents("modelapi", "default", "other"), ["a"]);
        assert!(index.dependents("peer", "default", "b").is_empty());

        index.remove(&name("b"));
        assert!(index.dependents("modelapi", "default", "llm").is_empty());
        assert!(index.dependents("peer", "default", "a").is_empty());
        assert_eq!(index.sources(), 1);

        index.remove(&name("a"));
        assert_eq!(index.sources(), 0);
        assert!(index.names.is_empty(), "no name outlives its last edge");
    }

    #[test]
    fn each_name_is_kept_once() {
        let mut index = RelationIndex::default();
        let mesh = ["a", "b", "c"];
        for source in mesh {
            let peers = mesh.iter().filter(|p| **p != source);
            index.set(
                &name(source),
                peers.map(|p| ("peer", p.to_string())).collect(),
            );
        }
        assert_eq!(index.names.len(), 4, "the namespace and three agents");
        assert_eq!(index.dependents("peer", "default", "a"), ["b", "c"]);
        index.set(&name("a"), vec![("peer", "b".into())]);
        index.set(&name("a"), vec![("peer", "b".into())]);
        assert_eq!(index.dependents("peer", "default", "c"), ["b"]);
        assert_eq!(index.dependents("peer", "default", "b"), ["a", "c"]);
        assert_eq!(index.names.len(), 4);

        // A number freed with its name's last mention serves the next new name.
        index.remove(&name("c"));
        index.set(&name("b"), vec![("peer", "a".into())]);
        index.set(&name("d"), vec![("peer", "a".into())]);
        assert_eq!(index.dependents("peer", "default", "a"), ["b", "d"]);
        assert!(index.dependents("peer", "default", "c").is_empty());
        assert_eq!(index.names.len(), 4, "the namespace, a, b and d");
        assert_eq!(index.names.entries.len(), 4, "c's number was reused");
    }

    #[test]
    fn namespaces_and_relations_are_separate() {
        let mut index = RelationIndex::default();
        index.set(&("ns1".into(), "a".into()), vec![("peer", "x".into())]);
        index.set(&("ns2".into(), "a".into()), vec![("mcpserver", "x".into())]);
        assert_eq!(index.dependents("peer", "ns1", "x"), ["a"]);
        assert!(index.dependents("peer", "ns2", "x").is_empty());
        assert_eq!(index.dependents("mcpserver", "ns2", "x"), ["a"]);
    }

    #[test]
    fn a_self_edge_and_a_duplicate_are_one_edge() {
        let mut index = RelationIndex::default();
        index.set(&name("a"), vec![("peer", "a".into()), ("peer", "a".into())]);
        assert_eq!(index.dependents("peer", "default", "a"), ["a"]);
        index.remove(&name("a"));
        assert!(index.dependents("peer", "default", "a").is_empty());
    }
}
