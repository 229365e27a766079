//! Deep-queue and diverse-shape scenarios for the scale benchmark: members of three node pools
//! (general GPU nodes, a tainted GPU pool some jobs tolerate, CPU nodes), a 20-leaf tree with
//! `min` guarantees, and arrivals at three times the fleet's GPU capacity, so that tens of
//! thousands of jobs wait at once. [`deep`] submits the scale benchmark's 8 job types (a share
//! of them tolerating the tainted pool); [`diverse`] draws from a catalogue of hundreds of
//! shapes (sizes, kinds, node selectors, required affinity, tolerations). Deterministic for a
//! given size.

use k8s_openapi::api::core::v1::Taint;
use serde_json::{Value, json};

use super::{Rng, job, list, pool, priority_classes};
use muster::sim::{ClusterSpec, JobSpec, Manifest, Scenario};

/// Offered GPU load over the arrival span, as a multiple of the fleet's GPUs.
const LOAD: u64 = 3;

fn labels(pairs: &[(&str, &str)]) -> std::collections::BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Per member: 40 % general GPU nodes (`accelerator=h100`), 25 % GPU nodes tainted
/// `dedicated=reserved:NoSchedule` (`accelerator=a100`), the rest CPU nodes.
fn fleet(clusters: usize, nodes: u32) -> (Vec<ClusterSpec>, u64) {
    let general = nodes * 2 / 5;
    let reserved = nodes / 4;
    let cpu = nodes - general - reserved;
    let gpu_node = || {
        list(&[
            ("cpu", "128"),
            ("memory", "1Ti"),
            ("pods", "110"),
            ("nvidia.com/gpu", "8"),
        ])
    };
    let specs = (0..clusters)
        .map(|c| ClusterSpec {
            name: format!("member-{c:02}"),
            labels: labels(&[("region", ["eu", "us", "ap"][c % 3])]),
            topology: Vec::new(),
            nodes: vec![
                pool(
                    format!("m{c:02}-general"),
                    general,
                    gpu_node(),
                    labels(&[("pool", "general"), ("accelerator", "h100")]),
                    vec![],
                ),
                pool(
                    format!("m{c:02}-reserved"),
                    reserved,
                    gpu_node(),
                    labels(&[("pool", "reserved"), ("accelerator", "a100")]),
                    vec![Taint {
                        key: "dedicated".into(),
                        value: Some("reserved".into()),
                        effect: "NoSchedule".into(),
                        ..Default::default()
                    }],
                ),
                pool(
                    format!("m{c:02}-cpu"),
                    cpu,
                    list(&[("cpu", "64"), ("memory", "256Gi"), ("pods", "110")]),
                    labels(&[("pool", "cpu")]),
                    vec![],
                ),
            ],
            placement: Default::default(),
            reachable: true,
            serves: Default::default(),
        })
        .collect();
    let total_gpu = clusters as u64 * u64::from(general + reserved) * 8;
    (specs, total_gpu)
}

/// root -> 4 orgs -> 5 teams: 20 leaves, each guaranteed a twentieth of the GPUs.
fn tree(total_gpu: u64) -> Value {
    let leaf_min = total_gpu / 20;
    let orgs: Vec<Value> = (0..4)
        .map(|o| {
            let teams: Vec<Value> = (0..5)
                .map(|t| json!({"name": format!("team-{o}-{t}"), "namespaces": [format!("ns-{o}-{t}")],
                    "min": {"nvidia.com/gpu": leaf_min.to_string()},
                    "max": {"nvidia.com/gpu": (leaf_min * 4).to_string()}}))
                .collect();
            json!({"name": format!("org-{o}"), "min": {"nvidia.com/gpu": (leaf_min * 5).to_string()},
                "max": {"nvidia.com/gpu": (leaf_min * 12).to_string()}, "children": teams})
        })
        .collect();
    json!({"apiVersion": "scheduling.sigs.k8s.io/v1beta1", "kind": "ElasticQuotaTree",
        "metadata": {"name": "tree", "namespace": "kube-system"},
        "spec": {"root": {"name": "root", "min": {"nvidia.com/gpu": total_gpu.to_string()},
            "max": {"nvidia.com/gpu": total_gpu.to_string()}, "children": orgs}}})
}

/// Adds `extra` (e.g. tolerations, a nodeSelector) to every pod template spec of a manifest.
fn patch_pods(v: &mut Value, extra: &Value) {
    match v {
        Value::Object(m) => {
            if m.contains_key("containers")
                && let Some(e) = extra.as_object()
            {
                for (k, x) in e {
                    m.insert(k.clone(), x.clone());
                }
            }
            for (_, x) in m.iter_mut() {
                patch_pods(x, extra);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| patch_pods(x, extra)),
        _ => {}
    }
}

fn tolerate_reserved() -> Value {
    json!({"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "reserved",
        "effect": "NoSchedule"}]})
}

/// GPUs of every pod of a manifest (for pacing the arrivals).
fn gpus(v: &Value) -> u64 {
    match v {
        Value::Object(m) => {
            let here = m
                .get("nvidia.com/gpu")
                .and_then(|g| {
                    g.as_u64()
                        .or_else(|| g.as_str().and_then(|s| s.parse().ok()))
                })
                .unwrap_or(0);
            let mult = m
                .get("replicas")
                .or_else(|| m.get("parallelism"))
                .and_then(Value::as_u64)
                .unwrap_or(1);
            let inner: u64 = m
                .iter()
                .filter(|(k, _)| *k != "nvidia.com/gpu")
                .map(|(_, x)| gpus(x))
                .sum();
            here + mult * inner
        }
        Value::Array(a) => a.iter().map(gpus).sum(),
        _ => 0,
    }
}

fn scenario_of(
    rng: &mut Rng,
    clusters: usize,
    nodes: u32,
    jobs: usize,
    mut make: impl FnMut(&mut Rng, usize, &str, &str) -> Value,
) -> Scenario {
    let (clusters_v, total_gpu) = fleet(clusters, nodes);
    let mut gpu_ms = 0u64;
    let mut job_v: Vec<JobSpec> = (0..jobs)
        .map(|i| {
            let ns = format!("ns-{}-{}", rng.below(4), rng.below(5));
            let prio = ["low", "normal", "high"][rng.below(3) as usize];
            let run_for = (10 + rng.below(140)) * 60_000;
            let manifest = make(rng, i, &ns, prio);
            gpu_ms += gpus(&manifest) * run_for;
            JobSpec {
                at: 0,
                run_for,
                running: None,
                // Compact text: 50,000 trees would hold most of the benchmark's memory.
                manifest: Manifest::compact(&manifest),
            }
        })
        .collect();
    let span_ms = gpu_ms / (total_gpu * LOAD).max(1);
    for (i, j) in job_v.iter_mut().enumerate() {
        j.at = (i as u64) * span_ms / jobs.max(1) as u64 / 1000 * 1000;
    }
    Scenario {
        clusters: clusters_v,
        quota: Some(tree(total_gpu)),
        priority_classes: priority_classes(),
        jobs: job_v,
        runtimes: Vec::new(),
        changes: Vec::new(),
    }
}

/// The deep queue: the scale benchmark's 8 job types, 30 % of them tolerating the tainted pool.
pub fn deep(jobs: usize, clusters: usize, nodes: u32) -> Scenario {
    let mut rng = Rng(0x5DEE_CE66_D1CE_5EED);
    scenario_of(&mut rng, clusters, nodes, jobs, |rng, i, ns, prio| {
        let mut m = job(rng, i, ns, prio);
        if rng.below(10) < 3 {
            patch_pods(&mut m, &tolerate_reserved());
        }
        m
    })
}

/// One entry of the diverse catalogue: a kind, pods per component, per-pod requests, and where
/// the pods may go.
struct Template {
    kind: u64,
    workers: u64,
    gpu: u64,
    cpu: u64,
    mem_gi: u64,
    /// 0 anywhere, 1 nodeSelector h100, 2 nodeSelector a100 (tolerating), 3 affinity either
    /// (tolerating), 4 anywhere but tolerating.
    place: u64,
}

/// Distinct templates in the diverse catalogue.
pub const TEMPLATES: usize = 300;

fn catalogue(rng: &mut Rng) -> Vec<Template> {
    (0..TEMPLATES)
        .map(|_| {
            let gpu = [0, 1, 1, 2, 2, 4, 4, 8][rng.below(8) as usize];
            let base = gpu.max(1);
            Template {
                kind: rng.below(4),
                workers: [1, 1, 2, 2, 3, 4, 6, 8][rng.below(8) as usize],
                gpu,
                cpu: base * [4, 8, 12, 16][rng.below(4) as usize],
                mem_gi: base * [16, 32, 48, 64][rng.below(4) as usize],
                place: [0, 0, 0, 0, 1, 1, 2, 3, 4, 4][rng.below(10) as usize],
            }
        })
        .collect()
}

fn render(t: &Template, i: usize, ns: &str, prio: &str) -> Value {
    let name = format!("job-{i}");
    let pod = |cpu: u64, mem_gi: u64, gpu: u64| {
        let mut limits = json!({"cpu": cpu.to_string(), "memory": format!("{mem_gi}Gi")});
        if gpu > 0 {
            limits["nvidia.com/gpu"] = json!(gpu);
        }
        let mut spec = json!({"priorityClassName": prio, "containers": [{"name": "main",
            "image": "registry.k8s.io/pause:3.10.1", "resources": {"limits": limits}}]});
        let extra = match t.place {
            1 => json!({"nodeSelector": {"accelerator": "h100"}}),
            2 => {
                let mut e = tolerate_reserved();
                e["nodeSelector"] = json!({"accelerator": "a100"});
                e
            }
            3 => {
                let mut e = tolerate_reserved();
                e["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                    {"nodeSelectorTerms": [{"matchExpressions": [{"key": "accelerator",
                        "operator": "In", "values": ["h100", "a100"]}]}]}}});
                e
            }
            4 => tolerate_reserved(),
            _ => json!({}),
        };
        // Selectors and tolerations go to GPU pods only: a CPU-only pod may go anywhere.
        if gpu > 0 {
            patch_pods(&mut spec, &extra);
        }
        json!({"spec": spec})
    };
    let worker = pod(t.cpu, t.mem_gi, t.gpu);
    match t.kind {
        0 => json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"parallelism": t.workers, "completions": t.workers, "template": worker}}),
        1 => json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": pod(4, 32, 0)},
                "Worker": {"replicas": t.workers, "template": worker}}}}),
        2 => json!({"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": pod(1, 2, 0)},
                "Worker": {"replicas": t.workers, "template": worker}}}}),
        _ => json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"replicatedJobs": [{"name": "shard", "replicas": 2,
                "template": {"spec": {"parallelism": t.workers.div_ceil(2),
                    "completions": t.workers.div_ceil(2), "template": worker}}}]}}),
    }
}

/// Diverse shapes: each job drawn from a catalogue of [`TEMPLATES`] templates.
pub fn diverse(jobs: usize, clusters: usize, nodes: u32) -> Scenario {
    let mut rng = Rng(0xD1CE_D1CE_0BAD_F00D);
    let cat = catalogue(&mut rng);
    scenario_of(&mut rng, clusters, nodes, jobs, |rng, i, ns, prio| {
        let t = &cat[rng.below(TEMPLATES as u64) as usize];
        render(t, i, ns, prio)
    })
}
