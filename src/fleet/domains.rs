//! A member's topology domains: its nodes grouped per level by their label values.
//!
//! Owns the grouping only (computed once when the member is set, since nodes and labels change
//! only then). A domain of level `i` is a set of nodes that share the values of levels `0..=i`
//! (a rack is named inside its block, so `rack-1` of two blocks are two domains). A node that
//! lacks the label of a level, or of a wider one, is in no domain of that level: a job that
//! requires the level never goes there.

use std::collections::BTreeMap;

/// One domain: the label values of the levels down to its own, and its nodes (ascending index).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Domain {
    pub path: Vec<String>,
    pub nodes: Vec<usize>,
}

impl Domain {
    /// `block-a/rack-1`: the values from the widest level down.
    pub fn name(&self) -> String {
        self.path.join("/")
    }
}

/// A member's levels, widest first, and per level its domains (ordered by path).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Domains {
    pub levels: Vec<String>,
    pub per_level: Vec<Vec<Domain>>,
    /// Per level, per node, the index of its domain there.
    of_node: Vec<Vec<Option<usize>>>,
}

impl Domains {
    /// Groups nodes (given by their labels, in node order) by `levels`.
    pub fn new(levels: &[String], nodes: &[&BTreeMap<String, String>]) -> Domains {
        let mut per_level = Vec::with_capacity(levels.len());
        let mut of_node = Vec::with_capacity(levels.len());
        for depth in 1..=levels.len() {
            let mut by_path: BTreeMap<Vec<&str>, Vec<usize>> = BTreeMap::new();
            for (i, labels) in nodes.iter().enumerate() {
                let path: Option<Vec<&str>> = levels[..depth]
                    .iter()
                    .map(|l| labels.get(l).map(String::as_str))
                    .collect();
                if let Some(p) = path {
                    by_path.entry(p).or_default().push(i);
                }
            }
            let mut index = vec![None; nodes.len()];
            let domains: Vec<Domain> = by_path
                .into_iter()
                .enumerate()
                .map(|(di, (path, nodes))| {
                    for &n in &nodes {
                        index[n] = Some(di);
                    }
                    Domain {
                        path: path.into_iter().map(String::from).collect(),
                        nodes,
                    }
                })
                .collect();
            per_level.push(domains);
            of_node.push(index);
        }
        Domains {
            levels: levels.to_vec(),
            per_level,
            of_node,
        }
    }

    /// The index of `level` among the levels.
    pub fn level(&self, level: &str) -> Option<usize> {
        self.levels.iter().position(|l| l == level)
    }

    /// The domain of level `li` holding every one of `nodes`, if they share one.
    pub fn common(&self, li: usize, nodes: impl IntoIterator<Item = usize>) -> Option<&Domain> {
        let index = self.of_node.get(li)?;
        let mut found: Option<usize> = None;
        for n in nodes {
            let d = (*index.get(n)?)?;
            if found.is_some_and(|f| f != d) {
                return None;
            }
            found = Some(d);
        }
        self.per_level[li].get(found?)
    }

    /// The narrowest level at which `nodes` share one domain, with that domain.
    pub fn tightest(&self, nodes: &[usize]) -> Option<(usize, &Domain)> {
        (0..self.levels.len())
            .rev()
            .find_map(|li| self.common(li, nodes.iter().copied()).map(|d| (li, d)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn racks_are_named_inside_their_block_and_unlabelled_nodes_are_in_none() {
        let lab = |b: Option<&str>, r: Option<&str>| {
            let mut m = BTreeMap::new();
            if let Some(b) = b {
                m.insert("block".to_string(), b.to_string());
            }
            if let Some(r) = r {
                m.insert("rack".to_string(), r.to_string());
            }
            m
        };
        let nodes = [
            lab(Some("b1"), Some("r1")),
            lab(Some("b2"), Some("r1")),
            lab(Some("b1"), Some("r1")),
            lab(None, Some("r1")),
            lab(Some("b2"), None),
        ];
        let refs: Vec<&BTreeMap<String, String>> = nodes.iter().collect();
        let d = Domains::new(&["block".into(), "rack".into()], &refs);
        let names = |li: usize| -> Vec<(String, Vec<usize>)> {
            d.per_level[li]
                .iter()
                .map(|x| (x.name(), x.nodes.clone()))
                .collect()
        };
        assert_eq!(
            names(0),
            vec![("b1".into(), vec![0, 2]), ("b2".into(), vec![1, 4])]
        );
        assert_eq!(
            names(1),
            vec![("b1/r1".into(), vec![0, 2]), ("b2/r1".into(), vec![1])]
        );
        assert_eq!(d.common(1, [0, 2]).map(Domain::name), Some("b1/r1".into()));
        assert_eq!(d.common(1, [0, 1]), None);
        assert_eq!(d.common(1, [3]), None);
        assert_eq!(
            d.tightest(&[1, 4]).map(|(l, x)| (l, x.name())),
            Some((0, "b2".into()))
        );
        assert_eq!(d.level("rack"), Some(1));
    }
}
