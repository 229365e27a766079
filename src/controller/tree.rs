//! The quota tree reconciler: which ElasticQuotaTree is in force (a valid one replaces it, an
//! invalid one is reported and leaves the last valid one in force), and the tree's status (its
//! Valid condition, problems with their field paths, and per node min, max and usage).

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{Resource, ResourceExt};

use super::crd;
use super::crd::{ElasticQuotaTreeStatus, QuotaNodeStatus};
use super::ctx::{Core, Ctx};
use super::events::truncate;
use super::reports::Report;
use super::reports::Reports;
use crate::quantity::Quantity;
use crate::quota::QuotaTree;
use crate::scheduler::Scheduler;

/// The quota tree in force: what was last applied or refused, its status, and the namespaces
/// it covers (shared with the webhook).
pub(super) struct Tree {
    pub covered: super::intake::Covered,
    /// (uid, generation) of the object last applied or rejected.
    pub seen: Option<(String, i64)>,
    pub status: Option<ElasticQuotaTreeStatus>,
    /// The status last written.
    pub written: Option<ElasticQuotaTreeStatus>,
    /// Its namespace and name.
    pub reference: Option<(String, String)>,
    /// The tree in force, as applied (for snapshots).
    pub manifest: Option<serde_json::Value>,
}

impl Tree {
    /// Whether the tree in force covers namespace `ns`.
    pub(super) fn covers(&self, ns: &str) -> bool {
        self.covered
            .read()
            .map(|c| c.as_ref().is_some_and(|c| c.contains(ns)))
            .unwrap_or(false)
    }

    pub fn new(covered: super::intake::Covered) -> Tree {
        Tree {
            covered,
            seen: None,
            status: None,
            written: None,
            reference: None,
            manifest: None,
        }
    }
}

impl Tree {
    /// Applies the tree in force if it changed since the last pass (a valid one replaces the
    /// scheduler's; an invalid one is reported and changes nothing).
    pub(super) fn sync(
        &mut self,
        ctx: &Ctx,
        sched: &mut Scheduler,
        ignored: &mut HashMap<String, i64>,
    ) {
        let trees = ctx.stores.trees.state();
        let Some(tree) = crd::tree_in_force(&trees) else {
            return;
        };
        let key = (
            tree.uid().unwrap_or_default(),
            tree.metadata.generation.unwrap_or(0),
        );
        if self.seen.as_ref() == Some(&key) {
            return;
        }
        self.seen = Some(key);
        self.reference = Some((tree.namespace().unwrap_or_default(), tree.name_any()));
        let oref = tree.object_ref(&());
        let now = Time(super::clock::now());
        let manifest = tree.manifest();
        match QuotaTree::parse(&manifest) {
            Ok(t) => {
                self.manifest = Some(manifest.clone());
                let ns = t.namespaces();
                tracing::info!(tree = %tree.name_any(), leaves = ns.len(), "quota tree applied");
                sched.set_quota_tree(Some(t));
                // Jobs it did not cover are looked at again.
                ignored.clear();
                if let Ok(mut c) = self.covered.write() {
                    *c = Some(ns);
                }
                self.status = Some(ElasticQuotaTreeStatus {
                    conditions: vec![Condition {
                        type_: "Valid".into(),
                        status: "True".into(),
                        reason: "Applied".into(),
                        message: "this tree is in force".into(),
                        last_transition_time: now,
                        observed_generation: tree.metadata.generation,
                    }],
                    problems: vec![],
                    nodes: vec![],
                });
                ctx.publish(
                    &oref,
                    false,
                    "QuotaTreeApplied",
                    "the quota tree is in force".into(),
                );
            }
            Err(problems) => {
                let msgs: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
                tracing::warn!(tree = %tree.name_any(), problems = ?msgs, "invalid quota tree; the last valid one stays in force");
                let in_force = if sched.quota().is_some() {
                    "the last valid tree stays in force"
                } else {
                    "no tree is in force: no job is queued"
                };
                self.status = Some(ElasticQuotaTreeStatus {
                    conditions: vec![Condition {
                        type_: "Valid".into(),
                        status: "False".into(),
                        reason: "Invalid".into(),
                        message: truncate(&format!("{}; {in_force}", msgs.join("; ")), 4000),
                        last_transition_time: now,
                        observed_generation: tree.metadata.generation,
                    }],
                    problems: msgs.clone(),
                    nodes: self.status.take().map(|s| s.nodes).unwrap_or_default(),
                });
                ctx.publish(
                    &oref,
                    true,
                    "InvalidQuotaTree",
                    format!("{} ({in_force})", msgs.join("; ")),
                );
            }
        }
    }

    /// Sends the tree's status (its usage at most every `REPORT_EVERY`).
    pub(super) fn write_status(&self, ctx: &Ctx, core: &mut Core, reports: &mut Reports) {
        let sched = &core.sched;
        let (Some((ns, name)), Some(mut st)) = (self.reference.clone(), self.status.clone()) else {
            return;
        };
        if let Some(q) = sched.quota() {
            let table = &sched.table;
            st.nodes = q
                .tree
                .nodes
                .iter()
                .enumerate()
                .map(|(i, n)| {
                    let mut used = BTreeMap::new();
                    for r in (0..table.len()).map(|i| crate::resources::Res(i as u16)) {
                        let u = q.used_of(i, r);
                        if u != 0
                            || n.min.get(table.name(r)).milli() != 0
                            || q.max_of(i, r).is_some()
                        {
                            used.insert(
                                table.name(r).to_string(),
                                Quantity::from_milli(u).to_string(),
                            );
                        }
                    }
                    QuotaNodeStatus {
                        path: n.path.clone(),
                        used,
                        min: n
                            .min
                            .iter()
                            .map(|(k, v)| (k.to_string(), v.to_string()))
                            .collect(),
                        max: n
                            .max
                            .iter()
                            .map(|(k, v)| (k.to_string(), v.to_string()))
                            .collect(),
                    }
                })
                .collect();
        }
        if self.written.as_ref() == Some(&st) {
            return;
        }
        // Usage alone changes with every admission: written at most every REPORT_EVERY.
        let urgent = self
            .written
            .as_ref()
            .is_none_or(|w| w.conditions != st.conditions || w.problems != st.problems);
        let report = Report::Tree {
            namespace: ns,
            name,
            status: st,
        };
        reports.send(ctx, core, report, urgent);
    }
}
