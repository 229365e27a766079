//! Every kind for real on the local fleet, with the operator that runs it in every member: the
//! examples in `examples/jobs/` (RayCluster and RayJob under the KubeRay operator; TFJob,
//! PaddleJob and JAXJob under the training-operator; MPIJob under the MPI operator; TrainJob in
//! `tests/controller_trainjob.rs`) are submitted to the hub, each is dispatched
//! whole to exactly one member, the operator there makes every pod (for a RayJob also its
//! submitter), each runs, watched throughout, and the member's status comes back to the hub object.

// The std Mutex only serializes the tests of this binary; holding it across awaits is the point.
#![allow(clippy::await_holding_lock)]

mod support;

use std::time::{Duration, Instant};

use muster::controller::crd::QueuedJobState;
use serde_json::Value;
use support::failures::*;
use support::fleet::{self, unique_name, wait_for};
use support::hub::{self, Controller, pods_per_member, queued_status as status};
use support::watchdog::Watchdog;

fn example(file: &str, ns: &str) -> Value {
    let path = fleet::repo_root().join("examples/jobs").join(file);
    let text = std::fs::read_to_string(&path).expect("the example");
    let mut v: Value = serde_yaml::from_str(&text).expect("YAML");
    v["metadata"]["namespace"] = Value::from(ns);
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raycluster_runs_whole_on_one_member() {
    let _lock = HUB.lock().unwrap_or_else(|e| e.into_inner());
    let ns = unique_name("ray");
    let hub = setup(&[&ns], root(vec![leaf("ray", &ns)])).await;
    let dog = Watchdog::start(&hub, &fleet::MEMBERS, &[&ns]).await;
    let controller = Controller::start("ray", &[]).await;
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(async {
        fleet::create_json(&hub, "rayclusters", example("raycluster.yaml", &ns))
            .await
            .expect("create");
        // Watched until every pod runs: never pods on two members, never more than 6.
        let deadline = Instant::now() + T;
        let st = loop {
            assert!(
                Instant::now() < deadline,
                "never running: {:?}",
                pods_per_member(&ns).await
            );
            let per = pods_per_member(&ns).await;
            assert!(per.len() <= 1, "pods on more than one member: {per:?}");
            assert!(per.iter().all(|p| p.2 <= 6), "more than 6 pods: {per:?}");
            let st = status(&hub, &ns, "RayCluster", "tune-cluster").await;
            if st.state == QueuedJobState::Running {
                break st;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        };
        let cluster = st.cluster.clone().expect("a member");
        assert_eq!(
            pods_per_member(&ns).await,
            [(cluster.clone(), 6, 6)],
            "head + 2 GPU + 3 cpu workers run there"
        );
        let on = hub::members_with(
            "ray.io/v1",
            "RayCluster",
            "rayclusters",
            &ns,
            "tune-cluster",
        )
        .await;
        assert_eq!(on, std::slice::from_ref(&cluster));
        // The operator's status, synced to the hub.
        wait_for("the RayCluster's status on the hub", T, || async {
            let api = fleet::dynamic_api(&hub, "ray.io/v1", "RayCluster", "rayclusters", Some(&ns));
            let obj = api.get("tune-cluster").await.map_err(|e| e.to_string())?;
            match obj.data["status"]["state"].as_str() {
                Some("ready") => Ok(()),
                _ => Err(format!("{}", obj.data["status"])),
            }
        })
        .await;
        dog.assert_clean("ray").await;
    }))
    .await;
    finish(&hub, &[&ns], vec![controller], outcome).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rayjob_runs_its_cluster_and_submitter_on_one_member() {
    let _lock = HUB.lock().unwrap_or_else(|e| e.into_inner());
    let ns = unique_name("rayjob");
    let hub = setup(&[&ns], root(vec![leaf("rayjob", &ns)])).await;
    let dog = Watchdog::start(&hub, &fleet::MEMBERS, &[&ns]).await;
    let controller = Controller::start("rayjob", &[]).await;
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(async {
        fleet::create_json(&hub, "rayjobs", example("rayjob.yaml", &ns))
            .await
            .expect("create");
        // Watched until the submitter exists beside the running head and workers: pods on one
        // member only, never more than 4.
        let deadline = Instant::now() + T;
        let mut member: Option<String> = None;
        loop {
            let per = pods_per_member(&ns).await;
            assert!(
                Instant::now() < deadline,
                "the submitter never came: {per:?}"
            );
            assert!(per.len() <= 1, "pods on more than one member: {per:?}");
            assert!(per.iter().all(|p| p.2 <= 4), "more than 4 pods: {per:?}");
            let st = status(&hub, &ns, "RayJob", "batch-inference").await;
            if let Some(c) = &st.cluster {
                assert_eq!(member.get_or_insert(c.clone()), c, "moved: {st:?}");
            }
            if let (Some(c), [(m, running, 4)]) = (&member, per.as_slice())
                && m == c
                && *running >= 3
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let cluster = member.expect("a member");
        let on = hub::members_with("ray.io/v1", "RayJob", "rayjobs", &ns, "batch-inference").await;
        assert_eq!(on, std::slice::from_ref(&cluster));
        // The operator's status, synced to the hub.
        wait_for("the RayJob's status on the hub", T, || async {
            let api = fleet::dynamic_api(&hub, "ray.io/v1", "RayJob", "rayjobs", Some(&ns));
            let obj = api
                .get("batch-inference")
                .await
                .map_err(|e| e.to_string())?;
            match obj.data["status"]["jobDeploymentStatus"].as_str() {
                Some(_) => Ok(()),
                None => Err(format!("{}", obj.data["status"])),
            }
        })
        .await;
        dog.assert_clean("rayjob").await;
    }))
    .await;
    finish(&hub, &[&ns], vec![controller], outcome).await;
}

/// A training-operator kind from its example: dispatched whole to one member, all `pods` of it
/// Running there (watched throughout: never pods on two members, never more than `pods`), its
/// copy on that member alone, and the operator's `Running` condition synced to the hub job.
async fn training_job_runs_whole(file: &str, kind: &str, plural: &str, name: &str, pods: usize) {
    let _lock = HUB.lock().unwrap_or_else(|e| e.into_inner());
    let ns = unique_name(&kind.to_lowercase());
    let hub = setup(&[&ns], root(vec![leaf("kinds", &ns)])).await;
    let dog = Watchdog::start(&hub, &fleet::MEMBERS, &[&ns]).await;
    let controller = Controller::start("kinds", &[]).await;
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(async {
        fleet::create_json(&hub, plural, example(file, &ns))
            .await
            .expect("create");
        let deadline = Instant::now() + T;
        let st = loop {
            let per = pods_per_member(&ns).await;
            assert!(Instant::now() < deadline, "{kind} never running: {per:?}");
            assert!(per.len() <= 1, "pods on more than one member: {per:?}");
            assert!(
                per.iter().all(|p| p.2 <= pods),
                "more than {pods} pods: {per:?}"
            );
            let st = status(&hub, &ns, kind, name).await;
            if st.state == QueuedJobState::Running {
                break st;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        };
        let cluster = st.cluster.clone().expect("a member");
        assert_eq!(pods_per_member(&ns).await, [(cluster.clone(), pods, pods)]);
        let on = hub::members_with("kubeflow.org/v1", kind, plural, &ns, name).await;
        assert_eq!(on, std::slice::from_ref(&cluster));
        wait_for("the operator's status on the hub", T, || async {
            let api = fleet::dynamic_api(&hub, "kubeflow.org/v1", kind, plural, Some(&ns));
            let obj = api.get(name).await.map_err(|e| e.to_string())?;
            let running = obj.data["status"]["conditions"]
                .as_array()
                .is_some_and(|c| {
                    c.iter()
                        .any(|c| c["type"] == "Running" && c["status"] == "True")
                });
            if running {
                Ok(())
            } else {
                Err(format!("{}", obj.data["status"]))
            }
        })
        .await;
        dog.assert_clean(kind).await;
    }))
    .await;
    finish(&hub, &[&ns], vec![controller], outcome).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tfjob_runs_whole_on_one_member() {
    // Chief, parameter server and 2 workers.
    training_job_runs_whole("tfjob.yaml", "TFJob", "tfjobs", "wide-deep", 4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paddlejob_runs_whole_on_one_member() {
    training_job_runs_whole(
        "paddlejob.yaml",
        "PaddleJob",
        "paddlejobs",
        "ernie-finetune",
        2,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jaxjob_runs_whole_on_one_member() {
    training_job_runs_whole("jaxjob.yaml", "JAXJob", "jaxjobs", "jax-mnist", 2).await;
}

/// Every condition `type` of `obj.status.conditions` that is `True`.
fn true_conditions(obj: &Value) -> Vec<String> {
    obj["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["status"] == "True")
        .filter_map(|c| c["type"].as_str().map(str::to_string))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mpijob_runs_its_launcher_and_workers_on_one_member_and_finishes() {
    let _lock = HUB.lock().unwrap_or_else(|e| e.into_inner());
    let ns = unique_name("mpi");
    let hub = setup(&[&ns], root(vec![leaf("mpi", &ns)])).await;
    let dog = Watchdog::start(&hub, &fleet::MEMBERS, &[&ns]).await;
    let controller = Controller::start("mpi", &[]).await;
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(async {
        // The launcher (a batch Job's pod, which kwok completes) runs 8 s, so that the three
        // pods are seen running together; its end is the MPIJob's.
        let mut job = example("mpijob.yaml", &ns);
        job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["metadata"] =
            serde_json::json!({"annotations": runs_for(8)});
        fleet::create_json(&hub, "mpijobs", job)
            .await
            .expect("create");
        let (api, kind, plural, name) =
            ("kubeflow.org/v2beta1", "MPIJob", "mpijobs", "horovod-bert");
        // Watched throughout: pods on one member only, never more than 3, never another member.
        let deadline = Instant::now() + T;
        let mut member: Option<String> = None;
        let mut all_ran = false;
        let st = loop {
            let per = pods_per_member(&ns).await;
            assert!(Instant::now() < deadline, "never finished: {per:?}");
            assert!(per.len() <= 1, "pods on more than one member: {per:?}");
            assert!(per.iter().all(|p| p.2 <= 3), "more than 3 pods: {per:?}");
            let st = status(&hub, &ns, kind, name).await;
            if let Some(c) = &st.cluster {
                assert_eq!(member.get_or_insert(c.clone()), c, "moved: {st:?}");
            }
            if let (Some(c), [(m, 3, 3)]) = (&member, per.as_slice()) {
                assert_eq!(m, c, "pods where the job is not");
                all_ran = true;
            }
            if st.state == QueuedJobState::Finished {
                break st;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        };
        assert!(all_ran, "launcher and both workers never ran together");
        let cluster = member.expect("a member");
        assert_eq!(st.cluster.as_deref(), Some(cluster.as_str()));
        assert_eq!(
            hub::members_with(api, kind, plural, &ns, name).await,
            [cluster]
        );
        // The operator's outcome, synced to the hub.
        let obj = fleet::dynamic_api(&hub, api, kind, plural, Some(&ns))
            .get(name)
            .await
            .expect("the hub MPIJob");
        assert!(
            true_conditions(&obj.data).iter().any(|c| c == "Succeeded"),
            "{}",
            obj.data["status"]
        );
        dog.assert_clean("mpi").await;
    }))
    .await;
    finish(&hub, &[&ns], vec![controller], outcome).await;
}
