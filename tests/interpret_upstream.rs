//! Every upstream example manifest in `tests/data/upstream/` interpreted the way its operator
//! would run it: component names, pod counts and effective per-pod requests, read off each file.

use std::path::PathBuf;

use muster::quantity::{Quantity, ResourceList};
use muster::workload::{JobKind, Workload, interpret};
use serde::Deserialize;
use serde_json::Value;

fn data(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/upstream")
        .join(rel)
}

/// All YAML documents of a file (several files put a ConfigMap beside the job).
fn documents(rel: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(data(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap_or_else(|e| panic!("{rel}: {e}")))
        .filter(|v| !v.is_null())
        .collect()
}

/// The one job document of a file; every other document (ConfigMaps) must be refused by kind.
fn job_document(rel: &str) -> Value {
    let mut jobs = Vec::new();
    for doc in documents(rel) {
        if doc["kind"] == "ConfigMap" {
            let e = interpret(&doc).unwrap_err();
            assert_eq!(e.field, "kind", "{rel}: {e}");
        } else {
            jobs.push(doc);
        }
    }
    assert_eq!(jobs.len(), 1, "{rel}: expected exactly one job document");
    jobs.remove(0)
}

fn load(rel: &str) -> Workload {
    interpret(&job_document(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn rl(pairs: &[(&str, &str)]) -> ResourceList {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), Quantity::parse(v).unwrap()))
        .collect()
}

/// Resource pairs as written in a manifest: `[("cpu", "500m"), ("memory", "1Gi")]`.
type Pairs<'a> = &'a [(&'a str, &'a str)];

/// Asserts kind, key and, per component in order, (name, pods, requests).
fn check(rel: &str, kind: JobKind, key: &str, want: &[(&str, u32, Pairs)]) -> Workload {
    let w = load(rel);
    assert_eq!(w.kind, kind, "{rel}");
    assert_eq!(w.key(), key, "{rel}");
    let got: Vec<(String, u32, ResourceList)> = w
        .components
        .iter()
        .map(|c| (c.name.clone(), c.pods, c.requests.clone()))
        .collect();
    let want: Vec<(String, u32, ResourceList)> = want
        .iter()
        .map(|(n, p, r)| (n.to_string(), *p, rl(r)))
        .collect();
    assert_eq!(got, want, "{rel}");
    w
}

const NONE: &[(&str, &str)] = &[];
const GPU1: &[(&str, &str)] = &[("nvidia.com/gpu", "1")];

// ---- kubeflow/training-operator v1.9.0 ----

#[test]
fn training_operator_jax_cpu_demo() {
    check(
        "training-operator-v1.9.0/jax_cpu-demo_demo.yaml",
        JobKind::JAXJob,
        "kubeflow/jaxjob-simple",
        &[("worker", 2, NONE)],
    );
}

#[test]
fn training_operator_mpi_tensorflow_mnist_v1() {
    let w = check(
        "training-operator-v1.9.0/mpi_tensorflow-mnist.yaml",
        JobKind::MPIJob,
        "default/tensorflow-mnist",
        &[
            ("launcher", 1, &[("cpu", "1"), ("memory", "2Gi")]),
            ("worker", 2, &[("cpu", "2"), ("memory", "4Gi")]),
        ],
    );
    assert_eq!(w.api_version, "kubeflow.org/v1");
    assert_eq!(w.total_requests(), rl(&[("cpu", "5"), ("memory", "10Gi")]));
}

#[test]
fn training_operator_paddle() {
    check(
        "training-operator-v1.9.0/paddlepaddle_simple-cpu.yaml",
        JobKind::PaddleJob,
        "kubeflow/paddle-simple-cpu",
        &[("worker", 2, NONE)],
    );
    check(
        "training-operator-v1.9.0/paddlepaddle_simple-gpu.yaml",
        JobKind::PaddleJob,
        "kubeflow/paddle-simple-gpu",
        &[("worker", 2, &[("nvidia.com/gpu", "2")])],
    );
}

#[test]
fn training_operator_pytorch() {
    check(
        "training-operator-v1.9.0/pytorch_cpu-demo_demo.yaml",
        JobKind::PyTorchJob,
        "default/torchrun-cpu",
        &[("master", 1, NONE), ("worker", 1, NONE)],
    );
    check(
        "training-operator-v1.9.0/pytorch_deepspeed-demo_pytorch_deepspeed_demo.yaml",
        JobKind::PyTorchJob,
        "default/pytorch-deepspeed-demo",
        &[("master", 1, GPU1), ("worker", 1, GPU1)],
    );
    check(
        "training-operator-v1.9.0/pytorch_elastic_imagenet_imagenet.yaml",
        JobKind::PyTorchJob,
        "default/elastic-example-imagenet",
        &[("worker", 2, &[("cpu", "4")])],
    );
    check(
        "training-operator-v1.9.0/pytorch_mnist_v1_pytorch_job_mnist_gloo.yaml",
        JobKind::PyTorchJob,
        "default/pytorch-dist-mnist-gloo",
        &[("master", 1, GPU1), ("worker", 1, GPU1)],
    );
    let w = check(
        "training-operator-v1.9.0/pytorch_mnist_v1_pytorch_job_mnist_nccl.yaml",
        JobKind::PyTorchJob,
        "default/pytorch-dist-mnist-nccl",
        &[("master", 1, GPU1), ("worker", 1, GPU1)],
    );
    assert_eq!(w.total_requests(), rl(&[("nvidia.com/gpu", "2")]));
    check(
        "training-operator-v1.9.0/pytorch_simple.yaml",
        JobKind::PyTorchJob,
        "kubeflow/pytorch-simple",
        &[("master", 1, NONE), ("worker", 1, NONE)],
    );
}

#[test]
fn training_operator_tensorflow() {
    check(
        "training-operator-v1.9.0/tensorflow_dist-mnist_tf_job_mnist.yaml",
        JobKind::TFJob,
        "default/dist-mnist-for-e2e-test",
        &[("chief", 1, NONE), ("ps", 1, NONE), ("worker", 2, NONE)],
    );
    check(
        "training-operator-v1.9.0/tensorflow_distribution_strategy_multi_worker_tfjob.yaml",
        JobKind::TFJob,
        "default/multi-worker",
        &[("worker", 2, GPU1)],
    );
    check(
        "training-operator-v1.9.0/tensorflow_simple.yaml",
        JobKind::TFJob,
        "kubeflow/tfjob-simple",
        &[("worker", 2, NONE)],
    );
}

#[test]
fn training_operator_xgboost() {
    for rel in [
        "training-operator-v1.9.0/xgboost_xgboost-dist_xgboostjob_v1_iris_train.yaml",
        "training-operator-v1.9.0/xgboost_xgboostjob.yaml",
    ] {
        let w = check(
            rel,
            JobKind::XGBoostJob,
            "default/xgboost-dist-iris-test-train",
            &[("master", 1, NONE), ("worker", 2, NONE)],
        );
        assert_eq!(w.pod_count(), 3);
    }
}

// ---- kubeflow/mpi-operator v2beta1 ----

#[test]
fn mpi_operator_pi() {
    let w = check(
        "mpi-operator/pi.yaml",
        JobKind::MPIJob,
        "default/pi",
        &[
            ("launcher", 1, &[("cpu", "1"), ("memory", "1Gi")]),
            ("worker", 2, &[("cpu", "1"), ("memory", "1Gi")]),
        ],
    );
    assert_eq!(w.api_version, "kubeflow.org/v2beta1");
}

#[test]
fn mpi_operator_tensorflow() {
    check(
        "mpi-operator/tensorflow-benchmarks.yaml",
        JobKind::MPIJob,
        "default/tensorflow-benchmarks",
        &[("launcher", 1, NONE), ("worker", 2, GPU1)],
    );
    check(
        "mpi-operator/tensorflow-mnist.yaml",
        JobKind::MPIJob,
        "default/tensorflow-mnist",
        &[
            ("launcher", 1, &[("cpu", "1"), ("memory", "2Gi")]),
            ("worker", 2, &[("cpu", "2"), ("memory", "4Gi")]),
        ],
    );
}

// ---- kubernetes-sigs/jobset ----

#[test]
fn jobset_empty_sample_is_rejected() {
    let e = interpret(&job_document("jobset/batch_v1alpha2_jobset.yaml")).unwrap_err();
    assert_eq!(e.field, "spec", "{e}");
}

#[test]
fn jobset_examples() {
    check(
        "jobset/pytorch_cnn-mnist_mnist.yaml",
        JobKind::JobSet,
        "default/pytorch",
        &[("workers", 4, NONE)],
    );
    check(
        "jobset/simple_coordinator.yaml",
        JobKind::JobSet,
        "default/coordinator-example",
        &[("workers", 4, NONE), ("driver", 1, NONE)],
    );
    let w = check(
        "jobset/simple_exclusive-placement.yaml",
        JobKind::JobSet,
        "default/exclusive-placement",
        &[("workers", 9, NONE)],
    );
    assert!(
        w.annotations
            .contains_key("alpha.jobset.sigs.k8s.io/exclusive-topology")
    );
    check(
        "jobset/simple_group.yaml",
        JobKind::JobSet,
        "default/group-example",
        &[("rj-1", 2, NONE), ("rj-2", 2, NONE)],
    );
    check(
        "jobset/simple_paralleljobs.yaml",
        JobKind::JobSet,
        "default/paralleljobs",
        &[("workers", 4, NONE), ("driver", 1, NONE)],
    );
    check(
        "jobset/tensorflow_mnist.yaml",
        JobKind::JobSet,
        "default/tensorflow",
        &[("tensorflow", 2, NONE)],
    );
}

// ---- ray-project/kuberay ----

/// KubeRay's default submitter pod (GetDefaultSubmitterContainer): requests 500m / 200Mi.
const SUBMITTER: &[(&str, &str)] = &[("cpu", "500m"), ("memory", "200Mi")];

#[test]
fn kuberay_cluster_autoscaler() {
    // The head carries the autoscaler sidecar with autoscalerOptions.resources (500m / 512Mi).
    check(
        "kuberay/ray-cluster.autoscaler.yaml",
        JobKind::RayCluster,
        "default/raycluster-autoscaler",
        &[
            ("head", 1, &[("cpu", "1500m"), ("memory", "2560Mi")]),
            ("small-group", 0, &[("cpu", "1"), ("memory", "1Gi")]),
        ],
    );
}

#[test]
fn kuberay_cluster_complete_and_sample() {
    check(
        "kuberay/ray-cluster.complete.yaml",
        JobKind::RayCluster,
        "default/raycluster-complete",
        &[
            ("head", 1, &[("cpu", "500m"), ("memory", "2Gi")]),
            ("small-group", 1, &[("cpu", "500m"), ("memory", "1Gi")]),
        ],
    );
    check(
        "kuberay/ray-cluster.sample.yaml",
        JobKind::RayCluster,
        "default/raycluster-kuberay",
        &[
            ("head", 1, &[("cpu", "1"), ("memory", "5Gi")]),
            ("workergroup", 1, &[("cpu", "1"), ("memory", "1Gi")]),
        ],
    );
}

#[test]
fn kuberay_job_batch_inference() {
    let w = check(
        "kuberay/ray-job.batch-inference.yaml",
        JobKind::RayJob,
        "default/rayjob-sample",
        &[
            (
                "head",
                1,
                &[("nvidia.com/gpu", "4"), ("cpu", "54"), ("memory", "54Gi")],
            ),
            ("submitter", 1, SUBMITTER),
        ],
    );
    assert_eq!(
        w.components[0]
            .node_selector
            .get("cloud.google.com/gke-accelerator")
            .map(String::as_str),
        Some("nvidia-tesla-t4")
    );
    assert!(w.components[1].node_selector.is_empty());
}

#[test]
fn kuberay_job_custom_head_svc() {
    check(
        "kuberay/ray-job.custom-head-svc.yaml",
        JobKind::RayJob,
        "default/rayjob-sample",
        &[
            ("head", 1, &[("cpu", "1"), ("memory", "2Gi")]),
            ("small-group", 1, &[("cpu", "1"), ("memory", "1Gi")]),
            ("submitter", 1, SUBMITTER),
        ],
    );
}

#[test]
fn kuberay_job_kueue_toy_sample() {
    // Only generateName: refused until the API server has named it ...
    let mut doc = job_document("kuberay/ray-job.kueue-toy-sample.yaml");
    let e = interpret(&doc).unwrap_err();
    assert_eq!(e.field, "metadata.name", "{e}");
    assert!(e.message.contains("generateName"), "{e}");
    // ... then interpreted like any other RayJob.
    doc["metadata"]["name"] = Value::from("rayjob-sample-x7k2p");
    let w = interpret(&doc).unwrap();
    let got: Vec<_> = w
        .components
        .iter()
        .map(|c| (c.name.as_str(), c.pods, c.requests.clone()))
        .collect();
    assert_eq!(
        got,
        [
            ("head", 1, rl(&[("cpu", "1"), ("memory", "2Gi")])),
            ("small-group", 1, rl(&[("cpu", "1"), ("memory", "1Gi")])),
            ("submitter", 1, rl(SUBMITTER)),
        ]
    );
}

/// Every file in the folder is covered above (a new example must get its own assertions).
#[test]
fn every_upstream_file_is_covered() {
    let covered = [
        "training-operator-v1.9.0/jax_cpu-demo_demo.yaml",
        "training-operator-v1.9.0/mpi_tensorflow-mnist.yaml",
        "training-operator-v1.9.0/paddlepaddle_simple-cpu.yaml",
        "training-operator-v1.9.0/paddlepaddle_simple-gpu.yaml",
        "training-operator-v1.9.0/pytorch_cpu-demo_demo.yaml",
        "training-operator-v1.9.0/pytorch_deepspeed-demo_pytorch_deepspeed_demo.yaml",
        "training-operator-v1.9.0/pytorch_elastic_imagenet_imagenet.yaml",
        "training-operator-v1.9.0/pytorch_mnist_v1_pytorch_job_mnist_gloo.yaml",
        "training-operator-v1.9.0/pytorch_mnist_v1_pytorch_job_mnist_nccl.yaml",
        "training-operator-v1.9.0/pytorch_simple.yaml",
        "training-operator-v1.9.0/tensorflow_dist-mnist_tf_job_mnist.yaml",
        "training-operator-v1.9.0/tensorflow_distribution_strategy_multi_worker_tfjob.yaml",
        "training-operator-v1.9.0/tensorflow_simple.yaml",
        "training-operator-v1.9.0/xgboost_xgboost-dist_xgboostjob_v1_iris_train.yaml",
        "training-operator-v1.9.0/xgboost_xgboostjob.yaml",
        "mpi-operator/pi.yaml",
        "mpi-operator/tensorflow-benchmarks.yaml",
        "mpi-operator/tensorflow-mnist.yaml",
        "jobset/batch_v1alpha2_jobset.yaml",
        "jobset/pytorch_cnn-mnist_mnist.yaml",
        "jobset/simple_coordinator.yaml",
        "jobset/simple_exclusive-placement.yaml",
        "jobset/simple_group.yaml",
        "jobset/simple_paralleljobs.yaml",
        "jobset/tensorflow_mnist.yaml",
        "kuberay/ray-cluster.autoscaler.yaml",
        "kuberay/ray-cluster.complete.yaml",
        "kuberay/ray-cluster.sample.yaml",
        "kuberay/ray-job.batch-inference.yaml",
        "kuberay/ray-job.custom-head-svc.yaml",
        "kuberay/ray-job.kueue-toy-sample.yaml",
        // Training runtimes, not jobs: every one is read, and TrainJobs against them, in
        // tests/interpret_trainjob.rs.
        "trainer-v2.2.0/deepspeed_distributed.yaml",
        "trainer-v2.2.0/jax_distributed.yaml",
        "trainer-v2.2.0/mlx_distributed.yaml",
        "trainer-v2.2.0/torch_distributed.yaml",
        "trainer-v2.2.0/torchtune_llama3_2_llama3_2_1B.yaml",
        "trainer-v2.2.0/torchtune_llama3_2_llama3_2_3B.yaml",
        "trainer-v2.2.0/torchtune_qwen2_5_qwen2_5_1.5B.yaml",
        "trainer-v2.2.0/xgboost_distributed.yaml",
    ];
    let mut found = Vec::new();
    for dir in std::fs::read_dir(data("")).unwrap() {
        let dir = dir.unwrap().path();
        if !dir.is_dir() {
            continue;
        }
        for f in std::fs::read_dir(&dir).unwrap() {
            let f = f.unwrap().path();
            if f.extension().is_some_and(|e| e == "yaml") {
                let rel = f
                    .strip_prefix(data(""))
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                found.push(rel);
            }
        }
    }
    found.sort();
    let mut covered: Vec<String> = covered.iter().map(|s| s.to_string()).collect();
    covered.sort();
    assert_eq!(found, covered);
}
