//! TrainJob (Kubeflow Trainer v2.2.0) for real on the local fleet: Trainer's controller runs in
//! every member with its default runtimes, which the hub has too. A TrainJob of 2 nodes × 2 GPUs
//! on the `torch-distributed` runtime is dispatched whole to one member, where Trainer makes its
//! JobSet and exactly the pods muster's interpreter counted (read from the hub's runtime,
//! compared with the pods Trainer really made); they run on their planned nodes, the job
//! completes and its status comes back to the hub. A member whose runtime differs from the hub's,
//! or lacks it, is never chosen (watched the whole time), the reason says so, and the job runs as
//! soon as a member's runtime is made the same again; an edit of the hub's runtime then leaves
//! the running TrainJob alone, and so does a controller restart after it (earlier versions read
//! it again, and took it back).

// The std Mutex only serializes the tests of this binary; holding it across awaits is the point.
#![allow(clippy::await_holding_lock)]

mod support;

use std::time::{Duration, Instant};

use kube::Client;
use kube::api::{DeleteParams, DynamicObject, PostParams};
use muster::controller::crd::{MemberCluster, QueuedJobState};
use muster::workload::{TrainingRuntimes, interpret_with};
use serde_json::{Value, json};
use support::failures::*;
use support::fleet::{self, client_for, unique_name, wait_for};
use support::hub::{self, Controller, pods_per_member, queued_status as status};
use support::watchdog::Watchdog;

const API: &str = "trainer.kubeflow.org/v1alpha1";
const RUNTIME: &str = "torch-distributed";

/// 2 nodes × 2 GPUs on torch-distributed; a runtime patch of its own gives the pods kwok's
/// run time (`secs`).
fn trainjob(ns: &str, name: &str, secs: u32) -> Value {
    json!({
        "apiVersion": API, "kind": "TrainJob",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "runtimeRef": {"name": RUNTIME},
            "trainer": {"numNodes": 2, "resourcesPerNode": {"limits": {"nvidia.com/gpu": "2"}}},
            "runtimePatches": [{"manager": "example.com/tests",
                "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [{"name": "node",
                    "template": {"spec": {"template": {"metadata": {"annotations": runs_for(secs)}}}}}]}}}}],
        }
    })
}

fn runtimes_api(c: &Client) -> kube::Api<DynamicObject> {
    fleet::dynamic_api(
        c,
        API,
        "ClusterTrainingRuntime",
        "clustertrainingruntimes",
        None,
    )
}

/// The hub's runtimes, read from its API server (what the controller reads them from).
async fn hub_runtimes(hub: &Client) -> TrainingRuntimes {
    let list = runtimes_api(hub)
        .list(&Default::default())
        .await
        .expect("runtimes");
    let objs: Vec<Value> = list
        .items
        .iter()
        .map(|o| {
            let mut v = serde_json::to_value(o).expect("json");
            v["kind"] = json!("ClusterTrainingRuntime");
            v
        })
        .collect();
    TrainingRuntimes::from_objects(&objs).0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trainjob_runs_whole_on_one_member_and_completes() {
    let _lock = HUB.lock().unwrap_or_else(|e| e.into_inner());
    let ns = unique_name("train");
    let hub = setup(&[&ns], root(vec![leaf("train", &ns)])).await;
    let dog = Watchdog::start(&hub, &fleet::MEMBERS, &[&ns]).await;
    let controller = Controller::start("train", &[]).await;
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(async {
        let job = trainjob(&ns, "ddp", 8);
        // What muster counts, from the hub's own runtime.
        let counted = interpret_with(&job, &hub_runtimes(&hub).await)
            .expect("reads")
            .pod_count() as usize;
        assert_eq!(counted, 2);
        let created = fleet::create_json(&hub, "trainjobs", job)
            .await
            .expect("create");
        let uid = created.metadata.uid.clone().expect("uid");
        // Watched throughout: pods on one member only, never more than counted.
        let deadline = Instant::now() + T;
        let mut member: Option<String> = None;
        let mut ran = false;
        let mut placed_checked = false;
        let st = loop {
            let per = pods_per_member(&ns).await;
            assert!(Instant::now() < deadline, "never finished: {per:?}");
            assert!(per.len() <= 1, "pods on more than one member: {per:?}");
            assert!(
                per.iter().all(|p| p.2 <= counted),
                "more pods than counted: {per:?}"
            );
            let st = status(&hub, &ns, "TrainJob", "ddp").await;
            if let Some(c) = &st.cluster {
                assert_eq!(member.get_or_insert(c.clone()), c, "moved: {st:?}");
            }
            if let (Some(c), [(m, running, all)]) = (&member, per.as_slice())
                && *running == counted
                && *all == counted
            {
                assert_eq!(m, c, "pods where the job is not");
                ran = true;
            }
            // Every pod on the node the plan gave it (the gate released by muster).
            if st.state == QueuedJobState::Running && !placed_checked {
                let placed: Vec<_> = st
                    .pod_placement
                    .iter()
                    .filter(|p| !p.gated && p.node.is_some() && p.node == p.planned_node)
                    .collect();
                if placed.len() == counted {
                    placed_checked = true;
                }
            }
            if st.state == QueuedJobState::Finished {
                break st;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        };
        assert!(ran, "the two nodes never ran together");
        assert!(placed_checked, "pods never seen on their planned nodes");
        let cluster = member.expect("a member");
        assert_eq!(st.cluster.as_deref(), Some(cluster.as_str()));
        assert_eq!(
            hub::members_with(API, "TrainJob", "trainjobs", &ns, "ddp").await,
            std::slice::from_ref(&cluster)
        );
        // Trainer's JobSet on that member, and the pods it made carry muster's labels.
        let mc = client_for(&cluster).await;
        let js = fleet::dynamic_api(
            &mc,
            "jobset.x-k8s.io/v1alpha2",
            "JobSet",
            "jobsets",
            Some(&ns),
        )
        .get("ddp")
        .await
        .expect("Trainer's JobSet");
        let rj = &js.data["spec"]["replicatedJobs"][0];
        assert_eq!(rj["template"]["spec"]["parallelism"], json!(2), "{rj}");
        let labels = &rj["template"]["spec"]["template"]["metadata"]["labels"];
        assert_eq!(labels["muster.dev/job-uid"], json!(uid), "{labels}");
        // The outcome, synced to the hub.
        let obj = fleet::dynamic_api(&hub, API, "TrainJob", "trainjobs", Some(&ns))
            .get("ddp")
            .await
            .expect("the hub TrainJob");
        let complete = obj.data["status"]["conditions"]
            .as_array()
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Complete" && c["status"] == "True")
            });
        assert!(complete, "{}", obj.data["status"]);
        dog.assert_clean("train").await;
    }))
    .await;
    finish(&hub, &[&ns], vec![controller], outcome).await;
}

/// The runtime as read, made ready to be created or put again (server-set metadata dropped).
fn fresh(o: &DynamicObject) -> DynamicObject {
    let mut o = o.clone();
    o.metadata.uid = None;
    o.metadata.creation_timestamp = None;
    o.metadata.generation = None;
    o.metadata.managed_fields = None;
    o.metadata.resource_version = None;
    o
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trainjob_waits_until_a_member_has_the_same_runtime() {
    let _lock = HUB.lock().unwrap_or_else(|e| e.into_inner());
    let ns = unique_name("trainrt");
    let hub = setup(&[&ns], root(vec![leaf("trainrt", &ns)])).await;
    let dog = Watchdog::start(&hub, &fleet::MEMBERS, &[&ns]).await;
    let (b, c) = (client_for("member-b").await, client_for("member-c").await);
    let original = runtimes_api(&b)
        .get(RUNTIME)
        .await
        .expect("member-b's runtime");
    let original_c = runtimes_api(&c)
        .get(RUNTIME)
        .await
        .expect("member-c's runtime");
    // member-a's one 2-GPU node cannot hold the job; member-b's runtime is made different and
    // member-c's removed.
    let mut changed = fresh(&original);
    changed.metadata.resource_version = original.metadata.resource_version.clone();
    changed.data["spec"]["mlPolicy"]["numNodes"] = json!(3);
    runtimes_api(&b)
        .replace(RUNTIME, &PostParams::default(), &changed)
        .await
        .expect("change member-b's runtime");
    runtimes_api(&c)
        .delete(RUNTIME, &DeleteParams::default())
        .await
        .expect("remove member-c's runtime");
    let mut controller = Controller::start("trainrt", &[]).await;
    let mut second: Option<Controller> = None;
    let hub_original: std::sync::Mutex<Option<DynamicObject>> = std::sync::Mutex::new(None);
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(async {
        // MemberCluster status says what each member has.
        wait_for("member-c's status without the runtime", T, || async {
            let api: kube::Api<MemberCluster> = kube::Api::all(hub.clone());
            let mc = api.get("member-c").await.map_err(|e| e.to_string())?;
            let rt = mc.status.and_then(|s| s.runtimes);
            match rt {
                Some(r) if !r.iter().any(|r| r.ends_with(RUNTIME)) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
        fleet::create_json(&hub, "trainjobs", trainjob(&ns, "waits", 600))
            .await
            .expect("create");
        // Never dispatched, watched the whole time, until the reason names both members.
        let deadline = Instant::now() + T;
        let why = loop {
            let st = status(&hub, &ns, "TrainJob", "waits").await;
            assert!(Instant::now() < deadline, "no reason came: {st:?}");
            assert!(st.cluster.is_none(), "dispatched: {st:?}");
            assert!(pods_per_member(&ns).await.is_empty(), "pods somewhere");
            // The one-line reason is cut short; the explanation has every member.
            if let Some(r) = &st.explanation
                && r.contains("member-b's ClusterTrainingRuntime")
                && r.contains("no ClusterTrainingRuntime")
            {
                break r.clone();
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        };
        assert!(
            why.contains(&format!(
                "member-b's ClusterTrainingRuntime {RUNTIME} differs from the hub's"
            )),
            "{why}"
        );
        assert!(
            why.contains(&format!("no ClusterTrainingRuntime {RUNTIME} on member-c")),
            "{why}"
        );
        // Still not dispatched a few seconds on.
        for _ in 0..10 {
            assert!(
                status(&hub, &ns, "TrainJob", "waits")
                    .await
                    .cluster
                    .is_none()
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let (ok, text) = hub::explain(&format!("{ns}/waits"));
        assert!(ok, "{text}");
        assert!(
            text.contains(&format!(
                "member-c: cannot create it: no ClusterTrainingRuntime {RUNTIME} on member-c"
            )),
            "{text}"
        );
        // member-b's runtime is made the same as the hub's again: picked up live, it runs there.
        let now = runtimes_api(&b).get(RUNTIME).await.expect("runtime");
        let mut same = fresh(&original);
        same.metadata.resource_version = now.metadata.resource_version.clone();
        runtimes_api(&b)
            .replace(RUNTIME, &PostParams::default(), &same)
            .await
            .expect("restore member-b's runtime");
        wait_for("waits running on member-b", T, || async {
            let st = status(&hub, &ns, "TrainJob", "waits").await;
            match (&st.cluster, st.state) {
                (Some(c), QueuedJobState::Running) if c == "member-b" => Ok(()),
                (Some(c), _) => {
                    assert_eq!(c, "member-b", "{st:?}");
                    Err(format!("{st:?}"))
                }
                _ => Err(format!("{st:?}")),
            }
        })
        .await;
        assert_eq!(pods_per_member(&ns).await, [("member-b".to_string(), 2, 2)]);
        // The hub's runtime is edited (a node selector on its nodes: the job read again would
        // differ): the running TrainJob keeps the spec it was admitted with. Watched for 10 s,
        // it stays Running on member-b with its 2 pods, never taken back.
        let job = trainjob(&ns, "waits", 600);
        let before = interpret_with(&job, &hub_runtimes(&hub).await).expect("read");
        let hub_rt = runtimes_api(&hub).get(RUNTIME).await.expect("hub runtime");
        if let Ok(mut h) = hub_original.lock() {
            *h = Some(hub_rt.clone());
        }
        let mut edited = hub_rt.clone();
        let jobs = edited.data["spec"]["template"]["spec"]["replicatedJobs"]
            .as_array_mut()
            .expect("replicated jobs");
        let node = jobs
            .iter_mut()
            .find(|j| j["name"] == "node")
            .expect("the node job");
        node["template"]["spec"]["template"]["spec"]["nodeSelector"] =
            json!({"kubernetes.io/os": "linux"});
        runtimes_api(&hub)
            .replace(RUNTIME, &PostParams::default(), &edited)
            .await
            .expect("edit the hub's runtime");
        // The edit matters: the job read against the edited runtime is another spec.
        let after = interpret_with(&job, &hub_runtimes(&hub).await).expect("read");
        assert_ne!(
            muster::lifecycle::digest(&before),
            muster::lifecycle::digest(&after),
            "the edit does not change the spec: it proves nothing"
        );
        let stays_running = |what: &'static str| {
            let (hub, ns) = (hub.clone(), ns.clone());
            async move {
                let until = Instant::now() + Duration::from_secs(10);
                let mut looks = 0;
                while Instant::now() < until {
                    let st = status(&hub, &ns, "TrainJob", "waits").await;
                    assert_eq!(st.state, QueuedJobState::Running, "{what}: {st:?}");
                    assert_eq!(st.cluster.as_deref(), Some("member-b"), "{what}: {st:?}");
                    assert_eq!(st.requeues, 0, "{what}: {st:?}");
                    assert_eq!(pods_per_member(&ns).await, [("member-b".to_string(), 2, 2)]);
                    looks += 1;
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
                assert!(looks >= 10, "{what}: watched {looks} times");
            }
        };
        stays_running("after the edit").await;
        // Its record says which generation of the hub job its spec was read from.
        let st = status(&hub, &ns, "TrainJob", "waits").await;
        let generation = st.lifecycle.as_ref().and_then(|l| l.job_generation);
        assert_eq!(generation, Some(1), "{st:?}");
        // A restart (an upgrade, a leader change) reads every job again, the TrainJob against
        // the edited runtime: it runs on, as admitted (earlier versions took it back here).
        controller.terminate();
        assert!(
            controller
                .wait_exit(Duration::from_secs(30))
                .await
                .is_some(),
            "the first controller stops"
        );
        let next = Controller::start("trainrt-again", &[]).await;
        wait_for(
            "the new controller to follow the job from its record",
            T,
            || async {
                let log = next.log_text();
                if log.contains("acting as leader")
                    && log.contains("following it again from its record")
                {
                    Ok(())
                } else {
                    Err(next.log_tail())
                }
            },
        )
        .await;
        second = Some(next);
        stays_running("after a restart").await;
        dog.assert_clean("trainrt").await;
    }))
    .await;
    // The hub's runtime as it was.
    let hub_rt = hub_original.lock().ok().and_then(|h| h.clone());
    if let Some(rt) = hub_rt
        && let Ok(now) = runtimes_api(&hub).get(RUNTIME).await
    {
        let mut same = fresh(&rt);
        same.metadata.resource_version = now.metadata.resource_version.clone();
        let _ = runtimes_api(&hub)
            .replace(RUNTIME, &PostParams::default(), &same)
            .await;
    }
    // Every member's runtime back as it was, whatever happened.
    if let Ok(now) = runtimes_api(&b).get(RUNTIME).await {
        let mut same = fresh(&original);
        same.metadata.resource_version = now.metadata.resource_version.clone();
        let _ = runtimes_api(&b)
            .replace(RUNTIME, &PostParams::default(), &same)
            .await;
    }
    let _ = runtimes_api(&c)
        .create(&PostParams::default(), &fresh(&original_c))
        .await;
    finish(
        &hub,
        &[&ns],
        [controller].into_iter().chain(second).collect(),
        outcome,
    )
    .await;
}
