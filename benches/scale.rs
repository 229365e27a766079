//! Scale benchmark: 100,000 jobs on 50 clusters x 200 nodes under a 3-level tree of 100 leaves,
//! through the same `muster::sim::run` the CLI uses. Prints wall time, admission decisions per
//! second, the most jobs waiting at once, a digest of every decision and peak memory.
//! Run: `cargo bench --bench scale` (args: JOBS CLUSTERS NODES). Other scenarios:
//! `-- deep` (50,000 jobs, 30 clusters x 300 nodes in three pools, 20 leaves, tens of thousands
//! waiting), `-- diverse` (the same with hundreds of job shapes), `-- file PATH...` (the
//! decision digest of scenario files), `-- topology` (the default scenario on racks of 16 nodes,
//! 4 racks a block, every PyTorchJob and MPIJob requiring one rack, every JobSet preferring
//! one). `estimates` after the scenario (`-- deep estimates`) runs it as `muster sim` does by
//! default, with start-time estimates under their default budget, and prints how they were
//! made. No assertions on time: results are recorded in
//! docs/benchmarks.md.

use std::time::Instant;

mod common;

use common::{deep, scenario, topology};
use muster::sim::{self, Scenario};

/// A `/proc/self/status` field in KiB (`VmHWM`: peak resident, `VmRSS`: resident now).
fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn peak_rss_kib() -> u64 {
    status_kib("VmHWM:")
}

/// The benchmark's scenarios: `scale` (the default), `deep` and `diverse`.
fn generate(mode: &str, jobs: usize, clusters: usize, nodes: u32) -> Scenario {
    match mode {
        "deep" => deep::deep(jobs, clusters, nodes),
        "diverse" => deep::diverse(jobs, clusters, nodes),
        "topology" => topology(jobs, clusters, nodes),
        _ => scenario(jobs, clusters, nodes),
    }
}

/// The most jobs waiting at once (submitted, not yet first dispatched), from the report.
fn peak_waiting(report: &sim::Report) -> usize {
    let t = |v: &serde_json::Value| v.as_u64().or_else(|| v.as_f64().map(|x| x as u64));
    let mut ev: Vec<(u64, i64)> = Vec::new();
    for j in &report.jobs {
        let Some(at) = t(&j.submitted) else { continue };
        ev.push((at, 1));
        let first = j.first_dispatched.as_ref().unwrap_or(&j.dispatched);
        if let Some(d) = t(first) {
            ev.push((d, -1));
        }
    }
    // Dispatches before submissions at the same instant (a job may start when it arrives).
    ev.sort_unstable();
    let (mut now, mut peak) = (0i64, 0i64);
    for (_, d) in ev {
        now += d;
        peak = peak.max(now);
    }
    peak as usize
}

fn main() {
    // As `muster sim` runs (src/alloc.rs).
    muster::alloc::keep_freed_pages();
    let raw: Vec<String> = std::env::args().skip(1).collect();
    // `cargo bench` passes --bench; `cargo test --all-targets` runs this binary without it: then
    // a small smoke run of each scenario checks that the benchmark still works, without timing
    // anything.
    let smoke = !raw.iter().any(|a| a == "--bench");
    let args: Vec<usize> = raw.iter().filter_map(|a| a.parse().ok()).collect();
    let mode = raw
        .iter()
        .find(|a| {
            matches!(
                a.as_str(),
                "scale" | "deep" | "diverse" | "topology" | "file"
            )
        })
        .map_or("scale", String::as_str);
    if mode == "file" {
        // `-- file PATH...`: each scenario file's decisions, for comparing two builds.
        for path in raw.iter().skip_while(|a| *a != "file").skip(1) {
            let text = std::fs::read_to_string(path).expect("readable scenario");
            match sim::parse_scenario(path, &text).map(|sc| sim::run(path, &sc, &mut ())) {
                Ok(Ok(r)) => println!("{path}: {}", r.summary.trace),
                Ok(Err(e)) | Err(e) => println!("{path}: error: {e}"),
            }
        }
        return;
    }
    if smoke {
        let mut failed = 0;
        for (mode, j, c, n) in [
            ("scale", 600, 4, 20),
            ("deep", 800, 4, 30),
            ("diverse", 800, 4, 30),
            ("topology", 600, 4, 40),
        ] {
            if !one(mode, j, c, n, true) {
                failed += 1;
            }
        }
        println!("scale smoke: {} passed, {failed} failed", 4 - failed);
        if failed > 0 {
            std::process::exit(1);
        }
        return;
    }
    let (dj, dc, dn) = match mode {
        "deep" | "diverse" => (50_000, 30, 300),
        _ => (100_000, 50, 200),
    };
    let jobs = args.first().copied().unwrap_or(dj);
    let clusters = args.get(1).copied().unwrap_or(dc);
    let nodes = args.get(2).copied().unwrap_or(dn) as u32;
    let estimates = raw.iter().any(|a| a == "estimates");
    one_with(mode, jobs, clusters, nodes, false, estimates);
}

/// One run; in a smoke run, whether every job ended (finished, or inadmissible as written).
fn one(mode: &str, jobs: usize, clusters: usize, nodes: u32, smoke: bool) -> bool {
    one_with(mode, jobs, clusters, nodes, smoke, smoke && mode == "scale")
}

/// [`one`], with start-time estimates (the default budget) when `estimates`.
fn one_with(
    mode: &str,
    jobs: usize,
    clusters: usize,
    nodes: u32,
    smoke: bool,
    estimates: bool,
) -> bool {
    let t0 = Instant::now();
    let sc = generate(mode, jobs, clusters, nodes);
    let generated = t0.elapsed();
    let rss_generated = status_kib("VmRSS:");
    let t1 = Instant::now();
    let report = if estimates {
        let e = sim::Estimating {
            at_submission: true,
            ..sim::Estimating::default()
        };
        sim::run_estimated("bench", &sc, &mut (), &e)
    } else {
        sim::run("bench", &sc, &mut ())
    }
    .expect("bench scenario is valid");
    let run = t1.elapsed();
    let s = &report.summary;
    let decisions = s.dispatches + s.preemptions;
    let leaves = if matches!(mode, "scale" | "topology") {
        100
    } else {
        20
    };
    println!("{mode}: {jobs} jobs, {clusters} clusters x {nodes} nodes, {leaves} leaves");
    println!(
        "generate: {:.2}s, {} MiB resident after it",
        generated.as_secs_f64(),
        rss_generated / 1024
    );
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
    println!("peak waiting: {}", peak_waiting(&report));
    println!("utilization: {:?}", s.utilization);
    println!("virtual makespan: {}s", s.makespan);
    println!("decisions digest: {}", s.trace);
    if let Some(e) = &s.estimates {
        println!("{}", sim::estimates_line(e));
    }
    println!("peak RSS: {} MiB", peak_rss_kib() / 1024);
    if !smoke {
        return true;
    }
    let accounted = s.finished + s.running + s.pending + s.inadmissible + s.rejected + s.ignored;
    accounted == jobs && s.finished + s.inadmissible == jobs && s.rejected == 0
}
