//! `muster sim`: drives the scheduling core from a scenario file with a virtual clock.
//!
//! Owns the scenario format (clusters, quota tree, priority classes, timed job manifests, timed
//! changes), the event loop (completions, then changes, then submissions, then admission cycles
//! at each instant) and the report, and optionally the metrics a controller would record. It
//! never decides anything itself: every decision comes from [`Scheduler::cycle`].

mod changes;
mod digest;
pub mod estimates;
pub mod faults;
mod manifest;
mod report;
mod scenario;

pub use digest::TraceDigest;
pub use estimates::{Budget, EstimateReport, EstimateSummary, Estimating};
pub use manifest::Manifest;
pub use report::{
    Explained, JobReport, Report, Summary, WaitStats, estimates_line, explanations_text, secs,
    table,
};
pub use scenario::*;

/// Reads a scenario from YAML text; `file` names it in errors. Every field is checked, its
/// changes too (`changes[i]...`).
pub fn parse_scenario(file: &str, text: &str) -> Result<Scenario, ScenarioError> {
    let sc = scenario::read(file, text)?;
    changes::check(file, &sc)?;
    Ok(sc)
}

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use serde_json::Value;

use crate::metrics::{Metrics, Outcome, RequeueReason};
use crate::quantity::ResourceList;
use crate::quota::QuotaTree;
use crate::scheduler::{Config, Decision, JobId, JobState, Scheduler, Submitted};
use crate::workload::interpret_with;
use report::summarize;

/// Milliseconds as seconds, for metrics.
fn seconds(ms: u64) -> f64 {
    ms as f64 / 1000.0
}

struct SimJob {
    namespace: String,
    name: String,
    kind: String,
    at: u64,
    run_for: u64,
    /// When it last entered its queue (submission or preemption).
    queued_at: u64,
    id: Option<JobId>,
    /// Requests of all pods (for utilization).
    total: ResourceList,
    state: &'static str,
    reason: Option<String>,
    dispatched: Option<u64>,
    /// The first dispatch and its member.
    first_dispatched: Option<(u64, String)>,
    finished: Option<u64>,
    cluster: Option<String>,
    placement: BTreeMap<String, u32>,
    /// Bumped on each dispatch so that a preempted run's completion is ignored.
    run: u32,
}

#[derive(PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// Completions come before changes (in file order), then submissions, at the same instant.
    Finish {
        job: usize,
        run: u32,
    },
    Change {
        index: usize,
    },
    Submit {
        job: usize,
    },
}

/// Hooks for progress output (the CLI prints to stderr on a terminal).
pub trait Progress {
    fn tick(&mut self, _done: usize, _total: usize, _now_ms: u64) {}
    /// After each admission cycle at virtual time `now_ms`: what it decided, and the core as
    /// it left it (a test's reference scheduler follows the run this way).
    fn cycled(&mut self, _now_ms: u64, _decisions: &[Decision], _sched: &Scheduler) {}
    /// The core's settings for the run (a test sets [`Config::wake_every_class`]).
    fn config(&self) -> Config {
        Config::default()
    }
}

impl Progress for () {}

/// Runs a scenario to the end. Errors only for an invalid quota tree or change.
pub fn run(
    file: &str,
    sc: &Scenario,
    progress: &mut dyn Progress,
) -> Result<Report, ScenarioError> {
    run_inner(file, sc, progress, None, None, &[], &Estimating::default())
}

/// Runs a scenario to the end, explaining the jobs named in `explain` (`namespace/name`) when
/// they first wait, when they are dispatched and at the end. Errors for an invalid quota tree
/// and for a name that is not a job of the scenario.
pub fn run_explained(
    file: &str,
    sc: &Scenario,
    progress: &mut dyn Progress,
    explain: &[String],
) -> Result<Report, ScenarioError> {
    run_inner(
        file,
        sc,
        progress,
        None,
        None,
        explain,
        &Estimating::default(),
    )
}

/// Like [`run`], and records in `metrics` what a controller would: the counters of every
/// submission, rejection, admission (admitted and dispatched at once), preemption (and its
/// requeue) and completion (succeeded), admission wait times in virtual seconds, the wall time
/// of each admission cycle, and the gauges of the state at the end. With `at_ms`, recording
/// stops at that virtual time instead: the gauges show the state after every event up to it
/// and the counters what happened until then, as a scrape at that moment would.
pub fn run_with_metrics(
    file: &str,
    sc: &Scenario,
    progress: &mut dyn Progress,
    metrics: &Metrics,
    at_ms: Option<u64>,
) -> Result<Report, ScenarioError> {
    run_inner(
        file,
        sc,
        progress,
        Some(metrics),
        at_ms,
        &[],
        &Estimating::default(),
    )
}

/// Everything: metrics (when given), explanations and start-time estimates.
pub fn run_full(
    file: &str,
    sc: &Scenario,
    progress: &mut dyn Progress,
    metrics: Option<&Metrics>,
    at_ms: Option<u64>,
    explain: &[String],
    estimating: &Estimating,
) -> Result<Report, ScenarioError> {
    run_inner(file, sc, progress, metrics, at_ms, explain, estimating)
}

/// Runs a scenario with start-time estimates (and nothing else recorded).
pub fn run_estimated(
    file: &str,
    sc: &Scenario,
    progress: &mut dyn Progress,
    estimating: &Estimating,
) -> Result<Report, ScenarioError> {
    run_inner(file, sc, progress, None, None, &[], estimating)
}

fn run_inner(
    file: &str,
    sc: &Scenario,
    progress: &mut dyn Progress,
    mut rec: Option<&Metrics>,
    at_ms: Option<u64>,
    explain: &[String],
    estimating: &Estimating,
) -> Result<Report, ScenarioError> {
    let mut sched = Scheduler::new(progress.config());
    let mut warnings = Vec::new();
    if let Some(q) = sc.quota.as_ref().filter(|q| !is_empty(q)) {
        let tree = QuotaTree::parse(q).map_err(|problems| ScenarioError::Quota {
            file: file.into(),
            problems,
        })?;
        warnings = tree.warnings.iter().map(|p| p.to_string()).collect();
        sched.set_quota_tree(Some(tree));
    }
    let mut changes = changes::check(file, sc)?;
    warnings.append(&mut changes.warnings);
    sched.set_priority_classes(sc.priority_classes.clone());
    apply_fleet(&mut sched, sc);
    let mut jobs: Vec<SimJob> = Vec::with_capacity(sc.jobs.len());
    let runtimes = scenario::runtimes(sc);
    let mut events: BinaryHeap<Reverse<(u64, Event)>> = BinaryHeap::new();
    for (i, j) in sc.jobs.iter().enumerate() {
        let (kind, namespace, name) = j.manifest.identity();
        jobs.push(SimJob {
            namespace: namespace.unwrap_or_else(|| "default".into()),
            name: name.unwrap_or_else(|| format!("jobs[{i}]")),
            kind: kind.unwrap_or_default(),
            at: j.at,
            run_for: j.run_for,
            queued_at: j.at,
            id: None,
            total: ResourceList::new(),
            state: "Pending",
            reason: None,
            dispatched: None,
            first_dispatched: None,
            finished: None,
            cluster: None,
            placement: BTreeMap::new(),
            run: 0,
        });
        events.push(Reverse((j.at, Event::Submit { job: i })));
    }
    for (index, c) in sc.changes.iter().enumerate() {
        events.push(Reverse((c.at, Event::Change { index })));
    }
    // Jobs to explain (a name may be submitted more than once), in the order asked.
    let mut watched: Vec<usize> = Vec::new();
    for name in explain {
        let before = watched.len();
        for (i, j) in jobs.iter().enumerate() {
            if format!("{}/{}", j.namespace, j.name) == *name && !watched.contains(&i) {
                watched.push(i);
            }
        }
        if watched.len() == before {
            return Err(ScenarioError::Explain {
                file: file.into(),
                job: name.clone(),
            });
        }
    }
    let mut est = estimates::Estimator::new(estimating, jobs.len());
    let mut waited: Vec<bool> = vec![false; jobs.len()];
    let mut explained_run: Vec<u32> = vec![0; jobs.len()];
    let mut explanations: Vec<Explained> = Vec::new();
    let mut by_id: BTreeMap<JobId, usize> = BTreeMap::new();
    let mut now = 0u64;
    let mut cycles = 0u64;
    let mut dispatches = 0u64;
    let mut preemptions = 0u64;
    let mut trace = TraceDigest::default();
    let mut done_events = 0usize;
    let total_events = jobs.len() * 2 + sc.changes.len();
    // Resource-milliseconds held by running jobs, per resource.
    let mut held: BTreeMap<String, i128> = BTreeMap::new();
    while let Some(Reverse((t, _))) = events.peek() {
        now = *t;
        if let (Some(m), Some(at)) = (rec, at_ms)
            && now > at
        {
            m.observe(&sched);
            rec = None;
        }
        while let Some(Reverse((t, _))) = events.peek() {
            if *t != now {
                break;
            }
            let Some(Reverse((_, ev))) = events.pop() else {
                break;
            };
            done_events += 1;
            match ev {
                Event::Finish { job, run } => {
                    let j = &mut jobs[job];
                    if j.run != run || j.state != "Running" {
                        continue;
                    }
                    if let Some(id) = j.id {
                        if let Some(m) = rec {
                            let cluster = j.cluster.as_deref().unwrap_or_default();
                            m.finished(sched.queue_name(id), cluster, Outcome::Succeeded);
                        }
                        sched.finish(id);
                    }
                    if let Some(start) = j.dispatched {
                        est.finished(job, now - start);
                    }
                    j.state = "Finished";
                    j.finished = Some(now);
                }
                Event::Change { index } => changes.apply(index, &mut sched, now),
                Event::Submit { job } => {
                    let j = &mut jobs[job];
                    // Read into a tree now (a compact manifest), dropped once submitted.
                    let manifest = sc.jobs[job].manifest.value();
                    match interpret_with(&manifest, &runtimes) {
                        Err(e) => {
                            j.state = "Rejected";
                            j.reason = Some(e.to_string());
                            // Counted in the queue its namespace maps to; outside the tree a
                            // job is not muster's.
                            if let Some(m) = rec
                                && let Some(q) = sched.queue_of_namespace(&j.namespace)
                            {
                                m.rejected(&q);
                            }
                        }
                        Ok(w)
                            if sc.jobs[job]
                                .running
                                .as_ref()
                                .is_some_and(|r| !plan_matches(&w, &r.placement)) =>
                        {
                            j.state = "Rejected";
                            j.reason = Some(format!(
                                "running.placement must place every pod of every component ({}) on a node",
                                w.components
                                    .iter()
                                    .map(|c| format!("{}: {}", c.name, c.pods))
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ));
                        }
                        Ok(w) => {
                            j.kind = w.kind.to_string();
                            let s = match &sc.jobs[job].running {
                                Some(r) => sched.restore(&w, now, &r.cluster, &r.placement),
                                None => sched.submit(&w, now),
                            };
                            if let Submitted::Queued(id) | Submitted::Inadmissible(id, _) = &s {
                                let q = sched.queue_name(*id);
                                est.submitted(job, &w, &manifest, q);
                            }
                            match s {
                                Submitted::Queued(id) => {
                                    j.id = Some(id);
                                    by_id.insert(id, job);
                                    if let Some(m) = rec {
                                        m.submitted(sched.queue_name(id));
                                    }
                                }
                                Submitted::Inadmissible(id, r) => {
                                    if let Some(m) = rec {
                                        m.submitted(sched.queue_name(id));
                                    }
                                    j.id = Some(id);
                                    j.state = "Inadmissible";
                                    j.reason = Some(r);
                                    by_id.insert(id, job);
                                }
                                Submitted::Ignored(r) => {
                                    j.state = "Ignored";
                                    j.reason = Some(r);
                                }
                            }
                            j.total = w.total_requests();
                            // Already running: placed as recorded, ending after `runFor`.
                            if let (Some(id), Some(r)) = (j.id, &sc.jobs[job].running)
                                && matches!(sched.state(id), JobState::Admitted { .. })
                            {
                                j.state = "Running";
                                j.dispatched = Some(now);
                                j.cluster = Some(r.cluster.clone());
                                j.placement = running_nodes(&r.placement);
                                j.first_dispatched.get_or_insert((now, r.cluster.clone()));
                                j.run += 1;
                                for (res, q) in j.total.iter() {
                                    *held.entry(res.to_string()).or_default() +=
                                        q.milli() * i128::from(j.run_for);
                                }
                                events.push(Reverse((
                                    now + j.run_for,
                                    Event::Finish { job, run: j.run },
                                )));
                            }
                        }
                    }
                }
            }
        }
        // Cycles at this instant until nothing changes, as every estimate's forward run has
        // them (preemption victims get their turn in the next cycle; bounded so that a run
        // always ends). A cycle's time, for the metrics, is from the end of the last one's
        // handling here.
        let mut started = rec.map(|_| std::time::Instant::now());
        cycles += crate::forecast::settle_with(&mut sched, |sched, decisions| {
            if let (Some(m), Some(t)) = (rec, started) {
                m.cycle_duration(t.elapsed().as_secs_f64());
            }
            progress.cycled(now, &decisions, sched);
            for d in decisions {
                trace.add(now, &d);
                match d {
                    Decision::Admit {
                        job,
                        cluster,
                        nodes,
                        ..
                    } => {
                        let Some(&i) = by_id.get(&job) else { continue };
                        let j = &mut jobs[i];
                        if let Some(m) = rec {
                            let q = sched.queue_name(job);
                            m.admitted(q, &cluster);
                            m.dispatched(q, &cluster);
                            m.wait_time(q, seconds(now - j.queued_at));
                            // The member places the plan pod by pod, as the controller does.
                            if let Some((_, plan)) = sched.plan(job) {
                                m.pods_released(&cluster, released_pods(&plan));
                            }
                        }
                        j.state = "Running";
                        j.dispatched = Some(now);
                        j.first_dispatched.get_or_insert((now, cluster.clone()));
                        j.cluster = Some(cluster);
                        j.placement = nodes;
                        j.run += 1;
                        dispatches += 1;
                        for (r, q) in j.total.iter() {
                            *held.entry(r.to_string()).or_default() +=
                                q.milli() * i128::from(j.run_for);
                        }
                        events.push(Reverse((
                            now + j.run_for,
                            Event::Finish { job: i, run: j.run },
                        )));
                    }
                    Decision::Preempt { job, .. } => {
                        let Some(&i) = by_id.get(&job) else { continue };
                        let j = &mut jobs[i];
                        // Give back the part of the run that did not happen.
                        if let Some(start) = j.dispatched {
                            let unused = (start + j.run_for).saturating_sub(now);
                            for (r, q) in j.total.iter() {
                                *held.entry(r.to_string()).or_default() -=
                                    q.milli() * i128::from(unused);
                            }
                        }
                        if let Some(m) = rec {
                            let q = sched.queue_name(job);
                            m.preempted(q, j.cluster.as_deref().unwrap_or_default());
                            m.requeued(q, RequeueReason::Preempted);
                        }
                        j.state = "Pending";
                        j.queued_at = now;
                        j.cluster = None;
                        j.placement.clear();
                        preemptions += 1;
                    }
                    Decision::Wait { .. } => {}
                }
            }
            if rec.is_some() {
                started = Some(std::time::Instant::now());
            }
        });
        est.instant(&sched, &jobs, now, cycles);
        for &i in &watched {
            let j = &jobs[i];
            let Some(id) = j.id else { continue };
            let moment = match sched.state(id) {
                JobState::Pending | JobState::Inadmissible(_) if !waited[i] => {
                    waited[i] = true;
                    "waiting"
                }
                JobState::Admitted { .. } if explained_run[i] != j.run => {
                    explained_run[i] = j.run;
                    "dispatched"
                }
                _ => continue,
            };
            explanations.push(explained(&sched, j, id, now, moment));
        }
        progress.tick(done_events, total_events, now);
    }
    // Reasons and final states from the core.
    for j in &mut jobs {
        if let Some(id) = j.id {
            match sched.state(id) {
                JobState::Pending => {
                    j.state = "Pending";
                    j.reason = sched.reason(id);
                }
                JobState::Inadmissible(r) => {
                    j.state = "Inadmissible";
                    j.reason = Some(r.clone());
                }
                _ => j.reason = sched.reason(id),
            }
        }
    }
    if let Some(m) = rec {
        m.observe(&sched);
    }
    let reports: Vec<JobReport> = jobs
        .iter()
        .enumerate()
        .map(|(i, j)| JobReport {
            namespace: j.namespace.clone(),
            name: j.name.clone(),
            kind: j.kind.clone(),
            queue: j.id.map(|id| sched.queue_name(id).to_string()),
            priority: j.id.map_or(0, |id| sched.priority(id)),
            state: j.state.to_string(),
            submitted: secs(j.at),
            dispatched: j.dispatched.map_or(Value::Null, secs),
            first_dispatched: j
                .first_dispatched
                .as_ref()
                .filter(|f| Some(f.0) != j.dispatched)
                .map(|f| secs(f.0)),
            finished: j.finished.map_or(Value::Null, secs),
            cluster: j.cluster.clone(),
            placement: j.placement.clone(),
            preemptions: j.id.map_or(0, |id| sched.preemptions(id)),
            reason: j.reason.clone(),
            estimated_start: est.first[i].as_ref().map(|e| e.start.clone()),
            estimate: est.first[i].clone(),
            estimate_again: est.again[i].clone(),
        })
        .collect();
    for &i in &watched {
        let j = &jobs[i];
        match j.id {
            Some(id) => explanations.push(explained(&sched, j, id, now, "end")),
            None => {
                // Rejected or ignored: the core never saw it; the simulator says why.
                let job = format!("{}/{}", j.namespace, j.name);
                let state = j.state.to_lowercase();
                let why = j.reason.clone().unwrap_or_default();
                explanations.push(Explained {
                    summary: format!("{state}: {why}"),
                    text: format!("{job}: {state}: {why}\n"),
                    job,
                    at: secs(now),
                    moment: "end",
                    explanation: None,
                });
            }
        }
    }
    let summary = summarize(
        &mut sched,
        &jobs,
        &held,
        now,
        cycles,
        dispatches,
        preemptions,
        warnings,
        (&changes.before, changes.since),
    );
    est.end();
    let summary = Summary {
        trace,
        estimates: est.enabled().then(|| est.summary.clone()),
        ..summary
    };
    Ok(Report {
        jobs: reports,
        summary,
        explanations,
    })
}

fn explained(
    sched: &Scheduler,
    j: &SimJob,
    id: JobId,
    now: u64,
    moment: &'static str,
) -> Explained {
    let e = sched.explain(id);
    Explained {
        job: format!("{}/{}", j.namespace, j.name),
        at: secs(now),
        moment,
        summary: e.summary(),
        text: e.to_string(),
        explanation: Some(e),
    }
}

fn is_empty(v: &Value) -> bool {
    v.is_null() || v.as_object().is_some_and(|m| m.is_empty())
}

/// How many pods the controller releases onto their planned nodes when every pod of `plan`
/// appears behind its gate at once (the simulated member creates them all together).
fn released_pods(plan: &crate::placement::Plan) -> u64 {
    // A job of one pod goes pinned, without the gate: nothing to release.
    if !crate::placement::gated(plan) {
        return 0;
    }
    let pods: Vec<crate::placement::PodSeen> = plan
        .iter()
        .flat_map(|(c, nodes)| {
            let n: u32 = nodes.values().sum();
            (0..n).map(move |i| crate::placement::PodSeen {
                name: format!("{c}-{i}"),
                component: c.clone(),
                gated: true,
                ..Default::default()
            })
        })
        .collect();
    let step = crate::placement::step(
        plan,
        &Default::default(),
        &Default::default(),
        &pods,
        &Default::default(),
    );
    step.release.len() as u64
}
