//! Per-pod placement benchmark: the cost of one `muster::placement::step` pass, which the
//! controller runs for every dispatched job on every sync. Two cases per job size: the release
//! (every pod gated, all released onto their planned nodes) and the steady state (every pod
//! released and bound: the pass that finds nothing to do). Run: `cargo bench --bench placement`.
//! No assertions on time: results are recorded in docs/benchmarks.md.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use muster::placement::{Plan, PodSeen, step};

/// `pods` pods in two components (1 master, the rest workers) spread over `nodes` nodes.
fn case(pods: u32, nodes: u32) -> (Plan, Vec<PodSeen>, Vec<PodSeen>) {
    let mut plan = Plan::new();
    plan.insert("master".into(), BTreeMap::from([("node-0".to_string(), 1)]));
    let mut workers = BTreeMap::new();
    for i in 0..pods - 1 {
        *workers.entry(format!("node-{}", i % nodes)).or_insert(0) += 1;
    }
    plan.insert("worker".into(), workers);
    let mut gated = Vec::new();
    let mut bound = Vec::new();
    for (c, m) in &plan {
        let mut k = 0;
        for (node, n) in m {
            for _ in 0..*n {
                let name = format!("job-{c}-{k}");
                k += 1;
                gated.push(PodSeen {
                    name: name.clone(),
                    component: c.clone(),
                    gated: true,
                    ..Default::default()
                });
                bound.push(PodSeen {
                    name,
                    component: c.clone(),
                    gated: false,
                    allowed: Some([node.clone()].into()),
                    bound: Some(node.clone()),
                    ..Default::default()
                });
            }
        }
    }
    (plan, gated, bound)
}

fn time(label: &str, pods: u32, f: impl Fn() -> usize) {
    // Enough repetitions for about a quarter of a second of work.
    let probe = Instant::now();
    f();
    let once = probe.elapsed().as_nanos().max(1);
    let reps = (250_000_000 / once).clamp(3, 100_000) as u32;
    let start = Instant::now();
    let mut sink = 0;
    for _ in 0..reps {
        sink += f();
    }
    let per = start.elapsed() / reps;
    println!(
        "{label:>12} {pods:>6} pods: {:>10.1} µs per pass ({:.2} µs per pod) [{sink}]",
        per.as_secs_f64() * 1e6,
        per.as_secs_f64() * 1e6 / f64::from(pods)
    );
}

fn main() {
    // As `muster sim` runs (src/alloc.rs).
    muster::alloc::keep_freed_pages();
    let none = BTreeSet::new();
    for (pods, nodes) in [(8, 4), (64, 8), (512, 64), (4096, 512)] {
        let (plan, gated, bound) = case(pods, nodes);
        time("release", pods, || {
            step(&plan, &none, &none, &gated, &none).release.len()
        });
        time("steady", pods, || {
            step(&plan, &none, &none, &bound, &none).pods.len()
        });
    }
}
