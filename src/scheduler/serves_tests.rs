//! Tests of what a member can create as a hard fit condition: a member that does not serve a
//! job's kind, or lacks a PriorityClass its pods name, is never a candidate; the reason names
//! the member and what it lacks; a change of what a member serves is taken in at once.

use super::*;
use crate::fleet::{Needs, NodeInfo, Serves};
use crate::workload::{JobKind, interpret};

fn member(name: &str, kinds: &[JobKind], classes: &[&str]) -> ClusterInfo {
    ClusterInfo {
        name: name.into(),
        nodes: vec![NodeInfo::ready(
            &format!("{name}-0"),
            &[("cpu", "16"), ("nvidia.com/gpu", "8"), ("pods", "110")],
        )],
        serves: Serves {
            kinds: Some(kinds.iter().copied().collect()),
            priority_classes: Some(classes.iter().map(|c| c.to_string()).collect()),
            runtimes: None,
            stalled: Default::default(),
        },
        ..Default::default()
    }
}

/// A PyTorchJob of 2 one-GPU workers whose pods name `class` (if any).
fn pytorch(name: &str, class: Option<&str>) -> Workload {
    pytorch_gpus(name, class, 1)
}

/// The same with `gpus` per worker.
fn pytorch_gpus(name: &str, class: Option<&str>, gpus: u32) -> Workload {
    let mut spec = serde_json::json!({
        "containers": [{"name": "pytorch", "image": "x",
            "resources": {"limits": {"cpu": "1", "nvidia.com/gpu": gpus}}}]});
    if let Some(c) = class {
        spec["priorityClassName"] = serde_json::json!(c);
    }
    interpret(&serde_json::json!({
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": "team"},
        "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 2, "template": {"spec": spec}}}}
    }))
    .expect("reads")
}

fn admitted(d: &[Decision], id: JobId) -> Option<String> {
    d.iter().find_map(|d| match d {
        Decision::Admit { job, cluster, .. } if *job == id => Some(cluster.clone()),
        _ => None,
    })
}

fn scheduler(members: &[ClusterInfo]) -> Scheduler {
    let mut s = Scheduler::new(Config::default());
    s.set_priority_classes([("team-high".to_string(), 100)].into_iter().collect());
    for m in members {
        s.set_cluster(m);
    }
    s
}

const TORCH: &[JobKind] = &[JobKind::Job, JobKind::PyTorchJob];

#[test]
fn a_member_without_the_jobs_kind_is_never_chosen() {
    // member-a is emptier by name order and capacity alike, but has no PyTorchJob CRD.
    let mut s = scheduler(&[
        member("member-a", &[JobKind::Job], &[]),
        member("member-b", TORCH, &[]),
    ]);
    let Submitted::Queued(id) = s.submit(&pytorch("p", None), 0) else {
        panic!("queued")
    };
    assert_eq!(admitted(&s.cycle(), id).as_deref(), Some("member-b"));
}

#[test]
fn a_member_without_the_pods_priority_class_is_never_chosen() {
    let mut s = scheduler(&[
        member("member-a", TORCH, &[]),
        member("member-b", TORCH, &["other"]),
        member("member-c", TORCH, &["team-high"]),
    ]);
    let Submitted::Queued(id) = s.submit(&pytorch("p", Some("team-high")), 0) else {
        panic!("queued")
    };
    assert_eq!(admitted(&s.cycle(), id).as_deref(), Some("member-c"));
    // Jobs naming no PriorityClass go anywhere: each fills a member (2 × 4 GPUs).
    s.finish(id);
    let ids: Vec<JobId> = (0..3)
        .map(
            |i| match s.submit(&pytorch_gpus(&format!("q{i}"), None, 4), 0) {
                Submitted::Queued(id) => id,
                other => panic!("queued, not {other:?}"),
            },
        )
        .collect();
    let d: Vec<Decision> = (0..3).flat_map(|_| s.cycle()).collect();
    let mut on: Vec<String> = ids.iter().filter_map(|&id| admitted(&d, id)).collect();
    on.sort();
    assert_eq!(on, ["member-a", "member-b", "member-c"]);
}

#[test]
fn a_job_no_member_can_create_waits_with_each_members_reason_until_one_can() {
    let mut s = scheduler(&[
        member("member-a", TORCH, &[]),
        member("member-b", &[JobKind::Job], &["team-high"]),
    ]);
    let id = match s.submit(&pytorch("p", Some("team-high")), 0) {
        Submitted::Inadmissible(id, why) => {
            assert_eq!(
                why,
                "no member can create it: no PriorityClass team-high on member-a; member-b does not serve PyTorchJob"
            );
            id
        }
        other => panic!("inadmissible, not {other:?}"),
    };
    assert!(admitted(&s.cycle(), id).is_none());
    let text = s.explain(id).to_string();
    for line in [
        "member-a: cannot create it: no PriorityClass team-high on member-a",
        "member-b: cannot create it: member-b does not serve PyTorchJob",
    ] {
        assert!(text.contains(line), "{line:?} in {text}");
    }
    // The PriorityClass is created on member-a: the job is admitted there.
    s.set_cluster(&member("member-a", TORCH, &["team-high"]));
    assert_eq!(*s.state(id), JobState::Pending);
    assert_eq!(admitted(&s.cycle(), id).as_deref(), Some("member-a"));
}

#[test]
fn a_member_whose_kind_goes_away_is_no_longer_chosen() {
    let mut s = scheduler(&[
        member("member-a", TORCH, &[]),
        member("member-b", TORCH, &[]),
    ]);
    let Submitted::Queued(first) = s.submit(&pytorch("p", None), 0) else {
        panic!("queued")
    };
    assert_eq!(admitted(&s.cycle(), first).as_deref(), Some("member-a"));
    s.finish(first);
    // The PyTorchJob CRD is removed from member-a.
    s.set_cluster(&member("member-a", &[JobKind::Job], &[]));
    let Submitted::Queued(next) = s.submit(&pytorch("q", None), 1) else {
        panic!("queued")
    };
    assert_eq!(admitted(&s.cycle(), next).as_deref(), Some("member-b"));
}

#[test]
fn unknown_serves_refuses_nothing() {
    let needs = |kind: JobKind, classes: &[&str]| Needs {
        kind,
        pod_priority_classes: classes.iter().map(|c| c.to_string()).collect(),
        runtime: None,
    };
    let open = Serves::default();
    assert_eq!(open.refuses("m", &needs(JobKind::MPIJob, &["x"])), None);
    let some = Serves {
        kinds: None,
        priority_classes: Some(["x".to_string(), "y".to_string()].into_iter().collect()),
        runtimes: None,
        stalled: Default::default(),
    };
    assert_eq!(some.refuses("m", &needs(JobKind::MPIJob, &["x"])), None);
    assert_eq!(
        some.refuses("m", &needs(JobKind::Job, &["a", "b"]))
            .as_deref(),
        Some("no PriorityClasses a, b on m")
    );
}

#[test]
fn a_scenarios_serves_are_what_the_core_checks_and_a_snapshot_keeps_them() {
    let text = r#"
clusters:
- name: member-a
  serves: {kinds: [Job]}
  nodes: [{name: a, allocatable: {cpu: '16', nvidia.com/gpu: '8'}}]
- name: member-b
  serves: {kinds: [Job, PyTorchJob], priorityClasses: [team-high]}
  nodes: [{name: b, allocatable: {cpu: '16', nvidia.com/gpu: '8'}}]
priorityClasses: {team-high: 100}
jobs:
- at: 0s
  runFor: 60s
  manifest:
    apiVersion: kubeflow.org/v1
    kind: PyTorchJob
    metadata: {name: p, namespace: team}
    spec:
      pytorchReplicaSpecs:
        Worker:
          replicas: 2
          template:
            spec:
              priorityClassName: team-high
              containers: [{name: pytorch, image: x, resources: {limits: {nvidia.com/gpu: 1}}}]
"#;
    let sc = crate::sim::parse_scenario("serves", text).expect("reads");
    let r = crate::sim::run("serves", &sc, &mut ()).expect("runs");
    assert_eq!(r.jobs[0].cluster.as_deref(), Some("member-b"));
    let again = serde_yaml::to_string(&sc).expect("writes");
    assert!(again.contains("priorityClasses:"), "{again}");
    let back = crate::sim::parse_scenario("again", &again).expect("reads back");
    assert_eq!(back.clusters, sc.clusters);
    // An unknown kind name is an error naming the field.
    let bad = text.replace("kinds: [Job]}", "kinds: [Jobb]}");
    let e = crate::sim::parse_scenario("bad", &bad)
        .expect_err("Jobb is no kind")
        .to_string();
    assert!(e.contains("clusters[0].serves.kinds"), "{e}");
}

#[test]
fn a_kind_whose_operator_does_not_act_is_refused_and_no_other() {
    let needs = |kind: JobKind| Needs {
        kind,
        pod_priority_classes: Default::default(),
        runtime: None,
    };
    let why = "m's MPIJob operator does not act: ns/j has had no status and no pod for 31s";
    let serves = Serves {
        stalled: [(JobKind::MPIJob, why.to_string())].into_iter().collect(),
        ..Default::default()
    };
    assert!(!serves.is_unknown());
    assert_eq!(
        serves.refuses("m", &needs(JobKind::MPIJob)).as_deref(),
        Some(why)
    );
    assert_eq!(serves.refuses("m", &needs(JobKind::Job)), None);
    // In the core: a stalled member is no candidate for that kind, and says why.
    let mut a = member("member-a", TORCH, &[]);
    a.serves.stalled = [(
        JobKind::PyTorchJob,
        "member-a's PyTorchJob operator does not act".to_string(),
    )]
    .into_iter()
    .collect();
    let mut s = scheduler(&[a, member("member-b", TORCH, &[])]);
    let Submitted::Queued(id) = s.submit(&pytorch("p", None), 0) else {
        panic!("queued")
    };
    let text = s.explain(id).to_string();
    assert!(
        text.contains("member-a: cannot create it: member-a's PyTorchJob operator does not act"),
        "{text}"
    );
    assert_eq!(admitted(&s.cycle(), id).as_deref(), Some("member-b"));
}

fn waits_of(d: &[Decision], id: JobId) -> usize {
    d.iter()
        .filter(|d| matches!(d, Decision::Wait { job, .. } if *job == id))
        .count()
}

/// A job whose pods fit no candidate member, and where nothing was freed since it last waited,
/// is not visited again when capacity is freed on a member that is no candidate for it: no new
/// `Wait`, the reason it was given stays; once its own member frees room it is admitted.
#[test]
fn a_job_certain_to_wait_is_not_visited_again() {
    let mut s = scheduler(&[
        member("member-a", TORCH, &[]),
        member("member-b", &[JobKind::Job], &[]),
    ]);
    let Submitted::Queued(a) = s.submit(&pytorch_gpus("a", None, 4), 0) else {
        panic!("queued")
    };
    assert_eq!(admitted(&s.cycle(), a).as_deref(), Some("member-a"));
    let Submitted::Queued(b) = s.submit(&pytorch_gpus("b", None, 4), 1) else {
        panic!("queued")
    };
    assert_eq!(waits_of(&s.cycle(), b), 1, "its first visit waits");
    let reason = s.reason(b).expect("a reason");
    // Batch Jobs come and go on member-b, which cannot create PyTorchJobs.
    for i in 0..3 {
        let x = interpret(&serde_json::json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": format!("x{i}"), "namespace": "team"},
            "spec": {"template": {"spec": {"containers": [{"name": "x", "image": "x",
                "resources": {"limits": {"cpu": "1", "nvidia.com/gpu": 8}}}]}}}
        }))
        .expect("reads");
        let Submitted::Queued(x) = s.submit(&x, 2 + i) else {
            panic!("queued")
        };
        let d = s.cycle();
        assert_eq!(admitted(&d, x).as_deref(), Some("member-b"));
        assert_eq!(waits_of(&d, b), 0);
        super::pass_tests::released_and_left_asleep(&mut s, x, b, &reason);
    }
    s.finish(a);
    assert_eq!(admitted(&s.cycle(), b).as_deref(), Some("member-a"));
}
