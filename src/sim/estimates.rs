//! Start-time estimates inside `muster sim`: after the admission cycles of an instant, a forecast
//! ([`crate::forecast`]) from the state the controller would have then, for the jobs submitted at
//! that instant (and, when asked, again for chosen jobs later in their wait). Expected run times
//! follow the controller's rules ([`crate::runtime`]): the declared annotation, the deadline, the
//! history of finished jobs of the same queue and shape (the simulator's own), the default.
//!
//! Owns how much forecasting a run does ([`Budget`]). Each forecast answers only for the jobs
//! due at its instant and stops once they have started (the same run, so the same answers).
//! By default the forecasts' admission cycles may total a bounded multiple of the run's own:
//! a job whose instant finds the budget spent, or whose forecast is cut off by it, is estimated
//! at the next instant a forecast is made (`madeAt` later than its submission), or not at all
//! if it is dispatched first. The summary counts each kind ([`EstimateSummary`]); small runs
//! stay exact, and `Budget::unbounded` makes every estimate at its instant.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;
use serde_json::Value;

use super::{SimJob, secs};
use crate::forecast::{self, Inputs, Start};
use crate::runtime::{self, Declared, History, Rules};
use crate::scheduler::{JobState, Scheduler};
use crate::workload::Workload;

/// How much forecasting a run may do: the forecasts' admission cycles may total at most
/// `per_cycle` times the run's own admission cycles so far, plus `base`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    pub per_cycle: u64,
    pub base: u64,
    /// A forecast starts only with at least this many cycles of budget left (or all of it,
    /// if less): each also clones the core, so a forecast of a few cycles would cost mostly
    /// that.
    pub min_forecast: u64,
}

impl Budget {
    /// What `muster sim` uses unless `--exact-estimates`: forecasts cost at most about twice
    /// the run's own cycles beyond a first 20,000 (every estimate of a small run is exact).
    pub const DEFAULT: Budget = Budget {
        per_cycle: 2,
        base: 20_000,
        min_forecast: 2_000,
    };
    /// No bound: every estimate at its instant, each forecast run to its end.
    pub const fn unbounded() -> Budget {
        Budget {
            per_cycle: u64::MAX,
            base: u64::MAX,
            min_forecast: 0,
        }
    }

    /// False for [`Budget::unbounded`].
    pub fn is_bounded(&self) -> bool {
        *self != Budget::unbounded()
    }

    fn allows(&self, run_cycles: u64) -> u64 {
        run_cycles
            .saturating_mul(self.per_cycle)
            .saturating_add(self.base)
    }
}

impl Default for Budget {
    fn default() -> Self {
        Budget::DEFAULT
    }
}

/// How the estimates of a run were made.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct EstimateSummary {
    /// Estimates made at the instant the job was submitted (or, for a job dispatched or found
    /// inadmissible at once, read off that instant).
    pub at_submission: u64,
    /// Estimates made later in the job's first wait because the budget was spent at its
    /// submission (`madeAt` says when).
    pub later: u64,
    /// Jobs dispatched before any forecast could answer for them: no estimate.
    pub skipped: u64,
    /// Forecasts run, and their admission cycles in all.
    pub forecasts: u64,
    pub forecast_cycles: u64,
    /// The budget in force (`null`: unbounded, `--exact-estimates`).
    pub budget: Option<BudgetReport>,
}

/// [`Budget`] as reported.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct BudgetReport {
    pub per_cycle: u64,
    pub base: u64,
}

/// Which estimates a run makes.
#[derive(Clone, Debug, Default)]
pub struct Estimating {
    /// One estimate per job, made at the instant it is submitted.
    pub at_submission: bool,
    /// Job index (in the scenario) → virtual ms from which a second estimate is made (at the
    /// first instant at or after it when the job still waits for its first dispatch).
    pub again_at: BTreeMap<usize, u64>,
    pub rules: Rules,
    /// How much forecasting the run may do.
    pub budget: Budget,
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
    /// The report of an answer; none for a lower bound (the forecast stopped before the job
    /// started: it is estimated again later, or counted as skipped).
    fn new(made_at: u64, s: &Start) -> Option<EstimateReport> {
        Some(match s {
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
            Start::NotBefore { .. } => return None,
        })
    }
}

/// The estimating side of one simulation run.
pub(super) struct Estimator {
    opts: Estimating,
    history: History,
    declared: Vec<Option<Declared>>,
    fresh: Vec<usize>,
    /// Jobs whose estimate at submission the budget put off, in submission order.
    owed: Vec<usize>,
    pub first: Vec<Option<EstimateReport>>,
    pub again: Vec<Option<EstimateReport>>,
    pub summary: EstimateSummary,
}

impl Estimator {
    pub fn new(opts: &Estimating, jobs: usize) -> Estimator {
        Estimator {
            opts: opts.clone(),
            history: History::default(),
            declared: vec![None; jobs],
            fresh: Vec::new(),
            owed: Vec::new(),
            first: vec![None; jobs],
            again: vec![None; jobs],
            summary: EstimateSummary {
                budget: opts.budget.is_bounded().then_some(BudgetReport {
                    per_cycle: opts.budget.per_cycle,
                    base: opts.budget.base,
                }),
                ..EstimateSummary::default()
            },
        }
    }

    pub fn enabled(&self) -> bool {
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

    /// After the cycles of instant `now` (the run's `run_cycles` so far): the estimates due at
    /// it, as far as the budget goes.
    pub fn instant(&mut self, sched: &Scheduler, jobs: &[SimJob], now: u64, run_cycles: u64) {
        if !self.enabled() {
            return;
        }
        let mut due: Vec<usize> = Vec::new();
        let owed = std::mem::take(&mut self.owed);
        for i in owed.into_iter().chain(std::mem::take(&mut self.fresh)) {
            let Some(id) = jobs[i].id else { continue };
            // Owed since an earlier instant (a job is fresh at the instant it is submitted).
            let late = jobs[i].at < now;
            if late && jobs[i].first_dispatched.is_some() {
                // Dispatched before a forecast could answer: no estimate.
                self.summary.skipped += 1;
                continue;
            }
            // Dispatched at once (even if preempted again within the instant): it started.
            if let Some((at, cluster)) = jobs[i].first_dispatched.clone() {
                self.first[i] = EstimateReport::new(
                    now,
                    &Start::At {
                        at,
                        cluster,
                        after: Vec::new(),
                        more: 0,
                    },
                );
                self.summary.at_submission += 1;
                continue;
            }
            match sched.state(id) {
                JobState::Inadmissible(why) => {
                    self.first[i] = EstimateReport::new(now, &Start::Never(why.clone()));
                    self.count(late);
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
        let allowed = self.opts.budget.allows(run_cycles);
        let left = allowed.saturating_sub(self.summary.forecast_cycles);
        if left == 0 || left < self.opts.budget.min_forecast.min(allowed) {
            // Put off; `again` is tried at every instant anyway.
            self.owed = due;
            return;
        }
        let mut inputs = Inputs {
            now,
            ends: HashMap::new(),
            runtimes: HashMap::new(),
            default_runtime: self.opts.rules.default,
            arrivals: Vec::new(),
            only: Some(
                due.iter()
                    .chain(&again)
                    .filter_map(|&i| jobs[i].id)
                    .collect(),
            ),
            max_cycles: self.opts.budget.is_bounded().then_some(left),
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
        self.summary.forecasts += 1;
        let est = forecast::forecast(sched.clone(), &inputs);
        self.summary.forecast_cycles += est.cycles;
        for i in due {
            let Some(id) = jobs[i].id else { continue };
            match est.get(id).map(|s| EstimateReport::new(now, s)) {
                Some(Some(report)) => {
                    self.first[i] = Some(report);
                    self.count(jobs[i].at < now);
                }
                // The budget stopped the forecast before it started: owed.
                Some(None) => self.owed.push(i),
                None => {}
            }
        }
        for i in again {
            if let Some(report) = jobs[i]
                .id
                .and_then(|id| est.get(id))
                .and_then(|s| EstimateReport::new(now, s))
            {
                self.again[i] = Some(report);
            }
        }
    }

    fn count(&mut self, late: bool) {
        if late {
            self.summary.later += 1;
        } else {
            self.summary.at_submission += 1;
        }
    }

    /// At the end of the run: jobs still owed an estimate are skipped (they never waited at an
    /// instant with budget, and the run ended first).
    pub fn end(&mut self) {
        self.summary.skipped += self.owed.len() as u64;
        self.owed.clear();
    }
}
