//! Preemption for fairness (rules F1–F5 of docs/concepts.md): below a tree node that allows it,
//! a waiting job may take back what a sibling subtree borrows beyond its fair part.
//!
//! Owns the candidates (jobs of sibling subtrees whose share is above the share the job's own
//! side would have with it admitted), the share bound each victim's side keeps
//! ([`FairBound`], Kueue's `LessThanOrEqualToFinalShare`), and the rate limit (one job
//! admitted this way per node per cycle). The victims themselves are chosen by the reclaim
//! machinery ([`Scheduler::take_victims`]), which keeps R5 (only what a leaf borrows) and R7
//! (nothing more than needed).

use std::collections::BTreeMap;

use super::{ClassId, JobId, Scheduler};
use crate::estimate::Placement;
use crate::quota::Share;
use crate::resources::{Demand, Res};

/// The bound a fairness victim's side keeps: below node `node`, the side of the victim, with
/// every victim taken from it gone, keeps a share of at least `share` (the preemptor's side's
/// share with the preemptor admitted).
#[derive(Clone, Copy, Debug)]
pub(super) struct FairBound {
    pub node: usize,
    pub share: Share,
}

/// A job admitted by preemption for fairness: the victims with their reasons, where it goes.
pub(super) struct FairPreemption {
    pub victims: Vec<(JobId, String)>,
    pub cluster: usize,
    pub placement: Placement,
}

impl Scheduler {
    /// F1: whether a node on `leaf`'s path above it allows preemption for fairness (a job of
    /// this leaf might take capacity back from a sibling subtree there).
    pub(super) fn fairness_above(&self, leaf: usize) -> bool {
        let Some(q) = self.quota.as_ref() else {
            return false;
        };
        let mut cur = q.tree.nodes[leaf].parent;
        while let Some(p) = cur {
            if q.tree.preempts_for_fairness(p) {
                return true;
            }
            cur = q.tree.nodes[p].parent;
        }
        false
    }

    /// F2–F5: admits `job` (of `leaf`, short of `short`) by preempting jobs of sibling subtrees
    /// for fairness, at the nearest node of its path that allows it and where that works; on
    /// failure nothing changed.
    pub(super) fn preempt_for_fairness(
        &mut self,
        job: JobId,
        class: ClassId,
        leaf: usize,
        short: &[Res],
    ) -> Option<FairPreemption> {
        if short.is_empty() {
            return None;
        }
        let mut side = leaf;
        loop {
            let q = self.quota.as_ref()?;
            let p = q.tree.nodes[side].parent?;
            if q.tree.preempts_for_fairness(p) {
                // F5: one job admitted this way per node per cycle; the others try again in
                // the next cycle.
                if self.fair_used.contains(&p) {
                    self.fair_limited.push(class);
                } else if let Some(done) = self.fair_at(job, leaf, side, p, short) {
                    self.fair_used.insert(p);
                    return Some(done);
                }
            }
            side = p;
        }
    }

    /// F2–F4 at node `p`, `side` being the job's side (the child of `p` on its path).
    fn fair_at(
        &mut self,
        job: JobId,
        leaf: usize,
        side: usize,
        p: usize,
        short: &[Res],
    ) -> Option<FairPreemption> {
        let q = self.quota.as_ref()?;
        let d = &self.shapes[self.jobs[job].shape].quota_demand;
        // F2: the share of the job's side with it admitted.
        let mine = q.share(side, d).0;
        // F3: candidates from sibling subtrees whose share now is above it, in victim order.
        let mut sides: BTreeMap<usize, Share> = BTreeMap::new();
        let mut candidates: Vec<(i32, std::cmp::Reverse<u64>, JobId)> = Vec::new();
        let bits = crate::resources::whole_bits(short);
        for (&vleaf, set) in &self.admitted_by_leaf {
            if set.is_empty() || vleaf == leaf {
                continue;
            }
            let Some(b) = q.meeting_child(leaf, vleaf) else {
                continue;
            };
            if q.tree.nodes[b].parent != Some(p) || b == side {
                continue;
            }
            let theirs = *sides
                .entry(b)
                .or_insert_with(|| q.share(b, &Demand::default()).0);
            if theirs <= mine {
                continue;
            }
            candidates.extend(
                set.iter()
                    .copied()
                    .filter(|c| self.asks_any(c.2, short, bits)),
            );
        }
        candidates.sort_unstable();
        let order: Vec<JobId> = candidates.into_iter().map(|c| c.2).collect();
        let bound = FairBound {
            node: p,
            share: mine,
        };
        let (victims, cluster, placement) =
            self.take_victims(job, leaf, short, order, &[], Some(bound))?;
        // The reasons, from the shares before the preemption.
        let q = self.quota.as_ref()?;
        let (label, qname) = (
            self.job_label(job),
            self.queues.name(self.jobs[job].queue).to_string(),
        );
        let (pname, aname) = (&q.tree.nodes[p].path, &q.tree.nodes[side].name);
        let victims = victims
            .into_iter()
            .map(|v| {
                let b = self
                    .queues
                    .leaf(self.jobs[v].queue)
                    .and_then(|vl| q.meeting_child(leaf, vl));
                let (bname, theirs) = match b {
                    Some(b) => (q.tree.nodes[b].name.as_str(), sides.get(&b).copied()),
                    None => ("", None),
                };
                let theirs = theirs.map_or_else(String::new, |s| s.to_string());
                let reason = format!(
                    "preempted for fair sharing under {pname} for {label} of {qname}: \
                     {bname}'s share is {theirs}, above the {mine} {aname} has with it"
                );
                (v, reason)
            })
            .collect();
        Some(FairPreemption {
            victims,
            cluster,
            placement,
        })
    }

    /// F4, in [`Self::borrowed_only`]: whether victim `v` (of side `b` below `bound.node`) may be
    /// taken with `taken` (the charge of the victims of `b` kept before it) gone too: `b` keeps
    /// a share of at least the bound's.
    pub(super) fn keeps_fair_share(
        &self,
        bound: FairBound,
        b: usize,
        taken: &Demand,
        v: JobId,
    ) -> bool {
        let Some(q) = self.quota.as_ref() else {
            return false;
        };
        let mut gone = Demand::default();
        gone.add_scaled(taken, -1);
        gone.add_scaled(&self.shapes[self.jobs[v].shape].quota_demand, -1);
        q.tree.nodes[b].parent == Some(bound.node) && q.share(b, &gone).0 >= bound.share
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Config, Decision, JobState, Submitted};
    use super::*;
    use crate::fleet::{ClusterInfo, NodeInfo};
    use crate::quota::QuotaTree;
    use crate::workload::interpret;

    fn one_gpu(ns: &str, name: &str) -> crate::workload::Workload {
        interpret(&serde_json::json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x",
                "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}
        }))
        .expect("a job")
    }

    fn preempted(d: &[Decision]) -> Vec<(JobId, JobId, String)> {
        d.iter()
            .filter_map(|d| match d {
                Decision::Preempt { job, by, reason } => Some((*job, *by, reason.clone())),
                _ => None,
            })
            .collect()
    }

    /// Two teams under a root that allows preemption for fairness, four GPUs: team a holds
    /// them all, team b's two jobs take two back, one per cycle (F5), and nothing goes back.
    #[test]
    fn a_sibling_takes_its_part_back_one_job_per_cycle_and_never_ping_pongs() {
        let mut s = Scheduler::new(Config::default());
        s.set_cluster(&ClusterInfo {
            name: "m".into(),
            nodes: vec![NodeInfo::ready(
                "m-0",
                &[("nvidia.com/gpu", "4"), ("pods", "110")],
            )],
            ..Default::default()
        });
        let tree = QuotaTree::parse(&serde_json::json!({
            "apiVersion": "scheduling.sigs.k8s.io/v1beta1", "kind": "ElasticQuotaTree",
            "metadata": {"name": "t", "namespace": "kube-system"},
            "spec": {"root": {"name": "root", "max": {"nvidia.com/gpu": "4"},
                "attributes": {"muster.dev/fair-sharing-preemption": "LessThanOrEqualToFinalShare"},
                "children": [{"name": "a", "namespaces": ["a"]}, {"name": "b", "namespaces": ["b"]}]}}
        }))
        .expect("a valid tree");
        s.set_quota_tree(Some(tree));
        let submit = |s: &mut Scheduler, ns: &str, name: &str, at: u64| match s
            .submit(&one_gpu(ns, name), at)
        {
            Submitted::Queued(id) => id,
            other => panic!("{other:?}"),
        };
        let a: Vec<JobId> = (0..4)
            .map(|i| submit(&mut s, "a", &format!("a{i}"), i))
            .collect();
        let d = s.cycle();
        assert_eq!(
            d.iter()
                .filter(|d| matches!(d, Decision::Admit { .. }))
                .count(),
            4
        );
        let b: Vec<JobId> = (0..2)
            .map(|i| submit(&mut s, "b", &format!("b{i}"), 10 + i))
            .collect();
        // Cycle 1: one of team a's jobs (the most recently admitted) for b0; b1 waits (F5).
        let d = s.cycle();
        let p = preempted(&d);
        assert_eq!(p.len(), 1, "{d:?}");
        assert_eq!((p[0].0, p[0].1), (a[3], b[0]));
        assert!(
            p[0].2
                == "preempted for fair sharing under root for b/b0 of root/b: a's share is 1, above the 1/4 (0.250) b has with it",
            "{}",
            p[0].2
        );
        assert!(
            s.has_work(),
            "the job the limit held back is looked at again"
        );
        // Cycle 2: b1 takes another; a keeps two, b has two.
        let p = preempted(&s.cycle());
        assert_eq!(
            p.iter().map(|p| (p.0, p.1)).collect::<Vec<_>>(),
            [(a[2], b[1])]
        );
        // Then a's victims wait: a with one more would have 3/4, above b's 2/4.
        for _ in 0..3 {
            let d = s.cycle();
            assert!(preempted(&d).is_empty(), "{d:?}");
        }
        assert!(matches!(s.state(a[3]), JobState::Pending));
        assert!(matches!(s.state(b[1]), JobState::Admitted { .. }));
    }
}
