//! Reservations: an admitted job's pods on its member's nodes and its charge on its quota leaf,
//! made by `reserve` and undone by `release`. The one place node reservations change is
//! `reserve_on` (through [`Cluster::reserve`], which keeps the cluster's summary current);
//! every change bumps the cluster's version, and a release wakes the classes that waited for
//! quota or capacity.

use std::cmp::Reverse;

use super::{JobId, JobState, Plan, Scheduler};
use crate::estimate::{Placement, PodGroup};
use crate::fleet::Cluster;

impl Scheduler {
    pub(super) fn placement_from(&self, job: JobId, ci: usize, plan: &Plan) -> Placement {
        let c = &self.clusters[ci];
        let shape = &self.shapes[self.jobs[job].shape];
        let groups = shape
            .groups
            .iter()
            .map(|g| {
                plan.get(&g.name)
                    .into_iter()
                    .flatten()
                    .filter_map(|(node, k)| c.node_index.get(node).map(|&n| (n, *k)))
                    .collect()
            })
            .collect();
        Placement { groups }
    }

    /// Adds (`sign` 1) or removes (`sign` -1) a job's planned pods on its cluster's nodes; nothing
    /// else (quota, state, versions) changes.
    pub(super) fn reserve_nodes(
        &mut self,
        job: JobId,
        ci: usize,
        placement: &Placement,
        sign: i128,
    ) {
        let groups = &self.shapes[self.jobs[job].shape].groups;
        reserve_on(&mut self.clusters[ci], groups, placement, sign);
    }

    pub(super) fn reserve(&mut self, job: JobId, ci: usize, placement: Placement) {
        self.reserve_with(job, ci, placement, false);
    }

    /// `restore`: the job gets back its earlier admission order (an undone trial release).
    pub(super) fn reserve_with(
        &mut self,
        job: JobId,
        ci: usize,
        placement: Placement,
        restore: bool,
    ) {
        self.reserve_nodes(job, ci, &placement, 1);
        self.usage_version += 1;
        let shape = &self.shapes[self.jobs[job].shape];
        if let (Some(q), Some(leaf)) = (self.quota.as_mut(), self.queues.leaf(self.jobs[job].queue))
        {
            q.charge(leaf, &shape.quota_demand, 1);
            self.heads.mark(leaf);
        }
        if !restore || self.jobs[job].admitted_seq == 0 {
            self.seq += 1;
            self.jobs[job].admitted_seq = self.seq;
        }
        self.jobs[job].state = JobState::Admitted {
            cluster: ci,
            placement,
        };
        let j = &self.jobs[job];
        let entry = (j.priority, Reverse(j.admitted_seq), job);
        if let Some(leaf) = self.queues.leaf(j.queue) {
            self.admitted_by_leaf.entry(leaf).or_default().insert(entry);
        }
        self.bump_cluster(ci);
    }

    pub(super) fn release(&mut self, job: JobId) {
        let JobState::Admitted {
            cluster: ci,
            placement,
        } = std::mem::replace(&mut self.jobs[job].state, JobState::Pending)
        else {
            return;
        };
        self.reserve_nodes(job, ci, &placement, -1);
        self.usage_version += 1;
        let shape = &self.shapes[self.jobs[job].shape];
        let leaf = self.queues.leaf(self.jobs[job].queue);
        if let (Some(q), Some(leaf)) = (self.quota.as_mut(), leaf) {
            q.charge(leaf, &shape.quota_demand, -1);
            self.heads.mark(leaf);
            for n in q.tree.path_up(leaf) {
                if let Some(set) = self.quota_blocked.get_mut(n) {
                    for c in set.drain() {
                        self.mark_dirty(c);
                    }
                }
            }
        }
        let entry = (
            self.jobs[job].priority,
            Reverse(self.jobs[job].admitted_seq),
            job,
        );
        if let Some(set) = leaf.and_then(|l| self.admitted_by_leaf.get_mut(&l)) {
            set.remove(&entry);
        }
        self.freed_on(ci);
        self.capacity_freed();
    }

    fn bump_cluster(&mut self, ci: usize) {
        self.fleet_version += 1;
        self.clusters[ci].bump(self.fleet_version);
    }

    /// [`Self::bump_cluster`] for a change that may give nodes of the cluster more free
    /// capacity (see [`Cluster::freed`]).
    pub(super) fn freed_on(&mut self, ci: usize) {
        self.bump_cluster(ci);
        self.clusters[ci].freed = self.clusters[ci].version;
    }
}

/// The one place node reservations change: `sign` × each group's per-pod demand on the nodes
/// of `placement` (nodes the cluster no longer has are skipped).
pub(super) fn reserve_on(c: &mut Cluster, groups: &[PodGroup], placement: &Placement, sign: i128) {
    for (gi, nodes) in placement.groups.iter().enumerate() {
        for &(n, k) in nodes {
            c.reserve(n, &groups[gi].demand, sign * i128::from(k));
        }
    }
}
