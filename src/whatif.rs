//! `muster what-if`: a scenario (a file, or a live controller's snapshot) and a list of changes;
//! the start-time estimate of every job before and after each change, from the same simulator
//! and forecast the controller uses. Owns the changes (submit a job, add or remove a member or
//! nodes, replace the quota tree, change a job's priority), their parsing and the tables.
//! Pure apart from reading the files a change names, through the reader it is given.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{Value, json};

use crate::runtime::{ANNOTATION, Rules};
use crate::sim::{self, ClusterSpec, Estimating, JobSpec, NodeSpec, Scenario, ScenarioError};

/// One change to try.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// Submit this job now (its run time: its `muster.dev/expected-runtime`, else the default).
    Submit(Value),
    AddMember(ClusterSpec),
    RemoveMember(String),
    /// Add nodes to a member.
    AddNodes(String, Vec<NodeSpec>),
    /// Remove one node (by its expanded name, `pool-3` for `count` pools) from a member.
    RemoveNode(String, String),
    /// Replace the quota tree (an ElasticQuotaTree manifest).
    Tree(Value),
    /// Give a job (`namespace/name`) another PriorityClass.
    Priority(String, String),
}

/// The syntax of `--change`, for errors and help.
pub const SYNTAX: &str = "submit=JOB.yaml | add-member=CLUSTER.yaml | remove-member=NAME | add-nodes=MEMBER:NODES.yaml | remove-node=MEMBER/NODE | tree=TREE.yaml | priority=NAMESPACE/NAME:CLASS";

impl Change {
    /// Reads `KIND=ARG`; `read` gives a file's text.
    pub fn parse(
        spec: &str,
        read: &dyn Fn(&str) -> Result<String, String>,
    ) -> Result<Change, String> {
        let (kind, arg) = spec
            .split_once('=')
            .ok_or_else(|| format!("--change {spec:?}: expected KIND=ARG, one of: {SYNTAX}"))?;
        let yaml = |path: &str| -> Result<Value, String> {
            let text = read(path)?;
            serde_yaml::from_str::<Value>(&text).map_err(|e| format!("{path}: {e}"))
        };
        fn typed<T: serde::de::DeserializeOwned>(path: &str, v: Value) -> Result<T, String> {
            serde_json::from_value(v).map_err(|e| format!("{path}: {e}"))
        }
        match kind {
            "submit" => Ok(Change::Submit(yaml(arg)?)),
            "add-member" => Ok(Change::AddMember(typed(arg, yaml(arg)?)?)),
            "remove-member" => Ok(Change::RemoveMember(arg.to_string())),
            "add-nodes" => {
                let (member, path) = arg.split_once(':').ok_or_else(|| {
                    format!("--change {spec:?}: expected add-nodes=MEMBER:NODES.yaml")
                })?;
                let v = yaml(path)?;
                let nodes: Vec<NodeSpec> = if v.is_array() {
                    typed(path, v)?
                } else {
                    vec![typed(path, v)?]
                };
                Ok(Change::AddNodes(member.to_string(), nodes))
            }
            "remove-node" => {
                let (member, node) = arg.split_once('/').ok_or_else(|| {
                    format!("--change {spec:?}: expected remove-node=MEMBER/NODE")
                })?;
                Ok(Change::RemoveNode(member.to_string(), node.to_string()))
            }
            "tree" => Ok(Change::Tree(yaml(arg)?)),
            "priority" => {
                let (job, class) = arg.rsplit_once(':').ok_or_else(|| {
                    format!("--change {spec:?}: expected priority=NAMESPACE/NAME:CLASS")
                })?;
                if !job.contains('/') {
                    return Err(format!("--change {spec:?}: the job is NAMESPACE/NAME"));
                }
                Ok(Change::Priority(job.to_string(), class.to_string()))
            }
            other => Err(format!(
                "--change {spec:?}: unknown change {other:?}; one of: {SYNTAX}"
            )),
        }
    }

    /// One line saying what it does.
    pub fn describe(&self) -> String {
        match self {
            Change::Submit(m) => format!("submit {}", job_name(m)),
            Change::AddMember(c) => format!("add member {} ({} node specs)", c.name, c.nodes.len()),
            Change::RemoveMember(n) => format!("remove member {n}"),
            Change::AddNodes(m, n) => format!(
                "add {} nodes to {m}",
                n.iter().map(|n| u64::from(n.count)).sum::<u64>()
            ),
            Change::RemoveNode(m, n) => format!("remove node {n} from {m}"),
            Change::Tree(_) => "replace the quota tree".to_string(),
            Change::Priority(j, c) => format!("give {j} PriorityClass {c}"),
        }
    }

    /// Applies it to a scenario; an error names what is missing.
    pub fn apply(&self, sc: &mut Scenario, rules: &Rules) -> Result<(), String> {
        match self {
            Change::Submit(m) => {
                let run_for = m
                    .pointer("/metadata/annotations")
                    .and_then(|a| a.get(ANNOTATION))
                    .and_then(Value::as_str)
                    .map(sim::parse_duration)
                    .transpose()
                    .map_err(|e| format!("{}: {ANNOTATION}: {e}", job_name(m)))?
                    .unwrap_or(rules.default);
                sc.jobs.push(JobSpec {
                    at: 0,
                    run_for,
                    running: None,
                    manifest: m.clone().into(),
                });
            }
            Change::AddMember(c) => {
                if sc.clusters.iter().any(|x| x.name == c.name) {
                    return Err(format!("member {} exists already", c.name));
                }
                sc.clusters.push(c.clone());
            }
            Change::RemoveMember(n) => {
                let before = sc.clusters.len();
                sc.clusters.retain(|c| &c.name != n);
                if sc.clusters.len() == before {
                    return Err(format!("no member {n}"));
                }
            }
            Change::AddNodes(m, nodes) => member(sc, m)?.nodes.extend(nodes.iter().cloned()),
            Change::RemoveNode(m, node) => {
                let c = member(sc, m)?;
                let mut found = false;
                let mut kept = Vec::new();
                for n in c.nodes.drain(..) {
                    if n.count == 1 || found {
                        if n.name == *node && !found {
                            found = true;
                        } else {
                            kept.push(n);
                        }
                        continue;
                    }
                    // A pool: expand it when the node is one of its members.
                    let names: Vec<String> =
                        (0..n.count).map(|i| format!("{}-{i}", n.name)).collect();
                    if names.iter().any(|x| x == node) {
                        found = true;
                        for x in names.into_iter().filter(|x| x != node) {
                            kept.push(NodeSpec {
                                name: x,
                                count: 1,
                                ..n.clone()
                            });
                        }
                    } else {
                        kept.push(n);
                    }
                }
                c.nodes = kept;
                if !found {
                    return Err(format!("member {m} has no node {node}"));
                }
            }
            Change::Tree(t) => sc.quota = Some(t.clone()),
            Change::Priority(job, class) => {
                if !sc.priority_classes.contains_key(class) {
                    return Err(format!("no PriorityClass {class}"));
                }
                let mut found = false;
                for j in &mut sc.jobs {
                    if job_name(&j.manifest.value()) == *job {
                        set_priority(j.manifest.value_mut(), class);
                        found = true;
                    }
                }
                if !found {
                    return Err(format!("no job {job}"));
                }
            }
        }
        Ok(())
    }
}

fn member<'a>(sc: &'a mut Scenario, name: &str) -> Result<&'a mut ClusterSpec, String> {
    sc.clusters
        .iter_mut()
        .find(|c| c.name == name)
        .ok_or_else(|| format!("no member {name}"))
}

fn job_name(m: &Value) -> String {
    let s = |k: &str| m.pointer(k).and_then(Value::as_str).unwrap_or("");
    let ns = match s("/metadata/namespace") {
        "" => "default",
        ns => ns,
    };
    format!("{ns}/{}", s("/metadata/name"))
}

/// Every pod template (an object with `containers`) gets `priorityClassName: class`, and a
/// Kubeflow `runPolicy.schedulingPolicy.priorityClass` is replaced.
fn set_priority(v: &mut Value, class: &str) {
    match v {
        Value::Object(m) => {
            if m.contains_key("containers") {
                m.insert("priorityClassName".into(), json!(class));
            }
            if let Some(p) = m
                .get_mut("schedulingPolicy")
                .and_then(|s| s.get_mut("priorityClass"))
            {
                *p = json!(class);
            }
            m.values_mut().for_each(|x| set_priority(x, class));
        }
        Value::Array(a) => a.iter_mut().for_each(|x| set_priority(x, class)),
        _ => {}
    }
}

/// A job's forecast start as the table shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    pub job: String,
    /// Seconds from the scenario's start (null: never).
    pub start: Option<String>,
    pub cluster: Option<String>,
    pub never: Option<String>,
}

/// The estimate of every job at its submission (the running jobs of a snapshot are left out).
///
/// A scenario with `changes:` is refused: a what-if change is made to the state at the start,
/// which a scheduled change (a tree, a member) would then replace or contradict.
pub fn estimates(file: &str, sc: &Scenario, rules: &Rules) -> Result<Vec<Row>, ScenarioError> {
    if !sc.changes.is_empty() {
        return Err(ScenarioError::Field {
            file: file.into(),
            field: "changes".into(),
            message:
                "muster what-if does not take a scenario with scheduled changes (each --change \
                      is made at the start, where a scheduled change would replace or contradict \
                      it); remove `changes:`, or run `muster sim` for their effect"
                    .into(),
        });
    }
    let report = sim::run_estimated(
        file,
        sc,
        &mut (),
        &Estimating {
            at_submission: true,
            rules: rules.clone(),
            ..Estimating::default()
        },
    )?;
    Ok(report
        .jobs
        .iter()
        .zip(&sc.jobs)
        .filter(|(_, spec)| spec.running.is_none())
        .map(|(j, _)| {
            let e = j.estimate.as_ref();
            Row {
                job: format!("{}/{}", j.namespace, j.name),
                start: e
                    .filter(|e| !e.start.is_null())
                    .map(|e| format!("{}s", e.start)),
                cluster: e.and_then(|e| e.cluster.clone()),
                never: e
                    .and_then(|e| e.never.clone())
                    .or_else(|| e.is_none().then(|| j.reason.clone().unwrap_or_default())),
            }
        })
        .collect())
}

fn cut(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let head: String = s.chars().take(max).collect();
    format!("{head}…")
}

/// The estimates as they are: job, start (seconds on the scenario's clock) and member, and the
/// whole reason of the jobs that never start.
pub fn current(rows: &[Row]) -> String {
    let w = rows.iter().map(|r| r.job.len()).max().unwrap_or(0).max(3);
    let mut out = format!("{:<w$}  ESTIMATED START\n", "JOB");
    for r in rows {
        let s = match (&r.start, &r.cluster) {
            (Some(s), Some(c)) => format!("{s} on {c}"),
            (Some(s), None) => s.clone(),
            _ => format!("never: {}", r.never.clone().unwrap_or_default()),
        };
        let _ = writeln!(out, "{:<w$}  {s}", r.job);
    }
    out
}

/// One table: each job's estimate before and after a change, changed rows marked.
pub fn table(before: &[Row], after: &[Row]) -> String {
    let show = |r: Option<&Row>| match r {
        None => "-".to_string(),
        Some(r) => match (&r.start, &r.cluster) {
            (Some(s), Some(c)) => format!("{s} on {c}"),
            (Some(s), None) => s.clone(),
            _ => format!("never: {}", cut(r.never.as_deref().unwrap_or_default(), 60)),
        },
    };
    let by_job: BTreeMap<&str, &Row> = before.iter().map(|r| (r.job.as_str(), r)).collect();
    let rows: Vec<[String; 4]> = after
        .iter()
        .map(|a| {
            let b = by_job.get(a.job.as_str()).copied();
            let mark = match b {
                None => "new",
                Some(b) if b != a => "changed",
                _ => "",
            };
            [a.job.clone(), show(b), show(Some(a)), mark.to_string()]
        })
        .chain(
            before
                .iter()
                .filter(|b| !after.iter().any(|a| a.job == b.job))
                .map(|b| [b.job.clone(), show(Some(b)), "-".into(), "gone".into()]),
        )
        .collect();
    let heads = ["JOB", "BEFORE", "AFTER", ""];
    let mut w = heads.map(str::len);
    for r in &rows {
        for i in 0..3 {
            w[i] = w[i].max(r[i].len());
        }
    }
    let mut out = String::new();
    for r in std::iter::once(heads.map(String::from)).chain(rows) {
        let line = format!(
            "{:<w0$}  {:<w1$}  {:<w2$}  {}",
            r[0],
            r[1],
            r[2],
            r[3],
            w0 = w[0],
            w1 = w[1],
            w2 = w[2]
        );
        let _ = writeln!(out, "{}", line.trim_end());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario() -> Scenario {
        sim::parse_scenario("t", sim::DEFAULT_SCENARIO).expect("default scenario reads")
    }

    fn no_file(p: &str) -> Result<String, String> {
        Err(format!("{p}: not here"))
    }

    #[test]
    fn changes_parse_and_say_what_is_wrong() {
        assert_eq!(
            Change::parse("remove-member=member-a", &no_file),
            Ok(Change::RemoveMember("member-a".into()))
        );
        assert_eq!(
            Change::parse("priority=ns/j:high", &no_file),
            Ok(Change::Priority("ns/j".into(), "high".into()))
        );
        let e = Change::parse("grow=3", &no_file).expect_err("unknown");
        assert!(e.contains("unknown change"), "{e}");
        let e = Change::parse("submit=x.yaml", &no_file).expect_err("no file");
        assert!(e.contains("x.yaml"), "{e}");
        let nodes = |_: &str| Ok("- {name: extra, count: 2, allocatable: {cpu: '8'}}".to_string());
        let c = Change::parse("add-nodes=member-a:n.yaml", &nodes).expect("reads");
        assert!(matches!(&c, Change::AddNodes(m, n) if m == "member-a" && n[0].count == 2));
    }

    #[test]
    fn removing_the_member_a_job_waits_for_changes_its_estimate() {
        let sc = scenario();
        let rules = Rules::default();
        let before = estimates("t", &sc, &rules).expect("runs");
        let mut after_sc = sc.clone();
        Change::RemoveMember("member-c".into())
            .apply(&mut after_sc, &rules)
            .expect("applies");
        let after = estimates("t", &after_sc, &rules).expect("runs");
        let big = |rows: &[Row]| {
            rows.iter()
                .find(|r| r.job == "research/train-big")
                .cloned()
                .expect("listed")
        };
        assert_eq!(big(&before).cluster.as_deref(), Some("member-c"));
        assert_ne!(big(&after), big(&before), "member-c is gone");
        let t = table(&before, &after);
        assert!(t.contains("changed"), "{t}");
        assert!(
            Change::RemoveMember("nope".into())
                .apply(&mut after_sc, &rules)
                .is_err()
        );
    }

    #[test]
    fn priority_and_node_changes_apply() {
        let mut sc = scenario();
        let rules = Rules::default();
        let class = sc.priority_classes.keys().next().cloned().expect("a class");
        Change::Priority("platform/eval-normal".into(), class.clone())
            .apply(&mut sc, &rules)
            .expect("applies");
        let m = &sc
            .jobs
            .iter()
            .find(|j| job_name(&j.manifest.value()) == "platform/eval-normal")
            .expect("job")
            .manifest
            .value();
        assert!(
            m.to_string()
                .contains(&format!("\"priorityClassName\":\"{class}\""))
        );
        let name = sc.clusters[0].nodes[0].name.clone();
        let member = sc.clusters[0].name.clone();
        let count = sc.clusters[0].nodes[0].count;
        let target = if count == 1 {
            name.clone()
        } else {
            format!("{name}-0")
        };
        Change::RemoveNode(member.clone(), target)
            .apply(&mut sc, &rules)
            .expect("applies");
        let left: u32 = sc.clusters[0].nodes.iter().map(|n| n.count).sum();
        assert_eq!(left, count - 1);
        assert!(
            Change::Priority("a/b".into(), "no-such".into())
                .apply(&mut sc, &rules)
                .is_err()
        );
    }
}
