//! Fleet processes paused with SIGSTOP and resumed with SIGCONT, by the pid files the fleet keeps
//! (a paused kube-scheduler leaves pods unbound, a paused kube-apiserver is a member that stops
//! answering, a paused operator creates no pods). The guard resumes them even when a test fails.
#![allow(dead_code)]

use super::fleet;

/// Pauses a fleet process; resumes it when dropped.
pub struct Paused(String);

impl Paused {
    pub fn new(process: &str) -> Paused {
        signal(process, "STOP");
        Paused(process.to_string())
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        signal(&self.0, "CONT");
    }
}

pub fn signal(process: &str, sig: &str) {
    let pidfile = fleet::state_dir()
        .join("pids")
        .join(format!("{}.pid", process.replace('/', "_")));
    let pid = std::fs::read_to_string(&pidfile)
        .unwrap_or_else(|e| panic!("{}: {e}", pidfile.display()))
        .trim()
        .to_string();
    let ok = std::process::Command::new("kill")
        .args([&format!("-{sig}"), &pid])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(ok, "kill -{sig} {pid} ({process})");
}
