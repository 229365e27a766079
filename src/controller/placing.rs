//! The controller's per-pod placement pass for one dispatched job: reads its pods on the member,
//! asks [`crate::placement::step`] which pods get which planned node and when the gang may go,
//! queues the releases (carried out by `observe` with every job's), records the per-pod placement in the QueuedJob status, reports pods
//! found off their plan (Event + `muster_placement_mismatches_total`), and notices a member that
//! drops muster's gate. Also the member's placement mode (gates or pinned) and why.
//! The step itself, and the memo that lets the next pass reuse it, are `placestep`'s.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use kube::ResourceExt;
use kube::api::DynamicObject;

use super::crd::PodPlacement;
use super::ctx::{Core, Ctx};
use super::gates;
use super::jobs::HubJobs;
use super::membership::Fleet;
use super::placestep::findings;
use super::writes::Write;

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
