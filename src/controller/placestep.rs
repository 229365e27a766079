//! The per-pod placement step of one dispatched job as the controller makes it: what it reads
//! of the job (the copy's gated templates, its pods, the plan, the components released) handed
//! to [`crate::placement::step`], and the memo ([`PlaceMemo`]) that lets the next pass reuse
//! the step while none of it changed: the placement pass (`placing`) runs for every placed job
//! several times a second, and most of them have not moved since the last. Decides nothing
//! itself; writes nothing.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::api::DynamicObject;
use serde_json::Value;

use super::gates;
use crate::placement::{self, GATE};
use crate::scheduler::Plan;

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
    /// The components whose pod template in the copy carries muster's gate.
    pub gated_copy: BTreeSet<String>,
    /// The pods as the step read them.
    pub seen: Vec<placement::PodSeen>,
    pub step: placement::Step,
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
pub(super) fn findings(
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
