//! The controller's per-pod placement pass for one dispatched job: reads its pods on the member,
//! asks [`crate::placement::step`] which pods get which planned node and when the gang may go,
//! queues the releases (carried out by `observe` with every job's), records the per-pod placement in the QueuedJob status, reports pods
//! found off their plan (Event + `muster_placement_mismatches_total`), and notices a member that
//! drops muster's gate. Also the member's placement mode (gates or pinned) and why.
//! What a pass reads of a job and what the step finds are kept ([`PlaceMemo`]) and reused by
//! the next pass while none of it changed: the pass runs for every placed job several times a
//! second, and most of them have not moved since the last.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use kube::ResourceExt;
use kube::api::DynamicObject;
use serde_json::Value;

use super::crd::PodPlacement;
use super::ctx::{Core, Ctx};
use super::gates;
use super::jobs::HubJobs;
use super::membership::Fleet;
use super::writes::Write;
use crate::placement::{self, GATE};
use crate::scheduler::Plan;

/// Pods listed in a QueuedJob's status at most (the counts stay exact beyond that).
const MAX_LISTED: usize = 500;

/// What the pass found, for the job's reason.
#[derive(Default)]
pub(super) struct Placed {
    /// Why gated pods wait (the first held pod's reason, with how many are held).
    pub held: Option<String>,
    /// The first released pod still Pending, its planned node and the member scheduler's words.
    pub pending: Option<String>,
}

/// What one placement pass read of a job (its copy and pods as the member's stores hold them,
/// its spec, its plan, the components released before) and what it found from them. The step
/// is a pure function of these, and a store keeps the same `Arc` for an object until a watch
/// event replaces it; the memo holds those `Arc`s, so an equal pointer is the same object.
pub(super) struct PlaceMemo {
    copy: Arc<DynamicObject>,
    pods: Vec<Arc<Pod>>,
    spec: String,
    plan: Plan,
    released: BTreeSet<String>,
    gated_copy: BTreeSet<String>,
    seen: Vec<placement::PodSeen>,
    step: placement::Step,
}

impl PlaceMemo {
    /// Whether this memo was made from exactly these inputs.
    fn made_from(
        &self,
        copy: &Arc<DynamicObject>,
        pods: &[&Arc<Pod>],
        spec: &str,
        plan: &Plan,
        released: &BTreeSet<String>,
    ) -> bool {
        Arc::ptr_eq(&self.copy, copy)
            && self.pods.len() == pods.len()
            && self.pods.iter().zip(pods).all(|(a, b)| Arc::ptr_eq(a, b))
            && self.spec == spec
            && self.plan == *plan
            && self.released == *released
    }
}

/// The components of `w` whose pod template in `copy` carries muster's scheduling gate.
fn gated_in(w: &crate::workload::Workload, copy: &Value) -> BTreeSet<String> {
    w.components
        .iter()
        .filter(|c| {
            c.template_pointer.as_ref().is_some_and(|tp| {
                copy.pointer(&format!("{tp}/spec/schedulingGates"))
                    .and_then(Value::as_array)
                    .is_some_and(|g| {
                        g.iter()
                            .any(|g| g.get("name").and_then(Value::as_str) == Some(GATE))
                    })
            })
        })
        .map(|c| c.name.clone())
        .collect()
}

/// The placement step for the job, and what it read: `(gated components, pods seen, step)`.
fn step_for(
    w: &crate::workload::Workload,
    copy: &Value,
    pods: &[&Arc<Pod>],
    plan: &Plan,
    released: &BTreeSet<String>,
) -> (BTreeSet<String>, Vec<placement::PodSeen>, placement::Step) {
    // Components whose pods muster can see and gate (their templates carry its labels).
    let managed: BTreeSet<String> = w
        .components
        .iter()
        .filter(|c| c.template_pointer.is_some())
        .map(|c| c.name.clone())
        .collect();
    let gated_copy = gated_in(w, copy);
    let plan: Plan = plan
        .iter()
        .filter(|(c, _)| managed.contains(*c))
        .map(|(c, n)| (c.clone(), n.clone()))
        .collect();
    let staged = gates::staged(w);
    let seen: Vec<placement::PodSeen> = pods.iter().map(|p| gates::seen(p)).collect();
    let pinned: BTreeSet<String> = managed.difference(&gated_copy).cloned().collect();
    let step = placement::step(&plan, &staged, &pinned, &seen, released);
    (gated_copy, seen, step)
}

/// The placement step for a job: the last pass's memo when it was made from exactly these
/// inputs (held to the step made afresh in debug builds), else a new one; and whether it was
/// reused.
fn findings(
    last: Option<PlaceMemo>,
    (w, spec, plan): (&crate::workload::Workload, &str, Plan),
    (copy, pods, released): (&Arc<DynamicObject>, &[&Arc<Pod>], &BTreeSet<String>),
) -> (PlaceMemo, bool) {
    match last {
        Some(memo) if memo.made_from(copy, pods, spec, &plan, released) => {
            debug_assert!(
                step_for(w, &copy.data, pods, &plan, released)
                    == (
                        memo.gated_copy.clone(),
                        memo.seen.clone(),
                        memo.step.clone()
                    ),
                "a placement memo was reused though the step made afresh differs"
            );
            (memo, true)
        }
        _ => {
            let (gated_copy, seen, step) = step_for(w, &copy.data, pods, &plan, released);
            let memo = PlaceMemo {
                copy: Arc::clone(copy),
                pods: pods.iter().map(|p| Arc::clone(p)).collect(),
                spec: spec.to_string(),
                plan,
                released: released.clone(),
                gated_copy,
                seen,
                step,
            };
            (memo, false)
        }
    }
}

/// One placement pass for the dispatched job `uid` on `cluster` (its copy is `copy`): the
/// releases it decides are added to `writes`, carried out with every other job's.
pub(super) fn place_pods(
    (ctx, core): (&Ctx, &Core),
    fleet: &mut Fleet,
    hubjobs: &mut HubJobs,
    (uid, cluster, copy, pods): (&str, &str, &Arc<DynamicObject>, &[&Arc<Pod>]),
    writes: &mut Vec<Write>,
) -> Placed {
    let mut out = Placed::default();
    let (Some(t), Some(m)) = (hubjobs.jobs.get_mut(uid), fleet.members.get(cluster)) else {
        return out;
    };
    let (Ok(w), Some(plan)) = (t.spec.0.as_ref(), core.book.plan(&core.sched, uid)) else {
        return out;
    };
    let (memo, reused) = findings(
        t.place_memo.take(),
        (w, &t.spec.1, plan),
        (copy, pods, &t.released),
    );
    let t = &*t;
    let (gated_copy, seen, step) = (&memo.gated_copy, &memo.seen, &memo.step);
    let label = t.label();

    // A member that drops the gate: pinned mode from now on (said once, loudly).
    if !fleet.gates_dropped.contains_key(cluster)
        && let Some(p) = seen
            .iter()
            .find(|p| gated_copy.contains(&p.component) && gates::gate_stripped(p))
    {
        let why = format!(
            "pod {} of {label} came up without muster's scheduling gate (an admission webhook or the API server dropped it)",
            p.name
        );
        tracing::warn!(member = %cluster, "{why}; placing by node set from now on");
        fleet.gates_dropped.insert(cluster.to_string(), why.clone());
        hubjobs.event(ctx, uid, true, "GatesDropped", format!("{cluster}: {why}"));
    }

    // Releases: one write per pod, carried out after the pass looked at every job.
    if ctx.leadership.is_leader() && !step.release.is_empty() {
        let by_name = gates::by_name(pods);
        for (pod, node) in &step.release {
            if let Some(p) = by_name.get(pod) {
                writes.push(Write::Release {
                    cluster: cluster.to_string(),
                    label: label.clone(),
                    client: m.client.clone(),
                    pod: Arc::clone(p),
                    node: node.clone(),
                });
            }
        }
    }

    // Pods off their plan: an error, counted and said once per pod.
    let mut new_mismatches = Vec::new();
    if let Some(t) = hubjobs.jobs.get_mut(uid) {
        for mm in &step.mismatches {
            if t.mismatched.insert(mm.pod.clone()) {
                new_mismatches.push(format!("pod {} on {}: {}", mm.pod, mm.node, mm.why));
            }
        }
        // A reused step found what the last pass wrote here (nothing else changes these but
        // a new placement, which drops the memo).
        let placement = || {
            step.pods
                .iter()
                .take(MAX_LISTED)
                .map(|r| PodPlacement {
                    pod: r.pod.clone(),
                    component: r.component.clone(),
                    planned_node: r.planned.clone(),
                    node: r.node.clone(),
                    gated: r.gated,
                })
                .collect::<Vec<_>>()
        };
        if reused {
            debug_assert!(t.released == step.released && t.pod_placement == placement());
        } else {
            t.released = step.released.clone();
            t.pod_placement = placement();
        }
    }
    for note in new_mismatches {
        ctx.metrics.placement_mismatch(cluster);
        tracing::error!(job = %label, member = %cluster, "{note}");
        hubjobs.event(
            ctx,
            uid,
            true,
            "PlacementMismatch",
            format!("{cluster}: {note}"),
        );
    }

    if let Some((pod, why)) = step.held.first() {
        out.held = Some(if step.held.len() == 1 {
            format!("pod {pod} gated: {why}")
        } else {
            format!("{} pods gated ({pod}: {why})", step.held.len())
        });
    }
    let planned_of = |name: &str| {
        step.pods
            .iter()
            .find(|r| r.pod == name)
            .and_then(|r| r.planned.clone())
    };
    out.pending = pods.iter().find_map(|p| {
        let gated = p
            .spec
            .as_ref()
            .and_then(|s| s.scheduling_gates.as_ref())
            .is_some_and(|g| !g.is_empty());
        if gated {
            return None;
        }
        let c = p
            .status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .find(|c| c.type_ == "PodScheduled" && c.status == "False")?;
        let words = c
            .message
            .clone()
            .unwrap_or_else(|| c.reason.clone().unwrap_or_default());
        let name = p.name_any();
        Some(match planned_of(&name) {
            Some(node) => format!("pod {name} (planned on {node}) is not scheduled: {words}"),
            None => format!("pod {name} is not scheduled: {words}"),
        })
    });
    if let Some(t) = hubjobs.jobs.get_mut(uid) {
        t.place_memo = Some(memo);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job() -> (crate::workload::Workload, Arc<DynamicObject>) {
        let obj = json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "j", "namespace": "ns", "uid": "c1"},
            "spec": {"parallelism": 2, "completions": 2, "template": {
                "metadata": {"labels": {"muster.dev/component": "main"}},
                "spec": {"schedulingGates": [{"name": GATE}],
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "i",
                        "resources": {"requests": {"cpu": "1"}}}]}}}
        });
        let w = crate::workload::interpret(&obj).expect("a batch Job reads");
        let copy: DynamicObject = serde_json::from_value(obj).expect("an object");
        (w, Arc::new(copy))
    }

    fn pod(c: &str, name: &str, node: Option<&str>) -> Arc<Pod> {
        let spec = match node {
            Some(n) => json!({"nodeName": n, "containers": []}),
            None => json!({"schedulingGates": [{"name": GATE}], "containers": []}),
        };
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "ns",
                    "labels": {"muster.dev/component": c}},
                "spec": spec,
            }))
            .expect("a pod"),
        )
    }

    fn plan(c: &str, nodes: &[(&str, u32)]) -> Plan {
        let on = nodes.iter().map(|(n, k)| (n.to_string(), *k)).collect();
        BTreeMap::from([(c.to_string(), on)])
    }

    use std::collections::BTreeMap;

    /// The step of a pass is reused only over the very objects it read: a pod a watch event
    /// replaced (even with the same content), another plan or other releases are read afresh.
    #[test]
    fn a_pass_reuses_its_step_only_over_the_objects_it_read() {
        let (w, copy) = job();
        let c = w.components[0].name.clone();
        let (a, b) = (pod(&c, "a", None), pod(&c, "b", None));
        let none = BTreeSet::new();
        let p = plan(&c, &[("n1", 2)]);
        let (m, reused) = findings(None, (&w, "d", p.clone()), (&copy, &[&a, &b], &none));
        assert!(!reused);
        assert_eq!(
            m.step.release.len(),
            2,
            "both gated pods are released to n1"
        );
        let (m, reused) = findings(Some(m), (&w, "d", p.clone()), (&copy, &[&a, &b], &none));
        assert!(reused, "nothing changed: the step is reused");

        // The pod bound by the member's scheduler: a new object in the store.
        let a2 = pod(&c, "a", Some("n1"));
        let (m, reused) = findings(Some(m), (&w, "d", p.clone()), (&copy, &[&a2, &b], &none));
        assert!(!reused, "a replaced pod is read again");
        assert_eq!(m.step.release.len(), 1, "only b is left to release");
        assert_eq!(m.seen[0].bound.as_deref(), Some("n1"));

        // The same content in a new object is still read again (the pointer is the identity).
        let a3 = pod(&c, "a", Some("n1"));
        let (m, reused) = findings(Some(m), (&w, "d", p.clone()), (&copy, &[&a3, &b], &none));
        assert!(!reused);
        // Another plan, another spec, other releases: read again.
        let q = plan(&c, &[("n2", 2)]);
        let (m, reused) = findings(Some(m), (&w, "d", q.clone()), (&copy, &[&a3, &b], &none));
        assert!(!reused);
        assert!(!m.step.mismatches.is_empty(), "a on n1 is off the new plan");
        let (m, reused) = findings(Some(m), (&w, "e", q.clone()), (&copy, &[&a3, &b], &none));
        assert!(!reused);
        let main = BTreeSet::from([c.clone()]);
        let (m, reused) = findings(Some(m), (&w, "e", q.clone()), (&copy, &[&a3, &b], &main));
        assert!(!reused);
        let (_, reused) = findings(Some(m), (&w, "e", q), (&copy, &[&a3, &b], &main));
        assert!(reused);
    }
}
