//! Read-only views of the scheduler's state for observers (metrics, status pages): jobs per queue
//! and priority, admitted jobs per queue and member, quota per tree node, capacity per member.
//!
//! Each query walks the state once (jobs, tree nodes or nodes), allocates only its answer and
//! changes nothing. Amounts are exact milli-units, as everywhere in the core.

use std::collections::BTreeMap;

use super::{JobState, Scheduler};
use crate::fleet::NO_POD_LIMIT;
use crate::resources::{Demand, MAX_JOBS, PODS, Res, at};

/// Jobs waiting in one queue at one priority.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueDepth {
    /// The queue's name: a leaf's path (`root/team-a`), or a namespace without a quota tree.
    pub queue: String,
    pub priority: i32,
    /// Jobs that wait for quota or capacity.
    pub pending: usize,
    /// Jobs that can never run as written (until the tree, the fleet or the classes change).
    pub inadmissible: usize,
}

/// Jobs admitted from one queue to one member and not finished.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdmittedCount {
    pub queue: String,
    pub cluster: String,
    pub jobs: usize,
}

/// One resource at one quota tree node, in milli-units.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuotaAmount {
    pub resource: String,
    pub min: i128,
    /// `None`: not limited at this node.
    pub max: Option<i128>,
    pub used: i128,
}

/// A quota tree node: the resources its min or max names, and those it uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuotaUsage {
    /// The node's path (`root/team-a`).
    pub node: String,
    pub leaf: bool,
    /// Sorted by resource name.
    pub resources: Vec<QuotaAmount>,
    /// Its weight in fair sharing, in milli (1000: weight 1).
    pub weight_milli: i128,
    /// Its weighted dominant share of what it borrows from its parent now (fair sharing, A7),
    /// and the resource it comes from; `None` for the root.
    pub share: Option<(crate::quota::Share, Option<String>)>,
    /// Its fair share among its active siblings (`None`: the root, or not active).
    pub fair_share: Option<crate::quota::Share>,
}

/// One resource of one member cluster, in milli-units.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Capacity {
    pub resource: String,
    /// Sum over all nodes.
    pub allocatable: i128,
    /// Sum over nodes that take new pods of allocatable − external use − reservations (≥ 0 each).
    pub free: i128,
    /// The most free on any one node that takes new pods: the largest block one pod can get.
    pub largest_free: i128,
}

/// A member cluster's size and what is free on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterCapacity {
    pub cluster: String,
    pub reachable: bool,
    pub nodes: usize,
    /// Nodes that take new pods (neither unschedulable nor NotReady).
    pub schedulable_nodes: usize,
    /// Resources some node has, sorted by name. `pods` is left out when some node reports no
    /// pod limit; `kube-queue/max-jobs` is never a node resource.
    pub resources: Vec<Capacity>,
    /// Per topology level (widest first), its domains and the most free in one of them.
    pub topology: Vec<LevelCapacity>,
}

/// One topology level of a member cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LevelCapacity {
    /// The node label of the level (`example.com/rack`).
    pub level: String,
    /// Its domains (a rack is counted inside its block).
    pub domains: usize,
    /// Per resource of [`ClusterCapacity::resources`], the most free in any one domain of the
    /// level (summed over its nodes that take new pods): the largest gang a required ask of
    /// the level can get.
    pub largest_free: Vec<(String, i128)>,
}

impl Scheduler {
    /// Waiting jobs (pending and inadmissible) per queue and priority, sorted by queue, then
    /// priority (highest first). Queues without waiting jobs are absent.
    pub fn queue_depths(&self) -> Vec<QueueDepth> {
        let mut by: BTreeMap<(usize, std::cmp::Reverse<i32>), (usize, usize)> = BTreeMap::new();
        for j in &self.jobs {
            let slot = match j.state {
                JobState::Pending => 0,
                JobState::Inadmissible(_) => 1,
                _ => continue,
            };
            let e = by
                .entry((j.queue, std::cmp::Reverse(j.priority)))
                .or_default();
            if slot == 0 {
                e.0 += 1;
            } else {
                e.1 += 1;
            }
        }
        let mut out: Vec<QueueDepth> = by
            .into_iter()
            .map(|((q, p), (pending, inadmissible))| QueueDepth {
                queue: self.queues.name(q).to_string(),
                priority: p.0,
                pending,
                inadmissible,
            })
            .collect();
        out.sort_by(|a, b| a.queue.cmp(&b.queue).then(b.priority.cmp(&a.priority)));
        out
    }

    /// Admitted, unfinished jobs per queue and member cluster, sorted by queue then cluster.
    pub fn admitted_counts(&self) -> Vec<AdmittedCount> {
        let mut by: BTreeMap<(usize, usize), usize> = BTreeMap::new();
        for j in &self.jobs {
            if let JobState::Admitted { cluster, .. } = j.state {
                *by.entry((j.queue, cluster)).or_default() += 1;
            }
        }
        let mut out: Vec<AdmittedCount> = by
            .into_iter()
            .map(|((q, c), jobs)| AdmittedCount {
                queue: self.queues.name(q).to_string(),
                cluster: self.clusters[c].name.clone(),
                jobs,
            })
            .collect();
        out.sort_by(|a, b| a.queue.cmp(&b.queue).then(a.cluster.cmp(&b.cluster)));
        out
    }

    /// min, max and usage at every node of the quota tree, in tree order (root first); empty
    /// without a tree. A resource appears at a node when its min or max names it, when some job
    /// ever submitted asks for it (so a series does not vanish when usage drops to zero) or
    /// when the node uses some of it.
    pub fn quota_usage(&self) -> Vec<QuotaUsage> {
        let Some(q) = &self.quota else {
            return Vec::new();
        };
        let mut asked: Vec<Res> = self
            .shapes
            .iter()
            .flat_map(|s| s.quota_demand.iter().map(|(r, _)| r))
            .collect();
        asked.sort_unstable();
        asked.dedup();
        let fair = self.fair_shares();
        q.tree
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let mut res: BTreeMap<String, QuotaAmount> = BTreeMap::new();
                let mut add = |name: &str, r: Option<Res>| {
                    res.entry(name.to_string()).or_insert_with(|| QuotaAmount {
                        resource: name.to_string(),
                        min: r.map_or(0, |r| q.min_of(i, r)),
                        max: r.and_then(|r| q.max_of(i, r)),
                        used: r.map_or(0, |r| q.used_of(i, r)),
                    });
                };
                for (name, _) in n.min.iter().chain(n.max.iter()) {
                    add(name, self.table.get(name));
                }
                for &r in &asked {
                    add(self.table.name(r), Some(r));
                }
                for (k, v) in q.used[i].iter().enumerate() {
                    if *v != 0 {
                        let r = Res(u16::try_from(k).unwrap_or(u16::MAX));
                        add(self.table.name(r), Some(r));
                    }
                }
                let share = n.parent.map(|_| {
                    let (s, d) = q.share(i, &Demand::default());
                    (s, d.map(|d| self.table.name(d.res).to_string()))
                });
                QuotaUsage {
                    node: n.path.clone(),
                    leaf: n.children.is_empty(),
                    resources: res.into_values().collect(),
                    weight_milli: q.weight_milli(i),
                    share,
                    fair_share: fair.get(i).copied().flatten(),
                }
            })
            .collect()
    }

    /// Size, reachability and free capacity of every member cluster, sorted by name.
    pub fn cluster_capacity(&self) -> Vec<ClusterCapacity> {
        let mut out: Vec<ClusterCapacity> = self
            .clusters
            .iter()
            .map(|c| {
                let len = c.nodes.iter().map(|n| n.alloc.len()).max().unwrap_or(0);
                let mut alloc = vec![0i128; len];
                let mut free = vec![0i128; len];
                let mut largest = vec![0i128; len];
                let mut schedulable = 0;
                let mut pod_limit_unknown = false;
                for n in &c.nodes {
                    let takes_pods = n.takes_pods();
                    schedulable += usize::from(takes_pods);
                    pod_limit_unknown |= at(&n.alloc, PODS) >= NO_POD_LIMIT;
                    for (k, a) in n.alloc.iter().enumerate() {
                        alloc[k] = alloc[k].saturating_add(*a);
                        if takes_pods {
                            let r = Res(u16::try_from(k).unwrap_or(u16::MAX));
                            let f = n.free(r).max(0);
                            free[k] = free[k].saturating_add(f);
                            largest[k] = largest[k].max(f);
                        }
                    }
                }
                let mut resources: Vec<Capacity> = (0..len)
                    .filter_map(|k| {
                        let r = Res(u16::try_from(k).unwrap_or(u16::MAX));
                        let skip =
                            alloc[k] == 0 || r == MAX_JOBS || (r == PODS && pod_limit_unknown);
                        (!skip).then(|| Capacity {
                            resource: self.table.name(r).to_string(),
                            allocatable: alloc[k],
                            free: free[k],
                            largest_free: largest[k],
                        })
                    })
                    .collect();
                resources.sort_by(|a, b| a.resource.cmp(&b.resource));
                let topology = self.level_capacity(c, &resources);
                ClusterCapacity {
                    cluster: c.name.clone(),
                    reachable: c.reachable,
                    nodes: c.nodes.len(),
                    schedulable_nodes: schedulable,
                    resources,
                    topology,
                }
            })
            .collect();
        out.sort_by(|a, b| a.cluster.cmp(&b.cluster));
        out
    }

    /// Per topology level of `c`, its domain count and the most free of each of `resources` in
    /// one domain.
    fn level_capacity(
        &self,
        c: &crate::fleet::Cluster,
        resources: &[Capacity],
    ) -> Vec<LevelCapacity> {
        let res: Vec<(String, Res)> = resources
            .iter()
            .filter_map(|r| self.table.get(&r.resource).map(|k| (r.resource.clone(), k)))
            .collect();
        let doms = &c.levels;
        doms.levels
            .iter()
            .zip(&doms.per_level)
            .map(|(level, domains)| LevelCapacity {
                level: level.clone(),
                domains: domains.len(),
                largest_free: res
                    .iter()
                    .map(|(name, r)| {
                        let most = domains
                            .iter()
                            .map(|d| {
                                d.nodes
                                    .iter()
                                    .filter(|&&n| c.nodes[n].takes_pods())
                                    .fold(0i128, |a, &n| {
                                        a.saturating_add(c.nodes[n].free(*r).max(0))
                                    })
                            })
                            .max()
                            .unwrap_or(0);
                        (name.clone(), most)
                    })
                    .collect(),
            })
            .collect()
    }

    /// The queue jobs of `namespace` go to: its leaf's path, or the namespace itself without a
    /// quota tree; `None` when the namespace is outside the tree (not muster's).
    pub fn queue_of_namespace(&self, namespace: &str) -> Option<String> {
        match &self.quota {
            Some(q) => q
                .tree
                .leaf_for(namespace)
                .map(|leaf| q.tree.nodes[leaf].path.clone()),
            None => Some(namespace.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::{ClusterInfo, NodeInfo};
    use crate::quantity::{Quantity, ResourceList};
    use crate::quota::QuotaTree;
    use crate::scheduler::{Config, Submitted};
    use crate::workload::{Workload, interpret};

    fn list(pairs: &[(&str, &str)]) -> ResourceList {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), Quantity::parse(v).expect("quantity")))
            .collect()
    }

    fn node(name: &str, alloc: &[(&str, &str)]) -> NodeInfo {
        NodeInfo {
            name: name.into(),
            allocatable: list(alloc),
            ready: true,
            ..Default::default()
        }
    }

    fn job(ns: &str, name: &str, cpu: &str, gpu: u32, class: Option<&str>) -> Workload {
        let mut spec = serde_json::json!({"containers": [{"name": "c", "image": "x",
            "resources": {"limits": {"cpu": cpu, "nvidia.com/gpu": gpu}}}]});
        if let Some(c) = class {
            spec["priorityClassName"] = c.into();
        }
        interpret(&serde_json::json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"template": {"spec": spec}}
        }))
        .expect("job")
    }

    fn tree() -> QuotaTree {
        QuotaTree::parse(&serde_json::json!({
            "apiVersion": "scheduling.sigs.k8s.io/v1beta1", "kind": "ElasticQuotaTree",
            "spec": {"root": {"name": "root", "max": {"nvidia.com/gpu": "4"}, "children": [
                {"name": "a", "namespaces": ["ns-a"], "min": {"cpu": "1"},
                 "max": {"nvidia.com/gpu": "4"}},
                {"name": "b", "namespaces": ["ns-b"]}]}}
        }))
        .expect("tree")
    }

    fn scheduler() -> Scheduler {
        let mut s = Scheduler::new(Config::default());
        s.set_cluster(&ClusterInfo {
            name: "m".into(),
            nodes: vec![
                node(
                    "n0",
                    &[("cpu", "8"), ("nvidia.com/gpu", "2"), ("pods", "10")],
                ),
                node(
                    "n1",
                    &[("cpu", "8"), ("nvidia.com/gpu", "2"), ("pods", "10")],
                ),
            ],
            ..Default::default()
        });
        s.set_quota_tree(Some(tree()));
        s.set_priority_classes([("high".to_string(), 50)].into_iter().collect());
        s
    }

    #[test]
    fn depths_and_admitted_counts_follow_job_states() {
        let mut s = scheduler();
        let depth = |queue: &str, priority, pending, inadmissible| QueueDepth {
            queue: queue.into(),
            priority,
            pending,
            inadmissible,
        };
        let admitted = |queue: &str, jobs| AdmittedCount {
            queue: queue.into(),
            cluster: "m".into(),
            jobs,
        };
        let Submitted::Queued(x) = s.submit(&job("ns-a", "x", "1", 2, None), 0) else {
            panic!("queued")
        };
        assert!(matches!(
            s.submit(&job("ns-a", "y", "1", 2, None), 1),
            Submitted::Queued(_)
        ));
        assert_eq!(
            s.cycle().len(),
            2,
            "both admitted: the root's 4 GPUs are taken"
        );
        assert_eq!(s.queue_depths(), vec![]);
        assert_eq!(s.admitted_counts(), vec![admitted("root/a", 2)]);
        assert!(matches!(
            s.submit(&job("ns-b", "z", "500m", 1, Some("high")), 2),
            Submitted::Queued(_)
        ));
        assert!(matches!(
            s.submit(&job("ns-a", "v", "1", 1, None), 3),
            Submitted::Queued(_)
        ));
        assert!(matches!(
            s.submit(&job("ns-b", "too-big", "1", 5, Some("high")), 4),
            Submitted::Inadmissible(..)
        ));
        let d = s.cycle();
        assert_eq!(d.len(), 2, "z and v wait: {d:?}");
        assert_eq!(
            s.queue_depths(),
            vec![
                depth("root/a", 0, 1, 0),
                depth("root/b", 50, 1, 0),
                // Its priority is not resolved: it is above a max before that.
                depth("root/b", 0, 0, 1)
            ]
        );
        s.finish(x);
        s.cycle();
        assert_eq!(s.queue_depths(), vec![depth("root/b", 0, 0, 1)]);
        assert_eq!(
            s.admitted_counts(),
            vec![admitted("root/a", 2), admitted("root/b", 1)]
        );
    }

    #[test]
    fn quota_usage_names_min_max_and_used_resources() {
        let mut s = scheduler();
        s.submit(&job("ns-a", "x", "1500m", 2, None), 0);
        s.cycle();
        let u = s.quota_usage();
        assert_eq!(
            u.iter()
                .map(|n| (n.node.as_str(), n.leaf))
                .collect::<Vec<_>>(),
            vec![("root", false), ("root/a", true), ("root/b", true)]
        );
        let a = &u[1].resources;
        let get = |name: &str| a.iter().find(|x| x.resource == name).cloned();
        assert_eq!(
            get("cpu"),
            Some(QuotaAmount {
                resource: "cpu".into(),
                min: 1000,
                max: None,
                used: 1500
            })
        );
        assert_eq!(
            get("nvidia.com/gpu").map(|x| (x.max, x.used)),
            Some((Some(4000), 2000))
        );
        assert_eq!(get("pods").map(|x| x.used), Some(1000));
        assert_eq!(get("kube-queue/max-jobs").map(|x| x.used), Some(1000));
        // b names nothing and uses nothing, but shows what jobs ask for, at zero.
        assert_eq!(
            u[2].resources
                .iter()
                .map(|x| (x.resource.as_str(), x.min, x.max, x.used))
                .collect::<Vec<_>>(),
            vec![
                ("cpu", 0, None, 0),
                ("kube-queue/max-jobs", 0, None, 0),
                ("nvidia.com/gpu", 0, None, 0),
                ("pods", 0, None, 0)
            ]
        );
        assert_eq!(s.queue_of_namespace("ns-b").as_deref(), Some("root/b"));
        assert_eq!(s.queue_of_namespace("elsewhere"), None);
    }

    #[test]
    fn capacity_counts_free_blocks_on_nodes_that_take_pods() {
        let mut s = scheduler();
        s.submit(&job("ns-a", "x", "3", 2, None), 0);
        s.cycle();
        let mut info = ClusterInfo {
            name: "other".into(),
            nodes: vec![
                node("o0", &[("cpu", "4")]),
                NodeInfo {
                    unschedulable: true,
                    ..node("o1", &[("cpu", "16")])
                },
            ],
            ..Default::default()
        };
        s.set_cluster(&info);
        s.set_reachable("other", false);
        let caps = s.cluster_capacity();
        assert_eq!(caps.len(), 2);
        let m = &caps[0];
        assert_eq!(
            (
                m.cluster.as_str(),
                m.reachable,
                m.nodes,
                m.schedulable_nodes
            ),
            ("m", true, 2, 2)
        );
        let gpu = m.resources.iter().find(|r| r.resource == "nvidia.com/gpu");
        assert_eq!(
            gpu.map(|g| (g.allocatable, g.free, g.largest_free)),
            Some((4000, 2000, 2000))
        );
        let cpu = m.resources.iter().find(|r| r.resource == "cpu");
        assert_eq!(
            cpu.map(|c| (c.allocatable, c.free, c.largest_free)),
            Some((16000, 13000, 8000))
        );
        let pods = m.resources.iter().find(|r| r.resource == "pods");
        assert_eq!(pods.map(|p| p.free), Some(19000));
        let o = &caps[1];
        assert_eq!((o.reachable, o.nodes, o.schedulable_nodes), (false, 2, 1));
        assert_eq!(
            o.resources
                .iter()
                .map(|r| (r.resource.as_str(), r.allocatable, r.free, r.largest_free))
                .collect::<Vec<_>>(),
            vec![("cpu", 20000, 4000, 4000)],
            "no pods (no limit reported), the unschedulable node's cpu is not free"
        );
        info.nodes.pop();
        s.set_cluster(&info);
        assert_eq!(s.cluster_capacity()[1].nodes, 1);
    }
}
