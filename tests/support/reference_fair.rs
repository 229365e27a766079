//! The reference scheduler's fair order (A7 of docs/concepts.md), recomputed from scratch at
//! every question: usage from the jobs, shares as plain fractions compared by cross products,
//! and the tournament as a recursion over the whole tree.

use std::collections::BTreeSet;

use super::cycle::Class;
use super::{Amounts, MAX_JOBS, PODS, Reference, get};

/// `num / den`, compared by cross-multiplying (amounts in tests stay far below overflow).
#[derive(Clone, Copy, Debug)]
pub struct Frac(i128, i128);

impl Frac {
    fn lt(self, o: Frac) -> bool {
        let a = self.0.checked_mul(o.1).expect("share product");
        let b = o.0.checked_mul(self.1).expect("share product");
        a < b
    }

    fn eq(self, o: Frac) -> bool {
        !self.lt(o) && !o.lt(self)
    }
}

impl Reference {
    /// A7. The weighted dominant share node `n` would have with `extra` charged to it: over
    /// resources but pods and max-jobs, what it uses above its min, over what its parent lends
    /// (its max, else its children's mins), the largest, divided by the node's weight.
    pub fn share(&self, n: usize, extra: &Amounts) -> Frac {
        let t = self.tree.as_ref().expect("a tree");
        let Some(p) = t.nodes[n].parent else {
            return Frac(0, 1);
        };
        let used = self.used(n, &BTreeSet::new());
        let names: BTreeSet<&String> = used.keys().chain(extra.keys()).collect();
        let mut best = Frac(0, 1);
        for r in names {
            if r == PODS || r == MAX_JOBS {
                continue;
            }
            let borrowed = get(&used, r) + get(extra, r) - self.min(n, r);
            let lent = self
                .max(p, r)
                .unwrap_or_else(|| t.nodes[p].children.iter().map(|&c| self.min(c, r)).sum());
            if borrowed <= 0 || lent <= 0 {
                continue;
            }
            let f = Frac(borrowed * 1000, lent * t.nodes[n].weight.milli());
            if best.lt(f) {
                best = f;
            }
        }
        best
    }

    /// A7. The head to visit next among `left`: at every node, the child subtree with the
    /// lowest share now (ties: its best head's queue order); heads outside the tree by queue
    /// order, against the tree's.
    pub(super) fn next_fair<O: Ord + Copy>(
        &self,
        left: &BTreeSet<(O, Class)>,
    ) -> Option<(O, Class)> {
        let heads: Vec<(O, Class, Option<usize>)> = left
            .iter()
            .map(|(o, c)| {
                let leaf = self.head(c).and_then(|j| self.leaf(j));
                (*o, c.clone(), leaf)
            })
            .collect();
        let loose = heads
            .iter()
            .filter(|h| h.2.is_none())
            .map(|h| (h.0, h.1.clone()))
            .min();
        let tree = match &self.tree {
            Some(_) => self.best_below(0, &heads),
            None => None,
        };
        match (tree, loose) {
            (Some(t), Some(l)) => Some(t.min(l)),
            (t, l) => t.or(l),
        }
    }

    /// The best head in the subtree of `n`.
    fn best_below<O: Ord + Copy>(
        &self,
        n: usize,
        heads: &[(O, Class, Option<usize>)],
    ) -> Option<(O, Class)> {
        let t = self.tree.as_ref().expect("a tree");
        let here = heads
            .iter()
            .filter(|h| h.2 == Some(n))
            .map(|h| (h.0, h.1.clone()))
            .min();
        let mut best: Option<(Frac, (O, Class))> = None;
        for &c in &t.nodes[n].children {
            let Some(h) = self.best_below(c, heads) else {
                continue;
            };
            let s = self.share(c, &Amounts::new());
            let better = match &best {
                None => true,
                Some((bs, bh)) => s.lt(*bs) || (s.eq(*bs) && h < *bh),
            };
            if better {
                best = Some((s, h));
            }
        }
        match (here, best) {
            (Some(h), Some((_, b))) => Some(h.min(b)),
            (h, b) => h.or(b.map(|(_, b)| b)),
        }
    }
}
