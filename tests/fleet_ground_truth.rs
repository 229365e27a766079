//! Ground truth from real control planes: what a member cluster does with a gang that fits and with
//! one that does not. Needs the local fleet (`make fleet-up`); starts it if needed and fails when
//! it cannot start.
//!
//! The same PyTorchJob — a CPU-only master and 2 workers x 3 nvidia.com/gpu — goes to
//! * member-c (one node with 8 GPUs): every pod is scheduled and Running;
//! * member-b (three nodes with 2 GPUs each): the total fits (6 GPUs) but no single node does, so the
//!   workers stay Pending with PodScheduled=False and "Insufficient nvidia.com/gpu".

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use support::fleet::{self, client_for, ensure_fleet_up};

const JOB: &str = "ground-truth";
const TIMEOUT: Duration = Duration::from_secs(120);

fn pytorchjob(ns: &str) -> serde_json::Value {
    let container = |requests: serde_json::Value| {
        serde_json::json!([{
            "name": "pytorch",
            "image": "registry.k8s.io/pause:3.10",
            "resources": {"requests": requests.clone(), "limits": requests}
        }])
    };
    serde_json::json!({
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": JOB, "namespace": ns},
        "spec": {
            "runPolicy": {"cleanPodPolicy": "All"},
            "pytorchReplicaSpecs": {
                "Master": {
                    "replicas": 1,
                    "restartPolicy": "Never",
                    "template": {"spec": {"containers": container(
                        serde_json::json!({"cpu": "1", "memory": "1Gi"}))}}
                },
                "Worker": {
                    "replicas": 2,
                    "restartPolicy": "Never",
                    "template": {"spec": {"containers": container(
                        serde_json::json!({"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "3"}))}}
                }
            }
        }
    })
}

fn is_running(p: &Pod) -> bool {
    let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
    let node = p.spec.as_ref().and_then(|s| s.node_name.as_deref());
    phase == Some("Running") && node.is_some()
}

fn selector(replica_type: Option<&str>) -> String {
    let mut s = format!("training.kubeflow.org/job-name={JOB}");
    if let Some(rt) = replica_type {
        s.push_str(&format!(",training.kubeflow.org/replica-type={rt}"));
    }
    s
}

/// member-c: 1 master + 2 workers, all bound to the 8-GPU node and Running.
async fn fits_on_member_c(client: &kube::Client, ns: &str) {
    fleet::create_json(client, "pytorchjobs", pytorchjob(ns))
        .await
        .expect("creating the PyTorchJob on member-c");
    let pods = fleet::wait_for("3 Running pods on member-c", TIMEOUT, || async {
        let pods = fleet::list_pods(client, ns, &selector(None)).await;
        if pods.len() == 3 && pods.iter().all(is_running) {
            Ok(pods)
        } else {
            Err(format!(
                "{} pods: {}",
                pods.len(),
                fleet::describe_pods(&pods)
            ))
        }
    })
    .await;
    for p in &pods {
        let (status, _, _) = fleet::pod_scheduled_condition(p).expect("PodScheduled condition");
        assert_eq!(status, "True", "{}", fleet::describe_pods(&pods));
        assert_eq!(p.spec.as_ref().unwrap().node_name.as_deref(), Some("c"));
    }
}

/// member-b: the master runs, both workers stay Pending: no node has 3 GPUs.
async fn does_not_fit_on_member_b(client: &kube::Client, ns: &str) {
    fleet::create_json(client, "pytorchjobs", pytorchjob(ns))
        .await
        .expect("creating the PyTorchJob on member-b");
    let workers = fleet::wait_for(
        "2 unschedulable workers on member-b",
        TIMEOUT,
        || async {
            let pods = fleet::list_pods(client, ns, &selector(Some("worker"))).await;
            let unschedulable = pods
                .iter()
                .filter(|p| {
                    let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
                    matches!(fleet::pod_scheduled_condition(p),
                        Some((s, _, m)) if s == "False" && m.contains("Insufficient nvidia.com/gpu"))
                        && phase == Some("Pending")
                })
                .count();
            if pods.len() == 2 && unschedulable == 2 {
                Ok(pods)
            } else {
                let conds: Vec<_> = pods.iter().map(fleet::pod_scheduled_condition).collect();
                Err(format!("{}; PodScheduled: {conds:?}", fleet::describe_pods(&pods)))
            }
        },
    )
    .await;
    for w in &workers {
        assert!(w.spec.as_ref().unwrap().node_name.is_none());
        let (_, reason, message) = fleet::pod_scheduled_condition(w).unwrap();
        assert_eq!(reason, "Unschedulable", "{message}");
        eprintln!(
            "member-b {}: {message}",
            w.metadata.name.as_deref().unwrap_or("?")
        );
    }
    // The master needs no GPU and fits anywhere.
    fleet::wait_for("the master Running on member-b", TIMEOUT, || async {
        let masters = fleet::list_pods(client, ns, &selector(Some("master"))).await;
        if masters.len() == 1 && masters.iter().all(is_running) {
            Ok(())
        } else {
            Err(fleet::describe_pods(&masters))
        }
    })
    .await;
}

/// Runs `body` in a fresh namespace of `cluster`, then deletes the job and the namespace whether
/// or not the body panicked.
async fn in_namespace<F, Fut>(cluster: &str, body: F)
where
    F: FnOnce(kube::Client, String) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let client = client_for(cluster).await;
    let ns = fleet::unique_name("ground-truth");
    fleet::create_namespace(&client, &ns).await;
    let outcome = tokio::spawn(body(client.clone(), ns.clone())).await;
    let jobs = fleet::dynamic_api(
        &client,
        "kubeflow.org/v1",
        "PyTorchJob",
        "pytorchjobs",
        Some(&ns),
    );
    let _ = jobs
        .delete(JOB, &kube::api::DeleteParams::foreground())
        .await;
    fleet::delete_namespace(&client, &ns).await;
    match outcome {
        Ok(()) => {}
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => panic!("test body on {cluster} did not finish: {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pytorchjob_runs_where_it_fits_and_pends_where_it_does_not() {
    ensure_fleet_up();
    in_namespace("member-c", |client, ns| async move {
        fits_on_member_c(&client, &ns).await
    })
    .await;
    in_namespace("member-b", |client, ns| async move {
        does_not_fit_on_member_b(&client, &ns).await
    })
    .await;
}
