//! Unit tests of what a pass visits: a wait over a max that would be the same as the last one
//! is not made again (one whose shortfall changed is, with the new reason), nor a wait for the
//! fleet within a min while nothing borrows what it is short of; and of its two
//! rounds (A5): a head set aside as a borrower goes back to the first round when a preemption
//! there lowers usage on its path, even when its turn had passed.

use super::*;
use crate::fleet::NodeInfo;
use crate::workload::interpret;

/// A scheduler with one member of one node: 64 cpu and `gpus` GPUs.
pub(super) fn scheduler(gpus: &str) -> Scheduler {
    let mut s = Scheduler::new(Config::default());
    s.set_cluster(&ClusterInfo {
        name: "m".into(),
        nodes: vec![NodeInfo::ready(
            "n0",
            &[("cpu", "64"), ("nvidia.com/gpu", gpus), ("pods", "110")],
        )],
        ..Default::default()
    });
    s
}

pub(super) fn parse(root: serde_json::Value) -> QuotaTree {
    QuotaTree::parse(&serde_json::json!({
        "apiVersion": "scheduling.sigs.k8s.io/v1beta1", "kind": "ElasticQuotaTree",
        "spec": {"root": root}
    }))
    .expect("a valid tree")
}

/// A batch Job of one pod asking 1 cpu and `gpus` GPUs, its pod naming `class` (if any).
pub(super) fn job(ns: &str, name: &str, gpus: u32, class: Option<&str>) -> Workload {
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

pub(super) fn queued(s: &mut Scheduler, w: &Workload, t: u64) -> JobId {
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

pub(super) fn admitted(d: &[Decision], id: JobId) -> bool {
    d.iter()
        .any(|d| matches!(d, Decision::Admit { job, .. } if *job == id))
}

fn preempted(d: &[Decision], id: JobId) -> bool {
    d.iter()
        .any(|d| matches!(d, Decision::Preempt { job, .. } if *job == id))
}

/// The tree: root (max 4 cpu) with leaf `a` (ns-a, max 2 GPUs) and leaf `b` (ns-b, no max).
#[test]
fn the_same_wait_over_a_max_is_not_made_again() {
    let mut s = scheduler("16");
    s.set_quota_tree(Some(parse(serde_json::json!(
        {"name": "root", "max": {"cpu": "4"}, "children": [
            {"name": "a", "namespaces": ["ns-a"], "max": {"nvidia.com/gpu": "2"}},
            {"name": "b", "namespaces": ["ns-b"]}
        ]}
    ))));
    let a1 = queued(&mut s, &job("ns-a", "a1", 1, None), 0);
    let a2 = queued(&mut s, &job("ns-a", "a2", 1, None), 0);
    let b1 = queued(&mut s, &job("ns-b", "b1", 0, None), 0);
    let b2 = queued(&mut s, &job("ns-b", "b2", 0, None), 0);
    let d = s.cycle();
    assert!([a1, a2, b1, b2].iter().all(|&j| admitted(&d, j)), "{d:?}");
    // a3 is over a's GPU max (2 + 2 > 2) and the root's cpu max (4 + 1 > 4): it sleeps on
    // the root, the highest node where it is over a max.
    let a3 = queued(&mut s, &job("ns-a", "a3", 2, None), 1);
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

/// root: `n` (min 6 GPUs) over `c` (ns-c) and `l` (ns-l, min 4, preempts lower priority);
/// `g` (ns-g, min 3). h (ns-c) borrows at the pass's start (n uses 6 of its min 6) and its turn
/// comes first, after c0 of its queue (c borrows nothing inside n, l does). p (ns-l, high
/// priority) then takes back l's two jobs of low priority: n uses 4, and h borrows nothing any
/// more. Read again in the first round, h goes before g's job (the same share, submitted
/// earlier), and only one of them fits. Left in the second round, h would wait for the next
/// pass, and g's job would take the room first.
#[test]
fn a_head_set_aside_goes_back_to_the_first_round_after_a_preemption() {
    let mut s = scheduler("8");
    s.set_priority_classes(
        [
            ("low".to_string(), 1),
            ("mid".to_string(), 2),
            ("high".to_string(), 10),
        ]
        .into_iter()
        .collect(),
    );
    s.set_quota_tree(Some(parse(serde_json::json!(
        {"name": "root", "children": [
            {"name": "n", "min": {"nvidia.com/gpu": "6"}, "children": [
                {"name": "c", "namespaces": ["ns-c"]},
                {"name": "l", "namespaces": ["ns-l"], "min": {"nvidia.com/gpu": "4"},
                 "attributes": {"muster.dev/within-queue-preemption": "LowerPriority"}}
            ]},
            {"name": "g", "namespaces": ["ns-g"], "min": {"nvidia.com/gpu": "3"}}
        ]}
    ))));
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

/// `x` ends: the release wakes the classes waiting for the fleet, and the next cycle does not
/// visit `head`'s (no `Wait`), whose reason stays `reason`.
pub(super) fn released_and_left_asleep(s: &mut Scheduler, x: JobId, head: JobId, reason: &str) {
    s.finish(x);
    assert!(
        s.has_work(),
        "the release wakes the classes waiting for the fleet"
    );
    assert_eq!(waits_of(&s.cycle(), head), 0, "not visited: a certain wait");
    assert_eq!(s.reason(head).as_deref(), Some(reason));
}

/// A PyTorchJob of one worker asking `cpu` cpu and `gpus` GPUs, in `ns`.
fn torch(ns: &str, name: &str, cpu: u32, gpus: u32) -> Workload {
    interpret(&serde_json::json!({
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 1, "template": {"spec":
            {"containers": [{"name": "c", "image": "x", "resources": {"limits":
                {"cpu": cpu.to_string(), "nvidia.com/gpu": gpus}}}]}}}}}
    }))
    .expect("reads")
}

/// Member `m` (64 cpu, 8 GPUs, every kind) and `t` (128 cpu, 8 GPUs, PyTorchJobs only); leaves
/// `a` (ns-a, min 8 GPUs), `b` (ns-b, min 4 GPUs) and `c` (ns-c, no min). a2 (a batch Job)
/// waits for GPUs on `m` within a's min while nothing borrows GPUs: as c's jobs (which borrow
/// cpu) come and go on `t`, it is not visited again. Once b borrows GPUs (its PyTorchJob on
/// `t`), a2 takes back b's job on `m`.
#[test]
fn a_wait_within_a_min_with_nothing_to_take_is_not_made_again() {
    let mut s = scheduler("8");
    s.set_cluster(&ClusterInfo {
        name: "t".into(),
        nodes: vec![NodeInfo::ready(
            "t0",
            &[("cpu", "128"), ("nvidia.com/gpu", "8"), ("pods", "110")],
        )],
        serves: crate::fleet::Serves {
            kinds: Some([crate::workload::JobKind::PyTorchJob].into_iter().collect()),
            ..Default::default()
        },
        ..Default::default()
    });
    s.set_quota_tree(Some(parse(serde_json::json!(
        {"name": "root", "children": [
            {"name": "a", "namespaces": ["ns-a"], "min": {"nvidia.com/gpu": "8"}},
            {"name": "b", "namespaces": ["ns-b"], "min": {"nvidia.com/gpu": "4"}},
            {"name": "c", "namespaces": ["ns-c"]}
        ]}
    ))));
    let b1 = queued(&mut s, &job("ns-b", "b1", 4, None), 0);
    let a1 = queued(&mut s, &job("ns-a", "a1", 2, None), 0);
    let d = s.cycle();
    assert!(admitted(&d, b1) && admitted(&d, a1), "{d:?}");
    // Within a's min (2 + 4 <= 8), short of GPUs on m (2 free), and b is at its min.
    let a2 = queued(&mut s, &job("ns-a", "a2", 4, None), 1);
    assert_eq!(waits_of(&s.cycle(), a2), 1, "its first visit waits");
    let reason = s.reason(a2).expect("a reason");
    for i in 0..3 {
        // c borrows cpu (it has no min), not GPUs, on a member a2 cannot use.
        let x = queued(&mut s, &torch("ns-c", &format!("x{i}"), 100, 0), 2 + i);
        let d = s.cycle();
        assert!(admitted(&d, x), "{d:?}");
        assert_eq!(
            waits_of(&d, a2),
            0,
            "the admission makes nothing borrow GPUs"
        );
        released_and_left_asleep(&mut s, x, a2, &reason);
    }
    // b2 runs on t: b borrows (8 > 4), and a2 takes back b1 on m.
    let b2 = queued(&mut s, &torch("ns-b", "b2", 1, 4), 10);
    let d = s.cycle();
    assert!(admitted(&d, b2), "{d:?}");
    assert!(preempted(&d, b1), "b borrows what a is guaranteed: {d:?}");
    assert!(admitted(&d, a2), "{d:?}");
}
