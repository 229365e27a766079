//! Unit tests of a pass's two rounds (A5): a head set aside as a borrower goes back to the
//! first round when a preemption there lowers usage on its path, even when its turn had passed.

use super::*;
use crate::fleet::NodeInfo;
use crate::workload::interpret;

/// root: `n` (min 6 GPUs) over `c` (ns-c) and `l` (ns-l, min 4, preempts lower priority);
/// `g` (ns-g, min 3).
fn tree() -> QuotaTree {
    QuotaTree::parse(&serde_json::json!({
        "apiVersion": "scheduling.sigs.k8s.io/v1beta1", "kind": "ElasticQuotaTree",
        "spec": {"root": {"name": "root", "children": [
            {"name": "n", "min": {"nvidia.com/gpu": "6"}, "children": [
                {"name": "c", "namespaces": ["ns-c"]},
                {"name": "l", "namespaces": ["ns-l"], "min": {"nvidia.com/gpu": "4"},
                 "attributes": {"muster.dev/within-queue-preemption": "LowerPriority"}}
            ]},
            {"name": "g", "namespaces": ["ns-g"], "min": {"nvidia.com/gpu": "3"}}
        ]}}
    }))
    .expect("a valid tree")
}

/// A batch Job of one pod asking `gpus` GPUs, its pod naming `class` (if any).
fn job(ns: &str, name: &str, gpus: u32, class: Option<&str>) -> Workload {
    let mut spec = serde_json::json!({"containers": [{"name": "c", "image": "x",
        "resources": {"limits": {"cpu": "1", "nvidia.com/gpu": gpus}}}]});
    if let Some(c) = class {
        spec["priorityClassName"] = serde_json::json!(c);
    }
    interpret(&serde_json::json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"template": {"spec": spec}}
    }))
    .expect("reads")
}

fn queued(s: &mut Scheduler, w: &Workload, t: u64) -> JobId {
    match s.submit(w, t) {
        Submitted::Queued(id) => id,
        _ => panic!("queued"),
    }
}

fn admitted(d: &[Decision], id: JobId) -> bool {
    d.iter()
        .any(|d| matches!(d, Decision::Admit { job, .. } if *job == id))
}

fn preempted(d: &[Decision], id: JobId) -> bool {
    d.iter()
        .any(|d| matches!(d, Decision::Preempt { job, .. } if *job == id))
}

/// h (ns-c) borrows at the pass's start (n uses 6 of its min 6) and its turn comes first, after
/// c0 of its queue (c borrows nothing inside n, l does). p (ns-l, high priority) then takes back l's two jobs of
/// low priority: n uses 4, and h borrows nothing any more. Read again in the first round, h
/// goes before g's job (the same share, submitted earlier), and only one of them fits. Left in
/// the second round, h would wait for the next pass, and g's job would take the room first.
#[test]
fn a_head_set_aside_goes_back_to_the_first_round_after_a_preemption() {
    let mut s = Scheduler::new(Config::default());
    s.set_priority_classes(
        [
            ("low".to_string(), 1),
            ("mid".to_string(), 2),
            ("high".to_string(), 10),
        ]
        .into_iter()
        .collect(),
    );
    s.set_cluster(&ClusterInfo {
        name: "m".into(),
        nodes: vec![NodeInfo::ready(
            "n0",
            &[("cpu", "64"), ("nvidia.com/gpu", "8"), ("pods", "110")],
        )],
        ..Default::default()
    });
    s.set_quota_tree(Some(tree()));
    let v = queued(&mut s, &job("ns-l", "v", 4, Some("low")), 0);
    let w = queued(&mut s, &job("ns-l", "w", 2, Some("mid")), 0);
    let d = s.cycle();
    assert!(admitted(&d, v) && admitted(&d, w), "{d:?}");
    // c's best job asks no GPU, so c is not a queue whose best job borrows (those wait for
    // the second round whole).
    let c0 = queued(&mut s, &job("ns-c", "c0", 0, None), 1);
    let h = queued(&mut s, &job("ns-c", "h", 2, None), 2);
    let p = queued(&mut s, &job("ns-l", "p", 4, Some("high")), 2);
    let g = queued(&mut s, &job("ns-g", "g", 3, None), 3);
    let d = s.cycle();
    assert!(admitted(&d, c0), "{d:?}");
    assert!(
        preempted(&d, v) && preempted(&d, w),
        "l's jobs taken back: {d:?}"
    );
    assert!(admitted(&d, p), "{d:?}");
    assert!(
        admitted(&d, h),
        "h, read again after the preemption, goes first: {d:?}"
    );
    assert!(!admitted(&d, g), "no room left for g's job: {d:?}");
}
