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

fn plural(n: u64, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

/// `c: 3 pods, b-0: 1 pod`.
fn fmt_nodes<V: Copy + Into<u64>>(nodes: &BTreeMap<String, V>) -> String {
    let parts: Vec<String> = nodes
        .iter()
        .map(|(n, k)| format!("{n}: {}", plural((*k).into(), "pod", "pods")))
        .collect();
    parts.join(", ")
}

fn fmt_list(l: &ResourceList) -> String {
    let parts: Vec<String> = l.iter().map(|(r, q)| format!("{r} {q}")).collect();
    parts.join(", ")
}

fn fmt_excluded(ex: &BTreeMap<String, usize>) -> String {
    let parts: Vec<String> = ex
        .iter()
        .map(|(why, k)| format!("{}: {why}", plural(*k as u64, "node", "nodes")))
        .collect();
    parts.join("; ")
}

impl ComponentFit {
    /// One line about this component, e.g. `worker: each pod needs nvidia.com/gpu 3 on one
    /// node; the most free on any node is 2 (node a)`; `None` when it fits on its own.
    pub fn describe(&self) -> Option<String> {
        let p = self.problem.as_ref()?;
        let name = &self.component;
        let mut s = match p {
            ComponentProblem::NoNodes => "the cluster has no nodes".to_string(),
            ComponentProblem::NoNodeAdmits => format!(
                "{name}: no node admits its pods ({})",
                fmt_excluded(&self.excluded_nodes)
            ),
            ComponentProblem::Short { short } => {
                if short.len() == 1 && short[0].resource == "pods" {
                    format!("{name}: every node that admits it is at its pods limit")
                } else {
                    let need: Vec<String> = short
                        .iter()
                        .map(|s| format!("{} {}", s.resource, s.need))
                        .collect();
                    let best: Vec<String> = if short.len() == 1 {
                        vec![format!("{} (node {})", short[0].best_free, short[0].node)]
                    } else {
                        short
                            .iter()
                            .map(|s| format!("{} {} (node {})", s.resource, s.best_free, s.node))
                            .collect()
                    };
                    format!(
                        "{name}: each pod needs {} on one node; the most free on any node is {}",
                        need.join(" and "),
                        best.join(", ")
                    )
                }
            }
            ComponentProblem::NotTogether => format!(
                "{name}: each pod needs {} together on one node; no node has all of it free",
                fmt_list(&self.per_pod)
            ),
            ComponentProblem::TooFew { room, nodes } => {
                let mut shown: BTreeMap<String, u64> = BTreeMap::new();
                for (n, k) in nodes.iter().take(5) {
                    shown.insert(n.clone(), *k);
                }
                let more = if nodes.len() > 5 {
                    format!(", and {} more nodes", nodes.len() - 5)
                } else {
                    String::new()
                };
                format!(
                    "{name}: needs {} ({} each); the free nodes hold only {room} ({}{more})",
                    plural(u64::from(self.pods), "pod", "pods"),
                    fmt_list(&self.per_pod),
                    fmt_nodes(&shown)
                )
            }
        };
        if !matches!(p, ComponentProblem::NoNodeAdmits) && !self.excluded_nodes.is_empty() {
            let _ = write!(s, " [not counting {}]", fmt_excluded(&self.excluded_nodes));
        }
        Some(s)
    }
}

/// `per pod (scheduling gates)` or `pinned by node set (robust plans only)`.
pub fn fmt_placement(mode: PlacementMode) -> &'static str {
    match mode {
        PlacementMode::Gates => "per pod (scheduling gates)",
        PlacementMode::Pinned => "pinned by node set (robust plans only)",
    }
}

/// A member's line in the text, and below it how the member is held to the plan.
fn write_member(f: &mut fmt::Formatter<'_>, c: &ClusterFit) -> fmt::Result {
    writeln!(f, "  {}", c.describe())?;
    if c.excluded || c.refused.is_some() {
        return Ok(());
    }
    writeln!(f, "    placement: {}", fmt_placement(c.placement))
}

impl ClusterFit {
    /// `member-a: worker: each pod needs ...`, or `member-c: fits now (c: 3 pods)`.
    pub fn describe(&self) -> String {
        let name = &self.cluster;
        if self.excluded {
            return format!("{name}: excluded by the job's cluster restriction");
        }
        if let Some(why) = &self.refused {
            return format!("{name}: cannot create it: {why}");
        }
        match &self.fit {
            Fit::NotTried => {
                format!("{name}: unreachable; nothing is placed there until it answers")
            }
            Fit::Fits {
                nodes,
                domain: None,
            } => format!("{name}: fits now ({})", fmt_nodes(nodes)),
            Fit::Fits {
                nodes,
                domain: Some(d),
            } => format!("{name}: fits now in {d} ({})", fmt_nodes(nodes)),
            Fit::NoFit { reason, components } => {
                let parts: Vec<String> = components.iter().filter_map(|c| c.describe()).collect();
                if parts.is_empty() {
                    format!("{name}: {reason}")
                } else {
                    format!("{name}: {}", parts.join("; "))
                }
            }
        }
    }
}

impl Pending {
    /// The first quota row that does not fit (leaf first).
    pub fn quota_block(&self) -> Option<&QuotaRow> {
        self.quota.as_ref()?.iter().find(|r| !r.fits)
    }

    /// Whether the scheduler's last reason says what this explanation already shows in
    /// detail (the same kind of obstacle), so the text need not repeat it. A reason of another
    /// kind (a requeue, a reclaim, an obstacle gone since) is shown.
    fn restates(&self, reason: &str) -> bool {
        let no_fit = self.candidates().next().is_some()
            && self
                .candidates()
                .all(|c| matches!(c.fit, Fit::NoFit { .. }));
        (reason.starts_with("quota ") && self.quota_block().is_some())
            || (reason.starts_with("no cluster fits") && no_fit)
            || (reason.starts_with("waiting behind ") && self.blocked_by.is_some())
            || (reason.starts_with("held behind ") && self.held_by.is_some())
    }

    /// Clusters the job may use now (not excluded, reachable).
    fn candidates(&self) -> impl Iterator<Item = &ClusterFit> {
        self.clusters
            .iter()
            .filter(|c| !c.excluded && c.refused.is_none() && !matches!(c.fit, Fit::NotTried))
    }

    /// What keeps the job itself out (quota, or no cluster fits), apart from the queue.
    /// `brief`: clusters are listed below, so do not repeat them.
    fn own_issue(&self, brief: bool) -> String {
        if let Some(r) = self.quota_block() {
            let max = r.max.unwrap_or_default();
            return format!(
                "quota {}: {} {} in use + {} requested = {}, above max {}",
                r.node,
                r.resource,
                r.used,
                r.request,
                r.total(),
                max
            );
        }
        let fits: Vec<&str> = self
            .candidates()
            .filter(|c| matches!(c.fit, Fit::Fits { .. }))
            .map(|c| c.cluster.as_str())
            .collect();
        if !fits.is_empty() {
            return if self.blocked_by.is_some() || self.held_by.is_some() {
                format!(
                    "by itself it is within quota and fits now on {}",
                    fits.join(", ")
                )
            } else {
                format!(
                    "quota allows it and it fits now on {}; the next admission cycle considers it",
                    fits.join(", ")
                )
            };
        }
        let parts: Vec<String> = self.candidates().map(|c| c.describe()).collect();
        if parts.is_empty() {
            return "no reachable member cluster is a candidate for this job".into();
        }
        if brief {
            return "no member cluster has room for all of its pods now".into();
        }
        format!("no member cluster fits it now: {}", parts.join("; "))
    }
}

impl Explanation {
    /// One line for a status `reason` field (at most [`SUMMARY_MAX`] bytes).
    pub fn summary(&self) -> String {
        let s = match &self.status {
            Status::Pending(p) => match (&p.blocked_by, &p.held_by) {
                (Some(h), _) => format!(
                    "waiting behind {} in StrictFIFO queue {}; {}",
                    h.job,
                    self.queue,
                    p.own_issue(false)
                ),
                (None, Some(h)) => format!(
                    "held behind {}, which may take back the jobs of lower priority of queue {}; {}",
                    h.job,
                    self.queue,
                    p.own_issue(false)
                ),
                (None, None) => format!("waiting: {}", p.own_issue(false)),
            },
            Status::Inadmissible(i) => format!("can never run: {}", i.reason),
            Status::Admitted(a) => format!("admitted to {} ({})", a.cluster, fmt_nodes(&a.nodes)),
            Status::Finished => "finished".into(),
        };
        truncate(s, SUMMARY_MAX)
    }
}

fn truncate(mut s: String, max: usize) -> String {
    if s.len() <= max {
        return s;
    }
    let mut cut = max - 3;
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    s.truncate(cut);
    s.push_str("...");
    s
}

fn write_quota(f: &mut fmt::Formatter<'_>, rows: &[QuotaRow]) -> fmt::Result {
    let shown: Vec<&QuotaRow> = rows
        .iter()
        .filter(|r| r.max.is_some() || !r.min.is_zero())
        .collect();
    let mut unlimited: Vec<&str> = Vec::new();
    for r in rows {
        if !unlimited.contains(&r.resource.as_str())
            && rows
                .iter()
                .filter(|o| o.resource == r.resource)
                .all(|o| o.max.is_none() && o.min.is_zero())
        {
            unlimited.push(&r.resource);
        }
    }
    if shown.is_empty() {
        return writeln!(
            f,
            "Quota: nothing it asks for is limited on its path ({})",
            unlimited.join(", ")
        );
    }
    writeln!(
        f,
        "Quota, from its queue up to the root (in use + this job, against max):"
    )?;
    let wn = shown.iter().map(|r| r.node.len()).max().unwrap_or(0);
    let wr = shown.iter().map(|r| r.resource.len()).max().unwrap_or(0);
    for r in shown {
        let mut line = format!(
            "  {:<wn$}  {:<wr$}  {} + {} = {}",
            r.node,
            r.resource,
            r.used,
            r.request,
            r.total()
        );
        if let Some(m) = r.max {
            let _ = write!(line, " of max {m}");
        }
        if !r.min.is_zero() {
            let _ = write!(line, ", min {}", r.min);
        }
        let verdict = match (r.fits, r.max) {
            (false, Some(m)) => format!("OVER MAX by {}", r.total() - m),
            _ if r.min.is_zero() => "ok".to_string(),
            _ if r.borrows => format!("ok, borrows {} above min", r.total() - r.min),
            _ => "ok, within min".to_string(),
        };
        writeln!(f, "{line}: {verdict}")?;
    }
    if !unlimited.is_empty() {
        writeln!(f, "  not limited on its path: {}", unlimited.join(", "))?;
    }
    Ok(())
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let job = &self.job;
        match &self.status {
            Status::Finished => writeln!(f, "{job}: finished."),
            Status::Admitted(a) => {
                writeln!(
                    f,
                    "{job}: admitted to {} (queue {}, priority {}).",
                    a.cluster, self.queue, self.priority
                )?;
                writeln!(f, "  planned nodes: {}", fmt_nodes(&a.nodes))?;
                if let Some(d) = &a.domain {
                    writeln!(f, "  topology domain: {d}")?;
                }
                if !self.topology.is_empty() {
                    writeln!(f, "  topology asked: {}", self.topology.join("; "))?;
                }
                writeln!(f, "  placement: {}", fmt_placement(a.placement))?;
                if let Some(w) = &a.waited {
                    writeln!(f, "  before that it waited: {w}")?;
                }
                Ok(())
            }
            Status::Inadmissible(i) => {
                writeln!(f, "{job}: can never run as written (inadmissible).")?;
                writeln!(f, "  {}", i.reason)?;
                if let Some(q) = &i.quota {
                    writeln!(
                        f,
                        "  quota {}: this job alone asks {} {}, above its max {} by {}; no usage can make room",
                        q.node,
                        q.resource,
                        q.request,
                        q.max,
                        q.request - q.max
                    )?;
                }
                let fits = i.clusters.iter().any(|c| matches!(c.fit, Fit::Fits { .. }));
                if !fits && !i.clusters.is_empty() {
                    writeln!(f, "Member clusters, even with nothing else running:")?;
                    for c in &i.clusters {
                        write_member(f, c)?;
                    }
                }
                Ok(())
            }
            Status::Pending(p) => {
                let place = match p.ahead {
                    0 => "first in line".to_string(),
                    n => format!("{} ahead of it", plural(n as u64, "job", "jobs")),
                };
                writeln!(
                    f,
                    "{job}: waiting in queue {} (priority {}, {place}).",
                    self.queue, self.priority
                )?;
                // The job it waits behind (StrictFIFO's head, or A8's holder), and why that one
                // waits.
                let behind = [
                    p.blocked_by.as_ref().map(|h| {
                        (
                            h,
                            format!(
                                "the queue is StrictFIFO: nothing behind its head {} is admitted before it",
                                h.job
                            ),
                        )
                    }),
                    p.held_by.as_ref().map(|h| {
                        (
                            h,
                            format!(
                                "held: {} (higher priority) may take back this queue's jobs of lower priority and waits for room on a member; none of them is admitted before it",
                                h.job
                            ),
                        )
                    }),
                ];
                for (h, line) in behind.into_iter().flatten() {
                    writeln!(f, "  {line}")?;
                    if let Some(r) = &h.reason {
                        writeln!(f, "  {} waits: {r}", h.job)?;
                    }
                }
                writeln!(f, "  {}", p.own_issue(true))?;
                if let Some(r) = p.reason.as_ref().filter(|r| !p.restates(r)) {
                    writeln!(f, "  last admission cycle: {r}")?;
                }
                if let Some(rows) = &p.quota {
                    write_quota(f, rows)?;
                }
                if let Some(rows) = &p.fair {
                    super::fair::write_fair(f, rows)?;
                }
                if !self.topology.is_empty() {
                    writeln!(f, "  topology asked: {}", self.topology.join("; "))?;
                }
                writeln!(
                    f,
                    "Member clusters (all of the job's pods must fit on one of them at once):"
                )?;
                for c in &p.clusters {
                    write_member(f, c)?;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::{ClusterInfo, NodeInfo};
    use crate::quota::QuotaTree;
    use crate::scheduler::{Config, Decision, Submitted};
    use crate::workload::{Workload, interpret};
    use k8s_openapi::api::core::v1::Taint;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).expect("test quantity")
    }

    fn node(name: &str, alloc: &[(&str, &str)]) -> NodeInfo {
        NodeInfo {
            name: name.into(),
            allocatable: alloc.iter().map(|(k, v)| (k.to_string(), q(v))).collect(),
            ready: true,
            ..Default::default()
        }
    }

    fn cluster(name: &str, nodes: usize, gpus: &str) -> ClusterInfo {
        ClusterInfo {
            name: name.into(),
            nodes: (0..nodes)
                .map(|i| {
                    node(
                        &format!("{name}-{i}"),
                        &[("cpu", "16"), ("nvidia.com/gpu", gpus), ("pods", "110")],
                    )
                })
                .collect(),
            ..Default::default()
        }
    }

    fn pytorch(
        ns: &str,
        name: &str,
        workers: u32,
        gpus: u32,
        annotations: &[(&str, &str)],
    ) -> Workload {
        let ann: serde_json::Map<String, serde_json::Value> = annotations
            .iter()
            .map(|(k, v)| (k.to_string(), serde_json::Value::from(*v)))
            .collect();
        interpret(&serde_json::json!({
            "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": ns, "annotations": ann},
            "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": workers, "template": {"spec": {
                "containers": [{"name": "w", "image": "x",
                    "resources": {"limits": {"cpu": "1", "nvidia.com/gpu": gpus}}}]}}}}}
        }))
        .expect("test job")
    }

    fn queued(s: &mut Scheduler, w: &Workload, at: u64) -> JobId {
        match s.submit(w, at) {
            Submitted::Queued(id) => id,
            other => panic!("not queued: {other:?}"),
        }
    }

    fn pending(e: &Explanation) -> &Pending {
        match &e.status {
            Status::Pending(p) => p,
            other => panic!("not pending: {other:?}"),
        }
    }

    fn no_fit<'a>(p: &'a [ClusterFit], cluster: &str) -> &'a [ComponentFit] {
        match &p
            .iter()
            .find(|c| c.cluster == cluster)
            .expect("cluster")
            .fit
        {
            Fit::NoFit { components, .. } => components,
            other => panic!("{cluster}: {other:?}"),
        }
    }

    fn short(c: &ComponentFit) -> &[Short] {
        match &c.problem {
            Some(ComponentProblem::Short { short }) => short,
            other => panic!("{other:?}"),
        }
    }

    fn tree(root_max: &str, leaf_min: &str, leaf_max: &str) -> QuotaTree {
        QuotaTree::parse(&serde_json::json!({
            "apiVersion": "scheduling.sigs.k8s.io/v1beta1", "kind": "ElasticQuotaTree",
            "spec": {"root": {"name": "root", "max": {"nvidia.com/gpu": root_max}, "children": [
                {"name": "team", "namespaces": ["team"],
                 "min": {"nvidia.com/gpu": leaf_min}, "max": {"nvidia.com/gpu": leaf_max}},
                {"name": "other", "namespaces": ["other"]}]}}
        }))
        .expect("test tree")
    }

    #[test]
    fn per_node_shortage_names_resource_need_and_best_node_per_cluster() {
        let mut s = Scheduler::new(Config::default());
        s.set_cluster(&cluster("a", 1, "2"));
        s.set_cluster(&cluster("b", 3, "2"));
        s.set_cluster(&cluster("c", 1, "8"));
        let used = [("nvidia.com/gpu".to_string(), q("7"))]
            .into_iter()
            .collect();
        s.set_external_usage("c", "c-0", &used);
        let id = queued(&mut s, &pytorch("team", "j", 2, 3, &[]), 0);
        s.cycle();
        let e = s.explain(id);
        let p = pending(&e);
        assert_eq!(p.ahead, 0);
        assert_eq!(p.quota, None, "no tree: nothing limited");
        for (c, free, node) in [("a", "2", "a-0"), ("b", "2", "b-0"), ("c", "1", "c-0")] {
            let comps = no_fit(&p.clusters, c);
            assert_eq!(comps.len(), 1);
            assert_eq!(comps[0].component, "worker");
            assert_eq!(
                short(&comps[0]),
                [Short {
                    resource: "nvidia.com/gpu".into(),
                    need: q("3"),
                    best_free: q(free),
                    node: node.into(),
                }]
            );
        }
        let text = e.to_string();
        assert!(
            text.contains(
                "  b: worker: each pod needs nvidia.com/gpu 3 on one node; the most free on any node is 2 (node b-0)\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("(node c-0)") && text.contains("is 1 (node c-0)"),
            "{text}"
        );
        assert!(
            e.summary()
                .starts_with("waiting: no member cluster fits it now: a: worker")
        );
        assert!(e.summary().len() <= SUMMARY_MAX);
    }

    #[test]
    fn quota_rows_show_usage_request_min_max_at_every_level() {
        let mut s = Scheduler::new(Config::default());
        s.set_cluster(&cluster("m", 1, "16"));
        s.set_quota_tree(Some(tree("4", "1", "6")));
        let first = queued(&mut s, &pytorch("other", "first", 1, 3, &[]), 0);
        let second = queued(&mut s, &pytorch("team", "second", 1, 2, &[]), 1);
        s.cycle();
        assert!(matches!(s.explain(first).status, Status::Admitted(_)));
        let e = s.explain(second);
        let p = pending(&e);
        let gpu_rows: Vec<&QuotaRow> = p
            .quota
            .as_ref()
            .expect("tree")
            .iter()
            .filter(|r| r.resource == "nvidia.com/gpu")
            .collect();
        assert_eq!(
            gpu_rows,
            [
                &QuotaRow {
                    node: "root/team".into(),
                    resource: "nvidia.com/gpu".into(),
                    used: q("0"),
                    request: q("2"),
                    min: q("1"),
                    max: Some(q("6")),
                    fits: true,
                    borrows: true,
                },
                &QuotaRow {
                    node: "root".into(),
                    resource: "nvidia.com/gpu".into(),
                    used: q("3"),
                    request: q("2"),
                    min: q("0"),
                    max: Some(q("4")),
                    fits: false,
                    borrows: true,
                },
            ]
        );
        let rows = p.quota.as_ref().expect("tree");
        let names: Vec<&str> = rows.iter().map(|r| r.resource.as_str()).collect();
        assert_eq!(
            names,
            [
                "cpu",
                "kube-queue/max-jobs",
                "nvidia.com/gpu",
                "pods",
                "cpu",
                "kube-queue/max-jobs",
                "nvidia.com/gpu",
                "pods"
            ]
        );
        assert_eq!(p.quota_block().map(|r| r.node.as_str()), Some("root"));
        // The fleet has room: it would fit now, quota aside.
        assert!(
            matches!(&p.clusters[0].fit, Fit::Fits { nodes, .. } if nodes.get("m-0") == Some(&1))
        );
        let text = e.to_string();
        assert!(
            text.contains(
                "root/team  nvidia.com/gpu  0 + 2 = 2 of max 6, min 1: ok, borrows 1 above min\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("root       nvidia.com/gpu  3 + 2 = 5 of max 4: OVER MAX by 1\n"),
            "{text}"
        );
        assert!(
            text.contains("not limited on its path: cpu, kube-queue/max-jobs, pods\n"),
            "{text}"
        );
        assert_eq!(
            e.summary(),
            "waiting: quota root: nvidia.com/gpu 3 in use + 2 requested = 5, above max 4"
        );
    }

    #[test]
    fn above_a_max_is_inadmissible_with_the_numbers() {
        let mut s = Scheduler::new(Config::default());
        s.set_cluster(&cluster("m", 1, "16"));
        s.set_quota_tree(Some(tree("16", "1", "4")));
        let Submitted::Inadmissible(id, _) = s.submit(&pytorch("team", "huge", 5, 1, &[]), 0)
        else {
            panic!("should be inadmissible")
        };
        let e = s.explain(id);
        let Status::Inadmissible(i) = &e.status else {
            panic!("{e:?}")
        };
        assert_eq!(
            i.quota,
            Some(QuotaLimit {
                node: "root/team".into(),
                resource: "nvidia.com/gpu".into(),
                request: q("5"),
                max: q("4"),
            })
        );
        let text = e.to_string();
        assert!(
            text.contains(
                "quota root/team: this job alone asks nvidia.com/gpu 5, above its max 4 by 1"
            ),
            "{text}"
        );
        // It would fit the (empty) cluster: no cluster section.
        assert!(!text.contains("Member clusters"), "{text}");
        assert!(e.summary().starts_with(
            "can never run: requests nvidia.com/gpu 5 but quota root/team allows at most 4"
        ));
    }

    #[test]
    fn never_fits_even_empty_shows_each_member_empty() {
        let mut s = Scheduler::new(Config::default());
        s.set_cluster(&cluster("a", 2, "2"));
        s.set_cluster(&cluster("c", 1, "8"));
        // Restricted to a: 3 pods x 2 GPU, a's two nodes hold 2 of them.
        let w = pytorch("team", "wide", 3, 2, &[("muster.dev/clusters", "a")]);
        let Submitted::Inadmissible(id, _) = s.submit(&w, 0) else {
            panic!("should be inadmissible")
        };
        let e = s.explain(id);
        let Status::Inadmissible(i) = &e.status else {
            panic!("{e:?}")
        };
        assert_eq!(i.quota, None);
        assert!(i.clusters.iter().any(|c| c.cluster == "c" && c.excluded));
        let comps = no_fit(&i.clusters, "a");
        assert_eq!(
            comps[0].problem,
            Some(ComponentProblem::TooFew {
                room: 2,
                nodes: [("a-0".to_string(), 1), ("a-1".to_string(), 1)]
                    .into_iter()
                    .collect(),
            })
        );
        let text = e.to_string();
        assert!(text.contains("  a: worker: needs 3 pods (cpu 1, nvidia.com/gpu 2 each); the free nodes hold only 2 (a-0: 1 pod, a-1: 1 pod)\n"), "{text}");
        assert!(
            text.contains("  c: excluded by the job's cluster restriction\n"),
            "{text}"
        );
    }

    #[test]
    fn admitted_names_cluster_and_nodes() {
        let mut s = Scheduler::new(Config::default());
        s.set_cluster(&cluster("b", 3, "2"));
        let id = queued(&mut s, &pytorch("team", "j", 3, 2, &[]), 0);
        s.cycle();
        let e = s.explain(id);
        assert_eq!(
            e.status,
            Status::Admitted(Admitted {
                cluster: "b".into(),
                placement: PlacementMode::Gates,
                nodes: [("b-0", 1), ("b-1", 1), ("b-2", 1)]
                    .into_iter()
                    .map(|(n, k)| (n.to_string(), k))
                    .collect(),
                domain: None,
                waited: None,
            })
        );
        assert_eq!(
            e.summary(),
            "admitted to b (b-0: 1 pod, b-1: 1 pod, b-2: 1 pod)"
        );
        assert_eq!(
            e.to_string(),
            "team/j: admitted to b (queue team, priority 0).\n\
             \x20 planned nodes: b-0: 1 pod, b-1: 1 pod, b-2: 1 pod\n\
             \x20 placement: per pod (scheduling gates)\n"
        );
        s.finish(id);
        assert_eq!(s.explain(id).to_string(), "team/j: finished.\n");
    }

    /// master 1 GPU + 3 workers of 1 GPU: on two 2-GPU nodes they fit only by sharing one,
    /// which a member pinning by node set does not do.
    #[test]
    fn members_say_how_they_hold_pods_to_the_plan() {
        let mut s = Scheduler::new(Config::default());
        s.set_cluster(&cluster("g", 2, "2"));
        let mut p = cluster("p", 2, "2");
        p.placement = PlacementMode::Pinned;
        s.set_cluster(&p);
        let template = serde_json::json!({"spec": {"containers": [{"name": "w", "image": "x",
            "resources": {"limits": {"cpu": "1", "nvidia.com/gpu": 1}}}]}});
        let job = |name: &str| {
            interpret(&serde_json::json!({
                "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                "metadata": {"name": name, "namespace": "team"},
                "spec": {"pytorchReplicaSpecs": {
                    "Master": {"replicas": 1, "template": template},
                    "Worker": {"replicas": 3, "template": template}}}
            }))
            .expect("test job")
        };
        let first = queued(&mut s, &job("first"), 0);
        let second = queued(&mut s, &job("second"), 0);
        s.cycle();
        let Status::Admitted(a) = s.explain(first).status else {
            panic!("first not admitted")
        };
        assert_eq!(
            (a.cluster.as_str(), a.placement),
            ("g", PlacementMode::Gates)
        );
        let e = s.explain(second);
        let p = pending(&e);
        let fit = |name: &str| {
            p.clusters
                .iter()
                .find(|c| c.cluster == name)
                .expect("cluster")
        };
        assert_eq!(fit("g").placement, PlacementMode::Gates);
        assert_eq!(fit("p").placement, PlacementMode::Pinned);
        let text = e.to_string();
        assert!(
            text.contains(
                "  p: places pods by node set only (pinned mode): no plan keeps master and worker \
                 on separate nodes (they fit together only by sharing a node)\n\
                 \x20   placement: pinned by node set (robust plans only)\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("\n    placement: per pod (scheduling gates)\n  p: "),
            "{text}"
        );
        let json = serde_json::to_value(&e).expect("serializes");
        let clusters = &json["status"]["clusters"];
        assert_eq!(clusters[0]["placement"], "gates");
        assert_eq!(clusters[1]["placement"], "pinned");
    }

    #[test]
    fn unreachable_excluded_and_tainted_members() {
        let mut s = Scheduler::new(Config::default());
        s.set_cluster(&cluster("a", 1, "8"));
        s.set_cluster(&cluster("b", 1, "8"));
        let mut t = cluster("t", 2, "8");
        t.nodes[0].taints.push(Taint {
            key: "dedicated".into(),
            value: Some("infer".into()),
            effect: "NoSchedule".into(),
            ..Default::default()
        });
        t.nodes[1].unschedulable = true;
        s.set_cluster(&t);
        s.set_cluster(&cluster("x", 1, "8"));
        s.set_reachable("a", false);
        let used = [("nvidia.com/gpu".to_string(), q("8"))]
            .into_iter()
            .collect();
        s.set_external_usage("b", "b-0", &used);
        let w = pytorch("team", "j", 1, 1, &[("muster.dev/clusters", "a,b,t")]);
        let id = queued(&mut s, &w, 0);
        s.cycle();
        let e = s.explain(id);
        let p = pending(&e);
        let a = &p.clusters[0];
        assert_eq!(
            (a.cluster.as_str(), a.reachable, a.excluded, &a.fit),
            ("a", false, false, &Fit::NotTried)
        );
        let x = &p.clusters[3];
        assert_eq!((x.cluster.as_str(), x.excluded), ("x", true));
        let tc = no_fit(&p.clusters, "t");
        assert_eq!(tc[0].problem, Some(ComponentProblem::NoNodeAdmits));
        let text = e.to_string();
        assert!(
            text.contains("  a: unreachable; nothing is placed there until it answers\n"),
            "{text}"
        );
        assert!(text.contains("  b: worker: each pod needs nvidia.com/gpu 1 on one node; the most free on any node is 0 (node b-0)\n"), "{text}");
        assert!(text.contains("  t: worker: no node admits its pods (1 node: untolerated taint dedicated=infer:NoSchedule; 1 node: untolerated taint node.kubernetes.io/unschedulable:NoSchedule)\n"), "{text}");
        assert!(
            text.contains("  x: excluded by the job's cluster restriction\n"),
            "{text}"
        );
    }

    #[test]
    fn resources_free_on_different_nodes_do_not_fit_together() {
        let mut s = Scheduler::new(Config::default());
        s.set_cluster(&ClusterInfo {
            name: "m".into(),
            nodes: vec![
                node("cpu-only", &[("cpu", "8")]),
                node("gpu-only", &[("cpu", "500m"), ("nvidia.com/gpu", "4")]),
            ],
            ..Default::default()
        });
        let Submitted::Inadmissible(id, _) = s.submit(&pytorch("team", "j", 1, 1, &[]), 0) else {
            panic!("should be inadmissible")
        };
        let Status::Inadmissible(i) = s.explain(id).status else {
            panic!()
        };
        assert_eq!(
            no_fit(&i.clusters, "m")[0].problem,
            Some(ComponentProblem::NotTogether)
        );
        assert!(s.explain(id).to_string().contains(
            "m: worker: each pod needs cpu 1, nvidia.com/gpu 1 together on one node; no node has all of it free"
        ));
    }

    #[test]
    fn strict_fifo_names_the_head_and_the_position() {
        let mut s = Scheduler::new(Config {
            default_strategy: Strategy::StrictFIFO,
            ..Config::default()
        });
        s.set_cluster(&cluster("m", 1, "4"));
        let filler = queued(&mut s, &pytorch("other", "filler", 1, 2, &[]), 0);
        s.cycle();
        let big = queued(&mut s, &pytorch("team", "big", 1, 4, &[]), 1);
        let small = queued(&mut s, &pytorch("team", "small", 1, 1, &[]), 2);
        s.cycle();
        let e = s.explain(small);
        let p = pending(&e);
        assert_eq!(p.ahead, 1);
        let head = p.blocked_by.as_ref().expect("blocked by the head");
        assert_eq!(head.job, "team/big");
        let big_reason = "no cluster fits: m: worker needs nvidia.com/gpu 4 on one node; the most free on any node is 2";
        assert_eq!(head.reason.as_deref(), Some(big_reason));
        assert!(
            matches!(p.clusters[0].fit, Fit::Fits { .. }),
            "small fits by itself"
        );
        let text = e.to_string();
        assert!(
            text.contains(&format!("\n  team/big waits: {big_reason}\n")),
            "{text}"
        );
        assert_eq!(
            e.summary(),
            "waiting behind team/big in StrictFIFO queue team; by itself it is within quota and fits now on m"
        );
        assert_eq!(pending(&s.explain(big)).blocked_by, None);
        // Capacity freed, no cycle yet: the head fits now and is next.
        s.finish(filler);
        let e = s.explain(big);
        assert_eq!(
            e.summary(),
            "waiting: quota allows it and it fits now on m; the next admission cycle considers it"
        );
        assert!(matches!(s.cycle().first(), Some(Decision::Admit { job, .. }) if *job == big));
    }

    #[test]
    fn jobs_ahead_count_across_shapes_in_the_queue_only() {
        let mut s = Scheduler::new(Config::default());
        s.set_cluster(&cluster("m", 1, "2"));
        s.set_priority_classes([("high".to_string(), 100)].into_iter().collect());
        let filler = queued(&mut s, &pytorch("team", "filler", 1, 2, &[]), 0);
        s.cycle();
        // Different shapes (so different classes) in one BestEffortFIFO queue, and another queue.
        let a = queued(&mut s, &pytorch("team", "a", 1, 1, &[]), 1);
        let b = queued(&mut s, &pytorch("team", "b", 2, 1, &[]), 2);
        let c = queued(&mut s, &pytorch("team", "c", 1, 2, &[]), 3);
        let other = queued(&mut s, &pytorch("other", "x", 1, 1, &[]), 0);
        let mut w = pytorch("team", "urgent", 1, 1, &[]);
        w.priority_class_names.insert("high".into());
        let urgent = queued(&mut s, &w, 4);
        s.cycle();
        let ahead = |id| pending(&s.explain(id)).ahead;
        assert_eq!(
            [ahead(urgent), ahead(a), ahead(b), ahead(c), ahead(other)],
            [0, 1, 2, 3, 0]
        );
        assert!(matches!(s.explain(filler).status, Status::Admitted(_)));
    }

    #[test]
    fn summary_is_bounded() {
        let mut s = Scheduler::new(Config::default());
        for i in 0..30 {
            s.set_cluster(&cluster(&format!("member-{i:02}"), 1, "2"));
        }
        for i in 0..30 {
            let used = [("nvidia.com/gpu".to_string(), q("1"))]
                .into_iter()
                .collect();
            s.set_external_usage(
                &format!("member-{i:02}"),
                &format!("member-{i:02}-0"),
                &used,
            );
        }
        let id = queued(&mut s, &pytorch("team", "j", 1, 2, &[]), 0);
        s.cycle();
        let sum = s.explain(id).summary();
        assert_eq!(sum.len(), SUMMARY_MAX, "{sum}");
        assert!(sum.ends_with("..."));
        assert!(!sum.contains('\n'));
    }

    /// Explaining every job after every cycle changes no decision.
    #[test]
    fn explain_changes_nothing() {
        let run = |explain: bool| -> Vec<Vec<Decision>> {
            let mut s = Scheduler::new(Config::default());
            s.set_cluster(&cluster("a", 2, "2"));
            s.set_cluster(&cluster("c", 1, "8"));
            s.set_quota_tree(Some(tree("12", "2", "8")));
            let mut ids = Vec::new();
            let mut out = Vec::new();
            for (i, (w, g)) in [(1, 8), (2, 2), (1, 3), (4, 1), (2, 1), (1, 9)]
                .into_iter()
                .enumerate()
            {
                let ns = if i % 2 == 0 { "team" } else { "other" };
                let name = format!("j{i}");
                if let Submitted::Queued(id) | Submitted::Inadmissible(id, _) =
                    s.submit(&pytorch(ns, &name, w, g, &[]), i as u64)
                {
                    ids.push(id);
                }
                if explain {
                    for &id in &ids {
                        let _ = s.explain(id).to_string();
                    }
                }
                out.push(s.cycle());
                if explain {
                    for &id in &ids {
                        let _ = s.explain(id).summary();
                    }
                }
                if i == 3 {
                    s.finish(ids[0]);
                }
            }
            out.push(s.cycle());
            out
        };
        assert_eq!(run(true), run(false));
    }
}
