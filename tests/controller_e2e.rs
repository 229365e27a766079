//! End to end on the local fleet: `muster controller` on the hub, real manifests applied to the
//! hub as a user would, real members (kube-scheduler binds the pods to kwok nodes). Starts the
//! fleet if needed; fails (never skips) when it cannot.
//!
//! 1. A PyTorchJob (master + 2 workers × 1 GPU) runs in exactly one member; no other has it.
//! 2. The 2 workers × 3 GPU PyTorchJob goes to member-c, never member-b; pods Running there,
//!    hub state Running, hub job status synced.
//! 3. A leaf with `kube-queue/max-jobs: 1`: the second job stays suspended on the hub until the
//!    first ends (its hub job deleted, which deletes the member copy), then runs.
//! 4. An invalid quota tree edit and a malformed job: clear status and Events; the last valid
//!    tree stays in force and a job submitted meanwhile is still admitted.
//! 5. A batch Job and a JobSet (run by the member's JobSet controller) dispatched the same way;
//!    kwok completes Job pods at once, so both end Finished, with the status synced to the hub.

mod support;

use std::time::Duration;

use kube::Client;
use kube::api::DeleteParams;
use muster::controller::crd::QueuedJobState;
use serde_json::{Value, json};
use support::fleet::{self, client_for, ensure_fleet_up, unique_name, wait_for};
use support::hub::{self, Controller};
use support::watchdog::Watchdog;

const T: Duration = Duration::from_secs(90);

fn pytorchjob(ns: &str, name: &str, workers: u32, gpus: u32) -> Value {
    let container = |res: Value| {
        json!([{"name": "pytorch", "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": res.clone(), "limits": res}}])
    };
    json!({
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "runPolicy": {"cleanPodPolicy": "All"},
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "Never",
                    "template": {"spec": {"containers": container(json!({"cpu": "1", "memory": "1Gi"}))}}},
                "Worker": {"replicas": workers, "restartPolicy": "Never",
                    "template": {"spec": {"containers": container(
                        if gpus > 0 { json!({"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": gpus.to_string()}) }
                        else { json!({"cpu": "1", "memory": "1Gi"}) })}}}
            }
        }
    })
}

fn tree(ns: &Namespaces) -> Value {
    json!({
        "name": "root",
        "max": {"cpu": "200", "memory": "800Gi", "nvidia.com/gpu": "24"},
        "children": [
            {"name": "gpu", "namespaces": [ns.gpu], "min": {"nvidia.com/gpu": "8"},
             "max": {"cpu": "100", "memory": "400Gi", "nvidia.com/gpu": "16"}},
            {"name": "limited", "namespaces": [ns.limited],
             "max": {"cpu": "20", "memory": "80Gi", "kube-queue/max-jobs": "1"}},
            {"name": "misc", "namespaces": [ns.misc],
             "max": {"cpu": "40", "memory": "160Gi", "nvidia.com/gpu": "4"}}
        ]
    })
}

struct Namespaces {
    gpu: String,
    limited: String,
    misc: String,
}

async fn hub_job(
    hub: &Client,
    api_version: &str,
    kind: &str,
    plural: &str,
    ns: &str,
    name: &str,
) -> Value {
    let api = fleet::dynamic_api(hub, api_version, kind, plural, Some(ns));
    let o = api
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("hub {kind} {ns}/{name}: {e}"));
    serde_json::to_value(o).expect("json")
}

async fn running_pods(member: &str, ns: &str, uid: &str) -> Result<usize, String> {
    let c = client_for(member).await;
    let pods = fleet::list_pods(&c, ns, &format!("muster.dev/job-uid={uid}")).await;
    let running = pods
        .iter()
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .count();
    if pods.is_empty() {
        Err("no pods".into())
    } else {
        Ok(running)
    }
}

#[tokio::test]
async fn the_hubs_clock_is_read_from_its_date_header() {
    // Every replica dates its records by the hub API server's clock. Here the hub runs on this
    // machine, so the offset measured from its Date header is zero within what one-second
    // resolution and the round trip allow.
    ensure_fleet_up();
    let hub = client_for("hub").await;
    let offset = muster::controller::clock::measure(&hub)
        .await
        .expect("the hub's Date header read");
    assert!(offset.abs() <= 1_500, "offset {offset} ms on one machine");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn controller_end_to_end() {
    ensure_fleet_up();
    let hub = client_for("hub").await;
    hub::reset_hub(&hub).await;
    hub::install_crds(&hub).await;
    hub::register_members(&hub).await;
    let ns = Namespaces {
        gpu: unique_name("e2e-gpu"),
        limited: unique_name("e2e-lim"),
        misc: unique_name("e2e-misc"),
    };
    for n in [&ns.gpu, &ns.limited, &ns.misc] {
        fleet::create_namespace(&hub, n).await;
    }
    hub::apply_tree(&hub, tree(&ns)).await.expect("quota tree");
    let dog = Watchdog::start(&hub, &fleet::MEMBERS, &[&ns.gpu, &ns.limited, &ns.misc]).await;
    let controller = Controller::start("e2e", &[]).await;

    let result = tokio::time::timeout(Duration::from_secs(300), async {
        tokio::join!(
            scenario_one_member(&hub, &ns),
            scenario_gpu_per_node(&hub, &ns),
            scenario_max_jobs(&hub, &ns),
            scenario_bad_input(&hub, &ns),
            scenario_batch_and_jobset(&hub, &ns),
        );
        // Throughout, no job ran on two members and no running pod went without a record.
        dog.assert_clean("e2e").await;
    });
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(result)).await;

    // The controller's /metrics saw it all.
    let exposition = hub::http_get(&format!("http://127.0.0.1:{}/metrics", controller.http));
    let metrics_ok = exposition.contains("muster_dispatched_jobs_total{cluster=\"member-c\"")
        && exposition.contains("muster_cluster_reachable{cluster=\"member-a\"} 1")
        && exposition.contains("muster_finished_jobs_total{cluster=")
        && exposition.contains("muster_admission_wait_time_seconds_count");

    // Clean up while the controller still runs (deleting hub jobs deletes the member copies).
    for n in [&ns.gpu, &ns.limited, &ns.misc] {
        fleet::delete_namespace(&hub, n).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    for m in fleet::MEMBERS {
        let c = client_for(m).await;
        for n in [&ns.gpu, &ns.limited, &ns.misc] {
            fleet::delete_namespace(&c, n).await;
        }
    }
    hub::delete_webhook(&hub).await;
    let tail = controller.log_tail();
    drop(controller);
    match outcome {
        Ok(Ok(_)) => assert!(metrics_ok, "/metrics lacks expected series:\n{exposition}"),
        Ok(Err(_)) => panic!("scenarios timed out; controller log tail:\n{tail}"),
        Err(e) => {
            let msg = fleet::panic_message(e.as_ref());
            panic!("a scenario failed: {msg}\ncontroller log tail:\n{tail}")
        }
    }
}

/// 1. master + 2 workers × 1 GPU: exactly one member has it; it runs there.
async fn scenario_one_member(hub: &Client, ns: &Namespaces) {
    let name = "two-by-one";
    fleet::create_json(hub, "pytorchjobs", pytorchjob(&ns.gpu, name, 2, 1))
        .await
        .expect("create");
    // Suspended from its first moment on the hub (the webhook).
    let obj = hub_job(
        hub,
        "kubeflow.org/v1",
        "PyTorchJob",
        "pytorchjobs",
        &ns.gpu,
        name,
    )
    .await;
    assert_eq!(
        obj.pointer("/spec/runPolicy/suspend"),
        Some(&json!(true)),
        "webhook suspends: {obj}"
    );
    let uid = obj
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .expect("uid")
        .to_string();
    let q =
        hub::wait_queued_state(hub, &ns.gpu, "PyTorchJob", name, QueuedJobState::Running, T).await;
    let st = q.status.expect("status");
    let cluster = st.cluster.clone().expect("cluster");
    assert_eq!(
        st.pods.as_ref().map(|p| (p.expected, p.running)),
        Some((3, 3)),
        "{st:?}"
    );
    let holders = hub::members_with(
        "kubeflow.org/v1",
        "PyTorchJob",
        "pytorchjobs",
        &ns.gpu,
        name,
    )
    .await;
    assert_eq!(
        holders,
        vec![cluster.clone()],
        "exactly one member holds the job"
    );
    assert_eq!(running_pods(&cluster, &ns.gpu, &uid).await, Ok(3));
    // The hub copy is still suspended and carries the member's status.
    wait_for("hub status synced from the member", T, || async {
        let obj = hub_job(
            hub,
            "kubeflow.org/v1",
            "PyTorchJob",
            "pytorchjobs",
            &ns.gpu,
            name,
        )
        .await;
        assert_eq!(obj.pointer("/spec/runPolicy/suspend"), Some(&json!(true)));
        let conds = obj
            .pointer("/status/conditions")
            .cloned()
            .unwrap_or_default();
        let running = conds.as_array().is_some_and(|a| {
            a.iter()
                .any(|c| c["type"] == "Running" && c["status"] == "True")
        });
        if running {
            Ok(())
        } else {
            Err(conds.to_string())
        }
    })
    .await;
    let events = hub::events_for(hub, &ns.gpu, name).await;
    hub::assert_history(&events);
}

/// 2. 2 workers × 3 GPU: member-c (8-GPU node), never member-b (2-GPU nodes).
async fn scenario_gpu_per_node(hub: &Client, ns: &Namespaces) {
    let name = "two-by-three";
    fleet::create_json(hub, "pytorchjobs", pytorchjob(&ns.gpu, name, 2, 3))
        .await
        .expect("create");
    let q =
        hub::wait_queued_state(hub, &ns.gpu, "PyTorchJob", name, QueuedJobState::Running, T).await;
    let st = q.status.expect("status");
    assert_eq!(st.cluster.as_deref(), Some("member-c"), "{st:?}");
    let holders = hub::members_with(
        "kubeflow.org/v1",
        "PyTorchJob",
        "pytorchjobs",
        &ns.gpu,
        name,
    )
    .await;
    assert_eq!(holders, vec!["member-c".to_string()]);
    let uid = q.spec.job_ref.uid.clone();
    assert_eq!(running_pods("member-c", &ns.gpu, &uid).await, Ok(3));
    let (ok, text) = hub::explain(&format!("{}/{name}", ns.gpu));
    assert!(ok, "{text}");
    assert!(
        text.contains("Running") && text.contains("cluster member-c"),
        "{text}"
    );
    assert!(text.contains("pods: 3 running"), "{text}");
    // The plan pinned the workers to the reserved node.
    assert!(
        st.placement
            .get("worker")
            .is_some_and(|m| m.values().sum::<u32>() == 2),
        "{st:?}"
    );
}

/// 3. max-jobs 1: the second job waits (suspended on the hub) until the first ends.
async fn scenario_max_jobs(hub: &Client, ns: &Namespaces) {
    fleet::create_json(hub, "pytorchjobs", pytorchjob(&ns.limited, "first", 1, 0))
        .await
        .expect("first");
    hub::wait_queued_state(
        hub,
        &ns.limited,
        "PyTorchJob",
        "first",
        QueuedJobState::Running,
        T,
    )
    .await;
    fleet::create_json(hub, "pytorchjobs", pytorchjob(&ns.limited, "second", 1, 0))
        .await
        .expect("second");
    let q = wait_for("second job waits on max-jobs", T, || async {
        match hub::queued_job(hub, &ns.limited, "PyTorchJob", "second").await {
            Some(q) => {
                let st = q.status.clone().unwrap_or_default();
                let r = st.reason.clone().unwrap_or_default();
                if st.state == QueuedJobState::Queued && r.contains("kube-queue/max-jobs") {
                    Ok(q)
                } else {
                    Err(format!("{st:?}"))
                }
            }
            None => Err("no QueuedJob".into()),
        }
    })
    .await;
    assert!(q.status.and_then(|s| s.cluster).is_none());
    let (ok, text) = hub::explain(&format!("{}/second", ns.limited));
    assert!(ok, "{text}");
    assert!(
        text.contains("Queued") && text.contains("kube-queue/max-jobs"),
        "{text}"
    );
    assert!(
        text.contains("OVER MAX"),
        "explain shows the quota check: {text}"
    );
    // Still waiting a few syncs later, and no member has it.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let st = hub::queued_job(hub, &ns.limited, "PyTorchJob", "second")
        .await
        .and_then(|q| q.status)
        .unwrap_or_default();
    assert_eq!(st.state, QueuedJobState::Queued, "{st:?}");
    assert!(
        hub::members_with(
            "kubeflow.org/v1",
            "PyTorchJob",
            "pytorchjobs",
            &ns.limited,
            "second"
        )
        .await
        .is_empty()
    );
    let second = hub_job(
        hub,
        "kubeflow.org/v1",
        "PyTorchJob",
        "pytorchjobs",
        &ns.limited,
        "second",
    )
    .await;
    assert_eq!(
        second.pointer("/spec/runPolicy/suspend"),
        Some(&json!(true))
    );
    // The first ends: its hub job is deleted, the member copy goes, the second runs.
    let first_cluster = hub::members_with(
        "kubeflow.org/v1",
        "PyTorchJob",
        "pytorchjobs",
        &ns.limited,
        "first",
    )
    .await;
    assert_eq!(first_cluster.len(), 1);
    fleet::dynamic_api(
        hub,
        "kubeflow.org/v1",
        "PyTorchJob",
        "pytorchjobs",
        Some(&ns.limited),
    )
    .delete("first", &DeleteParams::background())
    .await
    .expect("delete first");
    hub::wait_queued_state(
        hub,
        &ns.limited,
        "PyTorchJob",
        "second",
        QueuedJobState::Running,
        T,
    )
    .await;
    wait_for("first's member copy deleted", T, || async {
        let h = hub::members_with(
            "kubeflow.org/v1",
            "PyTorchJob",
            "pytorchjobs",
            &ns.limited,
            "first",
        )
        .await;
        if h.is_empty() {
            Ok(())
        } else {
            Err(format!("still on {h:?}"))
        }
    })
    .await;
}

/// 4. Invalid tree edit and a malformed job.
async fn scenario_bad_input(hub: &Client, ns: &Namespaces) {
    // A PyTorchJob whose worker has no pod template: the API server accepts it, muster cannot.
    let bad = json!({
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": "no-template", "namespace": ns.misc},
        "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 2}}}
    });
    fleet::create_json(hub, "pytorchjobs", bad)
        .await
        .expect("the API server accepts it");
    let q = hub::wait_queued_state(
        hub,
        &ns.misc,
        "PyTorchJob",
        "no-template",
        QueuedJobState::Rejected,
        T,
    )
    .await;
    let reason = q.status.and_then(|s| s.reason).unwrap_or_default();
    assert!(
        reason.contains("spec.pytorchReplicaSpecs.Worker"),
        "reason names the field: {reason}"
    );
    let events = hub::events_for(hub, &ns.misc, "no-template").await;
    assert!(
        events
            .iter()
            .any(|e| e.starts_with("Malformed") && e.contains("Worker")),
        "{events:?}"
    );
    let obj = hub_job(
        hub,
        "kubeflow.org/v1",
        "PyTorchJob",
        "pytorchjobs",
        &ns.misc,
        "no-template",
    )
    .await;
    assert_eq!(obj.pointer("/spec/runPolicy/suspend"), Some(&json!(true)));

    // An invalid edit: a namespace in two leaves, and min above max.
    let mut t = tree(ns);
    t["children"][2]["namespaces"] = json!([ns.misc, ns.gpu]);
    t["children"][2]["min"] = json!({"cpu": "50"});
    hub::apply_tree(hub, t)
        .await
        .expect("the API server accepts the edit");
    let status = wait_for("tree marked invalid", T, || async {
        let api = fleet::dynamic_api(
            hub,
            "scheduling.sigs.k8s.io/v1beta1",
            "ElasticQuotaTree",
            "elasticquotatrees",
            Some("kube-system"),
        );
        let o = api.get("muster-e2e").await.map_err(|e| e.to_string())?;
        let v = serde_json::to_value(o).map_err(|e| e.to_string())?;
        let valid = v.pointer("/status/conditions/0/status").cloned();
        if valid == Some(json!("False")) {
            Ok(v["status"].clone())
        } else {
            Err(format!("{:?}", v.get("status")))
        }
    })
    .await;
    let problems = status["problems"].as_array().cloned().unwrap_or_default();
    assert!(
        problems
            .iter()
            .any(|p| p.as_str().is_some_and(|p| p.contains(&ns.gpu))),
        "duplicate namespace named: {problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p.as_str().is_some_and(|p| p.contains("min"))),
        "min above max named: {problems:?}"
    );
    let msg = status
        .pointer("/conditions/0/message")
        .and_then(Value::as_str)
        .unwrap_or("");
    assert!(msg.contains("last valid tree stays in force"), "{msg}");
    let tree_events = hub::events_for(hub, "kube-system", "muster-e2e").await;
    assert!(
        tree_events
            .iter()
            .any(|e| e.starts_with("InvalidQuotaTree")),
        "{tree_events:?}"
    );
    // Nothing else disturbed: a job submitted now is still admitted under the last valid tree.
    fleet::create_json(
        hub,
        "pytorchjobs",
        pytorchjob(&ns.misc, "during-invalid", 1, 0),
    )
    .await
    .expect("create");
    hub::wait_queued_state(
        hub,
        &ns.misc,
        "PyTorchJob",
        "during-invalid",
        QueuedJobState::Running,
        T,
    )
    .await;
    // The tree's status shows usage per node.
    hub::apply_tree(hub, tree(ns)).await.expect("restore");
    wait_for("tree valid again, with usage", T, || async {
        let api = fleet::dynamic_api(
            hub,
            "scheduling.sigs.k8s.io/v1beta1",
            "ElasticQuotaTree",
            "elasticquotatrees",
            Some("kube-system"),
        );
        let o = api.get("muster-e2e").await.map_err(|e| e.to_string())?;
        let v = serde_json::to_value(o).map_err(|e| e.to_string())?;
        let valid = v.pointer("/status/conditions/0/status") == Some(&json!("True"));
        let gpu_leaf = v
            .pointer("/status/nodes")
            .and_then(Value::as_array)
            .and_then(|a| a.iter().find(|n| n["path"] == "root/gpu").cloned());
        // two-by-one (2 GPUs) and two-by-three (6 GPUs) hold the gpu leaf's usage.
        let used_gpu = gpu_leaf
            .as_ref()
            .and_then(|m| m.pointer("/used/nvidia.com~1gpu"))
            .cloned();
        if valid && used_gpu == Some(json!("8")) {
            Ok(())
        } else {
            Err(format!("{:?}", v.get("status")))
        }
    })
    .await;
}

/// 5. A batch Job (kwok completes its pods: Finished) and a JobSet.
async fn scenario_batch_and_jobset(hub: &Client, ns: &Namespaces) {
    let job = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "batch", "namespace": ns.misc},
        "spec": {"parallelism": 2, "completions": 2, "template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}}}]}}}
    });
    fleet::create_json(hub, "jobs", job)
        .await
        .expect("create Job");
    let obj = hub_job(hub, "batch/v1", "Job", "jobs", &ns.misc, "batch").await;
    assert_eq!(obj.pointer("/spec/suspend"), Some(&json!(true)));
    assert_eq!(
        obj.pointer("/spec/managedBy"),
        Some(&json!("muster.dev/muster"))
    );
    let q =
        hub::wait_queued_state(hub, &ns.misc, "Job", "batch", QueuedJobState::Finished, T).await;
    let cluster = q.status.and_then(|s| s.cluster).expect("cluster");
    assert_eq!(
        hub::members_with("batch/v1", "Job", "jobs", &ns.misc, "batch").await,
        vec![cluster]
    );
    // The member's status reaches the hub job (written beside the record, not before it).
    fleet::wait_for(
        "the hub job's status synced",
        Duration::from_secs(10),
        || async {
            let obj = hub_job(hub, "batch/v1", "Job", "jobs", &ns.misc, "batch").await;
            match obj.pointer("/status/succeeded") {
                Some(v) if *v == json!(2) => Ok(()),
                _ => Err(format!("{:?}", obj.get("status"))),
            }
        },
    )
    .await;

    let jobset = json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "js", "namespace": ns.misc},
        "spec": {"replicatedJobs": [{"name": "workers", "replicas": 1, "template": {"spec": {
            "parallelism": 2, "completions": 2, "backoffLimit": 0,
            "template": {"spec": {"restartPolicy": "Never", "containers": [{
                "name": "c", "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}}}]}}}}}]}
    });
    fleet::create_json(hub, "jobsets", jobset)
        .await
        .expect("create JobSet");
    let obj = hub_job(
        hub,
        "jobset.x-k8s.io/v1alpha2",
        "JobSet",
        "jobsets",
        &ns.misc,
        "js",
    )
    .await;
    assert_eq!(obj.pointer("/spec/suspend"), Some(&json!(true)));
    // The member's JobSet controller runs it; kwok completes Job pods at once.
    let q =
        hub::wait_queued_state(hub, &ns.misc, "JobSet", "js", QueuedJobState::Finished, T).await;
    let cluster = q.status.and_then(|s| s.cluster).expect("cluster");
    let holders = hub::members_with(
        "jobset.x-k8s.io/v1alpha2",
        "JobSet",
        "jobsets",
        &ns.misc,
        "js",
    )
    .await;
    assert_eq!(holders, vec![cluster.clone()]);
    let c = client_for(&cluster).await;
    let copy = fleet::dynamic_api(
        &c,
        "jobset.x-k8s.io/v1alpha2",
        "JobSet",
        "jobsets",
        Some(&ns.misc),
    )
    .get("js")
    .await
    .expect("member copy");
    let copy = serde_json::to_value(copy).expect("json");
    assert_eq!(copy.pointer("/spec/suspend"), Some(&json!(false)));
    assert_eq!(copy.pointer("/spec/managedBy"), None);
    let obj = hub_job(
        hub,
        "jobset.x-k8s.io/v1alpha2",
        "JobSet",
        "jobsets",
        &ns.misc,
        "js",
    )
    .await;
    let conds = obj
        .pointer("/status/conditions")
        .cloned()
        .unwrap_or_default();
    assert!(
        conds.as_array().is_some_and(|a| a
            .iter()
            .any(|c| c["type"] == "Completed" && c["status"] == "True")),
        "hub JobSet status synced: {conds}"
    );
}
