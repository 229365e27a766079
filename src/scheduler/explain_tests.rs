//! Unit tests of `scheduler::explain`: what a waiting job is shown (its reason, the quota
//! path, each member's verdict per node, the fair-sharing lines).

use super::*;
use crate::fleet::{ClusterInfo, NodeInfo};
use crate::quota::QuotaTree;
use crate::scheduler::{Config, Decision, Submitted};
use crate::workload::{Workload, interpret};
use k8s_openapi::api::core::v1::Taint;

fn q(s: &str) -> Quantity {
    Quantity::parse(s).expect("test quantity")
}

fn node(name: &str, alloc: &[(&str, &str)]) -> NodeInfo {
    NodeInfo {
        name: name.into(),
        allocatable: alloc.iter().map(|(k, v)| (k.to_string(), q(v))).collect(),
        ready: true,
        ..Default::default()
    }
}

fn cluster(name: &str, nodes: usize, gpus: &str) -> ClusterInfo {
    ClusterInfo {
        name: name.into(),
        nodes: (0..nodes)
            .map(|i| {
                node(
                    &format!("{name}-{i}"),
                    &[("cpu", "16"), ("nvidia.com/gpu", gpus), ("pods", "110")],
                )
            })
            .collect(),
        ..Default::default()
    }
}

fn pytorch(
    ns: &str,
    name: &str,
    workers: u32,
    gpus: u32,
    annotations: &[(&str, &str)],
) -> Workload {
    let ann: serde_json::Map<String, serde_json::Value> = annotations
        .iter()
        .map(|(k, v)| (k.to_string(), serde_json::Value::from(*v)))
        .collect();
    interpret(&serde_json::json!({
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": ns, "annotations": ann},
        "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": workers, "template": {"spec": {
            "containers": [{"name": "w", "image": "x",
                "resources": {"limits": {"cpu": "1", "nvidia.com/gpu": gpus}}}]}}}}}
    }))
    .expect("test job")
}

fn queued(s: &mut Scheduler, w: &Workload, at: u64) -> JobId {
    match s.submit(w, at) {
        Submitted::Queued(id) => id,
        other => panic!("not queued: {other:?}"),
    }
}

fn pending(e: &Explanation) -> &Pending {
    match &e.status {
        Status::Pending(p) => p,
        other => panic!("not pending: {other:?}"),
    }
}

fn no_fit<'a>(p: &'a [ClusterFit], cluster: &str) -> &'a [ComponentFit] {
    match &p
        .iter()
        .find(|c| c.cluster == cluster)
        .expect("cluster")
        .fit
    {
        Fit::NoFit { components, .. } => components,
        other => panic!("{cluster}: {other:?}"),
    }
}

fn short(c: &ComponentFit) -> &[Short] {
    match &c.problem {
        Some(ComponentProblem::Short { short }) => short,
        other => panic!("{other:?}"),
    }
}

fn tree(root_max: &str, leaf_min: &str, leaf_max: &str) -> QuotaTree {
    QuotaTree::parse(&serde_json::json!({
        "apiVersion": "scheduling.sigs.k8s.io/v1beta1", "kind": "ElasticQuotaTree",
        "spec": {"root": {"name": "root", "max": {"nvidia.com/gpu": root_max}, "children": [
            {"name": "team", "namespaces": ["team"],
             "min": {"nvidia.com/gpu": leaf_min}, "max": {"nvidia.com/gpu": leaf_max}},
            {"name": "other", "namespaces": ["other"]}]}}
    }))
    .expect("test tree")
}

#[test]
fn per_node_shortage_names_resource_need_and_best_node_per_cluster() {
    let mut s = Scheduler::new(Config::default());
    s.set_cluster(&cluster("a", 1, "2"));
    s.set_cluster(&cluster("b", 3, "2"));
    s.set_cluster(&cluster("c", 1, "8"));
    let used = [("nvidia.com/gpu".to_string(), q("7"))]
        .into_iter()
        .collect();
    s.set_external_usage("c", "c-0", &used);
    let id = queued(&mut s, &pytorch("team", "j", 2, 3, &[]), 0);
    s.cycle();
    let e = s.explain(id);
    let p = pending(&e);
    assert_eq!(p.ahead, 0);
    assert_eq!(p.quota, None, "no tree: nothing limited");
    for (c, free, node) in [("a", "2", "a-0"), ("b", "2", "b-0"), ("c", "1", "c-0")] {
        let comps = no_fit(&p.clusters, c);
        assert_eq!(comps.len(), 1);
        assert_eq!(comps[0].component, "worker");
        assert_eq!(
            short(&comps[0]),
            [Short {
                resource: "nvidia.com/gpu".into(),
                need: q("3"),
                best_free: q(free),
                node: node.into(),
            }]
        );
    }
    let text = e.to_string();
    assert!(
            text.contains(
                "  b: worker: each pod needs nvidia.com/gpu 3 on one node; the most free on any node is 2 (node b-0)\n"
            ),
            "{text}"
        );
    assert!(
        text.contains("(node c-0)") && text.contains("is 1 (node c-0)"),
        "{text}"
    );
    assert!(
        e.summary()
            .starts_with("waiting: no member cluster fits it now: a: worker")
    );
    assert!(e.summary().len() <= SUMMARY_MAX);
}

#[test]
fn quota_rows_show_usage_request_min_max_at_every_level() {
    let mut s = Scheduler::new(Config::default());
    s.set_cluster(&cluster("m", 1, "16"));
    s.set_quota_tree(Some(tree("4", "1", "6")));
    let first = queued(&mut s, &pytorch("other", "first", 1, 3, &[]), 0);
    let second = queued(&mut s, &pytorch("team", "second", 1, 2, &[]), 1);
    s.cycle();
    assert!(matches!(s.explain(first).status, Status::Admitted(_)));
    let e = s.explain(second);
    let p = pending(&e);
    let gpu_rows: Vec<&QuotaRow> = p
        .quota
        .as_ref()
        .expect("tree")
        .iter()
        .filter(|r| r.resource == "nvidia.com/gpu")
        .collect();
    assert_eq!(
        gpu_rows,
        [
            &QuotaRow {
                node: "root/team".into(),
                resource: "nvidia.com/gpu".into(),
                used: q("0"),
                request: q("2"),
                min: q("1"),
                max: Some(q("6")),
                fits: true,
                borrows: true,
            },
            &QuotaRow {
                node: "root".into(),
                resource: "nvidia.com/gpu".into(),
                used: q("3"),
                request: q("2"),
                min: q("0"),
                max: Some(q("4")),
                fits: false,
                borrows: true,
            },
        ]
    );
    let rows = p.quota.as_ref().expect("tree");
    let names: Vec<&str> = rows.iter().map(|r| r.resource.as_str()).collect();
    assert_eq!(
        names,
        [
            "cpu",
            "kube-queue/max-jobs",
            "nvidia.com/gpu",
            "pods",
            "cpu",
            "kube-queue/max-jobs",
            "nvidia.com/gpu",
            "pods"
        ]
    );
    assert_eq!(p.quota_block().map(|r| r.node.as_str()), Some("root"));
    // The fleet has room: it would fit now, quota aside.
    assert!(matches!(&p.clusters[0].fit, Fit::Fits { nodes, .. } if nodes.get("m-0") == Some(&1)));
    let text = e.to_string();
    assert!(
        text.contains(
            "root/team  nvidia.com/gpu  0 + 2 = 2 of max 6, min 1: ok, borrows 1 above min\n"
        ),
        "{text}"
    );
    assert!(
        text.contains("root       nvidia.com/gpu  3 + 2 = 5 of max 4: OVER MAX by 1\n"),
        "{text}"
    );
    assert!(
        text.contains("not limited on its path: cpu, kube-queue/max-jobs, pods\n"),
        "{text}"
    );
    assert_eq!(
        e.summary(),
        "waiting: quota root: nvidia.com/gpu 3 in use + 2 requested = 5, above max 4"
    );
}

#[test]
fn above_a_max_is_inadmissible_with_the_numbers() {
    let mut s = Scheduler::new(Config::default());
    s.set_cluster(&cluster("m", 1, "16"));
    s.set_quota_tree(Some(tree("16", "1", "4")));
    let Submitted::Inadmissible(id, _) = s.submit(&pytorch("team", "huge", 5, 1, &[]), 0) else {
        panic!("should be inadmissible")
    };
    let e = s.explain(id);
    let Status::Inadmissible(i) = &e.status else {
        panic!("{e:?}")
    };
    assert_eq!(
        i.quota,
        Some(QuotaLimit {
            node: "root/team".into(),
            resource: "nvidia.com/gpu".into(),
            request: q("5"),
            max: q("4"),
        })
    );
    let text = e.to_string();
    assert!(
        text.contains(
            "quota root/team: this job alone asks nvidia.com/gpu 5, above its max 4 by 1"
        ),
        "{text}"
    );
    // It would fit the (empty) cluster: no cluster section.
    assert!(!text.contains("Member clusters"), "{text}");
    assert!(e.summary().starts_with(
        "can never run: requests nvidia.com/gpu 5 but quota root/team allows at most 4"
    ));
}

#[test]
fn never_fits_even_empty_shows_each_member_empty() {
    let mut s = Scheduler::new(Config::default());
    s.set_cluster(&cluster("a", 2, "2"));
    s.set_cluster(&cluster("c", 1, "8"));
    // Restricted to a: 3 pods x 2 GPU, a's two nodes hold 2 of them.
    let w = pytorch("team", "wide", 3, 2, &[("muster.dev/clusters", "a")]);
    let Submitted::Inadmissible(id, _) = s.submit(&w, 0) else {
        panic!("should be inadmissible")
    };
    let e = s.explain(id);
    let Status::Inadmissible(i) = &e.status else {
        panic!("{e:?}")
    };
    assert_eq!(i.quota, None);
    assert!(i.clusters.iter().any(|c| c.cluster == "c" && c.excluded));
    let comps = no_fit(&i.clusters, "a");
    assert_eq!(
        comps[0].problem,
        Some(ComponentProblem::TooFew {
            room: 2,
            nodes: [("a-0".to_string(), 1), ("a-1".to_string(), 1)]
                .into_iter()
                .collect(),
        })
    );
    let text = e.to_string();
    assert!(text.contains("  a: worker: needs 3 pods (cpu 1, nvidia.com/gpu 2 each); the free nodes hold only 2 (a-0: 1 pod, a-1: 1 pod)\n"), "{text}");
    assert!(
        text.contains("  c: excluded by the job's cluster restriction\n"),
        "{text}"
    );
}

#[test]
fn admitted_names_cluster_and_nodes() {
    let mut s = Scheduler::new(Config::default());
    s.set_cluster(&cluster("b", 3, "2"));
    let id = queued(&mut s, &pytorch("team", "j", 3, 2, &[]), 0);
    s.cycle();
    let e = s.explain(id);
    assert_eq!(
        e.status,
        Status::Admitted(Admitted {
            cluster: "b".into(),
            placement: PlacementMode::Gates,
            nodes: [("b-0", 1), ("b-1", 1), ("b-2", 1)]
                .into_iter()
                .map(|(n, k)| (n.to_string(), k))
                .collect(),
            domain: None,
            waited: None,
        })
    );
    assert_eq!(
        e.summary(),
        "admitted to b (b-0: 1 pod, b-1: 1 pod, b-2: 1 pod)"
    );
    assert_eq!(
        e.to_string(),
        "team/j: admitted to b (queue team, priority 0).\n\
             \x20 planned nodes: b-0: 1 pod, b-1: 1 pod, b-2: 1 pod\n\
             \x20 placement: per pod (scheduling gates)\n"
    );
    s.finish(id);
    assert_eq!(s.explain(id).to_string(), "team/j: finished.\n");
}

/// master 1 GPU + 3 workers of 1 GPU: on two 2-GPU nodes they fit only by sharing one,
/// which a member pinning by node set does not do.
#[test]
fn members_say_how_they_hold_pods_to_the_plan() {
    let mut s = Scheduler::new(Config::default());
    s.set_cluster(&cluster("g", 2, "2"));
    let mut p = cluster("p", 2, "2");
    p.placement = PlacementMode::Pinned;
    s.set_cluster(&p);
    let template = serde_json::json!({"spec": {"containers": [{"name": "w", "image": "x",
            "resources": {"limits": {"cpu": "1", "nvidia.com/gpu": 1}}}]}});
    let job = |name: &str| {
        interpret(&serde_json::json!({
            "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": "team"},
            "spec": {"pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": template},
                "Worker": {"replicas": 3, "template": template}}}
        }))
        .expect("test job")
    };
    let first = queued(&mut s, &job("first"), 0);
    let second = queued(&mut s, &job("second"), 0);
    s.cycle();
    let Status::Admitted(a) = s.explain(first).status else {
        panic!("first not admitted")
    };
    assert_eq!(
        (a.cluster.as_str(), a.placement),
        ("g", PlacementMode::Gates)
    );
    let e = s.explain(second);
    let p = pending(&e);
    let fit = |name: &str| {
        p.clusters
            .iter()
            .find(|c| c.cluster == name)
            .expect("cluster")
    };
    assert_eq!(fit("g").placement, PlacementMode::Gates);
    assert_eq!(fit("p").placement, PlacementMode::Pinned);
    let text = e.to_string();
    assert!(
        text.contains(
            "  p: places pods by node set only (pinned mode): no plan keeps master and worker \
                 on separate nodes (they fit together only by sharing a node)\n\
                 \x20   placement: pinned by node set (robust plans only)\n"
        ),
        "{text}"
    );
    assert!(
        text.contains("\n    placement: per pod (scheduling gates)\n  p: "),
        "{text}"
    );
    let json = serde_json::to_value(&e).expect("serializes");
    let clusters = &json["status"]["clusters"];
    assert_eq!(clusters[0]["placement"], "gates");
    assert_eq!(clusters[1]["placement"], "pinned");
}

#[test]
fn unreachable_excluded_and_tainted_members() {
    let mut s = Scheduler::new(Config::default());
    s.set_cluster(&cluster("a", 1, "8"));
    s.set_cluster(&cluster("b", 1, "8"));
    let mut t = cluster("t", 2, "8");
    t.nodes[0].taints.push(Taint {
        key: "dedicated".into(),
        value: Some("infer".into()),
        effect: "NoSchedule".into(),
        ..Default::default()
    });
    t.nodes[1].unschedulable = true;
    s.set_cluster(&t);
    s.set_cluster(&cluster("x", 1, "8"));
    s.set_reachable("a", false);
    let used = [("nvidia.com/gpu".to_string(), q("8"))]
        .into_iter()
        .collect();
    s.set_external_usage("b", "b-0", &used);
    let w = pytorch("team", "j", 1, 1, &[("muster.dev/clusters", "a,b,t")]);
    let id = queued(&mut s, &w, 0);
    s.cycle();
    let e = s.explain(id);
    let p = pending(&e);
    let a = &p.clusters[0];
    assert_eq!(
        (a.cluster.as_str(), a.reachable, a.excluded, &a.fit),
        ("a", false, false, &Fit::NotTried)
    );
    let x = &p.clusters[3];
    assert_eq!((x.cluster.as_str(), x.excluded), ("x", true));
    let tc = no_fit(&p.clusters, "t");
    assert_eq!(tc[0].problem, Some(ComponentProblem::NoNodeAdmits));
    let text = e.to_string();
    assert!(
        text.contains("  a: unreachable; nothing is placed there until it answers\n"),
        "{text}"
    );
    assert!(text.contains("  b: worker: each pod needs nvidia.com/gpu 1 on one node; the most free on any node is 0 (node b-0)\n"), "{text}");
    assert!(text.contains("  t: worker: no node admits its pods (1 node: untolerated taint dedicated=infer:NoSchedule; 1 node: untolerated taint node.kubernetes.io/unschedulable:NoSchedule)\n"), "{text}");
    assert!(
        text.contains("  x: excluded by the job's cluster restriction\n"),
        "{text}"
    );
}

#[test]
fn resources_free_on_different_nodes_do_not_fit_together() {
    let mut s = Scheduler::new(Config::default());
    s.set_cluster(&ClusterInfo {
        name: "m".into(),
        nodes: vec![
            node("cpu-only", &[("cpu", "8")]),
            node("gpu-only", &[("cpu", "500m"), ("nvidia.com/gpu", "4")]),
        ],
        ..Default::default()
    });
    let Submitted::Inadmissible(id, _) = s.submit(&pytorch("team", "j", 1, 1, &[]), 0) else {
        panic!("should be inadmissible")
    };
    let Status::Inadmissible(i) = s.explain(id).status else {
        panic!()
    };
    assert_eq!(
        no_fit(&i.clusters, "m")[0].problem,
        Some(ComponentProblem::NotTogether)
    );
    assert!(s.explain(id).to_string().contains(
            "m: worker: each pod needs cpu 1, nvidia.com/gpu 1 together on one node; no node has all of it free"
        ));
}

#[test]
fn strict_fifo_names_the_head_and_the_position() {
    let mut s = Scheduler::new(Config {
        default_strategy: Strategy::StrictFIFO,
        ..Config::default()
    });
    s.set_cluster(&cluster("m", 1, "4"));
    let filler = queued(&mut s, &pytorch("other", "filler", 1, 2, &[]), 0);
    s.cycle();
    let big = queued(&mut s, &pytorch("team", "big", 1, 4, &[]), 1);
    let small = queued(&mut s, &pytorch("team", "small", 1, 1, &[]), 2);
    s.cycle();
    let e = s.explain(small);
    let p = pending(&e);
    assert_eq!(p.ahead, 1);
    let head = p.blocked_by.as_ref().expect("blocked by the head");
    assert_eq!(head.job, "team/big");
    let big_reason = "no cluster fits: m: worker needs nvidia.com/gpu 4 on one node; the most free on any node is 2";
    assert_eq!(head.reason.as_deref(), Some(big_reason));
    assert!(
        matches!(p.clusters[0].fit, Fit::Fits { .. }),
        "small fits by itself"
    );
    let text = e.to_string();
    assert!(
        text.contains(&format!("\n  team/big waits: {big_reason}\n")),
        "{text}"
    );
    assert_eq!(
        e.summary(),
        "waiting behind team/big in StrictFIFO queue team; by itself it is within quota and fits now on m"
    );
    assert_eq!(pending(&s.explain(big)).blocked_by, None);
    // Capacity freed, no cycle yet: the head fits now and is next.
    s.finish(filler);
    let e = s.explain(big);
    assert_eq!(
        e.summary(),
        "waiting: quota allows it and it fits now on m; the next admission cycle considers it"
    );
    assert!(matches!(s.cycle().first(), Some(Decision::Admit { job, .. }) if *job == big));
}

#[test]
fn jobs_ahead_count_across_shapes_in_the_queue_only() {
    let mut s = Scheduler::new(Config::default());
    s.set_cluster(&cluster("m", 1, "2"));
    s.set_priority_classes([("high".to_string(), 100)].into_iter().collect());
    let filler = queued(&mut s, &pytorch("team", "filler", 1, 2, &[]), 0);
    s.cycle();
    // Different shapes (so different classes) in one BestEffortFIFO queue, and another queue.
    let a = queued(&mut s, &pytorch("team", "a", 1, 1, &[]), 1);
    let b = queued(&mut s, &pytorch("team", "b", 2, 1, &[]), 2);
    let c = queued(&mut s, &pytorch("team", "c", 1, 2, &[]), 3);
    let other = queued(&mut s, &pytorch("other", "x", 1, 1, &[]), 0);
    let mut w = pytorch("team", "urgent", 1, 1, &[]);
    w.priority_class_names.insert("high".into());
    let urgent = queued(&mut s, &w, 4);
    s.cycle();
    let ahead = |id| pending(&s.explain(id)).ahead;
    assert_eq!(
        [ahead(urgent), ahead(a), ahead(b), ahead(c), ahead(other)],
        [0, 1, 2, 3, 0]
    );
    assert!(matches!(s.explain(filler).status, Status::Admitted(_)));
}

#[test]
fn summary_is_bounded() {
    let mut s = Scheduler::new(Config::default());
    for i in 0..30 {
        s.set_cluster(&cluster(&format!("member-{i:02}"), 1, "2"));
    }
    for i in 0..30 {
        let used = [("nvidia.com/gpu".to_string(), q("1"))]
            .into_iter()
            .collect();
        s.set_external_usage(
            &format!("member-{i:02}"),
            &format!("member-{i:02}-0"),
            &used,
        );
    }
    let id = queued(&mut s, &pytorch("team", "j", 1, 2, &[]), 0);
    s.cycle();
    let sum = s.explain(id).summary();
    assert_eq!(sum.len(), SUMMARY_MAX, "{sum}");
    assert!(sum.ends_with("..."));
    assert!(!sum.contains('\n'));
}

/// Explaining every job after every cycle changes no decision.
#[test]
fn explain_changes_nothing() {
    let run = |explain: bool| -> Vec<Vec<Decision>> {
        let mut s = Scheduler::new(Config::default());
        s.set_cluster(&cluster("a", 2, "2"));
        s.set_cluster(&cluster("c", 1, "8"));
        s.set_quota_tree(Some(tree("12", "2", "8")));
        let mut ids = Vec::new();
        let mut out = Vec::new();
        for (i, (w, g)) in [(1, 8), (2, 2), (1, 3), (4, 1), (2, 1), (1, 9)]
            .into_iter()
            .enumerate()
        {
            let ns = if i % 2 == 0 { "team" } else { "other" };
            let name = format!("j{i}");
            if let Submitted::Queued(id) | Submitted::Inadmissible(id, _) =
                s.submit(&pytorch(ns, &name, w, g, &[]), i as u64)
            {
                ids.push(id);
            }
            if explain {
                for &id in &ids {
                    let _ = s.explain(id).to_string();
                }
            }
            out.push(s.cycle());
            if explain {
                for &id in &ids {
                    let _ = s.explain(id).summary();
                }
            }
            if i == 3 {
                s.finish(ids[0]);
            }
        }
        out.push(s.cycle());
        out
    };
    assert_eq!(run(true), run(false));
}
