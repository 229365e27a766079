//! `muster sim`: drives the scheduling core from a scenario file with a virtual clock.
//!
//! Owns the scenario format (clusters, quota tree, priority classes, timed job manifests), the
//! event loop (completions, then submissions, then one admission cycle at each instant) and the
//! report, and optionally the metrics a controller would record. It never decides anything itself:
//! every decision comes from [`Scheduler::cycle`].

pub mod estimates;
pub mod faults;

pub use estimates::{EstimateReport, Estimating};

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::fmt::Write as _;

use k8s_openapi::api::core::v1::Taint;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::fleet::{ClusterInfo, NodeInfo, PlacementMode};
use crate::metrics::{Metrics, Outcome, RequeueReason};
use crate::quantity::ResourceList;
use crate::quota::{Problem, QuotaTree};
use crate::scheduler::explain::Explanation;
use crate::scheduler::{Config, Decision, JobId, JobState, Scheduler, Submitted};
use crate::workload::interpret;

/// The scenario `muster sim` runs when no file is given.
pub const DEFAULT_SCENARIO: &str = include_str!("../examples/default.yaml");

/// A scenario file (also what `muster snapshot` writes from a live controller).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Scenario {
    pub clusters: Vec<ClusterSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota: Option<Value>,
    #[serde(default)]
    pub priority_classes: BTreeMap<String, i32>,
    #[serde(default)]
    pub jobs: Vec<JobSpec>,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClusterSpec {
    pub name: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub nodes: Vec<NodeSpec>,
    /// How the member is held to the plan: `gates` (per pod, the default) or `pinned` (by node
    /// set; only robust plans are made there).
    #[serde(default)]
    pub placement: PlacementMode,
    /// A member that does not answer: nothing new is placed there (default true).
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub reachable: bool,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NodeSpec {
    pub name: String,
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub count: u32,
    pub allocatable: ResourceList,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub unschedulable: bool,
    /// What pods muster does not manage use on the node (each node, with `count`).
    #[serde(default, skip_serializing_if = "ResourceList::is_empty")]
    pub used: ResourceList,
}

fn one() -> u32 {
    1
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

fn yes() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

fn is_false(b: &bool) -> bool {
    !*b
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct JobSpec {
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
    pub at: u64,
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
    pub run_for: u64,
    /// Already running when the scenario starts (a snapshot's running jobs): placed at `at` on
    /// this member as planned, without a cycle, and running for `runFor` from then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<RunningSpec>,
    pub manifest: Value,
}

/// Where a job already runs: the member and its plan (`{component: {node: pods}}`).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RunningSpec {
    pub cluster: String,
    #[serde(default)]
    pub placement: crate::scheduler::Plan,
}

/// Milliseconds as the shortest duration text that reads back the same (`90s`, `1h30m`, `250ms`).
pub fn format_duration(ms: u64) -> String {
    if ms == 0 {
        return "0s".into();
    }
    let mut out = String::new();
    let mut rest = ms;
    for (unit, size) in [("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)] {
        if rest >= size {
            out.push_str(&format!("{}{unit}", rest / size));
            rest %= size;
        }
    }
    out
}

fn ser_duration<S: serde::Serializer>(ms: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format_duration(*ms))
}

/// Parses `90s`, `10m`, `1h30m`, `500ms`, `2d` or a plain number of seconds into milliseconds.
pub fn parse_duration(s: &str) -> Result<u64, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err("empty duration".into());
    }
    if let Ok(secs) = t.parse::<u64>() {
        return secs
            .checked_mul(1000)
            .ok_or_else(|| format!("{s:?} is too long"));
    }
    let mut total: u64 = 0;
    let mut num = String::new();
    let mut chars = t.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            num.push(c);
            continue;
        }
        let unit = if c == 'm' && chars.peek() == Some(&'s') {
            chars.next();
            "ms".to_string()
        } else {
            c.to_string()
        };
        let n: u64 = num
            .parse()
            .map_err(|_| format!("{s:?} is not a duration (like 90s, 10m, 1h30m)"))?;
        num.clear();
        let mult = match unit.as_str() {
            "ms" => 1,
            "s" => 1000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return Err(format!("{s:?} is not a duration: unknown unit {unit:?}")),
        };
        total = n
            .checked_mul(mult)
            .and_then(|x| total.checked_add(x))
            .ok_or_else(|| format!("{s:?} is too long"))?;
    }
    if !num.is_empty() {
        return Err(format!("{s:?} is not a duration: {num} has no unit"));
    }
    Ok(total)
}

fn de_duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let v = Value::deserialize(d)?;
    let s = match v {
        Value::String(s) => s,
        Value::Number(n) => n.to_string(),
        other => {
            return Err(serde::de::Error::custom(format!(
                "expected a duration, found {other}"
            )));
        }
    };
    parse_duration(&s).map_err(serde::de::Error::custom)
}

/// A scenario that cannot be run: names the file and the field; exit code 2.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("{file}: {message}")]
    Read { file: String, message: String },
    #[error("{file}: {field}: {message}")]
    Field {
        file: String,
        field: String,
        message: String,
    },
    #[error("{file}: quota: the ElasticQuotaTree is invalid:\n{}", .problems.iter().map(|p| format!("  {p}")).collect::<Vec<_>>().join("\n"))]
    Quota {
        file: String,
        problems: Vec<Problem>,
    },
    #[error("--explain {job}: {file} has no job {job} (jobs are named NAMESPACE/NAME)")]
    Explain { file: String, job: String },
}

/// Reads a scenario from YAML text; `file` names it in errors.
pub fn parse_scenario(file: &str, text: &str) -> Result<Scenario, ScenarioError> {
    let de = serde_yaml::Deserializer::from_str(text);
    let sc: Scenario = serde_path_to_error::deserialize(de).map_err(|e| {
        let field = e.path().to_string();
        let mut message = e.inner().to_string();
        // serde_yaml starts its message with (part of) the path we already print.
        if let Some((head, rest)) = message.split_once(": ")
            && !head.is_empty()
            && field.starts_with(head)
        {
            message = rest.to_string();
        }
        if field == "." || field.is_empty() {
            ScenarioError::Read {
                file: file.into(),
                message,
            }
        } else {
            ScenarioError::Field {
                file: file.into(),
                field,
                message,
            }
        }
    })?;
    let mut seen = BTreeMap::new();
    for (i, c) in sc.clusters.iter().enumerate() {
        if let Some(j) = seen.insert(c.name.clone(), i) {
            return Err(ScenarioError::Field {
                file: file.into(),
                field: format!("clusters[{i}].name"),
                message: format!("duplicate cluster name {:?} (also clusters[{j}])", c.name),
            });
        }
        for (k, n) in c.nodes.iter().enumerate() {
            if let Some((r, _)) = n.allocatable.iter().find(|(_, q)| q.is_negative()) {
                return Err(ScenarioError::Field {
                    file: file.into(),
                    field: format!("clusters[{i}].nodes[{k}].allocatable[{r}]"),
                    message: "negative quantity".into(),
                });
            }
        }
    }
    Ok(sc)
}

/// The fleet of a scenario, nodes expanded (`count > 1` names them `name-0`, `name-1`, ...).
pub fn cluster_infos(sc: &Scenario) -> Vec<ClusterInfo> {
    sc.clusters
        .iter()
        .map(|c| ClusterInfo {
            name: c.name.clone(),
            labels: c.labels.clone(),
            nodes: c
                .nodes
                .iter()
                .flat_map(|n| {
                    (0..n.count).map(move |i| NodeInfo {
                        name: if n.count == 1 {
                            n.name.clone()
                        } else {
                            format!("{}-{i}", n.name)
                        },
                        labels: n.labels.clone(),
                        taints: n.taints.clone(),
                        allocatable: n.allocatable.clone(),
                        unschedulable: n.unschedulable,
                        ready: true,
                    })
                })
                .collect(),
            placement: c.placement,
        })
        .collect()
}

/// Tells the core the scenario's fleet: members, their nodes, what other pods use on them and
/// which members do not answer.
pub fn apply_fleet(sched: &mut Scheduler, sc: &Scenario) {
    for c in cluster_infos(sc) {
        sched.set_cluster(&c);
    }
    for c in &sc.clusters {
        for n in c.nodes.iter().filter(|n| !n.used.is_empty()) {
            for i in 0..n.count {
                let name = if n.count == 1 {
                    n.name.clone()
                } else {
                    format!("{}-{i}", n.name)
                };
                sched.set_external_usage(&c.name, &name, &n.used);
            }
        }
        if !c.reachable {
            sched.set_reachable(&c.name, false);
        }
    }
}

/// The outcome for one job.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct JobReport {
    pub namespace: String,
    pub name: String,
    pub kind: String,
    pub queue: Option<String>,
    pub priority: i32,
    /// Finished, Running, Pending, Inadmissible, Rejected, Ignored.
    pub state: String,
    pub submitted: Value,
    pub dispatched: Value,
    /// The first dispatch, for a job preempted after it (`dispatched` is the last).
    #[serde(rename = "firstDispatched", skip_serializing_if = "Option::is_none")]
    pub first_dispatched: Option<Value>,
    pub finished: Value,
    pub cluster: Option<String>,
    pub placement: BTreeMap<String, u32>,
    pub preemptions: u32,
    pub reason: Option<String>,
    /// The start forecast at submission, seconds (null when it never starts); with estimates.
    #[serde(rename = "estimatedStart", skip_serializing_if = "Option::is_none")]
    pub estimated_start: Option<Value>,
    /// That forecast in full: when made, where, what it waits for, or why never.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub estimate: Option<EstimateReport>,
    /// A second forecast made later in the wait, when asked for ([`Estimating::again_at`]).
    #[serde(rename = "estimateAgain", skip_serializing_if = "Option::is_none")]
    pub estimate_again: Option<EstimateReport>,
}

/// The whole run.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub jobs: Vec<JobReport>,
    pub summary: Summary,
    /// Explanations of the jobs asked for with `--explain`, in the order they were taken.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub explanations: Vec<Explained>,
}

/// One explanation of a job, taken at one moment of the run.
#[derive(Clone, Debug, Serialize)]
pub struct Explained {
    /// `namespace/name`.
    pub job: String,
    /// Virtual time, seconds.
    pub at: Value,
    /// `waiting` (the first instant the job is still not running after the admission cycles),
    /// `dispatched` (each instant it is dispatched), or `end`.
    pub moment: &'static str,
    /// One line, as a status `reason` field would carry it.
    pub summary: String,
    /// The multi-line explanation.
    pub text: String,
    /// The structured explanation (`null` for a job the core never saw: rejected or ignored).
    pub explanation: Option<Explanation>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub jobs: usize,
    pub finished: usize,
    pub running: usize,
    pub pending: usize,
    pub inadmissible: usize,
    pub rejected: usize,
    pub ignored: usize,
    pub dispatches: u64,
    pub preemptions: u64,
    pub cycles: u64,
    /// Virtual time of the last event, seconds.
    pub makespan: Value,
    /// Share of the fleet's allocatable held by running jobs over the makespan, per resource, %.
    pub utilization: BTreeMap<String, Value>,
    /// Wait (submission to last dispatch) quantiles per queue, seconds.
    pub wait: BTreeMap<String, WaitStats>,
    pub quota_warnings: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct WaitStats {
    pub jobs: usize,
    pub p50: Value,
    pub p90: Value,
    pub p99: Value,
    pub max: Value,
}

/// Milliseconds as seconds, for metrics.
fn seconds(ms: u64) -> f64 {
    ms as f64 / 1000.0
}

/// Milliseconds as a JSON number of seconds (integer when whole).
pub fn secs(ms: u64) -> Value {
    if ms.is_multiple_of(1000) {
        Value::from(ms / 1000)
    } else {
        serde_json::Number::from_f64(ms as f64 / 1000.0).map_or(Value::Null, Value::Number)
    }
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
    /// Completions come before submissions at the same instant.
    Finish {
        job: usize,
        run: u32,
    },
    Submit {
        job: usize,
    },
}

/// Hooks for progress output (the CLI prints to stderr on a terminal).
pub trait Progress {
    fn tick(&mut self, _done: usize, _total: usize, _now_ms: u64) {}
}

impl Progress for () {}

/// Runs a scenario to the end. Errors only for an invalid quota tree.
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
    let mut sched = Scheduler::new(Config::default());
    let mut warnings = Vec::new();
    if let Some(q) = sc.quota.as_ref().filter(|q| !is_empty(q)) {
        let tree = QuotaTree::parse(q).map_err(|problems| ScenarioError::Quota {
            file: file.into(),
            problems,
        })?;
        warnings = tree.warnings.iter().map(|p| p.to_string()).collect();
        sched.set_quota_tree(Some(tree));
    }
    sched.set_priority_classes(sc.priority_classes.clone());
    apply_fleet(&mut sched, sc);
    let mut jobs: Vec<SimJob> = Vec::with_capacity(sc.jobs.len());
    let mut events: BinaryHeap<Reverse<(u64, Event)>> = BinaryHeap::new();
    for (i, j) in sc.jobs.iter().enumerate() {
        let meta = j.manifest.get("metadata");
        let s = |k: &str| {
            meta.and_then(|m| m.get(k))
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        jobs.push(SimJob {
            namespace: s("namespace").unwrap_or_else(|| "default".into()),
            name: s("name").unwrap_or_else(|| format!("jobs[{i}]")),
            kind: j
                .manifest
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
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
    let mut done_events = 0usize;
    let total_events = jobs.len() * 2;
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
                Event::Submit { job } => {
                    let j = &mut jobs[job];
                    match interpret(&sc.jobs[job].manifest) {
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
                                est.submitted(job, &w, &sc.jobs[job].manifest, q);
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
        // Cycles at this instant until nothing changes (preemption victims get their turn in
        // the next cycle; bounded so that a run always ends).
        for _ in 0..16 {
            cycles += 1;
            let started = rec.map(|_| std::time::Instant::now());
            let decisions = sched.cycle();
            if let (Some(m), Some(t)) = (rec, started) {
                m.cycle_duration(t.elapsed().as_secs_f64());
            }
            let moved = decisions
                .iter()
                .any(|d| !matches!(d, Decision::Wait { .. }));
            for d in decisions {
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
            if !moved || !sched.has_work() {
                break;
            }
        }
        est.instant(&sched, &jobs, now);
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
    );
    Ok(Report {
        jobs: reports,
        summary,
        explanations,
    })
}

/// Whether a running job's plan places exactly the pods of each of its components.
fn plan_matches(w: &crate::workload::Workload, plan: &crate::scheduler::Plan) -> bool {
    plan.len() == w.components.len()
        && w.components.iter().all(|c| {
            plan.get(&c.name)
                .is_some_and(|nodes| nodes.values().sum::<u32>() == c.pods)
        })
}

/// `{node: pods}` of a plan.
fn running_nodes(plan: &crate::scheduler::Plan) -> BTreeMap<String, u32> {
    let mut out = BTreeMap::new();
    for nodes in plan.values() {
        for (n, k) in nodes {
            *out.entry(n.clone()).or_insert(0) += k;
        }
    }
    out
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

/// The explanations of a report as text: a header per explanation, then its text.
pub fn explanations_text(r: &Report) -> String {
    let at = |v: &Value| match v {
        Value::Number(n) => format!("{n}s"),
        other => other.to_string(),
    };
    let mut out = String::new();
    for (i, e) in r.explanations.iter().enumerate() {
        let _ = writeln!(out, "\n== {} at {} ({})", e.job, at(&e.at), e.moment);
        // The end of a job that never moved repeats its first explanation: say so instead.
        match r.explanations[..i].iter().rev().find(|p| p.job == e.job) {
            Some(p) if p.text == e.text => {
                let _ = writeln!(out, "unchanged since {}", at(&p.at));
            }
            _ => out.push_str(&e.text),
        }
    }
    out
}

fn is_empty(v: &Value) -> bool {
    v.is_null() || v.as_object().is_some_and(|m| m.is_empty())
}

#[allow(clippy::too_many_arguments)]
fn summarize(
    sched: &mut Scheduler,
    jobs: &[SimJob],
    held: &BTreeMap<String, i128>,
    makespan: u64,
    cycles: u64,
    dispatches: u64,
    preemptions: u64,
    quota_warnings: Vec<String>,
) -> Summary {
    let count = |s: &str| jobs.iter().filter(|j| j.state == s).count();
    let mut alloc: BTreeMap<String, i128> = BTreeMap::new();
    for ci in 0..sched.clusters().len() {
        for n in &sched.clusters()[ci].nodes {
            for (i, v) in n.alloc.iter().enumerate() {
                let name = sched
                    .table
                    .name(crate::resources::Res(i as u16))
                    .to_string();
                if name != "pods" && name != crate::resources::MAX_JOBS_NAME {
                    *alloc.entry(name).or_default() += *v;
                }
            }
        }
    }
    let mut utilization = BTreeMap::new();
    for (r, a) in &alloc {
        let h = held.get(r).copied().unwrap_or(0);
        let denom = a.saturating_mul(i128::from(makespan.max(1)));
        // Percent with one decimal, computed exactly then shown as a number.
        let permille = if denom > 0 {
            h.saturating_mul(1000) / denom
        } else {
            0
        };
        utilization.insert(r.clone(), serde_json::json!(permille as f64 / 10.0));
    }
    let mut waits: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for j in jobs {
        if let (Some(id), Some(d)) = (j.id, j.dispatched) {
            waits
                .entry(sched.queue_name(id).to_string())
                .or_default()
                .push(d - j.at);
        }
    }
    let wait = waits
        .into_iter()
        .map(|(q, mut v)| {
            v.sort_unstable();
            let qt = |p: usize| {
                secs(
                    v[((v.len() * p).div_ceil(100))
                        .saturating_sub(1)
                        .min(v.len() - 1)],
                )
            };
            (
                q,
                WaitStats {
                    jobs: v.len(),
                    p50: qt(50),
                    p90: qt(90),
                    p99: qt(99),
                    max: secs(*v.last().unwrap_or(&0)),
                },
            )
        })
        .collect();
    Summary {
        jobs: jobs.len(),
        finished: count("Finished"),
        running: count("Running"),
        pending: count("Pending"),
        inadmissible: count("Inadmissible"),
        rejected: count("Rejected"),
        ignored: count("Ignored"),
        dispatches,
        preemptions,
        cycles,
        makespan: secs(makespan),
        utilization,
        wait,
        quota_warnings,
    }
}

/// Human-readable table: one line per job, then the summary.
pub fn table(r: &Report) -> String {
    let mut out = String::new();
    let fmt_s = |v: &Value| match v {
        Value::Null => "-".to_string(),
        other => format!("{other}s"),
    };
    let num = |v: &Value| v.as_f64().unwrap_or(0.0);
    let rows: Vec<[String; 7]> = r
        .jobs
        .iter()
        .map(|j| {
            let wait = match (&j.dispatched, &j.submitted) {
                (Value::Number(d), Value::Number(s)) => {
                    let w = d.as_f64().unwrap_or(0.0) - s.as_f64().unwrap_or(0.0);
                    format!("{w}s")
                }
                _ => "-".into(),
            };
            // The wait the forecast at submission expected.
            let estimated = match &j.estimate {
                None => "-".to_string(),
                Some(e) if e.start.is_null() => "never".to_string(),
                Some(e) => format!("{}s", num(&e.start) - num(&j.submitted)),
            };
            [
                format!("{}/{}", j.namespace, j.name),
                j.queue.clone().unwrap_or_else(|| "-".into()),
                j.cluster.clone().unwrap_or_else(|| "-".into()),
                wait,
                estimated,
                j.state.clone(),
                j.reason.clone().unwrap_or_default(),
            ]
        })
        .collect();
    let heads = [
        "JOB", "QUEUE", "CLUSTER", "WAIT", "EST.WAIT", "STATE", "REASON",
    ];
    let mut w = heads.map(str::len);
    for row in &rows {
        for (i, c) in row.iter().enumerate().take(6) {
            w[i] = w[i].max(c.len());
        }
    }
    let line = |cells: [&str; 7]| {
        format!(
            "{:<w0$}  {:<w1$}  {:<w2$}  {:>w3$}  {:>w4$}  {:<w5$}  {}",
            cells[0],
            cells[1],
            cells[2],
            cells[3],
            cells[4],
            cells[5],
            cells[6],
            w0 = w[0],
            w1 = w[1],
            w2 = w[2],
            w3 = w[3],
            w4 = w[4],
            w5 = w[5]
        )
        .trim_end()
        .to_string()
    };
    let _ = writeln!(out, "{}", line(heads));
    for row in &rows {
        let _ = writeln!(
            out,
            "{}",
            line([
                &row[0], &row[1], &row[2], &row[3], &row[4], &row[5], &row[6]
            ])
        );
    }
    let s = &r.summary;
    let _ = writeln!(
        out,
        "\n{} jobs: {} finished, {} running, {} pending, {} inadmissible, {} rejected, {} ignored; {} dispatches, {} preemptions, {} cycles, makespan {}",
        s.jobs,
        s.finished,
        s.running,
        s.pending,
        s.inadmissible,
        s.rejected,
        s.ignored,
        s.dispatches,
        s.preemptions,
        s.cycles,
        fmt_s(&s.makespan)
    );
    let util: Vec<String> = s
        .utilization
        .iter()
        .map(|(k, v)| format!("{k} {v}%"))
        .collect();
    let _ = writeln!(out, "utilization: {}", util.join(", "));
    for (q, st) in &s.wait {
        let _ = writeln!(
            out,
            "wait {q}: {} jobs, p50 {}, p90 {}, p99 {}, max {}",
            st.jobs,
            fmt_s(&st.p50),
            fmt_s(&st.p90),
            fmt_s(&st.p99),
            fmt_s(&st.max)
        );
    }
    for wmsg in &s.quota_warnings {
        let _ = writeln!(out, "quota {wmsg}");
    }
    out
}

/// How many pods the controller releases onto their planned nodes when every pod of `plan`
/// appears behind its gate at once (the simulated member creates them all together).
fn released_pods(plan: &crate::placement::Plan) -> u64 {
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
