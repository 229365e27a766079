//! A member API server stopped during a burst, with a forced lease change, on the local fleet.
//!
//! Two replicas run; a burst of batch Jobs is submitted. While they are being admitted and run,
//! the API server of the member they went to is frozen (SIGSTOP) and the Lease is handed to the standby by force
//! (holder and transitions written, as a replica that takes over does). The old leader must
//! stop acting (it exits), the standby must lead, the jobs on the frozen member are taken back
//! after the grace and placed elsewhere, and when the member answers again its old copies go.
//! Every job ends Finished, and a watchdog of every member's pods and the hub's records sees,
//! the whole time, no job running on two members outside a declared partition and no running pod
//! deleted without a record saying why.

#![allow(clippy::await_holding_lock)]

mod support;

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, Patch, PatchParams};
use muster::controller::crd::QueuedJobState;
use serde_json::json;
use support::failures::*;
use support::fleet::{self, unique_name, wait_for};
use support::hub::{self, CONTROLLER_NS, Controller};
use support::process::Paused;
use support::watchdog::Watchdog;

static HUB: std::sync::Mutex<()> = std::sync::Mutex::new(());

const JOBS: usize = 24;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_member_stopped_during_a_burst_with_a_forced_lease_change_loses_and_duplicates_nothing() {
    let _lock = HUB.lock().unwrap_or_else(|e| e.into_inner());
    let ns = unique_name("takeover");
    let hub = setup(&[&ns], root(vec![leaf("takeover", &ns)])).await;
    let dog = Watchdog::start(&hub, &fleet::MEMBERS, &[&ns]).await;
    let flags = [
        "--lease-duration-seconds",
        "4",
        "--lease-retry-seconds",
        "1",
        "--member-lost-grace-seconds",
        "6",
    ];
    let tags = ["takeover-a", "takeover-b"];
    let mut replicas = vec![
        Controller::start(tags[0], &flags).await,
        Controller::start(tags[1], &flags).await,
    ];
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(async {
        let leader = Controller::one_leader(&replicas).await;
        let standby = 1 - leader;
        for i in 0..JOBS {
            fleet::create_json(&hub, "jobs", batch_job(&ns, &format!("burst-{i}"), 1, 1, 8))
                .await
                .expect("create a job");
        }
        // Some admitted and dispatched: their member stops answering, and the Lease changes
        // hands.
        let placed = wait_for("jobs dispatched", T, || async {
            let mut placed: Vec<(String, String)> = Vec::new();
            for i in 0..JOBS {
                let name = format!("burst-{i}");
                let st = hub::queued_job(&hub, &ns, "Job", &name)
                    .await
                    .and_then(|q| q.status);
                if let Some(c) = st.and_then(|s| s.cluster) {
                    placed.push((name, c));
                }
            }
            if placed.len() >= 4 {
                Ok(placed)
            } else {
                Err(format!("{placed:?}"))
            }
        })
        .await;
        let member = placed[0].1.clone();
        let there: Vec<String> = placed
            .iter()
            .filter(|(_, c)| *c == member)
            .map(|(n, _)| n.clone())
            .collect();
        let frozen = Paused::new(&format!("{member}/kube-apiserver"));
        let leases: Api<Lease> = Api::namespaced(hub.clone(), CONTROLLER_NS);
        let lease = leases.get("muster-controller").await.expect("the Lease");
        let transitions = lease.spec.and_then(|s| s.lease_transitions).unwrap_or(0);
        let now = MicroTime(jiff::Timestamp::now());
        leases
            .patch(
                "muster-controller",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {
                    "holderIdentity": tags[standby], "leaseTransitions": transitions + 1,
                    "acquireTime": now, "renewTime": now}})),
            )
            .await
            .expect("hand the Lease over");
        wait_for("the old leader to stop", T, || async {
            let log = replicas[leader].log_text();
            if log.contains("lost leadership") {
                Ok(())
            } else {
                Err(replicas[leader].log_tail())
            }
        })
        .await;
        wait_for("the standby to lead", T, || async {
            if replicas[standby].log_text().contains("acting as leader") {
                Ok(())
            } else {
                Err(replicas[standby].log_tail())
            }
        })
        .await;
        // member-b stays silent past the grace, then answers again.
        tokio::time::sleep(Duration::from_secs(10)).await;
        drop(frozen);
        let ended = wait_for("every job Finished", Duration::from_secs(240), || async {
            let mut states = Vec::new();
            for i in 0..JOBS {
                let st = hub::queued_job(&hub, &ns, "Job", &format!("burst-{i}"))
                    .await
                    .and_then(|q| q.status);
                states.push(st.map(|s| s.state));
            }
            if states.iter().all(|s| *s == Some(QueuedJobState::Finished)) {
                Ok(states.len())
            } else {
                Err(format!("{states:?}"))
            }
        })
        .await;
        assert_eq!(ended, JOBS);
        // The jobs that were on the frozen member were taken back and ran elsewhere.
        for name in &there {
            let st = hub::queued_job(&hub, &ns, "Job", name)
                .await
                .and_then(|q| q.status)
                .unwrap_or_default();
            assert!(st.requeues >= 1, "{name} was not taken back: {st:?}");
            assert_ne!(
                st.cluster.as_deref(),
                Some(member.as_str()),
                "{name}: {st:?}"
            );
        }
        eprintln!(
            "{} jobs were on {member} when it froze: {there:?}",
            there.len()
        );
        // The old leader did nothing after it stopped: only one replica left running.
        assert!(
            replicas[leader]
                .wait_exit(Duration::from_secs(10))
                .await
                .is_some(),
            "the old leader exits"
        );
        dog.assert_clean("a member stopped and a forced lease change")
            .await;
    }))
    .await;
    finish(&hub, &[&ns], std::mem::take(&mut replicas), outcome).await;
}
