//! The hub jobs reconciler (intake): every job of a covered namespace, or one muster already
//! has a record for, is suspended on the hub (the hub copy never runs), interpreted once per
//! generation, and followed in the lifecycle book from its durable record (its QueuedJob
//! status) or as new. A hub job that is gone is forgotten; its copies are deleted (and its quota
//! stays charged while a member that does not answer may still run one). A QueuedJob deleted
//! by someone is written again from what the controller knows.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::reflector;
use serde_json::Value;

use super::crd::queued_job_name;
use super::crd::{PodCounts, PodPlacement, QueuedJob, QueuedJobState, QueuedJobStatus};
use super::ctx::{Core, Ctx};
use super::judging::Judge;
use super::stores::HubStores;
use super::tree::Tree;
use super::{hubcheck, intake, kinds};
use crate::lifecycle::tidy::{self, Intake, Name};
use crate::lifecycle::{Book, Intent, Phase, REFUSED_BY_HUB, Record, Spec, Transition, spec_of};
use crate::workload::{JobKind, interpret_with};

/// What the controller knows of a followed hub job beyond its lifecycle record.
pub(super) struct Job {
    pub kind: JobKind,
    pub namespace: String,
    pub name: String,
    pub api_version: String,
    /// The generation `spec` was read from (interpreted once per generation).
    pub generation: i64,
    pub spec: Spec,
    /// Its own deadline (`activeDeadlineSeconds`), an upper bound of its run time.
    pub deadline: Option<u64>,
    /// When it last entered its queue (submission or requeue), for the wait-time histogram.
    pub queued_at: jiff::Timestamp,
    /// Its queue and priority, as last known (kept while it is out of the scheduler).
    pub queue: Option<String>,
    pub priority: Option<i32>,
    /// The core's reason when the explanation was last computed, and when; the explanation and
    /// its one-line summary.
    pub explained: Option<(String, Instant)>,
    pub explanation: Option<String>,
    pub summary: Option<String>,
    /// Pods on the member, and each pod's planned and real node.
    pub pods: Option<PodCounts>,
    pub pod_placement: Vec<PodPlacement>,
    /// Why its pods wait, in the member scheduler's words (the last placement pass).
    pub waiting: Option<String>,
    /// Components whose pods were released from muster's scheduling gate in this dispatch.
    pub released: BTreeSet<String>,
    /// Pods already reported as placed where the plan does not put them.
    pub mismatched: BTreeSet<String>,
    /// What the last placement pass read and found (`placing`), reused while nothing it read
    /// has changed.
    pub place_memo: Option<super::placestep::PlaceMemo>,
    /// Hub job status last copied from the member.
    pub synced_status: Option<Value>,
    /// When a member status was last copied to the hub job.
    pub synced_at: Option<Instant>,
    /// When its pods were first seen all done while its member had not yet said it ended.
    pub ending_since: Option<Instant>,
    /// The QueuedJob status last written (None: the QueuedJob may not exist), and when.
    pub written: Option<QueuedJobStatus>,
    pub written_at: Option<Instant>,
    /// The QueuedJob's resourceVersion `written` was read or written at: the precondition of
    /// the next status patch (None: unknown, read first).
    pub version: Option<String>,
    /// The keys of QueuedJob statuses sent since `written` whose outcome is unknown
    /// (`lifecycle::patch::unsure_keys`): the next write covers them.
    pub unsure: Option<Value>,
    /// When the hub's admission last judged its pod templates (`hubcheck`).
    pub judged_at: Option<Instant>,
    /// The hub job is gone (followed until its copies are confirmed gone).
    pub gone: bool,
    /// Read it again at the next intake, though its generation has not moved (the hub's
    /// training runtimes changed, or its hub admission is to be judged again). A placed job
    /// whose copy runs keeps the spec it was admitted with whatever it reads now, as long as
    /// its generation has not moved (the core's rule, `lifecycle::step`).
    pub read_again: bool,
    /// Its Queued, Admitted and Dispatched Events until the QueuedJob status that records them
    /// lands (`events::Held`).
    pub held_event: super::events::Held,
}

impl Job {
    pub fn label(&self) -> String {
        format!("{} {}/{}", self.kind, self.namespace, self.name)
    }

    pub fn object_ref(&self, uid: &str) -> ObjectReference {
        object_ref(
            &self.api_version,
            self.kind,
            &self.namespace,
            &self.name,
            uid,
        )
    }

    /// Publishes what `held_event` gives up, if anything.
    fn publish_held(&self, ctx: &Ctx, uid: &str, held: Option<(Transition, String)>) {
        if let Some((t, note)) = held {
            ctx.publish(&self.object_ref(uid), t.warning(), t.as_str(), note);
        }
    }

    /// A new placement (or none): what was seen of the last one no longer holds.
    pub fn forget_placement(&mut self) {
        self.pods = None;
        self.pod_placement.clear();
        self.released.clear();
        self.mismatched.clear();
        self.place_memo = None;
        self.waiting = None;
        self.ending_since = None;
    }
}

/// The hub jobs as the controller knows them beyond their records.
pub(super) struct HubJobs {
    /// Every followed job.
    pub jobs: HashMap<String, Job>,
    /// Hub jobs muster does not queue (outside the tree), by the generation last tried.
    pub ignored: HashMap<String, i64>,
    /// Hub jobs made again under the name of an earlier job whose QueuedJob is still kept, by
    /// that job's UID (they wait for it to go; said once).
    pub name_waits: HashMap<String, String>,
    pub priorities: std::collections::BTreeMap<String, i32>,
    /// The hub's training runtimes, which TrainJobs are read against.
    pub runtimes: crate::workload::TrainingRuntimes,
    /// When the hub's job kinds were last discovered.
    pub kinds_checked: Instant,
    /// The discovery under way, off the loop (one LIST per kind).
    kinds_asked: Option<tokio::task::JoinHandle<Option<Vec<JobKind>>>>,
    /// The hub's verdicts on pod templates (`judging`).
    pub judge: Judge,
}

impl HubJobs {
    /// An Event on the hub job `uid` (queued, never awaited).
    pub fn event(&self, ctx: &Ctx, uid: &str, warning: bool, reason: &str, note: String) {
        if let Some(t) = self.jobs.get(uid) {
            ctx.publish(&t.object_ref(uid), warning, reason, note);
        }
    }

    /// Publishes the Events `uid` held for its status, now that a status saying `state` has
    /// landed (`events::Held`).
    pub fn status_landed(&mut self, ctx: &Ctx, uid: &str, state: QueuedJobState) {
        if let Some(j) = self.jobs.get_mut(uid) {
            let held = j.held_event.landed(state);
            j.publish_held(ctx, uid, held);
        }
    }

    /// Publishes every Event `uid` holds: the status they wait for cannot land now (its write
    /// failed, or the QueuedJob's name is held by an earlier job).
    pub fn release_event(&mut self, ctx: &Ctx, uid: &str) {
        if let Some(j) = self.jobs.get_mut(uid) {
            let held = j.held_event.release();
            j.publish_held(ctx, uid, held);
        }
    }

    /// On the way out: every Event still held for its status (a report the user would
    /// otherwise never get; the next leader does not know it was held).
    pub fn release_events(&mut self, ctx: &Ctx) {
        for (uid, j) in &mut self.jobs {
            let held = j.held_event.release();
            j.publish_held(ctx, uid, held);
        }
    }

    pub fn new() -> HubJobs {
        HubJobs {
            jobs: HashMap::new(),
            ignored: HashMap::new(),
            name_waits: HashMap::new(),
            priorities: Default::default(),
            runtimes: Default::default(),
            kinds_checked: Instant::now(),
            kinds_asked: None,
            judge: Default::default(),
        }
    }
}

impl HubJobs {
    /// Says once, on the hub job and in the log, that it waits for `earlier`'s record to go.
    fn wait_for_name(
        &mut self,
        ctx: &Ctx,
        (uid, kind, obj): (&str, JobKind, &DynamicObject),
        earlier: String,
    ) {
        if self.name_waits.get(uid) == Some(&earlier) {
            return;
        }
        let (ns, name) = (obj.namespace().unwrap_or_default(), obj.name_any());
        let note = format!(
            "waits for the QueuedJob {} of an earlier {kind} of this name (uid {earlier}) to go: muster keeps it until that job's copies are confirmed gone",
            queued_job_name(kind, &name)
        );
        tracing::info!(job = %format!("{kind} {ns}/{name}"), "{note}");
        let oref = object_ref(kind.api_version(), kind, &ns, &name, uid);
        ctx.events.send(oref, false, "WaitingForName", &note);
        self.name_waits.insert(uid.to_string(), earlier);
    }

    /// The hub's verdicts that landed since the last pass: the waiting jobs of a namespace
    /// whose verdicts changed are read (and judged) again.
    pub(super) fn verdicts_landed(&mut self, core: &mut Core) {
        for ns in self.judge.landed(core) {
            self.reread_waiting(&core.book, &ns);
        }
    }

    /// The namespace's jobs that are not placed are read (and judged) again: queued or
    /// rejected ones, whose verdict may have changed. Placed jobs run on as admitted, as pods
    /// do when a namespace's policy changes.
    fn reread_waiting(&mut self, book: &Book, namespace: &str) {
        for (uid, j) in self.jobs.iter_mut() {
            if j.namespace == namespace && waiting(book, uid) {
                j.read_again = true;
            }
        }
    }

    /// Waiting jobs whose judgement is due again (`hubcheck::REFUSED_RECHECK` after a refusal,
    /// `hubcheck::RECHECK` otherwise) are read again: a PriorityClass created, a policy
    /// removed or added since, and the hub's verdict changes.
    fn hub_judgements_due(&mut self, book: &Book) {
        let now = Instant::now();
        for (uid, j) in self.jobs.iter_mut() {
            let refused = book
                .get(uid)
                .is_some_and(|e| e.record.reason.starts_with(REFUSED_BY_HUB));
            let every = if refused {
                hubcheck::REFUSED_RECHECK
            } else {
                hubcheck::RECHECK
            };
            if waiting(book, uid) && j.judged_at.is_some_and(|t| now.duration_since(t) >= every) {
                j.read_again = true;
            }
        }
    }

    /// Intake: follows the hub jobs muster is responsible for (as `lifecycle::tidy::intake`
    /// says). Returns the followed jobs it no longer saw (gone: `tidy` stops following them).
    pub(super) async fn sync_jobs(
        &mut self,
        ctx: &Ctx,
        core: &mut Core,
        tree: &Tree,
    ) -> (Vec<String>, Vec<(String, Intent)>) {
        if ctx.opts.hub_pod_admission {
            for ns in self.judge.policies_changed(ctx) {
                self.reread_waiting(&core.book, &ns);
            }
            self.hub_judgements_due(&core.book);
        }
        // Every hub job is read on every pass: nothing here allocates per job unless the job is
        // new or changed.
        let mut unlisted: Vec<String> = Vec::new();
        let mut objs: Vec<(JobKind, Arc<DynamicObject>)> = Vec::new();
        for (&kind, store) in &ctx.stores.jobs {
            // A kind whose watch has not listed yet (its CRD just installed) is not judged.
            if !store.is_ready() {
                unlisted.extend(
                    self.jobs
                        .iter()
                        .filter(|(_, j)| j.kind == kind)
                        .map(|(u, _)| u.clone()),
                );
                continue;
            }
            for o in store.state() {
                objs.push((kind, o));
            }
        }
        let mut seen: HashSet<&str> = unlisted.iter().map(String::as_str).collect();
        let mut exists = seen.clone();
        // Oldest first: a rebuilt queue keeps submission order.
        objs.sort_by(|(_, a), (_, b)| submission_order(a).cmp(&submission_order(b)));
        let mut intake_events: Vec<(String, Intent)> = Vec::new();
        for (kind, obj) in &objs {
            let (kind, obj) = (*kind, obj.as_ref());
            let Some(uid) = obj.metadata.uid.as_deref() else {
                continue;
            };
            exists.insert(uid);
            if obj.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let ns = obj.metadata.namespace.as_deref().unwrap_or("");
            let name = name_of(&obj.metadata);
            let generation = obj.metadata.generation.unwrap_or(0);
            let followed = core.book.get(uid).is_some();
            if !followed && self.ignored.get(uid) == Some(&generation) {
                continue;
            }
            let recorded = if followed {
                None
            } else {
                recorded(&ctx.stores, (ns, kind, name, uid))
            };
            // Without a tree covering it, only a job muster already has a record for is
            // followed (its copy may run); nothing else is touched. A job made again under
            // the name of an earlier one muster keeps waits for it (the core's rule).
            let intake = if followed {
                Intake::Track
            } else {
                let holder = name_holder(&ctx.stores, (ns, kind, name, uid));
                let held = match (&recorded, &holder) {
                    (Some(_), _) => Name::Ours,
                    (None, Some((other, terminating, record))) => Name::Earlier {
                        uid: other,
                        terminating: *terminating,
                        record: record.as_ref(),
                    },
                    (None, None) => Name::Free,
                };
                tidy::intake(
                    &core.book,
                    (uid, held),
                    tree.covers(ns),
                    super::clock::now_ms(),
                )
            };
            if intake == Intake::Leave {
                continue;
            }
            seen.insert(uid);
            // The hub copy never runs: suspend what the webhook missed (or a user un-suspended).
            if !kind.is_suspended(&obj.data) {
                suspend(ctx, kind, ns, name).await;
            }
            if let Intake::WaitForName { earlier } = intake {
                self.wait_for_name(ctx, (uid, kind, obj), earlier);
                continue;
            }
            if !followed {
                self.name_waits.remove(uid);
            }
            let fresh = self
                .jobs
                .get(uid)
                .is_none_or(|j| j.generation != generation || j.read_again);
            if fresh {
                let (spec, deadline) = match serde_json::to_value(obj) {
                    Ok(mut v) => {
                        // Items of a list (a watch's first listing, after every restart) carry
                        // no apiVersion and kind for built-in kinds such as batch Jobs.
                        typed(&mut v, kind);
                        let deadline = crate::runtime::deadline(&v);
                        let read = interpret_with(&v, &self.runtimes).map_err(|e| e.to_string());
                        // Not read until the hub has judged every pod template (read again
                        // once its answer lands; a followed job keeps its last spec meanwhile).
                        let Some(read) = self.judge.admission(ctx, ns, &v, read) else {
                            continue;
                        };
                        (spec_of(read), deadline)
                    }
                    Err(e) => (spec_of(Err(e.to_string())), None),
                };
                match self.jobs.get_mut(uid) {
                    Some(j) => {
                        j.generation = generation;
                        j.read_again = false;
                        j.spec = spec;
                        j.deadline = deadline;
                        j.judged_at = Some(Instant::now());
                    }
                    None => {
                        let api_version = obj
                            .types
                            .as_ref()
                            .map(|t| t.api_version.clone())
                            .filter(|v| !v.is_empty())
                            .unwrap_or_else(|| kind.api_version().into());
                        let queued_at = obj
                            .metadata
                            .creation_timestamp
                            .as_ref()
                            .map(|t| t.0)
                            .unwrap_or_else(jiff::Timestamp::now);
                        let mut j =
                            new_job(kind, ns, name, api_version, generation, spec, queued_at);
                        j.deadline = deadline;
                        j.judged_at = Some(Instant::now());
                        self.jobs.insert(uid.to_string(), j);
                    }
                }
            }
            if followed {
                continue;
            }
            let submitted = obj
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.as_second().max(0) as u64)
                .unwrap_or(0);
            let Some(job) = self.jobs.get_mut(uid) else {
                continue;
            };
            let durable = recorded
                .as_ref()
                .map(|st| crate::lifecycle::wire::from_status(st, &job.spec.1));
            let label = job.label();
            match core.book.track(
                &mut core.sched,
                uid,
                label,
                &job.spec,
                Some(job.generation),
                submitted,
                durable,
            ) {
                None => {
                    self.jobs.remove(uid);
                    self.ignored.insert(uid.to_string(), generation);
                }
                Some(intents) => {
                    if let Some(st) = recorded {
                        tracing::info!(job = %job.label(), state = st.state.as_str(), cluster = ?st.cluster, "following it again from its record");
                        // Which components an earlier run released from the gate.
                        job.released = st
                            .pod_placement
                            .iter()
                            .filter(|p| !p.gated)
                            .map(|p| p.component.clone())
                            .collect();
                        job.pod_placement = st.pod_placement.clone();
                        job.queue = st.queue.clone();
                        job.priority = st.priority;
                        job.written = Some(st);
                        job.written_at = Some(Instant::now());
                    }
                    intake_events.extend(intents.into_iter().map(|i| (uid.to_string(), i)));
                }
            }
        }
        self.ignored.retain(|u, _| exists.contains(u.as_str()));
        self.name_waits.retain(|u, _| exists.contains(u.as_str()));
        let gone = core
            .book
            .iter()
            .filter(|(u, _)| !seen.contains(u.as_str()))
            .map(|(u, _)| u.clone())
            .collect();
        (gone, intake_events)
    }

    /// Job kinds whose CRD was installed on the hub after the start are watched from then on
    /// (checked every 30 s): their jobs are suspended by the webhook and must not wait forever.
    /// The discovery (a LIST per kind) runs off the loop and is read by the pass after it
    /// lands: awaited in the pass, it held every pass back by 1–2 s every 30 s on a loaded hub.
    pub(super) async fn discover_kinds(&mut self, ctx: &mut Ctx) {
        let served = match self.kinds_asked.take() {
            Some(task) if task.is_finished() => match task.await {
                Ok(Some(k)) => k,
                _ => return,
            },
            Some(task) => {
                self.kinds_asked = Some(task);
                return;
            }
            None => {
                if self.kinds_checked.elapsed() >= Duration::from_secs(30) {
                    self.kinds_checked = Instant::now();
                    let (hub, wake) = (ctx.hub.clone(), ctx.wake.clone());
                    self.kinds_asked = Some(tokio::spawn(async move {
                        let served =
                            tokio::time::timeout(Duration::from_secs(10), kinds::served(&hub))
                                .await;
                        wake.notify_one();
                        served.ok().and_then(Result::ok)
                    }));
                }
                return;
            }
        };
        for kind in served {
            if ctx.stores.jobs.contains_key(&kind) {
                continue;
            }
            tracing::info!(kind = %kind, "a job kind installed on the hub since the start: watching it");
            let ar = kinds::api_resource(kind);
            let api: Api<DynamicObject> = Api::all_with(ctx.hub.clone(), &ar);
            let w = super::members::watch(
                api,
                kube::runtime::watcher::Config::default(),
                ar,
                ctx.wake.clone(),
                &mut ctx.stores._tasks,
            );
            ctx.stores.jobs.insert(kind, w);
        }
        // TrainJob installed since the start: its runtimes too (then every TrainJob is read).
        if ctx.stores.jobs.contains_key(&JobKind::TrainJob) && ctx.stores.runtimes.is_none() {
            let (hub, wake) = (ctx.hub.clone(), ctx.wake.clone());
            match super::runtimes::Watches::start("hub", &hub, &wake, &mut ctx.stores._tasks).await
            {
                Ok(w) => ctx.stores.runtimes = w,
                Err(e) => tracing::warn!(error = %e, "cannot watch the hub's training runtimes"),
            }
        }
    }
}

/// The order intake reads hub jobs in: oldest first, then by namespace and name, borrowed.
fn submission_order(o: &DynamicObject) -> (Option<jiff::Timestamp>, Option<&str>, &str) {
    (
        o.metadata.creation_timestamp.as_ref().map(|t| t.0),
        o.metadata.namespace.as_deref(),
        name_of(&o.metadata),
    )
}

/// An object's name as `ResourceExt::name_any` reads it (its name, else its generateName),
/// borrowed: the pass reads it of every job and copy.
pub(super) fn name_of(m: &kube::api::ObjectMeta) -> &str {
    m.name
        .as_deref()
        .or(m.generate_name.as_deref())
        .unwrap_or("")
}

/// The QueuedJob status recorded for a hub job (what an earlier run decided), by its UID.
fn recorded(
    stores: &HubStores,
    (ns, kind, name, uid): (&str, JobKind, &str, &str),
) -> Option<QueuedJobStatus> {
    let key = reflector::ObjectRef::<QueuedJob>::new(&queued_job_name(kind, name)).within(ns);
    let qj = stores.queued.get(&key)?;
    (qj.spec.job_ref.uid == uid)
        .then(|| qj.status.clone())
        .flatten()
}

/// The job of this kind and name, other than `uid`, whose QueuedJob holds the name (one
/// deleted and made again under its name), whether that QueuedJob is being deleted, and the
/// record it holds.
/// The core decides whether the new job waits for it (`tidy::intake`).
fn name_holder(
    stores: &HubStores,
    (ns, kind, name, uid): (&str, JobKind, &str, &str),
) -> Option<(String, bool, Option<Record>)> {
    let key = reflector::ObjectRef::<QueuedJob>::new(&queued_job_name(kind, name)).within(ns);
    let qj = stores.queued.get(&key)?;
    let other = &qj.spec.job_ref.uid;
    (other != uid).then(|| {
        let record = qj
            .status
            .as_ref()
            .map(|st| crate::lifecycle::wire::from_status(st, ""));
        (
            other.clone(),
            qj.metadata.deletion_timestamp.is_some(),
            record,
        )
    })
}

async fn suspend(ctx: &Ctx, kind: JobKind, ns: &str, name: &str) {
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.hub.clone(), ns, &kinds::api_resource(kind));
    let patch = Patch::Merge(intake::suspend_merge_patch(kind));
    match api.patch(name, &PatchParams::default(), &patch).await {
        Ok(_) => {
            tracing::info!(kind = %kind, job = %format!("{ns}/{name}"), "suspended on the hub")
        }
        Err(e) => {
            tracing::warn!(kind = %kind, job = %format!("{ns}/{name}"), error = %e, "could not suspend")
        }
    }
}

/// Fills in a hub job's `apiVersion` and `kind` when the API left them out.
pub(super) fn typed(v: &mut Value, kind: JobKind) {
    if let Some(o) = v.as_object_mut() {
        if o.get("apiVersion")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            o.insert("apiVersion".into(), Value::from(kind.api_version()));
        }
        if o.get("kind")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            o.insert("kind".into(), Value::from(kind.as_str()));
        }
    }
}

/// The reference to hub job `uid` that its Events name.
fn object_ref(
    api_version: &str,
    kind: JobKind,
    ns: &str,
    name: &str,
    uid: &str,
) -> ObjectReference {
    ObjectReference {
        api_version: Some(api_version.to_string()),
        kind: Some(kind.as_str().to_string()),
        namespace: Some(ns.to_string()),
        name: Some(name.to_string()),
        uid: Some(uid.to_string()),
        ..Default::default()
    }
}

/// Not placed: queued or rejected (or not followed yet), so the hub's verdict on its pod
/// templates still decides whether it may run.
fn waiting(book: &crate::lifecycle::Book, uid: &str) -> bool {
    book.get(uid)
        .is_none_or(|e| matches!(e.record.phase, Phase::Queued | Phase::Rejected))
}

pub(super) fn new_job(
    kind: JobKind,
    ns: &str,
    name: &str,
    api_version: String,
    generation: i64,
    spec: Spec,
    queued_at: jiff::Timestamp,
) -> Job {
    Job {
        kind,
        namespace: ns.to_string(),
        name: name.to_string(),
        api_version,
        generation,
        spec,
        deadline: None,
        queued_at,
        queue: None,
        priority: None,
        explained: None,
        explanation: None,
        summary: None,
        pods: None,
        pod_placement: Vec::new(),
        waiting: None,
        released: BTreeSet::new(),
        mismatched: BTreeSet::new(),
        place_memo: None,
        synced_status: None,
        synced_at: None,
        ending_since: None,
        written: None,
        written_at: None,
        version: None,
        unsure: None,
        judged_at: None,
        gone: false,
        read_again: false,
        held_event: Default::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::interpret;

    /// A batch Job as a list returns it (after a restart): no apiVersion, no kind. It must read
    /// the same as when a watch event brought it, or every running Job would look edited.
    #[test]
    fn a_listed_job_reads_like_a_watched_one() {
        let watched = serde_json::json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "j", "namespace": "ns"},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}]}}}
        });
        let mut listed = watched.clone();
        if let Some(o) = listed.as_object_mut() {
            o.remove("apiVersion");
            o.remove("kind");
        }
        assert!(interpret(&listed).is_err(), "untyped, it does not read");
        typed(&mut listed, JobKind::Job);
        let a = spec_of(interpret(&watched).map_err(|e| e.to_string()));
        let b = spec_of(interpret(&listed).map_err(|e| e.to_string()));
        assert!(b.0.is_ok());
        assert_eq!(a.1, b.1);
    }
}
