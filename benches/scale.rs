//! Scale benchmark: 100,000 jobs on 50 clusters x 200 nodes under a 3-level tree of 100 leaves,
//! through the same `muster::sim::run` the CLI uses. Prints wall time, admission decisions per
//! second and peak memory. Run: `cargo bench --bench scale` (args: JOBS CLUSTERS NODES).
//! No assertions on time: results are recorded in docs/benchmarks.md.

use std::time::Instant;

mod common;

use common::scenario;
use muster::sim;

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn main() {
    let raw: Vec<String> = std::env::args().skip(1).collect();
    // `cargo bench` passes --bench; `cargo test --all-targets` runs this binary without it: then
    // a small smoke run checks that the benchmark still works, without timing anything.
    let smoke = !raw.iter().any(|a| a == "--bench");
    let args: Vec<usize> = raw.iter().filter_map(|a| a.parse().ok()).collect();
    let (dj, dc, dn) = if smoke {
        (600, 4, 20)
    } else {
        (100_000, 50, 200)
    };
    let jobs = args.first().copied().unwrap_or(dj);
    let clusters = args.get(1).copied().unwrap_or(dc);
    let nodes = args.get(2).copied().unwrap_or(dn) as u32;
    let t0 = Instant::now();
    let sc = scenario(jobs, clusters, nodes);
    let generated = t0.elapsed();
    let t1 = Instant::now();
    let report = sim::run("bench", &sc, &mut ()).expect("bench scenario is valid");
    let run = t1.elapsed();
    let s = &report.summary;
    let decisions = s.dispatches + s.preemptions;
    println!("scale: {jobs} jobs, {clusters} clusters x {nodes} nodes, 100 leaves");
    println!("generate: {:.2}s", generated.as_secs_f64());
    println!(
        "run: {:.2}s, {} cycles, {} dispatches, {} preemptions, {} finished, {} pending, {} inadmissible",
        run.as_secs_f64(),
        s.cycles,
        s.dispatches,
        s.preemptions,
        s.finished,
        s.pending,
        s.inadmissible
    );
    println!(
        "admission decisions/s: {:.0}",
        decisions as f64 / run.as_secs_f64()
    );
    println!("utilization: {:?}", s.utilization);
    println!("virtual makespan: {}s", s.makespan);
    println!("peak RSS: {} MiB", peak_rss_kib() / 1024);
    if smoke {
        let accounted =
            s.finished + s.running + s.pending + s.inadmissible + s.rejected + s.ignored;
        let ok = accounted == jobs && s.finished + s.inadmissible == jobs && s.rejected == 0;
        println!(
            "scale smoke: {} passed, {} failed",
            usize::from(ok),
            usize::from(!ok)
        );
        if !ok {
            std::process::exit(1);
        }
    }
}
