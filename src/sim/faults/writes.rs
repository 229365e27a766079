//! The simulated controller's record writes: the batches the controller's own outbox
//! (`lifecycle::outbox`) plans, sent at the end of a pass and landing one to three passes later
//! while faults last (so batches out together land in any order), each write lost to a crash,
//! failed, or landed with or without its answer. The hub has no fence: a batch a replica sent
//! while it led lands after another replica took over, unless the replica gave it up before
//! it reached the API server ([`Process::land_late`]).

use serde_json::json;

use std::rc::Rc;

use super::world::{StatusWrite, Wrote};
use super::{Process, TICK, World};
use crate::lifecycle::outbox::{self, Batch, Candidate, Item, Landed};
use crate::lifecycle::patch::{patch_for, unsure_after};
use crate::lifecycle::wire::to_status;
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
        // Each changed record as the controller writes it: its status (the record's wire form),
        // as a merge patch from what this process believes the hub holds (the last write known
        // to have landed, else what it read), covering every key a write since may have left.
        // What its watch shows of the QueuedJobs (taken after the landing above, which writes).
        let hub = self.hub_store(w);
        let (known, versions, store, defect) =
            (&self.known, &self.known_versions, &*hub, self.defect);
        let plan = self
            .outbox
            .plan((&self.book, w.now), |uid, record, changed| {
                if !changed {
                    return None;
                }
                let status = serde_json::to_value(to_status(record, Vec::new())).ok()?;
                let (held, unsure) = match known.get(uid) {
                    Some((held, unsure)) => (Some(held), unsure.as_ref()),
                    None => (store.statuses.get(uid), None),
                };
                let empty = json!({});
                let held_now = held.unwrap_or(&empty);
                if unsure.is_none() && held_now == &status {
                    return Some(Candidate::Same);
                }
                Some(Candidate::Send(StatusWrite {
                    patch: patch_for(held_now, unsure, &status, defect),
                    create: self.book.get(uid).is_none_or(|e| e.written.is_none()),
                    take_over: self.outbox.may_take(uid).map(str::to_string),
                    version: versions
                        .get(uid)
                        .or_else(|| store.versions.get(uid))
                        .copied(),
                    status,
                }))
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
    fn land(&mut self, w: &mut World, batch: Batch<StatusWrite>) {
        let freeing = batch.freeing();
        let mut out: Vec<(Item<StatusWrite>, Landed)> = Vec::new();
        for i in batch.frees {
            let l = self.put(w, &i.uid, &i.record, &i.write);
            if self.crashed {
                return;
            }
            out.push((i, l));
        }
        let goes = outbox::rest_goes(out.iter().map(|(_, l)| l), self.defect);
        for i in batch.rest {
            let l = if goes {
                self.put(w, &i.uid, &i.record, &i.write)
            } else {
                Landed::NotSent
            };
            if self.crashed {
                return;
            }
            out.push((i, l));
        }
        let back = self.outbox.landed(
            (&mut self.book, &mut self.sched),
            (freeing, w.now),
            out.iter().map(|(i, l)| (i.uid.as_str(), &i.record, l)),
        );
        for (uid, earlier) in back {
            w.log(format!(
                "{uid} goes back to the intake: the core keeps {earlier}'s QueuedJob of its name"
            ));
        }
        // What the process now believes the hub holds: a landed status exactly; after a write
        // without a clear outcome, the keys it may have left.
        for (i, l) in out {
            if matches!(l, Landed::NotSent | Landed::NameHeld(_)) {
                continue;
            }
            let held = w.store.statuses.get(&i.uid).cloned();
            let e = self
                .known
                .entry(i.uid.clone())
                .or_insert_with(|| (held.unwrap_or_else(|| json!({})), None));
            e.1 = unsure_after(e.1.as_ref(), &i.write.status, &l);
            if l == Landed::Written {
                e.0 = i.write.status;
                if let Some(v) = w.store.versions.get(&i.uid) {
                    self.known_versions.insert(i.uid.clone(), *v);
                }
            } else {
                self.known_versions.remove(&i.uid);
            }
        }
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
    fn put(&mut self, w: &mut World, uid: &str, r: &Record, write: &StatusWrite) -> Landed {
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
        if r.phase == crate::lifecycle::Phase::Running
            && self
                .book
                .get(uid)
                .and_then(|e| e.written.as_ref())
                .is_some_and(|h| {
                    h.phase == crate::lifecycle::Phase::Admitted && h.records_admission(r)
                })
        {
            w.folded.insert(uid.to_string());
        }
        let name = w.jobs.get(uid).map(|j| j.queued_name()).unwrap_or_default();
        match Rc::make_mut(&mut w.store).put(&name, uid, write, self.defect) {
            Err(why) => {
                w.log(format!("write {uid} refused: QueuedJob {name} {why}"));
                return Landed::Failed(why);
            }
            Ok(Wrote::NameHeld(h)) => {
                w.log(format!(
                    "write {uid}: QueuedJob {name} holds {}'s record{}; nothing taken over",
                    h.uid,
                    if h.terminating {
                        " (being deleted)"
                    } else {
                        ""
                    }
                ));
                return Landed::NameHeld(h);
            }
            Ok(Wrote::Done(Some(note))) => w.log(format!("write {uid}: QueuedJob {name} {note}")),
            Ok(Wrote::Done(None)) => {}
        }
        // The QueuedJob is made with muster's finalizer (one made without it gets it at this
        // write; a deleted one cannot, and keeps the one it has).
        if self.defect != Some(Defect::NoRecordFinalizer) && !w.store.terminating.contains(uid) {
            Rc::make_mut(&mut w.store).finalized.insert(uid.to_string());
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
