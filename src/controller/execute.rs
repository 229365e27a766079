//! Carrying out the lifecycle's intents: copies created and deleted on members off the sync
//! loop (one task per write, at most one per job and member at a time and
//! [`super::members::WRITES_PER_MEMBER`] per member, results read at the start of the next
//! pass), so that a slow or frozen member never holds back decisions for the
//! others; Events on the hub job; the queue metrics; the next wake-up. Every member write is
//! fenced where it leaves (after its wait for a permit): a replica that does not lead then
//! writes nothing, and a write is given up when the lease it was sent under runs out.

use std::time::Duration;

use kube::ResourceExt;

use super::brain::Brain;
use super::dispatch;
use super::leader::{self, Fenced};
use crate::fleet::PlacementMode;
use crate::lifecycle::{Created, Intent, Phase, Transition};
use crate::metrics::{DispatchFailure, Outcome, RequeueReason};
use crate::workload::JobKind;

/// How long one member write (a copy's create with its namespace, or its delete) may take
/// before it counts as failed; less when the lease runs out sooner.
const MEMBER_WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// A member write that finished.
pub(super) enum Done {
    Created {
        uid: String,
        cluster: String,
        /// The admission it was made for (the record's `admitted_at`).
        admitted_at: Option<u64>,
        /// The copy's UID and the resourceVersion it landed at, or why not (with whether an
        /// earlier admission's copy holds the name).
        result: Result<(String, u64), (String, DispatchFailure, bool)>,
    },
    /// A fresh read of a member for a create its view has not shown ([`super::reads`]).
    Read {
        uid: String,
        cluster: String,
        /// The version the copy was found at, None when there is none; Err when the member
        /// could not be read.
        found: Result<Option<u64>, String>,
    },
    Deleted {
        uid: String,
        cluster: String,
        result: Result<bool, String>,
    },
    /// The hub's answer to a dry-run create of a pod template.
    HubChecked {
        namespace: String,
        digest: String,
        policy: String,
        outcome: super::hubcheck::Outcome,
    },
}

/// Member I/O under way off the loop.
pub(super) struct Flight {
    /// Member I/O finished off the sync loop, read at the start of the next pass.
    pub done_tx: tokio::sync::mpsc::UnboundedSender<Done>,
    pub done_rx: tokio::sync::mpsc::UnboundedReceiver<Done>,
    /// Member writes under way: (job, member).
    pub in_flight: std::collections::BTreeSet<(String, String)>,
    /// Fresh reads of members under way: (job, member) ([`super::reads`]).
    pub reading: std::collections::BTreeSet<(String, String)>,
}

impl Default for Flight {
    fn default() -> Flight {
        let (done_tx, done_rx) = tokio::sync::mpsc::unbounded_channel();
        Flight {
            done_tx,
            done_rx,
            in_flight: Default::default(),
            reading: Default::default(),
        }
    }
}

impl Brain {
    /// The queue of a followed job (kept while it is out of the scheduler).
    fn queue_of(&self, uid: &str) -> String {
        if let Some(id) = self.core.book.get(uid).and_then(|e| e.id) {
            return self.core.sched.queue_name(id).to_string();
        }
        let j = self.hubjobs.jobs.get(uid);
        j.and_then(|j| j.queue.clone())
            .or_else(|| j.and_then(|j| self.core.sched.queue_of_namespace(&j.namespace)))
            .unwrap_or_default()
    }

    /// Reads the writes that finished off the loop since the last pass.
    pub(super) fn collect_done(&mut self) {
        while let Ok(d) = self.flight.done_rx.try_recv() {
            match d {
                Done::Created {
                    uid,
                    cluster,
                    admitted_at,
                    result,
                } => {
                    self.flight
                        .in_flight
                        .remove(&(uid.clone(), cluster.clone()));
                    if let Ok((_, version)) = &result {
                        // Absence counts only from a view that has reached it.
                        self.core
                            .book
                            .sent
                            .landed(&uid, &cluster, *version, super::now_ms());
                    }
                    let label = self
                        .hubjobs
                        .jobs
                        .get(&uid)
                        .map(|j| j.label())
                        .unwrap_or_default();
                    // Only for the admission it was made for: the job may have been taken
                    // back and admitted again (another plan) while the create was out.
                    let record = self.core.book.get(&uid).map(|e| &e.record);
                    let current = record.is_some_and(|r| {
                        r.phase == Phase::Admitted
                            && r.cluster.as_deref() == Some(&cluster)
                            && r.admitted_at == admitted_at
                    });
                    let trusted =
                        |copy: &str| record.is_some_and(|r| r.copy_uid.as_deref() == Some(copy));
                    let created = match result {
                        Ok((copy_uid, _)) if !current && !trusted(&copy_uid) => {
                            // Made for an earlier admission: it goes (the record that took
                            // the job back is durable, or the job is admitted again).
                            tracing::info!(job = %label, %cluster, "copy created for an earlier admission; deleting it");
                            self.delete_copy(
                                &uid,
                                &cluster,
                                "it was made for an earlier admission",
                            );
                            continue;
                        }
                        Ok((copy_uid, _)) => {
                            tracing::info!(job = %label, %cluster, "copy created");
                            Created::Ok { uid: copy_uid }
                        }
                        Err((message, failure, earlier)) => {
                            self.ctx.metrics.dispatch_error(&cluster, failure);
                            tracing::warn!(job = %label, %cluster, error = %message, "dispatch failed");
                            if earlier {
                                self.delete_copy(
                                    &uid,
                                    &cluster,
                                    "it was made for an earlier admission",
                                );
                            }
                            Created::Failed { message }
                        }
                    };
                    if current {
                        self.core.book.created(&uid, created);
                    }
                }
                Done::HubChecked {
                    namespace,
                    digest,
                    policy,
                    outcome,
                } => self.hub_checked(namespace, digest, policy, outcome),
                Done::Read {
                    uid,
                    cluster,
                    found,
                } => self.read_done(uid, cluster, found),
                Done::Deleted {
                    uid,
                    cluster,
                    result,
                } => {
                    self.flight
                        .in_flight
                        .remove(&(uid.clone(), cluster.clone()));
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

    /// Carries out the intents of one pass, in order.
    pub(super) async fn execute_all(&mut self, intents: Vec<(String, crate::lifecycle::Intent)>) {
        for (uid, i) in intents {
            match i {
                Intent::Create { cluster } => self.create_copy(&uid, &cluster),
                Intent::Delete { cluster, why } => self.delete_copy(&uid, &cluster, &why),
                Intent::Requeued(why) => {
                    let queue = self.queue_of(&uid);
                    self.ctx.metrics.requeued(&queue, why);
                    if why == RequeueReason::Preempted
                        && let Some(c) = self.core.book.get(&uid).and_then(|e| {
                            e.record
                                .orphans
                                .iter()
                                .max_by_key(|(_, since)| **since)
                                .map(|(c, _)| c.clone())
                        })
                    {
                        self.ctx.metrics.preempted(&queue, &c);
                    }
                    if let Some(j) = self.hubjobs.jobs.get_mut(&uid) {
                        j.queued_at = jiff::Timestamp::now();
                        j.forget_placement();
                    }
                }
                Intent::Ended { succeeded } => {
                    let queue = self.queue_of(&uid);
                    let cluster = self
                        .core
                        .book
                        .get(&uid)
                        .and_then(|e| e.record.cluster.clone())
                        .unwrap_or_default();
                    let outcome = if succeeded {
                        Outcome::Succeeded
                    } else {
                        Outcome::Failed
                    };
                    self.ctx.metrics.finished(&queue, &cluster, outcome);
                    if succeeded {
                        self.forecasts.record_run(&self.core, &self.hubjobs, &uid);
                    }
                }
                Intent::Event { transition, note } => self.transition(&uid, transition, note),
                Intent::WakeAt(at) => {
                    self.core.next_wake = Some(self.core.next_wake.map_or(at, |w| w.min(at)));
                }
                Intent::Release | Intent::Submit => {}
            }
        }
    }

    /// A named transition: logged, counted, and an Event on the hub job.
    fn transition(&mut self, uid: &str, t: Transition, note: String) {
        let queue = self.queue_of(uid);
        let cluster = self
            .core
            .book
            .get(uid)
            .and_then(|e| e.record.cluster.clone())
            .unwrap_or_default();
        match t {
            Transition::Queued => self.ctx.metrics.submitted(&queue),
            Transition::Rejected | Transition::Malformed => self.ctx.metrics.rejected(&queue),
            Transition::Admitted => {
                self.ctx.metrics.admitted(&queue, &cluster);
                if let Some(j) = self.hubjobs.jobs.get_mut(uid) {
                    let waited = jiff::Timestamp::now().duration_since(j.queued_at);
                    self.ctx
                        .metrics
                        .wait_time(&queue, waited.as_secs_f64().max(0.0));
                    j.forget_placement();
                }
            }
            Transition::Dispatched => self.ctx.metrics.dispatched(&queue, &cluster),
            _ => {}
        }
        if t == Transition::Admitted {
            // The copy is created on the pass after the admission is written: soon.
            self.core.next_wake = Some(super::now_ms());
        }
        let Some(j) = self.hubjobs.jobs.get(uid) else {
            return;
        };
        let said = t.as_str().to_lowercase();
        if t.warning() {
            tracing::warn!(job = %j.label(), "{said}: {note}");
        } else {
            tracing::info!(job = %j.label(), "{said}: {note}");
        }
        // Published off the sync loop: Events are reports, never decisions.
        self.ctx
            .events
            .send(j.object_ref(uid), t.warning(), t.as_str(), &note);
    }

    /// Creates the job's copy on `cluster` (its admission is durable), off the sync loop.
    fn create_copy(&mut self, uid: &str, cluster: &str) {
        let key = (uid.to_string(), cluster.to_string());
        if !self.ctx.leadership.is_leader() || self.flight.in_flight.contains(&key) {
            return;
        }
        let (Some(e), Some(j)) = (self.core.book.get(uid), self.hubjobs.jobs.get(uid)) else {
            return;
        };
        // What is dispatched is what was admitted.
        let Ok(w) = &j.spec.0 else { return };
        if e.record.spec != j.spec.1 {
            return;
        }
        let Some(m) = self.fleet.members.get(cluster) else {
            return;
        };
        if !m.jobs.contains_key(&j.kind) {
            // Not watched there: its CRD is missing (or was installed after muster connected,
            // so the member is connected again to find out).
            let message = format!(
                "{cluster} does not serve {} (no CRD for it when muster connected)",
                j.kind
            );
            let _ = self.flight.done_tx.send(Done::Created {
                uid: uid.to_string(),
                cluster: cluster.to_string(),
                admitted_at: e.record.admitted_at,
                result: Err((message, DispatchFailure::Refused, false)),
            });
            self.fleet
                .rediscover
                .entry(cluster.to_string())
                .or_insert_with(std::time::Instant::now);
            return;
        }
        let Some(hub) = self.ctx.stores.job(j.kind, &j.namespace, &j.name) else {
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
        let gates = self.fleet.placement_mode(&self.ctx.stores, cluster).0 == PlacementMode::Gates;
        let mut copy = dispatch::member_copy(
            &hub_value,
            w,
            uid,
            &self.ctx.opts.origin,
            &e.record.placement,
            gates,
        );
        let admitted_at = e.record.admitted_at;
        if let Some(at) = admitted_at {
            dispatch::for_admission(&mut copy, at);
        }
        // A namespace muster makes on the member enforces what the hub's does.
        let ns_labels = self
            .ctx
            .stores
            .namespaces
            .get(&kube::runtime::reflector::ObjectRef::new(&j.namespace))
            .map(|n| super::hubcheck::psa_labels(n.labels()))
            .unwrap_or_default();
        let (client, kind, tx, wake, permits, leadership) = (
            m.client.clone(),
            j.kind,
            self.flight.done_tx.clone(),
            self.ctx.wake.clone(),
            m.writes.clone(),
            self.ctx.leadership.clone(),
        );
        self.flight.in_flight.insert(key);
        // Until its answer says where it landed, no view proves the copy absent.
        self.core.book.sent.sending(uid, cluster, super::now_ms());
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
            let _ = tx.send(Done::Created {
                uid,
                cluster,
                admitted_at,
                result,
            });
            wake.notify_one();
        });
    }

    /// Deletes the job's copy on `cluster` (the record saying why is durable), off the loop.
    pub(super) fn delete_copy(&mut self, uid: &str, cluster: &str, why: &str) {
        let Some(j) = self.hubjobs.jobs.get(uid) else {
            return;
        };
        if self
            .flight
            .in_flight
            .contains(&(uid.to_string(), cluster.to_string()))
        {
            return;
        }
        let (kind, ns, name) = (j.kind, j.namespace.clone(), j.name.clone());
        // Already going: nothing to ask again.
        if self
            .fleet
            .members
            .get(cluster)
            .and_then(|m| m.copy_of(kind, uid))
            .is_some_and(|c| c.metadata.deletion_timestamp.is_some())
        {
            return;
        }
        tracing::info!(job = %j.label(), %cluster, "deleting its copy: {why}");
        self.spawn_delete(uid, cluster, kind, &ns, &name);
    }

    /// Deletes `namespace/name` on `cluster` if it is the copy of hub job `uid`.
    pub(super) fn spawn_delete(
        &mut self,
        uid: &str,
        cluster: &str,
        kind: JobKind,
        ns: &str,
        name: &str,
    ) {
        let key = (uid.to_string(), cluster.to_string());
        if !self.ctx.leadership.is_leader() || self.flight.in_flight.contains(&key) {
            return;
        }
        let Some(m) = self.fleet.members.get(cluster) else {
            return;
        };
        let (client, tx, wake, permits, leadership) = (
            m.client.clone(),
            self.flight.done_tx.clone(),
            self.ctx.wake.clone(),
            m.writes.clone(),
            self.ctx.leadership.clone(),
        );
        let (uid, cluster, ns, name) = (
            uid.to_string(),
            cluster.to_string(),
            ns.to_string(),
            name.to_string(),
        );
        self.flight.in_flight.insert(key);
        tokio::spawn(async move {
            let _permit = permits.acquire_owned().await;
            // Fenced where it leaves, as a create is.
            let delete = dispatch::delete(&client, kind, &ns, &name, &uid);
            let result = leader::fenced(&leadership, MEMBER_WRITE_TIMEOUT, delete)
                .await
                .answer()
                .and_then(|r| r.map_err(|e| e.to_string()));
            let _ = tx.send(Done::Deleted {
                uid,
                cluster,
                result,
            });
            wake.notify_one();
        });
    }
}
