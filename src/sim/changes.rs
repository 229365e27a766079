//! `changes:` of a scenario: the quota tree, a member or a member's reachability changing at a
//! virtual time (the format of a change is the scenario's). Owns its checks when the scenario is read (every change
//! up front, errors naming `changes[i]...`), telling the core at its instant (through the same
//! inputs the controller uses: `set_quota_tree`, `set_cluster`, `set_reachable`), and the fleet's
//! allocatable over time, which utilization is measured against.

use std::collections::{BTreeMap, BTreeSet};

use super::scenario::{self, ClusterSpec, Scenario, ScenarioError};
use crate::quota::{Problem, QuotaTree};
use crate::scheduler::Scheduler;

/// A change checked, ready to tell the core.
enum Ready {
    Tree(Option<QuotaTree>),
    Cluster(ClusterSpec),
    Reachable(String, bool),
}

/// The changes of one run, checked, and the fleet's allocatable over time.
pub(super) struct Changes {
    ready: Vec<Ready>,
    /// The warnings of the changes' trees, their fields named from `changes[i].quota`.
    pub warnings: Vec<String>,
    /// Resource-milliseconds of allocatable up to `since` (the last member change).
    pub before: BTreeMap<String, i128>,
    pub since: u64,
    /// The fleet's allocatable since `since` (None until the first member change).
    alloc: Option<BTreeMap<String, i128>>,
}

fn field_error(file: &str, field: String, message: String) -> ScenarioError {
    ScenarioError::Field {
        file: file.into(),
        field,
        message,
    }
}

/// Checks every change of `sc`: exactly one kind each, trees valid, members' nodes valid, and
/// every `reachable` naming a member there at its instant (one of `clusters`, or one a change
/// before it adds).
pub(super) fn check(file: &str, sc: &Scenario) -> Result<Changes, ScenarioError> {
    let mut ready = Vec::with_capacity(sc.changes.len());
    let mut warnings = Vec::new();
    for (i, c) in sc.changes.iter().enumerate() {
        let r = match (&c.quota, &c.cluster, &c.reachable) {
            (Some(q), None, None) => {
                let field = format!("changes[{i}].quota");
                let at = |problems: Vec<Problem>| -> Vec<Problem> {
                    problems
                        .into_iter()
                        .map(|p| Problem {
                            field: format!("{field}.{}", p.field),
                            ..p
                        })
                        .collect()
                };
                if super::is_empty(q) {
                    Ready::Tree(None)
                } else {
                    let tree = QuotaTree::parse(q).map_err(|problems| ScenarioError::QuotaAt {
                        file: file.into(),
                        field: field.clone(),
                        problems: at(problems),
                    })?;
                    warnings.extend(at(tree.warnings.clone()).iter().map(|p| p.to_string()));
                    Ready::Tree(Some(tree))
                }
            }
            (None, Some(m), None) => {
                scenario::check_cluster(file, &format!("changes[{i}].cluster"), m)?;
                Ready::Cluster(m.clone())
            }
            (None, None, Some(r)) => Ready::Reachable(r.cluster.clone(), r.reachable),
            (q, m, r) => {
                let kinds: Vec<&str> = [
                    ("quota", q.is_some()),
                    ("cluster", m.is_some()),
                    ("reachable", r.is_some()),
                ]
                .into_iter()
                .filter_map(|(k, set)| set.then_some(k))
                .collect();
                let found = if kinds.is_empty() {
                    "none".to_string()
                } else {
                    kinds.join(" and ")
                };
                return Err(field_error(
                    file,
                    format!("changes[{i}]"),
                    format!("a change has exactly one of quota, cluster, reachable; found {found}"),
                ));
            }
        };
        ready.push(r);
    }
    // Names in the order the run applies changes: by time, then file order.
    let mut order: Vec<usize> = (0..sc.changes.len()).collect();
    order.sort_by_key(|&i| (sc.changes[i].at, i));
    let mut members: BTreeSet<&str> = sc.clusters.iter().map(|c| c.name.as_str()).collect();
    for i in order {
        match &ready[i] {
            Ready::Cluster(m) => {
                members.insert(m.name.as_str());
            }
            Ready::Reachable(name, _) if !members.contains(name.as_str()) => {
                let later = sc
                    .changes
                    .iter()
                    .position(|c| c.cluster.as_ref().is_some_and(|m| &m.name == name));
                let message = match later {
                    Some(j) => format!(
                        "{name:?} is not a member at {}: changes[{j}] adds it at {}",
                        scenario::format_duration(sc.changes[i].at),
                        scenario::format_duration(sc.changes[j].at)
                    ),
                    None => format!(
                        "{name:?} is not a member (members: {})",
                        members.iter().copied().collect::<Vec<_>>().join(", ")
                    ),
                };
                return Err(field_error(
                    file,
                    format!("changes[{i}].reachable.cluster"),
                    message,
                ));
            }
            _ => {}
        }
    }
    Ok(Changes {
        ready,
        warnings,
        before: BTreeMap::new(),
        since: 0,
        alloc: None,
    })
}

impl Changes {
    /// Tells the core change `i`, at `now`.
    pub fn apply(&mut self, i: usize, sched: &mut Scheduler, now: u64) {
        match &self.ready[i] {
            Ready::Tree(t) => sched.set_quota_tree(t.clone()),
            Ready::Reachable(name, up) => sched.set_reachable(name, *up),
            Ready::Cluster(c) => {
                // The allocatable until now, at the fleet's size until now.
                let alloc = match self.alloc.take() {
                    Some(a) => a,
                    None => allocatable(sched),
                };
                let span = i128::from(now - self.since);
                for (r, a) in alloc {
                    let b = self.before.entry(r).or_default();
                    *b = b.saturating_add(a.saturating_mul(span));
                }
                self.since = now;
                let replaced = sched.clusters().iter().any(|m| m.name == c.name);
                sched.set_cluster(&scenario::cluster_info(c));
                scenario::apply_member_state(sched, c, replaced);
                self.alloc = Some(allocatable(sched));
            }
        }
    }
}

/// The fleet's allocatable per resource, in milli-units (`pods` and the job-count resource left
/// out).
pub(super) fn allocatable(sched: &Scheduler) -> BTreeMap<String, i128> {
    let mut alloc: BTreeMap<String, i128> = BTreeMap::new();
    for c in sched.clusters() {
        for n in &c.nodes {
            for (i, v) in n.alloc.iter().enumerate() {
                let name = sched
                    .table
                    .name(crate::resources::Res(i as u16))
                    .to_string();
                if name != "pods" && name != crate::resources::MAX_JOBS_NAME {
                    *alloc.entry(name).or_default() += *v;
                }
            }
        }
    }
    alloc
}

#[cfg(test)]
mod tests {
    use super::super::{ReachableSpec, Scenario, parse_scenario};
    use serde_json::Value;

    const FLEET: &str =
        "clusters:\n- name: m\n  nodes:\n  - name: n\n    allocatable: {cpu: \"8\"}\n";

    fn read(text: &str) -> Scenario {
        parse_scenario("t", text).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn changes_read_back_as_written_and_are_absent_when_there_are_none() {
        let text = format!(
            "{FLEET}changes:
- at: 90s
  quota: null
- at: 1h30m
  reachable: {{cluster: m, reachable: false}}
- at: 2h
  cluster: {{name: m2, nodes: [{{name: x, count: 2, allocatable: {{cpu: '4'}}}}]}}
"
        );
        let sc = read(&text);
        assert_eq!(sc.changes.len(), 3);
        assert_eq!(sc.changes[0].at, 90_000);
        assert_eq!(sc.changes[0].quota, Some(Value::Null), "null is a change");
        assert_eq!(
            sc.changes[1].reachable,
            Some(ReachableSpec {
                cluster: "m".into(),
                reachable: false
            })
        );
        let yaml = serde_yaml::to_string(&sc).expect("writes");
        assert!(yaml.contains("at: 1h30m"), "{yaml}");
        assert!(yaml.contains("quota: null"), "{yaml}");
        assert_eq!(read(&yaml).changes, sc.changes);

        let none = serde_yaml::to_string(&read(FLEET)).expect("writes");
        assert!(!none.contains("changes"), "{none}");
    }

    #[test]
    fn a_cluster_change_checks_its_nodes_like_clusters() {
        let text = format!(
            "{FLEET}changes:\n- at: 1m\n  cluster: {{name: m, nodes: [{{name: x, allocatable: {{cpu: '-1'}}}}]}}\n"
        );
        let e = parse_scenario("t", &text).expect_err("negative");
        assert_eq!(
            e.to_string(),
            "t: changes[0].cluster.nodes[0].allocatable[cpu]: negative quantity"
        );
    }
}
