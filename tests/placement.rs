//! The member places exactly the plan, on the local fleet: every dispatched pod waits behind
//! muster's scheduling gate until every pod of its job exists, then goes to the one node the plan
//! holds for it. An auditor watches every member's pods for the whole of each test and fails on
//! the first pod bound off its assignment or released before its gang existed.
//!
//! 1. README's example PyTorchJob, as README submits it, 20 times in a row: each run starts
//!    whole on its planned nodes, with no take-back.
//! 2. Components sharing nodes with uneven counts (a master and 5 workers over 3 two-GPU nodes),
//!    and a JobSet with two replicated jobs on the same nodes.
//! 3. Pods deleted by hand: recreated by their operator, given the freed slots, Running again on
//!    the reserved nodes.
//! 4. The controller killed between the creation of the pods and their release: nothing is
//!    released without a controller, and the next one releases each pod once, on its plan.

// The std Mutex only serializes the tests of this binary; holding it across awaits is the point.
#![allow(clippy::await_holding_lock)]

mod support;

use std::time::Duration;

use kube::api::{Api, DeleteParams};
use muster::controller::crd::QueuedJobState;
use serde_json::json;
use support::audit::Auditor;
use support::fleet::{self, client_for, unique_name, wait_for};
use support::hub::{self, Controller};
use support::placement::*;
use support::process::Paused;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn readme_example_starts_whole_on_its_plan_twenty_times() {
    let _g = HUB.lock().unwrap_or_else(|e| e.into_inner());
    let hub = setup().await;
    let audit = Auditor::start(&fleet::MEMBERS).await;
    let controller = Controller::start("placement-readme", &[]).await;
    let job = yaml_file("examples/jobs/pytorchjob.yaml");
    let result: Result<(), String> = async {
        for run in 1..=20 {
            let uid = create(&hub, &job).await;
            let q = wait_running_on_plan(&hub, "research", "PyTorchJob", "resnet50-ddp").await;
            assert_exact(&q);
            let member = q
                .status
                .as_ref()
                .and_then(|s| s.cluster.clone())
                .unwrap_or_default();
            // The member agrees: 4 pods Running, each on the one node muster assigned it.
            let pods = fleet::list_pods(
                &client_for(&member).await,
                "research",
                &format!("muster.dev/job-uid={uid}"),
            )
            .await;
            let running = pods
                .iter()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .count();
            if running != 4 {
                return Err(format!("run {run}: {running}/4 pods Running on {member}"));
            }
            let released = audit
                .check(&uid, 4, &[])
                .map_err(|e| format!("run {run}: {e}"))?;
            if released.len() != 4 {
                return Err(format!("run {run}: released {released:?}"));
            }
            let events = hub::events_for(&hub, "research", "resnet50-ddp").await;
            if events
                .iter()
                .any(|e| e.starts_with("Requeued") || e.starts_with("PlacementMismatch"))
            {
                return Err(format!("run {run}: {events:?}"));
            }
            delete_and_wait(
                &hub,
                "kubeflow.org/v1",
                "PyTorchJob",
                "research",
                "resnet50-ddp",
            )
            .await;
        }
        Ok(())
    }
    .await;
    finish(Some(&controller), result);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shared_nodes_uneven_counts_jobsets_and_pods_deleted_by_hand() {
    let _g = HUB.lock().unwrap_or_else(|e| e.into_inner());
    let hub = setup().await;
    let audit = Auditor::start(&fleet::MEMBERS).await;
    let controller = Controller::start("placement-shared", &[]).await;
    let name = unique_name("shared");
    let result: Result<(), String> = async {
        // 6 one-GPU pods fill member-b's 3 two-GPU nodes: the master shares a node with a
        // worker, and the workers' counts per node differ (1, 2, 2).
        let uid = create(&hub, &shared_pytorchjob("research", &name, 5)).await;
        let q = wait_running_on_plan(&hub, "research", "PyTorchJob", &name).await;
        assert_exact(&q);
        let st = q.status.clone().unwrap_or_default();
        if !master_shares_a_node(&st) {
            return Err(format!("expected master and workers to share a node: {:?}", st.placement));
        }
        audit.check(&uid, 6, &[])?;

        // Two pods deleted by hand (the master and a worker): the operator recreates them,
        // muster gives each the freed slot, and they run again on the reserved nodes.
        let b = client_for("member-b").await;
        let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(b.clone(), "research");
        for p in [format!("{name}-master-0"), format!("{name}-worker-1")] {
            pods.delete(&p, &DeleteParams::default())
                .await
                .map_err(|e| format!("deleting {p}: {e}"))?;
        }
        let name2 = name.clone();
        let uid2 = uid.clone();
        wait_for("the deleted pods to run again", T, || {
            let (b, name, uid) = (b.clone(), name2.clone(), uid2.clone());
            async move {
                let now = fleet::list_pods(&b, "research", &format!("muster.dev/job-uid={uid}")).await;
                let fresh = now
                    .iter()
                    .filter(|p| p.metadata.deletion_timestamp.is_none())
                    .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                    .count();
                if fresh == 6 { Ok(()) } else { Err(format!("{fresh}/6 of {name} Running")) }
            }
        })
        .await;
        let q = wait_running_on_plan(&hub, "research", "PyTorchJob", &name).await;
        assert_exact(&q);
        if q.status.as_ref().map(|s| &s.placement) != Some(&st.placement) {
            return Err(format!("the plan moved: {:?} -> {:?}", st.placement, q.status));
        }
        audit.check(&uid, 6, &[])?;
        delete_and_wait(&hub, "kubeflow.org/v1", "PyTorchJob", "research", &name).await;

        // A JobSet whose two replicated jobs share member-b's nodes (kwok completes Job pods at
        // once: the auditor saw each bound to its assigned node, the record says where).
        let js = unique_name("js");
        let jobset = json!({
            "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": js, "namespace": "research",
                         "annotations": {"muster.dev/clusters": "member-b"}},
            "spec": {"replicatedJobs": [
                {"name": "trainer", "replicas": 1, "template": {"spec": {
                    "parallelism": 3, "completions": 3, "backoffLimit": 0,
                    "template": {"spec": {"restartPolicy": "Never", "containers": gpu_container(1)}}}}},
                {"name": "evaluator", "replicas": 1, "template": {"spec": {
                    "parallelism": 2, "completions": 2, "backoffLimit": 0,
                    "template": {"spec": {"restartPolicy": "Never", "containers": gpu_container(1)}}}}}
            ]}
        });
        let js_uid = create(&hub, &jobset).await;
        let q = hub::wait_queued_state(&hub, "research", "JobSet", &js, QueuedJobState::Finished, T).await;
        let st = q.status.clone().unwrap_or_default();
        if st.requeues != 0 {
            return Err(format!("JobSet taken back: {:?}", st.reason));
        }
        let released = audit.check(&js_uid, 5, &[])?;
        if released.len() != 5 {
            return Err(format!("JobSet pods released: {released:?}"));
        }
        let bound: Vec<_> = audit.of(&js_uid).into_iter().filter(|s| s.pod.bound.is_some()).collect();
        if bound.is_empty() {
            return Err("no JobSet pod was seen bound".into());
        }
        Ok(())
    }
    .await;
    finish(Some(&controller), result);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restart_between_pod_creation_and_release_places_each_pod_once() {
    let _g = HUB.lock().unwrap_or_else(|e| e.into_inner());
    let hub = setup().await;
    let audit = Auditor::start(&fleet::MEMBERS).await;
    let name = unique_name("restart");
    let mut controller = Some(Controller::start("placement-restart-1", &[]).await);
    let result: Result<(), String> = async {
        // member-b's training-operator paused: the copy is created there, its pods are not.
        let paused = Paused::new("member-b/training-operator");
        let uid = create(&hub, &shared_pytorchjob("research", &name, 3)).await;
        hub::wait_queued_state(
            &hub,
            "research",
            "PyTorchJob",
            &name,
            QueuedJobState::Dispatched,
            T,
        )
        .await;
        // The controller dies; then the operator creates the pods, behind muster's gate.
        drop(controller.take());
        drop(paused);
        let b = client_for("member-b").await;
        let sel = format!("muster.dev/job-uid={uid}");
        wait_for("4 gated pods on member-b", T, || {
            let (b, sel) = (b.clone(), sel.clone());
            async move {
                let pods = fleet::list_pods(&b, "research", &sel).await;
                if pods.len() == 4 {
                    Ok(())
                } else {
                    Err(format!("{} pods", pods.len()))
                }
            }
        })
        .await;
        // With no controller, nothing leaves its gate (watched for 5 s).
        tokio::time::sleep(Duration::from_secs(5)).await;
        let early: Vec<_> = audit
            .of(&uid)
            .into_iter()
            .filter(|s| !s.pod.gated)
            .collect();
        if !early.is_empty() {
            return Err(format!("released without a controller: {early:?}"));
        }
        controller = Some(Controller::start("placement-restart-2", &[]).await);
        let q = wait_running_on_plan(&hub, "research", "PyTorchJob", &name).await;
        assert_exact(&q);
        let released = audit.check(&uid, 4, &[])?;
        if released.len() != 4 || released.values().any(|k| *k != 1) {
            return Err(format!("each pod released once: {released:?}"));
        }
        delete_and_wait(&hub, "kubeflow.org/v1", "PyTorchJob", "research", &name).await;
        Ok(())
    }
    .await;
    finish(controller.as_ref(), result);
}
