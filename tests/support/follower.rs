//! The differential test's follower: runs a scenario through `muster sim`'s own driver (the
//! optimized `Scheduler`, with its memos, skipped visits and incremental state) and, cycle by
//! cycle, through the reference scheduler (reference.rs), which must make the same decisions
//! (admit where, preempt whom, who waits) and reach the same state; and checks the properties
//! of reclaim on every run (see `check_cycle` and `check_instant`).

use std::collections::{BTreeMap, BTreeSet};

use muster::quota::QuotaTree;
use muster::scheduler::{Decision, JobState, Scheduler};
use muster::sim::{self, Progress};
use muster::workload::{Workload, interpret};

use super::reference::{Decided, Reference, State};

/// What a run saw, summed over all runs (so that a generator that stopped exercising reclaim
/// fails the test instead of passing it quietly).
#[derive(Default, Debug)]
pub struct Seen {
    pub cycles: u64,
    pub admits: u64,
    pub reclaims: u64,
    pub within_queue: u64,
    pub waits_at_end: u64,
    pub changes: u64,
    /// Admissions the fair order made out of queue order (A7).
    pub fair_admits: u64,
    /// Jobs admitted by preemption for fairness (F1–F5).
    pub fair_preemptions: u64,
}

/// A scheduled change as the follower applies it: at, new tree, added or replaced member,
/// (member, reachable).
type Change = (
    u64,
    Option<serde_json::Value>,
    Option<sim::ClusterSpec>,
    Option<(String, bool)>,
);

/// A job's plan: per member, the pods of each group on each node.
type Plans = BTreeMap<usize, Vec<(String, Vec<BTreeMap<String, u32>>)>>;

/// Follows `muster sim`'s run with the reference, cycle by cycle.
struct Follower {
    /// Per scenario job: when it is submitted and how long it runs (ms).
    times: Vec<(u64, u64)>,
    workloads: Vec<Workload>,
    /// Scenario jobs in submission order (time, then file order).
    order: Vec<usize>,
    next: usize,
    next_change: usize,
    changes: Vec<Change>,
    reference: Reference,
    /// Scenario job → the reference's (and the core's) job id.
    ids: Vec<Option<usize>>,
    by_id: BTreeMap<usize, usize>,
    runs: Vec<u32>,
    finishes: BTreeSet<(u64, usize, u32)>,
    last_now: Option<u64>,
    failure: Option<String>,
    seen: Seen,
    /// (victim, preemptor) of every reclaim and preemption by priority since a job last ended
    /// or the tree or a member last changed.
    preempted_by: BTreeSet<(usize, usize)>,
    /// (victim, preemptor) of every preemption of the instant under way, fairness included.
    preempted_now: BTreeSet<(usize, usize)>,
}

impl Follower {
    fn new(sc: &sim::Scenario) -> Follower {
        let tree = sc
            .quota
            .as_ref()
            .map(|q| QuotaTree::parse(q).expect("generated trees are valid"));
        let mut reference = Reference::new(tree, sc.priority_classes.clone());
        for c in sim::cluster_infos(sc) {
            reference.set_cluster(&c);
        }
        for c in &sc.clusters {
            if !c.reachable {
                reference.set_reachable(&c.name, false);
            }
        }
        let workloads: Vec<Workload> = sc
            .jobs
            .iter()
            .map(|j| interpret(&j.manifest.value()).expect("generated manifests are valid"))
            .collect();
        let mut order: Vec<usize> = (0..sc.jobs.len()).collect();
        order.sort_by_key(|&i| (sc.jobs[i].at, i));
        Follower {
            times: sc.jobs.iter().map(|j| (j.at, j.run_for)).collect(),
            workloads,
            order,
            next: 0,
            next_change: 0,
            changes: {
                let mut v: Vec<_> = sc
                    .changes
                    .iter()
                    .map(|c| {
                        let r = c
                            .reachable
                            .as_ref()
                            .map(|r| (r.cluster.clone(), r.reachable));
                        (c.at, c.quota.clone(), c.cluster.clone(), r)
                    })
                    .collect();
                v.sort_by_key(|c| c.0);
                v
            },
            reference,
            ids: vec![None; sc.jobs.len()],
            by_id: BTreeMap::new(),
            runs: vec![0; sc.jobs.len()],
            finishes: BTreeSet::new(),
            last_now: None,
            failure: None,
            preempted_by: BTreeSet::new(),
            preempted_now: BTreeSet::new(),
            seen: Seen::default(),
        }
    }

    /// Completions, then changes, then submissions at or before `now`, as the simulator takes
    /// them.
    fn events_until(&mut self, now: u64) {
        while let Some(&(t, i, run)) = self.finishes.first() {
            if t > now {
                break;
            }
            self.finishes.pop_first();
            if let Some(id) = self.ids[i]
                && self.runs[i] == run
                && matches!(self.reference.jobs[id].state, State::Admitted { .. })
            {
                self.reference.finish(id);
                // Usage changed: a victim may now be within its min and reclaim its place.
                self.preempted_by.clear();
            }
        }
        while let Some((at, quota, cluster, reachable)) = self.changes.get(self.next_change) {
            if *at > now {
                break;
            }
            self.next_change += 1;
            self.seen.changes += 1;
            self.preempted_by.clear();
            let r = &mut self.reference;
            if let Some(q) = quota {
                let empty = q.is_null() || q.as_object().is_some_and(|m| m.is_empty());
                r.set_tree((!empty).then(|| QuotaTree::parse(q).expect("checked by the sim")));
            }
            if let Some(c) = cluster {
                let replaced = r.clusters.iter().any(|m| m.name == c.name);
                let info = sim::cluster_info(c);
                r.set_cluster(&info);
                if replaced {
                    for n in &info.nodes {
                        r.set_external(&c.name, &n.name, &Default::default());
                    }
                }
                if replaced || !c.reachable {
                    r.set_reachable(&c.name, c.reachable);
                }
            }
            if let Some((name, up)) = reachable {
                r.set_reachable(name, *up);
            }
        }
        while let Some(&i) = self.order.get(self.next) {
            let at = self.times[i].0;
            if at > now {
                break;
            }
            self.next += 1;
            if let Some(id) = self.reference.submit(self.workloads[i].clone(), at) {
                self.ids[i] = Some(id);
                self.by_id.insert(id, i);
            }
        }
    }

    fn step(&mut self, now: u64, decisions: &[Decision], sched: &Scheduler) -> Result<(), String> {
        if self.last_now != Some(now) {
            if self.last_now.is_some() {
                self.check_instant()?;
            }
            self.last_now = Some(now);
            self.preempted_now.clear();
            self.events_until(now);
        }
        self.seen.cycles += 1;
        // The core's plans, per job, in the order it admitted.
        let mut plans: Plans = BTreeMap::new();
        let mut theirs = Vec::new();
        for d in decisions {
            match d {
                Decision::Admit {
                    job,
                    cluster,
                    placement,
                    ..
                } => {
                    let c = sched
                        .clusters()
                        .iter()
                        .find(|c| c.name == *cluster)
                        .ok_or("an admission to a member the core does not know")?;
                    let plan = placement
                        .groups
                        .iter()
                        .map(|nodes| {
                            let mut m: BTreeMap<String, u32> = BTreeMap::new();
                            for &(n, k) in nodes {
                                *m.entry(c.nodes[n].name.clone()).or_insert(0) += k;
                            }
                            m
                        })
                        .collect();
                    plans.entry(*job).or_default().push((cluster.clone(), plan));
                    theirs.push(Decided::Admit {
                        job: *job,
                        cluster: cluster.clone(),
                    });
                }
                Decision::Preempt { job, by, .. } => {
                    theirs.push(Decided::Preempt { job: *job, by: *by })
                }
                Decision::Wait { .. } => {}
            }
        }
        let before: BTreeSet<usize> = (0..self.reference.jobs.len())
            .filter(|&j| matches!(self.reference.jobs[j].state, State::Admitted { .. }))
            .collect();
        let mut lookup = |job: usize, cluster: &str| {
            let v = plans.get_mut(&job)?;
            if v.first().is_some_and(|(c, _)| c == cluster) {
                Some(v.remove(0).1)
            } else {
                None
            }
        };
        let ours = self.reference.cycle(&mut lookup).map_err(|e| {
            format!(
                "{e}\n  core decided:   {}",
                self.fmt(&theirs, |j| self.reference.jobs[j].label.clone())
            )
        })?;
        if ours != theirs {
            return Err(format!(
                "decisions differ\n  core:      {}\n  reference: {}",
                self.fmt(&theirs, |j| self.reference.jobs[j].label.clone()),
                self.fmt(&ours, |j| self.reference.jobs[j].label.clone())
            ));
        }
        self.compare_states(sched)?;
        self.check_cycle(&ours, &before)?;
        for d in &ours {
            if let Decided::Preempt { job, by } = d {
                // The cycle detector: no job takes the place of one that took its own,
                // directly or round any number of others: within an instant (nothing changed
                // but the decisions), whatever the preemptions; and among reclaims and
                // preemptions by priority, since a job last ended or the tree or a member
                // last changed (an end moves usage: a victim may then be within its min and
                // reclaim its place; preemption for fairness follows the shares, which any
                // admission moves, so it is held to the instant).
                let fair = self
                    .reference
                    .reclaims
                    .iter()
                    .any(|c| c.fair && c.by == *by && c.victims.contains(job));
                let cycle = self
                    .took_place_of(&self.preempted_now, *job, *by)
                    .or_else(|| {
                        (!fair)
                            .then(|| self.took_place_of(&self.preempted_by, *job, *by))
                            .flatten()
                    });
                if let Some(path) = cycle {
                    let r = &self.reference;
                    let names: Vec<String> =
                        path.iter().map(|&j| r.jobs[j].label.clone()).collect();
                    return Err(format!(
                        "property: {} preempted for {}, which took the place of {} before: a preemption cycle ({})",
                        r.jobs[*job].label,
                        r.jobs[*by].label,
                        r.jobs[*job].label,
                        names.join(" took the place of ")
                    ));
                }
                self.preempted_now.insert((*job, *by));
                if !fair {
                    self.preempted_by.insert((*job, *by));
                }
            }
        }
        for d in &ours {
            match d {
                Decided::Admit { job, .. } => {
                    self.seen.admits += 1;
                    let i = self.by_id[job];
                    self.runs[i] += 1;
                    let end = now + self.times[i].1;
                    self.finishes.insert((end, i, self.runs[i]));
                }
                Decided::Preempt { job, by } => {
                    let i = self.by_id[job];
                    self.runs[i] += 1;
                    if self.reference.leaf(*job) == self.reference.leaf(*by) {
                        self.seen.within_queue += 1;
                    } else {
                        self.seen.reclaims += 1;
                    }
                }
            }
        }
        Ok(())
    }

    /// The chain of earlier preemptions among `edges` ((victim, preemptor) pairs), if any, by
    /// which `victim` took the place of `by` (`victim` preempted a job that ... preempted
    /// `by`): `[victim, ..., by]`.
    fn took_place_of(
        &self,
        edges: &BTreeSet<(usize, usize)>,
        victim: usize,
        by: usize,
    ) -> Option<Vec<usize>> {
        let mut came_from: BTreeMap<usize, usize> = BTreeMap::new();
        let mut todo = std::collections::VecDeque::from([victim]);
        while let Some(j) = todo.pop_front() {
            if j == by {
                let mut path = vec![by];
                let mut cur = by;
                while let Some(&prev) = came_from.get(&cur) {
                    path.push(prev);
                    cur = prev;
                }
                path.reverse();
                return Some(path);
            }
            // The jobs `j` preempted: (their id, j) pairs.
            for &(v, _) in edges.iter().filter(|(_, p)| *p == j) {
                if v != victim && !came_from.contains_key(&v) {
                    came_from.insert(v, j);
                    todo.push_back(v);
                }
            }
        }
        None
    }

    fn fmt(&self, ds: &[Decided], label: impl Fn(usize) -> String) -> String {
        if ds.is_empty() {
            return "nothing".into();
        }
        ds.iter()
            .map(|d| match d {
                Decided::Admit { job, cluster } => format!("admit {} on {cluster}", label(*job)),
                Decided::Preempt { job, by } => {
                    format!("preempt {} for {}", label(*job), label(*by))
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn compare_states(&self, sched: &Scheduler) -> Result<(), String> {
        for (id, j) in self.reference.jobs.iter().enumerate() {
            if sched.job_label(id) != j.label {
                return Err(format!(
                    "job {id} is {} in the core, {} in the reference",
                    sched.job_label(id),
                    j.label
                ));
            }
            let core = match sched.state(id) {
                JobState::Pending => "Pending".to_string(),
                JobState::Inadmissible(_) => "Inadmissible".to_string(),
                JobState::Admitted { cluster, .. } => {
                    format!("Admitted on {}", sched.clusters()[*cluster].name)
                }
                JobState::Finished => "Finished".to_string(),
            };
            let ours = match &j.state {
                State::Pending => "Pending".to_string(),
                State::Inadmissible => "Inadmissible".to_string(),
                State::Admitted { cluster, .. } => {
                    format!("Admitted on {}", self.reference.clusters[*cluster].name)
                }
                State::Finished => "Finished".to_string(),
            };
            if core != ours {
                return Err(format!(
                    "{}: {core} in the core, {ours} in the reference",
                    j.label
                ));
            }
        }
        Ok(())
    }

    /// Properties of one cycle's decisions:
    /// - no preemption without its preemptor admitted in the same cycle;
    /// - no victim of another leaf taken while its leaf is at or below its min in a resource
    ///   being reclaimed that it asks (walking the decisions in order from the state before).
    fn check_cycle(&self, ds: &[Decided], before: &BTreeSet<usize>) -> Result<(), String> {
        let r = &self.reference;
        let label = |j: usize| r.jobs[j].label.clone();
        for (i, d) in ds.iter().enumerate() {
            if let Decided::Preempt { job, by } = d
                && !ds[i..]
                    .iter()
                    .any(|a| matches!(a, Decided::Admit { job: x, .. } if x == by))
            {
                return Err(format!(
                    "property: {} preempted for {}, which was not admitted",
                    label(*job),
                    label(*by)
                ));
            }
        }
        let mut set = before.clone();
        for d in ds {
            match d {
                Decided::Admit { job, .. } => {
                    set.insert(*job);
                }
                Decided::Preempt { job, by } => {
                    let vleaf = r.leaf(*job);
                    if let Some(vl) = vleaf
                        && vleaf != r.leaf(*by)
                    {
                        let short = r
                            .reclaims
                            .iter()
                            .find(|c| c.by == *by && c.victims.contains(job))
                            .map(|c| c.short.clone())
                            .unwrap_or_default();
                        let mut used: BTreeMap<&str, i128> = BTreeMap::new();
                        for &j in set.iter().filter(|&&j| r.leaf(j) == Some(vl)) {
                            for (res, x) in &r.jobs[j].charge {
                                *used.entry(res).or_insert(0) += x;
                            }
                        }
                        for res in short
                            .iter()
                            .filter(|s| r.jobs[*job].charge.get(*s).is_some_and(|x| *x > 0))
                        {
                            let u = used.get(res.as_str()).copied().unwrap_or(0);
                            if u <= r.min(vl, res) {
                                return Err(format!(
                                    "property: {} taken for {} while its leaf uses {u} of {res}, at or below its min {}",
                                    label(*job),
                                    label(*by),
                                    r.min(vl, res)
                                ));
                            }
                        }
                    }
                    set.remove(job);
                }
            }
        }
        Ok(())
    }

    /// Properties of the state an instant ends in:
    /// - no job waits while nothing runs and a reachable member could hold it now (unless it
    ///   waits behind the head of a StrictFIFO queue, as that strategy says);
    /// - a job within its leaf's min, at the head of its class, that would run with some
    ///   borrowed capacity of other leaves taken back (at most two of their jobs, each leaf
    ///   and its side left at or above its min, this job's side within its min), does not
    ///   wait: it was admitted by reclaim at that instant.
    fn check_instant(&mut self) -> Result<(), String> {
        let r = &self.reference;
        let admitted: Vec<usize> = (0..r.jobs.len())
            .filter(|&j| matches!(r.jobs[j].state, State::Admitted { .. }))
            .collect();
        let pending: Vec<usize> = (0..r.jobs.len())
            .filter(|&j| r.jobs[j].state == State::Pending)
            .collect();
        for &j in &pending {
            if admitted.is_empty() && !r.behind_strict_head(j) && r.fits_now(j, &BTreeSet::new()) {
                return Err(format!(
                    "property: {} waits while nothing runs and a member could hold it",
                    r.jobs[j].label
                ));
            }
            if let Some(s) = r.reclaimable(j, &admitted) {
                return Err(format!(
                    "property: {} is within its leaf's min and would run with {} taken back from what their leaves borrow, but waits",
                    r.jobs[j].label,
                    s.iter()
                        .map(|v| r.jobs[*v].label.clone())
                        .collect::<Vec<_>>()
                        .join(" and ")
                ));
            }
        }
        Ok(())
    }
}

impl Progress for Follower {
    fn cycled(&mut self, now_ms: u64, decisions: &[Decision], sched: &Scheduler) {
        if self.failure.is_none()
            && let Err(e) = self.step(now_ms, decisions, sched)
        {
            self.failure = Some(format!("at {}s: {e}", now_ms / 1000));
            // Stop the run here: after a failure (a ping-pong, say) it may never end.
            std::panic::panic_any(Abort);
        }
    }
}

/// The payload that stops a run at its first failure.
struct Abort;

/// Panics carrying [`Abort`] print nothing (the failure is reported by the test); others as
/// before.
fn quiet_aborts() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let before = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !info.payload().is::<Abort>() {
                before(info);
            }
        }));
    });
}

/// Runs one scenario through `muster sim`'s driver and the reference, adding what it saw to
/// `seen`; the failure, if any.
pub fn run_scenario(name: &str, sc: &sim::Scenario, seen: &mut Seen) -> Option<String> {
    let mut f = Follower::new(sc);
    quiet_aborts();
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sim::run(name, sc, &mut f)));
    match ran {
        Ok(Err(e)) => return Some(format!("muster sim refused it: {e}")),
        Ok(Ok(_)) => {}
        Err(p) if p.is::<Abort>() => {}
        Err(p) => std::panic::resume_unwind(p),
    }
    if f.failure.is_none()
        && let Err(e) = f.check_instant()
    {
        f.failure = Some(format!("at the end: {e}"));
    }
    seen.cycles += f.seen.cycles;
    seen.admits += f.seen.admits;
    seen.reclaims += f.seen.reclaims;
    seen.within_queue += f.seen.within_queue;
    seen.changes += f.seen.changes;
    seen.fair_admits += f.reference.fair_admits;
    seen.fair_preemptions += f.reference.fair_preemptions;
    seen.waits_at_end += f
        .reference
        .jobs
        .iter()
        .filter(|j| j.state == State::Pending)
        .count() as u64;
    f.failure
}
