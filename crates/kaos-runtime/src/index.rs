//! Who depends on whom, kept from watch events so that a change reaches its dependents without
//! scanning every object.
//!
//! Each source object (an Agent) declares edges `(relation, target name)` in its namespace: its
//! ModelAPI, its MCPServers, its peers. A source's edges are replaced whenever it changes and
//! removed when it is deleted; [`RelationIndex::dependents`] answers in time proportional to the
//! number of dependents. Pure: callers feed it from their watch streams.

use std::collections::{BTreeSet, HashMap};

/// The kind of dependency, e.g. `"modelapi"`, `"mcpserver"`, `"peer"`.
pub type Relation = &'static str;

/// A (namespace, name) pair.
pub type Name = (String, String);

#[derive(Debug, Default)]
pub struct RelationIndex {
    /// (relation, namespace, target) → sources that point at it.
    dependents: HashMap<(Relation, String, String), BTreeSet<String>>,
    /// source → its edges, to remove them when they change.
    edges: HashMap<Name, Vec<(Relation, String)>>,
}

impl RelationIndex {
    /// Replaces the edges of `source` (namespace, name) with `edges`.
    pub fn set(&mut self, source: &Name, mut edges: Vec<(Relation, String)>) {
        edges.sort();
        edges.dedup();
        if self.edges.get(source) == Some(&edges) {
            return;
        }
        self.remove(source);
        let (namespace, name) = source;
        for (relation, target) in &edges {
            self.dependents
                .entry((*relation, namespace.clone(), target.clone()))
                .or_default()
                .insert(name.clone());
        }
        if !edges.is_empty() {
            self.edges.insert(source.clone(), edges);
        }
    }

    /// Removes every edge of `source`.
    pub fn remove(&mut self, source: &Name) {
        let Some(old) = self.edges.remove(source) else {
            return;
        };
        let (namespace, name) = source;
        for (relation, target) in old {
            let key = (relation, namespace.clone(), target);
            if let Some(set) = self.dependents.get_mut(&key) {
                set.remove(name);
                if set.is_empty() {
                    self.dependents.remove(&key);
                }
            }
        }
    }

    /// The sources in `namespace` with an edge `relation` to `target`, sorted by name.
    pub fn dependents(&self, relation: Relation, namespace: &str, target: &str) -> Vec<String> {
        self.dependents
            .get(&(relation, namespace.to_string(), target.to_string()))
            .map(|set| set.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// How many sources have edges (for tests and metrics).
    pub fn sources(&self) -> usize {
        self.edges.len()
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
