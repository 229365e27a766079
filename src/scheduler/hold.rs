//! A8, held behind a job that may take it back: on a leaf whose jobs are preempted by priority
//! (R8), a head that may reclaim (R2) but found no member where its victims gone let it fit
//! holds its queue's jobs of lower priority. Each of them, admitted, would be one more job it
//! may take back as soon as room appears; held, it waits instead of being started and stopped.
//! Owns which head holds a job, and waking the classes held once their hold lapses.

use super::{ClassId, JobId, Scheduler};
use crate::estimate;

impl Scheduler {
    /// The job of `job`'s queue that holds it (A8): the best head of another class of its
    /// queue, of higher priority, whose last visit (since it was queued) recorded a hold, and
    /// which is still that class's head. None on a leaf that does not preempt by priority.
    pub(super) fn holder(&self, job: JobId) -> Option<JobId> {
        let j = &self.jobs[job];
        if !self.preempts_by_priority(self.queues.leaf(j.queue)?) {
            return None;
        }
        self.queue_classes
            .get(&j.queue)?
            .iter()
            .filter(|&&c| c != j.class)
            .filter_map(|&c| self.holding(c))
            .filter(|&h| self.jobs[h].priority > j.priority)
            .min_by_key(|&h| (self.jobs[h].order, h))
    }

    /// The head of class `c` when its last visit recorded a hold that still stands.
    fn holding(&self, c: ClassId) -> Option<JobId> {
        let class = &self.classes[c];
        let h = class.holds?;
        let &(_, head) = class.jobs.first()?;
        (head == h && class.reason_cycle >= self.jobs[h].enqueued_cycle).then_some(h)
    }

    /// Whether `job` (a head that waits) holds its queue's jobs of lower priority: it may
    /// reclaim (R2, `may_reclaim`) on a leaf that preempts by priority, and room for it will
    /// come ([`Self::fits_once_jobs_end`]).
    pub(super) fn holds_after_wait(&mut self, job: JobId, may_reclaim: bool) -> bool {
        may_reclaim
            && self
                .queues
                .leaf(self.jobs[job].queue)
                .is_some_and(|leaf| self.preempts_by_priority(leaf))
            && self.fits_once_jobs_end(job)
    }

    /// Whether `job` fits some reachable candidate member once every job admitted there has
    /// ended (their reservations gone; what else runs on its nodes stays). A job that waits
    /// for a member that is unreachable, or for room that muster's jobs do not hold, would
    /// hold its queue for nothing.
    fn fits_once_jobs_end(&mut self, job: JobId) -> bool {
        let shape_id = self.jobs[job].shape;
        let fit = self.shapes[shape_id].fit;
        for ci in 0..self.clusters.len() {
            if !self.clusters[ci].reachable || !self.candidate(shape_id, ci) {
                continue;
            }
            self.ensure_eligible(fit, ci);
            let mut c = self.clusters[ci].clone();
            for n in &mut c.nodes {
                n.reserved.clear();
            }
            let groups = &self.shapes[shape_id].groups;
            if estimate::place(&c, groups, self.eligible_on(fit, ci), &self.table).is_ok() {
                return true;
            }
        }
        false
    }

    /// The held classes whose head no holder holds any more (their holder was admitted, left,
    /// or waits now without a hold), taken out of the held set; `queue` limits the look to
    /// one queue's classes.
    pub(super) fn holds_lapsed(&mut self, queue: Option<usize>) -> Vec<ClassId> {
        if self.hold_blocked.is_empty() {
            return Vec::new();
        }
        let held: Vec<ClassId> = match queue {
            Some(q) => self.queue_classes.get(&q).map_or_else(Vec::new, |cs| {
                cs.iter()
                    .copied()
                    .filter(|c| self.hold_blocked.contains(c))
                    .collect()
            }),
            None => self.hold_blocked.iter().copied().collect(),
        };
        let mut lapsed: Vec<ClassId> = held
            .into_iter()
            .filter(|&c| {
                self.classes[c]
                    .jobs
                    .first()
                    .is_none_or(|&(_, head)| self.holder(head).is_none())
            })
            .collect();
        lapsed.sort_unstable();
        for c in &lapsed {
            self.hold_blocked.remove(c);
        }
        lapsed
    }

    /// Marks the held classes whose hold lapsed to be visited in the next pass.
    pub(super) fn wake_lapsed_holds(&mut self) {
        for c in self.holds_lapsed(None) {
            self.mark_dirty(c);
        }
    }
}
