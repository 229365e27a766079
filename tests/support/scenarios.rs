//! Random scenarios for the differential test: members of a few node groups (GPUs or not,
//! tainted, labelled, some unschedulable), quota trees of 2 to 4 levels whose mins name several
//! resources (adding up to their parent's or not; max-jobs, StrictFIFO and preemption by
//! priority on some leaves), batch Jobs and PyTorchJobs with priorities, tolerations, node
//! selectors and member restrictions, arriving and ending over time, and changes of the tree
//! and of members mid-run. Written as `muster sim`'s scenario format, and made smaller for
//! shrinking.

use serde_json::{Value, json};

/// SplitMix64: small, seedable, the same on every machine.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5851_F42D_4C95_7F2D)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// 0..n
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// lo..=hi
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    pub fn pick<T: Copy>(&mut self, v: &[T]) -> T {
        v[self.below(v.len() as u64) as usize]
    }
}

#[derive(Clone, Debug)]
pub struct GNode {
    pub name: String,
    pub count: u64,
    pub cpu: u64,
    pub mem_gi: u64,
    pub gpu: u64,
    pub pool: &'static str,
    pub tainted: bool,
    pub unschedulable: bool,
}

#[derive(Clone, Debug)]
pub struct GCluster {
    pub name: String,
    pub region: &'static str,
    pub nodes: Vec<GNode>,
    pub reachable: bool,
}

#[derive(Clone, Debug)]
pub struct GJob {
    pub name: String,
    pub namespace: String,
    pub at_s: u64,
    pub run_s: u64,
    /// A PyTorchJob (a cpu master and `pods` workers) rather than a batch Job of `pods`.
    pub pytorch: bool,
    pub pods: u64,
    pub cpu: u64,
    pub mem_gi: u64,
    pub gpu: u64,
    pub priority: Option<&'static str>,
    pub tolerates: bool,
    pub pool: Option<&'static str>,
    pub clusters: Option<String>,
}

#[derive(Clone, Debug)]
pub enum GChangeKind {
    Tree(Value),
    Cluster(GCluster),
    Reachable(String, bool),
}

#[derive(Clone, Debug)]
pub struct GChange {
    pub at_s: u64,
    pub kind: GChangeKind,
}

#[derive(Clone, Debug)]
pub struct GScenario {
    pub clusters: Vec<GCluster>,
    pub tree: Value,
    pub jobs: Vec<GJob>,
    pub changes: Vec<GChange>,
}

const RES: [&str; 3] = ["nvidia.com/gpu", "cpu", "memory"];

fn amount(r: &str, units: u64) -> Value {
    match r {
        "memory" => json!(format!("{units}Gi")),
        _ => json!(units.to_string()),
    }
}

fn cluster(rng: &mut Rng, name: String) -> GCluster {
    let groups = rng.range(1, 2);
    let nodes = (0..groups)
        .map(|g| GNode {
            name: format!("{name}-g{g}"),
            count: rng.range(1, 3),
            cpu: rng.pick(&[8, 16, 32]),
            mem_gi: rng.pick(&[32, 64, 128]),
            gpu: rng.pick(&[0, 2, 4, 4, 8]),
            pool: rng.pick(&["a", "b"]),
            tainted: rng.chance(15),
            unschedulable: rng.chance(5),
        })
        .collect();
    GCluster {
        name,
        region: rng.pick(&["eu", "us"]),
        nodes,
        reachable: !rng.chance(5),
    }
}

/// A tree node's mins and maxes: `budget` is what the parent's min leaves per resource (None:
/// the parent names no min of it). In a `uniform` tree every node names a min of every
/// resource its parent does (as the ACK example tree does).
fn quota(
    rng: &mut Rng,
    budget: &[Option<u64>; 3],
    uniform: bool,
) -> ([Option<u64>; 3], Value, Value) {
    let mut mins = [None; 3];
    let mut min = serde_json::Map::new();
    let mut max = serde_json::Map::new();
    for (i, r) in RES.iter().enumerate() {
        let scale = if i == 0 { 8 } else { 48 };
        let m = match budget[i] {
            Some(b) if uniform => Some(b),
            Some(b) if rng.chance(80) => Some(rng.range(b / 2, b)),
            Some(_) => None,
            None if rng.chance(50) => Some(rng.range(1, scale)),
            None => None,
        };
        if let Some(m) = m {
            min.insert(r.to_string(), amount(r, m));
        }
        mins[i] = m;
        if rng.chance(60) {
            let x = m.unwrap_or(0) + rng.range(0, scale);
            max.insert(r.to_string(), amount(r, x.max(1)));
        }
    }
    (mins, Value::Object(min), Value::Object(max))
}

/// Splits the parent's mins among `n` children: sometimes exactly, sometimes less.
fn split(rng: &mut Rng, mins: &[Option<u64>; 3], n: u64, uniform: bool) -> Vec<[Option<u64>; 3]> {
    let mut out = vec![[None; 3]; n as usize];
    for i in 0..3 {
        let Some(total) = mins[i] else { continue };
        if uniform {
            // Equal shares of all of it.
            for o in out.iter_mut() {
                o[i] = Some(total / n);
            }
            continue;
        }
        let mut left = if rng.chance(50) {
            total
        } else {
            rng.range(0, total)
        };
        for (k, o) in out.iter_mut().enumerate() {
            let share = if k as u64 == n - 1 {
                left
            } else {
                rng.range(0, left)
            };
            left -= share;
            o[i] = Some(share);
        }
    }
    out
}

fn tree_node(
    rng: &mut Rng,
    name: String,
    budget: [Option<u64>; 3],
    depth: u64,
    uniform: bool,
    leaves: &mut Vec<String>,
) -> Value {
    let (mins, min, max) = quota(rng, &budget, uniform);
    let mut node = json!({"name": name});
    if min.as_object().is_some_and(|m| !m.is_empty()) {
        node["min"] = min;
    }
    let leaf = depth == 0 || (leaves.len() >= 2 && rng.chance(30));
    if leaf {
        let ns = format!("ns-{}", leaves.len());
        leaves.push(ns.clone());
        node["namespaces"] = json!([ns]);
        let mut max = max;
        if rng.chance(20) {
            max["kube-queue/max-jobs"] = json!(rng.range(1, 3).to_string());
        }
        let mut attrs = serde_json::Map::new();
        if rng.chance(25) {
            attrs.insert("muster.dev/queueing-strategy".into(), json!("StrictFIFO"));
        }
        if rng.chance(30) {
            attrs.insert(
                "muster.dev/within-queue-preemption".into(),
                json!("LowerPriority"),
            );
        }
        if !attrs.is_empty() {
            node["attributes"] = Value::Object(attrs);
        }
        if max.as_object().is_some_and(|m| !m.is_empty()) {
            node["max"] = max;
        }
        return node;
    }
    if max.as_object().is_some_and(|m| !m.is_empty()) {
        node["max"] = max;
    }
    let n = rng.range(2, 3);
    let shares = split(rng, &mins, n, uniform);
    let children: Vec<Value> = shares
        .into_iter()
        .enumerate()
        .map(|(i, b)| tree_node(rng, format!("{name}-{i}"), b, depth - 1, uniform, leaves))
        .collect();
    node["children"] = json!(children);
    node
}

fn tree(rng: &mut Rng) -> (Value, Vec<String>) {
    let mut leaves = Vec::new();
    let depth = rng.range(1, 3);
    let uniform = rng.chance(40);
    let root_budget = [
        (uniform || rng.chance(60)).then(|| rng.range(4, 16)),
        (uniform || rng.chance(40)).then(|| rng.range(16, 96)),
        (uniform || rng.chance(40)).then(|| rng.range(64, 384)),
    ];
    let root = tree_node(rng, "root".into(), root_budget, depth, uniform, &mut leaves);
    (root, leaves)
}

fn job(rng: &mut Rng, i: usize, namespaces: &[String], clusters: &[GCluster]) -> GJob {
    let namespace = if rng.chance(5) {
        "outside".to_string()
    } else {
        namespaces[rng.below(namespaces.len() as u64) as usize].clone()
    };
    GJob {
        name: format!("j{i}"),
        namespace,
        at_s: rng.below(24) * 5,
        run_s: rng.range(2, 40) * 5,
        pytorch: rng.chance(25),
        pods: rng.range(1, 3),
        cpu: rng.range(1, 8),
        mem_gi: rng.range(1, 24),
        gpu: rng.pick(&[0, 1, 2, 2, 4, 4, 8]),
        priority: rng.pick(&[None, None, Some("low"), Some("mid"), Some("high")]),
        tolerates: rng.chance(25),
        pool: rng.chance(15).then(|| rng.pick(&["a", "b"])),
        clusters: rng.chance(10).then(|| {
            clusters[rng.below(clusters.len() as u64) as usize]
                .name
                .clone()
        }),
    }
}

/// Gives two in five nodes below the root a fair-sharing weight.
fn weigh(node: &mut Value, rng: &mut Rng, root: bool) {
    if !root && rng.chance(40) {
        let w = rng.pick(&["1", "2", "3", "500m", "1500m"]);
        if !node["attributes"].is_object() {
            node["attributes"] = json!({});
        }
        node["attributes"]["muster.dev/fair-sharing-weight"] = json!(w);
    }
    if let Some(children) = node.get_mut("children").and_then(Value::as_array_mut) {
        for c in children {
            weigh(c, rng, false);
        }
    }
}

/// Lets half the nodes with children preempt for fairness between their subtrees (F1).
fn allow_fair_preemption(node: &mut Value, rng: &mut Rng) {
    let Some(children) = node.get_mut("children").and_then(Value::as_array_mut) else {
        return;
    };
    for c in children.iter_mut() {
        allow_fair_preemption(c, rng);
    }
    if rng.chance(50) {
        if !node["attributes"].is_object() {
            node["attributes"] = json!({});
        }
        node["attributes"]["muster.dev/fair-sharing-preemption"] =
            json!("LessThanOrEqualToFinalShare");
    }
}

/// The scenario of `seed`.
pub fn generate(seed: u64) -> GScenario {
    let mut rng = Rng::new(seed);
    let clusters: Vec<GCluster> = (0..rng.range(1, 3))
        .map(|i| cluster(&mut rng, format!("m{i}")))
        .collect();
    let (mut tree, namespaces) = tree(&mut rng);
    // Fair-sharing weights come from a stream of their own: the rest of a seed's scenario is
    // what it was before weights existed.
    let mut weights = Rng::new(seed ^ 0xFA1);
    weigh(&mut tree, &mut weights, true);
    // So do the nodes that preempt for fairness.
    let mut fairness = Rng::new(seed ^ 0xFA2);
    allow_fair_preemption(&mut tree, &mut fairness);
    let jobs: Vec<GJob> = (0..rng.range(4, 14) as usize)
        .map(|i| job(&mut rng, i, &namespaces, &clusters))
        .collect();
    let mut changes = Vec::new();
    for _ in 0..rng.below(3) {
        let at_s = rng.below(30) * 5;
        let kind = match rng.below(3) {
            0 => {
                // A new tree over the same namespaces (leaves may move, mins and maxes change).
                let mut r2 = Rng::new(rng.next());
                let (mut t, ns) = self::tree(&mut r2);
                rename_namespaces(&mut t, &ns, &namespaces);
                weigh(&mut t, &mut weights, true);
                allow_fair_preemption(&mut t, &mut fairness);
                GChangeKind::Tree(t)
            }
            1 => {
                let c = if rng.chance(50) || clusters.is_empty() {
                    cluster(&mut rng, format!("m{}", clusters.len()))
                } else {
                    let mut c = clusters[rng.below(clusters.len() as u64) as usize].clone();
                    // Nodes added, removed or resized.
                    if rng.chance(50) && c.nodes.len() > 1 {
                        c.nodes.remove(0);
                    } else if let Some(n) = c.nodes.last_mut() {
                        n.count = rng.range(1, 3);
                        n.gpu = rng.pick(&[0, 2, 4, 8]);
                    }
                    c.reachable = true;
                    c
                };
                GChangeKind::Cluster(c)
            }
            _ => {
                let c = &clusters[rng.below(clusters.len() as u64) as usize];
                GChangeKind::Reachable(c.name.clone(), rng.chance(50))
            }
        };
        changes.push(GChange { at_s, kind });
    }
    changes.sort_by_key(|c| c.at_s);
    GScenario {
        clusters,
        tree,
        jobs,
        changes,
    }
}

/// Gives a new tree's leaves the namespaces of the first one (some left out, so that some jobs
/// lose their queue).
fn rename_namespaces(t: &mut Value, ns: &[String], to: &[String]) {
    if let Some(list) = t.get_mut("namespaces").and_then(Value::as_array_mut) {
        for v in list.iter_mut() {
            if let Some(i) = ns.iter().position(|n| Some(n.as_str()) == v.as_str()) {
                *v = json!(to.get(i).cloned().unwrap_or_else(|| format!("spare-{i}")));
            }
        }
    }
    if let Some(children) = t.get_mut("children").and_then(Value::as_array_mut) {
        for c in children {
            rename_namespaces(c, ns, to);
        }
    }
}

fn cluster_json(c: &GCluster) -> Value {
    let nodes: Vec<Value> = c
        .nodes
        .iter()
        .map(|n| {
            let mut alloc = json!({"cpu": n.cpu.to_string(), "memory": format!("{}Gi", n.mem_gi), "pods": "110"});
            if n.gpu > 0 {
                alloc["nvidia.com/gpu"] = json!(n.gpu.to_string());
            }
            let mut v = json!({"name": n.name, "allocatable": alloc, "labels": {"pool": n.pool}});
            if n.count != 1 {
                v["count"] = json!(n.count);
            }
            if n.tainted {
                v["taints"] = json!([{"key": "dedicated", "value": "train", "effect": "NoSchedule"}]);
            }
            if n.unschedulable {
                v["unschedulable"] = json!(true);
            }
            v
        })
        .collect();
    let mut v = json!({"name": c.name, "labels": {"region": c.region}, "nodes": nodes});
    if !c.reachable {
        v["reachable"] = json!(false);
    }
    v
}

fn quota_json(root: &Value) -> Value {
    json!({
        "apiVersion": "scheduling.sigs.k8s.io/v1beta1",
        "kind": "ElasticQuotaTree",
        "metadata": {"name": "elasticquotatree", "namespace": "kube-system"},
        "spec": {"root": root}
    })
}

fn pod_spec(j: &GJob, master: bool) -> Value {
    let mut requests = json!({"cpu": j.cpu.to_string(), "memory": format!("{}Gi", j.mem_gi)});
    let mut limits = json!({});
    if j.gpu > 0 && !master {
        requests["nvidia.com/gpu"] = json!(j.gpu.to_string());
        limits["nvidia.com/gpu"] = json!(j.gpu.to_string());
    }
    if master {
        requests = json!({"cpu": "1", "memory": "2Gi"});
    }
    let mut spec = json!({
        "restartPolicy": "Never",
        "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10.1",
                        "resources": {"requests": requests, "limits": limits}}]
    });
    if let Some(p) = j.priority {
        spec["priorityClassName"] = json!(p);
    }
    if j.tolerates {
        spec["tolerations"] = json!([{"key": "dedicated", "operator": "Equal", "value": "train", "effect": "NoSchedule"}]);
    }
    if let Some(p) = j.pool {
        spec["nodeSelector"] = json!({"pool": p});
    }
    json!({"spec": spec})
}

fn manifest(j: &GJob) -> Value {
    let mut meta = json!({"name": j.name, "namespace": j.namespace});
    if let Some(c) = &j.clusters {
        meta["annotations"] = json!({"muster.dev/clusters": c});
    }
    if j.pytorch {
        json!({
            "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": meta,
            "spec": {"pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": pod_spec(j, true)},
                "Worker": {"replicas": j.pods, "template": pod_spec(j, false)}
            }}
        })
    } else {
        json!({
            "apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
            "spec": {"parallelism": j.pods, "completions": j.pods, "template": pod_spec(j, false)}
        })
    }
}

impl GScenario {
    pub fn to_value(&self) -> Value {
        let changes: Vec<Value> = self
            .changes
            .iter()
            .map(|c| {
                let at = format!("{}s", c.at_s);
                match &c.kind {
                    GChangeKind::Tree(t) => json!({"at": at, "quota": quota_json(t)}),
                    GChangeKind::Cluster(cl) => json!({"at": at, "cluster": cluster_json(cl)}),
                    GChangeKind::Reachable(n, up) => {
                        json!({"at": at, "reachable": {"cluster": n, "reachable": up}})
                    }
                }
            })
            .collect();
        let mut v = json!({
            "clusters": self.clusters.iter().map(cluster_json).collect::<Vec<_>>(),
            "priorityClasses": {"low": 10, "mid": 100, "high": 1000},
            "quota": quota_json(&self.tree),
            "jobs": self.jobs.iter().map(|j| json!({
                "at": format!("{}s", j.at_s),
                "runFor": format!("{}s", j.run_s),
                "manifest": manifest(j),
            })).collect::<Vec<_>>(),
        });
        if !changes.is_empty() {
            v["changes"] = json!(changes);
        }
        v
    }

    pub fn to_yaml(&self) -> String {
        serde_yaml::to_string(&self.to_value()).unwrap_or_default()
    }

    /// Every scenario one step smaller: a job, a change, a member or a node group out, a
    /// group of one node fewer.
    pub fn smaller(&self) -> Vec<GScenario> {
        let mut out = Vec::new();
        for i in (0..self.jobs.len()).rev() {
            let mut g = self.clone();
            g.jobs.remove(i);
            out.push(g);
        }
        for i in (0..self.changes.len()).rev() {
            let mut g = self.clone();
            g.changes.remove(i);
            out.push(g);
        }
        for ci in 0..self.clusters.len() {
            let name = &self.clusters[ci].name;
            let named = |g: &GScenario| {
                g.changes.iter().any(|c| match &c.kind {
                    GChangeKind::Reachable(n, _) => n == name,
                    _ => false,
                }) || g.jobs.iter().any(|j| j.clusters.as_ref() == Some(name))
            };
            if self.clusters.len() > 1 && !named(self) {
                let mut g = self.clone();
                g.clusters.remove(ci);
                out.push(g);
            }
            for ni in 0..self.clusters[ci].nodes.len() {
                if self.clusters[ci].nodes.len() > 1 {
                    let mut g = self.clone();
                    g.clusters[ci].nodes.remove(ni);
                    out.push(g);
                }
                if self.clusters[ci].nodes[ni].count > 1 {
                    let mut g = self.clone();
                    g.clusters[ci].nodes[ni].count -= 1;
                    out.push(g);
                }
            }
        }
        out
    }
}
