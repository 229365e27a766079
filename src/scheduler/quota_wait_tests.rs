//! Unit tests of a wait over a max: a visit that would end in the same wait as the last one
//! (the same job, the same shortfall, no way to reclaim) is skipped, and one whose shortfall
//! changed is made, with the new reason.

use super::*;
use crate::fleet::NodeInfo;
use crate::workload::interpret;

/// root (max 4 cpu) with leaf `a` (ns-a, max 2 GPUs) and leaf `b` (ns-b, no max).
fn tree() -> QuotaTree {
    QuotaTree::parse(&serde_json::json!({
        "apiVersion": "scheduling.sigs.k8s.io/v1beta1", "kind": "ElasticQuotaTree",
        "spec": {"root": {"name": "root", "max": {"cpu": "4"}, "children": [
            {"name": "a", "namespaces": ["ns-a"], "max": {"nvidia.com/gpu": "2"}},
            {"name": "b", "namespaces": ["ns-b"]}
        ]}}
    }))
    .expect("a valid tree")
}

/// A batch Job of one pod asking 1 cpu and `gpus` GPUs.
fn job(ns: &str, name: &str, gpus: u32) -> Workload {
    interpret(&serde_json::json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x",
            "resources": {"limits": {"cpu": "1", "nvidia.com/gpu": gpus}}}]}}}
    }))
    .expect("reads")
}

fn queued(s: &mut Scheduler, w: &Workload, t: u64) -> JobId {
    match s.submit(w, t) {
        Submitted::Queued(id) => id,
        _ => panic!("queued"),
    }
}

fn waits_of(d: &[Decision], id: JobId) -> usize {
    d.iter()
        .filter(|d| matches!(d, Decision::Wait { job, .. } if *job == id))
        .count()
}

fn admitted(d: &[Decision], id: JobId) -> bool {
    d.iter()
        .any(|d| matches!(d, Decision::Admit { job, .. } if *job == id))
}

#[test]
fn the_same_wait_over_a_max_is_not_made_again() {
    let mut s = Scheduler::new(Config::default());
    s.set_cluster(&ClusterInfo {
        name: "m".into(),
        nodes: vec![NodeInfo::ready(
            "n",
            &[("cpu", "64"), ("nvidia.com/gpu", "16"), ("pods", "110")],
        )],
        ..Default::default()
    });
    s.set_quota_tree(Some(tree()));
    let a1 = queued(&mut s, &job("ns-a", "a1", 1), 0);
    let a2 = queued(&mut s, &job("ns-a", "a2", 1), 0);
    let b1 = queued(&mut s, &job("ns-b", "b1", 0), 0);
    let b2 = queued(&mut s, &job("ns-b", "b2", 0), 0);
    let d = s.cycle();
    assert!([a1, a2, b1, b2].iter().all(|&j| admitted(&d, j)), "{d:?}");
    // a3 is over a's GPU max (2 + 2 > 2) and the root's cpu max (4 + 1 > 4): it sleeps on
    // the root, the highest node where it is over a max.
    let a3 = queued(&mut s, &job("ns-a", "a3", 2), 1);
    assert_eq!(waits_of(&s.cycle(), a3), 1, "its first visit waits");
    let first = s.reason(a3).expect("a reason");
    assert!(
        first.contains("nvidia.com/gpu used 2 + requested 2 exceeds max 2"),
        "{first}"
    );
    // A release in b, under the root, wakes it; its shortfall in a is the same: no visit.
    s.finish(b1);
    assert!(s.has_work(), "the release under the root wakes it");
    assert_eq!(waits_of(&s.cycle(), a3), 0, "not visited: the same wait");
    assert_eq!(s.reason(a3).as_deref(), Some(first.as_str()));
    // A release in a changes its shortfall (used 1): visited, with the new reason.
    s.finish(a1);
    assert!(s.has_work(), "the release in a wakes it");
    assert_eq!(
        waits_of(&s.cycle(), a3),
        1,
        "visited: its shortfall changed"
    );
    let second = s.reason(a3).expect("a reason");
    assert!(
        second.contains("nvidia.com/gpu used 1 + requested 2 exceeds max 2"),
        "{second}"
    );
    s.finish(a2);
    assert!(admitted(&s.cycle(), a3), "within its max once a2 ends");
}
