//! Wakeups: which classes the next pass visits. Owns the dirty list, a job entering or leaving
//! its class, and what a fleet or tree change marks to be looked at again.

use super::{ClassId, JobId, Scheduler, ShapeId};
use crate::quota::Strategy;
use crate::resources::PODS;

impl Scheduler {
    pub(super) fn capacity_freed(&mut self) {
        for c in self.fleet_blocked.drain() {
            self.mark_dirty(c);
        }
    }

    /// After an admission: the classes waiting for the fleet whose head quota may now move
    /// ([`Scheduler::quota_may_move`]: over a max since, or able to reclaim with what it is
    /// short of now) are visited again, as every head is in the reference's next pass.
    pub(super) fn admission_wakes(&mut self) {
        let mut blocked = std::mem::take(&mut self.fleet_blocked);
        let woken = blocked.take_where(|c| {
            self.classes[c]
                .jobs
                .first()
                .is_some_and(|&(_, j)| self.quota_may_move(j))
        });
        self.fleet_blocked = blocked;
        for c in woken {
            self.mark_dirty(c);
        }
    }

    /// Class `c` sleeps on tree node `n` (over a max there) until a release below `n`.
    pub(super) fn quota_asleep(&mut self, n: usize, c: ClassId) {
        if self.quota_blocked.len() <= n {
            self.quota_blocked.resize_with(n + 1, Default::default);
        }
        self.quota_blocked[n].insert(c);
    }

    pub(super) fn mark_dirty(&mut self, c: ClassId) {
        if !self.classes[c].dirty {
            self.classes[c].dirty = true;
            self.dirty.push(c);
        }
    }

    pub(super) fn enqueue(&mut self, job: JobId) {
        let c = self.jobs[job].class;
        // Considered from the next pass on: reasons from earlier passes are not its own.
        self.jobs[job].enqueued_cycle = self.cycle_no + 1;
        let key = (self.jobs[job].order, job);
        let old = self.classes[c].jobs.first().copied();
        self.classes[c].jobs.insert(key);
        self.head_changed(c, self.queues.leaf(self.jobs[job].queue), old);
        self.mark_dirty(c);
    }

    /// Back in the queue at the end of this cycle (preemption victims): no pass of the cycle
    /// that preempted it sees it, whatever else wakes its class.
    pub(super) fn enqueue_later(&mut self, job: JobId) {
        self.held.push(job);
    }

    pub(super) fn dequeue(&mut self, job: JobId) {
        let c = self.jobs[job].class;
        let key = (self.jobs[job].order, job);
        let old = self.classes[c].jobs.first().copied();
        if !self.classes[c].jobs.remove(&key) {
            return;
        }
        let queue = self.jobs[job].queue;
        self.head_changed(c, self.queues.leaf(queue), old);
        if self.queues.strategy(queue) == Strategy::StrictFIFO {
            self.mark_dirty(c);
        }
    }

    pub(super) fn fleet_changed(&mut self) {
        self.empty_clusters.clear();
        for f in &mut self.fits {
            f.empty.clear();
        }
        for s in &mut self.shapes {
            s.key_res = PODS;
        }
        let shapes: Vec<ShapeId> = (0..self.shapes.len()).collect();
        for s in shapes {
            let d = self.shapes[s].quota_demand.clone();
            self.shapes[s].key_res = self.key_resource(&d);
        }
        self.recheck_inadmissible();
        self.capacity_freed();
    }

    pub(super) fn all_changed(&mut self) {
        self.fleet_blocked.clear();
        self.quota_blocked.iter_mut().for_each(|s| s.clear());
        self.reclaim_blocked.clear();
        self.hold_blocked.clear();
        for c in 0..self.classes.len() {
            self.mark_dirty(c);
        }
        self.recheck_inadmissible();
    }
}
