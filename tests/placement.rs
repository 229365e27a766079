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
//! 5. A member placed in pinned mode (`spec.placement: Pinned`): no gates, only plans whose
//!    component node sets keep apart, a job with no such plan is rejected with the reason, and
//!    runs once the member is back to gates.
//! 6. A member whose admission strips scheduling gates (a real MutatingAdmissionPolicy on
//!    member-b): muster notices, says so (`GatesDropped`, MemberCluster status) and places there
//!    by node set from then on; the job still ends up running whole.

// The std Mutex only serializes the tests of this binary; holding it across awaits is the point.
#![allow(clippy::await_holding_lock)]

mod support;

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use kube::Client;
use kube::api::{Api, DeleteParams};
use muster::controller::crd::{QueuedJob, QueuedJobState};
use serde_json::{Value, json};
use support::audit::Auditor;
use support::fleet::{self, client_for, ensure_fleet_up, unique_name, wait_for};
use support::hub::{self, Controller};
use support::process::Paused;

static HUB: Mutex<()> = Mutex::new(());
const T: Duration = Duration::from_secs(90);

fn yaml_file(path: &str) -> Value {
    let text = std::fs::read_to_string(fleet::repo_root().join(path)).expect(path);
    serde_yaml::from_str(&text).expect(path)
}

/// Hub, CRDs, members, the example quota tree (its leaves list `research` and `platform`).
async fn setup() -> Client {
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
async fn set_placement(hub: &Client, member: &str, policy: Option<&str>) {
    let api: Api<muster::controller::crd::MemberCluster> = Api::all(hub.clone());
    api.patch(
        member,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"spec": {"placement": policy}})),
    )
    .await
    .unwrap_or_else(|e| panic!("MemberCluster {member}: {e}"));
}

async fn create(hub: &Client, job: &Value) -> String {
    let kind = job["kind"].as_str().unwrap_or_default();
    let o = fleet::create_json(hub, &plural(kind), job.clone())
        .await
        .unwrap_or_else(|e| panic!("creating {kind}: {e}"));
    o.metadata.uid.clone().expect("uid")
}

fn plural(kind: &str) -> String {
    format!("{}s", kind.to_lowercase())
}

/// Waits until the job runs with every pod on its planned node; returns its QueuedJob.
async fn wait_running_on_plan(hub: &Client, ns: &str, kind: &str, name: &str) -> QueuedJob {
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
async fn running(hub: &Client, name: &str) -> QueuedJob {
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
fn master_shares_a_node(st: &muster::controller::crd::QueuedJobStatus) -> bool {
    let workers = st.placement.get("worker");
    st.placement
        .get("master")
        .is_some_and(|m| m.keys().any(|n| workers.is_some_and(|w| w.contains_key(n))))
}

/// The per-pod record agrees with the plan: per component and node, as many pods as planned.
fn assert_exact(q: &QueuedJob) {
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

async fn delete_and_wait(hub: &Client, api_version: &str, kind: &str, ns: &str, name: &str) {
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

fn finish(controller: Option<&Controller>, result: Result<(), String>) {
    if let Err(e) = result {
        let tail = controller.map(Controller::log_tail).unwrap_or_default();
        panic!("{e}\ncontroller log (tail):\n{tail}");
    }
}

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

fn gpu_container(gpus: u32) -> Value {
    let r = json!({"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": gpus.to_string()});
    // `pytorch`: the training-operator looks for its port on the container of that name.
    json!([{"name": "pytorch", "image": "registry.k8s.io/pause:3.10",
            "resources": {"requests": r.clone(), "limits": r}}])
}

/// A master and `workers` workers of one GPU each, on member-b only.
fn shared_pytorchjob(ns: &str, name: &str, workers: u32) -> Value {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pinned_member_gets_only_plans_that_start_under_any_arrangement() {
    let _g = HUB.lock().unwrap_or_else(|e| e.into_inner());
    let hub = setup().await;
    let controller = Controller::start("placement-pinned", &[]).await;
    let result: Result<(), String> = async {
        set_placement(&hub, "member-b", Some("Pinned")).await;
        let mcs: Api<muster::controller::crd::MemberCluster> = Api::all(hub.clone());
        wait_for("member-b in pinned mode", T, || {
            let mcs = mcs.clone();
            async move {
                let mc = mcs.get("member-b").await.map_err(|e| e.to_string())?;
                let st = mc.status.unwrap_or_default();
                match st.placement.as_deref() {
                    Some("pinned") => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            }
        })
        .await;

        // README's shape (master + 3 workers, one GPU each) on member-b: a plan whose
        // components keep to separate nodes, no gate on any pod, every pod Running.
        let name = unique_name("pinned");
        let uid = create(&hub, &shared_pytorchjob("research", &name, 3)).await;
        let q = running(&hub, &name).await;
        let st = q.status.clone().unwrap_or_default();
        if master_shares_a_node(&st) || st.requeues != 0 {
            return Err(format!(
                "pinned plan shares a node or was taken back: {st:?}"
            ));
        }
        let pods = fleet::list_pods(
            &client_for("member-b").await,
            "research",
            &format!("muster.dev/job-uid={uid}"),
        )
        .await;
        if pods.len() != 4
            || pods.iter().any(|p| {
                p.spec
                    .as_ref()
                    .and_then(|s| s.scheduling_gates.as_ref())
                    .is_some_and(|g| !g.is_empty())
            })
        {
            return Err(format!(
                "pods in pinned mode: {}",
                fleet::describe_pods(&pods)
            ));
        }
        let (ok, text) = hub::explain(&format!("research/{name}"));
        if !ok || !text.contains("placement on member-b: pinned") {
            return Err(format!("explain: {text}"));
        }
        delete_and_wait(&hub, "kubeflow.org/v1", "PyTorchJob", "research", &name).await;

        // 6 pods on 6 GPUs must share nodes: no robust plan on member-b, even empty, so the job
        // is rejected and says why.
        let full = unique_name("pinned-full");
        create(&hub, &shared_pytorchjob("research", &full, 5)).await;
        let hub2 = hub.clone();
        let full2 = full.clone();
        wait_for(
            "the job that needs shared nodes to wait with the pinned-mode reason",
            T,
            || {
                let (hub, full) = (hub2.clone(), full2.clone());
                async move {
                    let q = hub::queued_job(&hub, "research", "PyTorchJob", &full)
                        .await
                        .ok_or("no QueuedJob")?;
                    let st = q.status.unwrap_or_default();
                    let text = st.explanation.clone().unwrap_or_default();
                    if st.state != QueuedJobState::Rejected || !text.contains("pinned mode") {
                        return Err(format!("{:?}: {:?} / {text}", st.state, st.reason));
                    }
                    Ok(())
                }
            },
        )
        .await;
        // Back to gates: the same job becomes admissible and starts whole on its plan.
        set_placement(&hub, "member-b", None).await;
        let q = wait_running_on_plan(&hub, "research", "PyTorchJob", &full).await;
        assert_exact(&q);
        delete_and_wait(&hub, "kubeflow.org/v1", "PyTorchJob", "research", &full).await;
        Ok(())
    }
    .await;
    set_placement(&hub, "member-b", None).await;
    finish(Some(&controller), result);
}

/// A MutatingAdmissionPolicy on member-b that removes every scheduling gate from pods created in
/// `research`: what an admission webhook unaware of gates can do to muster's pods.
async fn strip_gates_on_member_b(install: bool) {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_member_that_strips_gates_is_noticed_and_placed_by_node_set() {
    let _g = HUB.lock().unwrap_or_else(|e| e.into_inner());
    let hub = setup().await;
    strip_gates_on_member_b(true).await;
    // Policies take effect once the API server has loaded them: a probe pod shows when.
    let b = client_for("member-b").await;
    let probe_api: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(b.clone(), "research");
    let probe = unique_name("probe");
    wait_for("the policy to strip gates", T, || {
        let (api, probe) = (probe_api.clone(), probe.clone());
        async move {
            let _ = api
                .delete(&probe, &DeleteParams::default().grace_period(0))
                .await;
            let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
                "metadata": {"name": probe, "namespace": "research"},
                "spec": {"schedulingGates": [{"name": "x.io/probe"}],
                         "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}
            }))
            .map_err(|e| e.to_string())?;
            let made = api
                .create(&Default::default(), &pod)
                .await
                .map_err(|e| e.to_string())?;
            let _ = api
                .delete(&probe, &DeleteParams::default().grace_period(0))
                .await;
            if made
                .spec
                .and_then(|s| s.scheduling_gates)
                .is_some_and(|g| !g.is_empty())
            {
                Err("gate kept".into())
            } else {
                Ok(())
            }
        }
    })
    .await;
    // Short stuck-pod timeout: a first plan made for gates may not start when pinned by set.
    let controller = Controller::start(
        "placement-stripped",
        &[
            "--pods-ready-timeout-seconds",
            "15",
            "--requeue-backoff-seconds",
            "1",
        ],
    )
    .await;
    let name = unique_name("stripped");
    let result: Result<(), String> = async {
        create(&hub, &shared_pytorchjob("research", &name, 3)).await;
        let mcs: Api<muster::controller::crd::MemberCluster> = Api::all(hub.clone());
        wait_for("member-b in pinned mode, with the evidence", T, || {
            let mcs = mcs.clone();
            async move {
                let st = mcs
                    .get("member-b")
                    .await
                    .map_err(|e| e.to_string())?
                    .status
                    .unwrap_or_default();
                match (st.placement.as_deref(), st.placement_reason.as_deref()) {
                    (Some("pinned"), Some(r)) if r.contains("without muster's scheduling gate") => {
                        Ok(())
                    }
                    other => Err(format!("{other:?}")),
                }
            }
        })
        .await;
        let events = hub::events_for(&hub, "research", &name).await;
        if !events
            .iter()
            .any(|e| e.starts_with("GatesDropped: member-b"))
        {
            return Err(format!("no GatesDropped Event: {events:?}"));
        }
        // Whatever the first plan, the job runs whole on member-b in the end, and a plan made
        // from now on keeps the components on separate nodes.
        let q = running(&hub, &name).await;
        let st = q.status.unwrap_or_default();
        if st.cluster.as_deref() != Some("member-b") {
            return Err(format!("ran on {:?}", st.cluster));
        }
        delete_and_wait(&hub, "kubeflow.org/v1", "PyTorchJob", "research", &name).await;
        let next = unique_name("stripped-next");
        create(&hub, &shared_pytorchjob("research", &next, 3)).await;
        let q = running(&hub, &next).await;
        let st = q.status.unwrap_or_default();
        if master_shares_a_node(&st) || st.requeues != 0 {
            return Err(format!("the plan after the gates were dropped: {st:?}"));
        }
        delete_and_wait(&hub, "kubeflow.org/v1", "PyTorchJob", "research", &next).await;
        Ok(())
    }
    .await;
    strip_gates_on_member_b(false).await;
    finish(Some(&controller), result);
}
