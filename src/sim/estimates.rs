//! Start-time estimates inside `muster sim`: after the admission cycles of an instant, a forecast
//! ([`crate::forecast`]) from the state the controller would have then, for the jobs submitted at
//! that instant (and, when asked, again for chosen jobs later in their wait). Expected run times
//! follow the controller's rules ([`crate::runtime`]): the declared annotation, the deadline, the
//! history of finished jobs of the same queue and shape (the simulator's own), the default.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;
use serde_json::Value;

use super::{SimJob, secs};
use crate::forecast::{self, Inputs, Start};
use crate::runtime::{self, Declared, History, Rules};
use crate::scheduler::{JobState, Scheduler};
use crate::workload::Workload;

/// Which estimates a run makes.
#[derive(Clone, Debug, Default)]
pub struct Estimating {
    /// One estimate per job, made at the instant it is submitted.
    pub at_submission: bool,
    /// Job index (in the scenario) → virtual ms from which a second estimate is made (at the
    /// first instant at or after it when the job still waits for its first dispatch).
    pub again_at: BTreeMap<usize, u64>,
    pub rules: Rules,
}

/// One estimate as reported.
#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EstimateReport {
    /// When the estimate was made, seconds.
    pub made_at: Value,
    /// The expected start, seconds (null when never).
    pub start: Value,
    pub cluster: Option<String>,
    /// Why it never starts, as the forecast saw it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub never: Option<String>,
    /// The jobs whose end the start waits for.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<String>,
}

impl EstimateReport {
    fn new(made_at: u64, s: &Start) -> EstimateReport {
        match s {
            Start::At {
                at, cluster, after, ..
            } => EstimateReport {
                made_at: secs(made_at),
                start: secs(*at),
                cluster: Some(cluster.clone()),
                never: None,
                after: after.clone(),
            },
            Start::Never(why) => EstimateReport {
                made_at: secs(made_at),
                start: Value::Null,
                cluster: None,
                never: Some(why.clone()),
                after: Vec::new(),
            },
        }
    }
}

/// The estimating side of one simulation run.
pub(super) struct Estimator {
    opts: Estimating,
    history: History,
    declared: Vec<Option<Declared>>,
    fresh: Vec<usize>,
    pub first: Vec<Option<EstimateReport>>,
    pub again: Vec<Option<EstimateReport>>,
    /// Forecasts run.
    pub forecasts: u64,
}

impl Estimator {
    pub fn new(opts: &Estimating, jobs: usize) -> Estimator {
        Estimator {
            opts: opts.clone(),
            history: History::default(),
            declared: vec![None; jobs],
            fresh: Vec::new(),
            first: vec![None; jobs],
            again: vec![None; jobs],
            forecasts: 0,
        }
    }

    fn enabled(&self) -> bool {
        self.opts.at_submission || !self.opts.again_at.is_empty()
    }

    /// Job `i` was submitted and the core took it into `queue`.
    pub fn submitted(&mut self, i: usize, w: &Workload, manifest: &Value, queue: &str) {
        if !self.enabled() {
            return;
        }
        self.declared[i] = Some(Declared::of(w, manifest, queue));
        if self.opts.at_submission {
            self.fresh.push(i);
        }
    }

    /// Job `i` ran to its end after `ran` ms: part of the history from now on.
    pub fn finished(&mut self, i: usize, ran: u64) {
        if let Some(d) = &self.declared[i] {
            self.history.record(&d.key, ran);
        }
    }

    fn expected(&self, i: usize) -> u64 {
        self.declared[i]
            .as_ref()
            .map_or(self.opts.rules.default, |d| {
                d.expected(&self.history, &self.opts.rules).0
            })
    }

    /// After the cycles of instant `now`: the estimates due at it.
    pub fn instant(&mut self, sched: &Scheduler, jobs: &[SimJob], now: u64) {
        if !self.enabled() {
            return;
        }
        let mut due: Vec<usize> = Vec::new();
        for i in std::mem::take(&mut self.fresh) {
            let Some(id) = jobs[i].id else { continue };
            // Dispatched at once (even if preempted again within the instant): it started.
            if let Some((at, cluster)) = jobs[i].first_dispatched.clone() {
                self.first[i] = Some(EstimateReport::new(
                    now,
                    &Start::At {
                        at,
                        cluster,
                        after: Vec::new(),
                        more: 0,
                    },
                ));
                continue;
            }
            match sched.state(id) {
                JobState::Inadmissible(why) => {
                    self.first[i] = Some(EstimateReport::new(now, &Start::Never(why.clone())));
                }
                _ => due.push(i),
            }
        }
        let mut again: Vec<usize> = Vec::new();
        for (&i, &from) in &self.opts.again_at {
            // Still in its first wait: once dispatched, a later wait (after a preemption) is
            // not what the estimate at submission was about.
            if from <= now
                && self.again[i].is_none()
                && jobs[i].first_dispatched.is_none()
                && jobs[i]
                    .id
                    .is_some_and(|id| *sched.state(id) == JobState::Pending)
            {
                again.push(i);
            }
        }
        if due.is_empty() && again.is_empty() {
            return;
        }
        let mut inputs = Inputs {
            now,
            ends: HashMap::new(),
            runtimes: HashMap::new(),
            default_runtime: self.opts.rules.default,
            arrivals: Vec::new(),
        };
        for (i, j) in jobs.iter().enumerate() {
            let Some(id) = j.id else { continue };
            match (sched.state(id), j.dispatched) {
                (JobState::Admitted { .. }, Some(started)) => {
                    let expected = self.expected(i);
                    let left = runtime::remaining(started, expected, now);
                    inputs.ends.insert(id, now.saturating_add(left));
                    // Run again in full if preempted in the forecast.
                    inputs.runtimes.insert(id, expected);
                }
                (JobState::Pending, _) => {
                    inputs.runtimes.insert(id, self.expected(i));
                }
                _ => {}
            }
        }
        self.forecasts += 1;
        let est = forecast::forecast(sched.clone(), &inputs);
        for i in due {
            if let Some(s) = jobs[i].id.and_then(|id| est.get(id)) {
                self.first[i] = Some(EstimateReport::new(now, s));
            }
        }
        for i in again {
            if let Some(s) = jobs[i].id.and_then(|id| est.get(id)) {
                self.again[i] = Some(EstimateReport::new(now, s));
            }
        }
    }
}
