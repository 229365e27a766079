//! Tests of `dispatch`: the member copy as built, and what an existing object of its name is
//! to a create (adopted only when made for this admission).

use super::*;
use crate::workload::interpret;

fn plan(c: &str, nodes: &[(&str, u32)]) -> BTreeMap<String, BTreeMap<String, u32>> {
    BTreeMap::from([(
        c.to_string(),
        nodes.iter().map(|(n, k)| (n.to_string(), *k)).collect(),
    )])
}

#[test]
fn pytorch_copy_is_unsuspended_labelled_and_pinned() {
    let hub = json!({
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": "t", "namespace": "team-a", "uid": "U1", "resourceVersion": "9",
                     "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "keep": "me"}},
        "spec": {"runPolicy": {"suspend": true}, "pytorchReplicaSpecs": {
            "Worker": {"replicas": 2, "template": {"spec": {
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}]}}},
                "containers": [{"name": "pytorch", "image": "x",
                "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}}},
        "status": {"conditions": []}
    });
    let w = interpret(&hub).expect("interprets");
    let copy = member_copy(
        &hub,
        &w,
        "U1",
        "hub",
        &plan("worker", &[("n1", 1), ("n2", 1)]),
        true,
    );
    assert_eq!(copy.pointer("/spec/runPolicy/suspend"), Some(&json!(false)));
    assert_eq!(copy.pointer("/metadata/uid"), None);
    assert_eq!(copy.pointer("/metadata/resourceVersion"), None);
    assert_eq!(copy.pointer("/status"), None);
    assert_eq!(
        copy.pointer("/metadata/labels/muster.dev~1job-uid"),
        Some(&json!("U1"))
    );
    assert_eq!(
        copy.pointer("/metadata/annotations/keep"),
        Some(&json!("me"))
    );
    assert_eq!(
        copy.pointer("/metadata/annotations/kubectl.kubernetes.io~1last-applied-configuration"),
        None
    );
    let t = "/spec/pytorchReplicaSpecs/Worker/template";
    assert_eq!(
        copy.pointer(&format!("{t}/metadata/labels/muster.dev~1component")),
        Some(&json!("worker"))
    );
    let terms = copy
        .pointer(&format!("{t}/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms"))
        .and_then(Value::as_array)
        .expect("terms");
    // One term per planned node (a node field selector names one node), each keeping the
    // user's own requirement.
    assert_eq!(terms.len(), 2);
    for (term, node) in terms.iter().zip(["n1", "n2"]) {
        assert_eq!(term["matchExpressions"][0]["key"], json!("gpu"));
        assert_eq!(
            term["matchFields"],
            json!([{"key": "metadata.name", "operator": "In", "values": [node]}])
        );
    }
    // Every pod waits behind muster's gate until it is given one node.
    assert_eq!(
        copy.pointer(&format!("{t}/spec/schedulingGates")),
        Some(&json!([{"name": GATE}]))
    );
}

#[test]
fn trainjob_copy_carries_musters_runtime_patch() {
    let runtime = json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
        "metadata": {"name": "torch"},
        "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": {"replicatedJobs": [{
            "name": "node",
            "template": {"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                "spec": {"template": {"spec": {
                    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}]}}},
                    "containers": [{"name": "node", "image": "x"}]}}}}}]}}}
    });
    let mut rt = crate::workload::TrainingRuntimes::default();
    rt.apply(&runtime).expect("runtime");
    let user_patch = json!({"manager": "example.com/p", "trainingRuntimeSpec": {"template": {"spec": {
        "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {"nodeSelector": {"a": "b"}}}}}}]}}}});
    let hub = json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "t", "namespace": "ns", "uid": "U3"},
        "spec": {"suspend": true, "runtimeRef": {"name": "torch"},
            "trainer": {"numNodes": 2, "resourcesPerNode": {"limits": {"nvidia.com/gpu": "2"}}},
            "runtimePatches": [user_patch.clone()]}
    });
    let w = crate::workload::interpret_with(&hub, &rt).expect("interprets");
    let copy = member_copy(
        &hub,
        &w,
        "U3",
        "hub",
        &plan("node", &[("n1", 1), ("n2", 1)]),
        true,
    );
    assert_eq!(copy.pointer("/spec/suspend"), Some(&json!(false)));
    // The user's patch is kept, first; muster's follows.
    assert_eq!(copy.pointer("/spec/runtimePatches/0"), Some(&user_patch));
    let p = copy
        .pointer("/spec/runtimePatches/1")
        .expect("muster's patch");
    assert_eq!(p["manager"], json!(MANAGED_BY));
    let rj = &p["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0];
    assert_eq!(rj["name"], json!("node"));
    let t = &rj["template"]["spec"]["template"];
    assert_eq!(t["metadata"]["labels"]["muster.dev/job-uid"], json!("U3"));
    assert_eq!(
        t["metadata"]["labels"]["muster.dev/component"],
        json!("node")
    );
    assert_eq!(t["spec"]["schedulingGates"], json!([{"name": GATE}]));
    // A strategic merge replaces the runtime's terms: each keeps the runtime's requirement.
    let terms =
        t["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            ["nodeSelectorTerms"]
            .as_array()
            .expect("terms");
    assert_eq!(terms.len(), 2);
    for (term, node) in terms.iter().zip(["n1", "n2"]) {
        assert_eq!(term["matchExpressions"][0]["key"], json!("gpu"));
        assert_eq!(term["matchFields"][0]["values"], json!([node]));
    }
}

#[test]
fn batch_job_copy_drops_generated_selector_and_managed_by() {
    let hub = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "j", "namespace": "ns", "uid": "U2"},
        "spec": {"suspend": true, "managedBy": MANAGED_BY, "parallelism": 2,
            "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "U2"}},
            "template": {"metadata": {"labels": {"controller-uid": "U2", "job-name": "j", "app": "x"}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x",
                    "resources": {"requests": {"cpu": "1"}}}]}}}
    });
    let w = interpret(&hub).expect("interprets");
    let copy = member_copy(&hub, &w, "U2", "hub", &plan("job", &[("n1", 2)]), false);
    // Pinned mode (a member that cannot use gates): no gate.
    assert_eq!(copy.pointer("/spec/template/spec/schedulingGates"), None);
    assert_eq!(copy.pointer("/spec/suspend"), Some(&json!(false)));
    assert_eq!(copy.pointer("/spec/managedBy"), None);
    assert_eq!(copy.pointer("/spec/selector"), None);
    let labels = copy
        .pointer("/spec/template/metadata/labels")
        .expect("labels");
    assert_eq!(labels.get("controller-uid"), None);
    assert_eq!(labels.get("app"), Some(&json!("x")));
    assert_eq!(labels.get("muster.dev/job-uid"), Some(&json!("U2")));
    assert_eq!(
        copy.pointer("/spec/template/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms/0/matchFields/0/values"),
        Some(&json!(["n1"]))
    );
}

#[test]
fn set_pointer_creates_objects_and_respects_arrays() {
    let mut v = json!({"a": [{"b": 1}]});
    set_pointer(&mut v, "/a/0/c/d", json!(true));
    set_pointer(&mut v, "/x~1y/z", json!(2));
    set_pointer(&mut v, "/a/5/q", json!(3));
    assert_eq!(
        v,
        json!({"a": [{"b": 1, "c": {"d": true}}], "x/y": {"z": 2}})
    );
}

#[test]
fn a_copy_names_its_admission() {
    let mut copy = json!({"metadata": {"name": "j", "annotations": {"keep": "me"}}});
    for_admission(&mut copy, 1_700_000_000_123);
    assert_eq!(
        copy.pointer("/metadata/annotations"),
        Some(&json!({"keep": "me", "muster.dev/admission": "1700000000123"}))
    );
    let mut bare = json!({"metadata": {"name": "j"}});
    for_admission(&mut bare, 7);
    assert_eq!(
        bare.pointer("/metadata/annotations/muster.dev~1admission"),
        Some(&json!("7"))
    );
}

/// An object named like the copy, as a create meets it on the member.
fn found(labels: Value, annotations: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": "t", "namespace": "team-a", "uid": "obj-1",
                     "labels": labels, "annotations": annotations}
    }))
    .expect("an object")
}

#[test]
fn an_object_is_adopted_only_with_this_admissions_annotation() {
    let uid_only = found(json!({JOB_UID_LABEL: "U1", ORIGIN_LABEL: "hub"}), json!({}));
    // The job's name, UID and origin labels (anyone who can create it can write them), no
    // annotation: not muster's, not adopted (nor deleted).
    assert_eq!(
        existing(&uid_only, "U1", Some("1700")),
        Existing::NotMusters
    );
    assert!(!made_by_muster(&uid_only));
    // Nothing to compare with: never adopted either.
    assert_eq!(existing(&uid_only, "U1", None), Existing::NotMusters);
    let this = found(
        json!({JOB_UID_LABEL: "U1"}),
        json!({ADMISSION_ANNOTATION: "1700"}),
    );
    assert_eq!(existing(&this, "U1", Some("1700")), Existing::Adopt);
    assert!(made_by_muster(&this));
    assert_eq!(existing(&this, "U1", Some("1800")), Existing::Earlier);
    assert_eq!(existing(&this, "U1", None), Existing::NotMusters);
    // Another job's, or nobody's.
    assert_eq!(existing(&this, "U2", Some("1700")), Existing::Foreign);
    let bare = found(json!({}), json!({ADMISSION_ANNOTATION: "1700"}));
    assert_eq!(existing(&bare, "U1", Some("1700")), Existing::Foreign);
}

#[test]
fn an_object_muster_did_not_make_is_reported_by_name_and_member() {
    let e = DispatchError::NotMusters {
        kind: JobKind::PyTorchJob,
        namespace: "team-a".into(),
        name: "t".into(),
        cluster: "member-a".into(),
        admission: "1700".into(),
    };
    let text = e.to_string();
    for part in [
        "PyTorchJob team-a/t on member-a",
        "not adopted, not deleted",
        "1700",
    ] {
        assert!(text.contains(part), "{text}");
    }
    assert_eq!(e.failure(), crate::metrics::DispatchFailure::Conflict);
}
