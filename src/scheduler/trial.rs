//! Reclaim's trials (R6, R7), made on the scheduler's own state: victims taken off their nodes
//! and quota in order until the job fits, the ones not needed given back, and the state
//! restored as it was. Owns R6's two lists of candidates (those R5 keeps, and for a second
//! trial every one R5 would keep as the first victim of its leaf) and the cheap check that
//! rules a member out before any trial. Which jobs are candidates, and R5 itself, are
//! `reclaim.rs`'s.

use std::collections::BTreeMap;

use super::fairness::FairBound;
use super::reclaim::Guard;
use super::{JobId, JobState, Scheduler};
use crate::estimate::{self, Placement};
use crate::resources::{Demand, Res};

impl Scheduler {
    /// R5's lists of `candidates` for R6's trials: those it keeps, and, when some of the ones
    /// it left out would be kept as the first victim of their leaf, those (every candidate that
    /// could be in a set of victims R5 keeps), for a second trial. None for fairness.
    pub(super) fn r5_lists(
        &self,
        leaf: usize,
        short: &[Res],
        candidates: &[JobId],
        fair: Option<FairBound>,
    ) -> (Vec<JobId>, Option<Vec<JobId>>) {
        let kept = self.borrowed_only(leaf, short, candidates, fair, false);
        if fair.is_some() || kept.len() == candidates.len() {
            return (kept, None);
        }
        // Every one kept is kept alone too: the same list when no more are.
        let alone = self.borrowed_only(leaf, short, candidates, None, true);
        let second = (alone.len() > kept.len()).then_some(alone);
        (kept, second)
    }

    /// R6's trials on one member (with `on`; from anywhere without): a [`Self::trial`] of the
    /// candidates R5 keeps, and when that fails, a second one of the `second` list of
    /// [`Self::r5_lists`], whose victims are used only when R5 keeps them all. (A candidate
    /// kept first whose going does not let the job fit can use up what its leaf borrows, so
    /// that the one whose going does is left out: the second trial finds it, and R7 gives the
    /// first one back.) A failure says whether the last trial failed on a necessary condition
    /// of the placement on `on` (the second one's candidates include the first's).
    pub(super) fn trial_kept(
        &mut self,
        job: JobId,
        leaf: usize,
        short: &[Res],
        (kept, second): (&[JobId], Option<&[JobId]>),
        on: Option<usize>,
        guard: &[Guard],
    ) -> Result<Vec<JobId>, bool> {
        let first = self.trial(job, leaf, kept, on, guard);
        let Some(second) = second.filter(|_| first.is_err()) else {
            return first;
        };
        match self.trial(job, leaf, second, on, guard) {
            Ok(v) if self.borrowed_only(leaf, short, &v, None, false) == v => Ok(v),
            Ok(_) => Err(false),
            Err(capacity) => Err(capacity),
        }
    }

    /// Without touching versions, queues or memos: take victims from `order` (in order) off
    /// their nodes and quota until the job fits quota (and, with `on`, fits that cluster), then
    /// put back each one not needed. Returns the victims, the state restored as it was; or,
    /// when the job does not fit even with every candidate gone, whether that was on a
    /// necessary condition of the placement on `on` ([`estimate::NoFit::capacity`]).
    pub(super) fn trial(
        &mut self,
        job: JobId,
        leaf: usize,
        order: &[JobId],
        on: Option<usize>,
        guard: &[Guard],
    ) -> Result<Vec<JobId>, bool> {
        let shape = self.jobs[job].shape;
        let fit = self.shapes[shape].fit;
        if let Some(ci) = on {
            if !self.might_fit_freeing(job, ci, order) {
                return Err(true);
            }
            self.ensure_eligible(fit, ci);
        }
        let kept = |s: &Scheduler| -> bool {
            s.quota.as_ref().is_none_or(|q| {
                guard
                    .iter()
                    .all(|&(n, r, x)| q.used_of(n, r) + x <= q.min_of(n, r))
            })
        };
        let fits = |s: &mut Scheduler| -> bool {
            s.fits_now(job, leaf)
                && kept(s)
                && on.is_none_or(|ci| {
                    let elig = s.eligible_on(fit, ci);
                    estimate::place(&s.clusters[ci], &s.shapes[shape].groups, elig, &s.table)
                        .is_ok()
                })
        };
        // Releasing more never hurts a fit: binary-search the shortest prefix of `order` that
        // makes the job fit (the first check, with every candidate gone, rules most clusters out).
        let mut cur = 0usize;
        let set_prefix = |s: &mut Scheduler, cur: &mut usize, target: usize| {
            while *cur < target {
                s.adjust(order[*cur], -1);
                *cur += 1;
            }
            while *cur > target {
                *cur -= 1;
                s.adjust(order[*cur], 1);
            }
        };
        set_prefix(self, &mut cur, order.len());
        // `fits` with every candidate gone, and why not: quota, or a placement that failed only
        // when placed together, is not a necessary condition (false).
        let all_gone = if order.is_empty() || !self.fits_now(job, leaf) || !kept(self) {
            Err(false)
        } else {
            match on {
                None => Ok(()),
                Some(ci) => {
                    let (elig, groups) = (self.eligible_on(fit, ci), &self.shapes[shape].groups);
                    estimate::place_or_why(&self.clusters[ci], groups, elig, &self.table)
                        .map(|_| ())
                        .map_err(|no| no.capacity)
                }
            }
        };
        if let Err(capacity) = all_gone {
            set_prefix(self, &mut cur, 0);
            return Err(capacity);
        }
        let (mut lo, mut hi) = (1usize, order.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            set_prefix(self, &mut cur, mid);
            if fits(self) {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        set_prefix(self, &mut cur, lo);
        let mut taken: Vec<JobId> = order[..lo].to_vec();
        // Give back the ones not needed (the last one taken is needed).
        let mut needed = Vec::new();
        if let Some(last) = taken.pop() {
            needed.push(last);
        }
        for &v in taken.iter().rev() {
            self.adjust(v, 1);
            if !fits(self) {
                self.adjust(v, -1);
                needed.push(v);
            }
        }
        for &v in &needed {
            self.adjust(v, 1);
        }
        needed.reverse();
        Ok(needed)
    }

    /// A necessary condition, cheap beside a trial, for `job` to fit cluster `ci` with every one
    /// of `order` on it gone: each of its pods' demands fits one node's free capacity plus what
    /// those jobs hold there (node constraints ignored).
    pub(super) fn might_fit_freeing(&self, job: JobId, ci: usize, order: &[JobId]) -> bool {
        let c = &self.clusters[ci];
        let mut freed: BTreeMap<usize, Demand> = BTreeMap::new();
        for &v in order {
            let JobState::Admitted { cluster, placement } = &self.jobs[v].state else {
                continue;
            };
            if *cluster != ci {
                continue;
            }
            let groups = &self.shapes[self.jobs[v].shape].groups;
            for (gi, nodes) in placement.groups.iter().enumerate() {
                for &(n, k) in nodes {
                    if let Some(g) = groups.get(gi) {
                        freed
                            .entry(n)
                            .or_default()
                            .add_scaled(&g.demand, i128::from(k));
                    }
                }
            }
        }
        let none = Demand::default();
        self.shapes[self.jobs[job].shape]
            .groups
            .iter()
            .filter(|g| g.pods > 0)
            .all(|g| {
                c.nodes.iter().enumerate().any(|(n, node)| {
                    let f = freed.get(&n).unwrap_or(&none);
                    g.demand.iter().all(|(r, x)| node.free(r) + f.get(r) >= x)
                })
            })
    }

    /// The cluster `find_cluster` would pick with `victims` released, state left unchanged.
    pub(super) fn find_cluster_with(&mut self, job: JobId, victims: &[JobId]) -> Option<usize> {
        let plans = self.release_all(victims);
        let r = self.find_cluster(job).ok().map(|(ci, _)| ci);
        self.restore_all(plans);
        r
    }

    /// Releases admitted jobs, returning their plans for [`Self::restore_all`].
    pub(super) fn release_all(&mut self, jobs: &[JobId]) -> Vec<(JobId, usize, Placement)> {
        let mut plans = Vec::new();
        for &v in jobs {
            if let JobState::Admitted { cluster, placement } = self.jobs[v].state.clone() {
                self.release(v);
                plans.push((v, cluster, placement));
            }
        }
        plans
    }

    pub(super) fn restore_all(&mut self, plans: Vec<(JobId, usize, Placement)>) {
        for (v, c, p) in plans.into_iter().rev() {
            self.reserve_with(v, c, p, true);
        }
    }

    /// Adds (`sign` 1) or removes (`sign` -1) an admitted job's reservation and quota charge,
    /// leaving its state, versions and queues alone (trials only).
    pub(super) fn adjust(&mut self, job: JobId, sign: i128) {
        let JobState::Admitted { cluster, placement } = &self.jobs[job].state else {
            return;
        };
        let shape = &self.shapes[self.jobs[job].shape];
        super::reserve::reserve_on(&mut self.clusters[*cluster], &shape.groups, placement, sign);
        if let (Some(q), Some(leaf)) = (self.quota.as_mut(), self.queues.leaf(self.jobs[job].queue))
        {
            q.charge(leaf, &shape.quota_demand, sign);
        }
    }
}
