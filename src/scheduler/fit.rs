//! Where a job fits: the choice of member (`find_cluster`), one estimate on one member
//! (`place_on`), the nodes each component may use there (`ensure_eligible`; together, per
//! node, `ensure_usable`), and whether a member is a candidate at all (`candidate`, `refusal`).
//!
//! Owns the fit memos. They belong to the *pod shape* ([`FitMemo`]: the components' pods,
//! requests and node constraints), not to the job's [`Shape`](super::Shape): jobs that differ
//! only in what a member must serve to create them (kind, PriorityClasses) place the same way
//! on a member that can create both, so they share what was learnt there. What a member can
//! create is checked per shape, every time. A memo is used only when it gives the answer a
//! fresh estimate would give, reason included:
//! - a failure on a member is kept while the member's version is unchanged;
//! - a failure on a necessary condition (a component's pods do not fit the free nodes even one
//!   by one, or exceed the member's bounds) stays a failure while the member only *lost* free
//!   capacity (no release, no change of nodes or external usage since: [`Cluster::freed`]); its
//!   reason may be stale, so it is estimated again when the reason is shown;
//! - "fits nowhere" is kept per fleet version and set of candidate members.

use std::collections::HashMap;

use super::{JobId, Scheduler, ShapeId};
use crate::estimate::{self, Placement, PodGroup};
use crate::fleet::Cluster;
use crate::resources::{Demand, Res, at};

pub(super) type FitId = usize;

/// What the scheduler learnt about one pod shape.
#[derive(Clone)]
pub(super) struct FitMemo {
    pub groups: Vec<PodGroup>,
    pub quota_demand: Demand,
    /// Per cluster: (topology version, eligible nodes per group).
    pub eligible: HashMap<usize, (u64, Vec<Vec<usize>>)>,
    /// Per cluster: (topology version, per node whether the shape may use it).
    pub usable: HashMap<usize, (u64, Vec<bool>)>,
    /// Per cluster: (version, topology version, what is free on the nodes it may use).
    pub usable_free: HashMap<usize, (u64, u64, UsableFree)>,
    /// Per cluster, the last failure there.
    pub seen: Vec<Seen>,
    /// The fleet version and candidate members at which the pod shape last fit nowhere, and why.
    pub nowhere: Option<(u64, Vec<usize>, String)>,
    /// Per cluster: (topology version, whether the pod shape fits it empty, else why not).
    pub empty: HashMap<usize, (u64, Result<(), String>)>,
}

impl FitMemo {
    pub fn new(groups: Vec<PodGroup>, quota_demand: Demand) -> FitMemo {
        FitMemo {
            groups,
            quota_demand,
            eligible: HashMap::new(),
            usable: HashMap::new(),
            usable_free: HashMap::new(),
            seen: Vec::new(),
            nowhere: None,
            empty: HashMap::new(),
        }
    }
}

/// What is free on one member's nodes that a pod shape may use (they take pods and admit one
/// of its groups), per resource index: the most on one node, per group, and the total.
#[derive(Clone, Default, Debug, PartialEq)]
pub(super) struct UsableFree {
    pub most: Vec<Vec<i128>>,
    pub total: Vec<i128>,
}

/// A failed estimate on one member.
#[derive(Clone, Default)]
pub(super) struct Seen {
    /// The member's version then.
    pub version: u64,
    /// Failed on a necessary condition (stays failed while free capacity only shrinks).
    pub capacity: bool,
    pub reason: Option<String>,
}

impl Scheduler {
    /// Computes (or keeps) the nodes admitting each group of the pod shape on cluster `ci`.
    pub(super) fn ensure_eligible(&mut self, fit: FitId, ci: usize) {
        let topo = self.clusters[ci].topology;
        let f = &mut self.fits[fit];
        let fresh = matches!(f.eligible.get(&ci), Some((t, _)) if *t == topo);
        if !fresh {
            let e = estimate::eligible(&self.clusters[ci], &f.groups);
            f.eligible.insert(ci, (topo, e));
        }
    }

    /// What is free on the nodes of `ci` the pod shape may use, kept while the member's
    /// version is unchanged.
    pub(super) fn ensure_usable_free(&mut self, fit: FitId, ci: usize) {
        let (v, topo) = (self.clusters[ci].version, self.clusters[ci].topology);
        let fresh = matches!(self.fits[fit].usable_free.get(&ci),
            Some((fv, ft, _)) if *fv == v && *ft == topo);
        if !fresh {
            self.ensure_usable(fit, ci);
            let u = usable_free(
                &self.clusters[ci],
                self.eligible_on(fit, ci),
                self.usable_on(fit, ci),
            );
            debug_assert!(
                u == usable_free_read(
                    &self.clusters[ci],
                    self.eligible_on(fit, ci),
                    self.usable_on(fit, ci)
                ),
                "what is free on the usable nodes, read node by node as resource by resource"
            );
            self.fits[fit].usable_free.insert(ci, (v, topo, u));
        }
    }

    /// The nodes of `ci` the pod shape may use (they take pods and admit one of its groups
    /// with pods), kept while the member's topology (nodes, labels, taints) is unchanged.
    pub(super) fn ensure_usable(&mut self, fit: FitId, ci: usize) {
        self.ensure_eligible(fit, ci);
        let topo = self.clusters[ci].topology;
        let fresh = matches!(self.fits[fit].usable.get(&ci), Some((t, _)) if *t == topo);
        if !fresh {
            let c = &self.clusters[ci];
            let mut usable = vec![false; c.nodes.len()];
            for (g, e) in self.fits[fit].groups.iter().zip(self.eligible_on(fit, ci)) {
                if g.pods > 0 {
                    for &n in e {
                        usable[n] = c.nodes[n].takes_pods();
                    }
                }
            }
            self.fits[fit].usable.insert(ci, (topo, usable));
        }
    }

    /// The nodes of `ci` the pod shape may use (after [`Self::ensure_usable`]).
    pub(super) fn usable_on(&self, fit: FitId, ci: usize) -> &[bool] {
        self.fits[fit]
            .usable
            .get(&ci)
            .map_or(&[][..], |(_, u)| u.as_slice())
    }

    /// The tightest cluster (least free of the job's scarcest resource) where the whole job fits.
    pub(super) fn find_cluster(&mut self, job: JobId) -> Result<(usize, Placement), String> {
        let shape_id = self.jobs[job].shape;
        // Jobs of the same shape in other queues see the same fleet: one failure per fleet state.
        if let Some((v, r)) = &self.shapes[shape_id].nowhere
            && *v == self.fleet_version
        {
            return Err(r.clone());
        }
        let fit = self.shapes[shape_id].fit;
        let ncl = self.clusters.len();
        if self.fits[fit].seen.len() < ncl {
            self.fits[fit].seen.resize(ncl, Seen::default());
        }
        let key = self.shapes[shape_id].key_res;
        let cands: Vec<usize> = (0..ncl)
            .filter(|&ci| self.clusters[ci].reachable && self.candidate(shape_id, ci))
            .collect();
        if cands.is_empty() {
            return Err("no reachable member cluster is a candidate for this job".into());
        }
        // Another shape of the same pods, with the same candidates, found nowhere at this state.
        if let Some((v, c, r)) = &self.fits[fit].nowhere
            && *v == self.fleet_version
            && *c == cands
        {
            let r = r.clone();
            self.shapes[shape_id].nowhere = Some((self.fleet_version, r.clone()));
            return Err(r);
        }
        let reason = match self.fit_somewhere(fit, key, &cands, true) {
            Ok(found) => return Ok(found),
            Err(Some(reason)) => reason,
            // A failure kept for a member that only lost capacity did not hold: estimate
            // everything again (never expected; the memo is then simply not used).
            Err(None) => match self.fit_somewhere(fit, key, &cands, false) {
                Ok(found) => return Ok(found),
                Err(reason) => reason.unwrap_or_default(),
            },
        };
        self.shapes[shape_id].nowhere = Some((self.fleet_version, reason.clone()));
        self.fits[fit].nowhere = Some((self.fleet_version, cands, reason.clone()));
        Err(reason)
    }

    /// Whether the job's pods fit no candidate member now, by what is known without an estimate:
    /// the shape fit nowhere at this fleet version, or on every candidate member a failure is
    /// kept ([`Self::still_fails`], kept capacity failures included; no candidate at all is no
    /// fit either). [`Self::find_cluster`] would then estimate only to refresh reasons.
    pub(super) fn fits_nowhere(&self, job: JobId) -> bool {
        let shape_id = self.jobs[job].shape;
        if let Some((v, _)) = &self.shapes[shape_id].nowhere
            && *v == self.fleet_version
        {
            return true;
        }
        let fit = self.shapes[shape_id].fit;
        self.fits[fit].seen.len() >= self.clusters.len()
            && (0..self.clusters.len()).all(|ci| {
                self.still_fails(fit, ci, true)
                    || !self.clusters[ci].reachable
                    || !self.candidate(shape_id, ci)
            })
    }

    /// Whether the pod shape's last failure on `ci` is what an estimate now would find (with
    /// `keep_capacity_failures`, also a necessary condition failed before free capacity there
    /// only shrank).
    fn still_fails(&self, fit: FitId, ci: usize, keep_capacity_failures: bool) -> bool {
        let c = &self.clusters[ci];
        let seen = &self.fits[fit].seen[ci];
        seen.reason.is_some()
            && (seen.version == c.version
                || (keep_capacity_failures && seen.capacity && c.freed <= seen.version))
    }

    /// The first of the candidates `cands`, tightest first (least free of `key`, then name),
    /// where the pod shape fits, or why none does (`None`: a kept capacity failure turned out
    /// wrong; only with `keep_capacity_failures`). When every candidate still fails, no member
    /// is estimated and the order does not matter.
    fn fit_somewhere(
        &mut self,
        fit: FitId,
        key: crate::resources::Res,
        cands: &[usize],
        keep_capacity_failures: bool,
    ) -> Result<(usize, Placement), Option<String>> {
        if cands
            .iter()
            .any(|&ci| !self.still_fails(fit, ci, keep_capacity_failures))
        {
            let mut order: Vec<(i128, usize)> = Vec::with_capacity(cands.len());
            for &ci in cands {
                order.push((at(&self.clusters[ci].summary().total_free, key), ci));
            }
            order.sort_by(|a, b| {
                a.0.cmp(&b.0)
                    .then_with(|| self.clusters[a.1].name.cmp(&self.clusters[b.1].name))
            });
            for (_, ci) in order {
                if self.still_fails(fit, ci, keep_capacity_failures) {
                    continue;
                }
                let version = self.clusters[ci].version;
                match self.place_on(fit, ci) {
                    Ok(p) => return Ok((ci, p)),
                    Err(no) => {
                        self.fits[fit].seen[ci] = Seen {
                            version,
                            capacity: no.capacity,
                            reason: Some(no.reason),
                        };
                    }
                }
            }
        }
        // Every candidate failed: the reasons shown are the first five members by name, each
        // as an estimate at this state gives it.
        let mut names: Vec<usize> = cands.to_vec();
        names.sort_by(|a, b| self.clusters[*a].name.cmp(&self.clusters[*b].name));
        let total = names.len();
        let mut parts: Vec<String> = Vec::with_capacity(6);
        for &ci in names.iter().take(5) {
            let version = self.clusters[ci].version;
            if self.fits[fit].seen[ci].version != version {
                match self.place_on(fit, ci) {
                    Ok(_) => return Err(None),
                    Err(no) => {
                        self.fits[fit].seen[ci] = Seen {
                            version,
                            capacity: no.capacity,
                            reason: Some(no.reason),
                        };
                    }
                }
            }
            let r = self.fits[fit].seen[ci]
                .reason
                .as_deref()
                .unwrap_or_default();
            parts.push(format!("{}: {r}", self.clusters[ci].name));
        }
        if total > 5 {
            parts.push(format!("and {} more clusters", total - 5));
        }
        Err(Some(format!("no cluster fits: {}", parts.join("; "))))
    }

    /// One estimate of the pod shape on cluster `ci` at its current state.
    pub(super) fn place_on(&mut self, fit: FitId, ci: usize) -> Result<Placement, estimate::NoFit> {
        self.clusters[ci].summary();
        let f = &self.fits[fit];
        if let Some(reason) = estimate::beyond_bounds(
            self.clusters[ci].cached_summary(),
            &f.groups,
            &f.quota_demand,
            &self.table,
        ) {
            return Err(estimate::NoFit {
                reason,
                capacity: true,
            });
        }
        self.ensure_eligible(fit, ci);
        let f = &self.fits[fit];
        let elig = f
            .eligible
            .get(&ci)
            .map(|(_, e)| e.as_slice())
            .unwrap_or(&[]);
        estimate::place_or_why(&self.clusters[ci], &f.groups, elig, &self.table)
    }

    /// The eligible nodes per group of the pod shape on `ci` (after [`Self::ensure_eligible`]).
    pub(super) fn eligible_on(&self, fit: FitId, ci: usize) -> &[Vec<usize>] {
        self.fits[fit]
            .eligible
            .get(&ci)
            .map_or(&[][..], |(_, e)| e.as_slice())
    }

    /// Whether member `ci` is a candidate for the shape: the job's cluster restriction allows
    /// it and it can create the job.
    pub(super) fn candidate(&self, shape_id: ShapeId, ci: usize) -> bool {
        let c = &self.clusters[ci];
        self.shapes[shape_id].candidates.allows(&c.name, &c.labels)
            && self.refusal(shape_id, ci).is_none()
    }

    /// Why member `ci` cannot create a job of the shape (its kind, its pods' PriorityClasses, its
    /// training runtime, an operator that does not act).
    pub(super) fn refusal(&self, shape_id: ShapeId, ci: usize) -> Option<String> {
        let (s, c): (_, &Cluster) = (&self.shapes[shape_id], &self.clusters[ci]);
        c.serves.refuses(&c.name, &s.needs)
    }
}

/// [`UsableFree`] of member `c` for a pod shape whose groups admit `eligible` (per group, node
/// indices in increasing order) and may use the nodes marked in `usable`: one read of each
/// usable node's free amounts, offered to the total and to every group that admits the node.
fn usable_free(c: &Cluster, eligible: &[Vec<usize>], usable: &[bool]) -> UsableFree {
    let len = c.res_len();
    let mut most: Vec<Vec<i128>> = vec![vec![i128::MIN; len]; eligible.len()];
    let mut total = vec![0i128; len];
    // Per group, the next of its eligible nodes (both go up).
    let mut next = vec![0usize; eligible.len()];
    let mut free = vec![0i128; len];
    for (n, node) in c.nodes.iter().enumerate() {
        if !usable.get(n).copied().unwrap_or(false) {
            continue;
        }
        for (i, f) in free.iter_mut().enumerate() {
            *f = node.free(Res(i as u16));
        }
        for (t, &f) in total.iter_mut().zip(&free) {
            *t = t.saturating_add(f.max(0));
        }
        for (g, e) in eligible.iter().enumerate() {
            while e.get(next[g]).is_some_and(|&m| m < n) {
                next[g] += 1;
            }
            if e.get(next[g]) == Some(&n) {
                for (m, &f) in most[g].iter_mut().zip(&free) {
                    *m = (*m).max(f);
                }
            }
        }
    }
    // A group with no usable node has 0 of everything at most.
    for m in most.iter_mut().flatten() {
        if *m == i128::MIN {
            *m = 0;
        }
    }
    UsableFree { most, total }
}

/// The reference for [`usable_free`]: resource by resource, node by node.
fn usable_free_read(c: &Cluster, eligible: &[Vec<usize>], usable: &[bool]) -> UsableFree {
    let len = c.res_len();
    let free = |n: usize, i: usize| c.nodes[n].free(Res(i as u16));
    let is_usable = |n: usize| usable.get(n).copied().unwrap_or(false);
    let most = eligible
        .iter()
        .map(|e| {
            (0..len)
                .map(|i| {
                    e.iter()
                        .filter(|&&n| is_usable(n))
                        .map(|&n| free(n, i))
                        .max()
                        .unwrap_or(0)
                })
                .collect()
        })
        .collect();
    let total = (0..len)
        .map(|i| {
            (0..c.nodes.len())
                .filter(|&n| is_usable(n))
                .fold(0i128, |t, n| t.saturating_add(free(n, i).max(0)))
        })
        .collect();
    UsableFree { most, total }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::fleet::{ClusterInfo, NodeInfo};
    use crate::resources::ResourceTable;

    proptest! {
        /// What is free on the usable nodes, read once per node, is the per-resource read: any
        /// nodes (some over-committed, so free below zero), any eligible nodes per group, any
        /// usable nodes.
        #[test]
        fn usable_free_is_the_per_resource_read(
            shapes in prop::collection::vec((0i64..=64, 0i64..=8), 1..12),
            reserved in prop::collection::vec((0usize..12, 0i64..=80, 0i64..=9), 0..10),
            groups in prop::collection::vec(prop::collection::vec(any::<bool>(), 12), 1..4),
            usable in prop::collection::vec(any::<bool>(), 12),
        ) {
            let mut t = ResourceTable::default();
            let nodes = shapes
                .iter()
                .enumerate()
                .map(|(i, &(cpu, gpu))| {
                    let (cpu, gpu) = (cpu.to_string(), gpu.to_string());
                    NodeInfo::ready(
                        &format!("n{i}"),
                        &[("cpu", &cpu), ("nvidia.com/gpu", &gpu), ("pods", "110")],
                    )
                })
                .collect();
            let info = ClusterInfo { name: "m".into(), nodes, ..Default::default() };
            let mut c = Cluster::new(&info, &mut t, 1);
            let (cpu, gpu) = (t.intern("cpu"), t.intern("nvidia.com/gpu"));
            for (n, cpus, gpus) in reserved {
                let mut d = vec![(cpu, i128::from(cpus) * 1000), (gpu, i128::from(gpus) * 1000)];
                d.sort();
                c.reserve(n % c.nodes.len(), &Demand(d), 1);
            }
            let eligible: Vec<Vec<usize>> = groups
                .iter()
                .map(|admits| (0..c.nodes.len()).filter(|&n| admits[n]).collect())
                .collect();
            let usable = &usable[..c.nodes.len()];
            prop_assert_eq!(
                usable_free(&c, &eligible, usable),
                usable_free_read(&c, &eligible, usable)
            );
        }
    }
}
