//! The best waiting job below each node of the quota tree: A7's tie-break between sibling
//! subtrees of equal share ([`super::fair`]). Kept up to date as jobs enter and leave their
//! queues, so that a pass orders siblings by every job that waits below them, not by the heads
//! it happens to visit: a head left asleep then changes nobody's order.

use std::collections::BTreeSet;

use crate::queue::JobOrder;
use crate::quota::QuotaTree;

/// Per tree node below the root, the queue order of every waiting job of the leaves under it.
#[derive(Clone, Default)]
pub(super) struct BestBelow {
    sets: Vec<BTreeSet<JobOrder>>,
}

impl BestBelow {
    /// Empty, for a tree of `nodes` nodes (0: no tree).
    pub(super) fn reset(&mut self, nodes: usize) {
        self.sets = vec![BTreeSet::new(); nodes];
    }

    /// A job of queue order `o` waits now on `leaf`.
    pub(super) fn insert(&mut self, tree: &QuotaTree, leaf: usize, o: JobOrder) {
        self.walk(tree, leaf, |s| {
            s.insert(o);
        });
    }

    /// The job of queue order `o` on `leaf` waits no more.
    pub(super) fn remove(&mut self, tree: &QuotaTree, leaf: usize, o: JobOrder) {
        self.walk(tree, leaf, |s| {
            s.remove(&o);
        });
    }

    /// The best (least) queue order of the jobs waiting below `n`.
    pub(super) fn best(&self, n: usize) -> Option<JobOrder> {
        self.sets.get(n)?.first().copied()
    }

    /// Applies `f` to the set of every node from `leaf` up to, but not including, the root
    /// (whose best orders no siblings).
    fn walk(&mut self, tree: &QuotaTree, leaf: usize, mut f: impl FnMut(&mut BTreeSet<JobOrder>)) {
        let mut n = leaf;
        while let Some(p) = tree.nodes.get(n).and_then(|node| node.parent) {
            if let Some(s) = self.sets.get_mut(n) {
                f(s);
            }
            n = p;
        }
    }
}
