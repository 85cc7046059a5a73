//! Who depends on whom, kept from watch events so that a change reaches its dependents without
//! scanning every object.
//!
//! Each source object (an Agent) declares edges `(relation, target name)` in its namespace: its
//! ModelAPI, its MCPServers, its peers. A source's edges are replaced whenever it changes and
//! removed when it is deleted; [`RelationIndex::dependents`] answers in time proportional to the
//! number of dependents. Pure: callers feed it from their watch streams.
//!
//! Every name is kept once and shared by the edges that mention it: in a mesh each agent is the
//! target of many edges and the source of as many, and a copy of its name per edge would cost
//! more memory than the agent itself.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

/// The kind of dependency, e.g. `"modelapi"`, `"mcpserver"`, `"peer"`.
pub type Relation = &'static str;

/// A (namespace, name) pair.
pub type Name = (String, String);

/// A name, shared by every edge that mentions it.
type Shared = Arc<str>;

/// A source's edges, sorted.
type Edges = Box<[(Relation, Shared)]>;

#[derive(Debug, Default)]
pub struct RelationIndex {
    /// (relation, namespace, target) → sources that point at it.
    dependents: HashMap<(Relation, Shared, Shared), BTreeSet<Shared>>,
    /// (namespace, source) → its edges, sorted, to remove them when they change.
    edges: HashMap<(Shared, Shared), Edges>,
    /// Every name some edge mentions, once.
    names: HashSet<Shared>,
}

impl RelationIndex {
    /// Replaces the edges of `source` (namespace, name) with `edges`.
    pub fn set(&mut self, source: &Name, mut edges: Vec<(Relation, String)>) {
        edges.sort();
        edges.dedup();
        let (namespace, name) = source;
        let old = self.key(namespace, name).and_then(|k| self.edges.get(&k));
        let unchanged = match old {
            Some(old) => old
                .iter()
                .map(|(r, t)| (*r, &**t))
                .eq(edges.iter().map(|(r, t)| (*r, t.as_str()))),
            None => edges.is_empty(),
        };
        if unchanged {
            return;
        }
        self.remove(source);
        if edges.is_empty() {
            return;
        }
        let (namespace, name) = (self.share(namespace), self.share(name));
        let edges: Edges = edges
            .into_iter()
            .map(|(relation, target)| (relation, self.share(&target)))
            .collect();
        for (relation, target) in &edges {
            self.dependents
                .entry((*relation, namespace.clone(), target.clone()))
                .or_default()
                .insert(name.clone());
        }
        self.edges.insert((namespace, name), edges);
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
            let key = (*relation, namespace.clone(), target.clone());
            if let Some(set) = self.dependents.get_mut(&key) {
                set.remove(&name);
                if set.is_empty() {
                    self.dependents.remove(&key);
                }
            }
        }
        for shared in old.into_iter().map(|(_, t)| t).chain([namespace, name]) {
            self.release(shared);
        }
    }

    /// The sources in `namespace` with an edge `relation` to `target`, sorted by name.
    pub fn dependents(&self, relation: Relation, namespace: &str, target: &str) -> Vec<String> {
        let key = (|| Some((relation, self.find(namespace)?, self.find(target)?)))();
        key.and_then(|key| self.dependents.get(&key))
            .map(|set| set.iter().map(|s| s.to_string()).collect())
            .unwrap_or_default()
    }

    /// How many sources have edges (for tests and metrics).
    pub fn sources(&self) -> usize {
        self.edges.len()
    }

    fn key(&self, namespace: &str, name: &str) -> Option<(Shared, Shared)> {
        Some((self.find(namespace)?, self.find(name)?))
    }

    fn find(&self, name: &str) -> Option<Shared> {
        self.names.get(name).cloned()
    }

    /// The shared copy of `name`, made if no edge mentions it yet.
    fn share(&mut self, name: &str) -> Shared {
        if let Some(shared) = self.find(name) {
            return shared;
        }
        let shared: Shared = name.into();
        self.names.insert(shared.clone());
        shared
    }

    /// Drops `name`'s shared copy once no edge mentions it any more.
    fn release(&mut self, name: Shared) {
        // This handle and the set's own.
        if Arc::strong_count(&name) == 2 {
            self.names.remove(&name);
        }
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

        index.set(&name("a"), vec![("modelapi", "other".into())]);
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
