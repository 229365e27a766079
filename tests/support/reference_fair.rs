//! The reference scheduler's fair order (A7 of docs/concepts.md) and preemption for fairness
//! (F1–F5), recomputed from scratch at every question: usage from the jobs, shares as plain
//! fractions compared by cross products, and the tournament as a recursion over the whole tree.

use std::collections::{BTreeMap, BTreeSet};

use super::cycle::{Class, Order};
use super::{Amounts, MAX_JOBS, PODS, Reference, get, path_up};

/// The attribute and value of F1.
const FAIR_PREEMPTION: &str = "muster.dev/fair-sharing-preemption";

/// `num / den`, compared by cross-multiplying (amounts in tests stay far below overflow).
#[derive(Clone, Copy, Debug)]
pub struct Frac(i128, i128);

impl Frac {
    pub(super) fn lt(self, o: Frac) -> bool {
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

    /// A7. The head to visit next among `left`: at every node, among the child subtrees with a
    /// head in `left`, the one with the lowest share now; ties go to the subtree whose first
    /// head in this same order over every waiting head below it (not only those in `left`)
    /// comes first in queue order. Heads outside the tree by queue order, against the tree's.
    pub(super) fn next_fair(&self, left: &BTreeSet<(Order, Class)>) -> Option<(Order, Class)> {
        let heads: Vec<(Order, Class, Option<usize>)> = left
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
            Some(_) => {
                // Every class's head: its best waiting job.
                let mut best: BTreeMap<Class, (Order, Option<usize>)> = BTreeMap::new();
                for j in self.waiting() {
                    let (c, o) = (self.class(j), self.order(j));
                    if best.get(&c).is_none_or(|b| o < b.0) {
                        best.insert(c, (o, self.leaf(j)));
                    }
                }
                let all: Vec<(Order, Class, Option<usize>)> =
                    best.into_iter().map(|(c, (o, l))| (o, c, l)).collect();
                self.first_in(0, &heads, &all)
            }
            None => None,
        };
        match (tree, loose) {
            (Some(t), Some(l)) => Some(t.min(l)),
            (t, l) => t.or(l),
        }
    }

    /// The first of `heads` in the fair order of the subtree of `n`, subtrees of equal share
    /// ordered by their first head among `all` (every waiting head).
    fn first_in(
        &self,
        n: usize,
        heads: &[(Order, Class, Option<usize>)],
        all: &[(Order, Class, Option<usize>)],
    ) -> Option<(Order, Class)> {
        let t = self.tree.as_ref().expect("a tree");
        let here = heads
            .iter()
            .filter(|h| h.2 == Some(n))
            .map(|h| (h.0, h.1.clone()))
            .min();
        let mut best: Option<(Frac, Option<Order>, (Order, Class))> = None;
        for &c in &t.nodes[n].children {
            let Some(h) = self.first_in(c, heads, all) else {
                continue;
            };
            let s = self.share(c, &Amounts::new());
            let w = self.first_in(c, all, all).map(|f| f.0);
            let better = match &best {
                None => true,
                Some((bs, bw, _)) => s.lt(*bs) || (s.eq(*bs) && w < *bw),
            };
            if better {
                best = Some((s, w, h));
            }
        }
        match (here, best) {
            (Some(h), Some((_, _, b))) => Some(h.min(b)),
            (h, b) => h.or(b.map(|(_, _, b)| b)),
        }
    }

    /// The child of `p` on the path of `leaf` up to the root, if `p` is on it.
    pub(super) fn side_below(&self, p: usize, leaf: usize) -> Option<usize> {
        let up = path_up(self.tree.as_ref()?, leaf);
        let i = up.iter().position(|&n| n == p)?;
        i.checked_sub(1).map(|i| up[i])
    }

    /// F1–F5. Preemption for fairness: at each node P of the job's path that allows it (nearest
    /// first, and not yet used for it this cycle, F5), with A the job's side below P and s A's
    /// share with the job admitted (F2): candidates are the admitted jobs below P but not below
    /// A whose side's share now is above s, asking a short resource, in victim order (F3);
    /// R5 and F4 keep them, R6 and R7 choose among them. The first P where that works is used.
    pub(super) fn fair_preempt(
        &mut self,
        job: usize,
        leaf: usize,
        short: &[String],
    ) -> Option<(Vec<usize>, usize)> {
        let t = self.tree.as_ref()?;
        if short.is_empty() {
            return None;
        }
        let up = path_up(t, leaf);
        for w in up.windows(2) {
            let (side, p) = (w[0], w[1]);
            let on = t.nodes[p]
                .attributes
                .get(FAIR_PREEMPTION)
                .map(String::as_str)
                == Some("LessThanOrEqualToFinalShare");
            if !on || self.fair_used.contains(&p) {
                continue;
            }
            let mine = self.share(side, &self.jobs[job].charge);
            let mut order: Vec<usize> = (0..self.jobs.len())
                .filter(|&v| matches!(self.jobs[v].state, super::State::Admitted { .. }))
                .filter(|&v| {
                    self.leaf(v).is_some_and(|vl| {
                        vl != leaf
                            && self.side_below(p, vl).is_some_and(|b| {
                                b != side && mine.lt(self.share(b, &Amounts::new()))
                            })
                    })
                })
                .filter(|&v| self.asks_any(v, short))
                .collect();
            self.victim_order(&mut order);
            if let Some(done) = self.take_victims(job, leaf, short, &order, &[], Some((p, mine))) {
                self.fair_used.insert(p);
                self.fair_preemptions += 1;
                return Some(done);
            }
        }
        None
    }
}
