//! Start-time estimate accuracy and cost. For generated scenarios (the scale benchmark's
//! generator, scaled down), each job declares its run time (`muster.dev/expected-runtime`), exact
//! or off by a random factor; the simulator forecasts each job's start at its submission and again
//! midway through its wait, and this compares both with the start that really happened.
//! Then the cost of one forecast over 10,000 waiting jobs.
//! Run: `cargo bench --bench estimates` (args: JOBS CLUSTERS NODES). Figures: docs/benchmarks.md.

use std::collections::BTreeMap;
use std::time::Instant;

use serde_json::{Value, json};

mod common;

use common::{Rng, scenario_seeded};
use muster::runtime::ANNOTATION;
use muster::sim::{self, Estimating, JobReport, Scenario};

/// Declares each job's run time: exact (`noise` 0) or times a factor drawn in
/// [1 - noise%, 1 + noise%].
fn declare(sc: &mut Scenario, noise: u64, seed: u64) {
    let mut rng = Rng(seed);
    for j in &mut sc.jobs {
        let pct = 100 - noise + rng.below(2 * noise + 1);
        let ms = j.run_for * pct / 100;
        j.manifest["metadata"]["annotations"] = json!({ANNOTATION: format!("{ms}ms")});
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

fn accuracy(name: &str, sc: &Scenario) {
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
    for (a, b) in first.jobs.iter().zip(&second.jobs) {
        let Some((s, d)) = started(a) else { continue };
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
    println!("  midway:        {}", midway.row());
}

fn main() {
    let raw: Vec<String> = std::env::args().skip(1).collect();
    let smoke = !raw.iter().any(|a| a == "--bench");
    let args: Vec<usize> = raw.iter().filter_map(|a| a.parse().ok()).collect();
    let (dj, dc, dn) = if smoke { (200, 2, 10) } else { (3000, 10, 50) };
    let jobs = args.first().copied().unwrap_or(dj);
    let clusters = args.get(1).copied().unwrap_or(dc);
    let nodes = args.get(2).copied().unwrap_or(dn) as u32;
    println!("estimates: {jobs} jobs, {clusters} clusters x {nodes} nodes, 100 leaves");
    for seed in [1u64, 2] {
        for (label, noise) in [("exact", 0u64), ("±50 %", 50)] {
            let mut sc = scenario_seeded(0x9E37_79B9_7F4A_7C15 ^ seed, jobs, clusters, nodes);
            declare(&mut sc, noise, seed);
            accuracy(
                &format!("seed {seed}, 3 priorities, run times {label}"),
                &sc,
            );
            for j in &mut sc.jobs {
                one_priority(&mut j.manifest);
            }
            accuracy(&format!("seed {seed}, 1 priority, run times {label}"), &sc);
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
        );
    }
    // The cost of one forecast over 10,000 waiting jobs: all submitted at once.
    let waiting = if smoke { 500 } else { 10_000 };
    let mut sc = scenario_seeded(7, waiting, clusters, nodes);
    declare(&mut sc, 0, 7);
    for j in &mut sc.jobs {
        j.at = 0;
    }
    let t = Instant::now();
    let plain = sim::run("cost", &sc, &mut ()).expect("runs");
    let without = t.elapsed();
    let t = Instant::now();
    let with = sim::run_estimated(
        "cost",
        &sc,
        &mut (),
        &Estimating {
            at_submission: true,
            ..Estimating::default()
        },
    )
    .expect("runs");
    let forecast = t.elapsed().saturating_sub(without);
    let waited = with
        .jobs
        .iter()
        .filter(|j| num(&j.dispatched).is_none_or(|d| d > 0))
        .count();
    println!(
        "forecast cost: {waited} of {waiting} jobs waiting at once: one forecast {:.2}s (the run itself {:.2}s, {} dispatches)",
        forecast.as_secs_f64(),
        without.as_secs_f64(),
        plain.summary.dispatches
    );
}
