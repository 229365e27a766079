//! A cluster's summary: upper bounds over its nodes that take pods (the most free on one node,
//! the total free, the total allocatable), used to reject a job without an estimate. Owns how
//! the summary is computed from the nodes and how a reservation on one node keeps it current
//! without reading every node again; [`compute`] is the reference it is held to.

use std::collections::BTreeMap;

use super::{Cluster, Node};
use crate::resources::{Demand, Res, at};

/// Upper bounds over a cluster's nodes that admit pods at all, for quick rejection.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Largest free amount on any one node, per resource (at least 0).
    pub max_free: Vec<i128>,
    /// Total free, per resource.
    pub total_free: Vec<i128>,
    pub total_alloc: Vec<i128>,
    /// Per resource, how many nodes that take pods have each amount free: the most free on one
    /// node follows a reservation without reading every node.
    frees: Vec<BTreeMap<i128, u32>>,
}

/// The summary read from every node.
pub fn compute(c: &Cluster) -> Summary {
    let len = c.res_len();
    let mut s = Summary {
        max_free: vec![0; len],
        total_free: vec![0; len],
        total_alloc: vec![0; len],
        frees: vec![BTreeMap::new(); len],
    };
    for n in &c.nodes {
        let usable = n.takes_pods();
        for i in 0..len {
            let r = Res(i as u16);
            // Saturating: a node without a pod limit counts NO_POD_LIMIT pods, and a few of
            // them would overflow a plain sum.
            s.total_alloc[i] = s.total_alloc[i].saturating_add(at(&n.alloc, r));
            if usable {
                let free = n.free(r);
                s.total_free[i] = s.total_free[i].saturating_add(free.max(0));
                s.max_free[i] = s.max_free[i].max(free);
                *s.frees[i].entry(free).or_default() += 1;
            }
        }
    }
    s
}

impl Summary {
    /// Brings the summary up to date after node `node`'s reservations changed by `d` (its free
    /// amounts were `before`, per resource of `d`, in `d`'s order). False when it cannot be
    /// kept without reading every node (a total reached saturation, a resource the summary
    /// does not span); it must then be computed again.
    pub(super) fn node_changed(&mut self, node: &Node, d: &Demand, before: &[i128]) -> bool {
        if !node.takes_pods() {
            return true;
        }
        for ((r, _), &old) in d.iter().zip(before) {
            let i = usize::from(r.0);
            if i >= self.max_free.len() {
                return false;
            }
            let new = node.free(r);
            let total = self.total_free[i];
            if total == i128::MAX {
                return false;
            }
            match total
                .checked_sub(old.max(0))
                .and_then(|t| t.checked_add(new.max(0)))
            {
                Some(t) if t < i128::MAX => self.total_free[i] = t,
                _ => return false,
            }
            let frees = &mut self.frees[i];
            match frees.get_mut(&old) {
                Some(k) if *k > 1 => *k -= 1,
                Some(_) => {
                    frees.remove(&old);
                }
                None => return false,
            }
            *frees.entry(new).or_default() += 1;
            self.max_free[i] = frees.last_key_value().map_or(0, |(&m, _)| m.max(0));
        }
        true
    }
}

impl Cluster {
    /// Changes node `n`'s reservations by `times` × `d` (a node the cluster does not have is
    /// skipped). A current summary is kept current. A change that stays is followed by
    /// [`Cluster::bump`]; a reclaim trial's, undone before the trial ends, is not.
    pub fn reserve(&mut self, n: usize, d: &Demand, times: i128) {
        let Some(node) = self.nodes.get_mut(n) else {
            return;
        };
        let current = self.summary_version == self.version;
        let before: Vec<i128> = if current {
            d.iter().map(|(r, _)| node.free(r)).collect()
        } else {
            Vec::new()
        };
        crate::resources::add_demand(&mut node.reserved, d, times);
        if current && !self.summary.node_changed(node, d, &before) {
            self.summary_version = 0;
        }
    }

    /// Sets what pods muster does not manage use on node `n`; the summary is read again.
    pub fn set_external(&mut self, n: usize, used: Vec<i128>) {
        if let Some(node) = self.nodes.get_mut(n) {
            node.external = used;
            self.summary_version = 0;
        }
    }

    /// Moves the cluster to `version`. A summary current before stays current: every change
    /// of a node's amounts since went through [`Cluster::reserve`] (which keeps it) or
    /// [`Cluster::set_external`] (which drops it).
    pub fn bump(&mut self, version: u64) {
        let current = self.summary_version == self.version;
        self.version = version;
        if current {
            self.summary_version = version;
            debug_assert_eq!(
                self.summary,
                compute(self),
                "summary kept through reservations"
            );
        }
    }

    /// The bounds as last computed by [`Cluster::summary`] (call that first).
    pub fn cached_summary(&self) -> &Summary {
        &self.summary
    }

    /// Cached bounds, recomputed when the cluster changed in another way than a reservation.
    pub fn summary(&mut self) -> &Summary {
        if self.summary_version != self.version {
            self.summary = compute(self);
            self.summary_version = self.version;
        }
        &self.summary
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::fleet::{ClusterInfo, NodeInfo};
    use crate::quantity::{Quantity, ResourceList};
    use crate::resources::ResourceTable;

    /// Nodes of 0–8 GPUs and 8–64 cpus; every third is cordoned (takes no pods), and every
    /// other one reports no pod limit (from 11 nodes on, four of them take pods and the
    /// summary's `pods` total saturates).
    fn cluster(shapes: &[(i64, i64)], t: &mut ResourceTable) -> Cluster {
        let nodes = shapes
            .iter()
            .enumerate()
            .map(|(i, &(cpu, gpu))| {
                let mut allocatable = ResourceList::new();
                allocatable.set("cpu", Quantity::from_units(cpu));
                allocatable.set("nvidia.com/gpu", Quantity::from_units(gpu));
                if i % 2 == 1 {
                    allocatable.set("pods", Quantity::from_units(110));
                }
                NodeInfo {
                    name: format!("n{i}"),
                    allocatable,
                    unschedulable: i % 3 == 2,
                    ready: true,
                    ..Default::default()
                }
            })
            .collect();
        let info = ClusterInfo {
            name: "m".into(),
            nodes,
            ..Default::default()
        };
        Cluster::new(&info, t, 1)
    }

    /// A saturated total is not kept by difference (it would no longer be exact): the
    /// summary is read again, and agrees with a full read.
    #[test]
    fn a_saturated_total_is_read_again() {
        let mut t = ResourceTable::default();
        let mut c = cluster(&[(64, 8); 12], &mut t);
        let (cpu, pods) = (t.intern("cpu"), t.intern("pods"));
        assert_eq!(c.summary().total_free[usize::from(pods.0)], i128::MAX);
        let mut d = vec![(cpu, 1000), (pods, 1000)];
        d.sort();
        c.reserve(1, &Demand(d), 1);
        c.bump(2);
        let kept = c.summary().clone();
        assert_eq!(kept, compute(&c));
        assert_eq!(kept.total_free[usize::from(pods.0)], i128::MAX);
        assert_eq!(kept.max_free[usize::from(cpu.0)], 64_000);
    }

    proptest! {
        /// The summary kept through reservations (taken, given back, over-committed) and a
        /// change of external usage is the one read from every node, after every change.
        #[test]
        fn kept_through_reservations_as_computed(
            shapes in prop::collection::vec((8i64..=64, 0i64..=8), 1..14),
            steps in prop::collection::vec((0usize..14, 0i64..=16, 0i64..=4, -2i128..=3, 0u8..10), 1..60),
        ) {
            let mut t = ResourceTable::default();
            let mut c = cluster(&shapes, &mut t);
            let (cpu, gpu, pods) = (t.intern("cpu"), t.intern("nvidia.com/gpu"), t.intern("pods"));
            let mut version = 1;
            c.summary();
            for (n, cpus, gpus, times, op) in steps {
                let n = n % c.nodes.len();
                if op == 0 {
                    let mut used = vec![0; c.res_len()];
                    crate::resources::set(&mut used, cpu, i128::from(cpus) * 1000);
                    c.set_external(n, used);
                } else {
                    let mut d = vec![(cpu, i128::from(cpus) * 1000), (pods, 1000)];
                    if gpus > 0 {
                        d.push((gpu, i128::from(gpus) * 1000));
                    }
                    d.sort();
                    c.reserve(n, &Demand(d), times);
                }
                version += 1;
                c.bump(version);
                let kept = c.summary().clone();
                prop_assert_eq!(kept, compute(&c));
            }
        }
    }
}
