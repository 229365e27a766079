//! What `muster sim` reports: per job (times, member, placement, estimates), the summary
//! (counts, utilization, wait quantiles per queue), explanations taken during the run, and the
//! text forms of each (`--output table`, `--explain`).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;
use serde_json::Value;

use super::{EstimateReport, SimJob};
use crate::scheduler::Scheduler;
use crate::scheduler::explain::Explanation;

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
    /// How the start-time estimates were made (absent without estimates).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub estimates: Option<super::EstimateSummary>,
    /// The digest of every decision of the run (not part of the output: for comparing runs).
    #[serde(skip)]
    pub trace: super::TraceDigest,
}

#[derive(Clone, Debug, Serialize)]
pub struct WaitStats {
    pub jobs: usize,
    pub p50: Value,
    pub p90: Value,
    pub p99: Value,
    pub max: Value,
}

/// Milliseconds as a JSON number of seconds (integer when whole).
pub fn secs(ms: u64) -> Value {
    if ms.is_multiple_of(1000) {
        Value::from(ms / 1000)
    } else {
        serde_json::Number::from_f64(ms as f64 / 1000.0).map_or(Value::Null, Value::Number)
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

/// How the estimates were made, in one line: exact at submission, put off by the budget, none.
pub fn estimates_line(e: &super::EstimateSummary) -> String {
    let mut line = format!(
        "start-time estimates: {} at submission, {} later in the wait, {} skipped; {} forecasts, {} forecast cycles",
        e.at_submission, e.later, e.skipped, e.forecasts, e.forecast_cycles
    );
    match &e.budget {
        Some(b) if e.later + e.skipped > 0 => line.push_str(&format!(
            " (budget: {} cycles + {} per cycle of the run spent; --exact-estimates makes every estimate at submission)",
            b.base, b.per_cycle
        )),
        Some(_) => {}
        None => line.push_str(" (exact: no budget)"),
    }
    line
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
    if let Some(e) = &s.estimates {
        let _ = writeln!(out, "{}", estimates_line(e));
    }
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

#[allow(clippy::too_many_arguments)]
pub(super) fn summarize(
    sched: &mut Scheduler,
    jobs: &[SimJob],
    held: &BTreeMap<String, i128>,
    makespan: u64,
    cycles: u64,
    dispatches: u64,
    preemptions: u64,
    quota_warnings: Vec<String>,
    fleet: (&BTreeMap<String, i128>, u64),
) -> Summary {
    let count = |s: &str| jobs.iter().filter(|j| j.state == s).count();
    // Allocatable over the makespan: the fleet as it was before its last change (`fleet.0`,
    // resource-ms up to `fleet.1`), then as it is now.
    let (before, since) = fleet;
    let mut alloc_ms: BTreeMap<String, i128> = before.clone();
    for (r, a) in super::changes::allocatable(sched) {
        let span = i128::from(makespan.max(1).saturating_sub(since));
        let t = alloc_ms.entry(r).or_default();
        *t = t.saturating_add(a.saturating_mul(span));
    }
    let mut utilization = BTreeMap::new();
    for (r, denom) in &alloc_ms {
        let h = held.get(r).copied().unwrap_or(0);
        // Percent with one decimal, computed exactly then shown as a number.
        let permille = if *denom > 0 {
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
        estimates: None,
        trace: Default::default(),
    }
}
