//! Per-pod placement on a member, the Kubernetes side: reading a job's member pods into the
//! core's [`PodSeen`], which components an operator creates late (per kind), and the one write
//! that assigns a gated pod its planned node and releases it (required node affinity narrowed to
//! that node, muster's scheduling gate removed, guarded by the pod's resourceVersion). Decides
//! nothing: [`crate::placement::step`] does.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use super::members::COMPONENT_LABEL;
use crate::placement::{GATE, PodSeen};
use crate::workload::Workload;

/// The pod as placement sees it.
pub fn seen(p: &Pod) -> PodSeen {
    let spec = p.spec.as_ref();
    let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
    PodSeen {
        name: p.name_any(),
        component: p.labels().get(COMPONENT_LABEL).cloned().unwrap_or_default(),
        gated: spec
            .and_then(|s| s.scheduling_gates.as_ref())
            .is_some_and(|g| g.iter().any(|g| g.name == GATE)),
        allowed: spec.and_then(allowed_nodes),
        bound: spec
            .and_then(|s| s.node_name.clone())
            .filter(|n| !n.is_empty()),
        finished: matches!(phase, Some("Succeeded") | Some("Failed")),
        deleting: p.metadata.deletion_timestamp.is_some(),
    }
}

/// The nodes a pod's required node affinity allows by name: per term, the intersection of its
/// `metadata.name In` field requirements; over terms (ORed), the union. `None` when some term
/// does not restrict names (or there is no required affinity).
fn allowed_nodes(spec: &k8s_openapi::api::core::v1::PodSpec) -> Option<BTreeSet<String>> {
    let terms = &spec
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms;
    let mut all = BTreeSet::new();
    for t in terms {
        let mut here: Option<BTreeSet<String>> = None;
        for r in t.match_fields.iter().flatten() {
            if r.key == "metadata.name" && r.operator == "In" {
                let v: BTreeSet<String> = r.values.iter().flatten().cloned().collect();
                here = Some(match here {
                    Some(h) => h.intersection(&v).cloned().collect(),
                    None => v,
                });
            }
        }
        all.extend(here?);
    }
    Some(all)
}

/// Components an operator creates only after the others run (released as their own gang):
/// an MPIJob's launcher, a RayJob's submitter, a JobSet's (or TrainJob's) replicated job that
/// starts in order or depends on another ([`crate::workload::Component::staged`]).
pub fn staged(w: &Workload) -> BTreeSet<String> {
    w.components
        .iter()
        .filter(|c| c.staged)
        .map(|c| c.name.clone())
        .collect()
}

/// The merge patch that restricts a gated pod to exactly `node` and removes muster's gate, in
/// one write guarded by the pod's resourceVersion. Kubernetes lets a gated pod's required node
/// affinity gain requirements (never lose any), so every existing term gets
/// `metadata.name In [node]` ANDed in; a pod with none gets one term.
pub fn release_patch(pod: &Pod, node: &str) -> Value {
    let spec = pod.spec.as_ref();
    let by_name = json!({"key": "metadata.name", "operator": "In", "values": [node]});
    let terms: Vec<Value> = spec
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(|r| r.node_selector_terms.as_slice())
        .filter(|t| !t.is_empty())
        .map(|terms| {
            terms
                .iter()
                .map(|t| {
                    let mut v = serde_json::to_value(t).unwrap_or_else(|_| json!({}));
                    match v.get_mut("matchFields").and_then(Value::as_array_mut) {
                        Some(f) => f.push(by_name.clone()),
                        None => v["matchFields"] = json!([by_name.clone()]),
                    }
                    v
                })
                .collect()
        })
        .unwrap_or_else(|| vec![json!({"matchFields": [by_name.clone()]})]);
    let gates: Vec<Value> = spec
        .and_then(|s| s.scheduling_gates.as_ref())
        .map(|g| {
            g.iter()
                .filter(|g| g.name != GATE)
                .map(|g| json!({"name": g.name}))
                .collect()
        })
        .unwrap_or_default();
    json!({
        "metadata": {"resourceVersion": pod.resource_version()},
        "spec": {
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": terms
            }}},
            "schedulingGates": if gates.is_empty() { Value::Null } else { Value::Array(gates) },
        }
    })
}

/// Assigns and releases one pod (a conflict means the pod changed: the next pass sees it anew).
pub async fn release(client: &kube::Client, pod: &Pod, node: &str) -> Result<(), kube::Error> {
    let ns = pod.namespace().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    api.patch(
        &pod.name_any(),
        &PatchParams::default(),
        &Patch::Merge(release_patch(pod, node)),
    )
    .await
    .map(|_| ())
}

/// Pods by name, for looking up the ones [`crate::placement::step`] names.
pub fn by_name<'a>(pods: &[&'a Arc<Pod>]) -> HashMap<String, &'a Arc<Pod>> {
    pods.iter().map(|p| (p.name_any(), *p)).collect()
}

/// Whether a pod of a copy dispatched with gates came up without muster's gate and without a
/// node assigned by muster: something on the member (an admission webhook, an old API server)
/// dropped the gate.
pub fn gate_stripped(p: &PodSeen) -> bool {
    !p.gated && !p.finished && p.assigned().is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(v: Value) -> Pod {
        serde_json::from_value(v).expect("pod")
    }

    #[test]
    fn release_narrows_every_term_and_drops_only_our_gate() {
        let p = pod(json!({
            "metadata": {"name": "w-0", "namespace": "ns", "resourceVersion": "42",
                         "labels": {COMPONENT_LABEL: "worker"}},
            "spec": {"containers": [],
                "schedulingGates": [{"name": GATE}, {"name": "other.io/gate"}],
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["b-0"]}]},
                        {"matchExpressions": [{"key": "gpu", "operator": "Exists"}],
                         "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["b-1"]}]}
                    ]}}}}
        }));
        let s = seen(&p);
        assert!(s.gated);
        assert_eq!(s.component, "worker");
        assert_eq!(
            s.allowed,
            Some(["b-0".to_string(), "b-1".to_string()].into())
        );
        assert_eq!(s.assigned(), None);
        let patch = release_patch(&p, "b-1");
        assert_eq!(patch["metadata"]["resourceVersion"], "42");
        assert_eq!(
            patch["spec"]["schedulingGates"],
            json!([{"name": "other.io/gate"}])
        );
        let mut after = serde_json::to_value(&p).expect("json");
        json_patch::merge(&mut after, &patch);
        let after: Pod = serde_json::from_value(after).expect("pod");
        let s = seen(&after);
        assert!(!s.gated);
        assert_eq!(s.assigned(), Some(&"b-1".to_string()));
        let terms = &after
            .spec
            .as_ref()
            .expect("spec")
            .affinity
            .as_ref()
            .expect("aff")
            .node_affinity
            .as_ref()
            .expect("na")
            .required_during_scheduling_ignored_during_execution
            .as_ref()
            .expect("req")
            .node_selector_terms;
        assert_eq!(
            terms.len(),
            2,
            "no term added or removed (Kubernetes forbids it)"
        );
        assert_eq!(terms[1].match_expressions.as_ref().map(Vec::len), Some(1));
    }

    #[test]
    fn a_pod_without_affinity_gets_one_term_and_no_gates_left() {
        let p = pod(json!({"metadata": {"name": "x"},
            "spec": {"containers": [], "schedulingGates": [{"name": GATE}]}}));
        assert_eq!(seen(&p).allowed, None);
        let patch = release_patch(&p, "n1");
        assert_eq!(patch["spec"]["schedulingGates"], Value::Null);
        assert_eq!(
            patch["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                ["nodeSelectorTerms"],
            json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}])
        );
    }

    #[test]
    fn a_stripped_gate_is_told_from_a_release() {
        let p = pod(json!({"metadata": {"name": "x"}, "spec": {"containers": []}}));
        assert!(gate_stripped(&seen(&p)));
        let released = pod(json!({"metadata": {"name": "x"}, "spec": {"containers": [],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}}}}));
        assert!(!gate_stripped(&seen(&released)));
    }
}
