//! The reference scheduler: muster's documented admission semantics (docs/concepts.md, "Quota",
//! "Reclaim", "Queues", "Choosing the cluster"), written plainly and slowly, for the differential
//! test to hold the optimized `Scheduler` to. Comments cite the documented rules by number
//! (A1–A8, R1–R9) where each is applied.
//!
//! It shares the core's parsing (`Workload`, `QuotaTree`, `ClusterInfo` and a node's filters),
//! never its decisions: no memo, no skipped visit, no incremental state. Usage, free capacity and
//! queues are recomputed from the jobs at every question; every class head is visited in every
//! pass; a fit is an exhaustive search over pods per node; victims are found by scanning every
//! prefix of the documented order. Only the node plan of an admission is taken from the core
//! (which nodes, among the many that fit, is the estimator's choice, tested elsewhere), after
//! checking that it really fits.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};

use muster::fleet::{ClusterInfo, Constraints, Needs, Node, Serves, make_node};
use muster::quantity::ResourceList;
use muster::quota::QuotaTree;
use muster::resources::ResourceTable;
use muster::workload::Workload;

pub const PODS: &str = "pods";
pub const MAX_JOBS: &str = "kube-queue/max-jobs";
const ONE: i128 = 1000;
const QUEUEING: &str = "muster.dev/queueing-strategy";
const WITHIN_QUEUE: &str = "muster.dev/within-queue-preemption";

/// Amounts by resource name, in milli-units.
pub type Amounts = BTreeMap<String, i128>;

fn add(a: &mut Amounts, b: &Amounts, n: i128) {
    for (r, x) in b {
        *a.entry(r.clone()).or_insert(0) += x * n;
    }
}

fn get(a: &Amounts, r: &str) -> i128 {
    a.get(r).copied().unwrap_or(0)
}

fn amounts(l: &ResourceList) -> Amounts {
    l.iter()
        .filter(|(_, q)| !q.is_zero())
        .map(|(n, q)| (n.to_string(), q.milli()))
        .collect()
}

/// What the reference decided, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decided {
    Admit { job: usize, cluster: String },
    Preempt { job: usize, by: usize },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    Pending,
    Inadmissible,
    /// On `cluster`, pods per node per component.
    Admitted {
        cluster: usize,
        plan: Vec<BTreeMap<String, u32>>,
    },
    Finished,
}

pub struct Job {
    pub label: String,
    pub w: Workload,
    pub submitted: u64,
    pub index: u64,
    pub priority: i32,
    pub state: State,
    pub admitted_seq: u64,
    /// Per component: (pods, per-pod demand with `pods`, node filters).
    groups: Vec<(u32, Amounts, Constraints)>,
    /// What quota is charged: every pod's demand and one `kube-queue/max-jobs`.
    pub charge: Amounts,
}

impl Job {
    /// Per component: pods, per-pod demand (with `pods`) and node filters.
    fn groups(&self) -> &[(u32, Amounts, Constraints)] {
        &self.groups
    }

    /// What makes two jobs' pods the same (a BestEffortFIFO class holds one such shape).
    fn groups_key(&self) -> String {
        self.w
            .components
            .iter()
            .zip(&self.groups)
            .map(|(c, (k, d, cons))| format!("{}:{k}:{d:?}:{cons:?}", c.name))
            .collect::<Vec<_>>()
            .join(";")
    }
}

pub struct RNode {
    pub name: String,
    filters: Node,
    pub alloc: Amounts,
    pub external: Amounts,
    usable: bool,
}

pub struct RCluster {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub reachable: bool,
    serves: Serves,
    pub nodes: Vec<RNode>,
}

/// A reclaim the reference made: who, for whom, and the resources it was short of.
#[derive(Clone, Debug)]
pub struct Reclaim {
    pub by: usize,
    pub victims: Vec<usize>,
    pub short: Vec<String>,
    /// Preemption for fairness (F1–F5) rather than reclaim (R1–R9).
    pub fair: bool,
}

pub struct Reference {
    pub tree: Option<QuotaTree>,
    pub priorities: BTreeMap<String, i32>,
    pub clusters: Vec<RCluster>,
    pub jobs: Vec<Job>,
    seq: u64,
    held: Vec<usize>,
    table: ResourceTable,
    /// Every reclaim of the last cycle, for the property checks.
    pub reclaims: Vec<Reclaim>,
    /// Admissions the fair order (A7) made before a head that queue order puts first.
    pub fair_admits: u64,
    /// F5: the nodes below which a job was admitted by preemption for fairness this cycle.
    pub(super) fair_used: BTreeSet<usize>,
    /// Jobs admitted by preemption for fairness, and their victims, over the whole run.
    pub fair_preemptions: u64,
    /// A8: per leaf, the highest priority of a job that waited in this pass although it may
    /// reclaim (R2), on a leaf that preempts by priority: its queue's jobs below it are held.
    pub(super) holds: BTreeMap<usize, i32>,
}

/// The core's node plan for an admission, when it made the same one: pods per node per
/// component.
pub type Plans<'a> = dyn FnMut(usize, &str) -> Option<Vec<BTreeMap<String, u32>>> + 'a;

impl Reference {
    pub fn new(tree: Option<QuotaTree>, priorities: BTreeMap<String, i32>) -> Reference {
        Reference {
            tree,
            priorities,
            clusters: Vec::new(),
            jobs: Vec::new(),
            seq: 0,
            held: Vec::new(),
            table: ResourceTable::default(),
            reclaims: Vec::new(),
            fair_admits: 0,
            fair_used: BTreeSet::new(),
            fair_preemptions: 0,
            holds: BTreeMap::new(),
        }
    }

    // ----- inputs ---------------------------------------------------------------------------

    /// Adds or replaces a member; admitted jobs keep their pods on nodes that remain.
    pub fn set_cluster(&mut self, info: &ClusterInfo) {
        let nodes = info
            .nodes
            .iter()
            .map(|n| {
                let mut alloc = amounts(&n.allocatable);
                if !n.allocatable.0.contains_key(PODS) {
                    alloc.insert(PODS.into(), i128::MAX / 4);
                }
                RNode {
                    name: n.name.clone(),
                    filters: make_node(n, &mut self.table),
                    alloc,
                    external: Amounts::new(),
                    usable: !n.unschedulable && n.ready,
                }
            })
            .collect::<Vec<_>>();
        let mut c = RCluster {
            name: info.name.clone(),
            labels: info.labels.clone(),
            reachable: true,
            serves: info.serves.clone(),
            nodes,
        };
        match self.clusters.iter().position(|x| x.name == info.name) {
            Some(i) => {
                let old = std::mem::replace(&mut self.clusters[i], c);
                self.clusters[i].reachable = old.reachable;
                for n in &mut self.clusters[i].nodes {
                    if let Some(o) = old.nodes.iter().find(|o| o.name == n.name) {
                        n.external = o.external.clone();
                    }
                }
                // Pods on a node the new spec leaves out are counted on no node from then on,
                // even if a node of that name comes back later.
                let names: BTreeSet<String> = self.clusters[i]
                    .nodes
                    .iter()
                    .map(|n| n.name.clone())
                    .collect();
                for j in &mut self.jobs {
                    if let State::Admitted { cluster, plan } = &mut j.state
                        && *cluster == i
                    {
                        for g in plan.iter_mut() {
                            g.retain(|node, _| names.contains(node));
                        }
                    }
                }
            }
            None => {
                c.reachable = true;
                self.clusters.push(c);
            }
        }
        self.recheck(false);
    }

    pub fn set_reachable(&mut self, cluster: &str, reachable: bool) {
        if let Some(c) = self.clusters.iter_mut().find(|c| c.name == cluster) {
            c.reachable = reachable;
            self.recheck(false);
        }
    }

    pub fn set_external(&mut self, cluster: &str, node: &str, used: &ResourceList) {
        if let Some(c) = self.clusters.iter_mut().find(|c| c.name == cluster)
            && let Some(n) = c.nodes.iter_mut().find(|n| n.name == node)
        {
            n.external = amounts(used);
        }
    }

    /// A new tree: every job not admitted is judged again in the queue of its namespace.
    pub fn set_tree(&mut self, tree: Option<QuotaTree>) {
        self.tree = tree;
        self.recheck(true);
    }

    /// Whether the namespace is muster's: in a leaf of the tree (or any, without a tree).
    pub fn covers(&self, namespace: &str) -> bool {
        self.tree
            .as_ref()
            .is_none_or(|t| t.leaf_for(namespace).is_some())
    }

    /// Submits; `None` when the namespace is not muster's.
    pub fn submit(&mut self, w: Workload, submitted: u64) -> Option<usize> {
        if !self.covers(&w.namespace) {
            return None;
        }
        let groups: Vec<(u32, Amounts, Constraints)> = w
            .components
            .iter()
            .map(|c| {
                let mut d = amounts(&c.requests);
                *d.entry(PODS.into()).or_insert(0) += ONE;
                let cons = Constraints {
                    node_selector: c.node_selector.clone(),
                    tolerations: c.tolerations.clone(),
                    affinity: c.required_node_affinity.clone(),
                };
                (c.pods, d, cons)
            })
            .collect();
        let mut charge = Amounts::new();
        for (k, d, _) in &groups {
            add(&mut charge, d, i128::from(*k));
        }
        charge.insert(MAX_JOBS.into(), ONE);
        let id = self.jobs.len();
        self.jobs.push(Job {
            label: format!("{}/{}", w.namespace, w.name),
            w,
            submitted,
            index: id as u64,
            priority: 0,
            state: State::Pending,
            admitted_seq: 0,
            groups,
            charge,
        });
        self.judge(id);
        Some(id)
    }

    pub fn finish(&mut self, job: usize) {
        self.jobs[job].state = State::Finished;
    }

    /// Inadmissible jobs (and with `all`, every job not admitted) judged again.
    fn recheck(&mut self, all: bool) {
        for j in 0..self.jobs.len() {
            let st = &self.jobs[j].state;
            if *st == State::Inadmissible || (all && *st == State::Pending) {
                self.judge(j);
            }
        }
    }

    /// A2. Pending with its priority when it could ever run as written, else inadmissible: every
    /// PriorityClass exists, no max on its path is below its request alone, and it fits some
    /// candidate member (reachable or not) with nothing else on it.
    fn judge(&mut self, job: usize) {
        let j = &self.jobs[job];
        let mut prio: Option<i32> = None;
        let mut ok = self.leaf(job).is_some() || self.tree.is_none();
        for name in &j.w.priority_class_names {
            match self.priorities.get(name) {
                Some(&p) => prio = Some(prio.map_or(p, |q| q.max(p))),
                None => ok = false,
            }
        }
        let prio = prio.unwrap_or(0);
        if ok && let (Some(t), Some(leaf)) = (&self.tree, self.leaf(job)) {
            for n in path_up(t, leaf) {
                for (r, x) in &j.charge {
                    if let Some(m) = t.nodes[n].max.0.get(r)
                        && *x > m.milli()
                    {
                        ok = false;
                    }
                }
            }
        }
        ok = ok
            && (0..self.clusters.len())
                .any(|ci| self.candidate(job, ci) && self.fits_on(job, ci, None, true).is_some());
        let j = &mut self.jobs[job];
        if ok {
            j.priority = prio;
            j.state = State::Pending;
        } else {
            j.state = State::Inadmissible;
        }
    }

    // ----- reading the state ----------------------------------------------------------------

    pub fn leaf(&self, job: usize) -> Option<usize> {
        self.tree
            .as_ref()
            .and_then(|t| t.leaf_for(&self.jobs[job].w.namespace))
    }

    fn admitted(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.jobs.len()).filter(|&j| matches!(self.jobs[j].state, State::Admitted { .. }))
    }

    /// Usage of tree node `n`, without the jobs in `gone`.
    pub fn used(&self, n: usize, gone: &BTreeSet<usize>) -> Amounts {
        let mut u = Amounts::new();
        let Some(t) = &self.tree else { return u };
        for j in self.admitted().filter(|j| !gone.contains(j)) {
            if let Some(l) = self.leaf(j)
                && path_up(t, l).contains(&n)
            {
                add(&mut u, &self.jobs[j].charge, 1);
            }
        }
        u
    }

    pub fn min(&self, n: usize, r: &str) -> i128 {
        self.tree
            .as_ref()
            .and_then(|t| t.nodes[n].min.0.get(r))
            .map_or(0, |q| q.milli())
    }

    pub(super) fn max(&self, n: usize, r: &str) -> Option<i128> {
        self.tree
            .as_ref()
            .and_then(|t| t.nodes[n].max.0.get(r))
            .map(|q| q.milli())
    }

    /// A3. Within quota: usage + request <= max at every node of its path, for every resource
    /// asked; `None` when it is, else the resources over a max.
    pub fn over_max(&self, job: usize, gone: &BTreeSet<usize>) -> Vec<String> {
        let (Some(t), Some(leaf)) = (&self.tree, self.leaf(job)) else {
            return Vec::new();
        };
        let mut over = BTreeSet::new();
        for n in path_up(t, leaf) {
            let u = self.used(n, gone);
            for (r, x) in &self.jobs[job].charge {
                if let Some(m) = self.max(n, r)
                    && get(&u, r) + x > m
                {
                    over.insert(r.clone());
                }
            }
        }
        over.into_iter().collect()
    }

    /// Free capacity of node `ni` of cluster `ci` without the jobs in `gone` (with `empty`,
    /// allocatable alone).
    fn free(&self, ci: usize, ni: usize, gone: Option<&BTreeSet<usize>>, empty: bool) -> Amounts {
        let c = &self.clusters[ci];
        let node = &c.nodes[ni];
        let mut f = node.alloc.clone();
        if empty {
            return f;
        }
        add(&mut f, &node.external, -1);
        for j in self.admitted() {
            if gone.is_some_and(|g| g.contains(&j)) {
                continue;
            }
            if let State::Admitted { cluster, plan } = &self.jobs[j].state
                && *cluster == ci
            {
                for (gi, nodes) in plan.iter().enumerate() {
                    if let Some(k) = nodes.get(&node.name) {
                        add(&mut f, &self.jobs[j].groups[gi].1, -i128::from(*k));
                    }
                }
            }
        }
        f
    }

    /// The largest free amount on one usable node and the total free on usable nodes (without
    /// `gone`).
    fn summary(&self, ci: usize, r: &str, gone: Option<&BTreeSet<usize>>) -> (i128, i128) {
        let mut most = 0;
        let mut total = 0;
        for (ni, n) in self.clusters[ci].nodes.iter().enumerate() {
            if n.usable {
                let f = get(&self.free(ci, ni, gone, false), r);
                most = most.max(f);
                total += f.max(0);
            }
        }
        (most, total)
    }

    /// The requested resource with the largest share of the fleet's allocatable (ties by
    /// name), `pods` when none.
    fn scarcest(&self, job: usize) -> String {
        let mut best: (i128, String) = (0, PODS.into());
        for (r, x) in &self.jobs[job].charge {
            if r == PODS || r == MAX_JOBS {
                continue;
            }
            let total: i128 = self
                .clusters
                .iter()
                .flat_map(|c| &c.nodes)
                .map(|n| get(&n.alloc, r))
                .sum();
            let share = x.saturating_mul(1_000_000_000) / total.max(1);
            if share > best.0 || (share == best.0 && (best.1 == PODS || *r < best.1)) {
                best = (share, r.clone());
            }
        }
        best.1
    }

    fn candidate(&self, job: usize, ci: usize) -> bool {
        let c = &self.clusters[ci];
        let w = &self.jobs[job].w;
        w.candidates.allows(&c.name, &c.labels)
            && c.serves.refuses(&c.name, &Needs::of(w)).is_none()
    }

    /// A4. Some plan of every pod of the job on cluster `ci`'s nodes that admit it, within their
    /// free capacity (without `gone`; with `empty`, on the bare nodes): an exhaustive search.
    pub fn fits_on(
        &self,
        job: usize,
        ci: usize,
        gone: Option<&BTreeSet<usize>>,
        empty: bool,
    ) -> Option<Vec<BTreeMap<String, u32>>> {
        let c = &self.clusters[ci];
        let mut free: Vec<Amounts> = (0..c.nodes.len())
            .map(|ni| self.free(ci, ni, gone, empty))
            .collect();
        let groups = &self.jobs[job].groups;
        let elig: Vec<Vec<usize>> = groups
            .iter()
            .map(|(_, _, cons)| {
                (0..c.nodes.len())
                    .filter(|&ni| c.nodes[ni].filters.admits(cons).is_ok())
                    .collect()
            })
            .collect();
        let mut plan: Vec<BTreeMap<usize, u32>> = vec![BTreeMap::new(); groups.len()];
        if place(groups, &elig, 0, 0, 0, &mut free, &mut plan) {
            Some(
                plan.iter()
                    .map(|m| {
                        m.iter()
                            .map(|(ni, k)| (c.nodes[*ni].name.clone(), *k))
                            .collect()
                    })
                    .collect(),
            )
        } else {
            None
        }
    }

    /// A4. The member the job goes to: among reachable candidates where it fits, the least free of
    /// its scarcest resource, then the name.
    fn find_cluster(&self, job: usize, gone: Option<&BTreeSet<usize>>) -> Option<usize> {
        let key = self.scarcest(job);
        let mut order: Vec<(i128, String, usize)> = (0..self.clusters.len())
            .filter(|&ci| self.clusters[ci].reachable && self.candidate(job, ci))
            .map(|ci| {
                (
                    self.summary(ci, &key, gone).1,
                    self.clusters[ci].name.clone(),
                    ci,
                )
            })
            .collect();
        order.sort();
        order
            .into_iter()
            .map(|(_, _, ci)| ci)
            .find(|&ci| self.fits_on(job, ci, gone, false).is_some())
    }

    /// A5. usage + request <= min at every node of the path with a min above zero for the
    /// resource, with `gone` counted as gone: the job borrows nothing.
    fn borrows_nothing(&self, job: usize, gone: &BTreeSet<usize>) -> bool {
        let (Some(t), Some(leaf)) = (&self.tree, self.leaf(job)) else {
            return true;
        };
        path_up(t, leaf).into_iter().all(|n| {
            let u = self.used(n, gone);
            self.jobs[job].charge.iter().all(|(r, x)| {
                let m = self.min(n, r);
                *x <= 0 || m <= 0 || get(&u, r) + x <= m
            })
        })
    }

    /// R8. Its leaf's admitted jobs of lower priority, lowest priority then most recently
    /// admitted first (R4's order), when the leaf preempts by priority.
    fn lower_in_leaf(&self, job: usize) -> Vec<usize> {
        let (Some(t), Some(leaf)) = (&self.tree, self.leaf(job)) else {
            return Vec::new();
        };
        if t.nodes[leaf]
            .attributes
            .get(WITHIN_QUEUE)
            .map(String::as_str)
            != Some("LowerPriority")
        {
            return Vec::new();
        }
        let p = self.jobs[job].priority;
        let mut v: Vec<usize> = self
            .admitted()
            .filter(|&v| self.leaf(v) == Some(leaf) && self.jobs[v].priority < p)
            .collect();
        self.victim_order(&mut v);
        v
    }

    fn victim_order(&self, v: &mut [usize]) {
        v.sort_by_key(|&j| (self.jobs[j].priority, Reverse(self.jobs[j].admitted_seq), j));
    }

    fn strict(&self, leaf: Option<usize>) -> bool {
        match (&self.tree, leaf) {
            (Some(t), Some(l)) => {
                t.nodes[l].attributes.get(QUEUEING).map(String::as_str) == Some("StrictFIFO")
            }
            _ => false,
        }
    }
}

/// What the property checks ask (tests/differential.rs).
impl Reference {
    /// Within quota and fitting a reachable candidate member now, with `gone` gone.
    pub fn fits_now(&self, job: usize, gone: &BTreeSet<usize>) -> bool {
        self.over_max(job, gone).is_empty() && self.find_cluster(job, Some(gone)).is_some()
    }

    /// For a waiting job at the head of its class, within its leaf's min in every resource it
    /// requests, in a leaf that has no job it may preempt by priority: one or two admitted
    /// jobs of other leaves whose removal lets it run while taking only borrowed capacity
    /// (every node on their side below where the paths meet stays at or above its min in
    /// each requested resource they free; at a leaf that preempts by priority, also without
    /// its jobs of lower priority than a job taken from it, which that job, back in its queue,
    /// could preempt for a place within the min: R5), with every node on this job's side
    /// below there within its min after admitting it. Searched exhaustively; `None` when there
    /// is none.
    pub fn reclaimable(&self, job: usize, admitted: &[usize]) -> Option<Vec<usize>> {
        let t = self.tree.as_ref()?;
        let leaf = self.leaf(job)?;
        if !self.lower_in_leaf(job).is_empty() || self.head(&self.class(job)) != Some(job) {
            return None;
        }
        let none = BTreeSet::new();
        let d = &self.jobs[job].charge;
        let requested: Vec<&String> = d
            .iter()
            .filter(|(r, x)| *r != PODS && *r != MAX_JOBS && **x > 0)
            .map(|(r, _)| r)
            .collect();
        let ul = self.used(leaf, &none);
        if !requested
            .iter()
            .all(|r| get(&ul, r) + get(d, r) <= self.min(leaf, r))
        {
            return None;
        }
        let others: Vec<usize> = admitted
            .iter()
            .copied()
            .filter(|v| self.leaf(*v).is_some_and(|l| l != leaf))
            .filter(|v| requested.iter().any(|r| get(&self.jobs[*v].charge, r) > 0))
            .collect();
        if others.len() > 10 {
            return None;
        }
        let up = path_up(t, leaf);
        let ok = |s: &BTreeSet<usize>| -> bool {
            for &v in s {
                let Some(vl) = self.leaf(v) else { return false };
                let vup = path_up(t, vl);
                let Some(vi) = vup.iter().position(|n| up.contains(n)) else {
                    return false;
                };
                let Some(ji) = up.iter().position(|n| *n == vup[vi]) else {
                    return false;
                };
                for &n in &vup[..vi] {
                    let mut taken = Amounts::new();
                    for &o in s {
                        if self.leaf(o).is_some_and(|ol| path_up(t, ol).contains(&n)) {
                            add(&mut taken, &self.jobs[o].charge, 1);
                        }
                    }
                    if n == vl {
                        // R5: what v could preempt to come back within the min.
                        for o in self.lower_in_leaf(v) {
                            if !s.contains(&o) {
                                add(&mut taken, &self.jobs[o].charge, 1);
                            }
                        }
                    }
                    let u = self.used(n, &none);
                    if requested
                        .iter()
                        .any(|r| get(&taken, r) > 0 && get(&u, r) - get(&taken, r) < self.min(n, r))
                    {
                        return false;
                    }
                }
                for &n in &up[..ji] {
                    let u = self.used(n, &none);
                    if requested
                        .iter()
                        .any(|r| get(&u, r) + get(d, r) > self.min(n, r))
                    {
                        return false;
                    }
                }
            }
            self.fits_now(job, s)
        };
        for (i, &a) in others.iter().enumerate() {
            if ok(&[a].into()) {
                return Some(vec![a]);
            }
            for &b in &others[i + 1..] {
                if ok(&[a, b].into()) {
                    return Some(vec![a, b]);
                }
            }
        }
        None
    }
}

/// Node indices from `leaf` to the root.
pub fn path_up(t: &QuotaTree, leaf: usize) -> Vec<usize> {
    let mut out = vec![leaf];
    let mut cur = leaf;
    while let Some(p) = t.nodes[cur].parent {
        out.push(p);
        cur = p;
    }
    out
}

/// Exhaustive search: pods of group `g` from node position `pos` on, `left` of them (`left` 0:
/// start the group).
fn place(
    groups: &[(u32, Amounts, Constraints)],
    elig: &[Vec<usize>],
    g: usize,
    pos: usize,
    placed: u32,
    free: &mut [Amounts],
    plan: &mut [BTreeMap<usize, u32>],
) -> bool {
    if g == groups.len() {
        return true;
    }
    let (k, d, _) = &groups[g];
    if placed == *k {
        return place(groups, elig, g + 1, 0, 0, free, plan);
    }
    if pos == elig[g].len() {
        return false;
    }
    let ni = elig[g][pos];
    // How many more of this group's pods node `ni` takes: from the most it can down to none.
    let mut most = k - placed;
    while most > 0
        && !d
            .iter()
            .all(|(r, x)| get(&free[ni], r) >= x * i128::from(most))
    {
        most -= 1;
    }
    for n in (0..=most).rev() {
        if n > 0 {
            add(&mut free[ni], d, -i128::from(n));
            *plan[g].entry(ni).or_insert(0) += n;
        }
        if place(groups, elig, g, pos + 1, placed + n, free, plan) {
            return true;
        }
        if n > 0 {
            add(&mut free[ni], d, i128::from(n));
            let e = plan[g].entry(ni).or_insert(0);
            *e -= n;
            if *e == 0 {
                plan[g].remove(&ni);
            }
        }
    }
    false
}

#[path = "reference_cycle.rs"]
mod cycle;
#[path = "reference_fair.rs"]
mod fair;
