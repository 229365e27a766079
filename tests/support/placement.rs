//! Shared code of the placement tests on the fleet (`tests/placement.rs`,
//! `tests/placement_modes.rs`): setting the hub up with the example quota tree and no leftovers,
//! jobs that need member-b's GPUs, waiting until every pod is on its planned node, and the
//! placement mode of a member.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use kube::Client;
use kube::api::{Api, DeleteParams};
use muster::controller::crd::{QueuedJob, QueuedJobState};
use serde_json::{Value, json};

use super::fleet::{self, client_for, ensure_fleet_up, wait_for};
use super::hub::{self, Controller};

pub static HUB: Mutex<()> = Mutex::new(());
pub const T: Duration = Duration::from_secs(90);

pub fn yaml_file(path: &str) -> Value {
    let text = std::fs::read_to_string(fleet::repo_root().join(path)).expect(path);
    serde_yaml::from_str(&text).expect(path)
}

/// Hub, CRDs, members, the example quota tree (its leaves list `research` and `platform`).
pub async fn setup() -> Client {
    ensure_fleet_up();
    let hub = client_for("hub").await;
    hub::reset_hub(&hub).await;
    hub::install_crds(&hub).await;
    hub::register_members(&hub).await;
    for m in fleet::MEMBERS {
        set_placement(&hub, m, None).await;
    }
    // A gate-stripping policy left by a test that failed half-way.
    strip_gates_on_member_b(false).await;
    let tree = yaml_file("examples/quota-tree.yaml");
    hub::apply_tree(&hub, tree["spec"]["root"].clone())
        .await
        .expect("quota tree");
    for ns in ["research", "platform"] {
        hub::ensure_namespace(&hub, ns).await;
    }
    // Jobs left over by an earlier run that failed half-way would hold member-b's GPUs: gone
    // from the hub and, since no controller runs yet, from the members too.
    for (api_version, kind) in [
        ("kubeflow.org/v1", "PyTorchJob"),
        ("jobset.x-k8s.io/v1alpha2", "JobSet"),
    ] {
        for cluster in std::iter::once("hub").chain(fleet::MEMBERS) {
            let c = client_for(cluster).await;
            let api = fleet::dynamic_api(&c, api_version, kind, &plural(kind), Some("research"));
            let _ = api
                .delete_collection(&DeleteParams::foreground(), &Default::default())
                .await;
        }
    }
    wait_for("no leftover jobs in research", T, || async {
        for cluster in std::iter::once("hub").chain(fleet::MEMBERS) {
            let c = client_for(cluster).await;
            if !fleet::list_pods(&c, "research", "muster.dev/job-uid")
                .await
                .is_empty()
            {
                return Err(format!("pods left on {cluster}"));
            }
            for (api_version, kind) in [
                ("kubeflow.org/v1", "PyTorchJob"),
                ("jobset.x-k8s.io/v1alpha2", "JobSet"),
            ] {
                let api =
                    fleet::dynamic_api(&c, api_version, kind, &plural(kind), Some("research"));
                if api
                    .list(&Default::default())
                    .await
                    .map(|l| l.items.len())
                    .unwrap_or(0)
                    > 0
                {
                    return Err(format!("{kind} left on {cluster}"));
                }
            }
        }
        Ok(())
    })
    .await;
    hub
}

/// Sets (or with `None`, clears) `spec.placement` of a MemberCluster.
pub async fn set_placement(hub: &Client, member: &str, policy: Option<&str>) {
    let api: Api<muster::controller::crd::MemberCluster> = Api::all(hub.clone());
    api.patch(
        member,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"spec": {"placement": policy}})),
    )
    .await
    .unwrap_or_else(|e| panic!("MemberCluster {member}: {e}"));
}

pub async fn create(hub: &Client, job: &Value) -> String {
    let kind = job["kind"].as_str().unwrap_or_default();
    let o = fleet::create_json(hub, &plural(kind), job.clone())
        .await
        .unwrap_or_else(|e| panic!("creating {kind}: {e}"));
    o.metadata.uid.clone().expect("uid")
}

pub fn plural(kind: &str) -> String {
    format!("{}s", kind.to_lowercase())
}

/// Waits until the job runs with every pod on its planned node; returns its QueuedJob.
pub async fn wait_running_on_plan(hub: &Client, ns: &str, kind: &str, name: &str) -> QueuedJob {
    wait_for(
        &format!("{kind} {ns}/{name} Running with every pod on its planned node"),
        T,
        || async move {
            let q = hub::queued_job(hub, ns, kind, name)
                .await
                .ok_or("no QueuedJob")?;
            let st = q.status.clone().unwrap_or_default();
            if st.state != QueuedJobState::Running {
                return Err(format!("{:?}: {:?}", st.state, st.reason));
            }
            let off: Vec<_> = st
                .pod_placement
                .iter()
                .filter(|p| p.gated || p.node.is_none() || p.node != p.planned_node)
                .collect();
            if !off.is_empty() || st.pod_placement.is_empty() {
                return Err(format!(
                    "pods not on their plan yet: {:?}",
                    st.pod_placement
                ));
            }
            Ok(q)
        },
    )
    .await
}

/// Waits until the PyTorchJob `research/<name>` is Running.
pub async fn running(hub: &Client, name: &str) -> QueuedJob {
    hub::wait_queued_state(
        hub,
        "research",
        "PyTorchJob",
        name,
        QueuedJobState::Running,
        T,
    )
    .await
}

/// Whether the plan puts the master on a node that also has a worker.
pub fn master_shares_a_node(st: &muster::controller::crd::QueuedJobStatus) -> bool {
    let workers = st.placement.get("worker");
    st.placement
        .get("master")
        .is_some_and(|m| m.keys().any(|n| workers.is_some_and(|w| w.contains_key(n))))
}

/// The per-pod record agrees with the plan: per component and node, as many pods as planned.
pub fn assert_exact(q: &QueuedJob) {
    let st = q.status.clone().unwrap_or_default();
    let mut on: BTreeMap<String, BTreeMap<String, u32>> = BTreeMap::new();
    for p in &st.pod_placement {
        *on.entry(p.component.clone())
            .or_default()
            .entry(p.node.clone().unwrap_or_default())
            .or_insert(0) += 1;
    }
    assert_eq!(
        on, st.placement,
        "pods per node vs the plan: {:?}",
        st.pod_placement
    );
    assert_eq!(st.requeues, 0, "taken back: {:?}", st.reason);
}

pub async fn delete_and_wait(hub: &Client, api_version: &str, kind: &str, ns: &str, name: &str) {
    let api = fleet::dynamic_api(hub, api_version, kind, &plural(kind), Some(ns));
    let _ = api.delete(name, &DeleteParams::foreground()).await;
    wait_for(
        &format!("{kind} {ns}/{name} gone everywhere"),
        T,
        || async move {
            if !hub::members_with(api_version, kind, &plural(kind), ns, name)
                .await
                .is_empty()
            {
                return Err("a member copy remains".to_string());
            }
            for m in fleet::MEMBERS {
                let c = client_for(m).await;
                let pods = fleet::list_pods(&c, ns, "muster.dev/job-uid").await;
                if pods.iter().any(|p| {
                    p.metadata
                        .owner_references
                        .iter()
                        .flatten()
                        .any(|o| o.name == name)
                        || p.metadata
                            .name
                            .as_deref()
                            .is_some_and(|n| n.starts_with(name))
                }) {
                    return Err(format!("pods of {name} remain on {m}"));
                }
            }
            match hub::queued_job(hub, ns, kind, name).await {
                Some(_) => Err("QueuedJob remains".into()),
                None => Ok(()),
            }
        },
    )
    .await;
}

pub fn finish(controller: Option<&Controller>, result: Result<(), String>) {
    if let Err(e) = result {
        let tail = controller.map(Controller::log_tail).unwrap_or_default();
        panic!("{e}\ncontroller log (tail):\n{tail}");
    }
}

pub fn gpu_container(gpus: u32) -> Value {
    let r = json!({"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": gpus.to_string()});
    // `pytorch`: the training-operator looks for its port on the container of that name.
    json!([{"name": "pytorch", "image": "registry.k8s.io/pause:3.10",
            "resources": {"requests": r.clone(), "limits": r}}])
}

/// A master and `workers` workers of one GPU each, on member-b only.
pub fn shared_pytorchjob(ns: &str, name: &str, workers: u32) -> Value {
    json!({
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": ns,
                     "annotations": {"muster.dev/clusters": "member-b"}},
        "spec": {"runPolicy": {"cleanPodPolicy": "All"}, "pytorchReplicaSpecs": {
            "Master": {"replicas": 1, "restartPolicy": "OnFailure",
                       "template": {"spec": {"containers": gpu_container(1)}}},
            "Worker": {"replicas": workers, "restartPolicy": "OnFailure",
                       "template": {"spec": {"containers": gpu_container(1)}}}}}
    })
}

pub async fn strip_gates_on_member_b(install: bool) {
    let b = client_for("member-b").await;
    let policies = fleet::dynamic_api(
        &b,
        "admissionregistration.k8s.io/v1",
        "MutatingAdmissionPolicy",
        "mutatingadmissionpolicies",
        None,
    );
    let bindings = fleet::dynamic_api(
        &b,
        "admissionregistration.k8s.io/v1",
        "MutatingAdmissionPolicyBinding",
        "mutatingadmissionpolicybindings",
        None,
    );
    let _ = bindings
        .delete("muster-test-strip-gates", &DeleteParams::default())
        .await;
    let _ = policies
        .delete("muster-test-strip-gates", &DeleteParams::default())
        .await;
    if !install {
        return;
    }
    let policy = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": "muster-test-strip-gates"},
        "spec": {
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE"], "resources": ["pods"]}]},
            "matchConditions": [{"name": "gated-in-research",
                "expression": "request.namespace == 'research' && has(object.spec.schedulingGates)"}],
            "failurePolicy": "Fail",
            "reinvocationPolicy": "Never",
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {
                "expression": "[JSONPatch{op: \"remove\", path: \"/spec/schedulingGates\"}]"}}]
        }
    });
    let binding = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": "muster-test-strip-gates"},
        "spec": {"policyName": "muster-test-strip-gates"}
    });
    fleet::create_json(&b, "mutatingadmissionpolicies", policy)
        .await
        .expect("MutatingAdmissionPolicy");
    fleet::create_json(&b, "mutatingadmissionpolicybindings", binding)
        .await
        .expect("MutatingAdmissionPolicyBinding");
}
