//! Unit tests of `metrics`: what each family exports for a scheduler state and the
//! transitions a driver records.

use super::*;
use crate::fleet::{ClusterInfo, NodeInfo};
use crate::quantity::Quantity;
use crate::scheduler::{Config, Submitted};
use crate::workload::interpret;

fn cluster(name: &str, nodes: usize) -> ClusterInfo {
    ClusterInfo {
        name: name.into(),
        nodes: (0..nodes)
            .map(|i| NodeInfo {
                name: format!("{name}-{i}"),
                allocatable: [("cpu", "4"), ("memory", "8Gi"), ("nvidia.com/gpu", "2")]
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), Quantity::parse(v).expect("quantity")))
                    .collect(),
                ready: true,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

fn submit(s: &mut Scheduler, name: &str, gpus: u32) -> Submitted {
    let w = interpret(&serde_json::json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": "team"},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x",
            "resources": {"limits": {"cpu": "500m", "memory": "1536Mi",
                                     "nvidia.com/gpu": gpus}}}]}}}
    }))
    .expect("job");
    s.submit(&w, 0)
}

/// The value of the line `series value` of the exposition, if any.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[test]
fn gauges_in_base_units_and_gone_when_their_subject_is() {
    let m = Metrics::new();
    let mut s = Scheduler::new(Config::default());
    s.set_cluster(&cluster("a", 2));
    s.set_cluster(&cluster("b", 1));
    let Submitted::Queued(running) = submit(&mut s, "x", 2) else {
        panic!("x is queued")
    };
    assert!(matches!(
        submit(&mut s, "y", 4),
        Submitted::Inadmissible(..)
    ));
    s.cycle();
    m.observe(&s);
    let t = m.encode();
    // Without a tree every namespace is its own queue; y (4 GPUs) fits no node.
    assert_eq!(
        value(
            &t,
            r#"muster_pending_jobs{priority="0",queue="team",status="inadmissible"}"#
        ),
        Some(1.0),
        "{t}"
    );
    // x goes to the member with the least free GPUs: b.
    assert_eq!(
        value(
            &t,
            r#"muster_admitted_active_jobs{cluster="b",queue="team"}"#
        ),
        Some(1.0),
        "{t}"
    );
    assert_eq!(
        value(&t, r#"muster_cluster_free{cluster="b",resource="cpu"}"#),
        Some(3.5),
        "cores"
    );
    assert_eq!(
        value(&t, r#"muster_cluster_free{cluster="b",resource="memory"}"#),
        Some((8.0 * 1024.0 - 1536.0) * 1024.0 * 1024.0),
        "bytes"
    );
    let gpu = |c: &str, m: &str| {
        value(
            &t,
            &format!(r#"muster_cluster_{m}{{cluster="{c}",resource="nvidia.com/gpu"}}"#),
        )
    };
    assert_eq!(gpu("b", "free"), Some(0.0));
    assert_eq!(gpu("a", "free"), Some(4.0));
    assert_eq!(gpu("a", "largest_free"), Some(2.0), "2 nodes x 2 GPUs");
    assert_eq!(gpu("a", "allocatable"), Some(4.0));
    assert!(
        !t.contains("muster_quota_"),
        "no tree, no quota series: {t}"
    );
    // The job finishes and a member becomes unreachable.
    s.finish(running);
    s.set_reachable("b", false);
    s.cycle();
    m.observe(&s);
    let t = m.encode();
    assert!(!t.contains("muster_admitted_active_jobs{"), "{t}");
    assert_eq!(
        value(&t, r#"muster_cluster_reachable{cluster="b"}"#),
        Some(0.0)
    );
    // Another core without member b and without jobs: b's series and the queue disappear.
    let mut other = Scheduler::new(Config::default());
    other.set_cluster(&cluster("a", 1));
    m.observe(&other);
    let t = m.encode();
    assert!(!t.contains(r#"cluster="b""#), "{t}");
    assert!(!t.contains("muster_pending_jobs{"), "{t}");
    assert_eq!(value(&t, r#"muster_cluster_nodes{cluster="a"}"#), Some(1.0));
}

#[test]
fn topology_levels_count_domains_and_their_largest_free() {
    let m = Metrics::new();
    let mut s = Scheduler::new(Config::default());
    // Racks: a-0 and a-1 in r1, a-2 in r2; a-3 has no rack label (in no domain).
    let mut c = cluster("a", 4);
    c.topology = vec!["example.com/rack".into()];
    for (n, rack) in c.nodes.iter_mut().zip(["r1", "r1", "r2"]) {
        n.labels.insert("example.com/rack".into(), rack.into());
    }
    s.set_cluster(&c);
    s.set_cluster(&cluster("b", 1));
    let Submitted::Queued(_) = submit(&mut s, "x", 2) else {
        panic!("x is queued")
    };
    s.cycle();
    m.observe(&s);
    let t = m.encode();
    let series =
        |m: &str| format!(r#"muster_cluster_topology_{m}{{cluster="a",level="example.com/rack"#);
    assert_eq!(
        value(&t, &format!(r#"{}"}}"#, series("domains"))),
        Some(2.0),
        "{t}"
    );
    // x takes member b (least free); rack r1 keeps 2 nodes x 2 GPUs, r2 one node.
    assert_eq!(
        value(
            &t,
            &format!(r#"{}",resource="nvidia.com/gpu"}}"#, series("largest_free"))
        ),
        Some(4.0),
        "{t}"
    );
    assert_eq!(
        value(
            &t,
            &format!(r#"{}",resource="cpu"}}"#, series("largest_free"))
        ),
        Some(8.0),
        "{t}"
    );
    assert!(
        !t.contains(r#"muster_cluster_topology_domains{cluster="b""#),
        "b has no levels: {t}"
    );
    // Without levels the series disappear.
    s.set_cluster(&cluster("a", 4));
    m.observe(&s);
    assert!(!m.encode().contains("muster_cluster_topology_"));
}

#[test]
fn a_controller_can_share_it_between_tasks() {
    fn shared<T: Send + Sync + 'static>() {}
    shared::<Metrics>();
}

#[test]
fn counters_and_histograms_accumulate_with_fixed_label_sets() {
    let m = Metrics::new();
    m.admitted("root/a", "m1");
    m.admitted("root/a", "m1");
    m.dispatched("root/a", "m1");
    m.preempted("root/a", "m1");
    m.requeued("root/a", RequeueReason::Preempted);
    m.requeued("root/a", RequeueReason::StuckPods);
    m.finished("root/a", "m1", Outcome::Failed);
    m.dispatch_error("m1", DispatchFailure::Refused);
    m.rejected("root/b");
    m.submitted("root/b");
    m.wait_time("root/a", 90.0);
    m.wait_time("root/a", 4000.0);
    m.cycle_duration(0.002);
    m.pass_duration(0.25);
    m.pass_duration(0.5);
    let t = m.encode();
    for (series, v) in [
        (
            r#"muster_admitted_jobs_total{cluster="m1",queue="root/a"}"#,
            2.0,
        ),
        (
            r#"muster_dispatched_jobs_total{cluster="m1",queue="root/a"}"#,
            1.0,
        ),
        (
            r#"muster_preempted_jobs_total{cluster="m1",queue="root/a"}"#,
            1.0,
        ),
        (
            r#"muster_requeued_jobs_total{queue="root/a",reason="preempted"}"#,
            1.0,
        ),
        (
            r#"muster_requeued_jobs_total{queue="root/a",reason="stuck_pods"}"#,
            1.0,
        ),
        (
            r#"muster_finished_jobs_total{cluster="m1",outcome="failed",queue="root/a"}"#,
            1.0,
        ),
        (
            r#"muster_dispatch_errors_total{cluster="m1",reason="refused"}"#,
            1.0,
        ),
        (r#"muster_rejected_jobs_total{queue="root/b"}"#, 1.0),
        (r#"muster_submitted_jobs_total{queue="root/b"}"#, 1.0),
        (
            r#"muster_admission_wait_time_seconds_bucket{queue="root/a",le="120"}"#,
            1.0,
        ),
        (
            r#"muster_admission_wait_time_seconds_bucket{queue="root/a",le="7200"}"#,
            2.0,
        ),
        (
            r#"muster_admission_wait_time_seconds_sum{queue="root/a"}"#,
            4090.0,
        ),
        (
            r#"muster_admission_cycle_duration_seconds_bucket{le="0.001"}"#,
            0.0,
        ),
        (
            r#"muster_admission_cycle_duration_seconds_bucket{le="0.0025"}"#,
            1.0,
        ),
        ("muster_admission_cycle_duration_seconds_count", 1.0),
        ("muster_sync_pass_duration_seconds_count", 2.0),
        ("muster_sync_pass_duration_seconds_sum", 0.75),
    ] {
        assert_eq!(value(&t, series), Some(v), "{series} in\n{t}");
    }
    // Observing a core leaves the counters alone.
    m.observe(&Scheduler::new(Config::default()));
    let t = m.encode();
    assert_eq!(
        value(
            &t,
            r#"muster_admitted_jobs_total{cluster="m1",queue="root/a"}"#
        ),
        Some(2.0)
    );
}
