//! TrainJobs read against Kubeflow Trainer v2.2.0's own runtimes (`tests/data/upstream/
//! trainer-v2.2.0/`, copied unchanged from its `manifests/base/runtimes/`): the pods Trainer's
//! JobSet will run, per replicated job. Expected counts are read off each runtime file with
//! Trainer's rules (see `src/workload/interpret/trainjob.rs`); the fleet test
//! `tests/controller_trainjob.rs` checks them against the pods the real Trainer creates.

use std::path::PathBuf;

use muster::fleet::{Needs, Serves};
use muster::quantity::{Quantity, ResourceList};
use muster::workload::{JobKind, RuntimeKey, TrainingRuntimes, Workload, interpret_with};
use serde::Deserialize;
use serde_json::{Value, json};

fn runtimes() -> TrainingRuntimes {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/upstream/trainer-v2.2.0");
    let mut docs = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("runtimes")
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    for f in files {
        let text = std::fs::read_to_string(&f).expect("read");
        for d in serde_yaml::Deserializer::from_str(&text) {
            docs.push(Value::deserialize(d).expect("yaml"));
        }
    }
    let (rt, bad) = TrainingRuntimes::from_objects(&docs);
    assert!(bad.is_empty(), "{bad:?}");
    assert_eq!(docs.len(), 8, "every upstream runtime read");
    rt
}

fn y(s: &str) -> Value {
    serde_yaml::from_str(s).expect("yaml")
}

fn rl(pairs: &[(&str, &str)]) -> ResourceList {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), Quantity::parse(v).expect("quantity")))
        .collect()
}

fn read(job: &str) -> Workload {
    interpret_with(&y(job), &runtimes()).unwrap_or_else(|e| panic!("{e}"))
}

/// (component, pods, requests, staged), per component in order.
type Row = (String, u32, ResourceList, bool);
/// The same as written in a test: requests as (resource, quantity) pairs.
type WantRow<'a> = (&'a str, u32, &'a [(&'a str, &'a str)], bool);

fn shape(w: &Workload) -> Vec<Row> {
    w.components
        .iter()
        .map(|c| (c.name.clone(), c.pods, c.requests.clone(), c.staged))
        .collect()
}

fn want(rows: &[WantRow]) -> Vec<Row> {
    rows.iter()
        .map(|(n, p, r, s)| (n.to_string(), *p, rl(r), *s))
        .collect()
}

#[test]
fn torch_nodes_and_resources_per_node() {
    let w = read(
        r#"
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: ddp, namespace: team-a}
spec:
  runtimeRef: {name: torch-distributed}
  trainer:
    numNodes: 2
    resourcesPerNode:
      limits: {nvidia.com/gpu: 2, cpu: "4"}
      requests: {cpu: "2"}
"#,
    );
    assert_eq!(w.kind, JobKind::TrainJob);
    assert_eq!(w.key(), "team-a/ddp");
    assert_eq!(
        shape(&w),
        want(&[("node", 2, &[("cpu", "2"), ("nvidia.com/gpu", "2")], false)])
    );
    let need = w.runtime.as_ref().expect("a runtime");
    assert_eq!(need.key, RuntimeKey::cluster("torch-distributed"));
    assert_eq!(
        w.components[0].template_pointer.as_deref(),
        Some(
            "/spec/runtimePatches/0/trainingRuntimeSpec/template/spec/replicatedJobs/0/template/spec/template"
        )
    );
}

#[test]
fn defaults_come_from_the_runtime() {
    // No trainer section: the runtime's mlPolicy.numNodes (1) and its container (no resources).
    let w = read(
        "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: t}\nspec:\n  runtimeRef: {name: jax-distributed, kind: ClusterTrainingRuntime, apiGroup: trainer.kubeflow.org}\n",
    );
    assert_eq!(shape(&w), want(&[("node", 1, &[], false)]));
    assert_eq!(w.namespace, "default");
}

#[test]
fn mpi_launcher_as_node_takes_one_node() {
    // deepspeed-distributed: MPI with runLauncherAsNode; the launcher is the trainer step.
    let job = |n: u32| {
        format!(
            "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {{name: ds}}\nspec:\n  runtimeRef: {{name: deepspeed-distributed}}\n  trainer:\n    numNodes: {n}\n    resourcesPerNode: {{limits: {{nvidia.com/gpu: 1}}}}\n"
        )
    };
    let gpu: &[(&str, &str)] = &[("nvidia.com/gpu", "1")];
    assert_eq!(
        shape(&read(&job(3))),
        want(&[("launcher", 1, gpu, false), ("node", 2, gpu, false)])
    );
    // One node: the launcher is that node, but the node job still runs one pod (at least 1).
    assert_eq!(
        shape(&read(&job(1))),
        want(&[("launcher", 1, gpu, false), ("node", 1, gpu, false)])
    );
    // mlx-distributed is MPI with runLauncherAsNode too.
    let w = read(
        "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: m}\nspec:\n  runtimeRef: {name: mlx-distributed}\n  trainer: {numNodes: 4}\n",
    );
    let pods: Vec<_> = w
        .components
        .iter()
        .map(|c| (c.name.as_str(), c.pods))
        .collect();
    assert_eq!(pods, [("launcher", 1), ("node", 3)]);
}

#[test]
fn initializers_run_once_and_the_trainer_waits_for_them() {
    let w = read(
        r#"
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: tune}
spec:
  runtimeRef: {name: torchtune-qwen2.5-1.5b}
  initializer:
    dataset: {storageUri: "hf://tatsu-lab/alpaca"}
  trainer: {numNodes: 2}
"#,
    );
    assert_eq!(
        shape(&w),
        want(&[
            ("dataset-initializer", 1, &[], false),
            ("model-initializer", 1, &[], false),
            // The runtime's own limits (2 GPUs); node depends on both initializers.
            ("node", 2, &[("nvidia.com/gpu", "2")], true),
        ])
    );
}

#[test]
fn runtime_patches_merge_into_the_templates() {
    let w = read(
        r#"
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: p}
spec:
  runtimeRef: {name: torch-distributed}
  trainer: {numNodes: 3, resourcesPerNode: {limits: {nvidia.com/gpu: 1}}}
  runtimePatches:
  - manager: example.com/platform
    trainingRuntimeSpec:
      template:
        spec:
          replicatedJobs:
          - name: node
            template:
              spec:
                template:
                  spec:
                    nodeSelector: {pool: a100}
                    tolerations: [{key: gpu, operator: Exists, effect: NoSchedule}]
  - manager: example.com/other
    trainingRuntimeSpec:
      template:
        spec:
          replicatedJobs:
          - name: node
            template:
              spec:
                template:
                  spec:
                    nodeSelector: {zone: z1}
"#,
    );
    let c = &w.components[0];
    assert_eq!(c.pods, 3);
    let sel: Vec<_> = c
        .node_selector
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(sel, [("pool", "a100"), ("zone", "z1")], "maps merge");
    assert_eq!(c.tolerations.len(), 1);
    assert_eq!(c.tolerations[0].key.as_deref(), Some("gpu"));
    // muster's own patch goes after the two.
    assert!(
        c.template_pointer
            .as_deref()
            .is_some_and(|p| p.starts_with("/spec/runtimePatches/2/")),
        "{:?}",
        c.template_pointer
    );
}

#[test]
fn namespaced_runtimes_are_found_in_the_jobs_namespace() {
    let mut rt = runtimes();
    let mut own = y(&std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/upstream/trainer-v2.2.0/torch_distributed.yaml"),
    )
    .expect("read"));
    own["kind"] = json!("TrainingRuntime");
    own["metadata"]["namespace"] = json!("team-b");
    own["metadata"]["name"] = json!("torch-team");
    own["spec"]["mlPolicy"]["numNodes"] = json!(4);
    rt.apply(&own).expect("applies");
    let job = |ns: &str| {
        y(&format!(
            "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {{name: t, namespace: {ns}}}\nspec:\n  runtimeRef: {{name: torch-team, kind: TrainingRuntime}}\n"
        ))
    };
    let w = interpret_with(&job("team-b"), &rt).expect("reads");
    assert_eq!(w.components[0].pods, 4, "the runtime's numNodes");
    assert_eq!(
        w.runtime.expect("runtime").key,
        RuntimeKey::namespaced("team-b", "torch-team")
    );
    let e = interpret_with(&job("team-c"), &rt).unwrap_err();
    assert_eq!(e.field, "spec.runtimeRef");
    assert!(
        e.message
            .contains("TrainingRuntime team-c/torch-team is not on the hub"),
        "{e}"
    );
}

#[test]
fn what_cannot_be_counted_is_refused_with_its_field() {
    let rt = runtimes();
    let err = |spec: &str| {
        interpret_with(
            &y(&format!(
                "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {{name: t}}\nspec:\n{spec}"
            )),
            &rt,
        )
        .unwrap_err()
    };
    let e = err("  trainer: {numNodes: 2}\n");
    assert_eq!(e.field, "spec.runtimeRef");
    let e = err("  runtimeRef: {name: nope}\n");
    assert!(
        e.message
            .contains("ClusterTrainingRuntime nope is not on the hub"),
        "{e}"
    );
    let e = err("  runtimeRef: {name: torch-distributed, apiGroup: example.com}\n");
    assert_eq!(e.field, "spec.runtimeRef.apiGroup");
    let e = err("  runtimeRef: {name: torch-distributed}\n  trainer: {numNodes: 0}\n");
    assert_eq!(e.field, "spec.trainer.numNodes");
    let e = err(
        "  runtimeRef: {name: torch-distributed}\n  runtimePatches:\n  - manager: a.b/c\n    trainingRuntimeSpec: {template: {spec: {replicatedJobs: [{name: launcher}]}}}\n",
    );
    assert!(
        e.message.contains("has no replicated job of that name"),
        "{e}"
    );
    let e = err(
        "  runtimeRef: {name: torch-distributed}\n  trainer:\n    resourcesPerNode: {limits: {nvidia.com/gpu: 0.5}}\n",
    );
    assert!(
        e.field.starts_with(
            "ClusterTrainingRuntime torch-distributed: spec.template.spec.replicatedJobs[0]"
        ),
        "{e}"
    );
    // A Flux policy adds containers of its own.
    let mut flux = TrainingRuntimes::default();
    flux.apply(&y("apiVersion: trainer.kubeflow.org/v1alpha1\nkind: ClusterTrainingRuntime\nmetadata: {name: flux}\nspec:\n  mlPolicy: {numNodes: 2, flux: {}}\n  template: {spec: {replicatedJobs: [{name: node, template: {metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}}, spec: {template: {spec: {containers: [{name: node}]}}}}}]}}\n"))
        .expect("applies");
    let e = interpret_with(
        &y("apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: f}\nspec: {runtimeRef: {name: flux}}\n"),
        &flux,
    )
    .unwrap_err();
    assert!(e.message.contains("Flux"), "{e}");
}

#[test]
fn a_member_must_have_the_same_runtime() {
    let w = read(
        "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: t}\nspec:\n  runtimeRef: {name: torch-distributed}\n",
    );
    let needs = Needs::of(&w);
    let digest = w.runtime.as_ref().expect("runtime").digest.clone();
    let serves = |runtimes: &[(&str, &str)]| Serves {
        kinds: None,
        priority_classes: None,
        runtimes: Some(
            runtimes
                .iter()
                .map(|(k, d)| (k.to_string(), d.to_string()))
                .collect(),
        ),
        stalled: Default::default(),
    };
    assert_eq!(
        serves(&[("ClusterTrainingRuntime torch-distributed", &digest)]).refuses("m", &needs),
        None
    );
    assert_eq!(
        serves(&[("ClusterTrainingRuntime jax-distributed", &digest)])
            .refuses("m", &needs)
            .as_deref(),
        Some("no ClusterTrainingRuntime torch-distributed on m")
    );
    assert_eq!(
        serves(&[("ClusterTrainingRuntime torch-distributed", "0")])
            .refuses("m", &needs)
            .as_deref(),
        Some("m's ClusterTrainingRuntime torch-distributed differs from the hub's")
    );
    // Not known: not refused.
    assert_eq!(Serves::default().refuses("m", &needs), None);
}

#[test]
fn the_simulator_sends_a_trainjob_only_where_its_runtime_is() {
    let path = format!(
        "{}/tests/data/scenarios/trainjob.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).expect("scenario");
    let sc = muster::sim::parse_scenario(&path, &text).expect("parses");
    let report = muster::sim::run(&path, &sc, &mut ()).expect("runs");
    let job = |name: &str| {
        report
            .jobs
            .iter()
            .find(|j| j.name == name)
            .unwrap_or_else(|| panic!("{name}"))
    };
    let ddp = job("ddp");
    assert_eq!(ddp.state, "Finished");
    assert_eq!(
        ddp.cluster.as_deref(),
        Some("member-b"),
        "member-a has no runtime"
    );
    assert_eq!(ddp.placement.values().sum::<u32>(), 2);
    let nowhere = job("nowhere");
    assert_eq!(nowhere.cluster, None);
    let why = nowhere.reason.as_deref().unwrap_or_default();
    assert!(
        why.contains("no ClusterTrainingRuntime hub-only on member-a")
            && why.contains("no ClusterTrainingRuntime hub-only on member-b"),
        "{why}"
    );
    let unknown = job("unknown");
    assert_eq!(unknown.state, "Rejected");
    assert!(
        unknown
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("ClusterTrainingRuntime jax-distributed is not on the hub")),
        "{:?}",
        unknown.reason
    );
}
