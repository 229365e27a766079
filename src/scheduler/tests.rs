//! Unit tests of the scheduler: slots, external usage, reachability, requeues, topology changes.

use super::*;
use crate::fleet::NodeInfo;
use crate::quantity::Quantity;
use crate::workload::interpret;

fn gpu_cluster(name: &str, nodes: usize, gpus: &str) -> ClusterInfo {
    ClusterInfo {
        name: name.into(),
        nodes: (0..nodes)
            .map(|i| NodeInfo {
                name: format!("{name}-{i}"),
                allocatable: [("cpu", "16"), ("nvidia.com/gpu", gpus), ("pods", "110")]
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), Quantity::parse(v).unwrap()))
                    .collect(),
                ready: true,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

fn job(name: &str, workers: u32, gpus: u32) -> Workload {
    interpret(&serde_json::json!({
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": "team"},
        "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": workers, "template": {"spec": {
            "containers": [{"name": "w", "image": "x",
                "resources": {"limits": {"cpu": "1", "nvidia.com/gpu": gpus}}}]}}}}}
    }))
    .unwrap()
}

fn admitted_on(d: &[Decision], id: JobId) -> Option<String> {
    d.iter().find_map(|d| match d {
        Decision::Admit { job, cluster, .. } if *job == id => Some(cluster.clone()),
        _ => None,
    })
}

/// A driver that forgets finished jobs keeps the job table bounded: the slot goes to the
/// next submission, which is a whole new job there.
#[test]
fn forgotten_slots_are_reused_by_new_jobs() {
    let mut s = Scheduler::new(Config::default());
    s.set_cluster(&gpu_cluster("m", 1, "8"));
    let Submitted::Queued(a) = s.submit(&job("a", 1, 8), 1) else {
        panic!("queued")
    };
    assert_eq!(admitted_on(&s.cycle(), a).as_deref(), Some("m"));
    s.forget(a);
    assert!(!s.free.contains(&a), "an admitted job is not forgotten");
    s.finish(a);
    s.forget(a);
    let Submitted::Queued(b) = s.submit(&job("b", 1, 8), 2) else {
        panic!("queued")
    };
    assert_eq!(b, a, "the slot is reused");
    assert_eq!(s.jobs.len(), 1);
    assert_eq!(s.job_label(b), "team/b");
    assert_eq!(
        admitted_on(&s.cycle(), b).as_deref(),
        Some("m"),
        "the whole node is free again"
    );
}

#[test]
fn external_pods_take_node_capacity() {
    let mut s = Scheduler::new(Config::default());
    s.set_cluster(&gpu_cluster("m", 1, "8"));
    let used: ResourceList = [("nvidia.com/gpu".to_string(), Quantity::from_units(6))]
        .into_iter()
        .collect();
    s.set_external_usage("m", "m-0", &used);
    let Submitted::Queued(id) = s.submit(&job("j", 1, 3), 0) else {
        panic!("not queued")
    };
    let d = s.cycle();
    assert_eq!(admitted_on(&d, id), None);
    let reason = s.reason(id).unwrap_or_default();
    assert!(
        reason.contains("needs nvidia.com/gpu 3 on one node; the most free on any node is 2"),
        "{reason}"
    );
    s.set_external_usage("m", "m-0", &ResourceList::new());
    assert_eq!(admitted_on(&s.cycle(), id).as_deref(), Some("m"));
}

#[test]
fn unreachable_members_get_nothing() {
    let mut s = Scheduler::new(Config::default());
    s.set_cluster(&gpu_cluster("a", 1, "8"));
    s.set_cluster(&gpu_cluster("b", 1, "8"));
    s.set_reachable("a", false);
    s.set_reachable("b", false);
    let Submitted::Queued(id) = s.submit(&job("j", 2, 1), 0) else {
        panic!("not queued")
    };
    assert_eq!(admitted_on(&s.cycle(), id), None);
    assert!(
        s.reason(id)
            .unwrap_or_default()
            .contains("no reachable member")
    );
    s.set_reachable("b", true);
    assert_eq!(admitted_on(&s.cycle(), id).as_deref(), Some("b"));
}

#[test]
fn requeued_job_keeps_its_place_and_reason() {
    let mut s = Scheduler::new(Config::default());
    s.set_cluster(&gpu_cluster("a", 1, "4"));
    let Submitted::Queued(first) = s.submit(&job("first", 1, 4), 0) else {
        panic!("not queued")
    };
    assert!(admitted_on(&s.cycle(), first).is_some());
    let Submitted::Queued(second) = s.submit(&job("second", 1, 4), 10) else {
        panic!("not queued")
    };
    assert_eq!(admitted_on(&s.cycle(), second), None);
    // The first job's pods got stuck: it goes back ahead of the later job.
    s.requeue(first, "pods unschedulable for 10m on a");
    let d = s.cycle();
    assert!(admitted_on(&d, first).is_some(), "{d:?}");
    assert_eq!(admitted_on(&d, second), None);
    assert_eq!(
        s.reason(first).as_deref(),
        Some("pods unschedulable for 10m on a")
    );
    s.finish(first);
    assert!(admitted_on(&s.cycle(), second).is_some());
}

#[test]
fn nodes_added_make_inadmissible_jobs_admissible() {
    let mut s = Scheduler::new(Config::default());
    s.set_cluster(&gpu_cluster("a", 2, "2"));
    let Submitted::Inadmissible(id, reason) = s.submit(&job("wide", 2, 4), 0) else {
        panic!("should be inadmissible")
    };
    assert!(reason.contains("can never fit"), "{reason}");
    s.set_cluster(&gpu_cluster("a", 2, "8"));
    assert_eq!(admitted_on(&s.cycle(), id).as_deref(), Some("a"));
}

/// Whether a job could ever fit is estimated once per pod shape and member (on the member
/// emptied), and again once the member's nodes change: each member keeps its own answer.
#[test]
fn the_empty_estimate_is_kept_per_member_and_its_nodes() {
    let mut s = Scheduler::new(Config::default());
    s.set_cluster(&gpu_cluster("a", 2, "2"));
    s.set_cluster(&gpu_cluster("b", 2, "4"));
    for name in ["wide", "wide-again"] {
        let Submitted::Queued(_) = s.submit(&job(name, 2, 4), 0) else {
            panic!("{name}: 2 x 4 GPUs fit b's nodes")
        };
    }
    let Submitted::Inadmissible(_, reason) = s.submit(&job("wider", 2, 8), 0) else {
        panic!("8 GPUs on one node fit no member")
    };
    assert!(
        reason.contains(
            "a: worker needs nvidia.com/gpu 8 on one node; the most free on any node is 2"
        ) && reason.contains(
            "b: worker needs nvidia.com/gpu 8 on one node; the most free on any node is 4"
        ),
        "each member's own reason: {reason}"
    );
    s.set_cluster(&gpu_cluster("b", 2, "2"));
    let Submitted::Inadmissible(_, reason) = s.submit(&job("wide-late", 2, 4), 0) else {
        panic!("b's nodes have 2 GPUs now")
    };
    assert!(reason.contains("can never fit"), "{reason}");
}

/// master 1 GPU + `workers` of 1 GPU.
fn master_job(name: &str, workers: u32) -> Workload {
    let template = serde_json::json!({"spec": {"containers": [{"name": "w", "image": "x",
        "resources": {"limits": {"cpu": "1", "nvidia.com/gpu": 1}}}]}});
    interpret(&serde_json::json!({
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": "team"},
        "spec": {"pytorchReplicaSpecs": {
            "Master": {"replicas": 1, "template": template},
            "Worker": {"replicas": workers, "template": template}}}
    }))
    .unwrap()
}

fn pinned(mut info: ClusterInfo) -> ClusterInfo {
    info.placement = crate::fleet::PlacementMode::Pinned;
    info
}

#[test]
fn a_change_of_placement_mode_is_a_topology_change() {
    // Two 2-GPU nodes: master and 3 workers fit only by sharing a node.
    let mut s = Scheduler::new(Config::default());
    s.set_cluster(&pinned(gpu_cluster("a", 2, "2")));
    let Submitted::Inadmissible(id, reason) = s.submit(&master_job("shared", 3), 0) else {
        panic!("should be inadmissible")
    };
    assert!(
        reason.contains("a: places pods by node set only (pinned mode)"),
        "{reason}"
    );
    s.set_cluster(&gpu_cluster("a", 2, "2"));
    assert_eq!(admitted_on(&s.cycle(), id).as_deref(), Some("a"));

    // Pending (not inadmissible) on a pinned member: the memoized failure goes with the mode.
    let mut s = Scheduler::new(Config::default());
    s.set_cluster(&pinned(gpu_cluster("b", 3, "2")));
    let used: ResourceList = [("nvidia.com/gpu".to_string(), Quantity::from_units(2))]
        .into_iter()
        .collect();
    s.set_external_usage("b", "b-2", &used);
    let Submitted::Queued(id) = s.submit(&master_job("shared", 3), 0) else {
        panic!("not queued")
    };
    assert_eq!(admitted_on(&s.cycle(), id), None);
    let reason = s.reason(id).unwrap_or_default();
    assert!(reason.contains("pinned mode"), "{reason}");
    assert_eq!(admitted_on(&s.cycle(), id), None);
    s.set_cluster(&gpu_cluster("b", 3, "2"));
    assert_eq!(admitted_on(&s.cycle(), id).as_deref(), Some("b"));
}
