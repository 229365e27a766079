//! Reclaim: preempting jobs of borrowing subtrees so that a job within its guaranteed min runs.
//!
//! Owns the choice of victims (which leaves may be preempted, per member cluster, shortest prefix
//! in priority order, minimized) as side-effect-free trials on the scheduler's state. Never
//! preempts within a leaf, and never lets a victim reclaim back from the job that preempted it.

use std::cmp::Reverse;
use std::collections::BTreeMap;

use super::{JobId, JobState, Scheduler};
use crate::estimate::{self, Placement};
use crate::resources::{MAX_JOBS, PODS, Res, at};

impl Scheduler {
    /// The resources a blocked job is short of, if it is eligible to reclaim them: it stays
    /// within its leaf's min for every one of them.
    pub(super) fn short_resources(
        &mut self,
        job: JobId,
        leaf: usize,
        quota_short: Option<&crate::quota::Shortfall>,
    ) -> Option<Vec<Res>> {
        let fleet_short = match quota_short {
            Some(_) => Vec::new(),
            None => self.fleet_short(job),
        };
        let q = self.quota.as_ref()?;
        let d = &self.shapes[self.jobs[job].shape].quota_demand;
        let short: Vec<Res> = match quota_short {
            Some(_) => d
                .iter()
                .filter(|(r, x)| {
                    let mut cur = Some(leaf);
                    while let Some(n) = cur {
                        if let Some(m) = q.max_of(n, *r)
                            && q.used_of(n, *r) + x > m
                        {
                            return true;
                        }
                        cur = q.tree.nodes[n].parent;
                    }
                    false
                })
                .map(|(r, _)| r)
                .collect(),
            None => fleet_short,
        };
        if short.is_empty() {
            return None;
        }
        short
            .iter()
            .all(|&r| q.used_of(leaf, r) + d.get(r) <= q.min_of(leaf, r))
            .then_some(short)
    }

    /// The requested resources the candidate clusters lack for `job`: in every candidate
    /// cluster, one of its pods asks more than any node has free, or the job more than the
    /// cluster has free. When no single resource is short (fragmentation, node constraints),
    /// every requested resource.
    fn fleet_short(&mut self, job: JobId) -> Vec<Res> {
        let shape_id = self.jobs[job].shape;
        let d = self.shapes[shape_id].quota_demand.clone();
        let requested: Vec<Res> = d
            .iter()
            .filter(|(r, x)| *r != PODS && *r != MAX_JOBS && *x > 0)
            .map(|(r, _)| r)
            .collect();
        let mut short = Vec::new();
        'res: for &r in &requested {
            let per_pod = self.shapes[shape_id]
                .groups
                .iter()
                .filter(|g| g.pods > 0)
                .map(|g| g.demand.get(r))
                .max()
                .unwrap_or(0);
            for ci in 0..self.clusters.len() {
                let c = &self.clusters[ci];
                if !c.reachable || !self.candidate(shape_id, ci) {
                    continue;
                }
                let s = self.clusters[ci].summary();
                if per_pod <= at(&s.max_free, r) && d.get(r) <= at(&s.total_free, r) {
                    continue 'res;
                }
            }
            short.push(r);
        }
        if short.is_empty() { requested } else { short }
    }

    /// Picks victims from borrowing subtrees so that `job` fits: per member cluster, victims on
    /// it in order (lowest priority, then most recently admitted) until the job fits there, then
    /// the ones that turned out unnecessary are given back; the cluster whose victim set is
    /// cheapest (lowest top priority, then fewest victims, then the usual cluster order) wins.
    /// When only quota is short and the job already fits a cluster, victims come from anywhere.
    /// On success the victims are released and queued again; on failure nothing changed.
    pub(super) fn reclaim(
        &mut self,
        job: JobId,
        leaf: usize,
        short: &[Res],
    ) -> Option<(Vec<JobId>, usize, Placement)> {
        let q = self.quota.as_ref()?;
        let d = &self.shapes[self.jobs[job].shape].quota_demand;
        // Leaves whose jobs may be victims: borrowing at the meeting level on their side, while
        // this job's side stays within its min there (so the victim can never reclaim it back).
        let leaves: Vec<usize> = self
            .admitted_by_leaf
            .iter()
            .filter(|(vleaf, set)| **vleaf != leaf && !set.is_empty())
            .filter(|(vleaf, _)| {
                let (Some(mc), Some(jc)) = (
                    q.meeting_child(leaf, **vleaf),
                    q.meeting_child(**vleaf, leaf),
                ) else {
                    return false;
                };
                short.iter().any(|&r| q.borrowing(mc, r))
                    && short
                        .iter()
                        .all(|&r| q.used_of(jc, r) + d.get(r) <= q.min_of(jc, r))
            })
            .map(|(l, _)| *l)
            .collect();
        let mut candidates: Vec<(i32, Reverse<u64>, JobId)> = leaves
            .iter()
            .flat_map(|l| self.admitted_by_leaf[l].iter().copied())
            .filter(|(_, _, v)| {
                let vd = &self.shapes[self.jobs[*v].shape].quota_demand;
                short.iter().any(|&r| vd.get(r) > 0)
            })
            .collect();
        if candidates.is_empty() {
            return None;
        }
        candidates.sort_unstable();
        let shape = self.jobs[job].shape;
        let quota_only = !self.fits_now(job, leaf) && self.find_cluster(job).is_ok();
        let chosen: Option<(Vec<JobId>, usize)> = if quota_only {
            // Quota is the only shortage: release in order until quota allows the job.
            let order: Vec<JobId> = candidates.iter().map(|c| c.2).collect();
            self.trial(job, leaf, &order, None)
                .ok()
                .and_then(|v| self.find_cluster_with(job, &v).map(|ci| (v, ci)))
        } else {
            let mut by_cluster: BTreeMap<usize, Vec<JobId>> = BTreeMap::new();
            for (_, _, v) in &candidates {
                if let JobState::Admitted { cluster, .. } = self.jobs[*v].state {
                    by_cluster.entry(cluster).or_default().push(*v);
                }
            }
            // Clusters in the usual choice order (least free of the job's scarcest resource,
            // then name); the first where its victims suffice wins.
            let key_res = self.shapes[shape].key_res;
            let mut clusters: Vec<(i128, String, usize)> = by_cluster
                .keys()
                .map(|&ci| {
                    let free = at(&self.clusters[ci].summary().total_free, key_res);
                    (free, self.clusters[ci].name.clone(), ci)
                })
                .collect();
            clusters.sort();
            let mut best: Option<(Vec<JobId>, usize)> = None;
            for (_, _, ci) in clusters {
                let order = by_cluster.remove(&ci).unwrap_or_default();
                let c = &self.clusters[ci];
                if !c.reachable || !self.candidate(shape, ci) {
                    continue;
                }
                // Same cluster state and same candidates as a failed trial: same failure.
                let memo = (
                    self.clusters[ci].version,
                    order.iter().fold(job as u64, |h, v| {
                        h.rotate_left(7) ^ (*v as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
                    }),
                );
                let class = self.jobs[job].class;
                // A trial that failed because the job did not fit even one by one with every
                // candidate gone fails again while the cluster only lost free capacity.
                if let Some(&(v, h, capacity)) = self.classes[class].reclaim_failed.get(&ci)
                    && h == memo.1
                    && (v == memo.0 || (capacity && self.clusters[ci].freed <= v))
                {
                    continue;
                }
                match self.trial(job, leaf, &order, Some(ci)) {
                    Ok(victims) => {
                        best = Some((victims, ci));
                        break;
                    }
                    Err(capacity) => {
                        let entry = (memo.0, memo.1, capacity);
                        self.classes[class].reclaim_failed.insert(ci, entry);
                    }
                }
            }
            best
        };
        let (victims, ci) = chosen?;
        let plans = self.release_all(&victims);
        let placement = match self.place_on(self.shapes[shape].fit, ci) {
            Ok(p) => p,
            Err(_) => {
                // Cannot happen: the trial saw this exact state. Undo rather than guess.
                self.restore_all(plans);
                return None;
            }
        };
        for &v in &victims {
            self.jobs[v].state = JobState::Pending;
            self.enqueue_later(v);
        }
        Some((victims, ci, placement))
    }

    /// Without touching versions, queues or memos: take victims from `order` (in order) off
    /// their nodes and quota until the job fits quota (and, with `on`, fits that cluster), then
    /// put back each one not needed. Returns the victims, the state restored as it was; or,
    /// when the job does not fit even with every candidate gone, whether that was on a
    /// necessary condition of the placement on `on` ([`estimate::NoFit::capacity`]).
    fn trial(
        &mut self,
        job: JobId,
        leaf: usize,
        order: &[JobId],
        on: Option<usize>,
    ) -> Result<Vec<JobId>, bool> {
        let shape = self.jobs[job].shape;
        let fit = self.shapes[shape].fit;
        if let Some(ci) = on {
            self.ensure_eligible(fit, ci);
        }
        let fits = |s: &mut Scheduler| -> bool {
            s.fits_now(job, leaf)
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
        let all_gone = if order.is_empty() || !self.fits_now(job, leaf) {
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

    /// The cluster `find_cluster` would pick with `victims` released, state left unchanged.
    fn find_cluster_with(&mut self, job: JobId, victims: &[JobId]) -> Option<usize> {
        let plans = self.release_all(victims);
        let r = self.find_cluster(job).ok().map(|(ci, _)| ci);
        self.restore_all(plans);
        r
    }

    /// Releases admitted jobs, returning their plans for [`Self::restore_all`].
    fn release_all(&mut self, jobs: &[JobId]) -> Vec<(JobId, usize, Placement)> {
        let mut plans = Vec::new();
        for &v in jobs {
            if let JobState::Admitted { cluster, placement } = self.jobs[v].state.clone() {
                self.release(v);
                plans.push((v, cluster, placement));
            }
        }
        plans
    }

    fn restore_all(&mut self, plans: Vec<(JobId, usize, Placement)>) {
        for (v, c, p) in plans.into_iter().rev() {
            self.reserve_with(v, c, p, true);
        }
    }

    /// Adds (`sign` 1) or removes (`sign` -1) an admitted job's reservation and quota charge,
    /// leaving its state, versions and queues alone (trials only).
    fn adjust(&mut self, job: JobId, sign: i128) {
        let JobState::Admitted { cluster, placement } = &self.jobs[job].state else {
            return;
        };
        let shape = &self.shapes[self.jobs[job].shape];
        super::reserve_on(&mut self.clusters[*cluster], &shape.groups, placement, sign);
        if let (Some(q), Some(leaf)) = (self.quota.as_mut(), self.queues.leaf(self.jobs[job].queue))
        {
            q.charge(leaf, &shape.quota_demand, sign);
        }
    }
}
