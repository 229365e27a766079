//! Which resources some node below the root borrows (uses more than its min of), kept through
//! every charge, so that "may any job be reclaimed for `r`?" is answered without reading every
//! node. [`QuotaState::count_borrowers`], a read of every node, is the reference it is held to.
//! The root is left out: a victim is taken from what its side borrows where its path meets the
//! preemptor's, a child of their common ancestor, never the root.

use super::QuotaState;
use crate::resources::Res;

impl QuotaState {
    /// Whether some node below the root uses more than its min of `r`. When none does, no job
    /// of another leaf can be taken back for `r`: each is taken only from what its side
    /// borrows.
    pub fn anyone_borrows(&self, r: Res) -> bool {
        let kept = self.borrowers.get(usize::from(r.0)).is_some_and(|&n| n > 0);
        debug_assert_eq!(
            kept,
            self.borrowers_of(r) > 0,
            "the count of borrowing nodes of a resource"
        );
        kept
    }

    /// How many nodes below the root borrow `r`, read from every node.
    fn borrowers_of(&self, r: Res) -> usize {
        (0..self.tree.nodes.len())
            .filter(|&n| self.tree.nodes[n].parent.is_some() && self.borrowing(n, r))
            .count()
    }

    /// Per resource index below `resources`: [`Self::borrowers_of`].
    pub(super) fn count_borrowers(&self, resources: usize) -> Vec<u32> {
        (0..resources)
            .map(|i| {
                let n = self.borrowers_of(Res(u16::try_from(i).unwrap_or(u16::MAX)));
                u32::try_from(n).unwrap_or(u32::MAX)
            })
            .collect()
    }

    /// Node `n`'s use of `r` went from `before` to `after`: the count follows whether it
    /// borrows.
    pub(super) fn borrowing_moved(&mut self, n: usize, r: Res, before: i128, after: i128) {
        let m = self.min_of(n, r);
        if self.tree.nodes[n].parent.is_none() || (before > m) == (after > m) {
            return;
        }
        let i = usize::from(r.0);
        if self.borrowers.len() <= i {
            self.borrowers.resize(i + 1, 0);
        }
        if after > m {
            self.borrowers[i] += 1;
        } else {
            self.borrowers[i] = self.borrowers[i].saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::quota::QuotaTree;
    use crate::resources::{Demand, ResourceTable};

    fn state(table: &mut ResourceTable) -> QuotaState {
        // Mins on some resources and not others, a zero min, two levels.
        let tree = QuotaTree::parse(&json!({
            "apiVersion": "scheduling.sigs.k8s.io/v1beta1", "kind": "ElasticQuotaTree",
            "spec": {"root": {"name": "root",
                "min": {"cpu": "8", "nvidia.com/gpu": "4"},
                "max": {"cpu": "16", "nvidia.com/gpu": "8"},
                "children": [
                    {"name": "a", "min": {"cpu": "4", "nvidia.com/gpu": "2"},
                     "children": [
                        {"name": "a1", "namespaces": ["a1"], "min": {"cpu": "2", "nvidia.com/gpu": "0"}},
                        {"name": "a2", "namespaces": ["a2"], "min": {"nvidia.com/gpu": "2"}}
                     ]},
                    {"name": "b", "namespaces": ["b"], "min": {"cpu": "4", "memory": "1Gi"}}
                ]}}
        }))
        .expect("a valid tree");
        QuotaState::new(tree, table)
    }

    fn leaves(q: &QuotaState) -> Vec<usize> {
        (0..q.tree.nodes.len())
            .filter(|&n| q.tree.nodes[n].children.is_empty())
            .collect()
    }

    proptest! {
        /// Charges and refunds in any order: the kept count is the count read from every node.
        #[test]
        fn the_kept_count_is_the_count_of_every_node(
            ops in proptest::collection::vec((0usize..3, 0usize..4, 0i128..6000, any::<bool>()), 0..60)
        ) {
            let mut table = ResourceTable::default();
            let mut q = state(&mut table);
            let res = ["cpu", "nvidia.com/gpu", "memory", "example.com/fpga"]
                .map(|n| table.intern(n));
            let leaves = leaves(&q);
            let mut charged: Vec<(usize, Demand)> = Vec::new();
            for (leaf, r, milli, refund) in ops {
                if refund && !charged.is_empty() {
                    let (l, d) = charged.remove(milli as usize % charged.len());
                    q.charge(l, &d, -1);
                } else {
                    let d = Demand(vec![(res[r], milli * 1000)]);
                    let l = leaves[leaf % leaves.len()];
                    q.charge(l, &d, 1);
                    charged.push((l, d));
                }
                let kept = q.borrowers.clone();
                let read = q.count_borrowers(table.len());
                for i in 0..table.len().max(kept.len()) {
                    prop_assert_eq!(kept.get(i).copied().unwrap_or(0), read.get(i).copied().unwrap_or(0));
                }
                for &r in &res {
                    let below_root = (0..q.tree.nodes.len())
                        .any(|n| q.tree.nodes[n].parent.is_some() && q.borrowing(n, r));
                    prop_assert_eq!(q.anyone_borrows(r), below_root);
                }
            }
        }
    }

    #[test]
    fn a_node_borrows_past_its_min_and_not_at_it() {
        let mut table = ResourceTable::default();
        let mut q = state(&mut table);
        let gpu = table.intern("nvidia.com/gpu");
        let (a1, a2) = (leaves(&q)[0], leaves(&q)[1]);
        let two = Demand(vec![(gpu, 2000)]);
        // a2 at its min of 2, and so `a` at its own: nobody borrows.
        q.charge(a2, &two, 1);
        assert!(!q.anyone_borrows(gpu));
        // a1 names a min of 0: any use of it borrows (and takes `a` past its min).
        let one = Demand(vec![(gpu, 1)]);
        q.charge(a1, &one, 1);
        assert!(q.anyone_borrows(gpu));
        assert!(q.borrowing(a1, gpu) && !q.borrowing(a2, gpu));
        q.charge(a1, &one, -1);
        assert!(!q.anyone_borrows(gpu));
        // b at its min of memory: the root names none, so it uses more than its min, but no
        // job is ever taken back for what the root borrows.
        let mem = table.intern("memory");
        let b = leaves(&q)[2];
        q.charge(b, &Demand(vec![(mem, 1 << 30)]), 1);
        assert!(q.borrowing(0, mem) && !q.borrowing(b, mem));
        assert!(!q.anyone_borrows(mem));
    }
}
