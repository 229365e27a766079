//! What a job's record keeps declared, on the local fleet (issue 28).
//!
//! 1. A QueuedJob deleted while no controller runs keeps its record: muster keeps the
//!    `muster.dev/record` finalizer on every QueuedJob while it needs the record, so it stays,
//!    Terminating, with the job's member and orphans. Earlier versions lost it there: the next
//!    leader admitted the job again as new while its copy still ran, uncharged.
//! 2. A MemberCluster deleted and registered again while its job runs: the old copy stays
//!    declared while the member is gone, and is deleted once it is back. Earlier versions forgot
//!    it: once the member was registered again both copies ran, with nothing saying so.
//! 3. A copy held by a finalizer while other jobs wait to start: it holds back other jobs'
//!    creates for the drain grace (60 s) at most. Earlier versions held back every create on every member for as
//!    long as it stayed: from then on no job started anywhere.
//! 4. A hub job deleted and made again under the same name while its old copy is held: the new
//!    job waits for the earlier job's QueuedJob to go. Earlier versions took the Terminating
//!    QueuedJob over: the earlier job's record (its charge, its copy) was lost, and the new
//!    record went with the QueuedJob once its finalizer was dropped.
//! 5. A hub job deleted with `--cascade=orphan` leaves its QueuedJob behind; a job made again
//!    under its name takes it over, and the status it writes keeps none of the earlier job's
//!    keys. Earlier versions patched the status from nothing: the earlier job's member, plan,
//!    charge and copy stayed in the new job's record.

// The std Mutex only serializes the tests of this binary; holding it across awaits is the point.
#![allow(clippy::await_holding_lock)]

mod support;

use std::time::Duration;

use kube::api::DynamicObject;
use kube::api::{Api, DeleteParams};
use muster::controller::crd::{QueuedJob, QueuedJobState};
use support::audit::Auditor;
use support::failures::*;
use support::fleet::{self, unique_name, wait_for};
use support::hub::{self, Controller};
use support::watchdog::Watchdog;

const FINALIZER: &str = "muster.dev/record";

/// A PyTorchJob runs; the controller stops; its QueuedJob is deleted and stays Terminating with
/// its record; a new controller leads for 10 s while an auditor watches every member's pods:
/// none of the job's pods is deleted, none appears on another member, and the record still
/// says Running there, never taken back. Once the hub job is deleted, muster lets the
/// QueuedJob go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_job_deleted_while_no_controller_runs_keeps_its_record() {
    let _lock = HUB.lock().unwrap_or_else(|e| e.into_inner());
    let ns = unique_name("records");
    let hub = setup(&[&ns], root(vec![leaf("records", &ns)])).await;
    let mut first = Controller::start("records-first", &[]).await;
    let mut second: Option<Controller> = None;
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(async {
        // Every member's pods and the hub's records, watched the whole time.
        let dog = Watchdog::start(&hub, &fleet::MEMBERS, &[&ns]).await;
        let st = submitted_and_running(&hub, &ns, "keep", 1).await;
        let member = st.cluster.clone().expect("a member");
        let qj = hub::queued_job(&hub, &ns, "PyTorchJob", "keep")
            .await
            .expect("its QueuedJob");
        let uid = qj.spec.job_ref.uid.clone();
        assert!(
            qj.metadata
                .finalizers
                .as_ref()
                .is_some_and(|f| f.iter().any(|f| f == FINALIZER)),
            "the QueuedJob carries {FINALIZER}: {:?}",
            qj.metadata.finalizers
        );
        let auditor = Auditor::start(&fleet::MEMBERS).await;
        first.terminate();
        assert!(
            first.wait_exit(Duration::from_secs(30)).await.is_some(),
            "first stops"
        );
        let api: Api<QueuedJob> = Api::namespaced(hub.clone(), &ns);
        let name = qj.metadata.name.clone().expect("a name");
        api.delete(&name, &DeleteParams::default())
            .await
            .expect("delete the QueuedJob");
        let kept = api.get_opt(&name).await.expect("read the QueuedJob");
        let kept = kept.expect("the QueuedJob stays while its finalizer is there");
        assert!(
            kept.metadata.deletion_timestamp.is_some(),
            "it is Terminating"
        );
        assert_eq!(
            kept.status.as_ref().and_then(|s| s.cluster.clone()),
            Some(member.clone()),
            "its record still names the member"
        );
        let next = Controller::start("records-second", &[]).await;
        wait_for("the new controller to lead", T, || async {
            if next.log_text().contains("acting as leader") {
                Ok(())
            } else {
                Err(next.log_tail())
            }
        })
        .await;
        second = Some(next);
        // Watched throughout, every second: never taken back, never elsewhere.
        for _ in 0..10 {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let st = status_of(&hub, &ns, "keep").await;
            assert_eq!(st.state, QueuedJobState::Running, "{st:?}");
            assert_eq!(st.cluster.as_deref(), Some(member.as_str()), "{st:?}");
            assert_eq!(st.requeues, 0, "taken back: {st:?}");
        }
        let seen = auditor.of(&uid);
        assert!(!seen.is_empty(), "the auditor saw the job's pods");
        let elsewhere: Vec<_> = seen
            .iter()
            .filter(|s| s.member != member)
            .map(|s| format!("{}/{}", s.member, s.pod.name))
            .collect();
        assert!(elsewhere.is_empty(), "the job ran twice: {elsewhere:?}");
        let deleted: Vec<_> = seen
            .iter()
            .filter(|s| s.gone || s.pod.deleting)
            .map(|s| s.pod.name.clone())
            .collect();
        assert!(deleted.is_empty(), "pods of the job deleted: {deleted:?}");
        // The hub job goes: its copy is deleted, and then the record is let go.
        let jobs = pytorchjobs(&hub, &ns);
        jobs.delete("keep", &DeleteParams::default())
            .await
            .expect("delete the hub job");
        wait_for("the QueuedJob let go", T, || async {
            match api.get_opt(&name).await {
                Ok(None) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
        let client = fleet::client_for(&member).await;
        let pods = fleet::list_pods(&client, &ns, &format!("muster.dev/job-uid={uid}")).await;
        assert!(
            pods.iter().all(|p| p.metadata.deletion_timestamp.is_some()),
            "the copy is deleted: {}",
            fleet::describe_pods(&pods)
        );
        dog.assert_clean("a QueuedJob deleted while no controller runs")
            .await;
    }))
    .await;
    let mut controllers = vec![first];
    controllers.extend(second);
    finish(&hub, &[&ns], controllers, outcome).await;
}

/// 2. A PyTorchJob runs on member M; M's MemberCluster is deleted (its Secret stays, as in a
///    GitOps prune): the job is placed on another member at once, and while M is gone its record
///    lists M as an orphan that cannot be confirmed gone (`unconfirmed`, `mayRunTwiceOn`) as the
///    old copy still runs there. M is registered again: its old copy is deleted and M leaves
///    the record. An auditor of every member's pods sees the new copy's pods never deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_removed_and_registered_again_has_its_old_copy_declared_then_deleted() {
    let _lock = HUB.lock().unwrap_or_else(|e| e.into_inner());
    let ns = unique_name("reregister");
    let hub = setup(&[&ns], root(vec![leaf("reregister", &ns)])).await;
    let controller = Controller::start("reregister", &[]).await;
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(async {
        // Every member's pods and the hub's records, watched the whole time.
        let dog = Watchdog::start(&hub, &fleet::MEMBERS, &[&ns]).await;
        let st = submitted_and_running(&hub, &ns, "moved", 1).await;
        let old = st.cluster.clone().expect("a member");
        let uid = hub::queued_job(&hub, &ns, "PyTorchJob", "moved")
            .await
            .map(|q| q.spec.job_ref.uid)
            .expect("its QueuedJob");
        let auditor = Auditor::start(&fleet::MEMBERS).await;
        let mcs: Api<DynamicObject> = fleet::dynamic_api(
            &hub,
            "muster.dev/v1alpha1",
            "MemberCluster",
            "memberclusters",
            None,
        );
        mcs.delete(&old, &DeleteParams::default())
            .await
            .expect("delete the MemberCluster");
        // Placed elsewhere, the old copy declared while its member is gone.
        let st = wait_for(
            "the job running elsewhere, the old copy declared",
            T,
            || async {
                let st = status_of(&hub, &ns, "moved").await;
                let l = st.lifecycle.clone().unwrap_or_default();
                let moved = st.state == QueuedJobState::Running
                    && st.cluster.as_deref().is_some_and(|c| c != old);
                if moved
                    && l.orphans.contains_key(&old)
                    && l.unconfirmed.contains(&old)
                    && l.may_run_twice_on.contains(&old)
                {
                    Ok(st)
                } else {
                    Err(format!("{st:?}"))
                }
            },
        )
        .await;
        let new = st.cluster.clone().expect("a member");
        let old_client = fleet::client_for(&old).await;
        let selector = format!("muster.dev/job-uid={uid}");
        let left = fleet::list_pods(&old_client, &ns, &selector).await;
        assert!(
            left.iter().any(|p| p.metadata.deletion_timestamp.is_none()),
            "the old copy still runs on {old} (nothing could delete it): {}",
            fleet::describe_pods(&left)
        );
        // Registered again: the old copy goes, and the member leaves the record.
        hub::register_members(&hub).await;
        wait_for("the old copy deleted and forgotten", T, || async {
            let pods = fleet::list_pods(&old_client, &ns, &selector).await;
            let st = status_of(&hub, &ns, "moved").await;
            let l = st.lifecycle.clone().unwrap_or_default();
            if pods.is_empty() && !l.orphans.contains_key(&old) && l.unconfirmed.is_empty() {
                Ok(())
            } else {
                Err(format!("{} | {st:?}", fleet::describe_pods(&pods)))
            }
        })
        .await;
        let st = status_of(&hub, &ns, "moved").await;
        assert_eq!(st.state, QueuedJobState::Running, "{st:?}");
        assert_eq!(st.cluster.as_deref(), Some(new.as_str()), "{st:?}");
        let deleted: Vec<_> = auditor
            .of(&uid)
            .into_iter()
            .filter(|s| s.member == new && (s.gone || s.pod.deleting))
            .map(|s| s.pod.name)
            .collect();
        assert!(
            deleted.is_empty(),
            "pods of the new copy deleted: {deleted:?}"
        );
        dog.assert_clean("a member removed and registered again")
            .await;
    }))
    .await;
    finish(&hub, &[&ns], vec![controller], outcome).await;
}

/// The drain grace of the controller's defaults (`lifecycle::Settings::drain_grace`).
const DRAIN_GRACE: Duration = Duration::from_secs(60);

/// 3. A PyTorchJob runs on member M; a finalizer that nobody removes is put on its copy there
///    (an operator that stopped acting); its hub job is edited (one more worker), so muster takes
///    it back and deletes that copy, which stays Terminating with its pods running. A second job
///    is submitted: it runs (within the drain grace and the usual time after it at most), while
///    the stuck copy is still there. The first job is not started a second time while its old pods run,
///    and its reason names the stuck copy; once the finalizer goes, it runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_held_by_a_finalizer_does_not_stop_other_jobs() {
    let _lock = HUB.lock().unwrap_or_else(|e| e.into_inner());
    let ns = unique_name("stuckcopy");
    let hub = setup(&[&ns], root(vec![leaf("stuckcopy", &ns)])).await;
    let controller = Controller::start("stuckcopy", &[]).await;
    let held: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(async {
        // Every member's pods and the hub's records, watched the whole time.
        let dog = Watchdog::start(&hub, &fleet::MEMBERS, &[&ns]).await;
        let st = submitted_and_running(&hub, &ns, "first", 1).await;
        let m = st.cluster.clone().expect("a member");
        let member = fleet::client_for(&m).await;
        let copies = pytorchjobs(&member, &ns);
        let copy = copies.get("first").await.expect("the copy on its member");
        let mut finalizers = copy.metadata.finalizers.clone().unwrap_or_default();
        finalizers.push(HOLD.to_string());
        copies
            .patch(
                "first",
                &Default::default(),
                &kube::api::Patch::Merge(
                    serde_json::json!({"metadata": {"finalizers": finalizers}}),
                ),
            )
            .await
            .expect("hold the copy");
        if let Ok(mut h) = held.lock() {
            *h = Some(m.clone());
        }
        let jobs = pytorchjobs(&hub, &ns);
        jobs.patch(
            "first",
            &Default::default(),
            &kube::api::Patch::Merge(serde_json::json!(
                {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 2}}}}
            )),
        )
        .await
        .expect("edit the hub job");
        wait_for("the copy Terminating", T, || async {
            match copies.get_opt("first").await {
                Ok(Some(c)) if c.metadata.deletion_timestamp.is_some() => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
        fleet::create_json(&hub, "pytorchjobs", pytorchjob(&ns, "second", 1, 0, "1"))
            .await
            .expect("create the second job");
        wait_for("the second job running", DRAIN_GRACE + T, || async {
            let st = status_of(&hub, &ns, "second").await;
            match st.state {
                QueuedJobState::Running => Ok(()),
                _ => Err(format!("{st:?}")),
            }
        })
        .await;
        // The first job's own old pods still run on M: it is not started a second time, and
        // says why.
        let stuck = copies.get_opt("first").await.expect("read the copy");
        assert!(
            stuck
                .as_ref()
                .is_some_and(|c| c.metadata.deletion_timestamp.is_some()),
            "the stuck copy is still Terminating on {m} while the second job runs: {stuck:?}"
        );
        let first = status_of(&hub, &ns, "first").await;
        assert_ne!(first.state, QueuedJobState::Running, "{first:?}");
        let reason = first.reason.clone().unwrap_or_default();
        assert!(
            reason.contains(&format!("old copy on {m}")) || reason.contains("old copy there"),
            "the reason names the stuck copy: {first:?}"
        );
        // Its operator acts again: the copy goes, and the first job runs.
        let drop = serde_json::json!({"metadata": {"finalizers": null}});
        copies
            .patch("first", &Default::default(), &kube::api::Patch::Merge(drop))
            .await
            .expect("let the copy go");
        wait_for("the first job running", T, || async {
            let st = status_of(&hub, &ns, "first").await;
            match st.state {
                QueuedJobState::Running => Ok(()),
                _ => Err(format!("{st:?}")),
            }
        })
        .await;
        dog.assert_clean("a copy held by a finalizer").await;
    }))
    .await;
    // Let the held copy go (its namespace is deleted next).
    release_hold(&held, &ns, "first").await;
    finish(&hub, &[&ns], vec![controller], outcome).await;
}

const HOLD: &str = "test.muster.dev/hold";

/// The PyTorchJobs of `ns` on a cluster.
fn pytorchjobs(c: &kube::Client, ns: &str) -> Api<DynamicObject> {
    fleet::dynamic_api(c, "kubeflow.org/v1", "PyTorchJob", "pytorchjobs", Some(ns))
}

/// A PyTorchJob `name` (a master, `workers` workers) submitted to the hub; its status once it
/// runs.
async fn submitted_and_running(
    hub: &kube::Client,
    ns: &str,
    name: &str,
    workers: u32,
) -> muster::controller::crd::QueuedJobStatus {
    fleet::create_json(hub, "pytorchjobs", pytorchjob(ns, name, workers, 0, "1"))
        .await
        .expect("create");
    wait_for(&format!("{name} running"), T, || async {
        let st = status_of(hub, ns, name).await;
        match st.state {
            QueuedJobState::Running => Ok(st),
            _ => Err(format!("{st:?}")),
        }
    })
    .await
}

/// Whatever happened, the copy `name` held on the member named in `held` is let go (its
/// namespace is deleted next).
async fn release_hold(held: &std::sync::Mutex<Option<String>>, ns: &str, name: &str) {
    let m = held.lock().ok().and_then(|h| h.clone());
    if let Some(m) = m {
        let copies = pytorchjobs(&fleet::client_for(&m).await, ns);
        let drop = serde_json::json!({"metadata": {"finalizers": null}});
        let _ = copies
            .patch(name, &Default::default(), &kube::api::Patch::Merge(drop))
            .await;
    }
}

/// A PyTorchJob runs on M; its copy is held by a finalizer; the hub job is deleted, so its
/// QueuedJob is Terminating (the hub's garbage collector) and kept (muster's finalizer) while the
/// copy stays. A new hub job of the same name is made: watched for 10 s, the QueuedJob still
/// names the earlier job, no new copy appears on any member, and the new job has an Event
/// saying what it waits for. Once the copy goes, the earlier QueuedJob goes, and the new job
/// gets its own record and runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_made_again_under_a_kept_name_waits_for_the_earlier_record() {
    let _lock = HUB.lock().unwrap_or_else(|e| e.into_inner());
    let ns = unique_name("again");
    let hub = setup(&[&ns], root(vec![leaf("again", &ns)])).await;
    let controller = Controller::start("again", &[]).await;
    let held: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(async {
        // Every member's pods and the hub's records, watched the whole time.
        let dog = Watchdog::start(&hub, &fleet::MEMBERS, &[&ns]).await;
        let jobs = pytorchjobs(&hub, &ns);
        let st = submitted_and_running(&hub, &ns, "again", 0).await;
        let old_uid = jobs.get("again").await.expect("the hub job").metadata.uid;
        let m = st.cluster.clone().expect("a member");
        let member = fleet::client_for(&m).await;
        let copies = pytorchjobs(&member, &ns);
        let hold = serde_json::json!({"metadata": {"finalizers": [HOLD]}});
        copies
            .patch("again", &Default::default(), &kube::api::Patch::Merge(hold))
            .await
            .expect("hold the copy");
        if let Ok(mut h) = held.lock() {
            *h = Some(m.clone());
        }
        jobs.delete("again", &DeleteParams::default())
            .await
            .expect("delete the hub job");
        wait_for("the hub job gone, its QueuedJob Terminating", T, || async {
            let job = jobs.get_opt("again").await.map_err(|e| e.to_string())?;
            let qj = hub::queued_job(&hub, &ns, "PyTorchJob", "again").await;
            match (job, qj) {
                (None, Some(q)) if q.metadata.deletion_timestamp.is_some() => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
        let admitted =
            |events: &[String]| events.iter().filter(|e| e.starts_with("Admitted:")).count();
        let admitted_before = admitted(&hub::events_for(&hub, &ns, "again").await);
        fleet::create_json(&hub, "pytorchjobs", pytorchjob(&ns, "again", 0, 0, "1"))
            .await
            .expect("create it again");
        let new_uid = jobs
            .get("again")
            .await
            .expect("the new hub job")
            .metadata
            .uid;
        assert_ne!(new_uid, old_uid);
        let until = tokio::time::Instant::now() + Duration::from_secs(10);
        let mut looks = 0;
        while tokio::time::Instant::now() < until {
            let qj = hub::queued_job(&hub, &ns, "PyTorchJob", "again")
                .await
                .expect("the earlier QueuedJob stays while its copy is held");
            assert_eq!(
                Some(qj.spec.job_ref.uid.clone()),
                old_uid,
                "the earlier job's record was taken over: {qj:?}"
            );
            let on =
                hub::members_with("kubeflow.org/v1", "PyTorchJob", "pytorchjobs", &ns, "again")
                    .await;
            assert_eq!(
                on,
                std::slice::from_ref(&m),
                "a copy of the new job was made"
            );
            looks += 1;
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        assert!(looks >= 10, "watched {looks} times");
        let events = hub::events_for(&hub, &ns, "again").await;
        assert!(
            events.iter().any(|e| e.starts_with("WaitingForName:")
                && e.contains(old_uid.as_deref().unwrap_or_default())),
            "{events:?}"
        );
        assert_eq!(
            admitted(&events),
            admitted_before,
            "the new job was admitted while it could hold no record: {events:?}"
        );
        // The copy goes: so does the earlier record, and the new job runs with its own.
        let drop = serde_json::json!({"metadata": {"finalizers": null}});
        copies
            .patch("again", &Default::default(), &kube::api::Patch::Merge(drop))
            .await
            .expect("let the copy go");
        wait_for("the new job running under its own record", T, || async {
            let qj = hub::queued_job(&hub, &ns, "PyTorchJob", "again")
                .await
                .ok_or("no QueuedJob")?;
            let st = qj.status.clone().unwrap_or_default();
            if Some(qj.spec.job_ref.uid.clone()) == new_uid && st.state == QueuedJobState::Running {
                Ok(())
            } else {
                Err(format!("{qj:?}"))
            }
        })
        .await;
        dog.assert_clean("a name reused").await;
    }))
    .await;
    release_hold(&held, &ns, "again").await;
    finish(&hub, &[&ns], vec![controller], outcome).await;
}

/// 5. A PyTorchJob runs; its hub job is deleted with `propagationPolicy: Orphan`, so its
///    QueuedJob stays, not being deleted. muster deletes the copy and lets the QueuedJob go
///    (its finalizer off). A job of the same name, too big for its queue, is made: muster
///    takes that QueuedJob over, and its status says Rejected with nothing of the earlier
///    job's admission left in it (no member, plan, admission time, copy or charge).
#[tokio::test]
async fn a_queued_job_left_by_an_orphaning_delete_is_taken_over_clean() {
    let _lock = HUB.lock().unwrap_or_else(|e| e.into_inner());
    let ns = unique_name("orphaned");
    let hub = setup(&[&ns], root(vec![leaf("orphaned", &ns)])).await;
    let controller = Controller::start("orphaned", &[]).await;
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(async {
        let dog = Watchdog::start(&hub, &fleet::MEMBERS, &[&ns]).await;
        let jobs = pytorchjobs(&hub, &ns);
        let st = submitted_and_running(&hub, &ns, "orphaned", 0).await;
        assert!(st.cluster.is_some() && !st.placement.is_empty(), "{st:?}");
        let old_uid = jobs
            .get("orphaned")
            .await
            .expect("the hub job")
            .metadata
            .uid;
        let orphaning = DeleteParams {
            propagation_policy: Some(kube::api::PropagationPolicy::Orphan),
            ..DeleteParams::default()
        };
        jobs.delete("orphaned", &orphaning)
            .await
            .expect("delete the hub job, orphaning its dependents");
        wait_for(
            "the copy gone, the earlier QueuedJob let go and left",
            T,
            || async {
                let on = hub::members_with(
                    "kubeflow.org/v1",
                    "PyTorchJob",
                    "pytorchjobs",
                    &ns,
                    "orphaned",
                )
                .await;
                let qj = hub::queued_job(&hub, &ns, "PyTorchJob", "orphaned").await;
                match qj {
                    Some(q)
                        if on.is_empty()
                            && Some(q.spec.job_ref.uid.clone()) == old_uid
                            && q.metadata.deletion_timestamp.is_none()
                            && !q
                                .metadata
                                .finalizers
                                .iter()
                                .flatten()
                                .any(|f| f == FINALIZER) =>
                    {
                        Ok(())
                    }
                    other => Err(format!("on {on:?}: {other:?}")),
                }
            },
        )
        .await;
        // The same name, asking more cpu than the queue's max: Rejected.
        fleet::create_json(
            &hub,
            "pytorchjobs",
            pytorchjob(&ns, "orphaned", 0, 0, "500"),
        )
        .await
        .expect("create it again");
        let new_uid = jobs
            .get("orphaned")
            .await
            .expect("the new hub job")
            .metadata
            .uid;
        assert_ne!(new_uid, old_uid);
        wait_for(
            "the QueuedJob taken over, the new job Rejected",
            T,
            || async {
                let qj = hub::queued_job(&hub, &ns, "PyTorchJob", "orphaned")
                    .await
                    .ok_or("no QueuedJob")?;
                let st = qj.status.clone().unwrap_or_default();
                if Some(qj.spec.job_ref.uid.clone()) == new_uid
                    && st.state == QueuedJobState::Rejected
                {
                    Ok(())
                } else {
                    Err(format!("{qj:?}"))
                }
            },
        )
        .await;
        let st = status_of(&hub, &ns, "orphaned").await;
        let left = st.lifecycle.clone().unwrap_or_default();
        assert_eq!(st.cluster, None, "the earlier job's member stayed: {st:?}");
        assert!(st.placement.is_empty(), "the earlier plan stayed: {st:?}");
        assert_eq!(st.admitted_at, None, "{st:?}");
        assert_eq!(st.dispatched_at, None, "{st:?}");
        assert_eq!(left.copy_uid, None, "{st:?}");
        assert!(left.charge.is_empty(), "the earlier charge stayed: {st:?}");
        dog.assert_clean("an orphaning delete and a name reused")
            .await;
    }))
    .await;
    finish(&hub, &[&ns], vec![controller], outcome).await;
}
