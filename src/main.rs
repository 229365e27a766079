//! The `muster` command line: `muster sim` runs the scheduling core on a scenario (and can write
//! the metrics a controller would export).

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand, ValueEnum};

use muster::metrics::Metrics;
use muster::sim;

#[derive(Parser)]
#[command(
    name = "muster",
    version,
    about = "Queue, quota and gang-dispatch training jobs across clusters"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the scheduling core on a scenario with a virtual clock (default: the embedded demo).
    Sim {
        /// Scenario file (YAML). Without it, the embedded default scenario runs.
        scenario: Option<String>,
        /// Output format.
        #[arg(long, short, value_enum, default_value_t = Output::Table)]
        output: Output,
        /// Write the Prometheus exposition of the final state to FILE (`-`: to stdout, in place
        /// of the report).
        #[arg(long, value_name = "FILE")]
        metrics: Option<String>,
        /// Take the metrics at this virtual time (e.g. 10m) instead of at the end.
        #[arg(long, value_name = "DURATION", requires = "metrics")]
        metrics_at: Option<String>,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum Output {
    Json,
    Table,
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Sim {
            scenario,
            output,
            metrics,
            metrics_at,
        } => run_sim(
            scenario.as_deref(),
            output,
            metrics.as_deref(),
            metrics_at.as_deref(),
        ),
    }
}

/// Where the exposition goes; a file is created before the run so that a bad path fails at once.
enum MetricsOut {
    Stdout,
    File(String, std::fs::File),
}

fn run_sim(
    path: Option<&str>,
    output: Output,
    metrics_path: Option<&str>,
    metrics_at: Option<&str>,
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
    let result = if metrics_out.is_some() {
        sim::run_with_metrics(&file, &scenario, &mut progress, &metrics, at_ms)
    } else {
        sim::run(&file, &scenario, &mut progress)
    };
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
            print!("{}", metrics.encode());
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
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        },
        Output::Table => print!("{}", sim::table(&report)),
    }
    ExitCode::SUCCESS
}
