//! Fair sharing between siblings: the order in which a pass visits the woken queues' heads
//! (rule A7 of docs/concepts.md). At every node of the quota tree, the child subtree with the
//! lowest weighted dominant share of what it borrows now ([`crate::quota::Share`]) goes first;
//! ties go to the subtree whose best waiting job, over every job waiting below it
//! ([`super::best_below`]), comes first in queue order (priority, then submission). Inside one
//! queue the order is the queue's own. Without a tree, or for heads outside it, queue order.
//!
//! Both keys depend on the state alone, never on which heads a pass visits: the share is the
//! one a subtree has now, not the one it would have with its head admitted (Armada's DRF,
//! where Kueue counts the head), and the tie-break reads every waiting job, not the heads in
//! the round. So the order is one total order over every head, and a head that is not woken
//! (it would wait as before) changes nobody's place in it.
//!
//! Each inner node keeps the keys of its children that have a head of the round below them; a
//! pop walks down from the root through each node's first child. A visit changes the usage and
//! the waiting jobs of one leaf only, so only that leaf's path is recomputed
//! ([`Scheduler::refresh`]); a reclaim also changes its victims' leaves' usage, whose paths
//! are then recomputed as well.

use std::collections::BTreeSet;
use std::fmt;

use serde::Serialize;

use super::sorted::Sorted;
use super::{ClassId, Scheduler};
use crate::queue::JobOrder;
use crate::quota::Share;
use crate::resources::Demand;

/// A subtree's place among its siblings: its share now, then its best waiting job.
type Key = (Share, Option<JobOrder>);

/// The heads a pass has still to visit, in fair order. Indexed by tree node; keys are brought
/// up to date lazily: a push only marks its leaf, and the next pop refreshes the marked paths.
#[derive(Default)]
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
}

impl Round {
    /// The tree's size (0: no tree).
    pub(super) fn leaves_len(&self) -> usize {
        self.leaves.len()
    }

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
        all
    }

    fn mark(&mut self, leaf: usize) {
        if !self.marked[leaf] {
            self.marked[leaf] = true;
            self.stale.push(leaf);
        }
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
            ..Round::default()
        }
    }

    /// Adds a class head to the round.
    pub(super) fn fair_push(&self, round: &mut Round, o: JobOrder, c: ClassId) {
        match self.class_leaf(c).filter(|l| *l < round.leaves.len()) {
            Some(leaf) => {
                round.leaves[leaf].insert((o, c));
                round.mark(leaf);
            }
            None => {
                round.loose.insert((o, c));
            }
        }
    }

    /// The next head to visit, taken out of the round.
    pub(super) fn fair_pop(&self, round: &mut Round) -> Option<(JobOrder, ClassId)> {
        while let Some(leaf) = round.stale.pop() {
            round.marked[leaf] = false;
            self.refresh(round, leaf);
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
                round.mark(n);
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
    /// the round's heads below it; the best waiting job below it from the index): the slow,
    /// obvious form of the round, for debug builds.
    fn fair_pick_reference(&self, round: &Round) -> Option<(JobOrder, ClassId)> {
        let q = self.quota.as_ref().filter(|_| !round.leaves.is_empty());
        // The best waiting job below each node from the index (held to one recomputed from
        // scratch at every pass's start: `Scheduler::pass`).
        let waiting: Vec<Option<JobOrder>> = (0..round.leaves.len())
            .map(|n| self.best_below.best(n))
            .collect();
        fn best(
            q: &crate::quota::QuotaState,
            round: &Round,
            waiting: &[Option<JobOrder>],
            n: usize,
        ) -> Option<(JobOrder, ClassId)> {
            let own = round.leaves.get(n).and_then(|l| l.first().copied());
            let kids = q.tree.nodes[n]
                .children
                .iter()
                .filter_map(|&c| {
                    let head = best(q, round, waiting, c)?;
                    Some(((q.share(c, &Demand::default()).0, waiting[c]), head))
                })
                .min_by(|a, b| a.0.cmp(&b.0))
                .map(|(_, h)| h);
            match (own, kids) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        }
        let tree = q.and_then(|q| best(q, round, &waiting, 0));
        let loose = round.loose.first().copied();
        match (tree, loose) {
            (Some(t), Some(l)) => Some(t.min(l)),
            (t, l) => t.or(l),
        }
    }

    /// The best waiting job below each tree node but the root, from every class's head: what
    /// [`super::best_below::BestBelow`] must hold (checked in debug builds).
    pub(super) fn best_below_from_scratch(&self) -> Vec<Option<JobOrder>> {
        let Some(q) = &self.quota else {
            return Vec::new();
        };
        let mut waiting: Vec<Option<JobOrder>> = vec![None; q.tree.nodes.len()];
        for c in 0..self.classes.len() {
            if let (Some(leaf), Some(&(o, _))) = (self.class_leaf(c), self.classes[c].jobs.first())
            {
                for n in q.tree.path_up(leaf) {
                    if q.tree.nodes[n].parent.is_some() {
                        waiting[n] = Some(waiting[n].map_or(o, |w| w.min(o)));
                    }
                }
            }
        }
        waiting
    }

    /// Recomputes the keys on the path from `leaf` to the root: a node has one in its
    /// parent's set while a head of the round is below it.
    fn refresh(&self, round: &mut Round, leaf: usize) {
        let Some(q) = &self.quota else { return };
        let mut n = leaf;
        while let Some(p) = q.tree.nodes[n].parent {
            let present = round.leaves[n].first().is_some() || round.kids[n].first().is_some();
            let new = present.then(|| (q.share(n, &Demand::default()).0, self.best_below.best(n)));
            // Unchanged (usage and waiting jobs moved elsewhere on the path): its place in
            // the parent's set stays.
            if new != round.key[n] {
                if let Some(k) = round.key[n].take() {
                    round.kids[p].remove(&(k, n));
                }
                if let Some(k) = new {
                    round.kids[p].insert((k, n));
                    round.key[n] = Some(k);
                }
            }
            n = p;
        }
    }
}
