//! Unit tests of `workload::interpret`: every kind read into pod groups, with the field path
//! of what is malformed.

use super::*;

fn y(s: &str) -> Value {
    serde_yaml::from_str(s).unwrap()
}

fn q(s: &str) -> Quantity {
    Quantity::parse(s).unwrap()
}

fn rl(pairs: &[(&str, &str)]) -> ResourceList {
    pairs.iter().map(|(k, v)| (k.to_string(), q(v))).collect()
}

/// A PyTorchJob whose Worker pod spec is `pod` (YAML, indented for nesting).
fn pytorch_with_pod(pod: &str) -> Value {
    let indented: String = pod.lines().map(|l| format!("          {l}\n")).collect();
    y(&format!(
        "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata: {{name: p}}\nspec:\n  pytorchReplicaSpecs:\n    Worker:\n      replicas: 2\n      template:\n        spec:\n{indented}"
    ))
}

fn worker_requests(pod: &str) -> ResourceList {
    let w = interpret(&pytorch_with_pod(pod)).unwrap();
    assert_eq!(w.components.len(), 1);
    w.components[0].requests.clone()
}

#[test]
fn quantity_numbers_are_accepted() {
    // k8s-openapi's Quantity turns numbers into strings; check it, since users write them.
    let r = worker_requests(
        "containers:\n- name: a\n  resources:\n    limits: {nvidia.com/gpu: 1, cpu: 0.5, memory: 1073741824}",
    );
    assert_eq!(
        r,
        rl(&[("nvidia.com/gpu", "1"), ("cpu", "500m"), ("memory", "1Gi")])
    );
    let json = serde_json::json!({
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
        "spec": {"template": {"spec": {"containers": [
            {"name": "a", "resources": {"requests": {"cpu": 2, "memory": 1.5e3}}}]}}}
    });
    let w = interpret(&json).unwrap();
    assert_eq!(
        w.components[0].requests,
        rl(&[("cpu", "2"), ("memory", "1500")])
    );
}

#[test]
fn limits_stand_in_for_requests() {
    let r = worker_requests(
        "containers:\n- name: a\n  resources:\n    requests: {cpu: 1}\n    limits: {cpu: 2, memory: 4Gi}\n- name: b\n  resources:\n    limits: {cpu: 300m}",
    );
    assert_eq!(r, rl(&[("cpu", "1300m"), ("memory", "4Gi")]));
}

#[test]
fn what_the_api_server_refuses_is_refused_with_the_field() {
    let e = |pod: &str| {
        interpret(&pytorch_with_pod(pod))
            .expect_err("refused")
            .to_string()
    };
    // A fraction of a GPU (the member's API server refuses such pods).
    let m = e("containers:\n- name: a\n  resources:\n    limits: {nvidia.com/gpu: 1500m}");
    assert!(
        m.contains("resources.limits[nvidia.com/gpu]") && m.contains("must be an integer"),
        "{m}"
    );
    let m = e(
        "containers:\n- name: a\n  resources:\n    requests: {nvidia.com/gpu: 1}\n    limits: {nvidia.com/gpu: 2}",
    );
    assert!(
        m.contains("must be equal to nvidia.com/gpu limit of 2"),
        "{m}"
    );
    let m = e("containers:\n- name: a\n  resources:\n    requests: {example.com/fpga: 1}");
    assert!(
        m.contains("Limit must be set for non overcommitable resources"),
        "{m}"
    );
    let m = e("containers:\n- name: a\n  resources:\n    requests: {cpu: 2}\n    limits: {cpu: 1}");
    assert!(
        m.contains("must be less than or equal to cpu limit of 1"),
        "{m}"
    );
    // What the API server accepts still interprets.
    let ok = worker_requests(
        "containers:\n- name: a\n  resources:\n    requests: {cpu: 1, nvidia.com/gpu: 2}\n    limits: {cpu: 2, nvidia.com/gpu: 2, hugepages-2Mi: 1Gi}",
    );
    assert_eq!(ok.get("nvidia.com/gpu"), q("2"));
}

#[test]
fn explicit_zero_request_is_not_replaced_by_the_limit() {
    let r = worker_requests(
        "containers:\n- name: a\n  resources:\n    requests: {cpu: 0, memory: 1Gi}\n    limits: {cpu: 2}",
    );
    assert_eq!(r, rl(&[("memory", "1Gi")]));
}

#[test]
fn init_containers_versus_containers() {
    // cpu: containers 1+1=2 vs init max 3 -> 3; memory: containers 2Gi vs init 1Gi -> 2Gi.
    let r = worker_requests(
        "initContainers:\n- name: i1\n  resources: {requests: {cpu: 3, memory: 1Gi}}\n- name: i2\n  resources: {requests: {cpu: 500m}}\ncontainers:\n- name: a\n  resources: {requests: {cpu: 1, memory: 1Gi}}\n- name: b\n  resources: {requests: {cpu: 1, memory: 1Gi}}",
    );
    assert_eq!(r, rl(&[("cpu", "3"), ("memory", "2Gi")]));
}

#[test]
fn sidecars_add_to_containers_and_later_init_steps() {
    // sidecar s (cpu 1) runs alongside: containers 2 + s 1 = 3.
    // init steps: i1 alone 1.5 (before s); s: 1; i2: 2.5 + s 1 = 3.5 -> max 3.5.
    let r = worker_requests(
        "initContainers:\n- name: i1\n  resources: {requests: {cpu: 1500m}}\n- name: s\n  restartPolicy: Always\n  resources: {requests: {cpu: 1, memory: 100Mi}}\n- name: i2\n  resources: {requests: {cpu: 2500m}}\ncontainers:\n- name: a\n  resources: {requests: {cpu: 2, memory: 1Gi}}",
    );
    assert_eq!(r, rl(&[("cpu", "3500m"), ("memory", "1124Mi")]));
    // Without the late init container the containers + sidecar sum wins.
    let r = worker_requests(
        "initContainers:\n- name: s\n  restartPolicy: Always\n  resources: {limits: {cpu: 1}}\n- name: i\n  resources: {requests: {cpu: 2}}\ncontainers:\n- name: a\n  resources: {requests: {cpu: 2}}",
    );
    assert_eq!(r, rl(&[("cpu", "3")]));
}

#[test]
fn overhead_is_added() {
    let r = worker_requests(
        "overhead: {cpu: 250m, memory: 120Mi}\ncontainers:\n- name: a\n  resources: {requests: {cpu: 1, memory: 1Gi}}",
    );
    assert_eq!(r, rl(&[("cpu", "1250m"), ("memory", "1144Mi")]));
}

#[test]
fn pod_level_resources_override() {
    // Pod-level request wins for cpu; gpu is not a pod-level resource; overhead on top.
    let r = worker_requests(
        "resources: {requests: {cpu: 4, nvidia.com/gpu: 8}}\noverhead: {cpu: 100m}\ncontainers:\n- name: a\n  resources: {requests: {cpu: 1, memory: 1Gi, nvidia.com/gpu: 1}, limits: {nvidia.com/gpu: 1}}",
    );
    assert_eq!(
        r,
        rl(&[("cpu", "4100m"), ("memory", "1Gi"), ("nvidia.com/gpu", "1")])
    );
    // Pod-level limit only: becomes the request where containers request nothing ...
    let r = worker_requests(
        "resources: {limits: {cpu: 4, memory: 8Gi}}\ncontainers:\n- name: a\n  resources: {requests: {cpu: 1}}\n- name: b",
    );
    assert_eq!(r, rl(&[("cpu", "1"), ("memory", "8Gi")]));
    // ... and fully when no container asks for anything.
    let r = worker_requests("resources: {limits: {cpu: 3}}\ncontainers:\n- name: a");
    assert_eq!(r, rl(&[("cpu", "3")]));
}

#[test]
fn kubeflow_replicas_and_priority() {
    let w = interpret(&y(r#"
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: p, namespace: team-a, uid: u-1, labels: {a: b}}
spec:
  runPolicy: {schedulingPolicy: {priorityClass: high}}
  pytorchReplicaSpecs:
    Master:
      template:
        spec:
          priorityClassName: medium
          containers: [{name: m, resources: {requests: {cpu: 1}}}]
    Worker:
      replicas: 3
      template:
        spec:
          nodeSelector: {gpu: a100}
          tolerations: [{key: gpu, operator: Exists, effect: NoSchedule}]
          affinity:
            nodeAffinity:
              requiredDuringSchedulingIgnoredDuringExecution:
                nodeSelectorTerms:
                - matchExpressions: [{key: zone, operator: In, values: [a, b]}]
          containers: [{name: w, resources: {limits: {nvidia.com/gpu: 2}}}]
"#))
    .unwrap();
    assert_eq!(w.kind, JobKind::PyTorchJob);
    assert_eq!(w.key(), "team-a/p");
    assert_eq!(w.uid.as_deref(), Some("u-1"));
    assert_eq!(w.labels.get("a").map(String::as_str), Some("b"));
    let names: Vec<_> = w
        .components
        .iter()
        .map(|c| (c.name.as_str(), c.pods))
        .collect();
    assert_eq!(names, [("master", 1), ("worker", 3)]);
    assert_eq!(
        w.priority_class_names,
        BTreeSet::from(["high".to_string(), "medium".to_string()])
    );
    let worker = &w.components[1];
    assert_eq!(
        worker.node_selector.get("gpu").map(String::as_str),
        Some("a100")
    );
    assert_eq!(worker.tolerations.len(), 1);
    let aff = worker.required_node_affinity.as_ref().unwrap();
    assert_eq!(aff.node_selector_terms.len(), 1);
    assert!(w.components[0].required_node_affinity.is_none());
    assert_eq!(
        w.total_requests(),
        rl(&[("cpu", "1"), ("nvidia.com/gpu", "6")])
    );
    assert!(w.candidates.is_unrestricted());
}

#[test]
fn mpijob_worker_defaults_to_zero_replicas() {
    let w = interpret(&y(r#"
apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata: {name: m}
spec:
  mpiReplicaSpecs:
    Launcher: {template: {spec: {containers: [{name: l}]}}}
    Worker: {template: {spec: {containers: [{name: w}]}}}
"#))
    .unwrap();
    let names: Vec<_> = w
        .components
        .iter()
        .map(|c| (c.name.as_str(), c.pods))
        .collect();
    assert_eq!(names, [("launcher", 1), ("worker", 0)]);
}

#[test]
fn batch_job_parallelism_capped_by_completions() {
    let job = |extra: &str| {
        y(&format!(
            "apiVersion: batch/v1\nkind: Job\nmetadata: {{name: j}}\nspec:\n  {extra}\n  template:\n    spec:\n      containers: [{{name: a, resources: {{requests: {{cpu: 1}}}}}}]\n"
        ))
    };
    let pods = |extra: &str| interpret(&job(extra)).map(|w| w.components[0].pods);
    assert_eq!(pods("parallelism: 5").unwrap(), 5);
    assert_eq!(pods("completions: 3").unwrap(), 1);
    assert_eq!(pods("parallelism: 5\n  completions: 3").unwrap(), 3);
    assert_eq!(pods("parallelism: 2\n  completions: 10").unwrap(), 2);
    let e = pods("parallelism: 0").unwrap_err();
    assert!(e.message.contains("has no pods"), "{e}");
    let e = pods("parallelism: -1").unwrap_err();
    assert_eq!(e.field, "spec.parallelism");
    let w = interpret(&job("parallelism: 4")).unwrap();
    assert_eq!(w.components[0].name, "job");
    assert_eq!(w.namespace, "default");
}

#[test]
fn jobset_multiplies_replicas_by_job_pods() {
    let w = interpret(&y(r#"
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata: {name: js}
spec:
  replicatedJobs:
  - name: workers
    replicas: 3
    template:
      spec:
        parallelism: 4
        completions: 2
        template:
          spec:
            containers: [{name: a, resources: {limits: {nvidia.com/gpu: 1}}}]
  - name: driver
    template:
      spec:
        template:
          spec:
            containers: [{name: d, resources: {requests: {cpu: 1}}}]
"#))
    .unwrap();
    let names: Vec<_> = w
        .components
        .iter()
        .map(|c| (c.name.as_str(), c.pods))
        .collect();
    assert_eq!(names, [("workers", 6), ("driver", 1)]);
    assert_eq!(w.components[0].requests, rl(&[("nvidia.com/gpu", "1")]));
}

#[test]
fn ray_groups_num_of_hosts_suspend_and_clamping() {
    let w = interpret(&y(r#"
apiVersion: ray.io/v1
kind: RayCluster
metadata: {name: rc}
spec:
  headGroupSpec:
    template: {spec: {containers: [{name: h, resources: {requests: {cpu: 2}}}]}}
  workerGroupSpecs:
  - groupName: tpu
    replicas: 2
    numOfHosts: 4
    template: {spec: {containers: [{name: w, resources: {limits: {google.com/tpu: 4}}}]}}
  - groupName: off
    replicas: 5
    suspend: true
    template: {spec: {containers: [{name: w}]}}
  - groupName: min-only
    minReplicas: 3
    template: {spec: {containers: [{name: w}]}}
  - groupName: above-max
    replicas: 9
    maxReplicas: 4
    template: {spec: {containers: [{name: w}]}}
  - groupName: none
    template: {spec: {containers: [{name: w}]}}
"#))
    .unwrap();
    let names: Vec<_> = w
        .components
        .iter()
        .map(|c| (c.name.as_str(), c.pods))
        .collect();
    assert_eq!(
        names,
        [
            ("head", 1),
            ("tpu", 8),
            ("off", 0),
            ("min-only", 3),
            ("above-max", 4),
            ("none", 0)
        ]
    );
    assert_eq!(w.components[1].requests, rl(&[("google.com/tpu", "4")]));
}

#[test]
fn ray_autoscaler_sidecar_counts_on_the_head() {
    let base = r#"
apiVersion: ray.io/v1
kind: RayCluster
metadata: {name: rc}
spec:
  enableInTreeAutoscaling: true
  headGroupSpec:
    template: {spec: {containers: [{name: h, resources: {requests: {cpu: 1, memory: 1Gi}}}]}}
"#;
    let w = interpret(&y(base)).unwrap();
    assert_eq!(
        w.components[0].requests,
        rl(&[("cpu", "1500m"), ("memory", "1536Mi")])
    );
    let custom = format!("{base}  autoscalerOptions: {{resources: {{requests: {{cpu: 2}}}}}}\n");
    let w = interpret(&y(&custom)).unwrap();
    assert_eq!(
        w.components[0].requests,
        rl(&[("cpu", "3"), ("memory", "1Gi")])
    );
}

fn ray_job(extra: &str) -> Value {
    y(&format!(
        r#"
apiVersion: ray.io/v1
kind: RayJob
metadata: {{name: rj}}
spec:
  entrypoint: python x.py
{extra}
  rayClusterSpec:
    headGroupSpec:
      template: {{spec: {{containers: [{{name: h, resources: {{requests: {{cpu: 1}}}}}}]}}}}
    workerGroupSpecs:
    - groupName: g
      replicas: 2
      template: {{spec: {{containers: [{{name: w, resources: {{requests: {{cpu: 2}}}}}}]}}}}
"#
    ))
}

#[test]
fn ray_job_submitter_modes() {
    let w = interpret(&ray_job("")).unwrap();
    let names: Vec<_> = w
        .components
        .iter()
        .map(|c| (c.name.as_str(), c.pods))
        .collect();
    assert_eq!(names, [("head", 1), ("g", 2), ("submitter", 1)]);
    assert_eq!(
        w.components[2].requests,
        rl(&[("cpu", "500m"), ("memory", "200Mi")])
    );

    let w = interpret(&ray_job(
            "  submitterPodTemplate:\n    spec:\n      priorityClassName: low\n      containers: [{name: s, resources: {requests: {cpu: 100m}}}]",
        ))
        .unwrap();
    assert_eq!(w.components[2].requests, rl(&[("cpu", "100m")]));
    assert!(w.priority_class_names.contains("low"));

    for mode in ["HTTPMode", "InteractiveMode"] {
        let w = interpret(&ray_job(&format!("  submissionMode: {mode}"))).unwrap();
        assert_eq!(w.components.len(), 2, "{mode}");
    }
    let w = interpret(&ray_job("  submissionMode: SidecarMode")).unwrap();
    assert_eq!(w.components.len(), 2);
    assert_eq!(
        w.components[0].requests,
        rl(&[("cpu", "1500m"), ("memory", "200Mi")])
    );

    let e = interpret(&ray_job("  submissionMode: Bogus")).unwrap_err();
    assert_eq!(e.field, "spec.submissionMode");
}

#[test]
fn ray_job_on_existing_cluster_is_rejected() {
    let e = interpret(&ray_job("  clusterSelector: {ray.io/cluster: shared}")).unwrap_err();
    assert_eq!(e.field, "spec.clusterSelector");
    assert!(e.message.contains("existing RayCluster"), "{e}");
}

#[test]
fn unknown_kind_and_wrong_api_version() {
    let e = interpret(&y(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec: {}",
    ))
    .unwrap_err();
    assert_eq!(e.field, "kind");
    assert!(e.message.contains("Deployment"), "{e}");
    let e = interpret(&y(
        "apiVersion: kubeflow.org/v2\nkind: PyTorchJob\nmetadata: {name: d}\nspec: {}",
    ))
    .unwrap_err();
    assert_eq!(e.field, "apiVersion");
    assert!(e.message.contains("kubeflow.org/v1"), "{e}");
    let e = interpret(&y("kind: Job\nmetadata: {name: d}")).unwrap_err();
    assert_eq!(e.field, "apiVersion");
    let e = interpret(&y("[1, 2]")).unwrap_err();
    assert!(e.message.contains("object"), "{e}");
}

#[test]
fn job_kind_helpers() {
    for k in JobKind::ALL {
        assert_eq!(JobKind::from_type(k.api_version(), k.as_str()), Some(k));
        assert_eq!(k.to_string(), k.as_str());
        assert!(k.suspend_pointer().starts_with("/spec/"));
    }
    assert_eq!(
        JobKind::from_type("kubeflow.org/v1", "MPIJob"),
        Some(JobKind::MPIJob)
    );
    assert_eq!(JobKind::from_type("kubeflow.org/v1", "Job"), None);
    assert_eq!(JobKind::Job.suspend_pointer(), "/spec/suspend");
    assert_eq!(JobKind::TFJob.suspend_pointer(), "/spec/runPolicy/suspend");
    assert_eq!(JobKind::MPIJob.suspend_pointer(), "/spec/runPolicy/suspend");
    assert_eq!(JobKind::RayCluster.suspend_pointer(), "/spec/suspend");
}

#[test]
fn missing_pieces_name_the_field() {
    let cases = [
        (
            "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: t}\nspec: {}",
            "spec.tfReplicaSpecs",
        ),
        (
            "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: t}\nspec: {tfReplicaSpecs: {Worker: {replicas: 1}}}",
            "spec.tfReplicaSpecs.Worker.template",
        ),
        (
            "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: t}",
            "spec",
        ),
        (
            "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\nspec: {parallelism: 1}",
            "spec.template",
        ),
        (
            "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\nspec: {template: {metadata: {}}}",
            "spec.template.spec",
        ),
        (
            "apiVersion: jobset.x-k8s.io/v1alpha2\nkind: JobSet\nmetadata: {name: j}\nspec: {replicatedJobs: [{name: a, template: {spec: {}}}]}",
            "spec.replicatedJobs[0].template.spec.template",
        ),
        (
            "apiVersion: ray.io/v1\nkind: RayCluster\nmetadata: {name: r}\nspec: {workerGroupSpecs: []}",
            "spec.headGroupSpec",
        ),
        (
            "apiVersion: ray.io/v1\nkind: RayJob\nmetadata: {name: r}\nspec: {entrypoint: x}",
            "spec.rayClusterSpec",
        ),
        ("apiVersion: batch/v1\nkind: Job\nspec: {}", "metadata"),
        (
            "apiVersion: batch/v1\nkind: Job\nmetadata: {namespace: x}\nspec: {}",
            "metadata.name",
        ),
        (
            "apiVersion: batch/v1\nkind: Job\nmetadata: {generateName: x-}\nspec: {}",
            "metadata.name",
        ),
        // A structural error inside a template names its full path.
        (
            "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\nspec: {template: {spec: {containers: [{name: a, resources: {limits: [1]}}]}}}",
            "spec.template.spec.containers[0].resources.limits",
        ),
        (
            "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\nspec: {template: {spec: {}}}",
            "spec.template.spec.containers",
        ),
    ];
    for (m, field) in cases {
        let e = interpret(&y(m)).unwrap_err();
        assert_eq!(e.field, field, "{m}: {e}");
    }
}

#[test]
fn bad_quantity_names_its_path() {
    let m = y(r#"
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: p}
spec:
  pytorchReplicaSpecs:
    Worker:
      template:
        spec:
          containers:
          - name: a
            resources: {limits: {nvidia.com/gpu: two}}
"#);
    let e = interpret(&m).unwrap_err();
    assert_eq!(
        e.field,
        "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].resources.limits[nvidia.com/gpu]"
    );
    assert!(e.message.starts_with("\"two\" is not a quantity"), "{e}");
    assert!(
        e.to_string()
            .contains("limits[nvidia.com/gpu]: \"two\" is not a quantity")
    );
    let e = interpret(&pytorch_with_pod(
            "initContainers:\n- name: i\n  resources: {requests: {memory: -1Gi}}\ncontainers:\n- name: a",
        ))
        .unwrap_err();
    assert_eq!(
        e.field,
        "spec.pytorchReplicaSpecs.Worker.template.spec.initContainers[0].resources.requests[memory]"
    );
    assert!(e.message.contains("negative"), "{e}");
    let e = interpret(&pytorch_with_pod(
        "overhead: {cpu: 1x}\ncontainers:\n- name: a",
    ))
    .unwrap_err();
    assert_eq!(
        e.field,
        "spec.pytorchReplicaSpecs.Worker.template.spec.overhead[cpu]"
    );
}

#[test]
fn negative_or_bad_replicas() {
    let m = |r: &str| {
        y(&format!(
            "apiVersion: kubeflow.org/v1\nkind: JAXJob\nmetadata: {{name: j}}\nspec:\n  jaxReplicaSpecs:\n    Worker:\n      replicas: {r}\n      template: {{spec: {{containers: [{{name: a}}]}}}}\n"
        ))
    };
    let e = interpret(&m("-1")).unwrap_err();
    assert_eq!(e.field, "spec.jaxReplicaSpecs.Worker.replicas");
    assert!(e.message.contains("negative"));
    let e = interpret(&m("two")).unwrap_err();
    assert_eq!(e.field, "spec.jaxReplicaSpecs.Worker.replicas");
    let e = interpret(&m("0")).unwrap_err();
    assert!(e.message.contains("has no pods"), "{e}");
    let e = interpret(&m("3000000000")).unwrap_err();
    assert!(e.message.contains("int32"), "{e}");
}

#[test]
fn cluster_annotations() {
    let m = |ann: &str| {
        y(&format!(
            "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: j\n  annotations:\n{ann}\nspec: {{template: {{spec: {{containers: [{{name: a}}]}}}}}}\n"
        ))
    };
    let w = interpret(&m(
            "    muster.dev/clusters: \"member-a, member-c,\"\n    muster.dev/cluster-selector: \"region=eu,tier in (large)\"",
        ))
        .unwrap();
    let c = &w.candidates;
    assert_eq!(
        c.names,
        Some(BTreeSet::from([
            "member-a".to_string(),
            "member-c".to_string()
        ]))
    );
    let eu_large = BTreeMap::from([
        ("region".to_string(), "eu".to_string()),
        ("tier".to_string(), "large".to_string()),
    ]);
    assert!(c.allows("member-a", &eu_large));
    assert!(!c.allows("member-b", &eu_large));
    assert!(!c.allows("member-c", &BTreeMap::new()));

    let e = interpret(&m("    muster.dev/cluster-selector: \"region in eu\"")).unwrap_err();
    assert_eq!(e.field, "metadata.annotations[muster.dev/cluster-selector]");
    assert!(e.message.contains("\"eu\""), "{e}");
    let e = interpret(&m("    muster.dev/clusters: \" , \"")).unwrap_err();
    assert_eq!(e.field, "metadata.annotations[muster.dev/clusters]");
    let w = interpret(&m("    other: x")).unwrap();
    assert!(w.candidates.is_unrestricted());
}

#[test]
fn fields_muster_does_not_read_cannot_reject() {
    // serde_yaml reads `defaultMode: 0777` as a string; the pod still interprets.
    let r = worker_requests(
        "volumes:\n- name: v\n  configMap: {name: x, defaultMode: 0777}\ncontainers:\n- name: a\n  env: [{name: X, value: 1}]\n  livenessProbe: {bogus: true}\n  resources: {requests: {cpu: 1}}",
    );
    assert_eq!(r, rl(&[("cpu", "1")]));
    // What muster reads is still checked structurally.
    let e = interpret(&pytorch_with_pod(
        "tolerations: {key: x}\ncontainers:\n- name: a",
    ))
    .unwrap_err();
    assert_eq!(
        e.field,
        "spec.pytorchReplicaSpecs.Worker.template.spec.tolerations"
    );
}

#[test]
fn duplicate_component_names_are_rejected() {
    let e = interpret(&y(r#"
apiVersion: ray.io/v1
kind: RayCluster
metadata: {name: rc}
spec:
  headGroupSpec:
    template: {spec: {containers: [{name: h}]}}
  workerGroupSpecs:
  - {groupName: g, replicas: 1, template: {spec: {containers: [{name: w}]}}}
  - {groupName: g, replicas: 1, template: {spec: {containers: [{name: w}]}}}
"#))
    .unwrap_err();
    assert!(e.message.contains("\"g\""), "{e}");
}
