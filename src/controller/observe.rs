//! Observation: what each member says of each followed job, as the lifecycle's `Seen`. Copies
//! and pods are indexed once per pass (not searched per job). A copy counts only if it is
//! muster's (its origin label and its admission annotation), of the job's kind, namespace and
//! name, with the job's UID label;
//! pods only in the job's namespace; and the lifecycle then trusts only the copy whose UID it
//! recorded. For placed jobs this is also where pods are released onto their planned nodes, the
//! reservation follows where the pods really are, and the member's job status is copied to the
//! hub job; the writes this asks for (releases, hub statuses) are carried out off the loop
//! (`writes`) once the pass has decided and started its creates. `step_all` runs the lifecycle book's pass over it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::DynamicObject;
use serde_json::json;

use super::clock::now_ms;
use super::crd::PodCounts;
use super::ctx::{Core, Ctx};
use super::jobs::HubJobs;
use super::jobs::Job;
use super::members::{COMPONENT_LABEL, JOB_UID_LABEL, ORIGIN_LABEL};
use super::membership::Fleet;
use super::status;
use super::writes::Write;
use crate::lifecycle::{Copy, Intent, Member, Ms, Record, Seen};
use crate::scheduler::Plan;
use crate::workload::JobKind;

/// Whether `pod`'s controller is an object of the copy's `kind` other than the copy `copy_uid`
/// (an earlier copy of the same job, deleted, whose pods are still there).
fn of_another_copy(pod: &Pod, kind: &str, copy_uid: &str) -> bool {
    pod.owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && o.kind == kind && o.uid != copy_uid)
}

/// Whether `copy` was made by muster for the admission at `admitted_at`: it carries muster's
/// admission annotation naming that admission (with none asked about, on a member the job left,
/// naming any). An object without it was not made by muster, whatever its labels say: it is
/// never taken for the job's copy (not adopted, not followed, not deleted as an old copy).
fn made_for_admission(copy: &DynamicObject, admitted_at: Option<Ms>) -> bool {
    let made_for = copy
        .annotations()
        .get(super::dispatch::ADMISSION_ANNOTATION)
        .and_then(|a| a.parse::<Ms>().ok());
    match (made_for, admitted_at) {
        (Some(m), Some(a)) => m == a,
        (Some(_), None) => true,
        (None, _) => false,
    }
}

/// One member in this pass.
pub(super) enum MemberView {
    /// Connected and in sync: muster's copies (by kind and hub job UID) and pods (by UID), and
    /// the resourceVersion each kind's watch had reached when its copies were read.
    Answering {
        copies: HashMap<(JobKind, String), Arc<DynamicObject>>,
        pods: HashMap<String, Vec<Arc<Pod>>>,
        versions: HashMap<JobKind, u64>,
    },
    /// Not answering, never connected, or removed.
    Not(Member),
}

fn running(p: &Pod) -> bool {
    p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

/// Every member in this pass.
#[derive(Default)]
pub(super) struct View {
    pub now: Ms,
    pub members: BTreeMap<String, MemberView>,
}

impl View {
    fn member(&self, cluster: &str) -> &MemberView {
        static REMOVED: MemberView = MemberView::Not(Member::Removed);
        self.members.get(cluster).unwrap_or(&REMOVED)
    }

    /// The job's copy and pods on an answering member.
    fn copy_and_pods<'a>(
        &'a self,
        cluster: &str,
        uid: &str,
        j: &Job,
    ) -> Option<(&'a Arc<DynamicObject>, Vec<&'a Arc<Pod>>)> {
        let MemberView::Answering { copies, pods, .. } = self.member(cluster) else {
            return None;
        };
        let copy = copies.get(&(j.kind, uid.to_string()))?;
        if copy.metadata.namespace.as_deref() != Some(j.namespace.as_str())
            || super::jobs::name_of(&copy.metadata) != j.name
        {
            return None;
        }
        // Not the pods of an earlier copy of the job that are still there (its copy deleted,
        // its pods not yet collected): those whose controller is another object of the copy's
        // kind. (Pods an operator makes through objects of its own, as JobSet's and KubeRay's,
        // carry no such owner and are all kept.)
        let copy_uid = copy.metadata.uid.as_deref().unwrap_or("");
        let earlier = |p: &Pod| of_another_copy(p, j.kind.as_str(), copy_uid);
        let pods = pods
            .get(uid)
            .map(|v| {
                v.iter()
                    .filter(|p| p.metadata.namespace.as_deref() == Some(j.namespace.as_str()))
                    .filter(|p| !earlier(p))
                    .collect()
            })
            .unwrap_or_default();
        Some((copy, pods))
    }

    /// A member as the job `uid` sees it.
    /// `admitted_at`: the admission a copy there must have been made for (a copy made for an
    /// earlier one is not this admission's: it is deleted before this one's is made).
    fn seen_on(
        &self,
        cluster: &str,
        uid: &str,
        j: Option<&Job>,
        r: &Record,
        admitted_at: Option<Ms>,
    ) -> Member {
        match self.member(cluster) {
            MemberView::Not(m) => m.clone(),
            // A deleted job known only from its record (restored after a restart): any
            // copy of it there, or any pod of it still running, is a copy not yet gone.
            MemberView::Answering { copies, pods, .. } if j.is_none() => {
                let live_pods = pods.get(uid).map_or(0, |v| {
                    v.iter()
                        .filter(|p| p.metadata.deletion_timestamp.is_none() || running(p))
                        .count() as u32
                });
                let there = copies.keys().any(|(_, u)| u == uid);
                Member::Answering((there || live_pods > 0).then(|| Copy {
                    uid: String::new(),
                    progress: crate::lifecycle::Progress::Starting {
                        scheduled: 0,
                        running: live_pods,
                    },
                    live_pods,
                    expected: 0,
                    pods_done: false,
                    waiting: None,
                }))
            }
            MemberView::Answering { .. } => {
                let copy = j.and_then(|j| {
                    let (copy, pods) = self.copy_and_pods(cluster, uid, j)?;
                    if !made_for_admission(copy, admitted_at) {
                        return None;
                    }
                    let expected = r.expected_pods(&j.spec);
                    let progress = status::observe(j.kind, &copy.data, &pods, expected);
                    let pods_done = status::pods_done(j.kind, &copy.data, &pods);
                    let live_pods = pods.iter().filter(|p| running(p)).count() as u32;
                    Some(Copy {
                        uid: copy.uid().unwrap_or_default(),
                        progress,
                        live_pods,
                        expected,
                        pods_done,
                        waiting: j.waiting.clone(),
                    })
                });
                Member::Answering(copy)
            }
        }
    }

    /// What was observed for the job `uid` whose record is `r`.
    pub fn seen(&self, uid: &str, r: &Record, j: Option<&Job>) -> Seen {
        Seen {
            now: self.now,
            spec: j.map(|j| j.spec.1.clone()).unwrap_or_default(),
            generation: j.map(|j| j.generation),
            hub: None,
            here: r
                .cluster
                .as_deref()
                .map(|c| self.seen_on(c, uid, j, r, r.admitted_at)),
            orphans: r
                .orphans
                .keys()
                .map(|c| (c.clone(), self.seen_on(c, uid, j, r, None)))
                .collect(),
            created: None,
            refused: None,
            versions: r
                .members()
                .filter_map(|c| Some((c.clone(), self.version_on(c, j)?)))
                .collect(),
        }
    }

    /// How far the view of `cluster` has reached for the job's kind (for a job known only from
    /// its record, of any kind: the least of them).
    fn version_on(&self, cluster: &str, j: Option<&Job>) -> Option<u64> {
        let MemberView::Answering { versions, .. } = self.member(cluster) else {
            return None;
        };
        match j {
            Some(j) => versions.get(&j.kind).copied(),
            None => versions.values().min().copied(),
        }
    }
}

/// Every member now, and for each followed job placed on an answering member: its pods
/// placed (the releases among the writes returned), its reservation where its pods are, its
/// status copied to the hub (among the writes too).
pub(super) fn observe(
    ctx: &Ctx,
    core: &mut Core,
    fleet: &mut Fleet,
    hubjobs: &mut HubJobs,
) -> (View, Vec<Write>) {
    let now = now_ms();
    let mut view = View {
        now,
        members: BTreeMap::new(),
    };
    let start = now.saturating_sub(ctx.epoch.elapsed().as_millis() as u64);
    for mc in ctx.stores.members.state() {
        let name = mc.name_any();
        let v = match fleet.members.get(&name) {
            Some(m) if m.synced() && m.health.answering() => {
                let mut copies = HashMap::new();
                let mut versions = HashMap::new();
                for (&kind, store) in &m.jobs {
                    // Before the state: it shows every change up to this version.
                    versions.insert(kind, store.version());
                    for o in store.state() {
                        let labels = o.labels();
                        if labels.get(ORIGIN_LABEL) != Some(&ctx.opts.origin) {
                            continue;
                        }
                        if let Some(uid) = labels.get(JOB_UID_LABEL) {
                            copies.insert((kind, uid.clone()), o);
                        }
                    }
                }
                let mut pods: HashMap<String, Vec<Arc<Pod>>> = HashMap::new();
                for p in m.pods.state() {
                    if let Some(uid) = p.labels().get(JOB_UID_LABEL) {
                        pods.entry(uid.clone()).or_default().push(p.clone());
                    }
                }
                // Whether its operators act on muster's copies.
                for ((kind, uid), o) in &copies {
                    let n = pods.get(uid).map_or(0, Vec::len);
                    if fleet.operators.observe(&name, *kind, o, n, now) {
                        ctx.wake.notify_one();
                    }
                }
                MemberView::Answering {
                    copies,
                    pods,
                    versions,
                }
            }
            Some(m) if !m.health.answering() => {
                let silent = m.health.silent_for().unwrap_or_default().as_millis() as u64;
                MemberView::Not(Member::Silent {
                    since: now.saturating_sub(silent),
                })
            }
            // Connected, its watches not in sync yet: silent since it connected.
            Some(m) => MemberView::Not(Member::Silent {
                since: now.saturating_sub(m.connected_at.elapsed().as_millis() as u64),
            }),
            _ => MemberView::Not(Member::Unconnected {
                since: fleet.unconnected_since.get(&name).copied().unwrap_or(start),
            }),
        };
        view.members.insert(name, v);
    }
    let placed: Vec<(String, String)> = core
        .book
        .iter()
        .filter(|(_, e)| e.record.holds() || e.record.phase.terminal())
        .filter_map(|(u, e)| Some((u.clone(), e.record.cluster.clone()?)))
        .collect();
    let mut writes = Vec::new();
    for (uid, cluster) in placed {
        follow_copy(
            (ctx, core),
            fleet,
            hubjobs,
            (&view, &uid, &cluster),
            &mut writes,
        );
    }
    (view, writes)
}

/// One placed job's copy on its answering member: what it needs written goes to `writes`.
fn follow_copy(
    (ctx, core): (&Ctx, &mut Core),
    fleet: &mut Fleet,
    hubjobs: &mut HubJobs,
    (view, uid, cluster): (&View, &str, &str),
    writes: &mut Vec<Write>,
) {
    let Some(j) = hubjobs.jobs.get(uid) else {
        return;
    };
    let Some((copy, pods)) = view.copy_and_pods(cluster, uid, j) else {
        return;
    };
    // Only the copy this record made: while a job is admitted again (or its record names
    // another copy), what is there is an earlier copy on its way out.
    let trusted = core.book.get(uid).is_some_and(|e| {
        made_for_admission(copy, e.record.admitted_at)
            && e.record.phase != crate::lifecycle::Phase::Admitted
            && e.record
                .copy_uid
                .as_ref()
                .is_none_or(|u| copy.uid().as_ref() == Some(u))
    });
    if !trusted {
        return;
    }
    let expected = core
        .book
        .get(uid)
        .map_or(0, |e| e.record.expected_pods(&j.spec));
    let kind = j.kind;
    let holds = core.book.get(uid).is_some_and(|e| e.record.holds());
    let tally = status::tally(&pods);
    if holds {
        // Once every pod is bound, the reservation becomes where the pods really are.
        if expected > 0
            && tally.scheduled == expected
            && let Some(id) = core.book.get(uid).and_then(|e| e.id)
        {
            let mut plan: Plan = BTreeMap::new();
            for p in &pods {
                let comp = p.labels().get(COMPONENT_LABEL).cloned().unwrap_or_default();
                if let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.clone()) {
                    *plan.entry(comp).or_default().entry(node).or_insert(0) += 1;
                }
            }
            core.sched.rebind(id, &plan);
        }
        let placed = super::placing::place_pods(
            (ctx, core),
            fleet,
            hubjobs,
            (uid, cluster, copy, &pods),
            writes,
        );
        // Pods missing: what the member refused, if it said (a quota, an admission webhook).
        let refused = (tally.running + tally.waiting + tally.succeeded < expected)
            .then(|| fleet.members.get(cluster)?.refusal(copy.as_ref()))
            .flatten()
            .map(|r| format!("{cluster} refuses: {r}"));
        // Or its operator there does not act at all.
        let refused = refused.or_else(|| {
            fleet
                .operators
                .reason(cluster, kind)
                .filter(|_| tally.running + tally.waiting + tally.succeeded == 0)
                .map(str::to_string)
        });
        if let Some(j) = hubjobs.jobs.get_mut(uid) {
            let waiting = placed.pending.or(placed.held);
            j.waiting = match (refused, waiting) {
                (Some(r), Some(w)) => Some(format!("{r}; {w}")),
                (r, w) => r.or(w),
            };
            j.pods = Some(PodCounts {
                expected,
                scheduled: tally.scheduled,
                running: tally.running,
            });
        }
    } else if let Some(j) = hubjobs.jobs.get_mut(uid) {
        // Placed no more (its pods done, it ended): the objects its last step read go.
        j.place_memo = None;
    }
    // The member's job status, copied to the hub job.
    let member_status = copy.data.get("status");
    let record = core.book.get(uid).map(|e| &e.record);
    let ended =
        status::outcome(kind, &copy.data).is_some() || record.is_none_or(|r| r.phase.terminal());
    let Some(j) = hubjobs.jobs.get_mut(uid) else {
        return;
    };
    // Every pod done, as the record says or, in the pass before it says so, as the member
    // or the pods do: the member's status in between then waits for its word on the outcome.
    // Read once per job, until it is seen.
    if !ended
        && j.ending_since.is_none()
        && (record.is_some_and(|r| r.pods_done) || status::ending(kind, &copy.data, &pods))
    {
        j.ending_since = Some(Instant::now());
    }
    let j = &*j;
    let Some(st) = member_status else { return };
    if !ctx.leadership.is_leader() {
        return;
    }
    let (kind, ns, name) = (j.kind, j.namespace.as_str(), j.name.as_str());
    // The hub job's own status, looked up only when the decision needs it (rarely: most
    // passes find nothing new to copy).
    let hub_status = || {
        ctx.stores
            .job(kind, ns, name)
            .and_then(|o| o.data.get("status").cloned())
    };
    let copied = status::Copied {
        status: j.synced_status.as_ref(),
        since: j.synced_at.map(|at| at.elapsed()),
        ending: j.ending_since.map(|at| at.elapsed()),
        ended,
    };
    let patch = match status::copy_due(copied, hub_status, st) {
        status::StatusCopy::Nothing => return,
        status::StatusCopy::Shown => {
            if let Some(j) = hubjobs.jobs.get_mut(uid) {
                j.synced_status = Some(st.clone());
            }
            return;
        }
        status::StatusCopy::Later(due) => {
            core.wake_at(now_ms() + due.as_millis() as u64);
            return;
        }
        status::StatusCopy::Send(patch) => patch,
    };
    writes.push(Write::HubStatus {
        uid: uid.to_string(),
        label: j.label(),
        kind,
        namespace: ns.to_string(),
        name: name.to_string(),
        patch: json!({"status": patch}),
        status: st.clone(),
    });
}

/// The lifecycle book's pass: every job stepped from the view, one scheduling cycle (when a
/// tree is in force).
pub(super) fn step_all(core: &mut Core, hubjobs: &HubJobs, view: &View) -> Vec<(String, Intent)> {
    let jobs = &hubjobs.jobs;
    let mut spec = |uid: &str| jobs.get(uid).map(|j| j.spec.clone());
    let mut seen = |uid: &str, r: &Record| view.seen(uid, r, jobs.get(uid));
    let admit = core.sched.quota().is_some();
    core.book
        .pass(&mut core.sched, &mut spec, &mut seen, view.now, admit)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(owner_kind: &str, owner_uid: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "ownerReferences": [{
                "apiVersion": "v1", "kind": owner_kind, "name": "j", "uid": owner_uid,
                "controller": true
            }]}
        }))
        .expect("pod")
    }

    /// A member holding `obj` as the copy of hub job `U1` (a PyTorchJob `team-a/t`), the job,
    /// and its record admitted there at 1700.
    fn admitted_with(obj: serde_json::Value) -> (View, Job, Record) {
        let copy: DynamicObject = serde_json::from_value(obj).expect("an object");
        let copies = HashMap::from([((JobKind::PyTorchJob, "U1".to_string()), Arc::new(copy))]);
        let view = View {
            now: 2000,
            members: BTreeMap::from([(
                "member-a".to_string(),
                MemberView::Answering {
                    copies,
                    pods: HashMap::new(),
                    versions: HashMap::from([(JobKind::PyTorchJob, 41), (JobKind::TFJob, 7)]),
                },
            )]),
        };
        let spec = crate::lifecycle::spec_of(Err("not read".into()));
        let job = super::super::jobs::new_job(
            JobKind::PyTorchJob,
            "team-a",
            "t",
            "kubeflow.org/v1".into(),
            1,
            spec.clone(),
            jiff::Timestamp::UNIX_EPOCH,
        );
        let (record, _) = crate::lifecycle::admitted(
            &Record {
                spec: spec.1,
                ..Record::default()
            },
            "member-a",
            Plan::new(),
            1700,
        );
        (view, job, record)
    }

    fn object(annotations: serde_json::Value) -> serde_json::Value {
        json!({
            "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "t", "namespace": "team-a", "uid": "obj-1",
                "labels": {JOB_UID_LABEL: "U1", ORIGIN_LABEL: "hub"},
                "annotations": annotations}
        })
    }

    #[test]
    fn an_object_is_taken_for_the_copy_only_with_this_admissions_annotation() {
        let s = crate::lifecycle::Settings::default();
        // The job's name and labels, no annotation: not the copy, so not adopted (the job
        // goes on creating its own), and not an old copy to delete either.
        let (view, job, r) = admitted_with(object(json!({})));
        let seen = view.seen("U1", &r, Some(&job));
        assert_eq!(seen.here, Some(Member::Answering(None)));
        // The version is the job's kind's watch's (the least of all for a job known only from
        // its record).
        assert_eq!(seen.versions.get("member-a"), Some(&41));
        assert_eq!(view.seen("U1", &r, None).versions.get("member-a"), Some(&7));
        let (n, _) = crate::lifecycle::step(&r, &seen, &s);
        assert_eq!(n.copy_uid, None);
        assert_eq!(n.phase, crate::lifecycle::Phase::Admitted);
        assert!(matches!(
            view.seen_on("member-a", "U1", Some(&job), &r, None),
            Member::Answering(None)
        ));
        // Made for this admission: adopted (its create's answer was lost).
        let (view, job, r) = admitted_with(object(json!({"muster.dev/admission": "1700"})));
        let seen = view.seen("U1", &r, Some(&job));
        let (n, _) = crate::lifecycle::step(&r, &seen, &s);
        assert_eq!(n.copy_uid.as_deref(), Some("obj-1"));
        assert_eq!(n.phase, crate::lifecycle::Phase::Dispatched);
        // Made for another admission: not this one's.
        let (view, job, r) = admitted_with(object(json!({"muster.dev/admission": "1600"})));
        assert_eq!(
            view.seen("U1", &r, Some(&job)).here,
            Some(Member::Answering(None))
        );
    }

    #[test]
    fn pods_of_an_earlier_copy_are_not_this_copys() {
        assert!(of_another_copy(&pod("Job", "old"), "Job", "new"));
        assert!(!of_another_copy(&pod("Job", "new"), "Job", "new"));
        // Made through an object of the operator's own (JobSet's child Jobs): kept.
        assert!(!of_another_copy(&pod("Job", "child"), "JobSet", "new"));
    }
}
