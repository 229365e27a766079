//! Names held by earlier jobs: a job whose first record write met the QueuedJob of an earlier
//! job of the same kind and name, which the core did not let it take over (that job's record is
//! kept: its copy may still run, charged only through it). The job goes back to the intake and
//! waits for the name, even while the driver's view of the QueuedJobs does not show that
//! QueuedJob (a watch that dropped, or lags): for the settle time, after which the write is
//! tried again.

use super::{Book, done};
use crate::lifecycle::Ms;
use crate::scheduler::Scheduler;

impl Book {
    /// `uid`'s create met `earlier`'s QueuedJob of its name, and the core keeps that one: the
    /// job is followed no more (it has no record on the hub, so no copy of it exists) and waits
    /// for the name from `now`. Returns whether it was followed.
    pub fn name_held(&mut self, sched: &mut Scheduler, uid: &str, earlier: &str, now: Ms) -> bool {
        let Some(e) = self.jobs.get(uid) else {
            return false;
        };
        // A job with a record on the hub writes no create; nothing else can meet a name.
        if e.written.is_some() {
            return false;
        }
        if let Some(e) = self.jobs.remove(uid) {
            if let Some(id) = e.id {
                done(sched, id);
                self.by_id.remove(&id);
            }
            self.sent.forget(uid);
        }
        let settle = self.settings.record_settle;
        self.names_held
            .retain(|_, (_, since)| now.saturating_sub(*since) < settle);
        self.names_held
            .insert(uid.to_string(), (earlier.to_string(), now));
        true
    }

    /// The earlier job whose QueuedJob `uid` waits for, known from a write that met it within
    /// the settle time (see the module comment); expired entries are let go.
    pub fn waits_for_name(&self, uid: &str, now: Ms) -> Option<&str> {
        self.names_held
            .get(uid)
            .filter(|(_, since)| now.saturating_sub(*since) < self.settings.record_settle)
            .map(|(earlier, _)| earlier.as_str())
    }
}
