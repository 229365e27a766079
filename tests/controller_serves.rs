//! What a member can create, as a hard fit condition, on the local fleet: a job whose pods name
//! a PriorityClass only member-c has goes to member-c; one naming a PriorityClass no member has
//! is never dispatched (watched the whole time) and says which member lacks what, until the
//! PriorityClass is created on member-b, where it then runs; a member whose MPIJob CRD is removed
//! is no longer a candidate for MPIJobs, and is again once the CRD is back. MemberCluster status
//! lists what each member serves. A member's own refusal of a copy's pods is the QueuedJob's reason.
//! A member whose operator for a kind does not act (paused) is no candidate for that kind.

// The std Mutex only serializes the tests of this binary; holding it across awaits is the point.
#![allow(clippy::await_holding_lock)]

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};
use muster::controller::crd::{MemberCluster, QueuedJobState, QueuedJobStatus};
use serde_json::{Value, json};
use support::failures::*;
use support::fleet::{self, client_for, unique_name, wait_for};
use support::hub::{self, Controller};
use support::watchdog::Watchdog;

/// A batch Job of one 1-GPU pod that names `class`, running 600 s.
fn job_with_class(ns: &str, name: &str, class: &str) -> Value {
    let mut j = batch_job(ns, name, 1, 1, 600);
    j["spec"]["template"]["spec"]["priorityClassName"] = json!(class);
    j["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] =
        json!("1");
    j["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] =
        json!("1");
    j
}

async fn create_class(c: &Client, name: &str) {
    let pc: PriorityClass = serde_json::from_value(
        json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                      "metadata": {"name": name}, "value": 1000}),
    )
    .expect("a PriorityClass");
    Api::<PriorityClass>::all(c.clone())
        .create(&PostParams::default(), &pc)
        .await
        .unwrap_or_else(|e| panic!("creating PriorityClass {name}: {e}"));
}

async fn delete_class(c: &Client, name: &str) {
    let _ = Api::<PriorityClass>::all(c.clone())
        .delete(name, &DeleteParams::default())
        .await;
}

async fn status(hub: &Client, ns: &str, kind: &str, name: &str) -> QueuedJobStatus {
    hub::queued_job(hub, ns, kind, name)
        .await
        .and_then(|q| q.status)
        .unwrap_or_default()
}

async fn member_status(hub: &Client, name: &str) -> muster::controller::crd::MemberClusterStatus {
    Api::<MemberCluster>::all(hub.clone())
        .get_opt(name)
        .await
        .ok()
        .flatten()
        .and_then(|m| m.status)
        .unwrap_or_default()
}

/// Pods of `ns` on `member` that run.
async fn running_pods(member: &str, ns: &str) -> usize {
    let c = client_for(member).await;
    fleet::list_pods(&c, ns, "")
        .await
        .iter()
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_go_only_to_members_that_have_their_priority_class() {
    let _lock = HUB.lock().unwrap_or_else(|e| e.into_inner());
    let ns = unique_name("serves");
    let hub = setup(&[&ns], root(vec![leaf("serves", &ns)])).await;
    let dog = Watchdog::start(&hub, &fleet::MEMBERS, &[&ns]).await;
    let only_c = unique_name("only-c");
    let nowhere = unique_name("nowhere");
    // Both exist on the hub (the hub's PriorityClasses give a job its priority); on the members
    // only-c exists on member-c alone, nowhere on none.
    create_class(&hub, &only_c).await;
    create_class(&hub, &nowhere).await;
    let member_c = client_for("member-c").await;
    let member_b = client_for("member-b").await;
    create_class(&member_c, &only_c).await;
    let controller = Controller::start("serves", &[]).await;
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(async {
        wait_for("member-c lists the PriorityClass", T, || async {
            let st = member_status(&hub, "member-c").await;
            match &st.priority_classes {
                Some(p) if p.contains(&only_c) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
        fleet::create_json(&hub, "jobs", job_with_class(&ns, "on-c", &only_c))
            .await
            .expect("create");
        fleet::create_json(&hub, "jobs", job_with_class(&ns, "waits", &nowhere))
            .await
            .expect("create");
        // The first runs on member-c; the second is never dispatched and says why, watched
        // the whole time until then.
        let deadline = Instant::now() + T;
        let mut waited_reason = None;
        loop {
            assert!(Instant::now() < deadline, "on-c never ran on member-c");
            let on_c = status(&hub, &ns, "Job", "on-c").await;
            if let Some(c) = &on_c.cluster {
                assert_eq!(c, "member-c", "{on_c:?}");
            }
            let w = status(&hub, &ns, "Job", "waits").await;
            assert!(
                w.cluster.is_none(),
                "dispatched with no PriorityClass: {w:?}"
            );
            assert!(
                !matches!(
                    w.state,
                    QueuedJobState::Admitted | QueuedJobState::Dispatched
                ),
                "{w:?}"
            );
            if let Some(r) = &w.reason
                && r.contains("PriorityClass")
            {
                waited_reason = Some(r.clone());
            }
            if on_c.state == QueuedJobState::Running && waited_reason.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        assert_eq!(running_pods("member-c", &ns).await, 1);
        let why = waited_reason.unwrap_or_default();
        for m in ["member-a", "member-b", "member-c"] {
            assert!(
                why.contains(&format!("no PriorityClass {nowhere} on {m}")),
                "{m} in {why:?}"
            );
        }
        let (ok, text) = hub::explain(&format!("{ns}/waits"));
        assert!(ok, "{text}");
        assert!(
            text.contains(&format!(
                "member-b: cannot create it: no PriorityClass {nowhere} on member-b"
            )),
            "{text}"
        );
        // The PriorityClass is created on member-b: picked up live, the job runs there.
        create_class(&member_b, &nowhere).await;
        wait_for("waits running on member-b", T, || async {
            let w = status(&hub, &ns, "Job", "waits").await;
            match (&w.cluster, w.state) {
                (Some(c), QueuedJobState::Running) if c == "member-b" => Ok(()),
                (Some(c), _) => {
                    assert_eq!(c, "member-b", "{w:?}");
                    Err(format!("{w:?}"))
                }
                _ => Err(format!("{w:?}")),
            }
        })
        .await;
        assert_eq!(running_pods("member-b", &ns).await, 1);
        dog.assert_clean("serves").await;
    }))
    .await;
    for (c, n) in [
        (&member_c, &only_c),
        (&member_b, &nowhere),
        (&hub, &only_c),
        (&hub, &nowhere),
    ] {
        delete_class(c, n).await;
    }
    finish(&hub, &[&ns], vec![controller], outcome).await;
}

/// An MPIJob (only its copy's creation is looked at, though the MPI operator runs it) that may
/// go to member-a only.
fn mpijob_for_a(ns: &str, name: &str) -> Value {
    let c = |gpu: &str| {
        json!([{"name": "mpi", "image": "registry.k8s.io/pause:3.10",
                "resources": {"limits": {"cpu": "100m", "memory": "64Mi", "nvidia.com/gpu": gpu}}}])
    };
    json!({
        "apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
        "metadata": {"name": name, "namespace": ns,
                     "annotations": {"muster.dev/clusters": "member-a"}},
        "spec": {"slotsPerWorker": 1, "mpiReplicaSpecs": {
            "Launcher": {"replicas": 1, "template": {"spec": {"containers": c("0")}}},
            "Worker": {"replicas": 2, "template": {"spec": {"containers": c("1")}}}}}
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_whose_crd_is_removed_is_not_chosen_until_it_is_back() {
    let _lock = HUB.lock().unwrap_or_else(|e| e.into_inner());
    let ns = unique_name("crd");
    let hub = setup(&[&ns], root(vec![leaf("crd", &ns)])).await;
    let dog = Watchdog::start(&hub, &fleet::MEMBERS, &[&ns]).await;
    let name = "mpijobs.kubeflow.org";
    let member_a = client_for("member-a").await;
    let crds: Api<CustomResourceDefinition> = Api::all(member_a.clone());
    let crd = hub::recreatable(
        crds.get(name)
            .await
            .expect("the fleet installs the MPIJob CRD on every member"),
    );
    let controller = Controller::start("crd", &[]).await;
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(async {
        wait_for("member-a lists MPIJob", T, || async {
            let st = member_status(&hub, "member-a").await;
            if st.kinds.iter().any(|k| k == "MPIJob") {
                Ok(())
            } else {
                Err(format!("{:?}", st.kinds))
            }
        })
        .await;
        let _ = crds.delete(name, &DeleteParams::default()).await;
        wait_for("member-a no longer lists MPIJob", T, || async {
            let st = member_status(&hub, "member-a").await;
            if st.kinds.iter().any(|k| k == "MPIJob") || st.kinds.is_empty() {
                Err(format!("{:?}", st.kinds))
            } else {
                Ok(())
            }
        })
        .await;
        fleet::create_json(&hub, "mpijobs", mpijob_for_a(&ns, "mpi"))
            .await
            .expect("create");
        let q = wait_for("the MPIJob says why it waits", T, || async {
            let st = status(&hub, &ns, "MPIJob", "mpi").await;
            assert!(st.cluster.is_none(), "dispatched: {st:?}");
            match &st.reason {
                Some(r) if r.contains("member-a does not serve MPIJob") => Ok(st),
                _ => Err(format!("{st:?}")),
            }
        })
        .await;
        assert!(q.cluster.is_none());
        // Watched for 5 s more: it stays off member-a.
        let until = Instant::now() + Duration::from_secs(5);
        while Instant::now() < until {
            let st = status(&hub, &ns, "MPIJob", "mpi").await;
            assert!(st.cluster.is_none(), "dispatched: {st:?}");
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        // The CRD is back: found live, the MPIJob's copy is created on member-a.
        crds.create(&PostParams::default(), &crd)
            .await
            .expect("the CRD back");
        wait_for("the MPIJob copied to member-a", T, || async {
            let on =
                hub::members_with("kubeflow.org/v2beta1", "MPIJob", "mpijobs", &ns, "mpi").await;
            if on == ["member-a"] {
                Ok(())
            } else {
                Err(format!(
                    "on {on:?}; {:?}",
                    status(&hub, &ns, "MPIJob", "mpi").await
                ))
            }
        })
        .await;
        // The copy exists before its pods do: the MPI operator makes them a moment later.
        wait_for("the MPIJob's pods seen on member-a", T, || async {
            let seen = dog.pods_seen();
            if seen
                .iter()
                .any(|p| p.starts_with(&format!("member-a: {ns}/mpi")))
            {
                Ok(())
            } else {
                Err(format!("{seen:?}"))
            }
        })
        .await;
        dog.assert_clean("crd").await;
    }))
    .await;
    // Whatever happened, member-a gets its CRD back.
    if crds.get_opt(name).await.ok().flatten().is_none() {
        let _ = crds.create(&PostParams::default(), &crd).await;
    }
    finish(&hub, &[&ns], vec![controller], outcome).await;
}

/// The member's own refusal of a copy's pods is the QueuedJob's reason: member-a's namespace
/// has a ResourceQuota of no pods, so its Job controller cannot create the pod (`FailedCreate`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_members_refusal_of_the_pods_is_the_reason() {
    use k8s_openapi::api::core::v1::ResourceQuota;
    let _lock = HUB.lock().unwrap_or_else(|e| e.into_inner());
    let ns = unique_name("refused");
    let hub = setup(&[&ns], root(vec![leaf("refused", &ns)])).await;
    let member_a = client_for("member-a").await;
    fleet::create_namespace(&member_a, &ns).await;
    let rq: ResourceQuota = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ResourceQuota",
        "metadata": {"name": "none", "namespace": ns}, "spec": {"hard": {"pods": "0"}}
    }))
    .expect("a ResourceQuota");
    Api::<ResourceQuota>::namespaced(member_a.clone(), &ns)
        .create(&PostParams::default(), &rq)
        .await
        .expect("the quota");
    let controller = Controller::start("refused", &[]).await;
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(async {
        let mut job = batch_job(&ns, "quota", 1, 1, 600);
        job["metadata"]["annotations"] = json!({"muster.dev/clusters": "member-a"});
        fleet::create_json(&hub, "jobs", job).await.expect("create");
        let st = wait_for("the member's refusal in the reason", T, || async {
            let st = status(&hub, &ns, "Job", "quota").await;
            match &st.reason {
                Some(r) if r.contains("member-a refuses: FailedCreate") => Ok(st),
                _ => Err(format!("{st:?}")),
            }
        })
        .await;
        let why = st.reason.unwrap_or_default();
        eprintln!("reason: {why}");
        assert!(why.contains("exceeded quota"), "{why}");
        assert_eq!(st.state, QueuedJobState::Dispatched, "{why}");
    }))
    .await;
    finish(&hub, &[&ns], vec![controller], outcome).await;
}

/// A member whose operator for a kind does not act is no candidate for that kind: member-a's
/// MPI operator is paused, the first MPIJob sent there gets neither status nor pod, and from then
/// on MemberCluster status says so, a second MPIJob (member-a only) is never dispatched and says
/// why, while a batch Job (another kind, member-a only) still runs there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_whose_operator_does_not_act_is_not_chosen_for_that_kind() {
    let _lock = HUB.lock().unwrap_or_else(|e| e.into_inner());
    let ns = unique_name("stall");
    let hub = setup(&[&ns], root(vec![leaf("stall", &ns)])).await;
    let dog = Watchdog::start(&hub, &fleet::MEMBERS, &[&ns]).await;
    let controller = Controller::start("stall", &[]).await;
    // CPU only, so that the two MPIJobs would both fit member-a at once.
    let cpu_only = |name: &str| {
        let mut j = mpijob_for_a(&ns, name);
        for r in ["Launcher", "Worker"] {
            j["spec"]["mpiReplicaSpecs"][r]["template"]["spec"]["containers"][0]["resources"] =
                json!({"limits": {"cpu": "100m", "memory": "64Mi"}});
        }
        j
    };
    let paused = support::process::Paused::new("member-a/mpi-operator");
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(async {
        fleet::create_json(&hub, "mpijobs", cpu_only("first"))
            .await
            .expect("create");
        let stalled = wait_for("member-a stalled for MPIJob in its status", T, || async {
            let st = member_status(&hub, "member-a").await;
            match st.stalled.get("MPIJob") {
                Some(why) => Ok(why.clone()),
                None => Err(format!(
                    "{:?}; first: {:?}",
                    st.stalled,
                    status(&hub, &ns, "MPIJob", "first").await
                )),
            }
        })
        .await;
        assert!(
            stalled.starts_with(&format!(
                "member-a's MPIJob operator does not act: {ns}/first has had no status and no pod for"
            )),
            "{stalled}"
        );
        fleet::create_json(&hub, "mpijobs", cpu_only("second"))
            .await
            .expect("create");
        let mut job = batch_job(&ns, "plain", 1, 1, 600);
        job["metadata"]["annotations"] = json!({"muster.dev/clusters": "member-a"});
        fleet::create_json(&hub, "jobs", job).await.expect("create");
        // Watched: the second MPIJob never goes to member-a and says why; the Job runs there.
        let deadline = Instant::now() + T;
        let mut said = None;
        loop {
            assert!(Instant::now() < deadline, "said {said:?}");
            let st = status(&hub, &ns, "MPIJob", "second").await;
            assert!(st.cluster.is_none(), "dispatched to a stalled member: {st:?}");
            if st
                .explanation
                .as_deref()
                .is_some_and(|e| e.contains("member-a's MPIJob operator does not act"))
            {
                said = st.explanation.clone();
            }
            let plain = status(&hub, &ns, "Job", "plain").await;
            if said.is_some() && plain.state == QueuedJobState::Running {
                assert_eq!(plain.cluster.as_deref(), Some("member-a"));
                break;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        for _ in 0..10 {
            let st = status(&hub, &ns, "MPIJob", "second").await;
            assert!(st.cluster.is_none(), "dispatched to a stalled member: {st:?}");
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        dog.assert_clean("stall").await;
    }))
    .await;
    drop(paused);
    // Its leader election may have ended while it was paused: started again if it is gone.
    let _ = std::process::Command::new("make")
        .args(["--no-print-directory", "fleet-up"])
        .current_dir(fleet::repo_root())
        .status();
    finish(&hub, &[&ns], vec![controller], outcome).await;
}

/// Issue 28, "after a restart, Rejected is final": a job naming a PriorityClass that exists
/// nowhere yet is Rejected; the controller is restarted (an upgrade) while it is; the class is
/// then created on the hub and on the members, and the job runs. Before, the restored Rejected
/// record was never judged again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_rejected_before_a_restart_runs_once_its_priority_class_exists() {
    let _lock = HUB.lock().unwrap_or_else(|e| e.into_inner());
    let ns = unique_name("late");
    let hub = setup(&[&ns], root(vec![leaf("late", &ns)])).await;
    let dog = Watchdog::start(&hub, &fleet::MEMBERS, &[&ns]).await;
    let class = unique_name("late-class");
    let mut controllers = vec![Controller::start("late", &[]).await];
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(async {
        fleet::create_json(&hub, "jobs", job_with_class(&ns, "late", &class))
            .await
            .expect("create");
        let q = hub::wait_queued_state(&hub, &ns, "Job", "late", QueuedJobState::Rejected, T).await;
        let reason = q.status.and_then(|s| s.reason).unwrap_or_default();
        assert!(reason.contains(&class), "{reason}");
        // The upgrade: the controller stopped and started again, the job still Rejected.
        controllers.clear();
        controllers.push(Controller::start("late-again", &[]).await);
        // Once it leads (the killed one's lease runs out first) and has read the job.
        let leases: Api<Lease> = Api::namespaced(hub.clone(), hub::CONTROLLER_NS);
        wait_for("the restarted controller leads", T, || async {
            let l = leases
                .get("muster-controller")
                .await
                .map_err(|e| e.to_string())?;
            let holder = l.spec.and_then(|s| s.holder_identity).unwrap_or_default();
            if holder == "late-again" {
                Ok(())
            } else {
                Err(holder)
            }
        })
        .await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(
            status(&hub, &ns, "Job", "late").await.state,
            QueuedJobState::Rejected
        );
        create_class(&hub, &class).await;
        for m in fleet::MEMBERS {
            create_class(&client_for(m).await, &class).await;
        }
        hub::wait_queued_state(&hub, &ns, "Job", "late", QueuedJobState::Running, T).await;
        dog.assert_clean("late").await;
    }))
    .await;
    delete_class(&hub, &class).await;
    for m in fleet::MEMBERS {
        delete_class(&client_for(m).await, &class).await;
    }
    finish(&hub, &[&ns], controllers, outcome).await;
}
