//! When things go wrong, on the local fleet: stuck pods, a controller killed again and again,
//! a member that stops answering (frozen), reclaim of guaranteed quota, two replicas, SIGTERM
//! during a burst of admissions. A watchdog (`support::watchdog`) watches every member's pods
//! and the hub's records throughout each test and fails at the first instant a job runs in two
//! members outside a declared partition, or a running pod is deleted with no record saying why. Each test runs its
//! own `muster controller` processes against the fleet's hub; they take a lock so that no two
//! controllers of different tests ever act on the hub at once.
//!
//! Fleet processes are paused with SIGSTOP and resumed with SIGCONT (by the pid files the fleet
//! keeps): a paused kube-scheduler leaves pods unbound, a paused kube-apiserver is a member that
//! stops answering. A guard resumes them even when a test fails.

// The std Mutex only serializes the tests of this binary (each runs on its own runtime); holding
// it across awaits is the point.
#![allow(clippy::await_holding_lock)]

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kube::api::Api;
use muster::controller::crd::{QueuedJob, QueuedJobState};
use serde_json::json;
use support::failures::*;
use support::fleet::{self, client_for, unique_name, wait_for};
use support::hub::{self, Controller};
use support::process::Paused;
use support::watchdog::Watchdog;

/// 1. Capacity taken behind muster's back right after dispatch: member-a's training-operator is
///    paused, the job is dispatched there, a pod bound directly to node `a` takes its 2 GPUs, the
///    operator resumes and creates the pods: the worker stays Pending (Insufficient
///    nvidia.com/gpu), the job is taken back and runs elsewhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stuck_pods_are_taken_back_and_placed_elsewhere() {
    let _lock = HUB.lock().unwrap_or_else(|e| e.into_inner());
    let ns = unique_name("stuck");
    let hub = setup(&[&ns], root(vec![leaf("stuck", &ns)])).await;
    let dog = Watchdog::start(&hub, &fleet::MEMBERS, &[&ns]).await;
    let controller = Controller::start("stuck", &QUICK_TAKE_BACK).await;
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(async {
        let paused = Paused::new("member-a/training-operator");
        fleet::create_json(&hub, "pytorchjobs", pytorchjob(&ns, "squeezed", 1, 2, "1")).await.expect("create");
        let q = hub::wait_queued_state(&hub, &ns, "PyTorchJob", "squeezed", QueuedJobState::Dispatched, T).await;
        let first = q.status.and_then(|s| s.cluster).expect("cluster");
        assert_eq!(first, "member-a", "the tightest member for 2 GPUs");
        // Behind muster's back: a pod bound straight to node `a`, holding both its GPUs.
        let a = client_for("member-a").await;
        fleet::create_json(&a, "pods", json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "squatter", "namespace": ns},
            "spec": {"nodeName": "a", "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"nvidia.com/gpu": "2"}, "limits": {"nvidia.com/gpu": "2"}}}],
                "tolerations": [{"operator": "Exists"}]}
        }))
        .await
        .expect("squatter");
        tokio::time::sleep(Duration::from_secs(1)).await;
        drop(paused);
        // Taken back, then placed on another member where it runs.
        let q = wait_for("the job running on another member", T, || async {
            let st = status_of(&hub, &ns, "squeezed").await;
            match (&st.state, st.cluster.as_deref()) {
                (QueuedJobState::Running, Some(c)) if c != "member-a" => Ok(st),
                _ => Err(format!("{st:?}")),
            }
        })
        .await;
        assert!(q.requeues >= 1, "{q:?}");
        let events = hub::events_for(&hub, &ns, "squeezed").await;
        assert!(
            events.iter().any(|e| e.starts_with("Requeued") && e.contains("member-a") && e.contains("after dispatch")),
            "{events:?}"
        );
        let holders = hub::members_with("kubeflow.org/v1", "PyTorchJob", "pytorchjobs", &ns, "squeezed").await;
        assert_eq!(holders, vec![q.cluster.clone().expect("cluster")], "exactly one copy, not on member-a");
        dog.assert_clean("stuck pods").await;
    }))
    .await;
    finish(&hub, &[&ns], vec![controller], outcome).await;
}

/// 2. The controller SIGKILLed again and again while 50 jobs are submitted and dispatched: each
///    ends up Running in exactly one member; none lost, none duplicated.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_controller_loses_and_duplicates_nothing() {
    let _lock = HUB.lock().unwrap_or_else(|e| e.into_inner());
    let ns = unique_name("storm");
    let hub = setup(&[&ns], root(vec![leaf("storm", &ns)])).await;
    let dog = Watchdog::start(&hub, &fleet::MEMBERS, &[&ns]).await;
    let mut controller = Some(Controller::start("storm", &[]).await);
    let names: Vec<String> = (0..50).map(|i| format!("job-{i:02}")).collect();
    let submitter = {
        let (hub, ns, names) = (hub.clone(), ns.clone(), names.clone());
        tokio::spawn(async move {
            let mut refused = 0u32;
            for n in &names {
                // With failurePolicy Fail a submission is refused while muster is down: a
                // user retries; nothing is created unsuspended.
                loop {
                    match fleet::create_json(&hub, "pytorchjobs", pytorchjob(&ns, n, 0, 0, "100m"))
                        .await
                    {
                        Ok(_) => break,
                        Err(kube::Error::Api(e)) if e.code == 409 => break,
                        Err(_) => {
                            refused += 1;
                            tokio::time::sleep(Duration::from_millis(200)).await;
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(60)).await;
            }
            refused
        })
    };
    let mut kills = 0;
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        if let Some(mut c) = controller.take() {
            let _ = c.child.kill(); // SIGKILL
            let _ = c.child.wait();
            kills += 1;
        }
        controller = Some(Controller::start("storm", &[]).await);
    }
    let refused = submitter.await.expect("submitter");
    let controller = controller.expect("controller");
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(async {
        wait_for("all 50 jobs Running", Duration::from_secs(180), || async {
            let api: Api<QueuedJob> = Api::namespaced(hub.clone(), &ns);
            let list = api.list(&Default::default()).await.map_err(|e| e.to_string())?;
            let running = list
                .items
                .iter()
                .filter(|q| q.status.as_ref().map(|s| s.state) == Some(QueuedJobState::Running))
                .count();
            if list.items.len() == 50 && running == 50 { Ok(()) } else { Err(format!("{} QueuedJobs, {running} running", list.items.len())) }
        })
        .await;
        // Every job in exactly one member; no extra copies anywhere.
        let mut copies: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for m in fleet::MEMBERS {
            let c = client_for(m).await;
            let api = fleet::dynamic_api(&c, "kubeflow.org/v1", "PyTorchJob", "pytorchjobs", Some(&ns));
            for o in api.list(&Default::default()).await.map(|l| l.items).unwrap_or_default() {
                copies.entry(o.metadata.name.clone().unwrap_or_default()).or_default().push(m.to_string());
            }
        }
        for n in &names {
            assert_eq!(copies.get(n).map(Vec::len), Some(1), "{n}: copies on {:?}", copies.get(n));
        }
        assert_eq!(copies.len(), 50, "{copies:?}");
        // The hub copies never ran: all still suspended.
        let api = fleet::dynamic_api(&hub, "kubeflow.org/v1", "PyTorchJob", "pytorchjobs", Some(&ns));
        let hub_jobs = api.list(&Default::default()).await.expect("list").items;
        assert_eq!(hub_jobs.len(), 50);
        for j in hub_jobs {
            assert_eq!(j.data.pointer("/spec/runPolicy/suspend"), Some(&json!(true)), "{:?}", j.metadata.name);
        }
        eprintln!("storm: {kills} SIGKILLs, {refused} submissions refused while muster was down and retried");
        assert!(kills >= 4);
        dog.assert_clean("controller storm").await;
    }))
    .await;
    finish(&hub, &[&ns], vec![controller], outcome).await;
}

/// 3. A member stops answering (its kube-apiserver paused) with a job on it: the job is requeued
///    after the grace period and runs elsewhere; when the member is back, its stale copy goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_member_jobs_run_elsewhere_and_stale_copies_go() {
    let _lock = HUB.lock().unwrap_or_else(|e| e.into_inner());
    let ns = unique_name("lost");
    let hub = setup(&[&ns], root(vec![leaf("lost", &ns)])).await;
    let dog = Watchdog::start(&hub, &fleet::MEMBERS, &[&ns]).await;
    let controller = Controller::start("lost", &["--member-lost-grace-seconds", "6"]).await;
    let outcome =
        futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(async {
            // 2 workers × 2 GPU: member-b or member-c (member-a has one 2-GPU node).
            fleet::create_json(&hub, "pytorchjobs", pytorchjob(&ns, "wanderer", 2, 2, "1"))
                .await
                .expect("create");
            let q = hub::wait_queued_state(
                &hub,
                &ns,
                "PyTorchJob",
                "wanderer",
                QueuedJobState::Running,
                T,
            )
            .await;
            let first = q.status.and_then(|s| s.cluster).expect("cluster");
            assert!(first == "member-b" || first == "member-c", "{first}");
            let started = Instant::now();
            {
                let _paused = Paused::new(&format!("{first}/kube-apiserver"));
                let st = wait_for("the job running on another member", T, || async {
                    let st = status_of(&hub, &ns, "wanderer").await;
                    match (&st.state, st.cluster.as_deref()) {
                        (QueuedJobState::Running, Some(c)) if c != first => Ok(st),
                        _ => Err(format!("{st:?}")),
                    }
                })
                .await;
                eprintln!(
                    "lost member: running on {:?} {:?} after the pause",
                    st.cluster,
                    started.elapsed()
                );
                assert!(st.reason.unwrap_or_default().contains("running on"));
                // A frozen member holds back no decision for the others: a job submitted now
                // runs before the member is back.
                fleet::create_json(
                    &hub,
                    "pytorchjobs",
                    pytorchjob(&ns, "bystander", 0, 0, "100m"),
                )
                .await
                .expect("bystander");
                let b = hub::wait_queued_state(
                    &hub,
                    &ns,
                    "PyTorchJob",
                    "bystander",
                    QueuedJobState::Running,
                    T,
                )
                .await;
                assert_ne!(
                    b.status.and_then(|s| s.cluster).as_deref(),
                    Some(first.as_str())
                );
                // The old copy may still run on the frozen member: declared, or a failure now.
                dog.assert_clean("lost member, while frozen").await;
            }
            // member-b is back: the stale copy is deleted; the job runs in exactly one member.
            wait_for("no stale copy on member-b", T, || async {
                let h = hub::members_with(
                    "kubeflow.org/v1",
                    "PyTorchJob",
                    "pytorchjobs",
                    &ns,
                    "wanderer",
                )
                .await;
                if h.len() == 1 && h[0] != "member-b" {
                    Ok(())
                } else {
                    Err(format!("copies on {h:?}"))
                }
            })
            .await;
            let events = hub::events_for(&hub, &ns, "wanderer").await;
            assert!(
                events.iter().any(|e| e.starts_with("Requeued")
                    && e.contains(&format!("{first} has not answered"))),
                "{events:?}"
            );
            dog.assert_clean("lost member").await;
        }))
        .await;
    finish(&hub, &[&ns], vec![controller], outcome).await;
}

/// 4. Reclaim: a job borrowing beyond its leaf's min is preempted so that a job within its
///    leaf's min can run; the victim goes back to its queue with the reason and an Event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_preempts_the_borrower() {
    let _lock = HUB.lock().unwrap_or_else(|e| e.into_inner());
    let lender = unique_name("borrow");
    let owner = unique_name("owner");
    let tree = json!({
        "name": "root", "max": {"cpu": "100", "memory": "400Gi", "nvidia.com/gpu": "8"},
        "children": [
            {"name": "borrower", "namespaces": [lender], "max": {"nvidia.com/gpu": "8"}},
            {"name": "owner", "namespaces": [owner], "min": {"nvidia.com/gpu": "4"}, "max": {"nvidia.com/gpu": "8"}}
        ]
    });
    let hub = setup(&[&lender, &owner], tree).await;
    let dog = Watchdog::start(&hub, &fleet::MEMBERS, &[&lender, &owner]).await;
    let controller = Controller::start("reclaim", &[]).await;
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(async {
        fleet::create_json(&hub, "pytorchjobs", pytorchjob(&lender, "big", 4, 2, "1"))
            .await
            .expect("big");
        let q = hub::wait_queued_state(
            &hub,
            &lender,
            "PyTorchJob",
            "big",
            QueuedJobState::Running,
            T,
        )
        .await;
        assert_eq!(
            q.status.and_then(|s| s.cluster).as_deref(),
            Some("member-c")
        );
        fleet::create_json(&hub, "pytorchjobs", pytorchjob(&owner, "mine", 2, 2, "1"))
            .await
            .expect("mine");
        hub::wait_queued_state(
            &hub,
            &owner,
            "PyTorchJob",
            "mine",
            QueuedJobState::Running,
            T,
        )
        .await;
        let st = status_of(&hub, &lender, "big").await;
        assert_eq!(st.state, QueuedJobState::Queued, "{st:?}");
        let reason = st.reason.unwrap_or_default();
        assert!(reason.contains("mine") || st.requeues >= 1, "{reason}");
        let events = hub::events_for(&hub, &lender, "big").await;
        assert!(
            events
                .iter()
                .any(|e| e.starts_with("Preempted") && e.contains(&format!("{owner}/mine"))),
            "{events:?}"
        );
        wait_for("the victim's copy deleted", T, || async {
            let h = hub::members_with(
                "kubeflow.org/v1",
                "PyTorchJob",
                "pytorchjobs",
                &lender,
                "big",
            )
            .await;
            if h.is_empty() {
                Ok(())
            } else {
                Err(format!("{h:?}"))
            }
        })
        .await;
        // Root max 8 with 4 in use by `mine`: the 8-GPU job waits for quota, and says so.
        let st = status_of(&hub, &lender, "big").await;
        assert_eq!(st.state, QueuedJobState::Queued);
        assert!(
            st.explanation
                .unwrap_or_default()
                .contains("nvidia.com/gpu")
        );
        dog.assert_clean("reclaim").await;
    }))
    .await;
    finish(&hub, &[&lender, &owner], vec![controller], outcome).await;
}

/// 4b. Reclaim under the issue "Min is a guarantee again": mins that name cpu and memory as
///     well as GPUs (as the ACK example tree does). team-a runs two 4-GPU jobs on member-c's
///     8-GPU node and so borrows 4 GPUs while it uses 2 of its 32 guaranteed cpus; team-b's
///     4-GPU job, within its min, preempts team-a's most recently admitted job and runs at once
///     (before the fix it waited, `quota root: nvidia.com/gpu used 8 + requested 4 exceeds
///     max 8`, until team-a's jobs ended).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_with_mins_on_cpu_and_memory() {
    let _lock = HUB.lock().unwrap_or_else(|e| e.into_inner());
    let a = unique_name("team-a");
    let b = unique_name("team-b");
    let guaranteed = json!({"nvidia.com/gpu": "4", "cpu": "32", "memory": "128Gi"});
    let tree = json!({
        "name": "root", "min": {"nvidia.com/gpu": "8"}, "max": {"nvidia.com/gpu": "8"},
        "children": [
            {"name": "team-a", "namespaces": [a], "min": guaranteed, "max": {"nvidia.com/gpu": "8"}},
            {"name": "team-b", "namespaces": [b], "min": guaranteed, "max": {"nvidia.com/gpu": "8"}}
        ]
    });
    let hub = setup(&[&a, &b], tree).await;
    let dog = Watchdog::start(&hub, &fleet::MEMBERS, &[&a, &b]).await;
    let controller = Controller::start("reclaim-mins", &[]).await;
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(async {
        // One worker of 4 GPUs: only member-c's node holds it.
        for name in ["a-one", "a-two"] {
            fleet::create_json(&hub, "pytorchjobs", pytorchjob(&a, name, 1, 4, "1"))
                .await
                .expect(name);
            let q =
                hub::wait_queued_state(&hub, &a, "PyTorchJob", name, QueuedJobState::Running, T)
                    .await;
            assert_eq!(
                q.status.and_then(|s| s.cluster).as_deref(),
                Some("member-c")
            );
        }
        let submitted = Instant::now();
        fleet::create_json(&hub, "pytorchjobs", pytorchjob(&b, "b-one", 1, 4, "1"))
            .await
            .expect("b-one");
        let q = hub::wait_queued_state(&hub, &b, "PyTorchJob", "b-one", QueuedJobState::Running, T)
            .await;
        assert_eq!(
            q.status.and_then(|s| s.cluster).as_deref(),
            Some("member-c")
        );
        eprintln!(
            "b-one running {:?} after it was submitted",
            submitted.elapsed()
        );
        // The most recently admitted borrower was taken back, for b-one; the other runs on.
        let st = status_of(&hub, &a, "a-two").await;
        assert_eq!(st.state, QueuedJobState::Queued, "{st:?}");
        assert!(
            st.requeues >= 1 || st.reason.as_deref().unwrap_or_default().contains("b-one"),
            "{st:?}"
        );
        let events = hub::events_for(&hub, &a, "a-two").await;
        assert!(
            events
                .iter()
                .any(|e| e.starts_with("Preempted") && e.contains(&format!("{b}/b-one"))),
            "{events:?}"
        );
        assert_eq!(
            status_of(&hub, &a, "a-one").await.state,
            QueuedJobState::Running
        );
        assert_eq!(status_of(&hub, &a, "a-one").await.requeues, 0);
        wait_for("a-two's copy deleted", T, || async {
            let h = hub::members_with("kubeflow.org/v1", "PyTorchJob", "pytorchjobs", &a, "a-two")
                .await;
            if h.is_empty() {
                Ok(())
            } else {
                Err(format!("{h:?}"))
            }
        })
        .await;
        // Root max 8, all 8 in use within the two mins: a-two waits for quota, and says so.
        let st = status_of(&hub, &a, "a-two").await;
        assert_eq!(st.state, QueuedJobState::Queued, "{st:?}");
        assert!(
            st.explanation
                .unwrap_or_default()
                .contains("nvidia.com/gpu")
        );
        dog.assert_clean("reclaim with mins on cpu and memory")
            .await;
    }))
    .await;
    finish(&hub, &[&a, &b], vec![controller], outcome).await;
}

/// 5. Two replicas: only the leader acts; kill it and the other takes over within seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standby_takes_over_when_the_leader_dies() {
    let _lock = HUB.lock().unwrap_or_else(|e| e.into_inner());
    let ns = unique_name("ha");
    let hub = setup(&[&ns], root(vec![leaf("ha", &ns)])).await;
    let dog = Watchdog::start(&hub, &fleet::MEMBERS, &[&ns]).await;
    let lease = [
        "--lease-duration-seconds",
        "4",
        "--lease-retry-seconds",
        "1",
    ];
    let a = Controller::start("replica-a", &lease).await;
    let b = Controller::start("replica-b", &lease).await;
    let mut replicas = vec![a, b];
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(async {
        let leader = Controller::one_leader(&replicas).await;
        let standby = 1 - leader;
        fleet::create_json(&hub, "pytorchjobs", pytorchjob(&ns, "first", 0, 0, "100m"))
            .await
            .expect("first");
        hub::wait_queued_state(&hub, &ns, "PyTorchJob", "first", QueuedJobState::Running, T).await;
        let standby_log = std::fs::read_to_string(&replicas[standby].log).unwrap_or_default();
        assert!(
            !standby_log.contains("dispatched"),
            "the standby acted:\n{standby_log}"
        );
        assert!(standby_log.contains("standing by"), "{standby_log}");
        // Kill the leader; the standby takes over.
        let killed = Instant::now();
        let _ = replicas[leader].child.kill();
        let _ = replicas[leader].child.wait();
        wait_for("the standby leads", Duration::from_secs(20), || async {
            let log = std::fs::read_to_string(&replicas[standby].log).unwrap_or_default();
            if log.contains("acting as leader") {
                Ok(())
            } else {
                Err("still standing by".into())
            }
        })
        .await;
        let takeover = killed.elapsed();
        eprintln!("takeover after {takeover:?}");
        assert!(takeover < Duration::from_secs(15), "{takeover:?}");
        fleet::create_json(&hub, "pytorchjobs", pytorchjob(&ns, "second", 0, 0, "100m"))
            .await
            .expect("second");
        hub::wait_queued_state(
            &hub,
            &ns,
            "PyTorchJob",
            "second",
            QueuedJobState::Running,
            T,
        )
        .await;
        let log = std::fs::read_to_string(&replicas[standby].log).unwrap_or_default();
        assert!(
            log.contains("dispatched") && log.contains("/second"),
            "the new leader dispatched it"
        );
        // The first job was not dispatched twice.
        let h =
            hub::members_with("kubeflow.org/v1", "PyTorchJob", "pytorchjobs", &ns, "first").await;
        assert_eq!(h.len(), 1, "{h:?}");
        dog.assert_clean("standby takeover").await;
    }))
    .await;
    finish(&hub, &[&ns], replicas, outcome).await;
}

/// 6. SIGTERM to the leader in the middle of a burst of 200 admissions (one-pod batch Jobs that
///    succeed at once): the controller stops cleanly, a new one goes on from the records, and
///    every job ends Finished with its copy in exactly one member. The watchdog sees no job in
///    two members and no running pod deleted at any instant.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_during_a_burst_of_admissions_loses_and_duplicates_nothing() {
    let _lock = HUB.lock().unwrap_or_else(|e| e.into_inner());
    let ns = unique_name("burst");
    let hub = setup(&[&ns], root(vec![leaf("burst", &ns)])).await;
    let dog = Watchdog::start(&hub, &fleet::MEMBERS, &[&ns]).await;
    let mut first = Controller::start("burst-first", &[]).await;
    let mut second: Option<Controller> = None;
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(async {
        let names: Vec<String> = (0..200).map(|i| format!("b-{i:03}")).collect();
        let creates = names.iter().map(|n| {
            let hub = hub.clone();
            let job = batch_job(&ns, n, 1, 1, 0);
            async move { fleet::create_json(&hub, "jobs", job).await }
        });
        let results: Vec<_> = futures::StreamExt::collect(
            futures::StreamExt::buffer_unordered(futures::stream::iter(creates), 16),
        )
        .await;
        assert!(results.iter().all(|r| r.is_ok()), "every job created");
        // SIGTERM once some, not all, are admitted.
        let api: Api<QueuedJob> = Api::namespaced(hub.clone(), &ns);
        wait_for("a part of the burst admitted", T, || async {
            let list = api.list(&Default::default()).await.map_err(|e| e.to_string())?;
            let placed = list.items.iter().filter(|q| q.status.as_ref().is_some_and(|s| s.state != QueuedJobState::Queued)).count();
            if placed >= 20 { Ok(()) } else { Err(format!("{placed} placed")) }
        })
        .await;
        first.terminate();
        let exit = first.wait_exit(Duration::from_secs(30)).await;
        assert!(exit.is_some_and(|e| e.success()), "a clean stop: {exit:?}");
        let before = api.list(&Default::default()).await.map(|l| l.items).unwrap_or_default();
        let finished_before = before.iter().filter(|q| q.status.as_ref().is_some_and(|s| s.state == QueuedJobState::Finished)).count();
        second = Some(Controller::start("burst-second", &[]).await);
        wait_for("all 200 jobs Finished", Duration::from_secs(240), || async {
            let list = api.list(&Default::default()).await.map_err(|e| e.to_string())?;
            let done = list.items.iter().filter(|q| q.status.as_ref().map(|s| s.state) == Some(QueuedJobState::Finished)).count();
            if list.items.len() == 200 && done == 200 { Ok(()) } else { Err(format!("{} QueuedJobs, {done} finished", list.items.len())) }
        })
        .await;
        let mut copies: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for m in fleet::MEMBERS {
            let c = client_for(m).await;
            let api = fleet::dynamic_api(&c, "batch/v1", "Job", "jobs", Some(&ns));
            for o in api.list(&Default::default()).await.map(|l| l.items).unwrap_or_default() {
                copies.entry(o.metadata.name.clone().unwrap_or_default()).or_default().push(m.to_string());
            }
        }
        for n in &names {
            assert_eq!(copies.get(n).map(Vec::len), Some(1), "{n}: copies on {:?}", copies.get(n));
        }
        eprintln!("burst: SIGTERM with {finished_before} of 200 finished; the second controller finished the rest");
        dog.assert_clean("sigterm burst").await;
        // 200 jobs leave with the namespace: gone from the hub before the next test starts, so
        // that its controller does not follow them.
        let jobs = fleet::dynamic_api(&hub, "batch/v1", "Job", "jobs", Some(&ns));
        let _ = jobs
            .delete_collection(&Default::default(), &Default::default())
            .await;
        wait_for("the burst's hub jobs gone", T, || async {
            let n = jobs.list(&Default::default()).await.map(|l| l.items.len()).unwrap_or(1);
            if n == 0 { Ok(()) } else { Err(format!("{n} left")) }
        })
        .await;
    }))
    .await;
    let mut controllers = vec![first];
    controllers.extend(second);
    finish(&hub, &[&ns], controllers, outcome).await;
}
