//! The writes a pass asks for, carried out off the sync loop so that a pass never waits for an
//! API server: QueuedJob statuses in batches (in each, every record that frees capacity first,
//! and only when all of those are durable the rest; a batch with such records starts only when
//! no other batch is still writing its own, and while a job's record frees capacity but its
//! earlier write is still out only such records go, so an admission never lands before a
//! release decided before it; at most one write per QueuedJob in flight, [`WRITES_IN_FLIGHT`] in
//! all),
//! and the writes observing asks for (pod releases, hub job statuses; at most one per object in
//! flight). Their outcomes come back to the writer ([`Writer::landed`]) and are read at the start
//! of the next pass, which is the first to know them durable. Every write is fenced by
//! leadership and bounded in time.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Map, Value, json};

use super::crd::MANAGER;
use super::crd::{QueuedJob, QueuedJobState, QueuedJobStatus};
use super::ctx::{Core, Ctx, Inbox};
use super::jobs::HubJobs;
use super::leader::{self, Fenced};
use super::{gates, kinds};
use crate::lifecycle::Defect;
use crate::lifecycle::outbox::{self, Batch, Item, Landed, NameHeld};
use crate::lifecycle::patch;
use crate::workload::JobKind;
use k8s_openapi::api::core::v1::Pod;

/// Writes in flight at once: QueuedJob statuses of every batch together, and observed writes.
pub(super) const WRITES_IN_FLIGHT: usize = 32;
/// How long one write may take before it counts as failed.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// A pod released this recently is not released again (the member's watch may not show the
/// release yet).
const RELEASED_FOR: Duration = Duration::from_secs(5);

/// A write that observing a job asks for.
pub(super) enum Write {
    /// Lift muster's scheduling gate from a pod onto its planned node.
    Release {
        cluster: String,
        label: String,
        client: kube::Client,
        pod: Arc<Pod>,
        node: String,
    },
    /// Copy the member's job status to the hub job.
    HubStatus {
        uid: String,
        label: String,
        kind: JobKind,
        namespace: String,
        name: String,
        patch: serde_json::Value,
        status: serde_json::Value,
    },
}

/// One QueuedJob status write, with all it needs, made on the loop and sent off it (the job and
/// its record travel beside it in the outbox's `Item`).
pub(super) struct Put {
    pub status: QueuedJobStatus,
    namespace: String,
    name: String,
    /// The QueuedJob to create first (none is known to exist).
    create: Option<QueuedJob>,
    /// The earlier job whose QueuedJob of the name the create may take over (the core's
    /// outbox let it: `Outbox::may_take`).
    take_over: Option<String>,
    /// The resourceVersion `patch` was made against: its precondition (None: unknown, the
    /// QueuedJob is read first).
    version: Option<String>,
    /// The QueuedJob's resourceVersion once this put landed (from its answer).
    pub landed_version: Option<String>,
    /// The job's UID (the QueuedJob's `jobRef` when it is this job's).
    job: String,
    /// The merge patch of its status from what the hub holds; None: nothing to send.
    patch: Option<Value>,
    /// A defect re-introduced (tests only; the controller runs with none).
    defect: Option<Defect>,
}

impl Put {
    /// The put of `status`; `held` is the status the hub holds (None: no QueuedJob
    /// is known, `create` is made first), and `unsure` the keys of statuses sent since whose
    /// outcome is unknown ([`patch::unsure_keys`]): then the whole status goes, with null for every
    /// key that may be there and should not.
    pub(super) fn new(
        status: QueuedJobStatus,
        (held, unsure): (Option<&QueuedJobStatus>, Option<&Value>),
        (namespace, name, job): (String, String, String),
        (create, take_over): (Option<QueuedJob>, Option<String>),
        version: Option<String>,
        defect: Option<Defect>,
    ) -> Put {
        let new = serde_json::to_value(&status).unwrap_or(Value::Null);
        let old = held
            .and_then(|h| serde_json::to_value(h).ok())
            .unwrap_or_else(|| Value::Object(Map::new()));
        let patch = patch::patch_for(&old, unsure, &new, defect);
        Put {
            status,
            namespace,
            name,
            create,
            take_over,
            version,
            landed_version: None,
            job,
            patch,
            defect,
        }
    }

    /// The status it sends, as JSON.
    pub(super) fn sent(&self) -> Value {
        serde_json::to_value(&self.status).unwrap_or(Value::Null)
    }
}

/// One put: the QueuedJob created first when none is known (one of the name there is taken
/// if it is this job's, made by a create whose answer was lost, or the earlier job's the core
/// let it take; any other is left as it is and returned), then its status patched with the
/// resourceVersion it was made against as its precondition. A conflict (someone else changed
/// it, or the view it was made from lagged) reads it again: another job's now, nothing is
/// written; still this job's, the patch is made again from what is there (`patch::over`).
async fn put(hub: &kube::Client, p: &Put) -> Result<Putting, kube::Error> {
    let api: Api<QueuedJob> = Api::namespaced(hub.clone(), &p.namespace);
    let mut status_patch = p.patch.clone();
    let mut version = p.version.clone();
    let created = p.create.is_some();
    if let Some(qj) = &p.create {
        let params = kube::api::PostParams {
            field_manager: Some(MANAGER.to_string()),
            ..Default::default()
        };
        match api.create(&params, qj).await {
            Ok(made) => version = made.metadata.resource_version,
            Err(kube::Error::Api(e)) if e.code == 409 => {
                let there = api.get(&p.name).await?;
                let earlier = &there.spec.job_ref.uid;
                if *earlier != qj.spec.job_ref.uid {
                    let terminating = there.metadata.deletion_timestamp.is_some();
                    if !outbox::takes(p.take_over.as_deref(), earlier, terminating) {
                        return Ok(Putting::NameHeld(NameHeld {
                            uid: earlier.clone(),
                            terminating,
                            record: there
                                .status
                                .as_ref()
                                .map(|st| Box::new(crate::lifecycle::wire::from_status(st, ""))),
                        }));
                    }
                }
                // A merge patch replaces the owner list whole (an apply would keep the
                // earlier job's controller reference beside this one's: refused, 422), keeps
                // the finalizers others put there, and the resourceVersion read makes it fail
                // rather than overwrite a change made since.
                let mut finalizers = there.metadata.finalizers.clone().unwrap_or_default();
                for f in qj.metadata.finalizers.iter().flatten() {
                    if !finalizers.contains(f) {
                        finalizers.push(f.clone());
                    }
                }
                let take = json!({
                    "metadata": {
                        "resourceVersion": there.metadata.resource_version,
                        "ownerReferences": qj.metadata.owner_references,
                        "finalizers": finalizers,
                    },
                    "spec": qj.spec,
                });
                let params = PatchParams {
                    field_manager: Some(MANAGER.to_string()),
                    ..PatchParams::default()
                };
                let taken = api.patch(&p.name, &params, &Patch::Merge(take)).await?;
                version = taken.metadata.resource_version;
                // The status there is the earlier job's (or this one's, written with its
                // answer lost): the patch turns exactly that into this job's status, or the
                // earlier job's keys (its member, old copies, charge) would stay in it.
                let held = there
                    .status
                    .as_ref()
                    .and_then(|st| serde_json::to_value(st).ok())
                    .unwrap_or_else(|| json!({}));
                status_patch = patch::over(&held, p.patch.as_ref(), &p.sent(), p.defect);
            }
            Err(e) => return Err(e),
        }
    }
    let unconditioned = p.defect.is_some_and(Defect::trusts_belief);
    // A status patch whose resourceVersion is unknown is made from what is there.
    if !created && version.is_none() && !unconditioned {
        match reread(&api, p).await? {
            Reread::Again(v, patch) => (version, status_patch) = (Some(v), patch),
            Reread::Another(held) => return Ok(Putting::NotOurs(held)),
        }
    }
    let Some(patch) = status_patch else {
        return Ok(Putting::Written(version));
    };
    match patch_status(&api, &p.name, &patch, version.filter(|_| !unconditioned)).await {
        // Changed since it was read (someone else's edit, or a view that lagged): read again,
        // and made again from what is there, once.
        Err(kube::Error::Api(e)) if e.code == 409 => match reread(&api, p).await? {
            Reread::Again(v, Some(patch)) => {
                let done = patch_status(&api, &p.name, &patch, Some(v)).await?;
                Ok(Putting::Written(done.metadata.resource_version))
            }
            Reread::Again(v, None) => Ok(Putting::Written(Some(v))),
            Reread::Another(held) => Ok(Putting::NotOurs(held)),
        },
        Err(e) => Err(e),
        Ok(done) => Ok(Putting::Written(done.metadata.resource_version)),
    }
}

/// How one put ended.
enum Putting {
    /// The status is on the hub, at this resourceVersion.
    Written(Option<String>),
    /// The create met an earlier job's QueuedJob, and took nothing.
    NameHeld(NameHeld),
    /// The QueuedJob of the name holds another job's record now: nothing written.
    NotOurs(String),
}

/// What a QueuedJob read again says.
enum Reread {
    /// Still this job's, at this resourceVersion: the patch from what it holds.
    Again(String, Option<Value>),
    /// Another job's now (its UID).
    Another(String),
}

async fn reread(api: &Api<QueuedJob>, p: &Put) -> Result<Reread, kube::Error> {
    let there = api.get(&p.name).await?;
    let held = there
        .status
        .as_ref()
        .and_then(|st| serde_json::to_value(st).ok())
        .unwrap_or_else(|| json!({}));
    let jobs = (p.job.as_str(), there.spec.job_ref.uid.as_str());
    Ok(
        match patch::again(jobs, &held, (p.patch.as_ref(), &p.sent()), p.defect) {
            Ok(patch) => Reread::Again(there.metadata.resource_version.unwrap_or_default(), patch),
            Err(other) => Reread::Another(other),
        },
    )
}

/// A merge patch of a QueuedJob's status, with `version` as its precondition when given.
async fn patch_status(
    api: &Api<QueuedJob>,
    name: &str,
    status: &Value,
    version: Option<String>,
) -> Result<QueuedJob, kube::Error> {
    let params = PatchParams {
        field_manager: Some(MANAGER.to_string()),
        ..PatchParams::default()
    };
    let body = match version {
        Some(v) => json!({ "metadata": { "resourceVersion": v }, "status": status }),
        None => json!({ "status": status }),
    };
    api.patch_status(name, &params, &Patch::Merge(body)).await
}

/// Every put of `batch`, as many at a time as `permits` allow, each fenced and bounded.
async fn put_all(
    hub: &kube::Client,
    leadership: &leader::Leadership,
    permits: &tokio::sync::Semaphore,
    batch: Vec<Item<Put>>,
) -> Vec<(Item<Put>, Landed)> {
    futures::stream::iter(batch)
        .map(|mut i| async move {
            // Never closed: a permit always comes.
            let _permit = permits.acquire().await;
            // Fenced where it leaves: a replica that does not lead writes nothing.
            let landed = match leader::fenced(leadership, WRITE_TIMEOUT, put(hub, &i.write)).await {
                Fenced::NotSent => Landed::NotSent,
                Fenced::Answered(Ok(Putting::Written(version))) => {
                    i.write.landed_version = version;
                    Landed::Written
                }
                Fenced::Answered(Ok(Putting::NameHeld(held))) => Landed::NameHeld(held),
                Fenced::Answered(Ok(Putting::NotOurs(other))) => Landed::Failed(format!(
                    "the QueuedJob of its name holds the record of another job (uid {other}); nothing written"
                )),
                Fenced::Answered(Err(e)) => Landed::Failed(e.to_string()),
                no_answer => Landed::Failed(no_answer.answer().err().unwrap_or_default()),
            };
            (i, landed)
        })
        .buffer_unordered(WRITES_IN_FLIGHT)
        .collect()
        .await
}

/// Writes in flight off the sync loop.
pub(super) struct InFlight {
    /// Permits of QueuedJob status writes (which batches go is the core's outbox's).
    record_permits: Arc<tokio::sync::Semaphore>,
    /// Observed writes being carried out, by object.
    observed: HashSet<String>,
    /// Pods released lately, and when.
    released: HashMap<String, Instant>,
    permits: Arc<tokio::sync::Semaphore>,
}

impl Default for InFlight {
    fn default() -> InFlight {
        let permits = || Arc::new(tokio::sync::Semaphore::new(WRITES_IN_FLIGHT));
        InFlight {
            record_permits: permits(),
            observed: HashSet::new(),
            released: HashMap::new(),
            permits: permits(),
        }
    }
}

/// The object a write is to (at most one write per object in flight).
fn key(w: &Write) -> String {
    match w {
        Write::Release { cluster, pod, .. } => {
            format!("pod {cluster}/{}", pod.uid().unwrap_or_default())
        }
        Write::HubStatus { uid, .. } => format!("status {uid}"),
    }
}

/// QueuedJob status batches (which go, and when: the core's outbox) and writes in flight.
#[derive(Default)]
pub(super) struct Writer {
    pub outbox: crate::lifecycle::outbox::Outbox,
    /// Permits and observed writes under way.
    pub in_flight: InFlight,
    ended: Inbox<Ended>,
}

/// A write of [`Writer`] that ended.
enum Ended {
    /// A batch of QueuedJob status writes (whether it held records that free capacity).
    Records {
        freeing: bool,
        out: Vec<(Item<Put>, Landed)>,
    },
    /// A write observing asked for.
    Observed {
        write: Write,
        result: Result<(), String>,
    },
}

impl Writer {
    /// Sends a batch the outbox planned off the loop: its records that free capacity, and
    /// only if the outbox says so once they are back ([`outbox::rest_goes`]: every one
    /// durable), the rest. Nothing after a failed release may become durable before it (an
    /// admission using the capacity it frees above all); any other failed write holds back
    /// nothing and is tried again in a later batch.
    pub(super) fn send_records(&mut self, ctx: &Ctx, defect: Option<Defect>, batch: Batch<Put>) {
        let freeing = batch.freeing();
        let permits = self.in_flight.record_permits.clone();
        let (hub, leadership, tx, wake) = (
            ctx.hub.clone(),
            ctx.leadership.clone(),
            self.ended.sender(),
            ctx.wake.clone(),
        );
        let Batch { frees, rest } = batch;
        tokio::spawn(async move {
            let mut out = put_all(&hub, &leadership, &permits, frees).await;
            if outbox::rest_goes(out.iter().map(|(_, l)| l), defect) {
                out.extend(put_all(&hub, &leadership, &permits, rest).await);
            } else {
                out.extend(rest.into_iter().map(|i| (i, Landed::NotSent)));
            }
            let _ = tx.send(Ended::Records { freeing, out });
            wake.notify_one();
        });
    }

    /// What the hub now holds of a batch's records.
    /// What the writes that ended since the last pass did: the records the hub now holds
    /// (told to the outbox and kept with each job), the pods released, the hub job statuses
    /// copied.
    pub(super) fn landed(&mut self, ctx: &Ctx, core: &mut Core, hubjobs: &mut HubJobs) {
        for e in self.ended.drain() {
            match e {
                Ended::Records { freeing, out } => {
                    self.records_landed(ctx, core, hubjobs, freeing, out)
                }
                Ended::Observed { write, result } => {
                    self.observed_landed(ctx, hubjobs, write, result)
                }
            }
        }
    }

    fn records_landed(
        &mut self,
        ctx: &Ctx,
        core: &mut Core,
        hubjobs: &mut HubJobs,
        freeing: bool,
        out: Vec<(Item<Put>, Landed)>,
    ) {
        let back = self.outbox.landed(
            (&mut core.book, &mut core.sched),
            (freeing, super::clock::now_ms()),
            out.iter().map(|(i, l)| (i.uid.as_str(), &i.record, l)),
        );
        for (uid, earlier) in back {
            // The intake says it waits for the name (with an Event) at the next pass.
            tracing::info!(job = %uid, earlier = %earlier, "the QueuedJob of its name holds an earlier job's record muster keeps; the job waits for it");
        }
        for (Item { uid, write: p, .. }, landed) in out {
            // What may be on the hub beyond the last status known to have landed.
            if let Some(j) = hubjobs.jobs.get_mut(&uid) {
                j.unsure = patch::unsure_after(j.unsure.as_ref(), &p.sent(), &landed);
            }
            match landed {
                Landed::Written => {
                    let was = hubjobs
                        .jobs
                        .get(&uid)
                        .and_then(|j| j.written.as_ref().map(|w| w.state));
                    // A rejected job that became admissible (a tree or PriorityClass change).
                    if was == Some(QueuedJobState::Rejected)
                        && p.status.state == QueuedJobState::Queued
                    {
                        let note = p.status.reason.clone().unwrap_or_default();
                        hubjobs.event(ctx, &uid, false, "Queued", note);
                    }
                    // The state its held Events waited for is on the hub now.
                    hubjobs.status_landed(ctx, &uid, p.status.state);
                    if let Some(j) = hubjobs.jobs.get_mut(&uid) {
                        j.written = Some(p.status);
                        j.written_at = Some(Instant::now());
                        j.version = p.landed_version;
                    }
                }
                Landed::Failed(e) => {
                    // It may have landed all the same (an answer lost): the next write covers
                    // what it would have left (`unsure`, above). What its Events waited for
                    // is said now, not held while the hub refuses the status.
                    tracing::warn!(job = %uid, error = %e, "could not write QueuedJob status");
                    hubjobs.release_event(ctx, &uid);
                }
                Landed::NameHeld(_) => hubjobs.release_event(ctx, &uid),
                Landed::NotSent => {}
            }
        }
    }

    /// Carries out the writes observing asked for, off the loop: each once at a time per
    /// object, [`WRITES_IN_FLIGHT`] at once, each bounded to [`WRITE_TIMEOUT`].
    pub(super) fn carry_out(&mut self, ctx: &Ctx, writes: Vec<Write>) {
        let f = &mut self.in_flight;
        f.released.retain(|_, at| at.elapsed() < RELEASED_FOR);
        let permits = f.permits.clone();
        for w in writes {
            let k = key(&w);
            if f.observed.contains(&k) || f.released.contains_key(&k) {
                continue;
            }
            f.observed.insert(k.clone());
            let (hub, tx, wake, permits, leadership) = (
                ctx.hub.clone(),
                self.ended.sender(),
                ctx.wake.clone(),
                permits.clone(),
                ctx.leadership.clone(),
            );
            tokio::spawn(async move {
                // Never closed: a permit always comes.
                let _permit = permits.acquire_owned().await;
                let write = async {
                    match &w {
                        Write::Release {
                            client, pod, node, ..
                        } => gates::release(client, pod, node).await,
                        Write::HubStatus {
                            kind,
                            namespace,
                            name,
                            patch,
                            ..
                        } => {
                            let ar = kinds::api_resource(*kind);
                            Api::<DynamicObject>::namespaced_with(hub, namespace, &ar)
                                .patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
                                .await
                                .map(|_| ())
                        }
                    }
                };
                // Fenced where it leaves, not where it was decided.
                let result = leader::fenced(&leadership, WRITE_TIMEOUT, write)
                    .await
                    .answer()
                    .and_then(|r| r.map_err(|e| e.to_string()));
                let _ = tx.send(Ended::Observed { write: w, result });
                wake.notify_one();
            });
        }
    }

    /// An observed write that finished.
    fn observed_landed(
        &mut self,
        ctx: &Ctx,
        hubjobs: &mut HubJobs,
        w: Write,
        result: Result<(), String>,
    ) {
        let k = key(&w);
        self.in_flight.observed.remove(&k);
        match (w, result) {
            (
                Write::Release {
                    cluster,
                    label,
                    pod,
                    node,
                    ..
                },
                Ok(()),
            ) => {
                self.in_flight.released.insert(k, Instant::now());
                ctx.metrics.pods_released(&cluster, 1);
                tracing::debug!(job = %label, pod = %pod.name_any(), %node, "released onto its planned node");
            }
            (
                Write::Release {
                    label, pod, node, ..
                },
                Err(e),
            ) => {
                tracing::warn!(job = %label, pod = %pod.name_any(), %node, error = %e, "could not release a pod; retried on the next pass");
            }
            (Write::HubStatus { uid, status, .. }, Ok(())) => {
                if let Some(j) = hubjobs.jobs.get_mut(&uid) {
                    j.synced_status = Some(status);
                    j.synced_at = Some(Instant::now());
                }
            }
            (Write::HubStatus { label, .. }, Err(e)) => {
                tracing::debug!(job = %label, error = %e, "hub job status not updated");
            }
        }
    }
}
