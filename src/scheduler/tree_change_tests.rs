//! Unit tests of the scheduler when the quota tree changes under running jobs.

use super::*;
use crate::fleet::NodeInfo;
use crate::quantity::Quantity;
use crate::workload::interpret;

fn tree(leaves: &[(&str, &str, &str)]) -> QuotaTree {
    let children: Vec<serde_json::Value> = leaves
        .iter()
        .map(|(name, ns, max)| {
            serde_json::json!({"name": name, "namespaces": [ns], "max": {"nvidia.com/gpu": max}})
        })
        .collect();
    QuotaTree::parse(&serde_json::json!({
        "apiVersion": "scheduling.sigs.k8s.io/v1beta1", "kind": "ElasticQuotaTree",
        "spec": {"root": {"name": "root", "children": children}}
    }))
    .unwrap()
}

fn job(ns: &str, name: &str) -> Workload {
    interpret(&serde_json::json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x",
            "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}
    }))
    .unwrap()
}

#[test]
fn a_new_tree_recharges_running_jobs_to_their_new_leaves() {
    let mut s = Scheduler::new(Config::default());
    s.set_cluster(&ClusterInfo {
        name: "m".into(),
        nodes: vec![NodeInfo {
            name: "n".into(),
            allocatable: [("nvidia.com/gpu".to_string(), Quantity::from_units(8))]
                .into_iter()
                .collect(),
            ready: true,
            ..Default::default()
        }],
        ..Default::default()
    });
    s.set_quota_tree(Some(tree(&[("a", "ns-a", "4"), ("b", "ns-b", "4")])));
    let Submitted::Queued(ja) = s.submit(&job("ns-a", "x"), 0) else {
        panic!()
    };
    let Submitted::Queued(jb) = s.submit(&job("ns-b", "y"), 0) else {
        panic!()
    };
    assert_eq!(s.cycle().len(), 2);
    // The leaves swap places in the new tree and b loses its namespace.
    s.set_quota_tree(Some(tree(&[("b2", "other", "4"), ("a", "ns-a", "1")])));
    let q = s.quota().unwrap();
    let gpu = s.table.get("nvidia.com/gpu").unwrap();
    let a = q.tree.leaf_for("ns-a").unwrap();
    assert_eq!(
        q.used_of(a, gpu),
        1000,
        "ns-a's running job is charged to its new leaf"
    );
    assert_eq!(
        q.used_of(0, gpu),
        1000,
        "ns-b's job, now outside the tree, is not charged"
    );
    // Finishing both leaves the new tree at zero, never negative.
    s.finish(ja);
    s.finish(jb);
    let q = s.quota().unwrap();
    assert!(
        q.tree
            .nodes
            .iter()
            .enumerate()
            .all(|(i, _)| q.used_of(i, gpu) == 0)
    );
    // A second job in ns-a is now limited by its new max of 1.
    let Submitted::Queued(j3) = s.submit(&job("ns-a", "z"), 1) else {
        panic!()
    };
    let Submitted::Queued(j4) = s.submit(&job("ns-a", "w"), 2) else {
        panic!()
    };
    let d = s.cycle();
    let admitted: Vec<JobId> = d
        .iter()
        .filter_map(|d| match d {
            Decision::Admit { job, .. } => Some(*job),
            _ => None,
        })
        .collect();
    assert_eq!(admitted, vec![j3]);
    assert!(s.reason(j4).unwrap_or_default().contains("exceeds max 1"));
}
