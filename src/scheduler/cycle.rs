//! The admission cycle itself: woken queues' heads in order (guaranteed jobs before borrowers),
//! each admitted on a member, admitted by reclaiming quota from borrowers, or told why it waits.

use super::*;

impl Scheduler {
    // ----- the cycle ------------------------------------------------------------------------

    /// One admission cycle over every queue whose situation changed since it last failed.
    /// Decisions are already applied to the state (reservations, quota) when returned.
    pub fn cycle(&mut self) -> Vec<Decision> {
        let mut out = Vec::new();
        self.fair_used.clear();
        // Capacity freed inside a pass (preemption) is offered to the blocked queues in a
        // further pass, until a pass moves nothing; bounded so that a cycle always ends.
        for _ in 0..8 {
            if !self.pass(&mut out) {
                break;
            }
        }
        // Preemption victims are back in their queues for the next cycle, not this one.
        for v in std::mem::take(&mut self.held) {
            if self.jobs[v].state == JobState::Pending {
                self.enqueue(v);
            }
        }
        for c in std::mem::take(&mut self.fair_limited) {
            self.mark_dirty(c);
        }
        out
    }

    /// Whether a cycle now could decide anything new (some queue changed since it last failed).
    pub fn has_work(&self) -> bool {
        !self.dirty.is_empty()
    }

    /// One pass over the woken queues; true when it admitted or preempted something. Queues
    /// whose best waiting job stays within the guarantees (`min`) on its path go first, in
    /// queue order; queues whose best job would borrow come after them. So a borrower never
    /// takes, in the same pass, capacity that a guaranteed job then has to reclaim from it by
    /// preemption, and no job overtakes a better one of its own queue to do so.
    fn pass(&mut self, out: &mut Vec<Decision>) -> bool {
        self.cycle_no += 1;
        let mut moved = false;
        let mut reclaimed = false;
        let mut round = self.fair_round();
        #[cfg(debug_assertions)]
        {
            self.heads_fresh();
            let (scratch, kept) = self.heads_from_scratch();
            debug_assert_eq!(kept, scratch, "the first waiting head below each node");
        }
        // A8: classes held behind a job that was admitted or left since are visited again.
        self.wake_lapsed_holds();
        if self.config.wake_every_class {
            for c in 0..self.classes.len() {
                if !self.classes[c].jobs.is_empty() {
                    self.mark_dirty(c);
                }
            }
        }
        let dirty = std::mem::take(&mut self.dirty);
        // Queues (by leaf) whose best waiting job (of any class, woken or not) would borrow at
        // the start of the pass: in the first round none of their jobs goes, so that no job of
        // theirs overtakes a better one of the same queue.
        let deferred = self.deferred_leaves(&dirty);
        // Heads that would borrow go straight to the second round (see `first_round_push`).
        let mut borrowing: Vec<(JobOrder, ClassId)> = Vec::new();
        for c in dirty {
            self.classes[c].dirty = false;
            if let Some(&(o, _)) = self.classes[c].jobs.iter().next() {
                self.first_round_push(&mut round, &mut borrowing, &deferred, o, c);
            }
        }
        for guaranteed_only in [true, false] {
            if !guaranteed_only {
                for (o, c) in borrowing.drain(..) {
                    self.fair_push(&mut round, o, c);
                }
            }
            // A7: the heads in fair order (`fair`), each queue in its own order.
            while let Some((o, c)) = self.fair_pop(&mut round) {
                // Once a reclaim (in either round) freed capacity or quota, the borrowers left
                // wait for the next pass: its guaranteed jobs go first, and would otherwise
                // reclaim at once what these took.
                if !guaranteed_only && reclaimed {
                    self.mark_dirty(c);
                    for (_, c) in round.drain() {
                        self.mark_dirty(c);
                    }
                    break;
                }
                let Some(&(_, job)) = self.classes[c].jobs.iter().next() else {
                    continue;
                };
                // Without a tree nothing borrows. A job that would borrow now goes in the
                // second round.
                if guaranteed_only && self.defers(job, &deferred) {
                    borrowing.push((o, c));
                    continue;
                }
                if let Some(n) = self.same_quota_wait(c, job) {
                    // The same job over the same max, unable to reclaim: no decision, the
                    // reason is kept, and it sleeps on the highest node where it is over one.
                    self.quota_asleep(n, c);
                    continue;
                }
                if self.certain_to_wait(c, job) {
                    // The same job waits for the same reason: no decision, the reason is kept.
                    self.fleet_blocked.insert(c);
                    continue;
                }
                let decided = out.len();
                let held_before = self.classes[c].holds.is_some();
                match self.try_admit(job, out) {
                    Ok(by_reclaim) => {
                        moved = true;
                        self.classes[c].holds = None;
                        reclaimed |= by_reclaim;
                        // Its leaf uses more now, and each victim's leaf less: the keys on
                        // those paths are recomputed (a share depends on its node's usage).
                        self.fair_admitted(&mut round, job);
                        for d in &out[decided..] {
                            if let Decision::Preempt { job: v, .. } = d {
                                self.fair_admitted(&mut round, *v);
                            }
                        }
                        if guaranteed_only && by_reclaim {
                            // Usage fell on the victims' paths: a head set aside may borrow
                            // nothing now, so each is read again at its turn (A5).
                            for (o, c) in borrowing.drain(..) {
                                self.fair_push(&mut round, o, c);
                            }
                        }
                        if let Some(&(o, _)) = self.classes[c].jobs.iter().next() {
                            if guaranteed_only {
                                self.first_round_push(&mut round, &mut borrowing, &deferred, o, c);
                            } else {
                                self.fair_push(&mut round, o, c);
                            }
                        }
                    }
                    Err(block) => {
                        let reason = block.reason.clone();
                        let class = &mut self.classes[c];
                        class.reason = Some(reason.clone());
                        class.reason_cycle = self.cycle_no;
                        class.reason_job = None;
                        class.over_max = match (&block.on, block.may_reclaim) {
                            (Blocker::Quota(_), false) => block.over.map(|s| (job, *s)),
                            _ => None,
                        };
                        class.holds = block.holds.then_some(job);
                        if block.may_reclaim {
                            self.reclaim_blocked.insert(c);
                        }
                        match block.on {
                            Blocker::Fleet => {
                                class.reason_job = Some(job);
                                self.fleet_blocked.insert(c);
                            }
                            Blocker::Quota(n) => {
                                self.quota_asleep(n, c);
                                if block.may_reclaim {
                                    self.fleet_blocked.insert(c);
                                }
                            }
                            Blocker::Held => {
                                self.hold_blocked.insert(c);
                            }
                        }
                        out.push(Decision::Wait { job, reason });
                    }
                }
                // A8: a head that held its queue's jobs of lower priority and no longer does
                // (admitted, or waiting now without a hold) lets them be visited in this pass.
                if held_before && self.classes[c].holds.is_none() {
                    let queue = self.jobs[job].queue;
                    for h in self.holds_lapsed(Some(queue)) {
                        if let Some(&(o, _)) = self.classes[h].jobs.first() {
                            if guaranteed_only {
                                self.first_round_push(&mut round, &mut borrowing, &deferred, o, h);
                            } else {
                                self.fair_push(&mut round, o, h);
                            }
                        }
                    }
                }
            }
        }
        moved
    }

    /// Adds a head to the first round, or sets it aside for the second when it would borrow
    /// now ([`Self::defers`]): A5 reads a head when it becomes one (and again at its turn),
    /// so a borrower never enters the first round's tournament. Until a preemption, usage on
    /// its path only grows by admissions (an admission of a job of its leaf of lower priority
    /// adds as much to what it may free), so it would still borrow at its turn. A preemption
    /// lowers usage; then every head set aside goes back to the round, read again at its turn
    /// (A5), those whose turn had passed as well.
    fn first_round_push(
        &self,
        round: &mut fair::Round,
        borrowing: &mut Vec<(JobOrder, ClassId)>,
        deferred: &[bool],
        o: JobOrder,
        c: ClassId,
    ) {
        match self.classes[c].jobs.first() {
            Some(&(_, job)) if self.defers(job, deferred) => borrowing.push((o, c)),
            _ => self.fair_push(round, o, c),
        }
    }

    /// Whether `job`, a head, goes in the second round: its queue's best job would borrow at
    /// the start of the pass (`deferred`), or it would borrow now. Without a tree nothing
    /// borrows.
    fn defers(&self, job: JobId, deferred: &[bool]) -> bool {
        self.queues.leaf(self.jobs[job].queue).is_some_and(|leaf| {
            deferred.get(leaf) == Some(&true) || !self.borrows_nothing(job, leaf)
        })
    }

    /// Whether `job` stays within the guarantees (min) at every node of its path, with its
    /// queue's jobs of lower priority that it may preempt counted as gone.
    fn borrows_nothing(&self, job: JobId, leaf: usize) -> bool {
        let Some(q) = &self.quota else {
            return true;
        };
        let d = &self.shapes[self.jobs[job].shape].quota_demand;
        // Jobs gone only lower usage: within the mins as things are, it is within them with
        // its queue's jobs of lower priority gone as well, and without such jobs there is
        // nothing else to count.
        let now = q.within_min_freeing(leaf, d, &Demand::default());
        let answer = now
            || (self.any_lower_in_leaf(job, leaf)
                && q.within_min_freeing(leaf, d, &self.charge_of(&self.lower_in_leaf(job, leaf))));
        debug_assert_eq!(
            answer,
            q.within_min_freeing(leaf, d, &self.charge_of(&self.lower_in_leaf(job, leaf))),
            "borrows nothing, read first without the jobs it may preempt"
        );
        answer
    }

    /// The leaves of the woken classes whose queue's best waiting job, over all its classes,
    /// would borrow now ([`Self::borrows_nothing`]), marked by tree node (empty without a tree).
    fn deferred_leaves(&self, dirty: &[ClassId]) -> Vec<bool> {
        let Some(q) = &self.quota else {
            return Vec::new();
        };
        let mut deferred = vec![false; q.tree.nodes.len()];
        let mut queues: Vec<usize> = dirty
            .iter()
            .filter_map(|&c| {
                self.classes[c]
                    .jobs
                    .first()
                    .map(|&(_, j)| self.jobs[j].queue)
            })
            .collect();
        queues.sort_unstable();
        queues.dedup();
        for queue in queues {
            let Some(leaf) = self.queues.leaf(queue).filter(|&l| l < deferred.len()) else {
                continue;
            };
            if deferred[leaf] {
                continue;
            }
            let best = self.queue_best(queue, leaf);
            if let Some(job) = best
                && !self.borrows_nothing(job, leaf)
            {
                deferred[leaf] = true;
            }
        }
        deferred
    }

    /// The best waiting job of `queue`, on `leaf`, over all its classes: the first head of its
    /// leaf ([`Self::leaf_best`]).
    fn queue_best(&self, queue: usize, leaf: usize) -> Option<JobId> {
        let best = self.leaf_best(leaf);
        // Every test (debug) build holds it to a read of every class of the queue.
        debug_assert_eq!(
            best,
            self.queue_classes.get(&queue).and_then(|cs| {
                cs.iter()
                    .filter_map(|&c| self.classes[c].jobs.first().copied())
                    .min()
                    .map(|(_, j)| j)
            }),
            "the best waiting job of queue {queue}"
        );
        best
    }

    /// Whether a visit of class `c`, whose head is `job`, would certainly end in the same wait
    /// as its last one: the same job last waited there for the fleet (since it was queued), its
    /// pods fit no candidate member by what is known ([`Self::fits_nowhere`]), and quota cannot
    /// move it ([`Self::quota_move`]): not at all, or only within its leaf's min while there is
    /// nothing to take ([`Self::nothing_to_take`]).
    /// Such a visit is skipped: no `Wait` decision, and the reason shown stays the one of the
    /// last visit made.
    fn certain_to_wait(&mut self, c: ClassId, job: JobId) -> bool {
        let class = &self.classes[c];
        let j = &self.jobs[job];
        if class.reason_job != Some(job) || class.reason_cycle < j.enqueued_cycle {
            return false;
        }
        self.fits_nowhere(job)
            && match self.quota_move(job) {
                QuotaMove::No => true,
                QuotaMove::WithinMin => self.nothing_to_take(job),
                QuotaMove::Yes => false,
            }
    }

    /// For a head that waits for the fleet and that quota may move only by being within its
    /// leaf's min ([`QuotaMove::WithinMin`]: within every max, no job of its queue to preempt
    /// for it, no node above its leaf preempting for fairness), whether it would still find
    /// nothing to take: its leaf does not preempt by priority (so no A8 hold either), and no
    /// node below the root borrows a resource it is short of on the fleet
    /// ([`Self::short_of`]), so that no job of another leaf is a candidate ([`Self::reclaim`]
    /// takes one only from a side that borrows what the job is short of). Only an admission
    /// makes a node borrow, and every admission wakes the heads waiting for the fleet that
    /// quota may move ([`Self::admission_wakes`]), these among them.
    fn nothing_to_take(&mut self, job: JobId) -> bool {
        let Some(leaf) = self.queues.leaf(self.jobs[job].queue) else {
            return false;
        };
        if self.preempts_by_priority(leaf) {
            return false;
        }
        let short = self.short_of(job, leaf, None);
        self.quota
            .as_ref()
            .is_some_and(|q| !short.iter().any(|&r| q.anyone_borrows(r)))
    }

    /// Where class `c`, whose head is `job`, sleeps when a visit would certainly end in the
    /// same wait over a max as its last one: the same job last waited there (since it was
    /// queued) and could not reclaim; it is over a max now with the same shortfall (so the
    /// same reason: node, resource, usage, request and max); and it still cannot reclaim
    /// ([`Self::try_admit`]'s tests: no job of its queue it may preempt, no fairness above its
    /// leaf, and not within its leaf's min in every resource it is short of). Such a visit is
    /// skipped: no `Wait` decision, and the reason shown stays the one of the last visit.
    fn same_quota_wait(&self, c: ClassId, job: JobId) -> Option<usize> {
        let class = &self.classes[c];
        let j = &self.jobs[job];
        let (last, s) = class.over_max.as_ref()?;
        if *last != job || class.reason_cycle < j.enqueued_cycle {
            return None;
        }
        let q = self.quota.as_ref()?;
        let leaf = self.queues.leaf(j.queue)?;
        let d = &self.shapes[j.shape].quota_demand;
        if q.check(leaf, d).err().as_ref() != Some(s)
            || self.any_lower_in_leaf(job, leaf)
            || self.fairness_above(leaf)
            || self.may_reclaim(
                job,
                leaf,
                &self.over_max_short(job, leaf),
                &Demand::default(),
            )
        {
            return None;
        }
        Some(q.highest_over(leaf, d).unwrap_or(s.node))
    }

    /// Whether quota may make a visit of `job` end other than in a wait for the fleet
    /// ([`Self::quota_move`] is not [`QuotaMove::No`]). An admission can turn this on for a job
    /// that waits for the fleet (its path uses more; what it is short of changes), so
    /// admissions wake such jobs.
    pub(super) fn quota_may_move(&self, job: JobId) -> bool {
        self.quota_move(job) != QuotaMove::No
    }

    /// How quota may make a visit of `job` end other than in a wait for the fleet: it is over
    /// a max now, its queue's jobs of lower priority may be preempted for it (what they free
    /// may bring it within min), or sibling subtrees may be preempted for it (F1): `Yes`; else
    /// a resource it asks for stays within its leaf's min: `WithinMin`; else `No`.
    fn quota_move(&self, job: JobId) -> QuotaMove {
        let j = &self.jobs[job];
        let d = &self.shapes[j.shape].quota_demand;
        let (Some(q), Some(leaf)) = (&self.quota, self.queues.leaf(j.queue)) else {
            return QuotaMove::No;
        };
        if q.check(leaf, d).is_err()
            || self.any_lower_in_leaf(job, leaf)
            || self.fairness_above(leaf)
        {
            QuotaMove::Yes
        } else if d.iter().any(|(r, x)| {
            r != PODS && r != MAX_JOBS && x > 0 && q.used_of(leaf, r) + x <= q.min_of(leaf, r)
        }) {
            QuotaMove::WithinMin
        } else {
            QuotaMove::No
        }
    }

    /// Admits `job` (true: by reclaiming, with victims preempted) or says why it waits.
    fn try_admit(&mut self, job: JobId, out: &mut Vec<Decision>) -> Result<bool, Block> {
        let shape = self.jobs[job].shape;
        let queue = self.jobs[job].queue;
        let leaf = self.queues.leaf(queue);
        // A8: held behind a job of its queue that may take it back and waits for room.
        if let Some(h) = self.holder(job) {
            return Err(Block {
                reason: format!(
                    "held behind {} of higher priority ({}) in queue {}: that job may take back \
                     this queue's jobs of lower priority and waits for room on a member",
                    self.job_label(h),
                    self.jobs[h].priority,
                    self.queues.name(queue)
                ),
                on: Blocker::Held,
                may_reclaim: false,
                over: None,
                holds: false,
            });
        }
        let mut quota_short: Option<crate::quota::Shortfall> = None;
        if let (Some(q), Some(leaf)) = (&self.quota, leaf)
            && let Err(s) = q.check(leaf, &self.shapes[shape].quota_demand)
        {
            quota_short = Some(s);
        }
        let fit = if quota_short.is_none() {
            Some(self.find_cluster(job))
        } else {
            None
        };
        let fleet_reason = match fit {
            Some(Ok((ci, placement))) => {
                self.admit(job, ci, placement, out);
                return Ok(false);
            }
            Some(Err(r)) => Some(r),
            None => None,
        };
        // Preempt, if this job is within its min (with its queue's jobs of lower priority gone,
        // where the leaf allows preempting them): reclaim guaranteed quota from borrowing
        // subtrees, and there preempt such jobs of its own queue.
        let mut may_reclaim = false;
        // R2 held (before preemption for fairness is considered): A8's hold.
        let mut r2 = false;
        if let Some(leaf) = leaf {
            let own = self.lower_in_leaf(job, leaf);
            let short = self.short_of(job, leaf, quota_short.as_ref());
            may_reclaim = self.may_reclaim(job, leaf, &short, &self.charge_of(&own));
            r2 = may_reclaim;
            if let Some((victims, ci, placement)) = self.reclaim(job, leaf, &short, &own) {
                let label = self.job_label(job);
                let qname = self.queues.name(queue).to_string();
                let reclaim =
                    format!("preempted to reclaim quota guaranteed to {qname} (min) for {label}");
                let lower = format!(
                    "preempted in queue {qname} for {label} of higher priority ({})",
                    self.jobs[job].priority
                );
                let victims = victims
                    .into_iter()
                    .map(|v| {
                        let own = self.queues.leaf(self.jobs[v].queue) == Some(leaf);
                        (v, if own { lower.clone() } else { reclaim.clone() })
                    })
                    .collect();
                self.preempt(job, victims, out);
                self.admit(job, ci, placement, out);
                return Ok(true);
            }
            // F1–F5: or take back what a sibling subtree borrows beyond its fair part.
            if self.fairness_above(leaf) {
                may_reclaim = true;
                let class = self.jobs[job].class;
                if let Some(f) = self.preempt_for_fairness(job, class, leaf, &short) {
                    self.preempt(job, f.victims, out);
                    self.admit(job, f.cluster, f.placement, out);
                    return Ok(true);
                }
            }
        }
        // A8: whether it holds its queue's jobs of lower priority, as it waits.
        let holds = self.holds_after_wait(job, r2);
        match (quota_short, fleet_reason) {
            (Some(s), _) => {
                let q = self.quota.as_ref();
                let reason = q.map(|q| q.describe(&s, &self.table)).unwrap_or_default();
                // Woken by a release under the highest node where it is over a max: a release
                // elsewhere on that path (not under the first node found) may bring it within
                // that max, and so change what it is short of and whether it may reclaim.
                let node = leaf
                    .and_then(|l| q?.highest_over(l, &self.shapes[shape].quota_demand))
                    .unwrap_or(s.node);
                Err(Block {
                    reason,
                    on: Blocker::Quota(node),
                    may_reclaim,
                    over: Some(Box::new(s)),
                    holds,
                })
            }
            (None, Some(r)) => Err(Block {
                reason: r,
                on: Blocker::Fleet,
                may_reclaim,
                over: None,
                holds,
            }),
            (None, None) => Err(Block {
                reason: "no cluster fits".into(),
                on: Blocker::Fleet,
                may_reclaim,
                over: None,
                holds,
            }),
        }
    }

    /// The victims taken for `by`, each with its reason, as decisions.
    fn preempt(&mut self, by: JobId, victims: Vec<(JobId, String)>, out: &mut Vec<Decision>) {
        for (v, reason) in victims {
            self.jobs[v].preemptions += 1;
            self.jobs[v].last_wait = Some(reason.clone());
            out.push(Decision::Preempt { job: v, by, reason });
        }
    }

    pub(super) fn fits_now(&self, job: JobId, leaf: usize) -> bool {
        self.quota.as_ref().is_none_or(|q| {
            q.check(leaf, &self.shapes[self.jobs[job].shape].quota_demand)
                .is_ok()
        })
    }

    fn admit(&mut self, job: JobId, ci: usize, placement: Placement, out: &mut Vec<Decision>) {
        self.dequeue(job);
        let class = self.jobs[job].class;
        let c = &self.classes[class];
        if c.reason_cycle >= self.jobs[job].enqueued_cycle
            && let Some(r) = &c.reason
        {
            self.jobs[job].last_wait = Some(r.clone());
        }
        let nodes = placement.by_node(&self.clusters[ci]);
        // Above a min anywhere on its path once admitted: it makes its leaf a borrower that a
        // job waiting within its min may reclaim from.
        let borrows = !self.reclaim_blocked.is_empty()
            && self.queues.leaf(self.jobs[job].queue).is_some_and(|leaf| {
                let d = &self.shapes[self.jobs[job].shape].quota_demand;
                self.quota.as_ref().is_some_and(|q| {
                    let mut cur = Some(leaf);
                    while let Some(n) = cur {
                        if d.iter().any(|(r, x)| {
                            x > 0
                                && r != PODS
                                && r != MAX_JOBS
                                && q.used_of(n, r) + x > q.min_of(n, r)
                        }) {
                            return true;
                        }
                        cur = q.tree.nodes[n].parent;
                    }
                    false
                })
            });
        self.reserve(job, ci, placement.clone());
        self.admission_wakes();
        if borrows {
            for c in std::mem::take(&mut self.reclaim_blocked) {
                self.mark_dirty(c);
            }
        }
        out.push(Decision::Admit {
            job,
            cluster: self.clusters[ci].name.clone(),
            placement,
            nodes,
        });
    }
}

/// [`Scheduler::quota_move`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum QuotaMove {
    No,
    WithinMin,
    Yes,
}

struct Block {
    reason: String,
    on: Blocker,
    /// Within its leaf's min in what it is short of: it waits for victims whose going makes it
    /// fit, so more free capacity anywhere in the fleet may let it reclaim.
    may_reclaim: bool,
    /// Over a max: what it is short of ([`crate::quota::QuotaState::check`]).
    over: Option<Box<crate::quota::Shortfall>>,
    /// It holds its queue's jobs of lower priority (A8, [`Scheduler::holds_after_wait`]).
    holds: bool,
}

enum Blocker {
    Fleet,
    /// Held behind a job of its queue (A8): woken when that hold lapses.
    Held,
    /// Over a max on its path: the highest such node, whose subtree's releases wake it.
    Quota(usize),
}
