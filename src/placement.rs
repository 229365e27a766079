//! Placement on a member, pod by pod: which planned node each pod of a dispatched job gets, and
//! when muster's scheduling gate may leave it (gang release). Pure and deterministic: the driver
//! describes the pods it sees on the member; this module answers which pods to assign and
//! release, which to hold and why, and which pods are not where the plan put them. The pods
//! themselves are the durable record of an assignment (a gated pod is assigned and released in
//! one write), so a restarted driver continues where the last one stopped.
//!
//! Slots: the plan gives every component a number of pods per node. A live pod that is no longer
//! gated occupies the slot of the node it is bound to (or, before binding, the one node it may
//! go to). A gated pod takes a free slot of its component, preferring the node it is already
//! restricted to. Finished and terminating pods free their slots, so a recreated pod (deleted,
//! evicted, restarted by its operator, the next wave of a batch Job) gets the slot back.
//!
//! Gang release: the components an operator creates at once ("initial") are released together,
//! only when every planned slot of every one of them has a pod. A component an operator creates
//! later (an MPIJob launcher, a RayJob submitter, the later jobs of an in-order JobSet: "staged")
//! is released as a whole once it is complete and the initial gang was released. A component
//! that was released once releases each new pod on its own: what remains is a restart or a later
//! wave, and the rest of the job already runs.

use std::collections::{BTreeMap, BTreeSet};

/// Pods per node per component (`{worker: {node-1: 2}}`), the same shape as the core's plan.
pub type Plan = BTreeMap<String, BTreeMap<String, u32>>;

/// The name of muster's scheduling gate on the pod templates it dispatches ([`gated`] plans, to
/// members that place pod by pod).
pub const GATE: &str = "muster.dev/placement";

/// Whether a job dispatched with `plan` to a member that places pod by pod carries the gate.
/// Every plan does but one of a single pod: pinned to its one planned node, that pod has no
/// other arrangement the member's scheduler could choose and no gang to wait for, so the gate
/// would cost a write per pod (its release) and a pass of waiting, and hold it to nothing more.
/// Its component is then placed as on a pinned member: a pod found on a node outside the plan
/// is a mismatch.
pub fn gated(plan: &Plan) -> bool {
    plan.values().flat_map(|nodes| nodes.values()).sum::<u32>() != 1
}

/// One pod of a dispatched job as the member shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodSeen {
    pub name: String,
    pub component: String,
    /// Still carries muster's scheduling gate.
    pub gated: bool,
    /// The nodes its required node affinity allows (`None`: not restricted by name).
    pub allowed: Option<BTreeSet<String>>,
    /// The node it is bound to.
    pub bound: Option<String>,
    /// Phase Succeeded or Failed.
    pub finished: bool,
    /// Being deleted.
    pub deleting: bool,
}

impl PodSeen {
    /// The one node the pod may go to, when its affinity names exactly one.
    pub fn assigned(&self) -> Option<&String> {
        self.allowed
            .as_ref()
            .filter(|a| a.len() == 1)
            .and_then(|a| a.iter().next())
    }

    fn live(&self) -> bool {
        !self.finished && !self.deleting
    }
}

/// A pod placed where the plan does not put it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    pub pod: String,
    pub component: String,
    pub node: String,
    /// Why it is wrong, in one line.
    pub why: String,
}

/// What to do now, and what the pods' placement is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Step {
    /// Gated pods to restrict to exactly `node` and release, in this order.
    pub release: Vec<(String, String)>,
    /// Gated pods held back, each with why.
    pub held: Vec<(String, String)>,
    /// Pods not where the plan puts them.
    pub mismatches: Vec<Mismatch>,
    /// Components released (before or by this step).
    pub released: BTreeSet<String>,
    /// Per pod: its component, the planned node it has (or is given now), the node it is on.
    pub pods: Vec<PodRecord>,
}

/// One pod's placement, for status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodRecord {
    pub pod: String,
    pub component: String,
    pub planned: Option<String>,
    pub node: Option<String>,
    pub gated: bool,
}

/// Decides assignments and releases for one job.
///
/// `plan` covers the components whose pods muster can see (labelled templates); `staged` names
/// the components created after the others; `pinned` the components dispatched without the gate
/// (pinned mode: the member chooses among the planned nodes, so only a node outside the plan is
/// a mismatch); `released` are the components released before (from the record), to which
/// every component with a pod that is no longer gated is added.
pub fn step(
    plan: &Plan,
    staged: &BTreeSet<String>,
    pinned: &BTreeSet<String>,
    pods: &[PodSeen],
    released: &BTreeSet<String>,
) -> Step {
    let mut out = Step::default();
    let mut pods: Vec<&PodSeen> = pods
        .iter()
        .filter(|p| plan.contains_key(&p.component))
        .collect();
    pods.sort_by(|a, b| a.name.cmp(&b.name));
    out.released = released
        .iter()
        .filter(|c| plan.contains_key(*c))
        .cloned()
        .collect();
    for p in &pods {
        if !p.gated {
            out.released.insert(p.component.clone());
        }
    }

    // Slots taken by pods past their gate.
    let mut free: Plan = plan.clone();
    for p in pods.iter().filter(|p| !p.gated && p.live()) {
        let Some(node) = p.bound.as_ref().or(p.assigned()) else {
            continue; // released without a node (gates stripped): the member decides
        };
        let planned_there = plan
            .get(&p.component)
            .is_some_and(|m| m.get(node).is_some_and(|k| *k > 0));
        match free.get_mut(&p.component) {
            Some(m) if m.get(node).is_some_and(|k| *k > 0) => take_slot(m, node),
            _ if planned_there && pinned.contains(&p.component) => {}
            _ => {
                let planned = plan.get(&p.component).and_then(|m| m.get(node)).copied();
                out.mismatches.push(Mismatch {
                    pod: p.name.clone(),
                    component: p.component.clone(),
                    node: node.clone(),
                    why: match planned {
                        None | Some(0) => {
                            format!("the plan puts no {} pod on {node}", p.component)
                        }
                        Some(k) => format!(
                            "the plan holds {k} {} pod{} on {node}; more run there",
                            p.component,
                            if k == 1 { "" } else { "s" }
                        ),
                    },
                });
            }
        }
        if let (Some(b), Some(a)) = (p.bound.as_ref(), p.assigned())
            && a != b
        {
            out.mismatches.push(Mismatch {
                pod: p.name.clone(),
                component: p.component.clone(),
                node: b.clone(),
                why: format!("assigned to {a}, bound to {b}"),
            });
        }
    }

    // Tentative slots for gated pods: the node they are already restricted to first.
    let gated: Vec<&&PodSeen> = pods.iter().filter(|p| p.gated && p.live()).collect();
    let mut slot: BTreeMap<&str, String> = BTreeMap::new();
    for pass in 0..2 {
        for p in &gated {
            if slot.contains_key(p.name.as_str()) {
                continue;
            }
            let Some(nodes) = free.get_mut(&p.component) else {
                continue;
            };
            let pick = if pass == 0 {
                p.assigned()
                    .filter(|n| nodes.get(*n).is_some_and(|k| *k > 0))
                    .cloned()
            } else {
                nodes
                    .iter()
                    .find(|(n, k)| **k > 0 && p.allowed.as_ref().is_none_or(|a| a.contains(*n)))
                    .map(|(n, _)| n.clone())
            };
            if let Some(n) = pick {
                take_slot(nodes, &n);
                slot.insert(p.name.as_str(), n);
            }
        }
    }

    // Which components may release now.
    let planned_total = |c: &str| -> u32 { plan.get(c).map_or(0, |m| m.values().sum()) };
    let filled = |c: &str| -> u32 {
        let f: u32 = free.get(c).map_or(0, |m| m.values().sum());
        planned_total(c) - f
    };
    let initial: Vec<&String> = plan
        .keys()
        .filter(|c| !staged.contains(*c) && planned_total(c) > 0)
        .collect();
    let initial_released = initial.iter().any(|c| out.released.contains(*c))
        || (initial.is_empty() && !out.released.is_empty());
    let initial_complete = initial.iter().all(|c| filled(c) == planned_total(c));
    let mut may: BTreeMap<&str, Result<(), String>> = BTreeMap::new();
    for c in plan.keys() {
        let verdict = if out.released.contains(c) {
            Ok(())
        } else if !staged.contains(c) {
            if initial_released || initial_complete {
                Ok(())
            } else {
                let have: u32 = initial.iter().map(|c| filled(c)).sum();
                let want: u32 = initial.iter().map(|c| planned_total(c)).sum();
                Err(format!(
                    "held until every pod exists: {have} of {want} created"
                ))
            }
        } else if !(initial_released || initial_complete) {
            Err("held until the pods created before it are released".to_string())
        } else if filled(c) < planned_total(c) {
            Err(format!(
                "held until every {c} pod exists: {} of {} created",
                filled(c),
                planned_total(c)
            ))
        } else {
            Ok(())
        };
        may.insert(c.as_str(), verdict);
    }
    for p in &gated {
        match (slot.get(p.name.as_str()), may.get(p.component.as_str())) {
            (Some(n), Some(Ok(()))) => {
                out.release.push((p.name.clone(), n.clone()));
            }
            (Some(_), Some(Err(why))) => out.held.push((p.name.clone(), why.clone())),
            (None, _) => out.held.push((
                p.name.clone(),
                format!(
                    "no free planned slot for a {} pod (plan: {})",
                    p.component,
                    fmt_nodes(plan.get(&p.component))
                ),
            )),
            (Some(_), None) => {}
        }
    }
    let released_now: BTreeSet<&str> = out.release.iter().map(|(p, _)| p.as_str()).collect();
    for p in &gated {
        if released_now.contains(p.name.as_str()) {
            out.released.insert(p.component.clone());
        }
    }

    for p in &pods {
        let planned = if p.gated {
            slot.get(p.name.as_str()).cloned()
        } else {
            p.assigned().cloned().or_else(|| p.bound.clone())
        };
        out.pods.push(PodRecord {
            pod: p.name.clone(),
            component: p.component.clone(),
            planned,
            node: p.bound.clone(),
            gated: p.gated && !released_now.contains(p.name.as_str()),
        });
    }
    out
}

/// Takes one slot on `node`; a node with none left leaves the map (so that a search for a free
/// slot does not walk the full ones again).
fn take_slot(nodes: &mut BTreeMap<String, u32>, node: &str) {
    if let Some(k) = nodes.get_mut(node) {
        *k = k.saturating_sub(1);
        if *k == 0 {
            nodes.remove(node);
        }
    }
}

/// `b-0×1, b-1×2`.
pub fn fmt_nodes(m: Option<&BTreeMap<String, u32>>) -> String {
    m.map(|m| {
        m.iter()
            .filter(|(_, k)| **k > 0)
            .map(|(n, k)| format!("{n}×{k}"))
            .collect::<Vec<_>>()
            .join(", ")
    })
    .unwrap_or_default()
}

#[cfg(test)]
mod tests;
