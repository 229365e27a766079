//! Fair sharing between siblings: the order in which a pass visits the woken queues' heads
//! (rule A7 of docs/concepts.md). At every node of the quota tree, the child subtree with the
//! lowest weighted dominant share of what it borrows now ([`crate::quota::Share`]) goes first;
//! ties go to the subtree whose first head in this same order, over every waiting head below
//! it, comes first in queue order (priority, then submission). Inside one queue the order is
//! the queue's own. Without a tree, or for heads outside it, queue order.
//!
//! Both keys depend on the state alone, never on which heads a pass visits: the share is the
//! one a subtree has now, not the one it would have with its head admitted (Armada's DRF,
//! where Kueue counts the head), and the tie-break reads every waiting head
//! ([`Scheduler::heads`], kept as heads and usage change), not the heads in the pass's round.
//! So the order is one total order over every head, and a head that is not woken (it would
//! wait as before) changes nobody's place in it.
//!
//! A [`Round`] keeps, at each inner node, the keys of its children that have a head of the
//! round below them; a pop walks down from the root through each node's first child. A visit
//! changes the usage and the heads of one leaf only, so only that leaf's path is recomputed
//! ([`Scheduler::refresh`]); a reclaim also changes its victims' leaves' usage, whose paths are
//! then recomputed as well. A push or a pop changes heads only, no share: its walk up stops at
//! the first node whose key is unchanged. The round of every head is kept the same way across
//! passes.

use std::collections::BTreeSet;
use std::fmt;

use serde::Serialize;

use super::sorted::Sorted;
use super::{ClassId, Scheduler};
use crate::queue::JobOrder;
use crate::quota::Share;
use crate::resources::Demand;

/// A subtree's place among its siblings: its share now, then its first waiting head's order.
type Key = (Share, Option<JobOrder>);

/// The heads a pass has still to visit, in fair order. Indexed by tree node; keys are brought
/// up to date lazily: a push only marks its leaf, and the next pop refreshes the marked paths.
#[derive(Clone, Default)]
pub(super) struct Round {
    /// Heads outside any tree leaf (no tree), in queue order.
    loose: BTreeSet<(JobOrder, ClassId)>,
    /// Per node (a leaf), its heads in queue order.
    leaves: Vec<Sorted<(JobOrder, ClassId)>>,
    /// Per inner node, the key of each child that has a head of the round below it, with the
    /// child.
    kids: Vec<Sorted<(Key, usize)>>,
    /// The key each node has in its parent's set.
    key: Vec<Option<Key>>,
    /// Leaves whose path must be refreshed before the next pop, each once.
    stale: Vec<usize>,
    marked: Vec<bool>,
    /// Marked leaves whose usage changed too (not only the heads below them): their whole path
    /// is recomputed. For the others the walk up stops at the first node whose key is the same.
    usage: Vec<bool>,
}

impl Round {
    /// Every head left, in no particular order; the round is empty after.
    pub(super) fn drain(&mut self) -> Vec<(JobOrder, ClassId)> {
        let mut all: Vec<(JobOrder, ClassId)> =
            std::mem::take(&mut self.loose).into_iter().collect();
        for s in &mut self.leaves {
            all.extend(s.take());
        }
        for k in &mut self.kids {
            k.clear();
        }
        self.key.iter_mut().for_each(|k| *k = None);
        self.stale.clear();
        self.marked.iter_mut().for_each(|m| *m = false);
        self.usage.iter_mut().for_each(|m| *m = false);
        all
    }

    /// `leaf`'s path is to be recomputed: its usage (and with it every share on its path)
    /// changed, and maybe its heads.
    pub(super) fn mark(&mut self, leaf: usize) {
        if leaf < self.usage.len() {
            self.usage[leaf] = true;
        }
        self.mark_heads(leaf);
    }

    /// `leaf`'s heads changed, nothing's usage: its path is recomputed up to the first node
    /// whose key is unchanged. A node's key is its share, its first waiting head and whether a
    /// head of the round is below it. No share moved. In the round of every head a node's
    /// first head follows from its children's keys; in a pass's round it is read from the
    /// round of every head, whose heads change within a pass only by an admission, which
    /// marks its leaf with [`Self::mark`]. So once a node's key is the same, nothing above it
    /// changes by this leaf (each pick is checked against a round recomputed from scratch in
    /// debug builds).
    pub(super) fn mark_heads(&mut self, leaf: usize) {
        if leaf < self.marked.len() && !self.marked[leaf] {
            self.marked[leaf] = true;
            self.stale.push(leaf);
        }
    }

    /// Takes the next stale leaf, and whether its usage changed.
    fn next_stale(&mut self) -> Option<(usize, bool)> {
        let leaf = self.stale.pop()?;
        self.marked[leaf] = false;
        Some((leaf, std::mem::take(&mut self.usage[leaf])))
    }
}

/// One node of a job's path in fair sharing, for `explain`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FairRow {
    /// `root/team-a`.
    pub node: String,
    /// `1`, `500m`.
    pub weight: String,
    /// Its weighted dominant share now: `3/8 (0.375)`, `0`.
    pub share: String,
    /// Its fair share among its active siblings ([`Scheduler::fair_shares`]): `1/2 (0.500)`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fair_share: Option<String>,
    /// What the share comes from: `nvidia.com/gpu 6 above min of 16 lent`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dominant: Option<String>,
}

/// The fair-sharing lines of a pending job's explanation.
pub fn write_fair(f: &mut fmt::Formatter<'_>, rows: &[FairRow]) -> fmt::Result {
    if rows.is_empty() {
        return Ok(());
    }
    writeln!(
        f,
        "Fair sharing (among siblings, the lowest weighted share of what it borrows goes first):"
    )?;
    let wn = rows.iter().map(|r| r.node.len()).max().unwrap_or(0);
    for r in rows {
        write!(
            f,
            "  {:<wn$}  weight {}  share {}",
            r.node, r.weight, r.share
        )?;
        match &r.dominant {
            Some(d) => writeln!(f, ": {d}")?,
            None => writeln!(f, ": borrows nothing")?,
        }
    }
    Ok(())
}

impl Scheduler {
    /// Per tree node, its fair share: the share each active child of its parent would have if
    /// the active children borrowed all the parent lends in proportion to their weights, that
    /// is 1 over the sum of their weights. Active: it borrows now, or a job waits below it.
    /// `None` for the root and for a node that is not active. A share above the fair share
    /// means the node takes more than its part while a sibling waits.
    pub(super) fn fair_shares(&self) -> Vec<Option<Share>> {
        let Some(q) = &self.quota else {
            return Vec::new();
        };
        let nodes = &q.tree.nodes;
        let mut active = vec![false; nodes.len()];
        let mark = |mut n: usize, active: &mut Vec<bool>| {
            while !active[n] {
                active[n] = true;
                match nodes[n].parent {
                    Some(p) => n = p,
                    None => break,
                }
            }
        };
        for c in &self.classes {
            if let Some(&(_, j)) = c.jobs.iter().next()
                && let Some(leaf) = self.queues.leaf(self.jobs[j].queue)
            {
                mark(leaf, &mut active);
            }
        }
        for n in 0..nodes.len() {
            if !q.share(n, &Demand::default()).0.is_zero() {
                mark(n, &mut active);
            }
        }
        let mut weights = vec![0i128; nodes.len()];
        for (n, node) in nodes.iter().enumerate() {
            if let (true, Some(p)) = (active[n], node.parent) {
                weights[p] += q.weight_milli(n);
            }
        }
        nodes
            .iter()
            .enumerate()
            .map(|(n, node)| {
                let p = node.parent?;
                let w = u128::try_from(weights[p]).ok().filter(|w| *w > 0)?;
                active[n].then_some(Share { num: 1000, den: w })
            })
            .collect()
    }

    /// Fair sharing on the path of `job`'s queue below the root, leaf first.
    pub(super) fn fair_rows(&self, job: super::JobId) -> Option<Vec<FairRow>> {
        let q = self.quota.as_ref()?;
        let leaf = self.queues.leaf(self.jobs[job].queue)?;
        let fair = self.fair_shares();
        Some(
            q.tree
                .path_up(leaf)
                .into_iter()
                .filter(|&n| q.tree.nodes[n].parent.is_some())
                .map(|n| {
                    let (share, d) = q.share(n, &Demand::default());
                    FairRow {
                        node: q.tree.nodes[n].path.clone(),
                        weight: q.tree.nodes[n].weight.to_string(),
                        share: share.to_string(),
                        fair_share: fair.get(n).copied().flatten().map(|f| f.to_string()),
                        dominant: d.map(|d| q.describe_dominant(&d, &self.table)),
                    }
                })
                .collect(),
        )
    }

    /// The leaf a class's queue sits on, when there is a tree.
    fn class_leaf(&self, c: ClassId) -> Option<usize> {
        self.quota.as_ref()?;
        let &(_, job) = self.classes[c].jobs.iter().next()?;
        self.queues.leaf(self.jobs[job].queue)
    }

    /// An empty round for the tree in force.
    pub(super) fn fair_round(&self) -> Round {
        let n = self.quota.as_ref().map_or(0, |q| q.tree.nodes.len());
        Round {
            leaves: vec![Sorted::default(); n],
            kids: vec![Sorted::default(); n],
            key: vec![None; n],
            marked: vec![false; n],
            usage: vec![false; n],
            ..Round::default()
        }
    }

    /// Adds a class head to the round.
    pub(super) fn fair_push(&self, round: &mut Round, o: JobOrder, c: ClassId) {
        match self.class_leaf(c).filter(|l| *l < round.leaves.len()) {
            Some(leaf) => {
                round.leaves[leaf].insert((o, c));
                round.mark_heads(leaf);
            }
            None => {
                round.loose.insert((o, c));
            }
        }
    }

    /// The next head to visit, taken out of the round.
    pub(super) fn fair_pop(&mut self, round: &mut Round) -> Option<(JobOrder, ClassId)> {
        self.heads_fresh();
        while let Some((leaf, usage)) = round.next_stale() {
            self.refresh(round, leaf, Some(&self.heads), usage);
        }
        let tree = if round.leaves.is_empty() {
            None
        } else {
            Self::first_below(round, 0)
        };
        let loose = round.loose.first().copied();
        let (pick, node) = match (tree, loose) {
            (Some((t, n)), Some(l)) if t <= l => (t, Some(n)),
            (Some((t, n)), None) => (t, Some(n)),
            (_, Some(l)) => (l, None),
            (None, None) => return None,
        };
        // Every test (debug) build holds the round to one recomputed from scratch.
        debug_assert_eq!(
            Some(pick),
            self.fair_pick_reference(round),
            "the fair round's pick"
        );
        match node {
            None => {
                round.loose.remove(&pick);
            }
            Some(n) => {
                round.leaves[n].remove(&pick);
                round.mark_heads(n);
            }
        }
        Some(pick)
    }

    /// The first head of the round below `n`, with the node whose queue it heads: down through
    /// each node's first child; a node's own heads against its first child's by queue order
    /// (only a leaf has queues in a valid tree).
    fn first_below(round: &Round, n: usize) -> Option<((JobOrder, ClassId), usize)> {
        let own = round.leaves[n].first().map(|h| (*h, n));
        let kid = round.kids[n]
            .first()
            .and_then(|&(_, c)| Self::first_below(round, c));
        match (own, kid) {
            (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
            (a, b) => a.or(b),
        }
    }

    /// Class `c`'s head was `old` and is now its first job: the round of every head follows.
    /// `leaf`: the leaf of the queue of the job that came or went.
    pub(super) fn head_changed(
        &mut self,
        c: ClassId,
        leaf: Option<usize>,
        old: Option<(JobOrder, super::JobId)>,
    ) {
        let new = self.classes[c].jobs.first().copied();
        let Some(leaf) = leaf.filter(|l| *l < self.heads.leaves.len()) else {
            return;
        };
        if old == new {
            return;
        }
        if let Some((o, _)) = old {
            self.heads.leaves[leaf].remove(&(o, c));
        }
        if let Some((o, _)) = new {
            self.heads.leaves[leaf].insert((o, c));
        }
        self.heads.mark_heads(leaf);
    }

    /// The best waiting job of `leaf`, over every class of its queue (a tree has one queue per
    /// leaf): the first of its heads in the round of every head, kept as heads change.
    pub(super) fn leaf_best(&self, leaf: usize) -> Option<super::JobId> {
        let &(_, c) = self.heads.leaves.get(leaf)?.first()?;
        self.classes[c].jobs.first().map(|&(_, j)| j)
    }

    /// Brings the round of every head up to date (the paths whose heads or usage changed).
    pub(super) fn heads_fresh(&mut self) {
        if self.heads.stale.is_empty() {
            return;
        }
        let mut heads = std::mem::take(&mut self.heads);
        while let Some((leaf, usage)) = heads.next_stale() {
            self.refresh(&mut heads, leaf, None, usage);
        }
        self.heads = heads;
    }

    /// After `job` was admitted or preempted: its leaf's path uses more or less now, so its
    /// keys are recomputed (a node's share depends on its own usage only).
    pub(super) fn fair_admitted(&self, round: &mut Round, job: super::JobId) {
        if let Some(leaf) = self.queues.leaf(self.jobs[job].queue)
            && leaf < round.leaves.len()
        {
            round.mark(leaf);
        }
    }

    /// The head [`Self::fair_pop`] must take, computed from scratch (every node's share now and
    /// the round's heads below it; its first waiting head from [`Scheduler::heads`]): the
    /// slow, obvious form of the round, for debug builds.
    fn fair_pick_reference(&self, round: &Round) -> Option<(JobOrder, ClassId)> {
        // Each node's first waiting head from the round of every head (held to one recomputed
        // from scratch at every pass's start: `Scheduler::pass`).
        let reps = self.heads_firsts();
        let mut out = vec![None; round.leaves.len()];
        let tree = self
            .quota
            .as_ref()
            .filter(|_| !round.leaves.is_empty())
            .and_then(|q| first_from_scratch(q, round, Some(&reps), 0, &mut out));
        let loose = round.loose.first().copied();
        match (tree, loose) {
            (Some(t), Some(l)) => Some(t.min(l)),
            (t, l) => t.or(l),
        }
    }

    /// Each tree node's first waiting head, as [`Scheduler::heads`] gives it.
    fn heads_firsts(&self) -> Vec<Option<JobOrder>> {
        (0..self.heads.leaves.len())
            .map(|n| Self::first_below(&self.heads, n).map(|h| h.0.0))
            .collect()
    }

    /// Each tree node's first waiting head in fair order, recomputed from every class's head:
    /// what [`Scheduler::heads`] must give (checked in debug builds), and what it gives.
    #[cfg(debug_assertions)]
    pub(super) fn heads_from_scratch(&self) -> (Vec<Option<JobOrder>>, Vec<Option<JobOrder>>) {
        let Some(q) = &self.quota else {
            return (Vec::new(), Vec::new());
        };
        let mut all = self.fair_round();
        for c in 0..self.classes.len() {
            if let (Some(leaf), Some(&(o, _))) = (self.class_leaf(c), self.classes[c].jobs.first())
            {
                all.leaves[leaf].insert((o, c));
            }
        }
        let mut scratch = vec![None; q.tree.nodes.len()];
        first_from_scratch(q, &all, None, 0, &mut scratch);
        (scratch, self.heads_firsts())
    }

    /// Recomputes the keys on the path from `leaf` to the root: a node has one in its
    /// parent's set while a head of the round is below it. Each node's first waiting head is
    /// read from `heads` (the round of every head), or, for that round itself, from the round.
    /// Unless `usage` (the leaf's usage changed), the walk stops at the first node whose key is
    /// the same ([`Round::mark_heads`]).
    fn refresh(&self, round: &mut Round, leaf: usize, heads: Option<&Round>, usage: bool) {
        let Some(q) = &self.quota else { return };
        let mut n = leaf;
        while let Some(p) = q.tree.nodes[n].parent {
            let first = Self::first_below(round, n);
            let new = first.map(|f| {
                let rep = match heads {
                    Some(h) => Self::first_below(h, n).map(|h| h.0.0),
                    None => Some(f.0.0),
                };
                (q.share(n, &Demand::default()).0, rep)
            });
            // Unchanged (usage and heads moved elsewhere on the path): its place in the
            // parent's set stays.
            if new != round.key[n] {
                if let Some(k) = round.key[n].take() {
                    round.kids[p].remove(&(k, n));
                }
                if let Some(k) = new {
                    round.kids[p].insert((k, n));
                    round.key[n] = Some(k);
                }
            } else if !usage {
                break;
            }
            n = p;
        }
    }
}

/// The first head of `round` below `n` in fair order, recomputed from scratch: at each node
/// the child with the lowest share now, siblings of equal share ordered by their first waiting
/// head in `reps` or, without it, by their own first head here; a node's own heads against its
/// first child's by queue order. Writes each node's first head to `out` (debug checks).
fn first_from_scratch(
    q: &crate::quota::QuotaState,
    round: &Round,
    reps: Option<&[Option<JobOrder>]>,
    n: usize,
    out: &mut [Option<JobOrder>],
) -> Option<(JobOrder, ClassId)> {
    let own = round.leaves[n].first().copied();
    let kids = q.tree.nodes[n]
        .children
        .iter()
        .filter_map(|&c| {
            let h = first_from_scratch(q, round, reps, c, out)?;
            let rep = reps.map_or(Some(h.0), |r| r[c]);
            Some(((q.share(c, &Demand::default()).0, rep), h))
        })
        .min_by(|a, b| a.0.cmp(&b.0))
        .map(|(_, h)| h);
    let first = match (own, kids) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    out[n] = first.map(|h| h.0);
    first
}
