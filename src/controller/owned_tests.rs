//! Tests of `owned`: which pods count as a recorded copy's (left out of usage) and which are
//! usage, whatever they are labelled.

use super::*;
use crate::controller::members::JOB_UID_LABEL;
use serde_json::json;

/// The hub job's UID every pod here is labelled with (as a tenant can label any pod).
const JOB: &str = "hub-job-1";
const COPY: &str = "copy-uid-1";

/// A bound, running pod asking 1 cpu on `node`, labelled with [`JOB`], in `ns`, whose
/// controller (if any) has UID `owner`.
fn pod(ns: &str, node: &str, owner: Option<(&str, &str)>) -> Arc<Pod> {
    let owners: Vec<serde_json::Value> = owner
        .into_iter()
        .map(|(kind, uid)| {
            json!({"apiVersion": "v1", "kind": kind, "name": "o", "uid": uid, "controller": true})
        })
        .collect();
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": ns, "labels": {JOB_UID_LABEL: JOB},
                         "ownerReferences": owners},
            "spec": {"nodeName": node, "containers": [{"name": "c",
                     "resources": {"requests": {"cpu": "1"}}}]},
            "status": {"phase": "Running"}
        }))
        .expect("a pod"),
    )
}

fn copies(kind: JobKind) -> HashMap<String, Recorded> {
    HashMap::from([(
        COPY.to_string(),
        Recorded {
            kind,
            namespace: "team-a".into(),
        },
    )])
}

fn link(kind: &'static str, ns: &str, controller: Option<&str>) -> Link {
    Link {
        kind,
        namespace: ns.into(),
        controller: controller.map(str::to_string),
    }
}

fn cpu_on(
    pods: &[Arc<Pod>],
    copies: &HashMap<String, Recorded>,
    links: &HashMap<String, Link>,
) -> i128 {
    let (u, problems) = usage_by_node(pods, copies, links);
    assert!(problems.is_empty());
    u.get("n1").map_or(0, |r| r.get("cpu").milli())
}

#[test]
fn a_tenant_pod_labelled_with_an_admitted_jobs_uid_is_usage() {
    let copies = copies(JobKind::PyTorchJob);
    let links = HashMap::new();
    // Owned by nothing, in the copy's namespace.
    let bare = pod("team-a", "n1", None);
    // Owned by another object (a Deployment's ReplicaSet, say).
    let other = pod("team-a", "n1", Some(("ReplicaSet", "rs-1")));
    // Claiming the hub job's UID (not the copy's) as its owner.
    let hub = pod("team-a", "n1", Some(("PyTorchJob", JOB)));
    for p in [&bare, &other, &hub] {
        assert_eq!(copy_of_pod(p, &copies, &links), None);
    }
    assert_eq!(cpu_on(&[bare, other, hub], &copies, &links), 3000);
}

#[test]
fn the_copys_own_pods_are_left_out_directly_and_through_its_objects() {
    // Directly: training-operator's pods.
    let direct = pod("team-a", "n1", Some(("PyTorchJob", COPY)));
    let copies_pt = copies(JobKind::PyTorchJob);
    assert_eq!(
        copy_of_pod(&direct, &copies_pt, &HashMap::new()),
        Some(COPY)
    );
    assert_eq!(cpu_on(&[direct], &copies_pt, &HashMap::new()), 0);

    // Through one object: a JobSet's child Job.
    let links = HashMap::from([("job-1".to_string(), link("Job", "team-a", Some(COPY)))]);
    let child = pod("team-a", "n1", Some(("Job", "job-1")));
    assert_eq!(
        cpu_on(
            std::slice::from_ref(&child),
            &copies(JobKind::JobSet),
            &links
        ),
        0
    );
    // ... a RayJob's RayCluster.
    let links_ray = HashMap::from([("rc-1".to_string(), link("RayCluster", "team-a", Some(COPY)))]);
    let head = pod("team-a", "n1", Some(("RayCluster", "rc-1")));
    assert_eq!(cpu_on(&[head], &copies(JobKind::RayJob), &links_ray), 0);
    // ... an MPIJob's launcher Job.
    assert_eq!(
        cpu_on(
            std::slice::from_ref(&child),
            &copies(JobKind::MPIJob),
            &links
        ),
        0
    );

    // Through two: a TrainJob's JobSet, then its Job.
    let links_tj = HashMap::from([
        ("js-1".to_string(), link("JobSet", "team-a", Some(COPY))),
        ("job-1".to_string(), link("Job", "team-a", Some("js-1"))),
    ]);
    assert_eq!(cpu_on(&[child], &copies(JobKind::TrainJob), &links_tj), 0);
}

#[test]
fn a_chain_the_copys_kind_does_not_make_is_usage() {
    // A Job owned by a PyTorchJob copy: training-operator makes no Jobs.
    let links = HashMap::from([("job-1".to_string(), link("Job", "team-a", Some(COPY)))]);
    let p = pod("team-a", "n1", Some(("Job", "job-1")));
    assert_eq!(
        cpu_on(
            std::slice::from_ref(&p),
            &copies(JobKind::PyTorchJob),
            &links
        ),
        1000
    );
    // A TrainJob's pods come through a JobSet and a Job, not a Job alone.
    assert_eq!(cpu_on(&[p], &copies(JobKind::TrainJob), &links), 1000);
    // A pod naming an intermediate object muster does not see.
    let unseen = pod("team-a", "n1", Some(("Job", "job-unseen")));
    assert_eq!(cpu_on(&[unseen], &copies(JobKind::JobSet), &links), 1000);
}

#[test]
fn a_pod_with_the_right_owner_in_another_namespace_is_usage() {
    let copies = copies(JobKind::PyTorchJob);
    let elsewhere = pod("team-b", "n1", Some(("PyTorchJob", COPY)));
    assert_eq!(copy_of_pod(&elsewhere, &copies, &HashMap::new()), None);
    assert_eq!(cpu_on(&[elsewhere], &copies, &HashMap::new()), 1000);
    // Nor through an intermediate object in another namespace (the pod's and the copy's).
    let links = HashMap::from([("job-1".to_string(), link("Job", "team-b", Some(COPY)))]);
    let via_b = pod("team-b", "n1", Some(("Job", "job-1")));
    assert_eq!(cpu_on(&[via_b], &copies_js(), &links), 1000);
    // Nor a pod in the copy's namespace through an object in another.
    let via_a = pod("team-a", "n1", Some(("Job", "job-1")));
    assert_eq!(cpu_on(&[via_a], &copies_js(), &links), 1000);
}

fn copies_js() -> HashMap<String, Recorded> {
    copies(JobKind::JobSet)
}

#[test]
fn without_a_recorded_copy_every_pod_is_usage() {
    // An old record without a copy UID, or a job not admitted: nothing is left out.
    let direct = pod("team-a", "n1", Some(("PyTorchJob", COPY)));
    assert_eq!(cpu_on(&[direct], &HashMap::new(), &HashMap::new()), 1000);
}

#[test]
fn every_chain_is_short_and_ends_at_the_copy() {
    for kind in JobKind::ALL {
        let c = chains(kind);
        assert!(!c.is_empty(), "{kind}");
        for chain in c {
            assert!(chain.len() <= MAX_BETWEEN, "{kind}");
            for k in *chain {
                assert!(INTERMEDIATE.iter().any(|i| i.as_str() == *k), "{kind}: {k}");
            }
        }
    }
}
