//! The fleet: member clusters, their nodes and what is already used on each node.
//!
//! Owns per-node allocatable/used vectors, node-level filters (taints and tolerations,
//! nodeSelector, required node affinity, unschedulable, NotReady) and cluster summaries used to
//! prune. Knows nothing about jobs, queues or quota; never decides from cluster totals alone.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{
    Node as K8sNode, NodeSelector, NodeSelectorRequirement, Taint, Toleration,
};

use serde::{Deserialize, Serialize};

use crate::quantity::ResourceList;
use crate::resources::{PODS, Res, ResourceTable, at, set};
use crate::workload::{JobKind, RuntimeNeed, Workload};

pub mod domains;
mod summary;

pub use summary::Summary;

/// Each node's labels, in node order (what [`domains::Domains`] groups by).
fn nodes_for_levels(info: &ClusterInfo) -> Vec<&BTreeMap<String, String>> {
    info.nodes.iter().map(|n| &n.labels).collect()
}

/// A node as the core is told about it (from a Node object or a scenario file).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeInfo {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub allocatable: ResourceList,
    pub unschedulable: bool,
    pub ready: bool,
}

impl NodeInfo {
    /// A ready node with these allocatable amounts (tests' fixture).
    #[cfg(test)]
    pub(crate) fn ready(name: &str, allocatable: &[(&str, &str)]) -> NodeInfo {
        NodeInfo {
            name: name.to_string(),
            allocatable: allocatable
                .iter()
                .map(|(k, v)| {
                    let q = crate::quantity::Quantity::parse(v).expect("a quantity");
                    (k.to_string(), q)
                })
                .collect(),
            ready: true,
            ..NodeInfo::default()
        }
    }

    /// Reads a real Node object. Quantities that do not parse are reported, not zeroed.
    pub fn from_node(node: &K8sNode) -> Result<NodeInfo, String> {
        let name = node.metadata.name.clone().unwrap_or_default();
        let mut allocatable = ResourceList::new();
        if let Some(status) = &node.status {
            let src = status.allocatable.as_ref().or(status.capacity.as_ref());
            if let Some(a) = src {
                for (k, v) in a {
                    let q = crate::quantity::Quantity::parse(&v.0)
                        .map_err(|e| format!("node {name}: status.allocatable[{k}]: {e}"))?;
                    allocatable.set(k.clone(), q);
                }
            }
        }
        let ready = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
            .is_some_and(|c| c.status == "True");
        let spec = node.spec.as_ref();
        Ok(NodeInfo {
            labels: node.metadata.labels.clone().unwrap_or_default(),
            taints: spec.and_then(|s| s.taints.clone()).unwrap_or_default(),
            unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
            ready,
            allocatable,
            name,
        })
    }
}

/// How a member's kube-scheduler is held to muster's plan.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PlacementMode {
    /// Per pod: every pod is assigned exactly one planned node (scheduling gates). Any plan that
    /// fits is kept to.
    #[default]
    Gates,
    /// Per component: each pod template is pinned to the set of nodes planned for its component,
    /// and kube-scheduler chooses within that set. Only robust plans are made (see
    /// [`crate::estimate::robust`]): every arrangement within the sets places every pod.
    Pinned,
}

impl PlacementMode {
    /// `gates` or `pinned`, as in a scenario file.
    pub fn as_str(self) -> &'static str {
        match self {
            PlacementMode::Gates => "gates",
            PlacementMode::Pinned => "pinned",
        }
    }
}

impl std::fmt::Display for PlacementMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A member cluster as the core is told about it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClusterInfo {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub nodes: Vec<NodeInfo>,
    /// How the member is held to the plan; decides which plans are made for it.
    pub placement: PlacementMode,
    /// What the member can create: job kinds and PriorityClasses.
    pub serves: Serves,
    /// Node-label keys of its topology, widest first (`MemberCluster.spec.topology`): the
    /// levels a job may ask one domain of (see [`crate::topology`]).
    pub topology: Vec<String>,
}

/// What a member can create, as far as it is known: a job of a kind it does not serve, whose
/// pods name a PriorityClass it lacks, or built from a training runtime it does not have (the
/// same), is refused there by its API server or operator (or never becomes pods), so such a
/// member is no candidate. `None` is "not known": nothing is refused for it (a scenario that
/// says nothing about it).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Serves {
    /// The job kinds whose CRD (and, where it can be seen, operator) the member has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kinds: Option<BTreeSet<JobKind>>,
    /// The names of the member's PriorityClasses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_classes: Option<BTreeSet<String>>,
    /// The member's training runtimes (`ClusterTrainingRuntime NAME`, `TrainingRuntime NS/NAME`)
    /// with the digest of each one's spec (empty: present, not compared, as a scenario says).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtimes: Option<BTreeMap<String, String>>,
    /// Kinds whose operator is seen not to act on the member (a copy left without status or
    /// pod), with the evidence: refused until it acts again.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub stalled: BTreeMap<JobKind, String>,
}

/// What a member must serve to create a job: its kind, its pods' PriorityClasses and (a
/// TrainJob) its training runtime.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Needs {
    pub kind: JobKind,
    pub pod_priority_classes: BTreeSet<String>,
    pub runtime: Option<RuntimeNeed>,
}

impl Needs {
    pub fn of(w: &Workload) -> Self {
        Self {
            kind: w.kind,
            pod_priority_classes: w.pod_priority_classes.clone(),
            runtime: w.runtime.clone(),
        }
    }
}

impl Serves {
    /// Nothing known: nothing refused.
    pub fn is_unknown(&self) -> bool {
        self.kinds.is_none()
            && self.priority_classes.is_none()
            && self.runtimes.is_none()
            && self.stalled.is_empty()
    }

    /// Why the member cannot create a job with these needs, if it cannot (`cluster` names the
    /// member in the reason).
    pub fn refuses(&self, cluster: &str, needs: &Needs) -> Option<String> {
        if let Some(k) = &self.kinds
            && !k.contains(&needs.kind)
        {
            return Some(format!("{cluster} does not serve {}", needs.kind.as_str()));
        }
        if let Some(why) = self.stalled.get(&needs.kind) {
            return Some(why.clone());
        }
        if let Some(have) = &self.priority_classes {
            let missing: Vec<&str> = needs
                .pod_priority_classes
                .iter()
                .filter(|p| !have.contains(*p))
                .map(String::as_str)
                .collect();
            if !missing.is_empty() {
                let noun = if missing.len() == 1 {
                    "PriorityClass"
                } else {
                    "PriorityClasses"
                };
                return Some(format!("no {noun} {} on {cluster}", missing.join(", ")));
            }
        }
        if let (Some(have), Some(need)) = (&self.runtimes, &needs.runtime) {
            let key = need.key.to_string();
            match have.get(&key) {
                None => return Some(format!("no {key} on {cluster}")),
                Some(d) if !d.is_empty() && *d != need.digest => {
                    return Some(format!("{cluster}'s {key} differs from the hub's"));
                }
                Some(_) => {}
            }
        }
        None
    }
}

/// Node constraints of one component (a pod template).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Constraints {
    pub node_selector: BTreeMap<String, String>,
    pub tolerations: Vec<Toleration>,
    pub affinity: Option<NodeSelector>,
}

impl Constraints {
    pub fn is_empty(&self) -> bool {
        self.node_selector.is_empty() && self.tolerations.is_empty() && self.affinity.is_none()
    }
}

/// Why a node does not admit a pod regardless of free capacity.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mismatch {
    Taint(String),
    NodeSelector,
    Affinity,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mismatch::Taint(t) => write!(f, "untolerated taint {t}"),
            Mismatch::NodeSelector => f.write_str("nodeSelector does not match"),
            Mismatch::Affinity => f.write_str("required node affinity does not match"),
        }
    }
}

/// A node inside the core.
#[derive(Clone, Debug)]
pub struct Node {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// Spec taints plus the ones kube-scheduler implies (unschedulable, not-ready).
    pub taints: Vec<Taint>,
    pub alloc: Vec<i128>,
    /// Used by pods muster does not manage (reported by the driver).
    pub external: Vec<i128>,
    /// Used by muster's reservations (admitted jobs' plans).
    pub reserved: Vec<i128>,
}

impl Node {
    /// Whether it takes new pods: neither unschedulable nor NotReady (no condition taint).
    pub fn takes_pods(&self) -> bool {
        !self.taints.iter().any(is_condition_taint)
    }

    pub fn free(&self, r: Res) -> i128 {
        at(&self.alloc, r) - at(&self.external, r) - at(&self.reserved, r)
    }

    /// Whether a pod with these constraints may run here (ignoring capacity).
    pub fn admits(&self, c: &Constraints) -> Result<(), Mismatch> {
        for t in &self.taints {
            if (t.effect == "NoSchedule" || t.effect == "NoExecute")
                && !c.tolerations.iter().any(|tol| tolerates(tol, t))
            {
                return Err(Mismatch::Taint(fmt_taint(t)));
            }
        }
        if !c
            .node_selector
            .iter()
            .all(|(k, v)| self.labels.get(k) == Some(v))
        {
            return Err(Mismatch::NodeSelector);
        }
        if let Some(aff) = &c.affinity
            && !node_selector_matches(aff, &self.name, &self.labels)
        {
            return Err(Mismatch::Affinity);
        }
        Ok(())
    }
}

pub fn fmt_taint(t: &Taint) -> String {
    match &t.value {
        Some(v) if !v.is_empty() => format!("{}={}:{}", t.key, v, t.effect),
        _ => format!("{}:{}", t.key, t.effect),
    }
}

/// Kubernetes' toleration matching (`ToleratesTaint`).
pub fn tolerates(tol: &Toleration, taint: &Taint) -> bool {
    if let Some(e) = &tol.effect
        && !e.is_empty()
        && *e != taint.effect
    {
        return false;
    }
    let key = tol.key.as_deref().unwrap_or("");
    let op = tol.operator.as_deref().unwrap_or("Equal");
    if key.is_empty() {
        // An empty key with Exists matches every taint.
        return op == "Exists";
    }
    if key != taint.key {
        return false;
    }
    match op {
        "Exists" => true,
        "Equal" | "" => tol.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or(""),
        _ => false,
    }
}

/// Required node affinity: terms are ORed, expressions within a term ANDed. A term with no
/// requirement matches nothing, as in kube-scheduler.
pub fn node_selector_matches(
    sel: &NodeSelector,
    node_name: &str,
    labels: &BTreeMap<String, String>,
) -> bool {
    sel.node_selector_terms.iter().any(|term| {
        let exprs = term.match_expressions.as_deref().unwrap_or(&[]);
        let fields = term.match_fields.as_deref().unwrap_or(&[]);
        if exprs.is_empty() && fields.is_empty() {
            return false;
        }
        exprs
            .iter()
            .all(|e| requirement_matches(e, labels.get(&e.key)))
            && fields.iter().all(|f| {
                f.key == "metadata.name" && requirement_matches(f, Some(&node_name.to_string()))
            })
    })
}

fn requirement_matches(req: &NodeSelectorRequirement, value: Option<&String>) -> bool {
    let values = req.values.as_deref().unwrap_or(&[]);
    match req.operator.as_str() {
        "In" => value.is_some_and(|v| values.contains(v)),
        "NotIn" => value.is_none_or(|v| !values.contains(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(v), [bound]) = (value, values) else {
                return false;
            };
            match (v.parse::<i64>(), bound.parse::<i64>()) {
                (Ok(v), Ok(b)) => {
                    if req.operator == "Gt" {
                        v > b
                    } else {
                        v < b
                    }
                }
                _ => false,
            }
        }
        _ => false,
    }
}

/// A member cluster inside the core.
#[derive(Clone, Debug)]
pub struct Cluster {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub nodes: Vec<Node>,
    pub node_index: BTreeMap<String, usize>,
    /// False while the member does not answer: nothing is placed there.
    pub reachable: bool,
    /// How the member is held to the plan (pinned: only robust plans are made).
    pub placement: PlacementMode,
    /// What the member can create.
    pub serves: Serves,
    /// Bumped on every change of usage or nodes; lets callers memoize per-cluster results.
    pub version: u64,
    /// Bumped when nodes, labels or taints change (eligibility caches).
    pub topology: u64,
    /// Topology levels, widest first, and per level its domains ([`domains::Domains`]).
    pub levels: domains::Domains,
    /// The version at which free capacity on a node last may have grown (a reservation given
    /// back, external usage set, the nodes replaced); between two such changes free capacity
    /// only shrinks, which keeps some failed estimates failed (`scheduler::fit`).
    pub freed: u64,
    summary: Summary,
    summary_version: u64,
}

impl Cluster {
    pub fn new(info: &ClusterInfo, table: &mut ResourceTable, version: u64) -> Cluster {
        let nodes: Vec<Node> = info.nodes.iter().map(|n| make_node(n, table)).collect();
        let node_index = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.clone(), i))
            .collect();
        Cluster {
            name: info.name.clone(),
            labels: info.labels.clone(),
            nodes,
            node_index,
            reachable: true,
            placement: info.placement,
            serves: info.serves.clone(),
            version,
            topology: version,
            levels: domains::Domains::new(&info.topology, &nodes_for_levels(info)),
            freed: version,
            summary: Summary::default(),
            summary_version: 0,
        }
    }

    /// How many resource indices its nodes' amounts span (allocatable, reserved or external).
    pub fn res_len(&self) -> usize {
        self.nodes
            .iter()
            .map(|n| n.alloc.len().max(n.reserved.len()).max(n.external.len()))
            .max()
            .unwrap_or(0)
    }
}

/// Taints muster derives from node state (not from the spec): the node takes no new pods.
pub fn is_condition_taint(t: &Taint) -> bool {
    t.key == UNSCHEDULABLE_TAINT || t.key == NOT_READY_TAINT
}

/// The `pods` allocatable of a node that reports none (no pod limit).
pub const NO_POD_LIMIT: i128 = i128::MAX / 4;

pub const UNSCHEDULABLE_TAINT: &str = "node.kubernetes.io/unschedulable";
pub const NOT_READY_TAINT: &str = "node.kubernetes.io/not-ready";

pub fn make_node(n: &NodeInfo, table: &mut ResourceTable) -> Node {
    let mut alloc = table.dense(&n.allocatable);
    if !n.allocatable.0.contains_key("pods") {
        // No pod limit reported: do not limit (scenario files may omit it).
        set(&mut alloc, PODS, NO_POD_LIMIT);
    }
    let mut taints = n.taints.clone();
    if n.unschedulable {
        taints.push(Taint {
            key: UNSCHEDULABLE_TAINT.into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        });
    }
    if !n.ready {
        taints.push(Taint {
            key: NOT_READY_TAINT.into(),
            effect: "NoExecute".into(),
            ..Default::default()
        });
    }
    Node {
        name: n.name.clone(),
        labels: n.labels.clone(),
        taints,
        alloc,
        external: Vec::new(),
        reserved: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, value: Option<&str>, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: value.map(Into::into),
            effect: effect.into(),
            ..Default::default()
        }
    }

    fn tol(
        key: Option<&str>,
        op: Option<&str>,
        value: Option<&str>,
        effect: Option<&str>,
    ) -> Toleration {
        Toleration {
            key: key.map(Into::into),
            operator: op.map(Into::into),
            value: value.map(Into::into),
            effect: effect.map(Into::into),
            ..Default::default()
        }
    }

    #[test]
    fn toleration_rules() {
        let t = taint("gpu", Some("true"), "NoSchedule");
        assert!(tolerates(&tol(Some("gpu"), None, Some("true"), None), &t));
        assert!(tolerates(
            &tol(Some("gpu"), Some("Equal"), Some("true"), Some("NoSchedule")),
            &t
        ));
        assert!(!tolerates(
            &tol(Some("gpu"), Some("Equal"), Some("false"), None),
            &t
        ));
        assert!(tolerates(&tol(Some("gpu"), Some("Exists"), None, None), &t));
        assert!(!tolerates(
            &tol(Some("gpu"), Some("Exists"), None, Some("NoExecute")),
            &t
        ));
        assert!(tolerates(&tol(None, Some("Exists"), None, None), &t));
        assert!(!tolerates(&tol(None, None, None, None), &t));
        assert!(!tolerates(
            &tol(Some("other"), Some("Exists"), None, None),
            &t
        ));
    }

    fn req(key: &str, op: &str, values: &[&str]) -> NodeSelectorRequirement {
        NodeSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: Some(values.iter().map(|s| s.to_string()).collect()),
        }
    }

    #[test]
    fn affinity_operators() {
        let labels: BTreeMap<String, String> = [("zone", "a"), ("gen", "5")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let one = |r: NodeSelectorRequirement| NodeSelector {
            node_selector_terms: vec![k8s_openapi::api::core::v1::NodeSelectorTerm {
                match_expressions: Some(vec![r]),
                match_fields: None,
            }],
        };
        let m = |r| node_selector_matches(&one(r), "n1", &labels);
        assert!(m(req("zone", "In", &["a", "b"])));
        assert!(!m(req("zone", "In", &["b"])));
        assert!(m(req("zone", "NotIn", &["b"])));
        assert!(m(req("missing", "NotIn", &["b"])));
        assert!(m(req("zone", "Exists", &[])));
        assert!(!m(req("zone", "DoesNotExist", &[])));
        assert!(m(req("missing", "DoesNotExist", &[])));
        assert!(m(req("gen", "Gt", &["4"])));
        assert!(!m(req("gen", "Gt", &["5"])));
        assert!(m(req("gen", "Lt", &["6"])));
        assert!(
            !m(req("zone", "Lt", &["6"])),
            "non-integer label never matches Gt/Lt"
        );
        assert!(!node_selector_matches(
            &NodeSelector {
                node_selector_terms: vec![]
            },
            "n1",
            &labels
        ));
    }

    #[test]
    fn node_state_becomes_taints() {
        let mut t = ResourceTable::default();
        let info = NodeInfo {
            name: "n".into(),
            unschedulable: true,
            ready: true,
            ..Default::default()
        };
        let n = make_node(&info, &mut t);
        assert!(matches!(
            n.admits(&Constraints::default()),
            Err(Mismatch::Taint(_))
        ));
        let tolerant = Constraints {
            tolerations: vec![tol(Some(UNSCHEDULABLE_TAINT), Some("Exists"), None, None)],
            ..Default::default()
        };
        assert!(n.admits(&tolerant).is_ok());
        let nr = make_node(
            &NodeInfo {
                ready: false,
                ..info
            },
            &mut t,
        );
        assert!(nr.admits(&tolerant).is_err());
    }
}
