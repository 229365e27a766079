//! Garbage collection of member copies: only the copies (objects with muster's origin and UID
//! labels and its admission annotation) of hub jobs known deleted (not in the
//! synced hub store, or there under another UID, or being deleted) go, and only from members
//! that answer and are in sync. Copies of jobs muster follows are the lifecycle's (a copy is
//! deleted only where the job's durable record says it is not); copies of jobs it does not
//! follow (no valid tree in force, a namespace that left the tree, a kind not watched) are never
//! touched while their hub job exists. Level-triggered, so it also cleans up after a member that
//! was lost and came back, and after a restart.

use kube::ResourceExt;

use super::brain::Brain;
use super::members::{JOB_UID_LABEL, ORIGIN_LABEL};

impl Brain {
    pub(super) fn collect_garbage(&mut self) {
        if !self.leadership.is_leader() {
            return;
        }
        let mut doomed = Vec::new();
        for (cluster, m) in &self.members {
            if !m.synced() || m.health.failures() > 0 {
                continue;
            }
            for (&kind, store) in &m.jobs {
                // A kind the hub does not serve: nothing is known of its jobs.
                if !self.stores.jobs.contains_key(&kind) {
                    continue;
                }
                for copy in store.state() {
                    let labels = copy.labels();
                    // Only what muster made (its admission annotation): labels alone are
                    // anyone's to write.
                    if labels.get(ORIGIN_LABEL) != Some(&self.opts.origin)
                        || !super::dispatch::made_by_muster(&copy)
                        || copy.metadata.deletion_timestamp.is_some()
                    {
                        continue;
                    }
                    let Some(uid) = labels.get(JOB_UID_LABEL) else {
                        continue;
                    };
                    if self.book.get(uid).is_some() {
                        continue;
                    }
                    let (ns, name) = (copy.namespace().unwrap_or_default(), copy.name_any());
                    let hub_job_exists = self.stores.job(kind, &ns, &name).is_some_and(|hub| {
                        hub.metadata.uid.as_deref() == Some(uid.as_str())
                            && hub.metadata.deletion_timestamp.is_none()
                    });
                    if !hub_job_exists {
                        doomed.push((cluster.clone(), kind, ns, name, uid.clone()));
                    }
                }
            }
        }
        for (cluster, kind, ns, name, uid) in doomed {
            if self.in_flight.contains(&(uid.clone(), cluster.clone())) {
                continue;
            }
            tracing::info!(%cluster, job = %format!("{kind} {ns}/{name}"), "deleting the copy of a deleted hub job");
            self.spawn_delete(&uid, &cluster, kind, &ns, &name);
        }
    }
}
