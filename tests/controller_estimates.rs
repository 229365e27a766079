//! "When will my job start?" on the local fleet: a `muster controller` forecasts the start of a
//! waiting job from the live state (issue "start-time estimates"), the job starts then and there,
//! and a snapshot of the live state simulated offline says the same.
//!
//! Two 1-GPU jobs declared to run 30 s and 60 s fill a queue of 2 GPUs; a third must wait for the
//! first to end. Every estimate the third job's QueuedJob shows while it waits is checked against
//! when and where it really starts.

// The std Mutex only serializes the tests of this binary; holding it across awaits is the point.
#![allow(clippy::await_holding_lock)]

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::Api;
use muster::controller::crd::{QueuedJobState, QueuedJobStatus};
use serde_json::{Value, json};
use support::failures::*;
use support::fleet::{self, unique_name, wait_for};
use support::hub::{self, CONTROLLER_NS, Controller};
use support::watchdog::Watchdog;

/// A batch Job of one pod (1 GPU) that declares `secs` of run time and whose pod kwok completes
/// after `secs`.
fn gpu_job(ns: &str, name: &str, secs: u32) -> Value {
    let r = json!({"cpu": "100m", "memory": "64Mi", "nvidia.com/gpu": "1"});
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": ns,
                     "annotations": {"muster.dev/expected-runtime": format!("{secs}s")}},
        "spec": {"backoffLimit": 0,
                 "template": {"metadata": {"annotations": runs_for(secs)},
                              "spec": {"restartPolicy": "Never",
                                       "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                                       "resources": {"requests": r.clone(), "limits": r}}]}}}
    })
}

async fn status(hub: &Client, ns: &str, name: &str) -> QueuedJobStatus {
    hub::queued_job(hub, ns, "Job", name)
        .await
        .and_then(|q| q.status)
        .unwrap_or_default()
}

fn ms(rfc3339: &str) -> i64 {
    rfc3339
        .parse::<jiff::Timestamp>()
        .unwrap_or_else(|e| panic!("{rfc3339:?}: {e}"))
        .as_millisecond()
}

fn muster(args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_muster"))
        .args(args)
        .output()
        .expect("running muster");
    let mut text = String::from_utf8_lossy(&out.stdout).to_string();
    if !out.status.success() {
        text.push_str(&String::from_utf8_lossy(&out.stderr));
    }
    (out.status.success(), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_job_is_told_when_and_where_it_starts_and_starts_then() {
    let _lock = HUB.lock().unwrap_or_else(|e| e.into_inner());
    let ns = unique_name("eta");
    let leaf = json!({"name": "eta", "namespaces": [ns],
                      "max": {"cpu": "100", "memory": "400Gi", "nvidia.com/gpu": "2"}});
    let hub = setup(&[&ns], root(vec![leaf])).await;
    let dog = Watchdog::start(&hub, &fleet::MEMBERS, &[&ns]).await;
    let controller = Controller::start("eta", &["--estimate-interval-seconds", "2"]).await;
    let snapshot_port = controller.snapshot;
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(async {
        for (name, secs) in [("first", 30), ("second", 60)] {
            fleet::create_json(&hub, "jobs", gpu_job(&ns, name, secs))
                .await
                .expect("create");
        }
        for name in ["first", "second"] {
            wait_for(&format!("{name} dispatched"), T, || async {
                let st = status(&hub, &ns, name).await;
                match st.state {
                    QueuedJobState::Dispatched | QueuedJobState::Running => Ok(()),
                    _ => Err(format!("{st:?}")),
                }
            })
            .await;
        }
        let first = status(&hub, &ns, "first").await;
        let first_admitted = ms(first.admitted_at.as_deref().expect("admittedAt"));
        fleet::create_json(&hub, "jobs", gpu_job(&ns, "third", 30))
            .await
            .expect("create");
        // Every estimate shown while it waits, and one snapshot taken then.
        let mut seen: Vec<(i64, String, Vec<String>)> = Vec::new();
        let mut snapshot: Option<(i64, String)> = None;
        let deadline = std::time::Instant::now() + T;
        let started = loop {
            assert!(
                std::time::Instant::now() < deadline,
                "third never started: {seen:?}"
            );
            let st = status(&hub, &ns, "third").await;
            match st.state {
                QueuedJobState::Queued => {
                    if let Some(e) = &st.estimate {
                        let start = e.start.as_deref().unwrap_or_else(|| panic!("never: {e:?}"));
                        assert_eq!(e.runtime.as_deref(), Some("30s"), "{e:?}");
                        assert_eq!(e.runtime_source.as_deref(), Some("declared"), "{e:?}");
                        let cluster = e.cluster.clone().expect("expected cluster");
                        if snapshot.is_none() {
                            let url = format!("http://127.0.0.1:{snapshot_port}");
                            let (ok, text) = muster(&["snapshot", "--url", &url]);
                            assert!(ok, "muster snapshot: {text}");
                            snapshot = Some((jiff::Timestamp::now().as_millisecond(), text));
                            // What-if on the live state: without the member it is expected on,
                            // its estimate moves.
                            let change = format!("remove-member={cluster}");
                            let (ok, table) =
                                muster(&["what-if", "--url", &url, "--change", &change]);
                            assert!(ok, "muster what-if (live): {table}");
                            let line = table
                                .lines()
                                .rev()
                                .find(|l| l.contains("/third"))
                                .unwrap_or_default();
                            assert!(
                                line.contains(&format!("on {cluster}")) && line.contains("changed"),
                                "live what-if: {table}"
                            );
                        }
                        seen.push((ms(start), cluster, e.after.clone()));
                    }
                }
                _ if st.admitted_at.is_some() => break st,
                _ => {}
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        let actual = ms(started.admitted_at.as_deref().expect("admittedAt"));
        let cluster = started.cluster.clone().expect("cluster");
        eprintln!("estimates seen (ms, member, after): {seen:?}; started at {actual} on {cluster}");
        assert!(!seen.is_empty(), "no estimate was shown while it waited");
        // It waited for the first job, declared 30 s.
        assert!(
            actual >= first_admitted + 30_000,
            "third started {} ms after first was admitted",
            actual - first_admitted
        );
        for (start, c, after) in &seen {
            assert!(
                (start - actual).abs() <= 15_000,
                "estimated {start}, started {actual} ({} ms off); all seen: {seen:?}",
                start - actual
            );
            assert_eq!(c, &cluster, "expected on {c}, started on {cluster}");
            assert!(
                after.iter().any(|a| a.ends_with("/first")) || *start <= actual,
                "it waits for first: {after:?}"
            );
        }
        assert!(
            seen[0].2.iter().any(|a| a == &format!("{ns}/first")),
            "the first estimate names the job it waits for: {:?}",
            seen[0]
        );
        // The snapshot, simulated offline, takes the same decision: third after first ends, on
        // the member the controller chose.
        let (taken, text) = snapshot.expect("a snapshot was taken");
        let sc = muster::sim::parse_scenario("snapshot", &text).expect("the snapshot reads");
        let running = sc.jobs.iter().filter(|j| j.running.is_some()).count();
        assert_eq!(running, 2, "first and second run in the snapshot");
        let r = muster::sim::run_estimated(
            "snapshot",
            &sc,
            &mut (),
            &muster::sim::Estimating {
                at_submission: true,
                ..Default::default()
            },
        )
        .expect("the snapshot runs");
        let third = r
            .jobs
            .iter()
            .find(|j| j.name == "third")
            .expect("third in the snapshot");
        assert_eq!(
            third.cluster.as_deref(),
            Some(cluster.as_str()),
            "{third:?}"
        );
        let sim_start = taken + (third.dispatched.as_f64().expect("dispatched") * 1000.0) as i64;
        assert!(
            (sim_start - actual).abs() <= 15_000,
            "the snapshot says {sim_start}, it started {actual}"
        );
        let first_sim = r.jobs.iter().find(|j| j.name == "first").expect("first");
        assert_eq!(
            third.dispatched, first_sim.finished,
            "third starts as first ends"
        );
        // What if the member it lands on were gone? Asked of the same snapshot, offline.
        let file = fleet::repo_root()
            .join("target")
            .join("e2e")
            .join(format!("snapshot-{}.yaml", std::process::id()));
        std::fs::write(&file, &text).expect("write snapshot");
        let path = file.display().to_string();
        let change = format!("remove-member={cluster}");
        let (ok, table) = muster(&["what-if", "--scenario", &path, "--change", &change]);
        assert!(ok, "muster what-if: {table}");
        let line = table
            .lines()
            .rev()
            .find(|l| l.contains("/third"))
            .unwrap_or_default()
            .to_string();
        assert!(line.contains("changed"), "{table}");
        // First ran to its end: its run time is in the durable history, under its queue.
        wait_for("the run-time history written", T, || async {
            let cms: Api<ConfigMap> = Api::namespaced(hub.clone(), CONTROLLER_NS);
            let h = cms
                .get_opt("muster-runtime-history")
                .await
                .map_err(|e| e.to_string())?
                .and_then(|c| c.data)
                .and_then(|d| d.get("history.json").cloned())
                .unwrap_or_default();
            if h.contains("root/eta/Job/") {
                Ok(())
            } else {
                Err(h)
            }
        })
        .await;
        let _ = std::fs::remove_file(&file);
        dog.assert_clean("eta").await;
    }))
    .await;
    finish(&hub, &[&ns], vec![controller], outcome).await;
}
