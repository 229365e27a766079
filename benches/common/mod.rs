#![allow(dead_code)]
//! The scale benchmark's scenario generator, shared by the benchmarks: clusters of GPU and CPU
//! nodes, a 3-level tree of 100 leaves, and a stream of the job shapes teams submit over and over,
//! deterministic for a given size.

use serde_json::{Value, json};

use muster::sim::{ClusterSpec, JobSpec, Manifest, NodeSpec, Scenario};

pub mod deep;

/// The allocator the `muster` binary uses (src/main.rs), so that the benchmarks measure it.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Small deterministic PRNG (xorshift64*), so every run sees the same scenario.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The benchmarks' PriorityClasses: low 0, normal 100, high 1000.
pub fn priority_classes() -> std::collections::BTreeMap<String, i32> {
    [
        ("low".into(), 0),
        ("normal".into(), 100),
        ("high".into(), 1000),
    ]
    .into()
}

/// `count` identical schedulable nodes named after `name`, nothing in use on them.
pub fn pool(
    name: String,
    count: u32,
    allocatable: muster::quantity::ResourceList,
    labels: std::collections::BTreeMap<String, String>,
    taints: Vec<k8s_openapi::api::core::v1::Taint>,
) -> NodeSpec {
    NodeSpec {
        name,
        count,
        allocatable,
        labels,
        taints,
        unschedulable: false,
        used: Default::default(),
    }
}

pub fn list(pairs: &[(&str, &str)]) -> muster::quantity::ResourceList {
    pairs
        .iter()
        .map(|(k, v)| {
            (
                k.to_string(),
                muster::quantity::Quantity::parse(v).expect("quantity"),
            )
        })
        .collect()
}

pub fn container(cpu: &str, mem: &str, gpu: u32) -> Value {
    let mut limits = json!({"cpu": cpu, "memory": mem});
    if gpu > 0 {
        limits["nvidia.com/gpu"] = json!(gpu);
    }
    json!({"name": "main", "image": "registry.k8s.io/pause:3.10.1", "resources": {"limits": limits}})
}

pub fn template(cpu: &str, mem: &str, gpu: u32, prio: &str) -> Value {
    json!({"spec": {"priorityClassName": prio, "containers": [container(cpu, mem, gpu)]}})
}

/// One of the job shapes teams submit over and over.
pub fn job(rng: &mut Rng, i: usize, ns: &str, prio: &str) -> Value {
    let name = format!("job-{i}");
    match rng.below(8) {
        0 | 1 => json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"parallelism": 1, "template": template("8", "64Gi", 1, prio)}}),
        2 => json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"parallelism": 10, "completions": 10, "template": template("4", "16Gi", 0, prio)}}),
        3 | 4 => json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": template("4", "32Gi", 0, prio)},
                "Worker": {"replicas": 2, "template": template("32", "256Gi", 4, prio)}}}}),
        5 => json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": template("4", "32Gi", 0, prio)},
                "Worker": {"replicas": 4, "template": template("64", "512Gi", 8, prio)}}}}),
        6 => json!({"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": template("1", "2Gi", 0, prio)},
                "Worker": {"replicas": 8, "template": template("16", "128Gi", 2, prio)}}}}),
        _ => json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"replicatedJobs": [{"name": "shard", "replicas": 2,
                "template": {"spec": {"parallelism": 2, "completions": 2,
                    "template": template("16", "64Gi", 2, prio)}}}]}}),
    }
}

pub fn scenario(jobs: usize, clusters: usize, nodes: u32) -> Scenario {
    scenario_seeded(0x9E37_79B9_7F4A_7C15, jobs, clusters, nodes)
}

/// [`scenario`] from another seed (not 0).
pub fn scenario_seeded(seed: u64, jobs: usize, clusters: usize, nodes: u32) -> Scenario {
    generate(seed, jobs, clusters, nodes, None)
}

/// The topology levels of [`topology`]: blocks of 4 racks, racks of `RACK` nodes.
pub const LEVELS: [&str; 2] = ["example.com/block", "example.com/rack"];
/// Nodes per rack in [`topology`].
pub const RACK: u32 = 16;

/// [`scenario`] on members whose nodes sit in racks of [`RACK`] nodes, 4 racks a block (GPU and
/// CPU nodes in racks of their own); every distributed job (PyTorchJob, MPIJob) requires one
/// rack and every JobSet prefers one. The same jobs otherwise, from the same seed.
pub fn topology(jobs: usize, clusters: usize, nodes: u32) -> Scenario {
    generate(0x9E37_79B9_7F4A_7C15, jobs, clusters, nodes, Some(RACK))
}

/// `count` nodes of one shape cut into racks of `rack` nodes (numbered from `first`), 4 racks a
/// block; one pool without labels when `rack` is `None`.
fn racked(
    name: &str,
    count: u32,
    alloc: &muster::quantity::ResourceList,
    rack: Option<u32>,
    first: u32,
) -> Vec<NodeSpec> {
    let Some(rack) = rack else {
        return vec![pool(
            name.to_string(),
            count,
            alloc.clone(),
            Default::default(),
            vec![],
        )];
    };
    (0..count.div_ceil(rack))
        .map(|i| {
            let r = first + i;
            let labels = [
                (LEVELS[0].to_string(), format!("block-{}", r / 4)),
                (LEVELS[1].to_string(), format!("rack-{r}")),
            ];
            let n = rack.min(count - i * rack);
            pool(
                format!("{name}-r{r}"),
                n,
                alloc.clone(),
                labels.into(),
                vec![],
            )
        })
        .collect()
}

fn generate(seed: u64, jobs: usize, clusters: usize, nodes: u32, rack: Option<u32>) -> Scenario {
    let mut rng = Rng(seed);
    let gpu_nodes = nodes * 3 / 5;
    let gpu = list(&[
        ("cpu", "128"),
        ("memory", "1Ti"),
        ("pods", "110"),
        ("nvidia.com/gpu", "8"),
    ]);
    let cpu = list(&[("cpu", "64"), ("memory", "256Gi"), ("pods", "110")]);
    let gpu_racks = rack.map_or(0, |r| gpu_nodes.div_ceil(r));
    let clusters_v: Vec<ClusterSpec> = (0..clusters)
        .map(|c| ClusterSpec {
            name: format!("member-{c:02}"),
            labels: [("region".to_string(), ["eu", "us", "ap"][c % 3].to_string())].into(),
            topology: rack.map_or_else(Vec::new, |_| LEVELS.map(String::from).to_vec()),
            nodes: [
                racked(&format!("m{c:02}-gpu"), gpu_nodes, &gpu, rack, 0),
                racked(
                    &format!("m{c:02}-cpu"),
                    nodes - gpu_nodes,
                    &cpu,
                    rack,
                    gpu_racks,
                ),
            ]
            .concat(),
            placement: Default::default(),
            reachable: true,
            serves: Default::default(),
        })
        .collect();
    let total_gpu = clusters as u64 * u64::from(gpu_nodes) * 8;
    // 3 levels: root -> 10 orgs -> 10 teams each = 100 leaves.
    let leaf_min = total_gpu / 100;
    let orgs: Vec<Value> = (0..10)
        .map(|o| {
            let teams: Vec<Value> = (0..10)
                .map(|t| json!({"name": format!("team-{o}-{t}"), "namespaces": [format!("ns-{o}-{t}")],
                    "min": {"nvidia.com/gpu": leaf_min.to_string()},
                    "max": {"nvidia.com/gpu": (leaf_min * 4).to_string(), "kube-queue/max-jobs": "200"}}))
                .collect();
            json!({"name": format!("org-{o}"), "min": {"nvidia.com/gpu": (leaf_min * 10).to_string()},
                "max": {"nvidia.com/gpu": (leaf_min * 25).to_string()}, "children": teams})
        })
        .collect();
    let quota = json!({"apiVersion": "scheduling.sigs.k8s.io/v1beta1", "kind": "ElasticQuotaTree",
        "metadata": {"name": "tree", "namespace": "kube-system"},
        "spec": {"root": {"name": "root", "min": {"nvidia.com/gpu": total_gpu.to_string()},
            "max": {"nvidia.com/gpu": total_gpu.to_string()}, "children": orgs}}});
    // Offered load about the fleet's GPU capacity: mean ~7 GPUs x ~75 min per job.
    let span_ms = (jobs as u64) * 7 * 75 * 60_000 / total_gpu.max(1);
    let job_v: Vec<JobSpec> = (0..jobs)
        .map(|i| {
            let ns = format!("ns-{}-{}", rng.below(10), rng.below(10));
            let prio = ["low", "normal", "high"][rng.below(3) as usize];
            // In this order: the draws of the scenario without racks.
            let run_for = (10 + rng.below(140)) * 60_000;
            let mut manifest = job(&mut rng, i, &ns, prio);
            if rack.is_some() {
                let ask = match manifest["kind"].as_str() {
                    Some("PyTorchJob" | "MPIJob") => Some("muster.dev/topology-required"),
                    Some("JobSet") => Some("muster.dev/topology-preferred"),
                    _ => None,
                };
                if let Some(ask) = ask {
                    manifest["metadata"]["annotations"] = json!({ask: LEVELS[1]});
                }
            }
            JobSpec {
                at: (i as u64) * span_ms / jobs.max(1) as u64 / 1000 * 1000,
                run_for,
                running: None,
                // Compact text: 100,000 trees would be most of the benchmark's memory.
                manifest: Manifest::compact(&manifest),
            }
        })
        .collect();
    Scenario {
        clusters: clusters_v,
        quota: Some(quota),
        priority_classes: priority_classes(),
        jobs: job_v,
        runtimes: Vec::new(),
        changes: Vec::new(),
    }
}
