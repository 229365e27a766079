//! The controller's names and flags, checked before anything starts (no fleet needed): QueuedJob
//! names stay unique when cut to 253 characters, `--origin` must be a label value, and a lease
//! must be renewed at least twice within its duration. Bad flags exit 2 naming the flag.

use std::process::Command;

use muster::controller::{check_flags, queued_job_name};
use muster::workload::JobKind;

#[test]
fn long_names_stay_unique_and_valid() {
    let short = queued_job_name(JobKind::PyTorchJob, "train");
    assert_eq!(short, "pytorchjob-train");
    let base = "a".repeat(250);
    let one = queued_job_name(JobKind::PyTorchJob, &format!("{base}-one"));
    let two = queued_job_name(JobKind::PyTorchJob, &format!("{base}-two"));
    assert_ne!(one, two, "two names sharing their first 253 characters");
    for n in [&one, &two] {
        assert!(n.len() <= 253, "{}", n.len());
        assert!(
            n.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        );
        assert!(!n.ends_with('-') && !n.ends_with('.'));
    }
    // Stable: the same job always maps to the same QueuedJob (a restart finds it).
    assert_eq!(
        one,
        queued_job_name(JobKind::PyTorchJob, &format!("{base}-one"))
    );
}

#[test]
fn origin_and_lease_flags_are_checked() {
    assert!(check_flags("hub", true, 15, 3).is_ok());
    assert!(check_flags("eu-hub.prod_1", true, 4, 1).is_ok());
    for bad in ["", "-hub", "hub-", "a hub", "hub/1", &"h".repeat(64)] {
        let e = check_flags(bad, true, 15, 3).expect_err(bad);
        assert!(e.starts_with("--origin"), "{e}");
    }
    let e = check_flags("hub", true, 15, 8).expect_err("retry too long");
    assert!(e.starts_with("--lease-retry-seconds 8"), "{e}");
    assert!(
        check_flags("hub", false, 15, 8).is_ok(),
        "no lease, no lease check"
    );
}

#[test]
fn bad_flags_exit_2_naming_the_flag() {
    for (args, flag) in [
        (vec!["--origin", "not a label"], "--origin"),
        (
            vec![
                "--lease-duration-seconds",
                "4",
                "--lease-retry-seconds",
                "3",
            ],
            "--lease-retry-seconds",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_muster"))
            .arg("controller")
            .args(&args)
            .output()
            .expect("runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(flag), "{args:?}: {err}");
    }
}
