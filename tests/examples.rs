//! The manifests in `examples/` are what the documentation points users at, so they must be
//! what muster reads: every job in `examples/jobs/` interprets to its kind with the exact pods
//! per component and GPUs the comments in the file claim, and `examples/quota-tree.yaml` is a
//! valid ElasticQuotaTree equal to the quota of the embedded default scenario. Pure: no cluster.

use std::collections::BTreeMap;
use std::path::PathBuf;

use muster::quantity::Quantity;
use muster::quota::QuotaTree;
use muster::workload::{JobKind, TrainingRuntimes, Workload, interpret_with};
use serde_json::Value;

fn path(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(rel)
}

fn yaml(rel: &str) -> Value {
    let text = std::fs::read_to_string(path(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// (file, kind, total pods, pods per component, total nvidia.com/gpu).
type Expected = (
    &'static str,
    JobKind,
    u64,
    &'static [(&'static str, u32)],
    &'static str,
);

const JOBS: &[Expected] = &[
    (
        "pytorchjob.yaml",
        JobKind::PyTorchJob,
        4,
        &[("master", 1), ("worker", 3)],
        "4",
    ),
    (
        "tfjob.yaml",
        JobKind::TFJob,
        4,
        &[("chief", 1), ("ps", 1), ("worker", 2)],
        "3",
    ),
    (
        "xgboostjob.yaml",
        JobKind::XGBoostJob,
        3,
        &[("master", 1), ("worker", 2)],
        "0",
    ),
    (
        "paddlejob.yaml",
        JobKind::PaddleJob,
        2,
        &[("worker", 2)],
        "4",
    ),
    ("jaxjob.yaml", JobKind::JAXJob, 2, &[("worker", 2)], "0"),
    (
        "mpijob.yaml",
        JobKind::MPIJob,
        3,
        &[("launcher", 1), ("worker", 2)],
        "4",
    ),
    ("job.yaml", JobKind::Job, 4, &[("job", 4)], "4"),
    (
        "jobset.yaml",
        JobKind::JobSet,
        5,
        &[("driver", 1), ("workers", 4)],
        "8",
    ),
    (
        "rayjob.yaml",
        JobKind::RayJob,
        4,
        &[("head", 1), ("gpu", 2), ("submitter", 1)],
        "2",
    ),
    (
        "raycluster.yaml",
        JobKind::RayCluster,
        6,
        &[("head", 1), ("gpu", 2), ("cpu", 3)],
        "2",
    ),
    ("trainjob.yaml", JobKind::TrainJob, 2, &[("node", 2)], "4"),
];

/// Kubeflow Trainer's default runtime the TrainJob example names, as a hub would have it.
fn runtimes() -> TrainingRuntimes {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/upstream/trainer-v2.2.0/torch_distributed.yaml");
    let text = std::fs::read_to_string(&p).expect("the runtime");
    let v: Value = serde_yaml::from_str(&text).expect("YAML");
    let mut rt = TrainingRuntimes::default();
    rt.apply(&v).expect("a runtime");
    rt
}

fn load_job(file: &str) -> Workload {
    let rel = format!("jobs/{file}");
    interpret_with(&yaml(&rel), &runtimes()).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

#[test]
fn every_example_job_interprets_to_its_kind_and_pod_count() {
    for &(file, kind, pods, components, gpus) in JOBS {
        let w = load_job(file);
        assert_eq!(w.kind, kind, "{file}");
        assert_eq!(w.pod_count(), pods, "{file}");
        let mut got: Vec<(&str, u32)> = w
            .components
            .iter()
            .map(|c| (c.name.as_str(), c.pods))
            .collect();
        got.sort();
        let mut want = components.to_vec();
        want.sort();
        assert_eq!(got, want, "{file}: components");
        assert_eq!(
            w.total_requests().get("nvidia.com/gpu"),
            Quantity::parse(gpus).unwrap(),
            "{file}: nvidia.com/gpu"
        );
    }
}

#[test]
fn every_file_in_examples_jobs_is_covered_and_every_kind_has_an_example() {
    let mut files: Vec<String> = std::fs::read_dir(path("jobs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    let mut listed: Vec<String> = JOBS.iter().map(|j| j.0.to_string()).collect();
    listed.sort();
    assert_eq!(files, listed);
    for kind in JobKind::ALL {
        assert!(
            JOBS.iter().any(|j| j.1 == kind),
            "no example of {kind} in examples/jobs/"
        );
    }
}

#[test]
fn cluster_annotations_in_the_examples_are_read() {
    let job = load_job("job.yaml");
    let names = job.candidates.names.as_ref().expect("muster.dev/clusters");
    assert_eq!(
        names.iter().map(String::as_str).collect::<Vec<_>>(),
        ["member-b", "member-c"]
    );
    let tf = load_job("tfjob.yaml");
    let sel = tf
        .candidates
        .selector
        .as_ref()
        .expect("muster.dev/cluster-selector");
    let labels = |tier: &str| -> BTreeMap<String, String> {
        [("tier".to_string(), tier.to_string())]
            .into_iter()
            .collect()
    };
    assert!(sel.matches(&labels("large")));
    assert!(sel.matches(&labels("medium")));
    assert!(!sel.matches(&labels("small")));
}

#[test]
fn the_example_quota_tree_parses_and_is_the_default_scenarios() {
    let tree = QuotaTree::parse(&yaml("quota-tree.yaml"))
        .unwrap_or_else(|p| panic!("examples/quota-tree.yaml: {p:?}"));
    assert!(tree.warnings.is_empty(), "{:?}", tree.warnings);
    let paths: Vec<&str> = tree.nodes.iter().map(|n| n.path.as_str()).collect();
    assert_eq!(paths, ["root", "root/research", "root/platform"]);
    assert_eq!(tree.leaf_for("research"), Some(1));
    assert_eq!(tree.leaf_for("platform"), Some(2));

    let default = QuotaTree::parse(&yaml("default.yaml")["quota"])
        .unwrap_or_else(|p| panic!("examples/default.yaml quota: {p:?}"));
    assert_eq!(
        tree, default,
        "examples/quota-tree.yaml and the default scenario's quota differ"
    );
}
