//! The `muster sim` command: a scenario run (its report, explanations, metrics) or the fault
//! simulation over seeds. The work is the library's (`sim`, `sim::faults`); this is the command
//! line around it.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use muster::metrics::Metrics;
use muster::sim;

use crate::{Output, PolicyArg};

/// Where the exposition goes; a file is created before the run so that a bad path fails at once.
enum MetricsOut {
    Stdout,
    File(String, std::fs::File),
}

struct StderrProgress {
    last: Instant,
    enabled: bool,
}

impl sim::Progress for StderrProgress {
    fn tick(&mut self, done: usize, total: usize, now_ms: u64) {
        if self.enabled && self.last.elapsed() >= Duration::from_millis(500) {
            self.last = Instant::now();
            eprint!(
                "\r{done}/{total} events, virtual time {}s   ",
                now_ms / 1000
            );
        }
    }
}

/// `muster sim --faults N` / `--faults-seed SEED`.
pub fn run_faults(
    from: u64,
    n: Option<u64>,
    one: Option<u64>,
    policy: PolicyArg,
    defect: Option<muster::sim::faults::Defect>,
) -> ExitCode {
    use muster::sim::faults::{Options, run};
    // One seed under one partition policy, as every run here is made.
    let one_run = |seed, partition| {
        run(&Options {
            seed,
            partition,
            defect,
            ..Options::default()
        })
    };
    if let Some(seed) = one {
        let mut broken = false;
        for partition in policy.policies() {
            let o = one_run(seed, partition);
            outln!("# seed {seed}, partition policy {}", partition.as_str());
            for line in &o.trace {
                outln!("{line}");
            }
            outln!("{}", o.summary());
            broken |= o.violation.is_some();
        }
        return if broken {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        };
    }
    let n = n.unwrap_or(0);
    let (mut runs, mut faults, mut crashes, mut requeues, mut bad) = (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut freed_early = 0u64;
    let started = Instant::now();
    for seed in from..from.saturating_add(n) {
        for partition in policy.policies() {
            let o = one_run(seed, partition);
            runs += 1;
            faults += u64::from(o.faults);
            crashes += u64::from(o.crashes);
            requeues += u64::from(o.requeues);
            freed_early += u64::from(o.freed_early);
            if o.violation.is_some() {
                bad += 1;
                outln!("{}", o.summary());
            }
        }
    }
    outln!(
        "{runs} runs ({n} seeds from {from}, partition policy {}): {bad} broke an invariant; \
         {faults} faults, {crashes} controller crashes, {requeues} requeues, {freed_early} jobs \
         freed when their pods were done; {:.1} s",
        match policy {
            PolicyArg::Replace => "replace",
            PolicyArg::Wait => "wait",
            PolicyArg::Both => "replace and wait",
        },
        started.elapsed().as_secs_f64()
    );
    if bad > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

pub fn run_sim(
    path: Option<&str>,
    output: Output,
    explain: &[String],
    metrics_path: Option<&str>,
    metrics_at: Option<&str>,
    estimates: Option<sim::Budget>,
) -> ExitCode {
    let at_ms = match metrics_at.map(sim::parse_duration).transpose() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: --metrics-at: {e}");
            return ExitCode::from(2);
        }
    };
    let (file, text) = match path {
        None => (
            "<embedded default>".to_string(),
            sim::DEFAULT_SCENARIO.to_string(),
        ),
        Some(p) => match std::fs::read_to_string(p) {
            Ok(t) => (p.to_string(), t),
            Err(e) => {
                eprintln!("error: {p}: {e}");
                return ExitCode::from(2);
            }
        },
    };
    let scenario = match sim::parse_scenario(&file, &text) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let metrics_out = match metrics_path {
        None => None,
        Some("-") => Some(MetricsOut::Stdout),
        Some(p) => match std::fs::File::create(p) {
            Ok(f) => Some(MetricsOut::File(p.to_string(), f)),
            Err(e) => {
                eprintln!("error: {p}: {e}");
                return ExitCode::from(2);
            }
        },
    };
    let mut progress = StderrProgress {
        last: Instant::now(),
        enabled: std::io::stderr().is_terminal(),
    };
    let metrics = Metrics::new();
    let rec = metrics_out.as_ref().map(|_| &metrics);
    let estimating = sim::Estimating {
        at_submission: estimates.is_some(),
        budget: estimates.unwrap_or_default(),
        ..sim::Estimating::default()
    };
    let result = sim::run_full(
        &file,
        &scenario,
        &mut progress,
        rec,
        at_ms,
        explain,
        &estimating,
    );
    let report = match result {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            if let Some(MetricsOut::File(p, _)) = &metrics_out {
                let _ = std::fs::remove_file(p);
            }
            return ExitCode::from(2);
        }
    };
    if progress.enabled {
        eprint!("\r\x1b[K");
    }
    match metrics_out {
        None => {}
        Some(MetricsOut::Stdout) => {
            out!("{}", metrics.encode());
            return ExitCode::SUCCESS;
        }
        Some(MetricsOut::File(p, mut f)) => {
            if let Err(e) = f.write_all(metrics.encode().as_bytes()) {
                eprintln!("error: {p}: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    match output {
        Output::Json => match serde_json::to_string_pretty(&report) {
            Ok(s) => outln!("{s}"),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        },
        Output::Table => out!("{}{}", sim::table(&report), sim::explanations_text(&report)),
    }
    ExitCode::SUCCESS
}
