//! The JobSet controller on a member cluster: a JobSet applied to member-a becomes a batch Job
//! whose pods kube-scheduler binds to the fake node and kwok runs. Needs the local fleet
//! (`make fleet-up`); starts it if needed and fails when it cannot start.
//!
//! kwok's "fast" pod stages (see docs/development.md) move a bound pod to Running at once and a
//! Running pod owned by a batch Job to Succeeded at once, so a JobSet's pods are Running only for
//! an instant. The test therefore watches the pods from before the JobSet exists and records every
//! state the apiserver reports, then checks that each pod was Running on node `a` and that the
//! JobSet then completed.

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, WatchEvent, WatchParams};
use support::fleet::{self, client_for, ensure_fleet_up};

const CLUSTER: &str = "member-a";
const JOBSET: &str = "gpu-pair";
const TIMEOUT: Duration = Duration::from_secs(45);

/// One replicatedJob, one Job of 2 pods, each asking for 1 nvidia.com/gpu (member-a's only node,
/// `a`, has 2). No restartPolicy, completionMode or successPolicy: JobSet's defaulting webhook
/// fills them in.
fn jobset(ns: &str, name: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicatedJobs": [{
                "name": "workers",
                "replicas": 1,
                "template": {"spec": {
                    "parallelism": 2,
                    "completions": 2,
                    "backoffLimit": 0,
                    "template": {"spec": {"containers": [{
                        "name": "worker",
                        "image": "registry.k8s.io/pause:3.10",
                        "resources": {
                            "requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"},
                            "limits": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}
                        }
                    }]}}
                }}
            }]
        }
    })
}

fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn node(p: &Pod) -> Option<&str> {
    p.spec.as_ref().and_then(|s| s.node_name.as_deref())
}

/// What the watch saw, per pod name: every phase in order, and the pod as it was when first
/// reported Running.
#[derive(Default)]
struct Seen {
    phases: BTreeMap<String, Vec<String>>,
    running: BTreeMap<String, Pod>,
}

impl Seen {
    fn describe(&self) -> String {
        format!("{:?}", self.phases)
    }
}

/// Watch the namespace's pods from `resource_version` on, recording into `seen`.
async fn record_pods(api: Api<Pod>, resource_version: String, seen: Arc<Mutex<Seen>>) {
    let mut stream = api
        .watch(&WatchParams::default().timeout(120), &resource_version)
        .await
        .expect("watching pods")
        .boxed();
    while let Some(event) = stream.next().await {
        let pod = match event.expect("a watch event") {
            WatchEvent::Added(p) | WatchEvent::Modified(p) | WatchEvent::Deleted(p) => p,
            WatchEvent::Bookmark(_) => continue,
            WatchEvent::Error(e) => panic!("pod watch error: {e:?}"),
        };
        let name = pod.metadata.name.clone().unwrap_or_default();
        let mut seen = seen.lock().unwrap();
        let phases = seen.phases.entry(name.clone()).or_default();
        if phases.last().map(String::as_str) != Some(phase(&pod)) {
            phases.push(phase(&pod).to_string());
        }
        if phase(&pod) == "Running" && !seen.running.contains_key(&name) {
            seen.running.insert(name, pod);
        }
    }
}

fn jobset_condition(js: &kube::core::DynamicObject, type_: &str) -> Option<String> {
    js.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .and_then(|c| c["status"].as_str().map(str::to_string))
}

async fn gpu_pair_runs_on_member_a(client: kube::Client, ns: String) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let rv = pods
        .list(&ListParams::default())
        .await
        .expect("listing pods")
        .metadata
        .resource_version
        .expect("a list resourceVersion");
    let seen = Arc::new(Mutex::new(Seen::default()));
    let watcher = tokio::spawn(record_pods(pods.clone(), rv, seen.clone()));

    let created = fleet::create_json(&client, "jobsets", jobset(&ns, JOBSET))
        .await
        .expect("creating the JobSet on member-a");
    // Defaulted by JobSet's mutating webhook, which the apiserver calls on 127.0.0.1.
    let spec = &created.data["spec"];
    assert_eq!(spec["successPolicy"]["operator"], "All", "{spec}");
    let job_spec = &spec["replicatedJobs"][0]["template"]["spec"];
    assert_eq!(job_spec["completionMode"], "Indexed", "{spec}");
    assert_eq!(
        job_spec["template"]["spec"]["restartPolicy"], "OnFailure",
        "{spec}"
    );

    // Both pods observed Running, bound to member-a's node.
    let running = fleet::wait_for("both JobSet pods Running on member-a", TIMEOUT, || async {
        let seen = seen.lock().unwrap();
        if seen.running.len() == 2 {
            Ok(seen.running.values().cloned().collect::<Vec<_>>())
        } else {
            Err(seen.describe())
        }
    })
    .await;
    for p in &running {
        let labels = p.metadata.labels.clone().unwrap_or_default();
        assert_eq!(
            labels
                .get("jobset.sigs.k8s.io/jobset-name")
                .map(String::as_str),
            Some(JOBSET),
            "{labels:?}"
        );
        let owner = p
            .metadata
            .owner_references
            .as_ref()
            .and_then(|o| o.iter().find(|o| o.controller == Some(true)))
            .expect("a controller owner");
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str()),
            ("Job", "gpu-pair-workers-0")
        );
        assert_eq!(node(p), Some("a"), "{}", fleet::describe_pods(&running));
        let (status, _, _) = fleet::pod_scheduled_condition(p).expect("PodScheduled condition");
        assert_eq!(status, "True");
        let gpus = p.spec.as_ref().unwrap().containers[0]
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("nvidia.com/gpu"))
            .map(|q| q.0.clone());
        assert_eq!(gpus.as_deref(), Some("1"));
    }

    // The child Job belongs to the JobSet.
    let job = Api::<Job>::namespaced(client.clone(), &ns)
        .get("gpu-pair-workers-0")
        .await
        .expect("the JobSet's child Job");
    let owner = job
        .metadata
        .owner_references
        .as_ref()
        .and_then(|o| o.first())
        .expect("Job owner");
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("JobSet", JOBSET)
    );
    assert_eq!(job.spec.as_ref().unwrap().parallelism, Some(2));

    // kwok completes Job-owned pods, so the Job succeeds and the JobSet controller marks the
    // JobSet Completed.
    let jobsets = fleet::dynamic_api(
        &client,
        "jobset.x-k8s.io/v1alpha2",
        "JobSet",
        "jobsets",
        Some(&ns),
    );
    fleet::wait_for("the JobSet Completed", TIMEOUT, || async {
        let js = jobsets.get(JOBSET).await.map_err(|e| e.to_string())?;
        match jobset_condition(&js, "Completed").as_deref() {
            Some("True") => Ok(()),
            _ => Err(format!(
                "status {}; pods {}",
                js.data["status"],
                seen.lock().unwrap().describe()
            )),
        }
    })
    .await;
    // Each pod went Pending -> Running -> Succeeded (as reported by the apiserver, in order).
    fleet::wait_for("both pods Succeeded after Running", TIMEOUT, || async {
        let seen = seen.lock().unwrap();
        let expected = ["Pending", "Running", "Succeeded"];
        if seen.phases.len() == 2 && seen.phases.values().all(|p| p == &expected) {
            Ok(())
        } else {
            Err(seen.describe())
        }
    })
    .await;
    watcher.abort();
}

/// JobSet's validating webhook rejects what its controller cannot run.
async fn invalid_jobset_is_rejected(client: kube::Client, ns: String) {
    let mut bad = jobset(&ns, "bad");
    bad["spec"]["replicatedJobs"][0]["dependsOn"] =
        serde_json::json!([{"name": "workers", "status": "Ready"}]);
    let err = fleet::create_json(&client, "jobsets", bad)
        .await
        .expect_err("a JobSet whose first replicatedJob has dependsOn must be rejected");
    let msg = err.to_string();
    assert!(
        msg.contains("vjobset.kb.io") && msg.contains("DependsOn can't be set"),
        "{msg}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobset_on_a_member_creates_jobs_and_running_pods() {
    ensure_fleet_up();
    let client = client_for(CLUSTER).await;
    let ns = fleet::unique_name("jobset");
    fleet::create_namespace(&client, &ns).await;
    let outcome = tokio::spawn({
        let (client, ns) = (client.clone(), ns.clone());
        async move {
            invalid_jobset_is_rejected(client.clone(), ns.clone()).await;
            gpu_pair_runs_on_member_a(client, ns).await;
        }
    })
    .await;
    let jobsets = fleet::dynamic_api(
        &client,
        "jobset.x-k8s.io/v1alpha2",
        "JobSet",
        "jobsets",
        Some(&ns),
    );
    let _ = jobsets.delete(JOBSET, &DeleteParams::foreground()).await;
    fleet::delete_namespace(&client, &ns).await;
    match outcome {
        Ok(()) => {}
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => panic!("test body on {CLUSTER} did not finish: {e}"),
    }
}
