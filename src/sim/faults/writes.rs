//! The simulated controller's record writes: the batches the controller's own outbox
//! (`lifecycle::outbox`) plans, sent at the end of a pass and landing one to three passes later
//! while faults last (so batches out together land in any order), each write lost to a crash,
//! failed, or landed with or without its answer. The hub has no fence: a batch a replica sent
//! while it led lands after another replica took over, unless the replica gave it up before
//! it reached the API server ([`Process::land_late`]).

use super::{Process, TICK, World};
use crate::lifecycle::outbox::{self, Batch, Candidate, Landed};
use crate::lifecycle::{Defect, Record};

impl Process {
    /// The batches due land (while faults last, a batch lands one to three passes after it
    /// was sent, so batches out together land in any order); then the next batch the outbox
    /// plans is sent. The outbox is the controller's own (`lifecycle::outbox`).
    pub(super) fn write(&mut self, w: &mut World) {
        let (mut due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.sent)
            .into_iter()
            .partition(|(at, _)| *at <= w.now);
        self.sent = later;
        due.sort_by_key(|(at, _)| *at);
        for (_, batch) in due {
            self.land(w, batch);
            if self.crashed {
                return;
            }
        }
        let plan = self.outbox.plan(&self.book, |_, _, changed| {
            changed.then_some(Candidate::Send(()))
        });
        if let Some(batch) = self.outbox.sending(&mut self.book, plan) {
            let late = if w.now < w.fault_end {
                w.rng.below(3)
            } else {
                0
            };
            self.sent.push((w.now + (1 + late) * TICK, batch));
        }
    }

    /// A batch lands: its records that free capacity, then the rest if the outbox lets them
    /// go; what landed is told to the outbox.
    fn land(&mut self, w: &mut World, batch: Batch<()>) {
        let freeing = batch.freeing();
        let mut out: Vec<(String, Record, Landed)> = Vec::new();
        for i in batch.frees {
            let l = self.put(w, &i.uid, &i.record);
            if self.crashed {
                return;
            }
            out.push((i.uid, i.record, l));
        }
        let goes = outbox::rest_goes(out.iter().map(|(_, _, l)| l), self.defect);
        for i in batch.rest {
            let l = if goes {
                self.put(w, &i.uid, &i.record)
            } else {
                Landed::NotSent
            };
            if self.crashed {
                return;
            }
            out.push((i.uid, i.record, l));
        }
        self.outbox.landed(
            &mut self.book,
            freeing,
            out.iter().map(|(u, r, l)| (u.as_str(), r, l)),
        );
    }

    /// A replica that no longer leads sends nothing more, but what it sent while it led is on
    /// its way: each batch due lands as any other (the API server does not know who leads),
    /// unless the replica gave it up before it reached the API server (half of them: the
    /// controller cancels every write when the lease it was sent under runs out).
    pub(super) fn land_late(&mut self, w: &mut World) {
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.sent)
            .into_iter()
            .partition(|(at, _)| *at <= w.now);
        self.sent = later;
        for (_, batch) in due {
            if w.rng.chance(500) {
                w.log(format!(
                    "a batch of {} records of the replaced leader (term {}) given up before it left",
                    batch.frees.len() + batch.rest.len(),
                    self.term
                ));
                continue;
            }
            w.log(format!(
                "a batch of the replaced leader (term {}) lands late",
                self.term
            ));
            self.land(w, batch);
            if self.crashed {
                return;
            }
        }
    }

    /// One record's write: lost to a crash, failed, landed with its answer lost, or written.
    fn put(&mut self, w: &mut World, uid: &str, r: &Record) -> Landed {
        let roll = w.rng.below(1000);
        let failing = w.now < w.fault_end;
        if failing && w.rng.chance(4) {
            w.log(format!("controller crashes before writing {uid}"));
            self.crashed = true;
            return Landed::NotSent;
        }
        if failing && roll < 40 {
            w.log(format!("write {uid} {} failed", r.phase.as_str()));
            return Landed::Failed("refused".into());
        }
        if r.pods_done && r.phase.placed() {
            w.freed_early.insert(uid.to_string());
        }
        let name = w.jobs.get(uid).map(|j| j.queued_name()).unwrap_or_default();
        match w.store.put(&name, uid, r) {
            Err(earlier) => {
                w.log(format!(
                    "write {uid} refused: QueuedJob {name} is being deleted with {earlier}'s record"
                ));
                return Landed::Failed("being deleted".into());
            }
            Ok(Some(earlier)) => w.log(format!(
                "QueuedJob {name} taken over by {uid}: {earlier}'s record is gone"
            )),
            Ok(None) => {}
        }
        // The QueuedJob is made with muster's finalizer (one made without it gets it at this
        // write; a deleted one cannot, and keeps the one it has).
        if self.defect != Some(Defect::NoRecordFinalizer) && !w.store.terminating.contains(uid) {
            w.store.finalized.insert(uid.to_string());
        }
        if failing && roll < 70 {
            w.log(format!(
                "write {uid} {} applied, answer lost",
                r.phase.as_str()
            ));
            return Landed::Failed("no answer".into());
        }
        w.log(format!(
            "write {uid} {} {}{}",
            r.phase.as_str(),
            r.cluster.as_deref().unwrap_or("-"),
            if r.orphans.is_empty() {
                String::new()
            } else {
                format!(" (old copies: {:?})", r.orphans.keys().collect::<Vec<_>>())
            }
        ));
        Landed::Written
    }
}
