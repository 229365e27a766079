//! Start-time forecasts: a copy of the scheduling core run forward on a virtual clock, the way
//! `muster sim` runs it (at each instant: completions, then arrivals, then admission cycles until
//! nothing moves), with every running job ending when its expected run time says. Owns the
//! forward run and what it answers per waiting job: when it should start, where, and which jobs'
//! ends it waits for, or why it never starts while the known jobs run.
//! Pure: the caller hands in a clone of its core, the time and the expected run times.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};

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
    /// Stop after this many admission cycles; the watched jobs not started by then are
    /// [`Estimates::beyond`]. `None`: only [`MAX_INSTANTS`] bounds the run.
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
    /// Watched jobs not started when [`Inputs::max_cycles`] stopped the run: their answer is
    /// not known (they are absent from `jobs`).
    pub beyond: Vec<JobId>,
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
pub fn forecast(mut sched: Scheduler, inputs: &Inputs) -> Estimates {
    let mut out = Estimates::default();
    let mut events: BinaryHeap<Reverse<(Ms, Event)>> = BinaryHeap::new();
    // Runs per job: a preempted run's end is ignored.
    let mut runs: HashMap<JobId, u32> = HashMap::new();
    // Waiting job → its answer so far (None until it starts).
    let mut watched: HashMap<JobId, Watched> = HashMap::new();
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
    let max_cycles = inputs.max_cycles.unwrap_or(u64::MAX);
    let mut started = 0usize;
    for (index, a) in inputs.arrivals.iter().enumerate() {
        events.push(Reverse((a.at.max(inputs.now), Event::Arrive { index })));
    }
    // An arrival's job id → its index, once it has been submitted.
    let mut arrival_of: HashMap<JobId, usize> = HashMap::new();
    let mut arrived = 0usize;
    let mut arrival_starts: Vec<Option<Start>> = vec![None; inputs.arrivals.len()];
    let runtime_of = |job: JobId, arrival_of: &HashMap<JobId, usize>| -> Ms {
        match arrival_of.get(&job) {
            Some(&i) => inputs.arrivals[i].runtime,
            None => inputs
                .runtimes
                .get(&job)
                .copied()
                .unwrap_or(inputs.default_runtime),
        }
    };
    let mut now = inputs.now;
    let mut ended: Vec<JobId> = Vec::new();
    loop {
        // Admission cycles at `now`.
        for _ in 0..CYCLES_PER_INSTANT {
            out.cycles += 1;
            let decisions = sched.cycle();
            let moved = decisions
                .iter()
                .any(|d| !matches!(d, Decision::Wait { .. }));
            for d in decisions {
                match d {
                    Decision::Admit { job, cluster, .. } => {
                        let run = runs.entry(job).or_insert(0);
                        *run += 1;
                        let at = now.saturating_add(runtime_of(job, &arrival_of));
                        events.push(Reverse((at, Event::End { job, run: *run })));
                        // Its first start is the answer (a preemption later does not move it).
                        if let Some(w) = watched.get_mut(&job)
                            && w.start.is_none()
                        {
                            started += 1;
                            w.start = Some((now, cluster, ended.clone()));
                        }
                    }
                    Decision::Preempt { job, .. } => {
                        // Its end is void; it waits again.
                        if let Some(r) = runs.get_mut(&job) {
                            *r += 1;
                        }
                    }
                    Decision::Wait { .. } => {}
                }
            }
            if !moved || !sched.has_work() {
                break;
            }
        }
        out.instants += 1;
        if (started == watched.len() && arrived == inputs.arrivals.len())
            || out.instants >= MAX_INSTANTS
            || out.cycles >= max_cycles
        {
            break;
        }
        // The next instant: ends first, then arrivals.
        let Some(Reverse((t, _))) = events.peek() else {
            break;
        };
        now = *t;
        ended.clear();
        while let Some(Reverse((t, _))) = events.peek() {
            if *t != now {
                break;
            }
            let Some(Reverse((_, ev))) = events.pop() else {
                break;
            };
            match ev {
                Event::End { job, run } => {
                    if runs.get(&job) == Some(&run)
                        && matches!(sched.state(job), JobState::Admitted { .. })
                    {
                        sched.finish(job);
                        ended.push(job);
                    }
                }
                Event::Arrive { index } => {
                    let a = &inputs.arrivals[index];
                    arrived += 1;
                    match sched.submit(&a.workload, now) {
                        Submitted::Queued(id) | Submitted::Inadmissible(id, _) => {
                            arrival_of.insert(id, index);
                            watched.insert(id, Watched::new(Target::Arrival(index)));
                        }
                        Submitted::Ignored(why) => {
                            arrival_starts[index] = Some(Start::Never(why));
                        }
                    }
                }
            }
        }
    }
    let horizon = out.instants >= MAX_INSTANTS;
    let cut = out.cycles >= max_cycles && !horizon;
    for (job, w) in watched {
        if cut
            && w.start.is_none()
            && let Target::Job(j) = w.target
        {
            out.beyond.push(j);
            continue;
        }
        let start = match w.start {
            Some((at, cluster, after)) => {
                let mut names: Vec<String> = after.iter().map(|&j| sched.job_label(j)).collect();
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
        .map(|s| s.unwrap_or_else(|| Start::Never("not submitted within the forecast".into())))
        .collect();
    out.beyond.sort_unstable();
    out
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
