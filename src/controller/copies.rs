//! The job's copies on members: created and deleted off the sync loop (one task per write, at
//! most one per job and member at a time and [`super::members::WRITES_PER_MEMBER`] per member,
//! results read at the start of the next pass), so that a slow or frozen member never holds
//! back decisions for the others. Every member write is fenced where it leaves (after its wait
//! for a permit): a replica that does not lead then writes nothing, and a write is given up when
//! the lease it was sent under runs out. What to create or delete is the core's.

use std::collections::BTreeSet;
use std::time::Duration;

use kube::ResourceExt;

use super::ctx::{Core, Ctx, Inbox};
use super::dispatch;
use super::jobs::HubJobs;
use super::leader::{self, Fenced};
use super::membership::Fleet;
use crate::fleet::PlacementMode;
use crate::lifecycle::{Created, Phase};
use crate::metrics::DispatchFailure;
use crate::workload::JobKind;

/// How long one member write (a copy's create with its namespace, or its delete) may take
/// before it counts as failed; less when the lease runs out sooner.
const MEMBER_WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// Member writes under way, and their outcomes.
#[derive(Default)]
pub(super) struct Copies {
    /// Member writes under way: (job, member).
    pub in_flight: BTreeSet<(String, String)>,
    ended: Inbox<Ended>,
}

/// A member write that finished.
enum Ended {
    Created {
        uid: String,
        cluster: String,
        /// The admission it was made for (the record's `admitted_at`).
        admitted_at: Option<u64>,
        /// The copy's UID and the resourceVersion it landed at, or why not (with whether an
        /// earlier admission's copy holds the name).
        result: Result<(String, u64), (String, DispatchFailure, bool)>,
    },
    Deleted {
        uid: String,
        cluster: String,
        result: Result<bool, String>,
    },
}

impl Copies {
    /// Reads the member writes that finished off the loop since the last pass: a create
    /// settles its admission (the core's `created`), or, made for an earlier admission, its
    /// copy goes.
    pub(super) fn landed(&mut self, ctx: &Ctx, core: &mut Core, fleet: &Fleet, hubjobs: &HubJobs) {
        for d in self.ended.drain() {
            match d {
                Ended::Created {
                    uid,
                    cluster,
                    admitted_at,
                    result,
                } => {
                    self.in_flight.remove(&(uid.clone(), cluster.clone()));
                    if let Ok((_, version)) = &result {
                        // Absence counts only from a view that has reached it.
                        core.book
                            .sent
                            .landed(&uid, &cluster, *version, super::clock::now_ms());
                    }
                    let label = hubjobs
                        .jobs
                        .get(&uid)
                        .map(|j| j.label())
                        .unwrap_or_default();
                    // Only for the admission it was made for: the job may have been taken
                    // back and admitted again (another plan) while the create was out.
                    let record = core.book.get(&uid).map(|e| &e.record);
                    let current = record.is_some_and(|r| {
                        r.phase == Phase::Admitted
                            && r.cluster.as_deref() == Some(&cluster)
                            && r.admitted_at == admitted_at
                    });
                    let trusted =
                        |copy: &str| record.is_some_and(|r| r.copy_uid.as_deref() == Some(copy));
                    // A copy made for an earlier admission goes (the record that took the job
                    // back is durable, or the job is admitted again), whether this create made
                    // it or found it holding the name.
                    let (created, stale) = match result {
                        Ok((copy_uid, _)) if !current && !trusted(&copy_uid) => {
                            tracing::info!(job = %label, %cluster, "copy created for an earlier admission; deleting it");
                            (None, true)
                        }
                        Ok((copy_uid, _)) => {
                            tracing::info!(job = %label, %cluster, "copy created");
                            (Some(Created::Ok { uid: copy_uid }), false)
                        }
                        Err((message, failure, earlier)) => {
                            ctx.metrics.dispatch_error(&cluster, failure);
                            tracing::warn!(job = %label, %cluster, error = %message, "dispatch failed");
                            (Some(Created::Failed { message }), earlier)
                        }
                    };
                    if stale {
                        let why = "it was made for an earlier admission";
                        self.delete(ctx, fleet, hubjobs, &uid, &cluster, why);
                    }
                    if let (true, Some(c)) = (current, created) {
                        core.book.created(&uid, c);
                    }
                }
                Ended::Deleted {
                    uid,
                    cluster,
                    result,
                } => {
                    self.in_flight.remove(&(uid.clone(), cluster.clone()));
                    match result {
                        Ok(true) => tracing::info!(job = %uid, %cluster, "copy deleted"),
                        Ok(false) => {}
                        Err(e) => {
                            tracing::warn!(job = %uid, %cluster, error = %e, "could not delete a copy; retried")
                        }
                    }
                }
            }
        }
    }

    /// Creates the job's copy on `cluster` (its admission is durable), off the sync loop.
    pub(super) fn create(
        &mut self,
        ctx: &Ctx,
        core: &mut Core,
        fleet: &mut Fleet,
        hubjobs: &HubJobs,
        (uid, cluster): (&str, &str),
    ) {
        let key = (uid.to_string(), cluster.to_string());
        if !ctx.leadership.is_leader() || self.in_flight.contains(&key) {
            return;
        }
        let (Some(e), Some(j)) = (core.book.get(uid), hubjobs.jobs.get(uid)) else {
            return;
        };
        // What is dispatched is what was admitted.
        let Ok(w) = &j.spec.0 else { return };
        if e.record.spec != j.spec.1 {
            return;
        }
        // Only for the admission the record holds, there (the core sends no other create): a
        // copy without its admission's annotation would be one muster neither adopts nor deletes.
        let Some(at) = e.record.admission_on(cluster) else {
            tracing::error!(job = %format!("{}/{}", j.namespace, j.name), %cluster, "a create for no admission there; not sent");
            return;
        };
        let admitted_at = Some(at);
        let Some(m) = fleet.members.get(cluster) else {
            return;
        };
        if !m.jobs.contains_key(&j.kind) {
            // Not watched there: its CRD is missing (or was installed after muster connected,
            // so the member is connected again to find out).
            let message = format!(
                "{cluster} does not serve {} (no CRD for it when muster connected)",
                j.kind
            );
            let _ = self.ended.sender().send(Ended::Created {
                uid: uid.to_string(),
                cluster: cluster.to_string(),
                admitted_at,
                result: Err((message, DispatchFailure::Refused, false)),
            });
            fleet
                .rediscover
                .entry(cluster.to_string())
                .or_insert_with(std::time::Instant::now);
            return;
        }
        let Some(hub) = ctx.stores.job(j.kind, &j.namespace, &j.name) else {
            return;
        };
        // The copy is built from the hub job as the digest above judged it: an edit that landed
        // since (another generation), or a job made again under the name, waits for the next
        // pass, which reads it and judges it again.
        if hub.uid().as_deref() != Some(uid) || hub.metadata.generation.unwrap_or(0) != j.generation
        {
            return;
        }
        let Ok(hub_value) = serde_json::to_value(hub.as_ref()) else {
            return;
        };
        let gates = fleet.placement_mode(&ctx.stores, cluster).0 == PlacementMode::Gates
            && crate::placement::gated(&e.record.placement);
        let mut copy = dispatch::member_copy(
            &hub_value,
            w,
            uid,
            &ctx.opts.origin,
            &e.record.placement,
            gates,
        );
        dispatch::for_admission(&mut copy, at);
        // A namespace muster makes on the member enforces what the hub's does.
        let ns_labels = ctx
            .stores
            .namespaces
            .get(&kube::runtime::reflector::ObjectRef::new(&j.namespace))
            .map(|n| super::hubcheck::psa_labels(n.labels()))
            .unwrap_or_default();
        let (client, kind, tx, wake, permits, leadership) = (
            m.client.clone(),
            j.kind,
            self.ended.sender(),
            ctx.wake.clone(),
            m.writes.clone(),
            ctx.leadership.clone(),
        );
        self.in_flight.insert(key);
        // Until its answer says where it landed, no view proves the copy absent.
        core.book.sent.sending(uid, cluster, super::clock::now_ms());
        let (uid, cluster) = (uid.to_string(), cluster.to_string());
        tokio::spawn(async move {
            // Never closed: a permit always comes.
            let _permit = permits.acquire_owned().await;
            // Fenced where it leaves: a create that waited behind a slow member is not sent by
            // a replica that lost the lease meanwhile, and is given up before the lease ends.
            let create = dispatch::create(&client, &cluster, kind, &copy, &ns_labels);
            let result = match leader::fenced(&leadership, MEMBER_WRITE_TIMEOUT, create).await {
                Fenced::Answered(r) => r
                    .map(|o| (o.uid().unwrap_or_default(), super::watches::version_of(&o)))
                    .map_err(|e| {
                        let earlier = matches!(e, dispatch::DispatchError::Earlier { .. });
                        (e.to_string(), e.failure(), earlier)
                    }),
                other => Err((
                    other.answer().err().unwrap_or_default(),
                    DispatchFailure::Unreachable,
                    false,
                )),
            };
            let _ = tx.send(Ended::Created {
                uid,
                cluster,
                admitted_at,
                result,
            });
            wake.notify_one();
        });
    }

    /// Deletes the job's copy on `cluster` (the record saying why is durable), off the loop.
    pub(super) fn delete(
        &mut self,
        ctx: &Ctx,
        fleet: &Fleet,
        hubjobs: &HubJobs,
        uid: &str,
        cluster: &str,
        why: &str,
    ) {
        let Some(j) = hubjobs.jobs.get(uid) else {
            return;
        };
        if self
            .in_flight
            .contains(&(uid.to_string(), cluster.to_string()))
        {
            return;
        }
        let (kind, ns, name) = (j.kind, j.namespace.clone(), j.name.clone());
        // Already going: nothing to ask again.
        if fleet
            .members
            .get(cluster)
            .and_then(|m| m.copy_of(kind, uid))
            .is_some_and(|c| c.metadata.deletion_timestamp.is_some())
        {
            return;
        }
        tracing::info!(job = %j.label(), %cluster, "deleting its copy: {why}");
        self.spawn_delete(ctx, fleet, uid, cluster, (kind, &ns, &name));
    }

    /// Deletes `namespace/name` on `cluster` if it is the copy of hub job `uid`.
    pub(super) fn spawn_delete(
        &mut self,
        ctx: &Ctx,
        fleet: &Fleet,
        uid: &str,
        cluster: &str,
        (kind, ns, name): (JobKind, &str, &str),
    ) {
        let key = (uid.to_string(), cluster.to_string());
        if !ctx.leadership.is_leader() || self.in_flight.contains(&key) {
            return;
        }
        let Some(m) = fleet.members.get(cluster) else {
            return;
        };
        let (client, tx, wake, permits, leadership) = (
            m.client.clone(),
            self.ended.sender(),
            ctx.wake.clone(),
            m.writes.clone(),
            ctx.leadership.clone(),
        );
        let (uid, cluster, ns, name) = (
            uid.to_string(),
            cluster.to_string(),
            ns.to_string(),
            name.to_string(),
        );
        self.in_flight.insert(key);
        tokio::spawn(async move {
            let _permit = permits.acquire_owned().await;
            // Fenced where it leaves, as a create is.
            let delete = dispatch::delete(&client, kind, &ns, &name, &uid);
            let result = leader::fenced(&leadership, MEMBER_WRITE_TIMEOUT, delete)
                .await
                .answer()
                .and_then(|r| r.map_err(|e| e.to_string()));
            let _ = tx.send(Ended::Deleted {
                uid,
                cluster,
                result,
            });
            wake.notify_one();
        });
    }
}
