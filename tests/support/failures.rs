//! Shared code of the failure tests on the fleet (`tests/controller_failures.rs`,
//! `tests/controller_lifecycle.rs`): one lock so that no two controllers of different tests act
//! on the hub at once, a hub set up with a fresh quota tree, a PyTorchJob builder, and a teardown
//! that cleans up and fails with the scenario's panic and the controllers' log tails.
#![allow(dead_code)]

use std::sync::Mutex;
use std::time::Duration;

use kube::Client;
use serde_json::{Value, json};

use super::fleet::{self, client_for, ensure_fleet_up};
use super::hub::{self, Controller};

pub static HUB: Mutex<()> = Mutex::new(());
/// Controller flags for tests that take a job back: stuck after 8 s, queued again after 1 s.
pub const QUICK_TAKE_BACK: [&str; 4] = [
    "--pods-ready-timeout-seconds",
    "8",
    "--requeue-backoff-seconds",
    "1",
];

pub const T: Duration = Duration::from_secs(120);

pub fn pytorchjob(ns: &str, name: &str, workers: u32, gpus: u32, cpu: &str) -> Value {
    let res = |gpu: u32| {
        let mut r = json!({"cpu": cpu, "memory": "64Mi"});
        if gpu > 0 {
            r["nvidia.com/gpu"] = json!(gpu.to_string());
        }
        json!([{"name": "pytorch", "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": r.clone(), "limits": r}}])
    };
    let mut specs = json!({
        "Master": {"replicas": 1, "restartPolicy": "Never",
                   "template": {"spec": {"containers": res(0)}}}
    });
    if workers > 0 {
        specs["Worker"] = json!({"replicas": workers, "restartPolicy": "Never",
                                 "template": {"spec": {"containers": res(gpus)}}});
    }
    json!({
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"runPolicy": {"cleanPodPolicy": "All"}, "pytorchReplicaSpecs": specs}
    })
}

/// Fleet up, hub reset (no tree, no webhook, no lease), CRDs and members registered, the
/// namespaces created on the hub and a tree written.
pub async fn setup(namespaces: &[&str], tree: Value) -> Client {
    ensure_fleet_up();
    let hub = client_for("hub").await;
    hub::reset_hub(&hub).await;
    hub::install_crds(&hub).await;
    hub::register_members(&hub).await;
    for n in namespaces {
        fleet::create_namespace(&hub, n).await;
    }
    hub::apply_tree(&hub, tree).await.expect("quota tree");
    hub
}

pub async fn cleanup(hub: &Client, namespaces: &[&str]) {
    for n in namespaces {
        fleet::delete_namespace(hub, n).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    // What an admin does on uninstall: QueuedJobs muster still keeps (a copy not yet confirmed
    // gone) would otherwise hold their namespace Terminating once the controllers stop.
    for n in namespaces {
        hub::release_queued_jobs(hub, n).await;
    }
    let mut members = Vec::new();
    for m in fleet::MEMBERS {
        let c = client_for(m).await;
        for n in namespaces {
            fleet::delete_namespace(&c, n).await;
        }
        members.push((m, c));
    }
    hub::delete_webhook(hub).await;
    // The next test starts on an empty fleet: a pod of this one still terminating on a member
    // (a squatter holding a node's GPUs, a copy not yet gone) would change where its jobs go.
    for (m, c) in members {
        let left = fleet::namespaces_gone(&c, namespaces, Duration::from_secs(60)).await;
        if !left.is_empty() {
            eprintln!("cleanup: still on {m} after 60 s: {}", left.join(", "));
        }
    }
}

/// kwok's pod-complete delay (the fleet's stage honours it): the pod succeeds `secs` after it
/// runs.
pub fn runs_for(secs: u32) -> Value {
    let d = format!("{secs}s");
    json!({"pod-complete.stage.kwok.x-k8s.io/delay": d,
           "pod-complete.stage.kwok.x-k8s.io/jitter-delay": d})
}

/// A batch Job of one-container pods (10m cpu) whose pods succeed `secs` after they run.
pub fn batch_job(ns: &str, name: &str, completions: u32, parallelism: u32, secs: u32) -> Value {
    let r = json!({"cpu": "10m", "memory": "16Mi"});
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"completions": completions, "parallelism": parallelism, "backoffLimit": 0,
                 "template": {"metadata": {"annotations": runs_for(secs)},
                              "spec": {"restartPolicy": "Never",
                                       "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                                       "resources": {"requests": r.clone(), "limits": r}}]}}}
    })
}

pub fn leaf(name: &str, ns: &str) -> Value {
    json!({"name": name, "namespaces": [ns], "max": {"cpu": "100", "memory": "400Gi", "nvidia.com/gpu": "16"}})
}

pub fn root(children: Vec<Value>) -> Value {
    json!({"name": "root", "max": {"cpu": "200", "memory": "800Gi", "nvidia.com/gpu": "24"}, "children": children})
}

pub async fn status_of(
    hub: &Client,
    ns: &str,
    name: &str,
) -> muster::controller::crd::QueuedJobStatus {
    hub::queued_job(hub, ns, "PyTorchJob", name)
        .await
        .and_then(|q| q.status)
        .unwrap_or_default()
}

pub async fn finish(
    hub: &Client,
    namespaces: &[&str],
    controllers: Vec<Controller>,
    outcome: std::thread::Result<()>,
) {
    let tail = controllers
        .iter()
        .map(|c| c.log_tail())
        .collect::<Vec<_>>()
        .join("\n---\n");
    cleanup(hub, namespaces).await;
    drop(controllers);
    if let Err(e) = outcome {
        panic!("{}\ncontroller log tail:\n{tail}", panic_text(&e));
    }
}

pub fn panic_text(e: &Box<dyn std::any::Any + Send>) -> String {
    e.downcast_ref::<String>()
        .cloned()
        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// A batch Job of one pod of `gpus` GPUs that complies with Pod Security `restricted`, running
/// an hour.
pub fn restricted_job(ns: &str, name: &str, gpus: u32) -> Value {
    let r = json!({"cpu": "100m", "memory": "64Mi", "nvidia.com/gpu": gpus.to_string()});
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"backoffLimit": 0, "template": {"metadata": {"annotations": runs_for(3600)},
                 "spec": {
            "restartPolicy": "Never",
            "securityContext": {"runAsNonRoot": true, "runAsUser": 1000,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "train", "image": "registry.k8s.io/pause:3.10",
                            "securityContext": {"allowPrivilegeEscalation": false,
                                                "capabilities": {"drop": ["ALL"]}},
                            "resources": {"requests": r.clone(), "limits": r}}]}}}
    })
}
