//! The `muster` command line: `muster sim` runs the scheduling core on a scenario.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand, ValueEnum};

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
        /// Explain why this job waits (repeatable): when it first waits, when it is dispatched
        /// and at the end of the run.
        #[arg(long, value_name = "NAMESPACE/NAME")]
        explain: Vec<String>,
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
            explain,
        } => run_sim(scenario.as_deref(), output, &explain),
    }
}

fn run_sim(path: Option<&str>, output: Output, explain: &[String]) -> ExitCode {
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
    let mut progress = StderrProgress {
        last: Instant::now(),
        enabled: std::io::stderr().is_terminal(),
    };
    let report = match sim::run_explained(&file, &scenario, &mut progress, explain) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if progress.enabled {
        eprint!("\r\x1b[K");
    }
    match output {
        Output::Json => match serde_json::to_string_pretty(&report) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        },
        Output::Table => print!("{}{}", sim::table(&report), sim::explanations_text(&report)),
    }
    ExitCode::SUCCESS
}
