//! Preemption: reclaiming quota from borrowing subtrees so that a job within its guaranteed min
//! runs, and (in leaves that allow it) preempting a queue's jobs of lower priority.
//!
//! Owns the choice of victims: which jobs may be preempted (R3–R5, R8), and per member cluster
//! the trials of `trial.rs` (shortest prefix in order, minimized, leaving no side effect).
//! Never lets a victim preempt back, directly or round a cohort: a victim of another leaf is
//! taken only from what its leaf borrows and while the preemptor's side stays within its min
//! where the two meet, and one of the same leaf only when its priority is lower.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};

use super::fairness::FairBound;
use super::{JobId, JobState, Scheduler};
use crate::estimate::Placement;
use crate::resources::{Demand, MAX_JOBS, PODS, Res, at, whole_bits};

/// `used(node, res) + request <= min(node, res)`: a condition a preemption must keep.
pub(super) type Guard = (usize, Res, i128);

impl Scheduler {
    /// The resources a blocked job is short of: with quota short, those over a max on its path;
    /// else those the candidate clusters lack.
    pub(super) fn short_of(
        &mut self,
        job: JobId,
        leaf: usize,
        quota_short: Option<&crate::quota::Shortfall>,
    ) -> Vec<Res> {
        if self.quota.is_none() {
            return Vec::new();
        }
        if quota_short.is_none() {
            return self.fleet_short(job);
        }
        self.over_max_short(job, leaf)
    }

    /// What `job` of `leaf` is short of when it is over a max: each resource it asks that
    /// would take a node of its path over its max.
    pub(super) fn over_max_short(&self, job: JobId, leaf: usize) -> Vec<Res> {
        let Some(q) = self.quota.as_ref() else {
            return Vec::new();
        };
        let d = &self.shapes[self.jobs[job].shape].quota_demand;
        d.iter()
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
            .collect()
    }

    /// Whether a job short of `short` may reclaim them: it stays within its leaf's min for every
    /// one of them, with `freed` (its own queue's jobs it may preempt) counted as gone.
    pub(super) fn may_reclaim(
        &self,
        job: JobId,
        leaf: usize,
        short: &[Res],
        freed: &Demand,
    ) -> bool {
        let Some(q) = self.quota.as_ref() else {
            return false;
        };
        let d = &self.shapes[self.jobs[job].shape].quota_demand;
        !short.is_empty()
            && short
                .iter()
                .all(|&r| q.used_of(leaf, r) - freed.get(r) + d.get(r) <= q.min_of(leaf, r))
    }

    /// Admitted jobs of `leaf` whose priority is below `job`'s, in victim order (lowest
    /// priority, then most recently admitted), when the leaf allows preemption by priority.
    pub(super) fn lower_in_leaf(&self, job: JobId, leaf: usize) -> Vec<JobId> {
        let Some(set) = self.preemptible_in_leaf(leaf) else {
            return Vec::new();
        };
        let p = self.jobs[job].priority;
        set.iter()
            .take_while(|(vp, _, _)| *vp < p)
            .map(|(_, _, v)| *v)
            .collect()
    }

    /// Whether [`Self::lower_in_leaf`] would name any job (without collecting them).
    pub(super) fn any_lower_in_leaf(&self, job: JobId, leaf: usize) -> bool {
        self.preemptible_in_leaf(leaf)
            .and_then(|set| set.iter().next())
            .is_some_and(|(vp, _, _)| *vp < self.jobs[job].priority)
    }

    /// The admitted jobs of `leaf`, lowest priority first, when the leaf allows its jobs to be
    /// preempted by priority (None otherwise).
    fn preemptible_in_leaf(&self, leaf: usize) -> Option<&BTreeSet<(i32, Reverse<u64>, JobId)>> {
        if !self.preempts_by_priority(leaf) {
            return None;
        }
        self.admitted_by_leaf.get(&leaf)
    }

    /// Whether `leaf` preempts its jobs by priority (`muster.dev/within-queue-preemption:
    /// LowerPriority`, R8).
    pub(super) fn preempts_by_priority(&self, leaf: usize) -> bool {
        self.quota
            .as_ref()
            .is_some_and(|q| q.tree.preempts_lower_priority(leaf))
    }

    /// What `jobs` are charged to quota, together.
    pub(super) fn charge_of(&self, jobs: &[JobId]) -> Demand {
        let mut d = Demand::default();
        for &v in jobs {
            d.add_scaled(&self.shapes[self.jobs[v].shape].quota_demand, 1);
        }
        d
    }

    /// Whether `job` asks for any of `short`; `bits`: [`whole_bits`] of `short` (read once per
    /// list of candidates). One AND when every resource of `short` is numbered below 64.
    pub(super) fn asks_any(&self, job: JobId, short: &[Res], bits: Option<u64>) -> bool {
        let shape = &self.shapes[self.jobs[job].shape];
        let slow = || short.iter().any(|&r| shape.quota_demand.get(r) > 0);
        match bits {
            Some(b) => {
                let fast = shape.asks & b != 0;
                // Every test (debug) build holds the bits to the demand read per resource.
                debug_assert_eq!(fast, slow(), "the resources a shape asks, as bits");
                fast
            }
            None => slow(),
        }
    }

    /// If `job` may reclaim what it is short of ([`Self::may_reclaim`]), picks victims from
    /// borrowing subtrees so that it fits, taking back borrowed capacity
    /// before any of `own` (its queue's jobs of lower priority, which it may preempt): see
    /// [`Self::take_victims`]. Victims of other leaves are taken only while the job's side stays
    /// within its min where their paths meet, so that none can ever reclaim it back.
    pub(super) fn reclaim(
        &mut self,
        job: JobId,
        leaf: usize,
        short: &[Res],
        own: &[JobId],
    ) -> Option<(Vec<JobId>, usize, Placement)> {
        let freed = self.charge_of(own);
        if !self.may_reclaim(job, leaf, short, &freed) {
            return None;
        }
        let q = self.quota.as_ref()?;
        // No other leaf's job is a candidate unless its side borrows something this job is
        // short of (below); with none of its own queue either, there is nothing to take.
        if own.is_empty() && !short.iter().any(|&r| q.anyone_borrows(r)) {
            return None;
        }
        let d = &self.shapes[self.jobs[job].shape].quota_demand;
        let within =
            |jc: usize, r: Res| q.used_of(jc, r) - freed.get(r) + d.get(r) <= q.min_of(jc, r);
        // Leaves whose jobs may be victims: borrowing at the meeting level on their side, while
        // this job's side stays within its min there (so the victim can never reclaim it back).
        let mut guard: Vec<Guard> = Vec::new();
        let leaves: Vec<usize> = self
            .admitted_by_leaf
            .iter()
            .filter(|(vleaf, set)| **vleaf != leaf && !set.is_empty())
            .filter_map(|(vleaf, _)| {
                let mc = q.meeting_child(leaf, *vleaf)?;
                // The test that rules out most leaves first (the answer is the same).
                if !short.iter().any(|&r| q.borrowing(mc, r)) {
                    return None;
                }
                let jc = q.meeting_child(*vleaf, leaf)?;
                // Nothing the victim's leaf is guaranteed is then borrowed by this job: in
                // every resource it asks that that leaf names a min of, its own leaf stays
                // within its min (so the victim cannot take it back for another resource).
                let keeps_theirs = d.iter().all(|(r, x)| {
                    debug_assert_eq!(
                        q.names_min(*vleaf, r),
                        q.tree.nodes[*vleaf].min.0.contains_key(self.table.name(r)),
                        "a leaf's min read by index as by name"
                    );
                    r == PODS
                        || r == MAX_JOBS
                        || x <= 0
                        || !q.names_min(*vleaf, r)
                        || within(leaf, r)
                });
                let eligible = keeps_theirs && short.iter().all(|&r| within(jc, r));
                if eligible && !own.is_empty() {
                    guard.extend(short.iter().map(|&r| (jc, r, d.get(r))));
                }
                eligible.then_some(*vleaf)
            })
            .collect();
        // Its own queue's jobs are preempted only for a place within its min.
        if !own.is_empty() {
            guard.extend(short.iter().map(|&r| (leaf, r, d.get(r))));
        }
        guard.sort_unstable();
        guard.dedup();
        let bits = whole_bits(short);
        let mut candidates: Vec<(i32, Reverse<u64>, JobId)> = leaves
            .iter()
            .flat_map(|l| self.admitted_by_leaf[l].iter().copied())
            .filter(|(_, _, v)| self.asks_any(*v, short, bits))
            .collect();
        // Each leaf's jobs come in this order already: merging the runs (a stable sort finds
        // them) is cheaper than sorting afresh; the keys are unique, so the order is the same.
        candidates.sort();
        // Its own jobs that the guard needs gone come first (no trial can give them back), then
        // the borrowers, then the rest of its own: the shortest prefix takes borrowed capacity
        // back before any other job of its queue.
        let own: Vec<JobId> = own
            .iter()
            .copied()
            .filter(|v| self.asks_any(*v, short, bits))
            .collect();
        let mut forced = 0;
        let mut gone = Demand::default();
        while forced < own.len()
            && !guard
                .iter()
                .all(|&(n, r, x)| q.used_of(n, r) - gone.get(r) + x <= q.min_of(n, r))
        {
            gone.add_scaled(&self.shapes[self.jobs[own[forced]].shape].quota_demand, 1);
            forced += 1;
        }
        let mut order: Vec<JobId> = own[..forced].to_vec();
        order.extend(candidates.into_iter().map(|c| c.2));
        order.extend(own[forced..].iter().copied());
        self.take_victims(job, leaf, short, order, &guard, None)
    }

    /// The candidates of `order` (in order) that leave no victim able to reclaim back: one of
    /// another leaf than `leaf` is kept only while its leaf, with that leaf's candidates before
    /// it gone, is above its min for every resource of `short` (those being reclaimed) it asks,
    /// counting as gone the leaf's jobs of lower priority it could preempt. Otherwise a victim
    /// taken back to within its min could reclaim in turn from another borrowing leaf, and jobs
    /// of equal priority could take each other's places round a cohort forever.
    /// With `fair` (preemption for fairness), a victim is also kept only while its side below
    /// the bound's node keeps the bound's share ([`Self::keeps_fair_share`]). With `alone`, each
    /// candidate is judged as if it were the first of its leaf: one left out then is left out
    /// of every set of victims R5 keeps (more victims before it only take more from its leaf).
    pub(super) fn borrowed_only(
        &self,
        leaf: usize,
        short: &[Res],
        order: &[JobId],
        fair: Option<FairBound>,
        alone: bool,
    ) -> Vec<JobId> {
        let Some(q) = self.quota.as_ref() else {
            return order.to_vec();
        };
        let mut sides: BTreeMap<usize, Side> = BTreeMap::new();
        let mut fair_taken: BTreeMap<usize, Demand> = BTreeMap::new();
        let mut out = Vec::with_capacity(order.len());
        for &v in order {
            let Some(vleaf) = self.queues.leaf(self.jobs[v].queue) else {
                continue;
            };
            if vleaf == leaf {
                out.push(v);
                continue;
            }
            let side = sides.entry(vleaf).or_insert_with(|| self.side(vleaf));
            let p = self.jobs[v].priority;
            // Its leaf's jobs of lower priority, those kept before it excepted.
            let left = side.left(p);
            let vd = &self.shapes[self.jobs[v].shape].quota_demand;
            let above =
                |r: Res| q.used_of(vleaf, r) - side.taken.get(r) - left.get(r) > q.min_of(vleaf, r);
            // Only the resources being reclaimed count: a leaf that borrows GPUs gives them
            // back even while it uses little of its guaranteed cpu or memory. For fairness
            // (F4), every resource it asks: waiting, it would borrow each of them, so it could
            // never reclaim its place back (R2).
            let borrowed = match fair {
                None => short.iter().filter(|&&r| vd.get(r) > 0).all(|&r| above(r)),
                Some(_) => vd.iter().filter(|(_, x)| *x > 0).all(|(r, _)| above(r)),
            };
            let fair_side = fair.and_then(|bound| {
                let b = q.meeting_child(leaf, vleaf)?;
                Some((bound, b))
            });
            let fair_kept = fair_side.is_none_or(|(bound, b)| {
                let taken = fair_taken.get(&b).cloned().unwrap_or_default();
                self.keeps_fair_share(bound, b, &taken, v)
            });
            if fair.is_some() && fair_side.is_none() {
                continue;
            }
            if !(borrowed && fair_kept) {
                continue;
            }
            // Judged alone, a kept one takes nothing from the next of its leaf.
            if !alone {
                if let Some((_, b)) = fair_side {
                    fair_taken.entry(b).or_default().add_scaled(vd, 1);
                }
                side.taken.add_scaled(vd, 1);
                side.taken_by_priority
                    .entry(p)
                    .or_default()
                    .add_scaled(vd, 1);
            }
            out.push(v);
        }
        out
    }

    /// What [`Self::borrowed_only`] counts of `leaf`: nothing kept yet, and, when the leaf
    /// preempts by priority, its admitted jobs' charge below each of their priorities.
    fn side(&self, leaf: usize) -> Side {
        let lower = self.preemptible_in_leaf(leaf).map(|set| {
            let mut below: Vec<(i32, Demand)> = Vec::new();
            let mut sum = Demand::default();
            for &(p, _, j) in set {
                if below.last().is_none_or(|(lp, _)| *lp < p) {
                    below.push((p, sum.clone()));
                }
                sum.add_scaled(&self.shapes[self.jobs[j].shape].quota_demand, 1);
            }
            Lower { below, all: sum }
        });
        Side {
            taken: Demand::default(),
            taken_by_priority: BTreeMap::new(),
            lower,
        }
    }

    /// Picks victims among `order` (in that order) so that `job` fits: per member cluster, its
    /// victims on it in order (those [`Self::borrowed_only`] keeps) until the job fits there
    /// (keeping `guard`), then the ones that turned out unnecessary are given back, with a
    /// second trial when those kept do not do ([`Self::trial_kept`]); the first cluster, in the
    /// usual order, where that works wins. When only quota is short and the job already fits a cluster, victims come
    /// from anywhere. On success the victims are released and queued again; on failure nothing
    /// changed.
    pub(super) fn take_victims(
        &mut self,
        job: JobId,
        leaf: usize,
        short: &[Res],
        order: Vec<JobId>,
        guard: &[Guard],
        fair: Option<FairBound>,
    ) -> Option<(Vec<JobId>, usize, Placement)> {
        if order.is_empty() {
            return None;
        }
        let shape = self.jobs[job].shape;
        let quota_only = !self.fits_now(job, leaf) && self.find_cluster(job).is_ok();
        let chosen: Option<(Vec<JobId>, usize)> = if quota_only {
            // Quota is the only shortage: release in order until quota allows the job.
            let (kept, second) = self.r5_lists(leaf, short, &order, fair);
            self.trial_kept(job, leaf, short, (&kept, second.as_deref()), None, guard)
                .ok()
                .and_then(|v| self.find_cluster_with(job, &v).map(|ci| (v, ci)))
        } else {
            // Each member's candidates, in `order` (indexed by member).
            let mut by_cluster: Vec<Vec<JobId>> = vec![Vec::new(); self.clusters.len()];
            for v in &order {
                if let JobState::Admitted { cluster, .. } = self.jobs[*v].state
                    && let Some(list) = by_cluster.get_mut(cluster)
                {
                    list.push(*v);
                }
            }
            // Clusters in the usual choice order (least free of the job's scarcest resource,
            // then name); the first where its victims suffice wins.
            let key_res = self.shapes[shape].key_res;
            let mut clusters: Vec<(i128, usize)> = (0..by_cluster.len())
                .filter(|&ci| !by_cluster[ci].is_empty())
                .map(|ci| (at(&self.clusters[ci].summary().total_free, key_res), ci))
                .collect();
            // Cluster names are unique: the index breaks no tie the name leaves.
            clusters.sort_by(|a, b| {
                (a.0, &self.clusters[a.1].name).cmp(&(b.0, &self.clusters[b.1].name))
            });
            let mut best: Option<(Vec<JobId>, usize)> = None;
            for (_, ci) in clusters {
                let candidates = std::mem::take(&mut by_cluster[ci]);
                let c = &self.clusters[ci];
                if !c.reachable || !self.candidate(shape, ci) {
                    continue;
                }
                // R6: another leaf's candidate with no pod asking a short resource on a node
                // the job may use frees nothing it can use; counted by R5, it would stand in
                // for one that does.
                let fit = self.shapes[shape].fit;
                self.ensure_usable(fit, ci);
                let usable = self.usable_on(fit, ci);
                let candidates: Vec<JobId> = candidates
                    .into_iter()
                    .filter(|&v| {
                        let groups = &self.shapes[self.jobs[v].shape].groups;
                        let frees = |p: &Placement| {
                            p.groups.iter().zip(groups).any(|(on, g)| {
                                short.iter().any(|&r| g.demand.get(r) > 0)
                                    && on.iter().any(|&(n, k)| {
                                        k > 0 && usable.get(n).copied().unwrap_or(false)
                                    })
                            })
                        };
                        self.queues.leaf(self.jobs[v].queue) == Some(leaf)
                            || matches!(&self.jobs[v].state,
                                JobState::Admitted { placement, .. } if frees(placement))
                    })
                    .collect();
                let (order, second) = self.r5_lists(leaf, short, &candidates, fair);
                // Same cluster state and same candidates as a failed trial: same failure. (A
                // trial for fairness, with other candidates, hashes apart; so does one with
                // other candidates for its second trial.)
                let mix = |h: u64, v: &JobId| {
                    h.rotate_left(7) ^ (*v as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
                };
                let seed = job as u64 ^ fair.map_or(0, |b| b.node as u64 + 1) << 40;
                let memo = (
                    self.clusters[ci].version,
                    second
                        .iter()
                        .flatten()
                        .fold(order.iter().fold(seed, mix) ^ 1, mix),
                );
                let class = self.jobs[job].class;
                // A trial that failed because the job did not fit even one by one with every
                // candidate gone fails again while the cluster only lost free capacity; one that
                // failed otherwise (quota, a guard, R5 refusing the second trial's victims) only
                // while neither the cluster nor anything the tree charges changed.
                if let Some(&(v, h, capacity, u)) = self.classes[class].reclaim_failed.get(&ci)
                    && h == memo.1
                    && ((v == memo.0 && u == self.usage_version)
                        || (capacity && self.clusters[ci].freed <= v))
                {
                    continue;
                }
                let lists = (order.as_slice(), second.as_deref());
                match self.trial_kept(job, leaf, short, lists, Some(ci), guard) {
                    Ok(victims) => {
                        best = Some((victims, ci));
                        break;
                    }
                    Err(capacity) => {
                        let entry = (memo.0, memo.1, capacity, self.usage_version);
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
}

/// One victim leaf in [`Scheduler::borrowed_only`]: the charge of its candidates kept so far,
/// in all and by priority, and what its jobs of lower priority are charged (None when the leaf
/// does not preempt by priority).
struct Side {
    taken: Demand,
    taken_by_priority: BTreeMap<i32, Demand>,
    lower: Option<Lower>,
}

/// A leaf's admitted jobs: for each priority among them, in increasing order, the charge of the
/// ones below it; and the charge of them all.
struct Lower {
    below: Vec<(i32, Demand)>,
    all: Demand,
}

impl Side {
    /// The charge of the leaf's jobs that a job of priority `p` may preempt, less those kept
    /// before it.
    fn left(&self, p: i32) -> Demand {
        let Some(l) = &self.lower else {
            return Demand::default();
        };
        // The lowest priority present that is not below p: the jobs below it are the ones
        // below p (no priority lies between).
        let i = l.below.partition_point(|(bp, _)| *bp < p);
        let mut left = l
            .below
            .get(i)
            .map_or_else(|| l.all.clone(), |(_, d)| d.clone());
        for (_, d) in self.taken_by_priority.range(..p) {
            left.add_scaled(d, -1);
        }
        left
    }
}
