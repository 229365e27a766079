//! `explain`: why a job waits, why it can never run, or where it runs, from the core's state.
//!
//! Pure and read-only: [`Scheduler::explain`] takes `&self`, computes the quota check at every
//! tree node on the job's path and the fit on every member cluster (with the estimator, on the
//! cluster as it is, or on an empty copy for jobs that can never run), and returns plain data.
//! No I/O, no clock, no change to the scheduler's state or decisions. Exact arithmetic: every
//! amount is a [`Quantity`] (i128 milli-units).

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};

use serde::Serialize;

use super::{JobId, JobState, Scheduler, Shape};
use crate::estimate::{self, PodGroup};
use crate::fleet::{Cluster, PlacementMode};
use crate::quantity::{Quantity, ResourceList};
use crate::quota::Strategy;
use crate::resources::{PODS, Res, ResourceTable};

mod text;
pub use text::fmt_placement;

/// Longest [`Explanation::summary`], in bytes (a status `reason` field).
pub const SUMMARY_MAX: usize = 200;

/// Why a job is where it is. Render it with `Display` (multi-line, for people) or
/// [`Explanation::summary`] (one line).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Explanation {
    /// `namespace/name`.
    pub job: String,
    /// The job's queue: its quota leaf's path (`root/research`), or its namespace without a tree.
    pub queue: String,
    pub priority: i32,
    /// The job's topology asks (`worker: required example.com/rack`), when it has any.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub topology: Vec<String>,
    pub status: Status,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "state")]
pub enum Status {
    Pending(Pending),
    Inadmissible(Inadmissible),
    Admitted(Admitted),
    Finished,
}

/// A queued job: its place in the queue, the quota check on its path and the fit per member.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Pending {
    /// What the last admission cycle said about it (`None` before its first cycle).
    pub reason: Option<String>,
    /// Pending jobs before it in its queue (higher priority, or same priority and earlier).
    pub ahead: usize,
    pub strategy: Strategy,
    /// StrictFIFO only: the head of the queue it waits behind.
    pub blocked_by: Option<HeadOfLine>,
    /// A8: the job of its queue, of higher priority, that may take it back and waits for room
    /// on a member; it holds this one.
    #[serde(rename = "heldBy", skip_serializing_if = "Option::is_none")]
    pub held_by: Option<HeadOfLine>,
    /// Leaf first, then up to the root; per node, the job's resources by name. `None` without
    /// a quota tree (nothing is limited).
    pub quota: Option<Vec<QuotaRow>>,
    /// Fair sharing on its path below the root, leaf first: each node's weight and share now
    /// (A7). `None` without a quota tree.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fair: Option<Vec<super::fair::FairRow>>,
    /// Every member cluster, in name order, as it is now.
    pub clusters: Vec<ClusterFit>,
}

/// The head of a StrictFIFO queue, which every job behind it waits for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HeadOfLine {
    /// `namespace/name`.
    pub job: String,
    /// Why the head itself waits (the scheduler's reason).
    pub reason: Option<String>,
}

/// The quota check of one resource at one tree node: `used + request <= max`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct QuotaRow {
    /// The node's path, `root/research`.
    pub node: String,
    pub resource: String,
    /// Charged to the node's subtree now (admitted jobs).
    pub used: Quantity,
    /// What this job is charged (all pods; `pods` and `kube-queue/max-jobs` included).
    pub request: Quantity,
    /// Guaranteed to the subtree (0 when the node names none).
    pub min: Quantity,
    /// `None`: not limited at this node.
    pub max: Option<Quantity>,
    /// `used + request <= max`.
    pub fits: bool,
    /// `used + request > min`: admitting the job would borrow above the node's guarantee.
    pub borrows: bool,
}

impl QuotaRow {
    pub fn total(&self) -> Quantity {
        self.used + self.request
    }
}

/// One member cluster for one job.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ClusterFit {
    pub cluster: String,
    pub reachable: bool,
    /// How the member is held to the plan: `gates` (per pod) or `pinned` (by node set; only
    /// robust plans are made there, so a job may fit it less often).
    pub placement: PlacementMode,
    /// Ruled out by the job's `muster.dev/clusters` / `muster.dev/cluster-selector` annotations.
    pub excluded: bool,
    /// Why the member cannot create the job (it does not serve its kind, lacks a PriorityClass
    /// its pods name); such a member is no candidate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    pub fit: Fit,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "result")]
pub enum Fit {
    /// Excluded, or unreachable (nothing is placed on an unreachable member).
    NotTried,
    /// The whole job fits; the estimator's plan, `{node: pods}`, and the narrowest topology
    /// domain its nodes share (`example.com/rack b1/r1`) on a member with levels.
    Fits {
        nodes: BTreeMap<String, u32>,
        #[serde(skip_serializing_if = "Option::is_none")]
        domain: Option<String>,
    },
    /// The estimator's reason, and each component on its own.
    NoFit {
        reason: String,
        components: Vec<ComponentFit>,
    },
}

/// One component (pod group) of a job on one cluster, on its own.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ComponentFit {
    /// `worker`, `master`, `launcher`, ...
    pub component: String,
    pub pods: u32,
    /// What one pod requests (without the implicit `pods: 1`).
    pub per_pod: ResourceList,
    /// Nodes its constraints rule out, counted by why (`untolerated taint x=y:NoSchedule`).
    pub excluded_nodes: BTreeMap<String, usize>,
    /// `None`: this component alone would fit.
    pub problem: Option<ComponentProblem>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind")]
pub enum ComponentProblem {
    /// The cluster has no nodes.
    NoNodes,
    /// Every node is ruled out by the component's tolerations, nodeSelector or affinity
    /// (see `excluded_nodes`).
    NoNodeAdmits,
    /// Not one pod fits on any admitting node: for each resource short on every node, one pod's
    /// need and the best node's free amount.
    Short { short: Vec<Short> },
    /// No single resource is short everywhere, but no node has all of one pod's requests free.
    NotTogether,
    /// Some pods fit, not all: how many the admitting nodes hold, and where.
    TooFew {
        room: u64,
        nodes: BTreeMap<String, u64>,
    },
}

/// One pod needs `need` of `resource` on one node; the most free on an admitting node is
/// `best_free`, on `node`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Short {
    pub resource: String,
    pub need: Quantity,
    pub best_free: Quantity,
    pub node: String,
}

/// A job that can never run as written.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Inadmissible {
    /// The scheduler's reason.
    pub reason: String,
    /// The job's request alone is above a max on its path.
    pub quota: Option<QuotaLimit>,
    /// Every member cluster as if it were empty (nothing admitted, no other pods).
    pub clusters: Vec<ClusterFit>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct QuotaLimit {
    pub node: String,
    pub resource: String,
    pub request: Quantity,
    pub max: Quantity,
}

/// An admitted (dispatched) job.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Admitted {
    pub cluster: String,
    /// How the member is held to the plan.
    pub placement: PlacementMode,
    /// The planned nodes, `{node: pods}`.
    pub nodes: BTreeMap<String, u32>,
    /// The narrowest topology domain the planned nodes share, on a member with levels.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// Why it waited before it was admitted, if it did.
    pub waited: Option<String>,
}

impl Scheduler {
    /// Why `job` is waiting, can never run, or where it runs. Pure: reads the state only.
    pub fn explain(&self, job: JobId) -> Explanation {
        let j = &self.jobs[job];
        let status = match &j.state {
            JobState::Pending => Status::Pending(self.explain_pending(job)),
            JobState::Inadmissible(r) => Status::Inadmissible(self.explain_inadmissible(job, r)),
            JobState::Admitted { cluster, placement } => {
                let c = &self.clusters[*cluster];
                Status::Admitted(Admitted {
                    cluster: c.name.clone(),
                    placement: c.placement,
                    nodes: placement.by_node(c),
                    domain: domain_of(c, placement),
                    waited: j.last_wait.clone(),
                })
            }
            JobState::Finished => Status::Finished,
        };
        Explanation {
            job: self.job_label(job),
            queue: self.queues.name(j.queue).to_string(),
            priority: j.priority,
            topology: topology_asks(&self.shapes[j.shape].groups),
            status,
        }
    }

    fn explain_pending(&self, job: JobId) -> Pending {
        let j = &self.jobs[job];
        let shape = &self.shapes[j.shape];
        // The queue's pending jobs are its classes' jobs: count those ordered before this one.
        let ahead = self
            .class_ids
            .iter()
            .filter(|((q, _), _)| *q == j.queue)
            .map(|(_, &c)| self.classes[c].jobs.range(..(j.order, job)).count())
            .sum();
        let strategy = self.queues.strategy(j.queue);
        let blocked_by = if strategy == Strategy::StrictFIFO {
            self.classes[j.class]
                .jobs
                .iter()
                .next()
                .map(|(_, h)| *h)
                .filter(|h| *h != job)
                .map(|h| HeadOfLine {
                    job: self.job_label(h),
                    reason: self.reason(h),
                })
        } else {
            None
        };
        let held_by = self.holder(job).map(|h| HeadOfLine {
            job: self.job_label(h),
            reason: self.reason(h),
        });
        Pending {
            reason: self.reason(job),
            ahead,
            strategy,
            blocked_by,
            held_by,
            quota: self.quota_rows(job),
            fair: self.fair_rows(job),
            clusters: self.cluster_fits(shape, false),
        }
    }

    fn explain_inadmissible(&self, job: JobId, reason: &str) -> Inadmissible {
        let j = &self.jobs[job];
        let shape = &self.shapes[j.shape];
        let quota = match (&self.quota, self.queues.leaf(j.queue)) {
            (Some(q), Some(leaf)) => q.never_fits(leaf, &shape.quota_demand).map(|s| QuotaLimit {
                node: q.tree.nodes[s.node].path.clone(),
                resource: self.table.name(s.res).to_string(),
                request: Quantity::from_milli(s.request),
                max: Quantity::from_milli(s.max),
            }),
            _ => None,
        };
        Inadmissible {
            reason: reason.to_string(),
            quota,
            clusters: self.cluster_fits(shape, true),
        }
    }

    fn quota_rows(&self, job: JobId) -> Option<Vec<QuotaRow>> {
        let q = self.quota.as_ref()?;
        let j = &self.jobs[job];
        let leaf = self.queues.leaf(j.queue)?;
        let mut demand: Vec<(Res, i128)> = self.shapes[j.shape].quota_demand.iter().collect();
        demand.sort_by(|a, b| self.table.name(a.0).cmp(self.table.name(b.0)));
        let mut rows = Vec::new();
        for n in q.tree.path_up(leaf) {
            for &(r, x) in &demand {
                let used = q.used_of(n, r);
                let total = used.saturating_add(x);
                let max = q.max_of(n, r);
                let min = q.min_of(n, r);
                rows.push(QuotaRow {
                    node: q.tree.nodes[n].path.clone(),
                    resource: self.table.name(r).to_string(),
                    used: Quantity::from_milli(used),
                    request: Quantity::from_milli(x),
                    min: Quantity::from_milli(min),
                    max: max.map(Quantity::from_milli),
                    fits: max.is_none_or(|m| total <= m),
                    borrows: total > min,
                });
            }
        }
        Some(rows)
    }

    /// Every cluster in name order; `empty`: as if nothing ran there (admissibility).
    fn cluster_fits(&self, shape: &Shape, empty: bool) -> Vec<ClusterFit> {
        let mut order: Vec<usize> = (0..self.clusters.len()).collect();
        order.sort_by(|a, b| self.clusters[*a].name.cmp(&self.clusters[*b].name));
        order
            .into_iter()
            .map(|ci| cluster_fit(&self.clusters[ci], shape, empty, &self.table))
            .collect()
    }
}

fn cluster_fit(c: &Cluster, shape: &Shape, empty: bool, table: &ResourceTable) -> ClusterFit {
    let excluded = !shape.candidates.allows(&c.name, &c.labels);
    let refused = c.serves.refuses(&c.name, &shape.needs);
    let mut out = ClusterFit {
        cluster: c.name.clone(),
        reachable: c.reachable,
        placement: c.placement,
        excluded,
        refused: refused.clone(),
        fit: Fit::NotTried,
    };
    // Admissibility ignores reachability (a member that does not answer now may later).
    if excluded || refused.is_some() || (!empty && !c.reachable) {
        return out;
    }
    let emptied;
    let c = if empty {
        let mut e = c.clone();
        for n in &mut e.nodes {
            n.reserved.clear();
            n.external.clear();
        }
        emptied = e;
        &emptied
    } else {
        c
    };
    let eligible = estimate::eligible(c, &shape.groups);
    out.fit = match estimate::place(c, &shape.groups, &eligible, table) {
        Ok(p) => Fit::Fits {
            nodes: p.by_node(c),
            domain: domain_of(c, &p),
        },
        Err(reason) => Fit::NoFit {
            reason,
            components: shape
                .groups
                .iter()
                .zip(&eligible)
                .filter(|(g, _)| g.pods > 0)
                .map(|(g, e)| component_fit(c, g, e, table))
                .collect(),
        },
    };
    out
}

/// How many pods of `g` fit on node `n` now (as the estimator counts them).
/// `example.com/rack b1/r1`: the narrowest domain all of the plan's nodes share.
fn domain_of(c: &Cluster, p: &estimate::Placement) -> Option<String> {
    let mut nodes: Vec<usize> = p.groups.iter().flatten().map(|(n, _)| *n).collect();
    nodes.sort_unstable();
    nodes.dedup();
    if nodes.is_empty() {
        return None;
    }
    let (li, d) = c.levels.tightest(&nodes)?;
    Some(format!("{} {}", c.levels.levels[li], d.name()))
}

/// Each topology ask of the job's components, once for a whole-job ask.
fn topology_asks(groups: &[PodGroup]) -> Vec<String> {
    if let Some(a) = groups
        .iter()
        .filter_map(|g| g.topology.as_ref())
        .find(|a| a.whole_job)
    {
        return vec![a.describe()];
    }
    groups
        .iter()
        .filter_map(|g| {
            g.topology
                .as_ref()
                .map(|a| format!("{}: {}", g.name, a.describe()))
        })
        .collect()
}

fn node_cap(c: &Cluster, n: usize, g: &PodGroup) -> i128 {
    let mut cap = i128::MAX;
    for (r, x) in g.demand.iter() {
        if x <= 0 {
            continue;
        }
        let f = c.nodes[n].free(r);
        if f < x {
            return 0;
        }
        cap = cap.min(f / x);
    }
    if cap == i128::MAX { 1 << 40 } else { cap }
}

fn component_fit(
    c: &Cluster,
    g: &PodGroup,
    eligible: &[usize],
    table: &ResourceTable,
) -> ComponentFit {
    let mut excluded_nodes: BTreeMap<String, usize> = BTreeMap::new();
    for n in &c.nodes {
        if let Err(m) = n.admits(&g.constraints) {
            *excluded_nodes.entry(m.to_string()).or_insert(0) += 1;
        }
    }
    let per_pod: ResourceList = g
        .demand
        .iter()
        .filter(|(r, _)| *r != PODS)
        .map(|(r, x)| (table.name(r).to_string(), Quantity::from_milli(x)))
        .collect();
    let problem = if c.nodes.is_empty() {
        Some(ComponentProblem::NoNodes)
    } else if eligible.is_empty() {
        Some(ComponentProblem::NoNodeAdmits)
    } else {
        let caps: Vec<(usize, i128)> = eligible.iter().map(|&n| (n, node_cap(c, n, g))).collect();
        let room = caps.iter().fold(0i128, |a, (_, k)| a.saturating_add(*k));
        if room >= i128::from(g.pods) {
            None
        } else if room == 0 {
            let mut short = Vec::new();
            for (r, x) in g.demand.iter() {
                if x <= 0 {
                    continue;
                }
                // The best admitting node for this resource (first in node order on ties).
                let mut best: Option<(i128, usize)> = None;
                for &n in eligible {
                    let f = c.nodes[n].free(r);
                    if best.is_none_or(|(b, _)| f > b) {
                        best = Some((f, n));
                    }
                }
                if let Some((f, n)) = best
                    && f < x
                {
                    short.push(Short {
                        resource: table.name(r).to_string(),
                        need: Quantity::from_milli(x),
                        best_free: Quantity::from_milli(f.max(0)),
                        node: c.nodes[n].name.clone(),
                    });
                }
            }
            short.sort_by(|a, b| a.resource.cmp(&b.resource));
            Some(if short.is_empty() {
                ComponentProblem::NotTogether
            } else {
                ComponentProblem::Short { short }
            })
        } else {
            Some(ComponentProblem::TooFew {
                room: u64::try_from(room).unwrap_or(u64::MAX),
                nodes: caps
                    .iter()
                    .filter(|(_, k)| *k > 0)
                    .map(|(n, k)| {
                        (
                            c.nodes[*n].name.clone(),
                            u64::try_from(*k).unwrap_or(u64::MAX),
                        )
                    })
                    .collect(),
            })
        }
    };
    ComponentFit {
        component: g.name.clone(),
        pods: g.pods,
        per_pod,
        excluded_nodes,
        problem,
    }
}

// ----- rendering ------------------------------------------------------------------------------

#[cfg(test)]
#[path = "explain_tests.rs"]
mod tests;
