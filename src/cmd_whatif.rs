//! The `muster snapshot` and `muster what-if` commands: read the live state (or a scenario
//! file), apply the changes asked for, print the estimate tables. The work is the library's
//! (`controller::snapshot::fetch`, `whatif`); this is the command line around it.

use std::process::ExitCode;

use muster::controller::snapshot::{Live, fetch};
use muster::runtime::Rules;
use muster::sim;
use muster::whatif::{self, Change};

/// Where the state comes from.
pub struct From {
    pub scenario: Option<String>,
    pub url: Option<String>,
    pub kubeconfig: Option<std::path::PathBuf>,
    /// The controller's namespace, snapshot port and Lease (a port-forward to its pod).
    pub namespace: String,
    pub port: u16,
    pub lease: String,
}

impl From {
    fn live(&self) -> Live {
        match &self.url {
            Some(u) => Live::Url(u.clone()),
            None => Live::Hub {
                kubeconfig: self.kubeconfig.clone(),
                namespace: self.namespace.clone(),
                port: self.port,
                lease: self.lease.clone(),
            },
        }
    }
}

fn read_live(live: &Live) -> Result<String, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    rt.block_on(fetch(live)).map_err(|e| format!("{e:#}"))
}

/// `muster snapshot`: the live state as a scenario, on stdout.
pub fn snapshot(from: &From) -> ExitCode {
    match read_live(&from.live()) {
        Ok(text) => {
            out!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `muster what-if`: the estimate table before and after each change, in order.
pub fn what_if(from: &From, changes: &[String], default_runtime: u64) -> ExitCode {
    let read = |p: &str| std::fs::read_to_string(p).map_err(|e| format!("{p}: {e}"));
    let parsed: Result<Vec<Change>, String> =
        changes.iter().map(|c| Change::parse(c, &read)).collect();
    let changes = match parsed {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let (file, text) = match &from.scenario {
        Some(p) => match read(p) {
            Ok(t) => (p.clone(), t),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        },
        None => match read_live(&from.live()) {
            Ok(t) => ("<live snapshot>".to_string(), t),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        },
    };
    let mut sc = match sim::parse_scenario(&file, &text) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let rules = Rules {
        default: default_runtime,
        ..Rules::default()
    };
    let mut before = match whatif::estimates(&file, &sc, &rules) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    outln!("== estimated starts, seconds on the scenario's clock (a snapshot's starts now)");
    out!("{}", whatif::current(&before));
    for c in &changes {
        if let Err(e) = c.apply(&mut sc, &rules) {
            eprintln!("error: {}: {e}", c.describe());
            return ExitCode::from(2);
        }
        let after = match whatif::estimates(&file, &sc, &rules) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("error: after {}: {e}", c.describe());
                return ExitCode::from(2);
            }
        };
        outln!("\n== after: {}", c.describe());
        out!("{}", whatif::table(&before, &after));
        before = after;
    }
    ExitCode::SUCCESS
}
