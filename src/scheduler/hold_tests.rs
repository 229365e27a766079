//! Unit tests of A8: a job that may take back its queue's jobs of lower priority, and waits
//! for room on a member, holds them; the hold lapses when it is admitted or leaves.

use super::pass_tests::{admitted, job, queued};
use super::*;
use crate::fleet::NodeInfo;

/// One member of two nodes with 4 GPUs each; the tree: root (min and max 8 GPUs) over `a`
/// (ns-a, min 4, preempts lower priority), `b` (ns-b, min 2) and `c` (ns-c, min 2). b1 (2
/// GPUs) and a1 (1 GPU, low priority) fill n0 but one GPU; c1 (2 GPUs) is on n1. Every leaf is
/// within its min.
fn fragmented() -> (Scheduler, [JobId; 3]) {
    let mut s = Scheduler::new(Config::default());
    s.set_cluster(&ClusterInfo {
        name: "m".into(),
        nodes: ["n0", "n1"]
            .iter()
            .map(|n| {
                NodeInfo::ready(
                    n,
                    &[("cpu", "64"), ("nvidia.com/gpu", "4"), ("pods", "110")],
                )
            })
            .collect(),
        ..Default::default()
    });
    s.set_priority_classes(
        [("low".to_string(), 1), ("high".to_string(), 10)]
            .into_iter()
            .collect(),
    );
    let tree = QuotaTree::parse(&serde_json::json!({
        "apiVersion": "scheduling.sigs.k8s.io/v1beta1", "kind": "ElasticQuotaTree",
        "spec": {"root": {"name": "root", "min": {"nvidia.com/gpu": "8"},
            "max": {"nvidia.com/gpu": "8"}, "children": [
            {"name": "a", "namespaces": ["ns-a"], "min": {"nvidia.com/gpu": "4"},
             "attributes": {"muster.dev/within-queue-preemption": "LowerPriority"}},
            {"name": "b", "namespaces": ["ns-b"], "min": {"nvidia.com/gpu": "2"}},
            {"name": "c", "namespaces": ["ns-c"], "min": {"nvidia.com/gpu": "2"}}
        ]}}
    }))
    .expect("a valid tree");
    s.set_quota_tree(Some(tree));
    let mut placed = Vec::new();
    for (t, (ns, name, gpus, class)) in [
        ("ns-b", "b1", 2, None),
        ("ns-a", "a1", 1, Some("low")),
        ("ns-c", "c1", 2, None),
    ]
    .into_iter()
    .enumerate()
    {
        let id = queued(&mut s, &job(ns, name, gpus, class), t as u64);
        let d = s.cycle();
        assert!(admitted(&d, id), "{name}: {d:?}");
        placed.push(id);
    }
    let node = |id: JobId| {
        s.plan(id)
            .and_then(|(_, p)| p.values().next().and_then(|c| c.keys().next().cloned()))
    };
    let nodes: Vec<Option<String>> = placed.iter().map(|&id| node(id)).collect();
    assert_eq!(
        nodes,
        [Some("n0".into()), Some("n0".into()), Some("n1".into())],
        "b1 and a1 on n0, c1 on n1"
    );
    (s, [placed[0], placed[1], placed[2]])
}

/// j (high priority, 4 GPUs) may reclaim (a uses 1, all of it a1 of low priority) but no node
/// has room with a1 gone (2 GPUs free on each), and it would fit once the jobs end. k (low
/// priority, 1 GPU) would fit now (without A8 it is admitted on n0: the test fails so); it is
/// held instead, and goes with j, without a preemption, once c1 ends.
#[test]
fn a_job_that_may_take_back_its_queues_jobs_holds_them() {
    let (mut s, [_, a1, c1]) = fragmented();
    let j = queued(&mut s, &job("ns-a", "j", 4, Some("high")), 10);
    let d = s.cycle();
    assert!(!admitted(&d, j), "no node has 4 GPUs free: {d:?}");
    let k = queued(&mut s, &job("ns-a", "k", 1, Some("low")), 11);
    let d = s.cycle();
    assert!(!admitted(&d, k), "k is held behind j: {d:?}");
    let why = s.reason(k).expect("a reason");
    assert!(
        why.contains("held behind ns-a/j of higher priority (10) in queue root/a"),
        "{why}"
    );
    let e = s.explain(k);
    assert!(
        e.summary()
            .starts_with("held behind ns-a/j, which may take back the jobs of lower priority"),
        "{}",
        e.summary()
    );
    assert!(
        e.to_string().contains("  held: ns-a/j (higher priority)"),
        "{e}"
    );
    s.finish(c1);
    assert!(s.has_work());
    let d = s.cycle();
    assert!(
        admitted(&d, j) && admitted(&d, k),
        "both go once c1 ends: {d:?}"
    );
    assert!(
        !d.iter().any(|d| matches!(d, Decision::Preempt { .. })),
        "nothing is taken back: {d:?}"
    );
    assert!(matches!(s.state(a1), JobState::Admitted { .. }));
}

/// The holder leaves while it waits: the job it held is visited again and admitted.
#[test]
fn a_hold_lapses_when_its_holder_leaves() {
    let (mut s, _) = fragmented();
    let j = queued(&mut s, &job("ns-a", "j", 4, Some("high")), 10);
    s.cycle();
    let k = queued(&mut s, &job("ns-a", "k", 1, Some("low")), 11);
    assert!(!admitted(&s.cycle(), k));
    s.finish(j);
    assert!(s.has_work(), "j's leaving wakes k");
    let d = s.cycle();
    assert!(admitted(&d, k), "{d:?}");
}
