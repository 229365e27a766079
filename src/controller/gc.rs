//! The housekeeping before each pass, as the controller's adapter of
//! [`lifecycle::tidy`](crate::lifecycle::tidy) (the decisions and their order, shared with the
//! fault simulation): this file finds the facts (followed jobs whose hub job is gone, the copies
//! muster made on members that answer and are in sync, with what the hub knows of each one's
//! job, the QueuedJobs once their store is listed) and carries out what comes back: copies
//! deleted, records written again, finalizers put on or taken off (`finalizers`).
//! Level-triggered, so it also cleans up after a member that was lost and came back, and after a
//! restart. The records the QueuedJobs hold are read once per version of each QueuedJob
//! ([`Shown`]), not on every pass.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use kube::ResourceExt;

use super::copies::Copies;
use super::crd::QueuedJob;
use super::ctx::{Core, Ctx};
use super::finalizers::Finalizing;
use super::jobs::HubJobs;
use super::members::{JOB_UID_LABEL, ORIGIN_LABEL};
use super::membership::Fleet;
use crate::lifecycle::gc::{self, Found, HubJob};
use crate::lifecycle::{Held, Record, tidy};

/// A QueuedJob, its namespace, and what the hub says of its job.
type Listed = (Arc<QueuedJob>, String, HubJob);

/// The record each QueuedJob in the store holds, read from its status once per object: the
/// store keeps the same `Arc` for a QueuedJob until a watch event replaces it, and the entry
/// holds that `Arc`, so an equal pointer is the same object.
#[derive(Default)]
pub(super) struct Shown {
    by_uid: HashMap<String, (Arc<QueuedJob>, Option<Record>)>,
}

impl Shown {
    /// Brought up to the QueuedJobs listed now (by their job's UID).
    fn refresh(&mut self, queued: &[Listed]) {
        let listed: HashSet<&str> = queued
            .iter()
            .map(|(qj, _, _)| qj.spec.job_ref.uid.as_str())
            .collect();
        self.by_uid.retain(|uid, _| listed.contains(uid.as_str()));
        for (qj, _, _) in queued {
            let uid = qj.spec.job_ref.uid.as_str();
            match self.by_uid.get_mut(uid) {
                Some((was, _)) if Arc::ptr_eq(was, qj) => {}
                Some(entry) => *entry = (Arc::clone(qj), read(qj)),
                None => {
                    self.by_uid
                        .insert(uid.to_string(), (Arc::clone(qj), read(qj)));
                }
            }
        }
    }

    /// The record the QueuedJob of job `uid` holds, as read.
    fn get(&self, uid: &str) -> Option<&Record> {
        self.by_uid.get(uid)?.1.as_ref()
    }
}

/// The record a QueuedJob's status holds.
fn read(qj: &QueuedJob) -> Option<Record> {
    qj.status
        .as_ref()
        .map(|st| crate::lifecycle::wire::from_status(st, ""))
}

/// Tidies before the pass; `gone` are the followed jobs intake no longer saw.
pub(super) fn tidy(
    ctx: &Ctx,
    core: &mut Core,
    (fleet, hubjobs): (&Fleet, &mut HubJobs),
    (copies, finalizing, shown): (&mut Copies, &Finalizing, &mut Shown),
    (outbox, gone): (&mut crate::lifecycle::outbox::Outbox, Vec<String>),
) {
    // Copies: (member, kind, namespace, name, job UID, what the hub knows of the job).
    let mut found = Vec::new();
    let mut deleting = Vec::new();
    for (cluster, m) in &fleet.members {
        if !m.synced() || !m.health.answering() {
            continue;
        }
        for (&kind, store) in &m.jobs {
            for copy in store.state() {
                let labels = copy.labels();
                // Only what muster made (its admission annotation): labels alone are
                // anyone's to write.
                if labels.get(ORIGIN_LABEL) != Some(&ctx.opts.origin)
                    || !super::dispatch::made_by_muster(&copy)
                {
                    continue;
                }
                let Some(uid) = labels.get(JOB_UID_LABEL) else {
                    continue;
                };
                if let Some(t) = &copy.metadata.deletion_timestamp {
                    let since = t.0.as_millisecond().max(0) as u64;
                    deleting.push(gc::Deleting {
                        job: uid.clone(),
                        member: cluster.clone(),
                        since,
                    });
                    continue;
                }
                let ns = copy.metadata.namespace.as_deref().unwrap_or("");
                let name = super::jobs::name_of(&copy.metadata);
                // A kind the hub does not serve: nothing is known of its jobs.
                let hub = if !ctx.stores.jobs.contains_key(&kind) {
                    HubJob::Unknown
                } else if ctx.stores.job(kind, ns, name).is_some_and(|hub| {
                    hub.metadata.uid.as_deref() == Some(uid.as_str())
                        && hub.metadata.deletion_timestamp.is_none()
                }) {
                    HubJob::Exists
                } else {
                    HubJob::Gone
                };
                found.push((
                    cluster.clone(),
                    kind,
                    ns.to_string(),
                    name.to_string(),
                    uid.clone(),
                    hub,
                ));
            }
        }
    }
    // QueuedJobs, once listed, with their namespace and what the hub says of their job.
    let queued: Option<Vec<Listed>> = ctx.stores.queued.is_ready().then(|| {
        ctx.stores
            .queued
            .state()
            .into_iter()
            .filter_map(|qj| {
                let ns = qj.namespace()?;
                let hub = if super::finalizers::hub_job_gone(&ctx.stores, &qj, &qj.spec.job_ref.uid)
                {
                    HubJob::Gone
                } else {
                    HubJob::Unknown
                };
                Some((qj, ns, hub))
            })
            .collect()
    });
    let by_uid: HashMap<&str, &Arc<QueuedJob>> = queued
        .iter()
        .flatten()
        .map(|(qj, _, _)| (qj.spec.job_ref.uid.as_str(), qj))
        .collect();
    if let Some(q) = &queued {
        shown.refresh(q);
    }
    let shown = &*shown;
    let record = |uid: &str| shown.get(uid).map(Cow::Borrowed);
    let held = queued.as_ref().map(|qs| {
        qs.iter()
            .map(|(qj, namespace, hub)| Held {
                job: &qj.spec.job_ref.uid,
                namespace,
                finalizer: qj
                    .finalizers()
                    .iter()
                    .any(|f| f == super::finalizers::RECORD_FINALIZER),
                terminating: qj.metadata.deletion_timestamp.is_some(),
                hub: *hub,
            })
            .collect()
    });
    let done = tidy::tidy(
        &mut core.book,
        &mut core.sched,
        tidy::Facts {
            gone,
            copies: found
                .iter()
                .map(|(member, _, _, _, job, hub)| Found {
                    job,
                    member,
                    hub: *hub,
                })
                .collect(),
            deleting,
            queued: held,
            record: &record,
        },
        super::clock::now_ms(),
    );
    // Carried out: copies deleted (those found here by their own names, a gone job's other
    // copies by its job's, unless already going), then jobs no longer followed forgotten
    // once nothing of them is charged.
    for d in done.deletes {
        match found
            .iter()
            .find(|(m, _, _, _, j, _)| *m == d.member && *j == d.job)
        {
            Some((_, kind, ns, name, _, _)) => {
                if copies
                    .in_flight
                    .contains(&(d.job.clone(), d.member.clone()))
                {
                    continue;
                }
                tracing::info!(cluster = %d.member, job = %format!("{kind} {ns}/{name}"), why = %d.why, "deleting a copy");
                copies.spawn_delete(ctx, fleet, &d.job, &d.member, (*kind, ns, name));
            }
            None => copies.delete(ctx, fleet, hubjobs, &d.job, &d.member, &d.why),
        }
    }
    for uid in &done.untracked {
        if let Some(j) = hubjobs.jobs.get_mut(uid) {
            j.gone = true;
            tracing::info!(job = %j.label(), "hub job gone; its copies are deleted");
        }
    }
    let charged: BTreeSet<String> = core.book.deleted().map(|(u, _)| u.clone()).collect();
    let book = &core.book;
    hubjobs
        .jobs
        .retain(|u, j| !j.gone || book.get(u).is_some() || charged.contains(u));
    for uid in done.rewrite {
        if let Some(j) = hubjobs.jobs.get_mut(&uid) {
            tracing::warn!(job = %j.label(), "its QueuedJob was deleted; writing it again");
            j.written = None;
            j.written_at = None;
            j.version = None;
        }
    }
    for uid in done.drifted {
        // Someone else changed its record: written again, whole, from what the view shows and
        // against the view's resourceVersion (a view that lags meets a conflict, and the patch
        // is made again from what is there).
        let key = by_uid
            .get(uid.as_str())
            .map(|qj| (qj.status.clone(), qj.metadata.resource_version.clone()));
        if let (Some(j), Some((status, version))) = (hubjobs.jobs.get_mut(&uid), key) {
            tracing::warn!(job = %j.label(), "its QueuedJob holds a record someone else changed; writing it again");
            j.unsure = status.as_ref().and_then(|st| serde_json::to_value(st).ok());
            j.written = status;
            j.version = version;
            outbox.doubt(&core.book, &uid);
        }
    }
    for uid in done.restored {
        tracing::info!(job = %uid, "a deleted job's copy may still run; charged until it is confirmed gone");
    }
    let changes: Vec<_> = done
        .finalizers
        .into_iter()
        .filter_map(|(uid, change)| Some((Arc::clone(by_uid.get(uid.as_str())?), change)))
        .collect();
    super::finalizers::change(ctx, finalizing, changes);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::crd::{JobRef, QueuedJobSpec, QueuedJobState, QueuedJobStatus};

    fn queued(uid: &str, state: QueuedJobState, cluster: Option<&str>) -> Listed {
        let mut qj = QueuedJob::new(
            "j",
            QueuedJobSpec {
                job_ref: JobRef {
                    api_version: "batch/v1".into(),
                    kind: "Job".into(),
                    name: "j".into(),
                    uid: uid.into(),
                },
            },
        );
        qj.status = Some(QueuedJobStatus {
            state,
            cluster: cluster.map(str::to_string),
            ..QueuedJobStatus::default()
        });
        (Arc::new(qj), "ns".into(), HubJob::Unknown)
    }

    /// A QueuedJob is read again when the store holds another object for it (a watch event),
    /// and its record is forgotten when it leaves the store.
    #[test]
    fn a_record_is_read_again_when_its_queued_job_is_replaced() {
        let mut shown = Shown::default();
        let a = queued("u1", QueuedJobState::Queued, None);
        shown.refresh(std::slice::from_ref(&a));
        let r = shown.get("u1").expect("read");
        assert_eq!(r.cluster, None);
        shown.refresh(std::slice::from_ref(&a));
        assert!(
            Arc::ptr_eq(&shown.by_uid["u1"].0, &a.0),
            "the same object is kept"
        );
        let b = queued("u1", QueuedJobState::Admitted, Some("m1"));
        shown.refresh(&[b.clone(), queued("u2", QueuedJobState::Queued, None)]);
        let r = shown.get("u1").expect("read");
        assert_eq!(r.cluster.as_deref(), Some("m1"), "the new object is read");
        assert!(shown.get("u2").is_some());
        shown.refresh(&[b]);
        assert!(
            shown.get("u2").is_none(),
            "a QueuedJob gone from the store is forgotten"
        );
    }
}
