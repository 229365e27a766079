//! The job's lifecycle on the local fleet, where earlier versions went wrong (issue "Never lose,
//! never duplicate"): each test runs its own `muster controller` processes against the fleet's
//! hub and watches what it asserts throughout.
//!
//! 1. Avoiding a member is a preference, never a reason to reject.
//! 2. A job submitted through the standby's webhook is suspended like any other.
//! 3. An invalid tree followed by a restart deletes no running copy.
//! 4. A batch Job with completions > parallelism runs its last wave to the end.
//! 5. Workers that finish before their master are progress, not loss.
//! 6. A job kind whose CRD is installed after the start is handled.
//! 7. A batch Job whose pods all succeeded frees its quota before its member says it is complete.

// The std Mutex only serializes the tests of this binary; holding it across awaits is the point.
#![allow(clippy::await_holding_lock)]

mod support;

use std::sync::Mutex;
use std::time::Duration;

use kube::api::Api;
use muster::controller::crd::{QueuedJob, QueuedJobState};
use serde_json::json;
use support::audit::Auditor;
use support::failures::*;
use support::fleet::{self, unique_name, wait_for};
use support::hub::{self, Controller};
use support::process::Paused;
use support::watchdog::Watchdog;

/// 1. Avoiding a member is a preference, never a reason to reject: a job that only member-b can
///    hold (4 pods × 4 cpu, 1 GPU) gets stuck there (member-b's scheduler paused), is taken back
///    and avoids member-b; no other member can ever hold it, so it is queued for every member
///    again and runs on member-b once its scheduler is back. A watch of its QueuedJob, from
///    before the submission to the end, never sees it Rejected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_only_member_is_avoided_is_never_rejected() {
    let _lock = HUB.lock().unwrap_or_else(|e| e.into_inner());
    let ns = unique_name("avoid");
    let hub = setup(&[&ns], root(vec![leaf("avoid", &ns)])).await;
    let dog = Watchdog::start(&hub, &fleet::MEMBERS, &[&ns]).await;
    let controller = Controller::start("avoid", &QUICK_TAKE_BACK).await;
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(async {
        let seen = std::sync::Arc::new(Mutex::new(Vec::<QueuedJobState>::new()));
        let watcher = {
            let (api, seen) = (Api::<QueuedJob>::namespaced(hub.clone(), &ns), seen.clone());
            tokio::spawn(async move {
                use futures::StreamExt;
                let mut events = kube::runtime::watcher(api, fleet::watch_config())
                    .applied_objects()
                    .boxed();
                use kube::runtime::WatchStreamExt;
                while let Some(Ok(q)) = events.next().await {
                    if let (Some(st), Ok(mut s)) = (q.status, seen.lock()) {
                        s.push(st.state);
                    }
                }
            })
        };
        let paused = Paused::new("member-b/kube-scheduler");
        fleet::create_json(&hub, "pytorchjobs", pytorchjob(&ns, "only-b", 3, 1, "4"))
            .await
            .expect("create");
        wait_for("the job taken back from member-b", T, || async {
            let st = status_of(&hub, &ns, "only-b").await;
            if st.requeues >= 1 {
                Ok(())
            } else {
                Err(format!("{st:?}"))
            }
        })
        .await;
        // Placed on member-b again (nothing else can hold it) before its scheduler returns.
        wait_for("the job dispatched to member-b again", T, || async {
            let st = status_of(&hub, &ns, "only-b").await;
            match (st.state, st.cluster.as_deref()) {
                (QueuedJobState::Dispatched, Some("member-b")) if st.requeues >= 1 => Ok(()),
                _ => Err(format!("{st:?}")),
            }
        })
        .await;
        drop(paused);
        let q = wait_for("the job running on member-b", T, || async {
            let st = status_of(&hub, &ns, "only-b").await;
            match (st.state, st.cluster.as_deref()) {
                (QueuedJobState::Running, Some("member-b")) => Ok(st),
                _ => Err(format!("{st:?}")),
            }
        })
        .await;
        assert!(q.requeues >= 1, "{q:?}");
        watcher.abort();
        let states = seen.lock().map(|s| s.clone()).unwrap_or_default();
        assert!(
            !states.contains(&QueuedJobState::Rejected),
            "states seen: {states:?}"
        );
        assert!(
            states.contains(&QueuedJobState::Queued),
            "states seen: {states:?}"
        );
        dog.assert_clean("avoid").await;
    }))
    .await;
    finish(&hub, &[&ns], vec![controller], outcome).await;
}

/// Cleans up, stops the controllers, and fails with the scenario's panic and their log tails.
/// 2. A job submitted through the standby's webhook is suspended like any other: the standby
///    (started second, so the webhook registration points at it) knows what the tree covers from
///    its first answer. A batch Job also gets `managedBy`, which cannot be added later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standbys_webhook_suspends_too() {
    let _lock = HUB.lock().unwrap_or_else(|e| e.into_inner());
    let ns = unique_name("standby");
    let hub = setup(&[&ns], root(vec![leaf("standby", &ns)])).await;
    let lease = [
        "--lease-duration-seconds",
        "15",
        "--lease-retry-seconds",
        "2",
    ];
    let leader = Controller::start("standby-leader", &lease).await;
    wait_for(
        "the first replica leads",
        Duration::from_secs(30),
        || async {
            if leader.log_text().contains("acting as leader") {
                Ok(())
            } else {
                Err("not yet".to_string())
            }
        },
    )
    .await;
    let standby = Controller::start("standby-webhook", &lease).await;
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(async {
        assert!(
            standby.log_text().contains("standing by"),
            "{}",
            standby.log_text()
        );
        assert!(
            standby.log_text().contains("webhook registered"),
            "{}",
            standby.log_text()
        );
        let job = json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "through-standby", "namespace": ns},
            "spec": {"parallelism": 1, "completions": 1, "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": "100m"}}}]}}}
        });
        let created = fleet::create_json(&hub, "jobs", job).await.expect("job");
        assert_eq!(
            created.data["spec"]["suspend"],
            json!(true),
            "{:?}",
            created.data["spec"]
        );
        assert_eq!(
            created.data["spec"]["managedBy"],
            json!(muster::controller::dispatch::MANAGED_BY),
            "{:?}",
            created.data["spec"]
        );
        let created = fleet::create_json(&hub, "pytorchjobs", pytorchjob(&ns, "pt", 0, 0, "100m"))
            .await
            .expect("pytorchjob");
        assert_eq!(created.data["spec"]["runPolicy"]["suspend"], json!(true));
        // And the leader runs them.
        hub::wait_queued_state(
            &hub,
            &ns,
            "Job",
            "through-standby",
            QueuedJobState::Finished,
            T,
        )
        .await;
        hub::wait_queued_state(&hub, &ns, "PyTorchJob", "pt", QueuedJobState::Running, T).await;
    }))
    .await;
    finish(&hub, &[&ns], vec![leader, standby], outcome).await;
}

/// 3. An invalid tree followed by a restart deletes no running copy (earlier versions followed
///    nothing without a valid tree, and their garbage collection deleted every copy they did not
///    follow). A job runs; the controller stops; the tree becomes invalid (a leaf's min above its
///    max); a new controller starts and goes through several passes. An auditor watching the
///    member's pods throughout sees none of the job's pods deleted, and the copy still runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_tree_and_a_restart_delete_no_running_copy() {
    let _lock = HUB.lock().unwrap_or_else(|e| e.into_inner());
    let ns = unique_name("invalid");
    let hub = setup(&[&ns], root(vec![leaf("invalid", &ns)])).await;
    let mut first = Controller::start("invalid-first", &[]).await;
    let mut second: Option<Controller> = None;
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(async {
        let dog = Watchdog::start(&hub, &fleet::MEMBERS, &[&ns]).await;
        fleet::create_json(&hub, "pytorchjobs", pytorchjob(&ns, "keep", 1, 0, "1"))
            .await
            .expect("create");
        let st = wait_for("the job running", T, || async {
            let st = status_of(&hub, &ns, "keep").await;
            match st.state {
                QueuedJobState::Running => Ok(st),
                _ => Err(format!("{st:?}")),
            }
        })
        .await;
        let member = st.cluster.clone().expect("a member");
        let uid = hub::queued_job(&hub, &ns, "PyTorchJob", "keep")
            .await
            .map(|q| q.spec.job_ref.uid)
            .expect("its QueuedJob");
        let auditor = Auditor::start(&[&member]).await;
        first.terminate();
        assert!(
            first.wait_exit(Duration::from_secs(30)).await.is_some(),
            "first stops"
        );
        let mut bad = leaf("invalid", &ns);
        bad["min"] = json!({"cpu": "8"});
        bad["max"] = json!({"cpu": "1"});
        hub::apply_tree(&hub, root(vec![bad]))
            .await
            .expect("apply the invalid tree");
        // Never ready: a replica that never saw a valid tree does not know what it covers.
        let next = Controller::start_unready("invalid-second", &[]);
        // Several passes of the new leader with the invalid tree in force.
        wait_for(
            "the new controller to lead and read the tree",
            T,
            || async {
                let log = next.log_text();
                if log.contains("acting as leader") && log.contains("invalid quota tree") {
                    Ok(())
                } else {
                    Err(next.log_tail())
                }
            },
        )
        .await;
        second = Some(next);
        tokio::time::sleep(Duration::from_secs(8)).await;
        let seen = auditor.of(&uid);
        assert!(!seen.is_empty(), "the auditor saw the job's pods");
        let deleted: Vec<_> = seen
            .iter()
            .filter(|s| s.gone || s.pod.deleting)
            .map(|s| s.pod.name.clone())
            .collect();
        assert!(
            deleted.is_empty(),
            "pods of the running job deleted: {deleted:?}"
        );
        let client = fleet::client_for(&member).await;
        let pods = fleet::list_pods(&client, &ns, &format!("muster.dev/job-uid={uid}")).await;
        let running = pods
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count();
        assert_eq!(running, 2, "{}", fleet::describe_pods(&pods));
        dog.assert_clean("an invalid tree and a restart").await;
    }))
    .await;
    let mut controllers = vec![first];
    controllers.extend(second);
    finish(&hub, &[&ns], controllers, outcome).await;
}

/// (job name, state, requeues) of every QueuedJob version seen, in order.
type States = std::sync::Arc<Mutex<Vec<(String, QueuedJobState, u32)>>>;

/// Every state a QueuedJob goes through, from a watch started before the job exists.
fn watch_states(hub: &kube::Client, ns: &str) -> (States, tokio::task::JoinHandle<()>) {
    let seen = std::sync::Arc::new(Mutex::new(Vec::new()));
    let (api, s) = (Api::<QueuedJob>::namespaced(hub.clone(), ns), seen.clone());
    let task = tokio::spawn(async move {
        use futures::StreamExt;
        use kube::runtime::WatchStreamExt;
        let mut events = kube::runtime::watcher(api, fleet::watch_config())
            .applied_objects()
            .boxed();
        while let Some(Ok(q)) = events.next().await {
            if let (Some(st), Ok(mut v)) = (q.status, s.lock()) {
                v.push((q.spec.job_ref.name.clone(), st.state, st.requeues));
            }
        }
    });
    (seen, task)
}

/// Stops the watch of `watch_states` once it has delivered `Finished` for each of `jobs`. The
/// caller has already read that state from the API server; the watch may lag a moment behind
/// that read, and aborting it at once loses the last event (CI saw `[Queued, Admitted,
/// Running]` for a job the API server had already marked Finished). Fails if the watch never
/// delivers it.
async fn stop_watching(seen: &States, task: tokio::task::JoinHandle<()>, jobs: &[&str]) {
    wait_for("the watch to deliver Finished", T, || async {
        let v = seen.lock().map(|v| v.clone()).unwrap_or_default();
        let missing: Vec<&&str> = jobs
            .iter()
            .filter(|j| {
                !v.iter()
                    .any(|(n, s, _)| n == **j && *s == QueuedJobState::Finished)
            })
            .collect();
        if missing.is_empty() {
            Ok(())
        } else {
            Err(format!("not yet delivered for {missing:?}"))
        }
    })
    .await;
    task.abort();
}

/// The states of `job` in order, repeats folded; panics if it was ever taken back or left its
/// member once Running (between two waves of a batch Job it is `Dispatched` for a moment: a pod
/// of the next wave is being placed).
fn never_taken_back(
    seen: &Mutex<Vec<(String, QueuedJobState, u32)>>,
    job: &str,
) -> Vec<QueuedJobState> {
    let v = seen.lock().map(|v| v.clone()).unwrap_or_default();
    let mut states: Vec<QueuedJobState> = Vec::new();
    for (name, state, requeues) in v.iter().filter(|(n, _, _)| n == job) {
        assert_eq!(*requeues, 0, "{name} was taken back: {v:?}");
        if states.last() != Some(state) {
            states.push(*state);
        }
    }
    let ran = states.iter().position(|s| *s == QueuedJobState::Running);
    if let Some(i) = ran {
        assert!(
            states[i..].iter().all(|s| matches!(
                s,
                QueuedJobState::Running | QueuedJobState::Dispatched | QueuedJobState::Finished
            )),
            "{job} left its member once Running: {states:?}"
        );
    }
    states
}

/// 4. A batch Job with completions > parallelism runs its last wave to the end: 3 completions,
///    2 at a time, each pod running 10 s, with pods counted lost after 4 s. In the last wave one
///    pod runs while two have succeeded; earlier versions took the job back there and started
///    it again. Watched throughout: never taken back, never out of Running before Finished, no
///    running pod deleted, never in two members.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_jobs_last_wave_runs_to_the_end() {
    let _lock = HUB.lock().unwrap_or_else(|e| e.into_inner());
    let ns = unique_name("waves");
    let hub = setup(&[&ns], root(vec![leaf("waves", &ns)])).await;
    let dog = Watchdog::start(&hub, &fleet::MEMBERS, &[&ns]).await;
    let controller = Controller::start("waves", &["--pods-lost-timeout-seconds", "4"]).await;
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(async {
        let (seen, task) = watch_states(&hub, &ns);
        fleet::create_json(&hub, "jobs", batch_job(&ns, "waves", 3, 2, 10))
            .await
            .expect("create");
        let q =
            hub::wait_queued_state(&hub, &ns, "Job", "waves", QueuedJobState::Finished, T).await;
        stop_watching(&seen, task, &["waves"]).await;
        let states = never_taken_back(&seen, "waves");
        assert!(states.contains(&QueuedJobState::Running), "{states:?}");
        assert_eq!(q.status.map(|s| s.requeues), Some(0));
        let events = hub::events_for(&hub, &ns, "waves").await;
        assert!(
            !events.iter().any(|e| e.starts_with("Requeued")),
            "{events:?}"
        );
        dog.assert_clean("last wave").await;
    }))
    .await;
    finish(&hub, &[&ns], vec![controller], outcome).await;
}

/// 5. A PyTorchJob whose workers finish before its master: two workers succeed after 3 s, the
///    master runs 16 s, pods counted lost after 4 s. Succeeded pods are progress, not loss: the
///    job stays Running until the master succeeds, then Finished; never taken back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_finishing_before_their_master_are_progress() {
    let _lock = HUB.lock().unwrap_or_else(|e| e.into_inner());
    let ns = unique_name("early");
    let hub = setup(&[&ns], root(vec![leaf("early", &ns)])).await;
    let dog = Watchdog::start(&hub, &fleet::MEMBERS, &[&ns]).await;
    let controller = Controller::start("early", &["--pods-lost-timeout-seconds", "4"]).await;
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(async {
        let (seen, task) = watch_states(&hub, &ns);
        let mut job = pytorchjob(&ns, "early", 2, 0, "100m");
        job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["metadata"] =
            json!({"annotations": runs_for(16)});
        job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"] =
            json!({"annotations": runs_for(3)});
        fleet::create_json(&hub, "pytorchjobs", job)
            .await
            .expect("create");
        let q = hub::wait_queued_state(
            &hub,
            &ns,
            "PyTorchJob",
            "early",
            QueuedJobState::Finished,
            T,
        )
        .await;
        stop_watching(&seen, task, &["early"]).await;
        let states = never_taken_back(&seen, "early");
        assert!(states.contains(&QueuedJobState::Running), "{states:?}");
        assert_eq!(q.status.map(|s| s.requeues), Some(0));
        let events = hub::events_for(&hub, &ns, "early").await;
        assert!(
            !events.iter().any(|e| e.starts_with("Requeued")),
            "{events:?}"
        );
        dog.assert_clean("workers before master").await;
    }))
    .await;
    finish(&hub, &[&ns], vec![controller], outcome).await;
}

/// 6. A job kind whose CRD is installed on the hub after the controller started is handled
///    (earlier versions discovered kinds once, so such jobs stayed suspended with no QueuedJob):
///    the XGBoostJob CRD is removed from the hub, the controller starts without it, the CRD comes
///    back, and an XGBoostJob submitted then gets a QueuedJob and runs in one member.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_kind_installed_after_the_start_is_handled() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let _lock = HUB.lock().unwrap_or_else(|e| e.into_inner());
    let ns = unique_name("late");
    let hub = setup(&[&ns], root(vec![leaf("late", &ns)])).await;
    let crds: Api<CustomResourceDefinition> = Api::all(hub.clone());
    let name = "xgboostjobs.kubeflow.org";
    let crd = hub::recreatable(
        crds.get(name)
            .await
            .expect("the fleet installs the XGBoostJob CRD"),
    );
    let _ = crds.delete(name, &Default::default()).await;
    wait_for("the CRD gone", T, || async {
        match crds.get_opt(name).await {
            Ok(None) => Ok(()),
            other => Err(format!("{:?}", other.map(|c| c.is_some()))),
        }
    })
    .await;
    let controller = Controller::start("late", &[]).await;
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(async {
        crds.create(&Default::default(), &crd)
            .await
            .expect("the CRD back");
        hub::wait_established(&hub, name).await;
        // Watched from here: the hub's XGBoostJobs can be watched only once their CRD is back.
        let dog = Watchdog::start(&hub, &fleet::MEMBERS, &[&ns]).await;
        let res = json!([{"name": "xgboost", "image": "registry.k8s.io/pause:3.10",
                          "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                                        "limits": {"cpu": "100m", "memory": "64Mi"}}}]);
        let job = json!({
            "apiVersion": "kubeflow.org/v1", "kind": "XGBoostJob",
            "metadata": {"name": "late", "namespace": ns},
            "spec": {"xgbReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "Never", "template": {"spec": {"containers": res.clone()}}},
                "Worker": {"replicas": 1, "restartPolicy": "Never", "template": {"spec": {"containers": res}}}}}
        });
        fleet::create_json(&hub, "xgboostjobs", job)
            .await
            .expect("create");
        let q = hub::wait_queued_state(&hub, &ns, "XGBoostJob", "late", QueuedJobState::Running, T).await;
        let cluster = q.status.and_then(|s| s.cluster).expect("a member");
        let holders =
            hub::members_with("kubeflow.org/v1", "XGBoostJob", "xgboostjobs", &ns, "late").await;
        assert_eq!(holders, vec![cluster]);
        assert!(
            controller.log_text().contains("installed on the hub since the start"),
            "{}",
            controller.log_tail()
        );
        dog.assert_clean("late").await;
    }))
    .await;
    // The fleet keeps its CRD whatever happened.
    if crds.get_opt(name).await.ok().flatten().is_none() {
        let _ = crds.create(&Default::default(), &crd).await;
        hub::wait_established(&hub, name).await;
    }
    finish(&hub, &[&ns], vec![controller], outcome).await;
}

/// 7. A batch Job whose pods all succeeded frees its quota before its member says so: a leaf of
///    10m cpu holds one 10m job at a time. `first` runs on some member; that member's
///    kube-controller-manager is paused, so its pod succeeds (kwok) but its Job is never marked
///    Complete; `second` waits for the quota. muster frees `first`'s quota on its pod's success:
///    `second` is admitted while `first` is still Running (its member's Job not Complete),
///    with its reason saying why. Resumed, the member completes `first`; the hub job gets its
///    status and both finish. Watched throughout: neither taken back, no running pod deleted,
///    never in two members.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_job_whose_pods_succeeded_frees_its_quota_before_its_member_says_so() {
    let _lock = HUB.lock().unwrap_or_else(|e| e.into_inner());
    let ns = unique_name("done");
    let tiny = json!({"name": "done", "namespaces": [ns], "max": {"cpu": "10m", "memory": "16Mi"}});
    let hub = setup(&[&ns], root(vec![tiny])).await;
    let dog = Watchdog::start(&hub, &fleet::MEMBERS, &[&ns]).await;
    let controller = Controller::start("done", &[]).await;
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(async {
        let (seen, task) = watch_states(&hub, &ns);
        fleet::create_json(&hub, "jobs", batch_job(&ns, "first", 1, 1, 8))
            .await
            .expect("create first");
        let q = hub::wait_queued_state(&hub, &ns, "Job", "first", QueuedJobState::Running, T).await;
        let cluster = q.status.and_then(|s| s.cluster).expect("a member");
        let paused = Paused::new(&format!("{cluster}/kube-controller-manager"));
        fleet::create_json(&hub, "jobs", batch_job(&ns, "second", 1, 1, 2))
            .await
            .expect("create second");
        // `second` can only be admitted into what `first` held.
        let second = wait_for("second admitted", T, || async {
            let q = hub::queued_job(&hub, &ns, "Job", "second").await;
            match q.and_then(|q| q.status) {
                Some(s) if s.admitted_at.is_some() => Ok(s),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
        assert!(second.cluster.is_some(), "{second:?}");
        let first = hub::queued_job(&hub, &ns, "Job", "first")
            .await
            .and_then(|q| q.status)
            .expect("first's status");
        assert_eq!(first.state, QueuedJobState::Running, "{first:?}");
        assert!(
            first.lifecycle.as_ref().is_some_and(|l| l.pods_done),
            "{first:?}"
        );
        let reason = first.reason.clone().unwrap_or_default();
        assert!(
            reason.starts_with(&format!("every pod succeeded on {cluster}")),
            "{reason}"
        );
        // Its member has not said so: its Job controller is paused.
        let member = fleet::client_for(&cluster).await;
        let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(member, &ns);
        let copy = jobs.get("first").await.expect("first's copy");
        let complete = |j: &k8s_openapi::api::batch::v1::Job| {
            j.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| {
                    c.iter()
                        .any(|c| c.type_ == "Complete" && c.status == "True")
                })
        };
        assert!(!complete(&copy), "{:?}", copy.status);
        drop(paused);
        for name in ["first", "second"] {
            hub::wait_queued_state(&hub, &ns, "Job", name, QueuedJobState::Finished, T).await;
        }
        stop_watching(&seen, task, &["first", "second"]).await;
        // The hub job gets its member's final status.
        let hub_jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(hub.clone(), &ns);
        wait_for("first's hub job Complete", T, || async {
            let j = hub_jobs.get("first").await.map_err(|e| e.to_string())?;
            if complete(&j) {
                Ok(())
            } else {
                Err(format!("{:?}", j.status))
            }
        })
        .await;
        for name in ["first", "second"] {
            let states = never_taken_back(&seen, name);
            assert!(
                states.contains(&QueuedJobState::Finished),
                "{name}: {states:?}"
            );
        }
        dog.assert_clean("pods done").await;
    }))
    .await;
    finish(&hub, &[&ns], vec![controller], outcome).await;
}
