//! Start-time estimate accuracy and cost. For generated scenarios (the scale benchmark's
//! generator, scaled down), each job declares its run time (`muster.dev/expected-runtime`), exact
//! or off by a random factor; the simulator forecasts each job's start at its submission and again
//! midway through its wait, and this compares both with the start that really happened; with
//! exact run times, a sample of waiting jobs is run again without the jobs submitted after them,
//! to show what moves the starts is later arrivals. Then the cost of one forecast over 10,000
//! waiting jobs, as the controller makes it (a copy of the core, the forward run), whole and
//! within the controller's default time budget (`--estimate-budget-ms`, 200).
//! Run: `cargo bench --bench estimates` (args: JOBS CLUSTERS NODES; `cost` for the cost of one
//! forecast only). Figures: docs/benchmarks.md.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod common;

use common::{Rng, scenario_seeded};
use muster::forecast::{self, Inputs};
use muster::quota::QuotaTree;
use muster::runtime::ANNOTATION;
use muster::scheduler::{Config, JobState, Scheduler, Submitted};
use muster::sim::{self, Estimating, JobReport, Scenario};
use muster::workload::interpret;

/// Declares each job's run time: exact (`noise` 0) or times a factor drawn in
/// [1 - noise%, 1 + noise%].
fn declare(sc: &mut Scenario, noise: u64, seed: u64) {
    let mut rng = Rng(seed);
    for j in &mut sc.jobs {
        let pct = 100 - noise + rng.below(2 * noise + 1);
        let ms = j.run_for * pct / 100;
        j.manifest.value_mut()["metadata"]["annotations"] = json!({ANNOTATION: format!("{ms}ms")});
    }
}

/// Every pod template gets the same PriorityClass: no later arrival jumps the queue.
fn one_priority(v: &mut Value) {
    match v {
        Value::Object(m) => {
            if let Some(p) = m.get_mut("priorityClassName") {
                *p = json!("normal");
            }
            m.values_mut().for_each(one_priority);
        }
        Value::Array(a) => a.iter_mut().for_each(one_priority),
        _ => {}
    }
}

fn num(v: &Value) -> Option<u64> {
    v.as_f64().map(|s| (s * 1000.0).round() as u64)
}

#[derive(Default)]
struct Errors {
    /// (absolute error ms, wait ms)
    samples: Vec<(u64, u64)>,
    never: usize,
}

impl Errors {
    fn add(&mut self, estimated: &Value, actual: u64, wait: u64) {
        match num(estimated) {
            Some(e) => self.samples.push((e.abs_diff(actual), wait)),
            None => self.never += 1,
        }
    }

    fn row(&mut self) -> String {
        let n = self.samples.len();
        if n == 0 {
            return "no waiting jobs".into();
        }
        let mut errs: Vec<u64> = self.samples.iter().map(|s| s.0).collect();
        errs.sort_unstable();
        let q = |p: usize| errs[(p * n).div_ceil(100).max(1) - 1] / 1000;
        let exact = self.samples.iter().filter(|s| s.0 == 0).count();
        let within = self.samples.iter().filter(|s| s.0 * 10 <= s.1).count();
        format!(
            "{n:>5} waited | exact {:>5.1} % | within 10 % of wait {:>5.1} % | median {:>6} s | p90 {:>6} s | never {}",
            100.0 * exact as f64 / n as f64,
            100.0 * within as f64 / n as f64,
            q(50),
            q(90),
            self.never
        )
    }
}

/// Sampled waiting jobs whose estimate at submission is exactly the start they get in the same
/// scenario without the jobs submitted after them: what the forecast can know, it gets right.
fn fidelity(sc: &Scenario, r: &sim::Report, starts: &[Option<(u64, u64)>]) -> String {
    const SAMPLE: usize = 40;
    let waited: Vec<usize> = (0..r.jobs.len())
        .filter(|&i| starts[i].is_some_and(|(s, d)| d > s) && r.jobs[i].estimate.is_some())
        .collect();
    let step = waited.len().div_ceil(SAMPLE).max(1);
    let (mut same, mut n) = (0, 0);
    for &i in waited.iter().step_by(step) {
        let (j, at) = (&r.jobs[i], sc.jobs[i].at);
        let mut known = sc.clone();
        known.jobs.retain(|k| k.at <= at);
        let alone = sim::run("known", &known, &mut ()).expect("runs");
        let Some(k) = alone
            .jobs
            .iter()
            .find(|k| k.name == j.name && k.namespace == j.namespace)
        else {
            continue;
        };
        let k_first = k.first_dispatched.as_ref().unwrap_or(&k.dispatched);
        n += 1;
        if j.estimate.as_ref().is_some_and(|e| &e.start == k_first) {
            same += 1;
        }
    }
    format!(
        "without later arrivals: {same} of {n} sampled waiting jobs start exactly at their estimate"
    )
}

fn accuracy(name: &str, sc: &Scenario, exact: bool) {
    let t = Instant::now();
    let first = sim::run_estimated(
        name,
        sc,
        &mut (),
        &Estimating {
            at_submission: true,
            ..Estimating::default()
        },
    )
    .expect("scenario runs");
    // Midway through each wait, forecast again.
    // The start an estimate is about: the first dispatch.
    let started = |j: &JobReport| {
        let first = j.first_dispatched.as_ref().unwrap_or(&j.dispatched);
        Some((num(&j.submitted)?, num(first)?))
    };
    let again_at: BTreeMap<usize, u64> = first
        .jobs
        .iter()
        .enumerate()
        .filter_map(|(i, j)| {
            let (s, d) = started(j)?;
            (d > s).then_some((i, s + (d - s) / 2))
        })
        .collect();
    let second = sim::run_estimated(
        name,
        sc,
        &mut (),
        &Estimating {
            at_submission: false,
            again_at,
            ..Estimating::default()
        },
    )
    .expect("scenario runs");
    let (mut at_sub, mut midway) = (Errors::default(), Errors::default());
    let starts: Vec<Option<(u64, u64)>> = first.jobs.iter().map(started).collect();
    for (i, (a, b)) in first.jobs.iter().zip(&second.jobs).enumerate() {
        let Some((s, d)) = starts[i] else { continue };
        if d == s {
            continue;
        }
        if let Some(e) = &a.estimate {
            at_sub.add(&e.start, d, d - s);
        }
        if let Some(e) = &b.estimate_again {
            midway.add(&e.start, d, d - s);
        }
    }
    let s = &first.summary;
    println!(
        "{name}: {:.1}s ({} finished, {} inadmissible, {} preemptions)",
        t.elapsed().as_secs_f64(),
        s.finished,
        s.inadmissible,
        s.preemptions
    );
    println!("  at submission: {}", at_sub.row());
    if exact {
        println!("  {}", fidelity(sc, &first, &starts));
    }
    println!("  midway:        {}", midway.row());
}

fn main() {
    // As `muster sim` runs (src/alloc.rs).
    muster::alloc::keep_freed_pages();
    let raw: Vec<String> = std::env::args().skip(1).collect();
    let smoke = !raw.iter().any(|a| a == "--bench");
    let args: Vec<usize> = raw.iter().filter_map(|a| a.parse().ok()).collect();
    let (dj, dc, dn) = if smoke { (200, 2, 10) } else { (3000, 10, 50) };
    let jobs = args.first().copied().unwrap_or(dj);
    let clusters = args.get(1).copied().unwrap_or(dc);
    let nodes = args.get(2).copied().unwrap_or(dn) as u32;
    // `-- cost`: only the cost of one forecast (the last part).
    let only_cost = raw.iter().any(|a| a == "cost");
    println!("estimates: {jobs} jobs, {clusters} clusters x {nodes} nodes, 100 leaves");
    for seed in [1u64, 2].into_iter().filter(|_| !only_cost) {
        for (label, noise) in [("exact", 0u64), ("±50 %", 50)] {
            let mut sc = scenario_seeded(0x9E37_79B9_7F4A_7C15 ^ seed, jobs, clusters, nodes);
            declare(&mut sc, noise, seed);
            accuracy(
                &format!("seed {seed}, 3 priorities, run times {label}"),
                &sc,
                noise == 0,
            );
            for j in &mut sc.jobs {
                one_priority(j.manifest.value_mut());
            }
            accuracy(
                &format!("seed {seed}, 1 priority, run times {label}"),
                &sc,
                noise == 0,
            );
        }
        // The same jobs all submitted at once: no arrival the forecast could not know.
        let mut sc = scenario_seeded(0x9E37_79B9_7F4A_7C15 ^ seed, jobs, clusters, nodes);
        declare(&mut sc, 0, seed);
        for j in &mut sc.jobs {
            j.at = 0;
        }
        accuracy(
            &format!("seed {seed}, 3 priorities, run times exact, all at once"),
            &sc,
            false,
        );
    }
    // The cost of one forecast over 10,000 waiting jobs, as the controller makes it: a copy of
    // the core (on the sync loop), then the forward run (off it).
    let waiting = if smoke { 500 } else { 10_000 };
    let mut sc = scenario_seeded(7, waiting, clusters, nodes);
    declare(&mut sc, 0, 7);
    cost(&sc);
}

/// Every job of `sc` submitted at once, the cycles of that instant run, then one forecast timed.
fn cost(sc: &Scenario) {
    let mut sched = Scheduler::new(Config::default());
    if let Some(q) = &sc.quota {
        sched.set_quota_tree(Some(
            QuotaTree::parse(q).expect("the generated tree is valid"),
        ));
    }
    sched.set_priority_classes(sc.priority_classes.clone());
    sim::apply_fleet(&mut sched, sc);
    let mut ids = Vec::new();
    for j in &sc.jobs {
        let w = interpret(&j.manifest.value()).expect("the generated jobs read");
        if let Submitted::Queued(id) | Submitted::Inadmissible(id, _) = sched.submit(&w, 0) {
            ids.push((id, j.run_for));
        }
    }
    forecast::settle(&mut sched);
    let mut inputs = Inputs {
        default_runtime: 3_600_000,
        ..Inputs::default()
    };
    let mut waiting = 0;
    for &(id, run_for) in &ids {
        match sched.state(id) {
            JobState::Admitted { .. } => {
                inputs.ends.insert(id, run_for);
            }
            JobState::Pending => waiting += 1,
            _ => {}
        }
        inputs.runtimes.insert(id, run_for);
    }
    let t = Instant::now();
    let copy = sched.clone();
    let clone = t.elapsed();
    let t = Instant::now();
    let est = forecast::forecast(copy, &inputs);
    let run = t.elapsed();
    let started = est
        .jobs
        .values()
        .filter(|s| matches!(s, forecast::Start::At { .. }))
        .count();
    println!(
        "forecast cost: {waiting} of {} jobs waiting: copy of the core {:.1} ms, forward run {:.2} s ({} instants, {} cycles, {started} starts forecast)",
        ids.len(),
        clone.as_secs_f64() * 1000.0,
        run.as_secs_f64(),
        est.instants,
        est.cycles
    );
    // As the controller makes it by default: the same run, stopped at its time budget.
    let budget = Duration::from_millis(200);
    let t = Instant::now();
    let copy = sched.clone();
    let bounded = forecast::forecast_within(copy, &inputs, budget, || t.elapsed());
    let took = t.elapsed();
    let (mut exact, mut lower) = (0, 0);
    for (job, s) in &bounded.jobs {
        match s {
            forecast::Start::NotBefore { .. } => lower += 1,
            s if est.jobs.get(job) == Some(s) => exact += 1,
            s => panic!(
                "the bounded run answers {s:?}, the whole run {:?}",
                est.jobs.get(job)
            ),
        }
    }
    let last_start = bounded
        .jobs
        .values()
        .filter_map(|s| match s {
            forecast::Start::At { at, .. } => Some(*at),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    println!(
        "forecast within {} ms (the controller's default): copy and run {:.0} ms ({} instants, {} cycles); {exact} answers as the whole run's (starts up to {:.1} h ahead), {lower} lower bounds (not before {:.1} h)",
        budget.as_millis(),
        took.as_secs_f64() * 1000.0,
        bounded.instants,
        bounded.cycles,
        last_start as f64 / 3_600_000.0,
        bounded.reached as f64 / 3_600_000.0,
    );
}
