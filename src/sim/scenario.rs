//! The scenario format of `muster sim` (also what `muster snapshot` writes): members and their
//! nodes, the quota tree, PriorityClasses, timed job manifests (some already running) and timed
//! changes (their format here; their checks in `changes`), with durations as text; reading it with errors that name the file and the field, and telling the
//! core the fleet it describes.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Taint;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::fleet::{ClusterInfo, NodeInfo, PlacementMode, Serves};
use crate::quantity::ResourceList;
use crate::quota::Problem;
use crate::scheduler::Scheduler;
use crate::workload::TrainingRuntimes;

/// The scenario `muster sim` runs when no file is given.
pub const DEFAULT_SCENARIO: &str = include_str!("../../examples/default.yaml");

/// A scenario file (also what `muster snapshot` writes from a live controller).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Scenario {
    pub clusters: Vec<ClusterSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota: Option<Value>,
    #[serde(default)]
    pub priority_classes: BTreeMap<String, i32>,
    #[serde(default)]
    pub jobs: Vec<JobSpec>,
    /// Kubeflow Trainer runtimes on the hub (`ClusterTrainingRuntime`, `TrainingRuntime`
    /// objects), which TrainJobs are read against.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runtimes: Vec<Value>,
    /// The quota tree, a member or a member's reachability changing at a virtual time
    /// ([`ChangeSpec`]); absent from snapshots.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<ChangeSpec>,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClusterSpec {
    pub name: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub nodes: Vec<NodeSpec>,
    /// How the member is held to the plan: `gates` (per pod, the default) or `pinned` (by node
    /// set; only robust plans are made there).
    #[serde(default)]
    pub placement: PlacementMode,
    /// A member that does not answer: nothing new is placed there (default true).
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub reachable: bool,
    /// What the member can create: `kinds` (e.g. `[Job, PyTorchJob]`) and `priorityClasses`
    /// (names); each left out is not checked.
    #[serde(default, skip_serializing_if = "Serves::is_unknown")]
    pub serves: Serves,
    /// Node-label keys of its topology levels, widest first (as `MemberCluster.spec.topology`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub topology: Vec<String>,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NodeSpec {
    pub name: String,
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub count: u32,
    pub allocatable: ResourceList,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub unschedulable: bool,
    /// What pods muster does not manage use on the node (each node, with `count`).
    #[serde(default, skip_serializing_if = "ResourceList::is_empty")]
    pub used: ResourceList,
}

fn one() -> u32 {
    1
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

fn yes() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

fn is_false(b: &bool) -> bool {
    !*b
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct JobSpec {
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
    pub at: u64,
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
    pub run_for: u64,
    /// Already running when the scenario starts (a snapshot's running jobs): placed at `at` on
    /// this member as planned, without a cycle, and running for `runFor` from then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<RunningSpec>,
    pub manifest: super::Manifest,
}

/// Where a job already runs: the member and its plan (`{component: {node: pods}}`).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RunningSpec {
    pub cluster: String,
    #[serde(default)]
    pub placement: crate::scheduler::Plan,
}

/// Whether a running job's plan places exactly the pods of each of its components.
pub(super) fn plan_matches(w: &crate::workload::Workload, plan: &crate::scheduler::Plan) -> bool {
    plan.len() == w.components.len()
        && w.components.iter().all(|c| {
            plan.get(&c.name)
                .is_some_and(|nodes| nodes.values().sum::<u32>() == c.pods)
        })
}

/// `{node: pods}` of a plan.
pub(super) fn running_nodes(plan: &crate::scheduler::Plan) -> BTreeMap<String, u32> {
    let mut out = BTreeMap::new();
    for nodes in plan.values() {
        for (n, k) in nodes {
            *out.entry(n.clone()).or_insert(0) += k;
        }
    }
    out
}

/// Milliseconds as the shortest duration text that reads back the same (`90s`, `1h30m`, `250ms`).
pub fn format_duration(ms: u64) -> String {
    if ms == 0 {
        return "0s".into();
    }
    let mut out = String::new();
    let mut rest = ms;
    for (unit, size) in [("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)] {
        if rest >= size {
            out.push_str(&format!("{}{unit}", rest / size));
            rest %= size;
        }
    }
    out
}

pub(super) fn ser_duration<S: serde::Serializer>(ms: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format_duration(*ms))
}

/// Parses `90s`, `10m`, `1h30m`, `500ms`, `2d` or a plain number of seconds into milliseconds.
pub fn parse_duration(s: &str) -> Result<u64, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err("empty duration".into());
    }
    if let Ok(secs) = t.parse::<u64>() {
        return secs
            .checked_mul(1000)
            .ok_or_else(|| format!("{s:?} is too long"));
    }
    let mut total: u64 = 0;
    let mut num = String::new();
    let mut chars = t.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            num.push(c);
            continue;
        }
        let unit = if c == 'm' && chars.peek() == Some(&'s') {
            chars.next();
            "ms".to_string()
        } else {
            c.to_string()
        };
        let n: u64 = num
            .parse()
            .map_err(|_| format!("{s:?} is not a duration (like 90s, 10m, 1h30m)"))?;
        num.clear();
        let mult = match unit.as_str() {
            "ms" => 1,
            "s" => 1000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return Err(format!("{s:?} is not a duration: unknown unit {unit:?}")),
        };
        total = n
            .checked_mul(mult)
            .and_then(|x| total.checked_add(x))
            .ok_or_else(|| format!("{s:?} is too long"))?;
    }
    if !num.is_empty() {
        return Err(format!("{s:?} is not a duration: {num} has no unit"));
    }
    Ok(total)
}

pub(super) fn de_duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let v = Value::deserialize(d)?;
    let s = match v {
        Value::String(s) => s,
        Value::Number(n) => n.to_string(),
        other => {
            return Err(serde::de::Error::custom(format!(
                "expected a duration, found {other}"
            )));
        }
    };
    parse_duration(&s).map_err(serde::de::Error::custom)
}

/// A scenario that cannot be run: names the file and the field; exit code 2.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("{file}: {message}")]
    Read { file: String, message: String },
    #[error("{file}: {field}: {message}")]
    Field {
        file: String,
        field: String,
        message: String,
    },
    #[error("{file}: quota: the ElasticQuotaTree is invalid:\n{}", .problems.iter().map(|p| format!("  {p}")).collect::<Vec<_>>().join("\n"))]
    Quota {
        file: String,
        problems: Vec<Problem>,
    },
    /// An invalid tree of a change (`changes[2].quota`); each problem's field starts with it.
    #[error("{file}: {field}: the ElasticQuotaTree is invalid:\n{}", .problems.iter().map(|p| format!("  {p}")).collect::<Vec<_>>().join("\n"))]
    QuotaAt {
        file: String,
        field: String,
        problems: Vec<Problem>,
    },
    #[error("--explain {job}: {file} has no job {job} (jobs are named NAMESPACE/NAME)")]
    Explain { file: String, job: String },
}

/// One change: at `at`, exactly one of `quota`, `cluster`, `reachable`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ChangeSpec {
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
    pub at: u64,
    /// A new ElasticQuotaTree replacing the one in force; `null` or `{}` removes the tree
    /// (`Some(Value::Null)`, unlike an absent `quota`).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub quota: Option<Value>,
    /// A member added, or replacing the member of the same name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterSpec>,
    /// A member marked (un)reachable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reachable: Option<ReachableSpec>,
}

/// `reachable: {cluster: member-b, reachable: false}`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ReachableSpec {
    pub cluster: String,
    pub reachable: bool,
}

/// A field that is there, even as `null`.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// Reads a scenario from YAML text; `file` names it in errors. Its changes are checked by
/// [`super::parse_scenario`].
pub(super) fn read(file: &str, text: &str) -> Result<Scenario, ScenarioError> {
    let de = serde_yaml::Deserializer::from_str(text);
    let sc: Scenario = serde_path_to_error::deserialize(de).map_err(|e| {
        let field = e.path().to_string();
        let mut message = e.inner().to_string();
        // serde_yaml starts its message with (part of) the path we already print.
        if let Some((head, rest)) = message.split_once(": ")
            && !head.is_empty()
            && field.starts_with(head)
        {
            message = rest.to_string();
        }
        if field == "." || field.is_empty() {
            ScenarioError::Read {
                file: file.into(),
                message,
            }
        } else {
            ScenarioError::Field {
                file: file.into(),
                field,
                message,
            }
        }
    })?;
    let mut seen = BTreeMap::new();
    for (i, c) in sc.clusters.iter().enumerate() {
        if let Some(j) = seen.insert(c.name.clone(), i) {
            return Err(ScenarioError::Field {
                file: file.into(),
                field: format!("clusters[{i}].name"),
                message: format!("duplicate cluster name {:?} (also clusters[{j}])", c.name),
            });
        }
        check_cluster(file, &format!("clusters[{i}]"), c)?;
    }
    for (i, r) in sc.runtimes.iter().enumerate() {
        if let Err(e) = TrainingRuntimes::default().apply(r) {
            return Err(ScenarioError::Field {
                file: file.into(),
                field: format!("runtimes[{i}].{}", e.field),
                message: e.message,
            });
        }
    }
    Ok(sc)
}

/// A member's own checks (`field` names it: `clusters[0]`, `changes[1].cluster`).
pub(super) fn check_cluster(file: &str, field: &str, c: &ClusterSpec) -> Result<(), ScenarioError> {
    if let Err(e) = crate::topology::check_levels(&c.topology) {
        return Err(ScenarioError::Field {
            file: file.into(),
            field: format!(
                "{field}.topology{}",
                e.split_once(':').map_or("", |(i, _)| i)
            ),
            message: e.split_once(": ").map_or(e.clone(), |(_, m)| m.to_string()),
        });
    }
    for (k, n) in c.nodes.iter().enumerate() {
        if let Some((r, _)) = n.allocatable.iter().find(|(_, q)| q.is_negative()) {
            return Err(ScenarioError::Field {
                file: file.into(),
                field: format!("{field}.nodes[{k}].allocatable[{r}]"),
                message: "negative quantity".into(),
            });
        }
    }
    Ok(())
}

/// The hub's training runtimes of a scenario (every one of them reads: see [`super::parse_scenario`]).
pub fn runtimes(sc: &Scenario) -> TrainingRuntimes {
    TrainingRuntimes::from_objects(&sc.runtimes).0
}

/// The fleet of a scenario, nodes expanded (`count > 1` names them `name-0`, `name-1`, ...).
pub fn cluster_infos(sc: &Scenario) -> Vec<ClusterInfo> {
    sc.clusters.iter().map(cluster_info).collect()
}

/// The names a node spec expands to (`count > 1` names them `name-0`, `name-1`, ...).
fn node_names(n: &NodeSpec) -> impl Iterator<Item = String> + '_ {
    (0..n.count).map(move |i| {
        if n.count == 1 {
            n.name.clone()
        } else {
            format!("{}-{i}", n.name)
        }
    })
}

/// One member, nodes expanded.
pub fn cluster_info(c: &ClusterSpec) -> ClusterInfo {
    ClusterInfo {
        name: c.name.clone(),
        labels: c.labels.clone(),
        nodes: c
            .nodes
            .iter()
            .flat_map(|n| {
                node_names(n).map(move |name| NodeInfo {
                    name,
                    labels: n.labels.clone(),
                    taints: n.taints.clone(),
                    allocatable: n.allocatable.clone(),
                    unschedulable: n.unschedulable,
                    ready: true,
                })
            })
            .collect(),
        placement: c.placement,
        serves: c.serves.clone(),
        topology: c.topology.clone(),
    }
}

/// Tells the core the scenario's fleet: members, their nodes, what other pods use on them and
/// which members do not answer.
pub fn apply_fleet(sched: &mut Scheduler, sc: &Scenario) {
    for c in cluster_infos(sc) {
        sched.set_cluster(&c);
    }
    for c in &sc.clusters {
        apply_member_state(sched, c, false);
    }
}

/// What a member's spec says besides its nodes: what other pods use on each node and whether it
/// answers. `replaced`: the member was there before, so every node's usage and its reachability
/// are set as the spec says (a node without `used` is cleared, `reachable` defaults to true);
/// else only what differs from a new member's defaults.
pub(super) fn apply_member_state(sched: &mut Scheduler, c: &ClusterSpec, replaced: bool) {
    for n in c.nodes.iter().filter(|n| replaced || !n.used.is_empty()) {
        for name in node_names(n) {
            sched.set_external_usage(&c.name, &name, &n.used);
        }
    }
    if replaced || !c.reachable {
        sched.set_reachable(&c.name, c.reachable);
    }
}
