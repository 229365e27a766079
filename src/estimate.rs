//! Per-node gang estimation: do ALL pods of ALL components of a job fit in one cluster at once?
//!
//! Owns placement planning against a [`Cluster`]'s real per-node free capacity (allocatable minus
//! external pods minus reservations): a best-fit greedy pass, then an exhaustive search with a
//! step budget when the greedy pass fails, and a precise reason when nothing fits. For members
//! that pin pods by node set only, the plan must also be robust (see [`robust`], in
//! `estimate/robust.rs`). Never decides from cluster totals; never mutates the cluster (the
//! caller reserves the returned plan).

mod robust;
mod topology;

pub use robust::robust;

use std::cmp::Reverse;
use std::collections::BTreeMap;

use crate::fleet::{Cluster, Constraints, Mismatch, PlacementMode, Summary};
use crate::quantity::Quantity;
use crate::resources::{Demand, PODS, Res, ResourceTable, at};
use crate::topology::TopologyAsk;

/// One component of a job, ready for placement: `pods` identical pods of `demand` each
/// (`demand` includes `pods: 1`).
#[derive(Clone, Debug, PartialEq)]
pub struct PodGroup {
    pub name: String,
    pub pods: u32,
    pub demand: Demand,
    pub constraints: Constraints,
    /// One domain of a topology level asked for its pods (or, `whole_job`, for every group's).
    pub topology: Option<TopologyAsk>,
}

/// Where each component's pods go: per component, `(node index, pod count)`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Placement {
    pub groups: Vec<Vec<(usize, u32)>>,
}

impl Placement {
    /// `{node name: pods}` over all components.
    pub fn by_node(&self, cluster: &Cluster) -> BTreeMap<String, u32> {
        let mut m = BTreeMap::new();
        for g in &self.groups {
            for (n, c) in g {
                if let Some(node) = cluster.nodes.get(*n) {
                    *m.entry(node.name.clone()).or_insert(0) += *c;
                }
            }
        }
        m
    }
}

/// Steps the exhaustive search may take before giving up (bounded work per decision).
pub const SEARCH_BUDGET: u64 = 50_000;

/// Nodes admitting each group (constraints only, not capacity).
pub fn eligible(cluster: &Cluster, groups: &[PodGroup]) -> Vec<Vec<usize>> {
    groups
        .iter()
        .map(|g| {
            (0..cluster.nodes.len())
                .filter(|i| cluster.nodes[*i].admits(&g.constraints).is_ok())
                .collect()
        })
        .collect()
}

/// Free capacity of one node as seen by this placement (cluster free minus what the plan took).
struct Scratch<'a> {
    cluster: &'a Cluster,
    taken: Vec<Vec<i128>>,
}

impl Scratch<'_> {
    fn new(cluster: &Cluster) -> Scratch<'_> {
        Scratch {
            cluster,
            taken: Vec::new(),
        }
    }

    fn free(&self, n: usize, r: Res) -> i128 {
        let taken = self.taken.get(n).map_or(0, |t| at(t, r));
        self.cluster.nodes[n].free(r) - taken
    }

    /// How many pods of `d` fit on node `n` now.
    fn cap(&self, n: usize, d: &Demand) -> i128 {
        let mut c = i128::MAX;
        for (r, x) in d.iter() {
            if x <= 0 {
                continue;
            }
            let f = self.free(n, r);
            if f < x {
                return 0;
            }
            // 64-bit division when both fit (the common case), 128-bit otherwise.
            let q = match (u64::try_from(f), u64::try_from(x)) {
                (Ok(f), Ok(x)) => i128::from(f / x),
                _ => f / x,
            };
            c = c.min(q);
        }
        if c == i128::MAX { 1 << 40 } else { c }
    }

    fn take(&mut self, n: usize, d: &Demand, k: i128) {
        if self.taken.len() <= n {
            self.taken.resize(n + 1, Vec::new());
        }
        crate::resources::add_demand(&mut self.taken[n], d, k);
    }
}

/// Plans every pod of every group onto `cluster`'s nodes, or explains why it cannot.
/// `eligible[i]` are the nodes admitting group `i` (see [`eligible`]). On a member in
/// [`PlacementMode::Pinned`] the plan is [`robust`]: kept to whatever node kube-scheduler picks
/// within each component's node set.
pub fn place(
    cluster: &Cluster,
    groups: &[PodGroup],
    eligible: &[Vec<usize>],
    table: &ResourceTable,
) -> Result<Placement, String> {
    place_or_why(cluster, groups, eligible, table).map_err(|no| no.reason)
}

/// Why [`place`] found no plan.
#[derive(Clone, Debug, PartialEq)]
pub struct NoFit {
    pub reason: String,
    /// A necessary condition failed: some group's pods do not fit the free nodes even one by one
    /// (or no node admits them), or the job exceeds the cluster's [`beyond_bounds`]. Such a
    /// failure stays a failure while free capacity on the cluster's nodes only shrinks (its
    /// reason may change); a failure to place all groups together may not.
    pub capacity: bool,
}

/// [`place`], saying which kind of failure it was. A job that asks for topology is placed by
/// `estimate/topology.rs` (domain by domain, each estimate the one below); any other goes
/// straight to the per-node estimate.
pub fn place_or_why(
    cluster: &Cluster,
    groups: &[PodGroup],
    eligible: &[Vec<usize>],
    table: &ResourceTable,
) -> Result<Placement, NoFit> {
    if groups.iter().any(|g| g.topology.is_some()) {
        return topology::place(cluster, groups, eligible, table);
    }
    place_nodes(cluster, groups, eligible, table)
}

/// The per-node estimate: every pod of every group on the nodes of `eligible`.
fn place_nodes(
    cluster: &Cluster,
    groups: &[PodGroup],
    eligible: &[Vec<usize>],
    table: &ResourceTable,
) -> Result<Placement, NoFit> {
    let ext = table.extended();
    // Necessary conditions per group, with a precise reason when they fail.
    let fresh = Scratch::new(cluster);
    for (gi, g) in groups.iter().enumerate() {
        if g.pods == 0 {
            continue;
        }
        necessary(&fresh, g, &eligible[gi], table).map_err(|reason| NoFit {
            reason,
            capacity: true,
        })?;
    }
    let together = |reason| NoFit {
        reason,
        capacity: false,
    };
    let order = group_order(cluster, groups);
    let Some(plan) = greedy(cluster, groups, eligible, &order, ext, false)
        .or_else(|| search(cluster, groups, eligible, &order, false))
    else {
        return Err(together(format!(
            "{} fit one by one but not all together on the free nodes",
            group_names(groups)
        )));
    };
    match cluster.placement {
        PlacementMode::Gates => Ok(plan),
        PlacementMode::Pinned => {
            robust::place_pinned(cluster, groups, eligible, &order, ext, plan).map_err(together)
        }
    }
}

/// `master and worker`: the components with pods, as reasons name them.
fn group_names(groups: &[PodGroup]) -> String {
    let names: Vec<&str> = groups
        .iter()
        .filter(|g| g.pods > 0)
        .map(|g| g.name.as_str())
        .collect();
    names.join(" and ")
}

fn necessary(
    s: &Scratch<'_>,
    g: &PodGroup,
    eligible: &[usize],
    table: &ResourceTable,
) -> Result<(), String> {
    let cluster = s.cluster;
    if eligible.is_empty() {
        let mut why: BTreeMap<String, usize> = BTreeMap::new();
        for n in &cluster.nodes {
            if let Err(m) = n.admits(&g.constraints) {
                let key = match m {
                    Mismatch::Taint(t) => format!("untolerated taint {t}"),
                    other => other.to_string(),
                };
                *why.entry(key).or_insert(0) += 1;
            }
        }
        let parts: Vec<String> = why
            .iter()
            .map(|(k, v)| format!("{v} node{}: {k}", if *v == 1 { "" } else { "s" }))
            .collect();
        if cluster.nodes.is_empty() {
            return Err("has no nodes".into());
        }
        return Err(format!("no node admits {} ({})", g.name, parts.join("; ")));
    }
    let mut total = 0i128;
    for &n in eligible {
        total += s.cap(n, &g.demand);
        if total >= i128::from(g.pods) {
            return Ok(());
        }
    }
    if total == 0 {
        // Not one pod fits: name the resource most short on every node (ties: lowest id).
        let worst = g
            .demand
            .iter()
            .filter_map(|(r, x)| {
                let best = eligible
                    .iter()
                    .map(|&n| s.free(n, r))
                    .max()
                    .unwrap_or(0)
                    .max(0);
                (best < x).then(|| (Reverse((x - best) * 1_000_000 / x.max(1)), r, x, best))
            })
            .min();
        return Err(match worst {
            Some((_, r, x, best)) => one_node_short(g, table, r, x, best),
            None => format!(
                "{} needs {} together on one node; no node has all of it free",
                g.name,
                per_pod(g, table)
            ),
        });
    }
    Err(format!(
        "{} needs {} pods ({} each); the free nodes hold only {}",
        g.name,
        g.pods,
        per_pod(g, table),
        total
    ))
}

/// `worker needs nvidia.com/gpu 3 on one node; the most free on any node is 2`.
fn one_node_short(g: &PodGroup, table: &ResourceTable, r: Res, need: i128, best: i128) -> String {
    if r == PODS {
        return format!(
            "{} needs room for 1 more pod on one node; every admitting node is at its pods limit",
            g.name
        );
    }
    format!(
        "{} needs {} on one node; the most free on any node is {}",
        g.name,
        table.fmt_amount(r, need),
        Quantity::from_milli(best.max(0))
    )
}

/// A group's per-pod request, without the implicit `pods: 1`.
fn per_pod(g: &PodGroup, table: &ResourceTable) -> String {
    let parts: Vec<String> = g
        .demand
        .iter()
        .filter(|(r, _)| *r != PODS)
        .map(|(r, x)| table.fmt_amount(r, x))
        .collect();
    parts.join(", ")
}

/// Quick rejection from a cluster's [`Summary`], before any per-node work: a pod asking more
/// than the largest free amount on any node, or a job (`total`) asking more than the cluster has
/// free. Node constraints change which nodes count, so with constraints only the pod limit is
/// checked here and [`place`] explains the rest.
pub fn beyond_bounds(
    summary: &Summary,
    groups: &[PodGroup],
    total: &Demand,
    table: &ResourceTable,
) -> Option<String> {
    let unconstrained = groups.iter().all(|g| g.constraints.is_empty());
    for g in groups.iter().filter(|g| g.pods > 0) {
        for (r, x) in g.demand.iter() {
            let best = at(&summary.max_free, r);
            if x > best && (r == PODS || unconstrained) {
                return Some(one_node_short(g, table, r, x, best));
            }
        }
    }
    if !unconstrained {
        return None;
    }
    total
        .iter()
        .find(|(r, x)| *r != crate::resources::MAX_JOBS && *x > at(&summary.total_free, *r))
        .map(|(r, x)| {
            format!(
                "needs {} in all; {} free on schedulable nodes",
                table.fmt_amount(r, x),
                Quantity::from_milli(at(&summary.total_free, r).max(0))
            )
        })
}

/// Biggest groups first (dominant share of the cluster's allocatable), so scarce devices are
/// placed before cpu-only helpers can take their nodes.
fn group_order(cluster: &Cluster, groups: &[PodGroup]) -> Vec<usize> {
    // One group has one order: the cluster's totals are not read.
    if groups.len() <= 1 {
        return (0..groups.len()).collect();
    }
    let mut totals: Vec<i128> = Vec::new();
    for n in &cluster.nodes {
        for (i, v) in n.alloc.iter().enumerate() {
            if totals.len() <= i {
                totals.resize(i + 1, 0);
            }
            totals[i] = totals[i].saturating_add(*v);
        }
    }
    let share = |g: &PodGroup| -> i128 {
        g.demand
            .iter()
            .filter(|(r, _)| *r != PODS)
            .map(|(r, x)| x.saturating_mul(1_000_000) / at(&totals, r).max(1))
            .max()
            .unwrap_or(0)
    };
    let mut order: Vec<usize> = (0..groups.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(share(&groups[i])), i));
    order
}

/// Best-fit decreasing: for each group, the node that holds all remaining pods most tightly,
/// else the node that holds the most; avoiding nodes whose free devices the group does not use.
/// `exclusive`: a node hosts pods of at most one group (nodes another group uses are skipped).
fn greedy(
    cluster: &Cluster,
    groups: &[PodGroup],
    eligible: &[Vec<usize>],
    order: &[usize],
    ext: &[bool],
    exclusive: bool,
) -> Option<Placement> {
    let mut s = Scratch::new(cluster);
    // Per node, the group using it (kept only when `exclusive`).
    let mut owner: Option<Vec<Option<usize>>> = exclusive.then(|| vec![None; cluster.nodes.len()]);
    let mut plan = Placement {
        groups: vec![Vec::new(); groups.len()],
    };
    for &gi in order {
        let g = &groups[gi];
        let mut remaining = i128::from(g.pods);
        let unused_ext: Vec<Res> = ext
            .iter()
            .enumerate()
            .filter(|(i, e)| **e && g.demand.get(Res(*i as u16)) == 0)
            .map(|(i, _)| Res(i as u16))
            .collect();
        while remaining > 0 {
            let mut best: Option<((u8, usize, i128), usize, i128)> = None;
            for &n in &eligible[gi] {
                if owner
                    .as_ref()
                    .is_some_and(|o| o[n].is_some_and(|g| g != gi))
                {
                    continue;
                }
                let c = s.cap(n, &g.demand);
                if c == 0 {
                    continue;
                }
                let waste = unused_ext.iter().filter(|r| s.free(n, **r) > 0).count();
                let key = if c >= remaining {
                    (0u8, waste, c)
                } else {
                    (1u8, waste, -c)
                };
                if best.as_ref().is_none_or(|(bk, _, _)| key < *bk) {
                    best = Some((key, n, c));
                    // No key is below this one (it holds exactly what remains and wastes no
                    // device), and a later node replaces the best only when strictly below.
                    if key == (0, 0, remaining) {
                        break;
                    }
                }
            }
            let (_, n, c) = best?;
            let k = c.min(remaining);
            s.take(n, &g.demand, k);
            if let Some(o) = &mut owner {
                o[n] = Some(gi);
            }
            plan.groups[gi].push((n, u32::try_from(k).ok()?));
            remaining -= k;
        }
        plan.groups[gi].sort_unstable();
    }
    Some(plan)
}

/// Exhaustive search over pod counts per node, bounded by [`SEARCH_BUDGET`] steps. Complete
/// for small jobs and fleets; for big ones, a failure within the budget is reported as no fit.
/// `exclusive`: a node hosts pods of at most one group.
fn search(
    cluster: &Cluster,
    groups: &[PodGroup],
    eligible: &[Vec<usize>],
    order: &[usize],
    exclusive: bool,
) -> Option<Placement> {
    struct St<'a> {
        s: Scratch<'a>,
        groups: &'a [PodGroup],
        eligible: &'a [Vec<usize>],
        order: &'a [usize],
        plan: Placement,
        steps: u64,
        /// Per node, the group using it (kept only when `exclusive`).
        owner: Option<Vec<Option<usize>>>,
    }
    impl St<'_> {
        /// Pods of group `gi` that node `n` can take now.
        fn cap(&self, n: usize, gi: usize) -> i128 {
            match &self.owner {
                Some(o) if o[n].is_some_and(|g| g != gi) => 0,
                _ => self.s.cap(n, &self.groups[gi].demand),
            }
        }
    }
    fn rec(st: &mut St<'_>, oi: usize, ni: usize, remaining: i128) -> bool {
        st.steps += 1;
        if st.steps > SEARCH_BUDGET {
            return false;
        }
        if oi == st.order.len() {
            return true;
        }
        let gi = st.order[oi];
        let g = &st.groups[gi];
        if remaining == 0 {
            let next = st
                .order
                .get(oi + 1)
                .map_or(0, |&g2| i128::from(st.groups[g2].pods));
            return rec(st, oi + 1, 0, next);
        }
        let nodes = &st.eligible[gi];
        if ni >= nodes.len() {
            return false;
        }
        // Prune: what the remaining nodes can hold of this group.
        let room: i128 = nodes[ni..].iter().map(|&n| st.cap(n, gi)).sum();
        if room < remaining {
            return false;
        }
        let n = nodes[ni];
        let c = st.cap(n, gi).min(remaining);
        let mut k = c;
        loop {
            let mut was = None;
            if k > 0 {
                st.s.take(n, &g.demand, k);
                st.plan.groups[gi].push((n, k as u32));
                if let Some(o) = &mut st.owner {
                    was = o[n].replace(gi);
                }
            }
            if rec(st, oi, ni + 1, remaining - k) {
                return true;
            }
            if k > 0 {
                st.s.take(n, &g.demand, -k);
                st.plan.groups[gi].pop();
                if let Some(o) = &mut st.owner {
                    o[n] = was;
                }
            }
            if k == 0 || st.steps > SEARCH_BUDGET {
                return false;
            }
            k -= 1;
        }
    }
    let first = order.first().map_or(0, |&g| i128::from(groups[g].pods));
    let mut st = St {
        s: Scratch::new(cluster),
        groups,
        eligible,
        order,
        plan: Placement {
            groups: vec![Vec::new(); groups.len()],
        },
        steps: 0,
        owner: exclusive.then(|| vec![None; cluster.nodes.len()]),
    };
    if rec(&mut st, 0, 0, first) {
        for g in &mut st.plan.groups {
            g.sort_unstable();
        }
        Some(st.plan)
    } else {
        None
    }
}
