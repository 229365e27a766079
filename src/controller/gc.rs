//! Garbage collection of member copies, as the controller's adapter of
//! [`lifecycle::gc`](crate::lifecycle::gc) (the decision, shared with the fault simulation):
//! this file only finds the copies muster made (its origin and UID labels and its admission
//! annotation) on members that answer and are in sync, says what the hub knows of each one's
//! job, and deletes what the decision dooms. It also tells the core which copies muster made are
//! being deleted (`gc::deleting`: those of jobs it no longer follows hold back creates for the
//! drain grace).
//! Level-triggered, so it also cleans up after a member that was lost and came back, and after a
//! restart.

use kube::ResourceExt;

use super::brain::Brain;
use super::members::{JOB_UID_LABEL, ORIGIN_LABEL};
use crate::lifecycle::gc::{self, Found, HubJob, doomed};

impl Brain {
    pub(super) fn collect_garbage(&mut self) {
        if !self.leadership.is_leader() {
            return;
        }
        // (member, kind, namespace, name, job UID, what the hub knows of the job)
        let mut found = Vec::new();
        let mut deleting = Vec::new();
        for (cluster, m) in &self.members {
            if !m.synced() || m.health.failures() > 0 {
                continue;
            }
            for (&kind, store) in &m.jobs {
                for copy in store.state() {
                    let labels = copy.labels();
                    // Only what muster made (its admission annotation): labels alone are
                    // anyone's to write.
                    if labels.get(ORIGIN_LABEL) != Some(&self.opts.origin)
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
                    let (ns, name) = (copy.namespace().unwrap_or_default(), copy.name_any());
                    // A kind the hub does not serve: nothing is known of its jobs.
                    let hub = if !self.stores.jobs.contains_key(&kind) {
                        HubJob::Unknown
                    } else if self.stores.job(kind, &ns, &name).is_some_and(|hub| {
                        hub.metadata.uid.as_deref() == Some(uid.as_str())
                            && hub.metadata.deletion_timestamp.is_none()
                    }) {
                        HubJob::Exists
                    } else {
                        HubJob::Gone
                    };
                    found.push((cluster.clone(), kind, ns, name, uid.clone(), hub));
                }
            }
        }
        gc::deleting(&mut self.book, deleting);
        let doomed = doomed(
            &self.book,
            found.iter().map(|(member, _, _, _, job, hub)| Found {
                job,
                member,
                hub: *hub,
            }),
        );
        for d in doomed {
            if self.in_flight.contains(&(d.job.clone(), d.member.clone())) {
                continue;
            }
            let Some((_, kind, ns, name, _, _)) = found
                .iter()
                .find(|(m, _, _, _, j, _)| *m == d.member && *j == d.job)
            else {
                continue;
            };
            tracing::info!(cluster = %d.member, job = %format!("{kind} {ns}/{name}"), why = %d.why, "deleting a copy");
            self.spawn_delete(&d.job, &d.member, *kind, ns, name);
        }
    }
}
