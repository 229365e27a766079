//! Hierarchical elastic quota: the ElasticQuotaTree as users write it, validated, with usage.
//!
//! Owns parsing and validation of `scheduling.sigs.k8s.io/v1beta1 ElasticQuotaTree` (every problem
//! reported with its path), namespace → leaf mapping, and usage accounting against min/max at
//! every node from a leaf to the root. Decides nothing about ordering or placement.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::quantity::{Quantity, ResourceList};
use crate::resources::{Demand, Res, ResourceTable, at, set};

mod borrowers;
mod share;
pub use share::{Dominant, FAIR_PREEMPTION_ATTRIBUTE, MAX_WEIGHT, Share, WEIGHT_ATTRIBUTE};

/// Attribute on a leaf choosing its queueing strategy (`StrictFIFO` or `BestEffortFIFO`).
pub const STRATEGY_ATTRIBUTE: &str = "muster.dev/queueing-strategy";
/// Attribute on a leaf choosing whether a waiting job may preempt admitted jobs of lower
/// priority in its own queue (`LowerPriority`) or not (`Never`, the default).
pub const PREEMPTION_ATTRIBUTE: &str = "muster.dev/within-queue-preemption";

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub enum Strategy {
    /// A head that cannot be admitted does not block other jobs behind it.
    #[default]
    BestEffortFIFO,
    /// Jobs are admitted strictly in order: a head that cannot be admitted blocks its queue.
    StrictFIFO,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub enum Severity {
    Error,
    Warning,
}

/// One problem found in a tree: `field` is the manifest path, `node` the tree path.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct Problem {
    pub severity: Severity,
    pub field: String,
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(f, "{s}: {}: {}", self.field, self.message)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct QuotaNode {
    pub name: String,
    /// `root/team-a/alice`.
    pub path: String,
    /// `spec.root.children[0].children[1]`.
    pub field: String,
    pub parent: Option<usize>,
    pub children: Vec<usize>,
    pub depth: usize,
    pub min: ResourceList,
    pub max: ResourceList,
    pub namespaces: Vec<String>,
    pub attributes: BTreeMap<String, String>,
    /// Its weight in fair sharing among its siblings ([`WEIGHT_ATTRIBUTE`]; 1 unless set).
    pub weight: Quantity,
    /// [`PREEMPTION_ATTRIBUTE`] is `LowerPriority`, read once from `attributes`.
    pub lower_priority: bool,
    /// [`FAIR_PREEMPTION_ATTRIBUTE`] is `LessThanOrEqualToFinalShare`, read once from
    /// `attributes`.
    pub fair_preemption: bool,
}

/// A validated tree. Node 0 is the root.
#[derive(Clone, Debug, PartialEq)]
pub struct QuotaTree {
    pub nodes: Vec<QuotaNode>,
    pub leaf_of_namespace: BTreeMap<String, usize>,
    pub warnings: Vec<Problem>,
}

impl QuotaTree {
    /// Parses and validates an ElasticQuotaTree manifest. On error, every problem found
    /// (errors and warnings) is returned, sorted errors first.
    pub fn parse(manifest: &Value) -> Result<QuotaTree, Vec<Problem>> {
        let mut problems = Vec::new();
        let err = |field: &str, msg: String| Problem {
            severity: Severity::Error,
            field: field.to_string(),
            message: msg,
        };
        if let Some(kind) = manifest.get("kind").and_then(Value::as_str)
            && kind != "ElasticQuotaTree"
        {
            problems.push(err(
                "kind",
                format!("expected ElasticQuotaTree, found {kind:?}"),
            ));
        }
        if let Some(av) = manifest.get("apiVersion").and_then(Value::as_str)
            && av != "scheduling.sigs.k8s.io/v1beta1"
        {
            problems.push(err(
                "apiVersion",
                format!("expected scheduling.sigs.k8s.io/v1beta1, found {av:?}"),
            ));
        }
        let Some(root) = manifest.get("spec").and_then(|s| s.get("root")) else {
            problems.push(err("spec.root", "missing".into()));
            return Err(problems);
        };
        let mut nodes = Vec::new();
        read_node(root, "spec.root", None, 0, "", &mut nodes, &mut problems);
        validate(&nodes, &mut problems);
        let mut leaf_of_namespace = BTreeMap::new();
        for (i, n) in nodes.iter().enumerate() {
            for ns in &n.namespaces {
                leaf_of_namespace.entry(ns.clone()).or_insert(i);
            }
        }
        problems.sort();
        if problems.iter().any(|p| p.severity == Severity::Error) {
            return Err(problems);
        }
        Ok(QuotaTree {
            nodes,
            leaf_of_namespace,
            warnings: problems,
        })
    }

    /// Every namespace the tree covers (those its leaves list).
    pub fn namespaces(&self) -> BTreeSet<String> {
        self.leaf_of_namespace.keys().cloned().collect()
    }

    pub fn leaf_for(&self, namespace: &str) -> Option<usize> {
        self.leaf_of_namespace.get(namespace).copied()
    }

    /// Node indices from `leaf` up to the root, leaf first.
    pub fn path_up(&self, leaf: usize) -> Vec<usize> {
        let mut out = vec![leaf];
        let mut cur = leaf;
        while let Some(p) = self.nodes[cur].parent {
            out.push(p);
            cur = p;
        }
        out
    }

    pub fn strategy(&self, node: usize) -> Strategy {
        match self.nodes[node]
            .attributes
            .get(STRATEGY_ATTRIBUTE)
            .map(String::as_str)
        {
            Some("StrictFIFO") => Strategy::StrictFIFO,
            _ => Strategy::BestEffortFIFO,
        }
    }

    /// Whether a waiting job of this leaf may preempt its admitted jobs of lower priority.
    pub fn preempts_lower_priority(&self, node: usize) -> bool {
        self.flag(node, |n| n.lower_priority, lower_priority)
    }

    /// Whether the subtrees below this node may preempt each other for fairness
    /// ([`FAIR_PREEMPTION_ATTRIBUTE`] `LessThanOrEqualToFinalShare`).
    pub fn preempts_for_fairness(&self, node: usize) -> bool {
        self.flag(node, |n| n.fair_preemption, fair_preemption)
    }

    /// A flag of `node` read once at parse; every test (debug) build holds it to `read` of the
    /// node's attributes.
    fn flag(
        &self,
        node: usize,
        kept: fn(&QuotaNode) -> bool,
        read: fn(&BTreeMap<String, String>) -> bool,
    ) -> bool {
        let n = &self.nodes[node];
        debug_assert_eq!(
            kept(n),
            read(&n.attributes),
            "{}: an attribute read once",
            n.path
        );
        kept(n)
    }

    pub fn is_leaf(&self, node: usize) -> bool {
        self.nodes[node].children.is_empty()
    }
}

/// [`PREEMPTION_ATTRIBUTE`] is `LowerPriority` in `attributes`.
fn lower_priority(attributes: &BTreeMap<String, String>) -> bool {
    attributes
        .get(PREEMPTION_ATTRIBUTE)
        .is_some_and(|s| s == "LowerPriority")
}

/// [`FAIR_PREEMPTION_ATTRIBUTE`] is `LessThanOrEqualToFinalShare` in `attributes`.
fn fair_preemption(attributes: &BTreeMap<String, String>) -> bool {
    attributes
        .get(FAIR_PREEMPTION_ATTRIBUTE)
        .is_some_and(|s| s == share::FINAL_SHARE)
}

fn read_node(
    v: &Value,
    field: &str,
    parent: Option<usize>,
    depth: usize,
    parent_path: &str,
    nodes: &mut Vec<QuotaNode>,
    problems: &mut Vec<Problem>,
) -> usize {
    let err = |f: String, msg: String| Problem {
        severity: Severity::Error,
        field: f,
        message: msg,
    };
    let name = match v.get("name").and_then(Value::as_str) {
        Some(n) if !n.is_empty() => n.to_string(),
        _ => {
            problems.push(err(format!("{field}.name"), "missing".into()));
            format!("<unnamed {field}>")
        }
    };
    let path = if parent_path.is_empty() {
        name.clone()
    } else {
        format!("{parent_path}/{name}")
    };
    let mut list = |key: &str| -> ResourceList {
        let mut out = ResourceList::new();
        match v.get(key) {
            None | Some(Value::Null) => {}
            Some(Value::Object(m)) => {
                for (k, q) in m {
                    let s = match q {
                        Value::String(s) => s.clone(),
                        Value::Number(n) => n.to_string(),
                        other => other.to_string(),
                    };
                    match Quantity::parse(&s) {
                        Ok(q) if q.is_negative() => problems.push(err(
                            format!("{field}.{key}[{k}]"),
                            format!("{s:?} is negative"),
                        )),
                        Ok(q) => out.set(k.clone(), q),
                        Err(e) => problems.push(err(format!("{field}.{key}[{k}]"), e.to_string())),
                    }
                }
            }
            Some(_) => problems.push(err(
                format!("{field}.{key}"),
                "expected a map of quantities".into(),
            )),
        }
        out
    };
    let min = list("min");
    let max = list("max");
    let mut namespaces = Vec::new();
    match v.get("namespaces") {
        None | Some(Value::Null) => {}
        Some(Value::Array(a)) => {
            for (i, ns) in a.iter().enumerate() {
                match ns.as_str() {
                    Some(s) if !s.is_empty() => namespaces.push(s.to_string()),
                    _ => problems.push(err(
                        format!("{field}.namespaces[{i}]"),
                        "expected a namespace name".into(),
                    )),
                }
            }
        }
        Some(_) => problems.push(err(format!("{field}.namespaces"), "expected a list".into())),
    }
    let mut attributes = BTreeMap::new();
    if let Some(Value::Object(m)) = v.get("attributes") {
        for (k, a) in m {
            match a.as_str() {
                Some(s) => {
                    attributes.insert(k.clone(), s.to_string());
                }
                None => problems.push(err(
                    format!("{field}.attributes[{k}]"),
                    "expected a string".into(),
                )),
            }
        }
    }
    if let Some(s) = attributes.get(STRATEGY_ATTRIBUTE)
        && s != "StrictFIFO"
        && s != "BestEffortFIFO"
    {
        problems.push(err(
            format!("{field}.attributes[{STRATEGY_ATTRIBUTE}]"),
            format!("{s:?} is not StrictFIFO or BestEffortFIFO"),
        ));
    }
    if let Some(s) = attributes.get(PREEMPTION_ATTRIBUTE)
        && s != "LowerPriority"
        && s != "Never"
    {
        problems.push(err(
            format!("{field}.attributes[{PREEMPTION_ATTRIBUTE}]"),
            format!("{s:?} is not LowerPriority or Never"),
        ));
    }
    let weight = share::read_fairness(&attributes, field, problems);
    let idx = nodes.len();
    nodes.push(QuotaNode {
        name,
        path: path.clone(),
        field: field.to_string(),
        parent,
        children: Vec::new(),
        depth,
        min,
        max,
        namespaces,
        lower_priority: lower_priority(&attributes),
        fair_preemption: fair_preemption(&attributes),
        attributes,
        weight,
    });
    match v.get("children") {
        None | Some(Value::Null) => {}
        Some(Value::Array(a)) => {
            for (i, c) in a.iter().enumerate() {
                let ci = read_node(
                    c,
                    &format!("{field}.children[{i}]"),
                    Some(idx),
                    depth + 1,
                    &path,
                    nodes,
                    problems,
                );
                nodes[idx].children.push(ci);
            }
        }
        Some(_) => problems.push(err(format!("{field}.children"), "expected a list".into())),
    }
    idx
}

fn validate(nodes: &[QuotaNode], problems: &mut Vec<Problem>) {
    let err = |f: String, msg: String| Problem {
        severity: Severity::Error,
        field: f,
        message: msg,
    };
    let mut names: BTreeMap<&str, &str> = BTreeMap::new();
    let mut ns_owner: BTreeMap<&str, &str> = BTreeMap::new();
    for n in nodes {
        if let Some(first) = names.insert(n.name.as_str(), n.field.as_str()) {
            problems.push(err(
                format!("{}.name", n.field),
                format!("duplicate name {:?} (also at {first})", n.name),
            ));
        }
        for (r, mn) in n.min.iter() {
            if let Some(mx) = n.max.0.get(r)
                && mn > *mx
            {
                problems.push(err(
                    format!("{}.min[{r}]", n.field),
                    format!("{}: min {mn} is above max {mx}", n.path),
                ));
            }
        }
        if n.children.is_empty() && n.attributes.contains_key(FAIR_PREEMPTION_ATTRIBUTE) {
            problems.push(Problem {
                severity: Severity::Warning,
                field: format!("{}.attributes[{FAIR_PREEMPTION_ATTRIBUTE}]", n.field),
                message: format!(
                    "{}: has no effect on a leaf (it lets the subtrees below a node preempt each other)",
                    n.path
                ),
            });
        }
        if !n.children.is_empty() {
            if !n.namespaces.is_empty() {
                problems.push(err(
                    format!("{}.namespaces", n.field),
                    format!(
                        "{}: namespaces are only allowed on leaves, this node has children",
                        n.path
                    ),
                ));
            }
            let mut sum = ResourceList::new();
            for &c in &n.children {
                sum.add(&nodes[c].min);
                for (r, cmax) in nodes[c].max.iter() {
                    if let Some(pmax) = n.max.0.get(r)
                        && cmax > *pmax
                    {
                        problems.push(Problem {
                            severity: Severity::Warning,
                            field: format!("{}.max[{r}]", nodes[c].field),
                            message: format!(
                                "{}: max {cmax} is above its parent's max {pmax} and can never be reached",
                                nodes[c].path
                            ),
                        });
                    }
                }
            }
            for (r, s) in sum.iter() {
                if let Some(pmin) = n.min.0.get(r)
                    && s > *pmin
                {
                    problems.push(err(
                        format!("{}.min[{r}]", n.field),
                        format!(
                            "{}: children's min sum to {s}, above this node's min {pmin}",
                            n.path
                        ),
                    ));
                }
            }
        }
        for ns in &n.namespaces {
            if let Some(first) = ns_owner.insert(ns.as_str(), n.path.as_str())
                && first != n.path
            {
                problems.push(err(
                    format!("{}.namespaces", n.field),
                    format!("namespace {ns:?} is in both {first} and {}", n.path),
                ));
            }
        }
    }
}

/// Why a job does not fit its quota right now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shortfall {
    pub node: usize,
    pub res: Res,
    pub used: i128,
    pub request: i128,
    pub max: i128,
}

/// Dense min/max/usage per tree node.
#[derive(Clone, Debug)]
pub struct QuotaState {
    pub tree: QuotaTree,
    pub min: Vec<Vec<i128>>,
    /// `None` = not limited.
    pub max: Vec<Vec<Option<i128>>>,
    pub used: Vec<Vec<i128>>,
    /// What each node lends its children of each resource ([`QuotaState::lendable`]).
    lend: Vec<Vec<i128>>,
    /// Per node, per resource index: whether its `min` names the resource (zero included).
    names_min: Vec<Vec<bool>>,
    /// Per resource index: how many nodes below the root use more than their min of it
    /// ([`QuotaState::anyone_borrows`]), kept through every charge.
    borrowers: Vec<u32>,
}

impl QuotaState {
    pub fn new(tree: QuotaTree, table: &mut ResourceTable) -> QuotaState {
        let min = tree.nodes.iter().map(|n| table.dense(&n.min)).collect();
        let max = tree
            .nodes
            .iter()
            .map(|n| {
                let mut v: Vec<Option<i128>> = Vec::new();
                for (name, q) in n.max.iter() {
                    let r = table.intern(name);
                    let i = usize::from(r.0);
                    if v.len() <= i {
                        v.resize(i + 1, None);
                    }
                    v[i] = Some(q.milli());
                }
                v
            })
            .collect();
        let names_min = tree
            .nodes
            .iter()
            .map(|n| {
                let mut v = Vec::new();
                for (name, _) in n.min.iter() {
                    let i = usize::from(table.intern(name).0);
                    if v.len() <= i {
                        v.resize(i + 1, false);
                    }
                    v[i] = true;
                }
                v
            })
            .collect();
        let used = vec![Vec::new(); tree.nodes.len()];
        let mut q = QuotaState {
            tree,
            min,
            max,
            used,
            lend: Vec::new(),
            names_min,
            borrowers: Vec::new(),
        };
        q.borrowers = q.count_borrowers(table.len());
        q.lend = (0..q.tree.nodes.len())
            .map(|p| {
                (0..table.len())
                    .map(|r| q.lending(p, Res(u16::try_from(r).unwrap_or(u16::MAX))))
                    .collect()
            })
            .collect();
        q
    }

    pub fn max_of(&self, node: usize, r: Res) -> Option<i128> {
        self.max[node].get(usize::from(r.0)).copied().flatten()
    }

    /// Whether `node`'s `min` names `r` (a min of zero included).
    pub fn names_min(&self, node: usize, r: Res) -> bool {
        self.names_min[node]
            .get(usize::from(r.0))
            .copied()
            .unwrap_or(false)
    }

    pub fn min_of(&self, node: usize, r: Res) -> i128 {
        at(&self.min[node], r)
    }

    pub fn used_of(&self, node: usize, r: Res) -> i128 {
        at(&self.used[node], r)
    }

    /// usage + request <= max at every node from `leaf` to the root, for every resource asked.
    pub fn check(&self, leaf: usize, d: &Demand) -> Result<(), Shortfall> {
        let mut cur = Some(leaf);
        while let Some(n) = cur {
            for (r, x) in d.iter() {
                if let Some(m) = self.max_of(n, r) {
                    let u = self.used_of(n, r);
                    if u + x > m {
                        return Err(Shortfall {
                            node: n,
                            res: r,
                            used: u,
                            request: x,
                            max: m,
                        });
                    }
                }
            }
            cur = self.tree.nodes[n].parent;
        }
        Ok(())
    }

    /// The highest node of `leaf`'s path where the request goes over a max, if any. Every
    /// release that lowers the usage of a node where it is over (so may move it) is of a job
    /// under that node.
    pub fn highest_over(&self, leaf: usize, d: &Demand) -> Option<usize> {
        let mut top = None;
        let mut cur = Some(leaf);
        while let Some(n) = cur {
            if d.iter().any(|(r, x)| {
                self.max_of(n, r)
                    .is_some_and(|m| self.used_of(n, r) + x > m)
            }) {
                top = Some(n);
            }
            cur = self.tree.nodes[n].parent;
        }
        top
    }

    /// Whether the request stays within what is guaranteed at every node from `leaf` to the
    /// root: usage + request <= min for every resource asked that the node guarantees (a min
    /// above zero). Such a job borrows nothing.
    pub fn within_min(&self, leaf: usize, d: &Demand) -> bool {
        self.within_min_freeing(leaf, d, &Demand::default())
    }

    /// [`Self::within_min`] with `freed` (usage charged to `leaf`, so to its whole path)
    /// counted as gone.
    pub fn within_min_freeing(&self, leaf: usize, d: &Demand, freed: &Demand) -> bool {
        let mut cur = Some(leaf);
        while let Some(n) = cur {
            for (r, x) in d.iter() {
                let m = self.min_of(n, r);
                if x > 0 && m > 0 && self.used_of(n, r) - freed.get(r) + x > m {
                    return false;
                }
            }
            cur = self.tree.nodes[n].parent;
        }
        true
    }

    /// The request alone exceeds a max on the path: it can never be admitted.
    pub fn never_fits(&self, leaf: usize, d: &Demand) -> Option<Shortfall> {
        let mut cur = Some(leaf);
        while let Some(n) = cur {
            for (r, x) in d.iter() {
                if let Some(m) = self.max_of(n, r)
                    && x > m
                {
                    return Some(Shortfall {
                        node: n,
                        res: r,
                        used: 0,
                        request: x,
                        max: m,
                    });
                }
            }
            cur = self.tree.nodes[n].parent;
        }
        None
    }

    /// Adds (`sign` = 1) or removes (`sign` = -1) a job's demand along its path.
    pub fn charge(&mut self, leaf: usize, d: &Demand, sign: i128) {
        let mut cur = Some(leaf);
        while let Some(n) = cur {
            for (r, x) in d.iter() {
                let u = at(&self.used[n], r);
                let v = u + sign * x;
                set(&mut self.used[n], r, v);
                self.borrowing_moved(n, r, u, v);
            }
            cur = self.tree.nodes[n].parent;
        }
    }

    /// Whether the subtree at `node` uses more than its min of `r` (is borrowing).
    pub fn borrowing(&self, node: usize, r: Res) -> bool {
        self.used_of(node, r) > self.min_of(node, r)
    }

    /// The child of the lowest common ancestor of `a` and `b` on `b`'s side
    /// (`None` when `b` is an ancestor of, or equal to, `a`).
    pub fn meeting_child(&self, a: usize, b: usize) -> Option<usize> {
        let nodes = &self.tree.nodes;
        let up = |n: usize| nodes[n].parent.unwrap_or(n);
        let (mut x, mut y, mut below_y) = (a, b, None);
        while nodes[y].depth > nodes[x].depth {
            below_y = Some(y);
            y = up(y);
        }
        while nodes[x].depth > nodes[y].depth {
            x = up(x);
        }
        while x != y {
            x = up(x);
            below_y = Some(y);
            y = up(y);
        }
        below_y
    }

    pub fn describe(&self, s: &Shortfall, table: &ResourceTable) -> String {
        format!(
            "quota {}: {} used {} + requested {} exceeds max {}",
            self.tree.nodes[s.node].path,
            table.name(s.res),
            Quantity::from_milli(s.used),
            Quantity::from_milli(s.request),
            Quantity::from_milli(s.max)
        )
    }
}
