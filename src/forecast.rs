//! Start-time forecasts: a copy of the scheduling core run forward on a virtual clock, the way
//! `muster sim` runs it (at each instant: completions, then arrivals, then admission cycles until
//! nothing moves), with every running job ending when its expected run time says. Owns the
//! forward run and what it answers per waiting job: when it should start, where, and which jobs'
//! ends it waits for, or why it never starts while the known jobs run. The run is resumable
//! between instants ([`Forward`]), so a driver may stop it (after a number of cycles, or at a
//! time budget of its own clock); the jobs it has not seen start by then get a lower bound
//! ([`Start::NotBefore`]).
//! Pure: the caller hands in a clone of its core, the time and the expected run times.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::time::Duration;

use serde::Serialize;

use crate::scheduler::{Decision, JobId, JobState, Scheduler, Submitted};
use crate::workload::Workload;

type Ms = u64;

/// Admission cycles run at one instant at most (as `muster sim` does).
pub const CYCLES_PER_INSTANT: usize = 16;
/// At most this many instants are run forward; jobs not started by then are "beyond the horizon".
pub const MAX_INSTANTS: usize = 200_000;
/// At most this many ended jobs are named as what a start waits for.
pub const AFTER_NAMED: usize = 3;

/// A job that will be submitted later (a job in back-off, a what-if submission).
#[derive(Clone, Debug)]
pub struct Arrival {
    pub workload: Workload,
    pub at: Ms,
    /// Expected run time once dispatched.
    pub runtime: Ms,
}

/// What the forward run needs besides the core.
#[derive(Clone, Debug, Default)]
pub struct Inputs {
    pub now: Ms,
    /// Expected end of every admitted job; one absent here is taken to run past the horizon.
    pub ends: HashMap<JobId, Ms>,
    /// Expected run time of every job once it starts (again, for a running job preempted in the
    /// forecast).
    pub runtimes: HashMap<JobId, Ms>,
    /// Run time of a waiting job missing from `runtimes`.
    pub default_runtime: Ms,
    pub arrivals: Vec<Arrival>,
    /// Answer only for these waiting jobs (and the arrivals), and stop once they have started;
    /// `None`: every waiting job. The run is the same either way, so each answer is too.
    pub only: Option<Vec<JobId>>,
    /// Stop after this many admission cycles (at the end of an instant); the watched jobs not
    /// started by then get [`Start::NotBefore`]. `None`: only [`MAX_INSTANTS`] bounds the run.
    pub max_cycles: Option<u64>,
}

/// One waiting job's forecast.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Start {
    /// It should first be dispatched at `at` to `cluster`, once the jobs in `after` have ended
    /// (`more` further ones not named); `after` is empty when it starts without waiting for an
    /// end (it could start now, or an arrival or a back-off is what it waits for).
    At {
        at: Ms,
        cluster: String,
        after: Vec<String>,
        more: usize,
    },
    /// It does not start while the known jobs run (as they are expected to); why.
    Never(String),
    /// The forecast stopped (its bound) before it started: by what the forecast knows, it
    /// starts at `at` at the earliest. A lower bound, not an estimate.
    NotBefore { at: Ms },
}

/// The answers of one forward run.
#[derive(Clone, Debug, Default)]
pub struct Estimates {
    /// Per job waiting at the start (pending or inadmissible).
    pub jobs: BTreeMap<JobId, Start>,
    /// Per arrival, in the order given.
    pub arrivals: Vec<Start>,
    /// Virtual instants run.
    pub instants: usize,
    /// Admission cycles run.
    pub cycles: u64,
    /// The instant the run reached: where it stopped, or its last instant.
    pub reached: Ms,
    /// The run stopped before its end ([`Inputs::max_cycles`], or its driver): the jobs it had
    /// not seen start by then have [`Start::NotBefore`].
    pub stopped: bool,
}

impl Estimates {
    /// The forecast of a job, if it was waiting.
    pub fn get(&self, job: JobId) -> Option<&Start> {
        self.jobs.get(&job)
    }
}

#[derive(PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// Completions come before arrivals at the same instant.
    End {
        job: JobId,
        run: u32,
    },
    Arrive {
        index: usize,
    },
}

/// Runs `sched` forward from `inputs.now` and answers for every job waiting in it and every
/// arrival. The copy is consumed; the caller's core is untouched.
pub fn forecast(sched: Scheduler, inputs: &Inputs) -> Estimates {
    let mut run = Forward::new(sched, inputs);
    run.advance(inputs.max_cycles.unwrap_or(u64::MAX));
    run.finish()
}

/// The admission cycles of one instant, as the forward run runs them: until a cycle moves
/// nothing or nothing is left to do, at most [`CYCLES_PER_INSTANT`]. Returns how many ran and
/// what they decided other than waits, in order.
pub fn settle(sched: &mut Scheduler) -> (u64, Vec<Decision>) {
    let mut moves = Vec::new();
    let cycles = settle_with(sched, |_, decisions| {
        moves.extend(
            decisions
                .into_iter()
                .filter(|d| !matches!(d, Decision::Wait { .. })),
        );
    });
    (cycles, moves)
}

/// The one rule for how many admission cycles an instant runs, for `muster sim` and for the
/// forward run of every estimate (so an estimate is the run's own): cycles until one moves
/// nothing (decides only waits) or nothing is left to do, at most [`CYCLES_PER_INSTANT`]. Each
/// cycle's decisions, waits included, go to `each` with the state after it. Returns how many
/// cycles ran.
pub fn settle_with(sched: &mut Scheduler, mut each: impl FnMut(&Scheduler, Vec<Decision>)) -> u64 {
    let mut cycles = 0;
    while cycles < CYCLES_PER_INSTANT as u64 {
        cycles += 1;
        let decisions = sched.cycle();
        let moved = decisions
            .iter()
            .any(|d| !matches!(d, Decision::Wait { .. }));
        each(sched, decisions);
        if !moved || !sched.has_work() {
            break;
        }
    }
    cycles
}

/// [`forecast`] bounded in time: one instant at a time until the run ends or `elapsed()` reaches
/// `budget` (zero: no bound). The clock is the caller's (the controller's); the run is the
/// core's, so every answer but the lower bounds is the one the whole run gives.
pub fn forecast_within(
    sched: Scheduler,
    inputs: &Inputs,
    budget: Duration,
    mut elapsed: impl FnMut() -> Duration,
) -> Estimates {
    let mut run = Forward::new(sched, inputs);
    while !run.advance(1) {
        if !budget.is_zero() && elapsed() >= budget {
            break;
        }
    }
    run.finish()
}

/// A forward run that can stop between instants and go on later: [`forecast`] in steps, so that
/// a driver with a clock (the controller) can bound its wall time. Up to where it stops, it is
/// the same run, so every answer it has is the same; a job it has not seen start by then gets
/// [`Start::NotBefore`] the instant it reached (the run would start it then at the earliest).
pub struct Forward<'a> {
    sched: Scheduler,
    inputs: &'a Inputs,
    out: Estimates,
    events: BinaryHeap<Reverse<(Ms, Event)>>,
    /// Runs per job: a preempted run's end is ignored.
    runs: HashMap<JobId, u32>,
    /// Waiting job → its answer so far (None until it starts).
    watched: HashMap<JobId, Watched>,
    started: usize,
    /// An arrival's job id → its index, once it has been submitted.
    arrival_of: HashMap<JobId, usize>,
    arrived: usize,
    arrival_starts: Vec<Option<Start>>,
    /// The instant whose admission cycles run next (its ends and arrivals are in).
    now: Ms,
    /// The jobs that ended at `now`.
    ended: Vec<JobId>,
    /// The run has ended on its own: every answer is final.
    done: bool,
}

impl<'a> Forward<'a> {
    /// A run of `sched` (consumed) from `inputs.now`; nothing is run yet.
    pub fn new(sched: Scheduler, inputs: &'a Inputs) -> Forward<'a> {
        let mut out = Estimates::default();
        let mut events: BinaryHeap<Reverse<(Ms, Event)>> = BinaryHeap::new();
        let mut watched: HashMap<JobId, Watched> = HashMap::new();
        let mut runs: HashMap<JobId, u32> = HashMap::with_capacity(inputs.ends.len());
        for (&job, &at) in &inputs.ends {
            if matches!(sched.state(job), JobState::Admitted { .. }) {
                runs.insert(job, 0);
                events.push(Reverse((at.max(inputs.now), Event::End { job, run: 0 })));
            }
        }
        let waiting: Vec<JobId> = match &inputs.only {
            Some(only) => only
                .iter()
                .copied()
                .filter(|&j| {
                    matches!(
                        sched.state(j),
                        JobState::Pending | JobState::Inadmissible(_)
                    )
                })
                .collect(),
            None => sched.waiting(),
        };
        // Sized once: a map grown by doubling touches about twice the memory, and fresh
        // memory is what the first forecast after a quiet spell pays for.
        watched.reserve(waiting.len() + inputs.arrivals.len());
        for job in waiting {
            match sched.state(job) {
                JobState::Inadmissible(why) => {
                    out.jobs.insert(job, Start::Never(why.clone()));
                }
                _ => {
                    watched.insert(job, Watched::new(Target::Job(job)));
                }
            }
        }
        for (index, a) in inputs.arrivals.iter().enumerate() {
            events.push(Reverse((a.at.max(inputs.now), Event::Arrive { index })));
        }
        Forward {
            sched,
            inputs,
            out,
            events,
            runs,
            watched,
            started: 0,
            arrival_of: HashMap::new(),
            arrived: 0,
            arrival_starts: vec![None; inputs.arrivals.len()],
            now: inputs.now,
            ended: Vec::new(),
            done: false,
        }
    }

    /// Runs whole instants until at least `cycles` more admission cycles have run, or the run
    /// ends. True once it has ended (then [`Forward::finish`] has every answer).
    pub fn advance(&mut self, cycles: u64) -> bool {
        let until = self.out.cycles.saturating_add(cycles);
        while !self.done {
            self.instant();
            if self.done || self.out.cycles >= until {
                break;
            }
        }
        self.done
    }

    fn runtime_of(&self, job: JobId) -> Ms {
        match self.arrival_of.get(&job) {
            Some(&i) => self.inputs.arrivals[i].runtime,
            None => self
                .inputs
                .runtimes
                .get(&job)
                .copied()
                .unwrap_or(self.inputs.default_runtime),
        }
    }

    /// The admission cycles at `now`, then the next instant's ends and arrivals (or the end).
    fn instant(&mut self) {
        let (cycles, moves) = settle(&mut self.sched);
        self.out.cycles += cycles;
        for d in moves {
            match d {
                Decision::Admit { job, cluster, .. } => {
                    let at = self.now.saturating_add(self.runtime_of(job));
                    let run = self.runs.entry(job).or_insert(0);
                    *run += 1;
                    let run = *run;
                    self.events.push(Reverse((at, Event::End { job, run })));
                    // Its first start is the answer (a preemption later does not move it).
                    if let Some(w) = self.watched.get_mut(&job)
                        && w.start.is_none()
                    {
                        self.started += 1;
                        w.start = Some((self.now, cluster, self.ended.clone()));
                    }
                }
                Decision::Preempt { job, .. } => {
                    // Its end is void; it waits again.
                    if let Some(r) = self.runs.get_mut(&job) {
                        *r += 1;
                    }
                }
                Decision::Wait { .. } => {}
            }
        }
        self.out.instants += 1;
        if (self.started == self.watched.len() && self.arrived == self.inputs.arrivals.len())
            || self.out.instants >= MAX_INSTANTS
        {
            self.done = true;
            return;
        }
        // The next instant: ends first, then arrivals.
        let Some(Reverse((t, _))) = self.events.peek() else {
            self.done = true;
            return;
        };
        self.now = *t;
        self.ended.clear();
        while let Some(Reverse((t, _))) = self.events.peek() {
            if *t != self.now {
                break;
            }
            let Some(Reverse((_, ev))) = self.events.pop() else {
                break;
            };
            match ev {
                Event::End { job, run } => {
                    if self.runs.get(&job) == Some(&run)
                        && matches!(self.sched.state(job), JobState::Admitted { .. })
                    {
                        self.sched.finish(job);
                        self.ended.push(job);
                    }
                }
                Event::Arrive { index } => {
                    let a = &self.inputs.arrivals[index];
                    self.arrived += 1;
                    match self.sched.submit(&a.workload, self.now) {
                        Submitted::Queued(id) | Submitted::Inadmissible(id, _) => {
                            self.arrival_of.insert(id, index);
                            self.watched
                                .insert(id, Watched::new(Target::Arrival(index)));
                        }
                        Submitted::Ignored(why) => {
                            self.arrival_starts[index] = Some(Start::Never(why));
                        }
                    }
                }
            }
        }
    }

    /// The answers. A run stopped before its end answers [`Start::NotBefore`] for every job
    /// and arrival it has not seen start.
    pub fn finish(self) -> Estimates {
        let Forward {
            sched,
            inputs,
            mut out,
            watched,
            mut arrival_starts,
            now,
            done,
            ..
        } = self;
        let horizon = out.instants >= MAX_INSTANTS;
        for (job, w) in watched {
            let start = match w.start {
                Some((at, cluster, after)) => {
                    let mut names: Vec<String> =
                        after.iter().map(|&j| sched.job_label(j)).collect();
                    names.sort();
                    let more = names.len().saturating_sub(AFTER_NAMED);
                    names.truncate(AFTER_NAMED);
                    Start::At {
                        at,
                        cluster,
                        after: names,
                        more,
                    }
                }
                None if !done => Start::NotBefore { at: now },
                None if horizon => Start::Never(format!(
                    "not started within {MAX_INSTANTS} forecast instants"
                )),
                None => Start::Never(
                    sched
                        .reason(job)
                        .unwrap_or_else(|| "no capacity frees up for it".to_string()),
                ),
            };
            match w.target {
                Target::Job(j) => {
                    out.jobs.insert(j, start);
                }
                Target::Arrival(i) => {
                    if let Some(s) = arrival_starts.get_mut(i) {
                        *s = Some(start);
                    }
                }
            }
        }
        out.arrivals = arrival_starts
            .into_iter()
            .zip(&inputs.arrivals)
            .map(|(s, a)| match s {
                Some(s) => s,
                None if !done => Start::NotBefore { at: a.at.max(now) },
                None => Start::Never("not submitted within the forecast".into()),
            })
            .collect();
        out.reached = now;
        out.stopped = !done;
        out
    }
}

enum Target {
    Job(JobId),
    Arrival(usize),
}

struct Watched {
    target: Target,
    start: Option<(Ms, String, Vec<JobId>)>,
}

impl Watched {
    fn new(target: Target) -> Watched {
        Watched {
            target,
            start: None,
        }
    }
}
