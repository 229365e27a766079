//! The QueuedJob finalizer `muster.dev/record`: a job's record (its QueuedJob status) outlives
//! a `kubectl delete`, a CRD reinstall or the hub garbage collector while muster still needs it
//! (the job is followed, or deleted but still charged while a copy may run). Without it, a
//! QueuedJob deleted while no controller runs loses the job's member and orphans, and the next
//! leader admits the job again beside its old copy. The rule is the core's
//! ([`Book::keep`](crate::lifecycle::Book::keep), run by `lifecycle::tidy` before each pass),
//! shared with the fault simulation; `gc` finds each QueuedJob's facts, and this file adds the
//! finalizer to QueuedJobs made before it existed or lets it go once the hub job is gone and the
//! book keeps nothing of it, as the core decides. Each patch carries the resourceVersion it was
//! made from (a conflict is tried again on a later pass) and is sent off the loop, at most one
//! per QueuedJob at a time (a shared in-flight table).

use std::sync::Arc;
use std::time::Duration;

use dashmap::DashSet;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::crd::MANAGER;
use super::crd::QueuedJob;
use super::ctx::Ctx;
use super::leader::{self, Fenced};
use super::stores::HubStores;
use crate::lifecycle::Finalizer;
use crate::workload::JobKind;

/// The finalizer muster puts on every QueuedJob it writes.
pub(super) const RECORD_FINALIZER: &str = "muster.dev/record";
/// Finalizer patches sent in one pass at most.
const PER_PASS: usize = 32;
const TIMEOUT: Duration = Duration::from_secs(10);

/// QueuedJobs whose finalizer patch is under way.
pub(super) type Finalizing = Arc<DashSet<String>>;

/// Puts muster's finalizer on, or takes it off, each QueuedJob as the core decided
/// (`lifecycle::tidy`, `Book::keep`): at most [`PER_PASS`] patches per pass, one per
/// QueuedJob at a time; only the leader changes finalizers.
pub(super) fn change(
    ctx: &Ctx,
    finalizing: &Finalizing,
    changes: Vec<(Arc<QueuedJob>, Finalizer)>,
) {
    if !ctx.leadership.is_leader() {
        return;
    }
    let mut sent = 0;
    for (qj, change) in changes {
        let Some(ns) = qj.namespace() else {
            continue;
        };
        let key = format!("{ns}/{}", qj.name_any());
        if sent == PER_PASS || finalizing.contains(&key) {
            continue;
        }
        let mut finalizers: Vec<String> = qj
            .finalizers()
            .iter()
            .filter(|f| *f != RECORD_FINALIZER)
            .cloned()
            .collect();
        if change == Finalizer::Add {
            finalizers.push(RECORD_FINALIZER.to_string());
        } else {
            tracing::info!(queuedjob = %key, "the hub job is gone and nothing of it is kept; its QueuedJob is let go");
        }
        let patch = json!({
            "metadata": {
                "finalizers": finalizers,
                "resourceVersion": qj.resource_version(),
            }
        });
        let api: Api<QueuedJob> = Api::namespaced(ctx.hub.clone(), &ns);
        let (name, leadership, finalizing) =
            (qj.name_any(), ctx.leadership.clone(), finalizing.clone());
        finalizing.insert(key.clone());
        sent += 1;
        tokio::spawn(async move {
            // Fenced where it is sent: a replica that lost the lease writes nothing.
            let params = PatchParams {
                field_manager: Some(MANAGER.to_string()),
                ..PatchParams::default()
            };
            let r = leader::fenced(
                &leadership,
                TIMEOUT,
                api.patch(&name, &params, &Patch::Merge(patch)),
            )
            .await;
            match r {
                Fenced::NotSent | Fenced::Answered(Ok(_)) => {}
                // Changed meanwhile (409) or gone (404): judged again from the store.
                Fenced::Answered(Err(kube::Error::Api(e))) if e.code == 409 || e.code == 404 => {}
                Fenced::Answered(Err(e)) => {
                    tracing::warn!(queuedjob = %key, error = %e, "could not change the QueuedJob's finalizers")
                }
                Fenced::NoAnswer(_) => {
                    tracing::warn!(queuedjob = %key, "no answer changing the QueuedJob's finalizers")
                }
            }
            finalizing.remove(&key);
        });
    }
}

/// Whether the QueuedJob's hub job is known gone: its kind is watched and synced, and the
/// job is absent, there under another UID, or being deleted.
pub(super) fn hub_job_gone(stores: &HubStores, qj: &QueuedJob, uid: &str) -> bool {
    let r = &qj.spec.job_ref;
    let Some(kind) = JobKind::from_type(&r.api_version, &r.kind) else {
        return false;
    };
    let Some(store) = stores.jobs.get(&kind) else {
        return false;
    };
    if !store.is_ready() {
        return false;
    }
    let ns = qj.namespace().unwrap_or_default();
    stores
        .job(kind, &ns, &qj.spec.job_ref.name)
        .is_none_or(|j| {
            j.metadata.uid.as_deref() != Some(uid) || j.metadata.deletion_timestamp.is_some()
        })
}
