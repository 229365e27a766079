//! The admission cycle: queued jobs, quota and the fleet in; admit / preempt / wait decisions out.
//!
//! Owns the scheduler's state (jobs, queues, quota usage, reservations on member nodes), its
//! inputs and its queries. A job's path through it: `intake` (queue, class, shape,
//! admissibility), `wake` (which classes a pass visits), `cycle` (the pass), `fit` (the member),
//! `reclaim` (victims), `reserve` (pods on nodes, quota charged), `explain` and `view` (read).
//! Pure: no I/O, no clock, no async; time and identity arrive as plain values from a driver (the
//! simulator or the controller), which applies the decisions.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use crate::estimate::{Placement, PodGroup};
use crate::fleet::{Cluster, ClusterInfo, Needs};
use crate::quantity::ResourceList;
use crate::queue::{JobOrder, Queues};
use crate::quota::{QuotaState, QuotaTree, Strategy};
use crate::resources::{Demand, MAX_JOBS, PODS, Res, ResourceTable};
use crate::workload::{ClusterRestriction, Workload};

mod classset;
mod cycle;
pub mod explain;
mod fair;
mod fairness;
mod fit;
mod hold;
mod intake;
mod reclaim;
mod reserve;
#[cfg(test)]
mod serves_tests;
mod short;
mod sorted;
mod trial;
pub mod view;
mod wake;

pub type JobId = usize;
/// Pods per node per component name: `{component: {node: pods}}`.
pub type Plan = BTreeMap<String, BTreeMap<String, u32>>;
pub type ClassId = usize;
type ShapeId = usize;

/// What a cycle decided.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// Reserve `placement` on `cluster` and dispatch the job there.
    Admit {
        job: JobId,
        cluster: String,
        placement: Placement,
        /// `{node: pods}`.
        nodes: BTreeMap<String, u32>,
    },
    /// Take `job` back from its cluster and requeue it, so that `by` can run.
    Preempt {
        job: JobId,
        by: JobId,
        reason: String,
    },
    /// The head of a queue (and the jobs behind it with the same needs) keeps waiting.
    Wait { job: JobId, reason: String },
}

/// Where a job stands.
#[derive(Clone, Debug, PartialEq)]
pub enum JobState {
    Pending,
    /// Can never run as written (above a max, no node could ever hold it, unknown priority).
    Inadmissible(String),
    Admitted {
        cluster: usize,
        placement: Placement,
    },
    Finished,
}

/// What `submit` found.
#[derive(Clone, Debug, PartialEq)]
pub enum Submitted {
    Queued(JobId),
    Inadmissible(JobId, String),
    /// Outside muster's responsibility (namespace not in the quota tree).
    Ignored(String),
}

#[derive(Clone)]
struct Job {
    namespace: String,
    name: String,
    shape: ShapeId,
    queue: usize,
    class: ClassId,
    order: JobOrder,
    priority: i32,
    priority_classes: BTreeSet<String>,
    state: JobState,
    /// Cycle at which it last entered its queue.
    enqueued_cycle: u64,
    admitted_seq: u64,
    last_wait: Option<String>,
    preemptions: u32,
}

#[derive(Clone)]
struct Shape {
    groups: Vec<PodGroup>,
    /// Sum over pods, plus `pods` and `kube-queue/max-jobs: 1`: what quota is charged.
    quota_demand: Demand,
    /// The resources numbered below 64 that `quota_demand` asks for, one bit each
    /// ([`Scheduler::asks_any`]).
    asks: u64,
    candidates: ClusterRestriction,
    /// What a member must serve to create the job.
    needs: Needs,
    /// The requested resource scarcest in the fleet (cluster choice key).
    key_res: Res,
    /// The fit memos of its pods ([`fit::FitMemo`]), shared with shapes of the same pods.
    fit: fit::FitId,
    /// The fleet version at which the shape last fit nowhere, and why.
    nowhere: Option<(u64, String)>,
    /// The fleet version at which [`Scheduler::fleet_short`] was last read, and what it gave:
    /// a function of the shape and the fleet alone, so the same while the fleet is.
    fleet_short: Option<(u64, Vec<Res>)>,
    /// Per member (by index): its version when last read, which of the shape's requested
    /// resources were read then (bit i for the i-th), and which of those it had enough of
    /// ([`Scheduler::fleet_short`]).
    enough: Vec<Option<(u64, u64, u64)>>,
}

#[derive(Clone)]
struct Class {
    jobs: BTreeSet<(JobOrder, JobId)>,
    reason: Option<String>,
    reason_cycle: u64,
    /// The job whose visit gave `reason`, when it waited for the fleet (see
    /// [`Scheduler::certain_to_wait`]).
    reason_job: Option<JobId>,
    /// The job whose visit gave `reason`, and what it was short of, when it waited over a max
    /// and could not reclaim (see [`Scheduler::same_quota_wait`]).
    over_max: Option<(JobId, crate::quota::Shortfall)>,
    /// The head whose last visit found it may preempt its queue's jobs of lower priority (R2,
    /// R8) but no member where they and the borrowers gone let it fit: while it stays the
    /// head and waits, its queue's jobs of lower priority are held (A8,
    /// [`Scheduler::holder`]).
    holds: Option<JobId>,
    dirty: bool,
    /// Per cluster: (cluster version, candidates, failed on a necessary condition, quota usage
    /// version) of the last failed reclaim trial there.
    reclaim_failed: HashMap<usize, (u64, u64, bool, u64)>,
}

/// Scheduler settings.
#[derive(Clone, Debug, Default)]
pub struct Config {
    /// Without a quota tree, every namespace is its own queue; this picks their strategy.
    pub default_strategy: Strategy,
    /// For tests: every pass wakes every class with a waiting job, as the reference scheduler
    /// visits every head, instead of the classes whose situation changed. The moves (admit,
    /// preempt) must be those of a normal run: a class left asleep could decide nothing, and
    /// its head changes nobody's place in the fair order (A7). Only waits are added.
    pub wake_every_class: bool,
}

/// The scheduling core's whole state.
#[derive(Clone)]
pub struct Scheduler {
    pub table: ResourceTable,
    clusters: Vec<Cluster>,
    cluster_by_name: HashMap<String, usize>,
    fleet_version: u64,
    /// Bumped whenever what the tree charges changes (an admission, a release, a new tree):
    /// a reclaim trial that failed on quota or a guard holds only while this is unchanged.
    usage_version: u64,
    quota: Option<QuotaState>,
    queues: Queues,
    priorities: BTreeMap<String, i32>,
    jobs: Vec<Job>,
    shapes: Vec<Shape>,
    shape_ids: HashMap<String, ShapeId>,
    fits: Vec<fit::FitMemo>,
    fit_ids: HashMap<String, fit::FitId>,
    classes: Vec<Class>,
    class_ids: HashMap<(usize, Option<ShapeId>), ClassId>,
    dirty: Vec<ClassId>,
    /// Preemption victims of the cycle under way, queued again when it ends.
    held: Vec<JobId>,
    /// Tree nodes below which a job was admitted by preemption for fairness in the cycle
    /// under way (F5: one per node per cycle), and the classes refused for that, woken when
    /// it ends.
    fair_used: BTreeSet<usize>,
    fair_limited: Vec<ClassId>,
    /// The classes of each queue.
    queue_classes: HashMap<usize, Vec<ClassId>>,
    /// Every class head on the tree, in fair order (A7): each subtree's first waiting head,
    /// which breaks a tie of share between siblings in a pass's round.
    heads: fair::Round,
    /// Classes whose head waits for the fleet, woken when capacity frees (and after an
    /// admission, those that quota may now move).
    fleet_blocked: classset::ClassSet,
    /// Per tree node, the classes whose head waits over a max there, woken by a release below
    /// the node.
    quota_blocked: Vec<classset::ClassSet>,
    /// Classes whose head last waited within its min (it may reclaim): a job admitted above a
    /// min anywhere may be the borrowing that makes a victim of it, or of another job on the
    /// member the head needs, so every admission that borrows wakes them.
    reclaim_blocked: HashSet<ClassId>,
    /// Classes whose head was held behind a job of its queue that may take it back (A8),
    /// woken once that hold lapses ([`Scheduler::holds_lapsed`]).
    hold_blocked: HashSet<ClassId>,
    /// Admitted jobs per quota leaf, lowest priority then most recently admitted first
    /// (preemption candidates).
    admitted_by_leaf: BTreeMap<usize, BTreeSet<(i32, Reverse<u64>, JobId)>>,
    inadmissible: BTreeSet<JobId>,
    /// Slots of finished jobs the driver forgot ([`Scheduler::forget`]), reused by submissions.
    free: BTreeSet<JobId>,
    empty_clusters: HashMap<usize, (u64, Cluster)>,
    cycle_no: u64,
    seq: u64,
    config: Config,
}

impl Scheduler {
    pub fn new(config: Config) -> Scheduler {
        Scheduler {
            table: ResourceTable::default(),
            clusters: Vec::new(),
            cluster_by_name: HashMap::new(),
            fleet_version: 1,
            usage_version: 0,
            quota: None,
            queues: Queues::default(),
            priorities: BTreeMap::new(),
            jobs: Vec::new(),
            shapes: Vec::new(),
            shape_ids: HashMap::new(),
            fits: Vec::new(),
            fit_ids: HashMap::new(),
            classes: Vec::new(),
            class_ids: HashMap::new(),
            dirty: Vec::new(),
            held: Vec::new(),
            fair_used: BTreeSet::new(),
            fair_limited: Vec::new(),
            queue_classes: HashMap::new(),
            heads: fair::Round::default(),
            fleet_blocked: classset::ClassSet::default(),
            quota_blocked: Vec::new(),
            reclaim_blocked: HashSet::new(),
            hold_blocked: HashSet::new(),
            admitted_by_leaf: BTreeMap::new(),
            inadmissible: BTreeSet::new(),
            free: BTreeSet::new(),
            empty_clusters: HashMap::new(),
            cycle_no: 0,
            seq: 0,
            config,
        }
    }

    // ----- inputs ---------------------------------------------------------------------------

    /// Adds or replaces a member cluster. Reservations on it are kept for nodes that remain.
    ///
    /// Every call is a topology change: the cluster gets a new version and topology, so fits
    /// memoized for it (and "fits nowhere" for the fleet) are recomputed. That includes a change
    /// of [`ClusterInfo::placement`] alone, which changes which plans are made there.
    pub fn set_cluster(&mut self, info: &ClusterInfo) {
        self.fleet_version += 1;
        let mut c = Cluster::new(info, &mut self.table, self.fleet_version);
        if let Some(&i) = self.cluster_by_name.get(&info.name) {
            let old = &self.clusters[i];
            for n in &mut c.nodes {
                if let Some(&oi) = old.node_index.get(&n.name) {
                    n.reserved = old.nodes[oi].reserved.clone();
                    n.external = old.nodes[oi].external.clone();
                }
            }
            c.reachable = old.reachable;
            // Placements name nodes by index: a node that moved gets its new index, one the
            // new spec leaves out is dropped from the plan (its reservation went with it).
            let remap: Vec<Option<usize>> = old
                .nodes
                .iter()
                .map(|n| c.node_index.get(&n.name).copied())
                .collect();
            if remap.iter().enumerate().any(|(oi, ni)| *ni != Some(oi)) {
                for j in &mut self.jobs {
                    if let JobState::Admitted { cluster, placement } = &mut j.state
                        && *cluster == i
                    {
                        for g in &mut placement.groups {
                            g.retain_mut(|(n, _)| match remap.get(*n).copied().flatten() {
                                Some(ni) => {
                                    *n = ni;
                                    true
                                }
                                None => false,
                            });
                        }
                    }
                }
            }
            self.clusters[i] = c;
        } else {
            self.cluster_by_name
                .insert(info.name.clone(), self.clusters.len());
            self.clusters.push(c);
        }
        self.fleet_changed();
    }

    /// Marks a member reachable or not; nothing is placed on an unreachable member.
    pub fn set_reachable(&mut self, cluster: &str, reachable: bool) {
        if let Some(&i) = self.cluster_by_name.get(cluster) {
            self.clusters[i].reachable = reachable;
            self.freed_on(i);
            self.fleet_changed();
        }
    }

    /// Sets what pods muster does not manage use on a node.
    pub fn set_external_usage(&mut self, cluster: &str, node: &str, used: &ResourceList) {
        let Some(&ci) = self.cluster_by_name.get(cluster) else {
            return;
        };
        let dense = self.table.dense(used);
        let c = &mut self.clusters[ci];
        if let Some(&ni) = c.node_index.get(node) {
            c.set_external(ni, dense);
        }
        self.freed_on(ci);
        self.capacity_freed();
    }

    /// Installs a validated quota tree (or none); usage is recomputed from admitted jobs and
    /// every job moves to the queue of its namespace's new leaf.
    pub fn set_quota_tree(&mut self, tree: Option<QuotaTree>) {
        self.quota = tree.map(|t| QuotaState::new(t, &mut self.table));
        self.usage_version += 1;
        // Every waiting job leaves its queue below and comes back (`recheck_inadmissible`)
        // under its new leaf.
        self.heads = self.fair_round();
        // Leaf indices belong to the old tree: queues get theirs again as jobs are re-homed.
        self.queues.forget_leaves();
        self.admitted_by_leaf.clear();
        for j in 0..self.jobs.len() {
            if matches!(self.jobs[j].state, JobState::Finished) {
                continue;
            }
            let pending = matches!(self.jobs[j].state, JobState::Pending);
            if pending {
                self.dequeue(j);
            }
            let ns = self.jobs[j].namespace.clone();
            let (queue, ok) = self.queue_for(&ns);
            // Outside the new tree: a queue of its namespace with no leaf, so that it is
            // charged nowhere (its old queue's name may be a leaf of the new tree).
            let queue = if ok {
                queue
            } else {
                let strategy = self.config.default_strategy;
                self.queues.get_or_add(&ns, None, strategy)
            };
            self.jobs[j].queue = queue;
            self.jobs[j].class = self.class_for(queue, self.jobs[j].shape);
            match &self.jobs[j].state {
                JobState::Admitted { .. } => {
                    // Still running: charged to its new leaf (nothing if it has none now).
                    let leaf = self.queues.leaf(self.jobs[j].queue);
                    if let (Some(q), Some(leaf)) = (self.quota.as_mut(), leaf) {
                        q.charge(leaf, &self.shapes[self.jobs[j].shape].quota_demand, 1);
                        let jb = &self.jobs[j];
                        let entry = (jb.priority, Reverse(jb.admitted_seq), j);
                        self.admitted_by_leaf.entry(leaf).or_default().insert(entry);
                    }
                }
                _ if !ok => {
                    let reason = format!("namespace {ns} is not in any leaf of the quota tree");
                    self.jobs[j].state = JobState::Inadmissible(reason);
                    self.inadmissible.insert(j);
                }
                _ => {
                    self.jobs[j].state = JobState::Inadmissible(String::new());
                    self.inadmissible.insert(j);
                }
            }
        }
        self.all_changed();
    }

    pub fn set_priority_classes(&mut self, p: BTreeMap<String, i32>) {
        self.priorities = p;
        self.all_changed();
    }

    /// Queues a workload submitted at `submitted` (any monotonic unit the driver uses).
    pub fn submit(&mut self, w: &Workload, submitted: u64) -> Submitted {
        let (queue, ok) = self.queue_for(&w.namespace);
        if !ok {
            return Submitted::Ignored(format!(
                "namespace {} is not in any leaf of the quota tree",
                w.namespace
            ));
        }
        let shape = self.shape_for(w);
        self.seq += 1;
        let class = self.class_for(queue, shape);
        let job = Job {
            namespace: w.namespace.clone(),
            name: w.name.clone(),
            shape,
            queue,
            class,
            order: JobOrder {
                priority: Reverse(0),
                submitted,
                seq: self.seq,
            },
            priority: 0,
            priority_classes: w.priority_class_names.clone(),
            state: JobState::Pending,
            enqueued_cycle: self.cycle_no,
            admitted_seq: 0,
            last_wait: None,
            preemptions: 0,
        };
        let id = match self.free.pop_first() {
            Some(id) => {
                self.jobs[id] = job;
                id
            }
            None => {
                self.jobs.push(job);
                self.jobs.len() - 1
            }
        };
        match self.admissibility(id) {
            Ok(prio) => {
                self.jobs[id].priority = prio;
                self.jobs[id].order.priority = Reverse(prio);
                self.enqueue(id);
                Submitted::Queued(id)
            }
            Err(reason) => {
                self.jobs[id].state = JobState::Inadmissible(reason.clone());
                self.jobs[id].last_wait = Some(reason.clone());
                self.inadmissible.insert(id);
                Submitted::Inadmissible(id, reason)
            }
        }
    }

    /// The job finished or was deleted: frees its quota and capacity (or leaves its queue).
    pub fn finish(&mut self, job: JobId) {
        match self.jobs[job].state {
            JobState::Admitted { .. } => self.release(job),
            JobState::Pending => self.dequeue(job),
            _ => {}
        }
        self.inadmissible.remove(&job);
        self.jobs[job].state = JobState::Finished;
        // A8: a job that left may have held its queue's jobs of lower priority.
        self.wake_lapsed_holds();
    }

    /// Forgets a finished job: its slot is reused by a later submission, so that a driver that
    /// runs for months (the controller) keeps memory bounded by the jobs it follows, not by its
    /// history. Its id must not be used again; a job that is not finished is left alone.
    pub fn forget(&mut self, job: JobId) {
        if let Some(j) = self.jobs.get_mut(job)
            && j.state == JobState::Finished
            && self.free.insert(job)
        {
            j.name = String::new();
            j.namespace = String::new();
            j.priority_classes = Default::default();
            j.last_wait = None;
        }
    }

    /// Takes an admitted job back (stuck pods, lost member) and queues it again in its original
    /// order, remembering why.
    pub fn requeue(&mut self, job: JobId, reason: &str) {
        if let JobState::Admitted { .. } = self.jobs[job].state {
            self.release(job);
            self.jobs[job].state = JobState::Pending;
            self.jobs[job].last_wait = Some(reason.to_string());
            self.enqueue(job);
        }
    }

    /// Brings back a job an earlier run admitted, from the durable record its driver kept:
    /// registered like [`Scheduler::submit`], then admitted on `cluster` with the pods planned
    /// there (`plan[component] = {node: pods}`; nodes the cluster no longer has are left out):
    /// quota charged and capacity reserved without a cycle. A cluster not known yet is added
    /// empty and unreachable until the driver describes it.
    pub fn restore(
        &mut self,
        w: &Workload,
        submitted: u64,
        cluster: &str,
        plan: &Plan,
    ) -> Submitted {
        let s = self.submit(w, submitted);
        let id = match &s {
            Submitted::Queued(id) | Submitted::Inadmissible(id, _) => *id,
            Submitted::Ignored(_) => return s,
        };
        match self.jobs[id].state {
            JobState::Pending => self.dequeue(id),
            _ => {
                self.inadmissible.remove(&id);
            }
        }
        let ci = match self.cluster_by_name.get(cluster) {
            Some(&ci) => ci,
            None => {
                self.set_cluster(&ClusterInfo {
                    name: cluster.to_string(),
                    ..ClusterInfo::default()
                });
                self.set_reachable(cluster, false);
                self.clusters.len() - 1
            }
        };
        let placement = self.placement_from(id, ci, plan);
        self.reserve(id, ci, placement);
        Submitted::Queued(id)
    }

    /// Moves an admitted job's reservation to where its pods really are (`plan` as in
    /// [`Scheduler::restore`]): once the member's scheduler has bound them, the reservation is
    /// the pods themselves, so that what the core counts matches the member exactly.
    pub fn rebind(&mut self, job: JobId, plan: &Plan) {
        let JobState::Admitted { cluster: ci, .. } = self.jobs[job].state else {
            return;
        };
        let new = self.placement_from(job, ci, plan);
        let JobState::Admitted { placement, .. } = &mut self.jobs[job].state else {
            return;
        };
        if *placement == new {
            return;
        }
        let old = std::mem::replace(placement, new.clone());
        self.reserve_nodes(job, ci, &old, -1);
        self.reserve_nodes(job, ci, &new, 1);
        self.freed_on(ci);
        self.capacity_freed();
    }

    /// Why the member an admitted job was placed on cannot create it now (what it serves
    /// changed since the admission: a training runtime edited there, a kind or a PriorityClass
    /// gone), if it cannot.
    pub fn refused_now(&self, job: JobId) -> Option<String> {
        let JobState::Admitted { cluster, .. } = &self.jobs.get(job)?.state else {
            return None;
        };
        self.refusal(self.jobs[job].shape, *cluster)
    }

    /// An admitted job's cluster and plan, per component name.
    pub fn plan(&self, job: JobId) -> Option<(&str, Plan)> {
        let JobState::Admitted {
            cluster: ci,
            placement,
        } = &self.jobs[job].state
        else {
            return None;
        };
        let c = &self.clusters[*ci];
        let shape = &self.shapes[self.jobs[job].shape];
        let mut plan = Plan::new();
        for (gi, nodes) in placement.groups.iter().enumerate() {
            let entry = plan.entry(shape.groups[gi].name.clone()).or_default();
            for &(n, k) in nodes {
                if let Some(node) = c.nodes.get(n) {
                    *entry.entry(node.name.clone()).or_insert(0) += k;
                }
            }
        }
        Some((c.name.as_str(), plan))
    }

    // ----- queries --------------------------------------------------------------------------

    pub fn state(&self, job: JobId) -> &JobState {
        &self.jobs[job].state
    }

    pub fn priority(&self, job: JobId) -> i32 {
        self.jobs[job].priority
    }

    pub fn preemptions(&self, job: JobId) -> u32 {
        self.jobs[job].preemptions
    }

    pub fn queue_name(&self, job: JobId) -> &str {
        self.queues.name(self.jobs[job].queue)
    }

    pub fn clusters(&self) -> &[Cluster] {
        &self.clusters
    }

    pub fn quota(&self) -> Option<&QuotaState> {
        self.quota.as_ref()
    }

    /// Why the job is waiting now, or last waited before it was admitted.
    pub fn reason(&self, job: JobId) -> Option<String> {
        let j = &self.jobs[job];
        match &j.state {
            JobState::Inadmissible(r) => Some(r.clone()),
            JobState::Pending => {
                let c = &self.classes[j.class];
                let head = c.jobs.iter().next().map(|(_, h)| *h);
                match (&c.reason, head) {
                    (Some(r), Some(h))
                        if h != job && self.queues.strategy(j.queue) == Strategy::StrictFIFO =>
                    {
                        Some(format!(
                            "waiting behind {} in StrictFIFO queue {}: {r}",
                            self.job_label(h),
                            self.queues.name(j.queue)
                        ))
                    }
                    (Some(r), _) if c.reason_cycle >= j.enqueued_cycle => Some(r.clone()),
                    _ => j.last_wait.clone(),
                }
            }
            _ => j.last_wait.clone(),
        }
    }

    /// Every job waiting: pending in a queue, or inadmissible as written.
    pub fn waiting(&self) -> Vec<JobId> {
        self.jobs
            .iter()
            .enumerate()
            .filter(|(id, j)| {
                matches!(j.state, JobState::Pending | JobState::Inadmissible(_))
                    && !self.free.contains(id)
            })
            .map(|(id, _)| id)
            .collect()
    }

    /// `namespace/name` of a job.
    pub fn job_label(&self, job: JobId) -> String {
        format!("{}/{}", self.jobs[job].namespace, self.jobs[job].name)
    }
}

#[cfg(test)]
mod fair_tests;
#[cfg(test)]
mod hold_tests;
#[cfg(test)]
mod pass_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tree_change_tests;
