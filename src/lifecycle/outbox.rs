//! The outbox: which lifecycle records go to the hub, in what batches, and when a batch may go.
//! Decided here once, for the hub controller (`controller::record` composes each status,
//! `controller::writes` sends the batches) and for the fault simulation, which lands the same
//! batches in any order.
//!
//! The rule that keeps quota true across crashes: nothing that may use capacity a record frees
//! becomes durable before that record. So a batch holds first every record that frees capacity
//! (a job leaving its member), and its other records go only once every one of those landed
//! ([`rest_goes`]); a batch is sent only while no batch with such records is out; and while a
//! job whose record now frees capacity still has an earlier write out, only records that free
//! capacity go. At most one write per job is out, and at most [`BATCHES`] batches.
//!
//! What the hub holds is known only from writes that landed with an answer. A write that failed
//! or got none may have landed all the same, and one still out may land at any time: while
//! either may have put a charged record on the hub, a record that is not charged frees
//! capacity, and a job whose hub record is unsure is written again even if its record equals
//! the last one known to have landed.

use std::collections::BTreeMap;

use super::tidy::{self, Name};
use super::{Book, Defect, Entry, Ms, Phase, Record, Settings};
use crate::scheduler::Scheduler;

/// Batches out at once.
pub const BATCHES: usize = 4;
/// Records that free nothing sent in one batch at most (every one that frees capacity goes in
/// the batch), so that what a pass decides next is not held behind a long batch.
pub const REST_PER_BATCH: usize = 128;

/// What a driver says of a followed job's record it could write now.
pub enum Candidate<T> {
    /// Send it: `T` is what the driver needs to send it.
    Send(T),
    /// The hub holds what would be sent already.
    Same,
    /// Only figures shown to users changed: not before `wait` ms from now.
    Later(Ms),
}

/// One record in a batch.
pub struct Item<T> {
    pub uid: String,
    pub record: Record,
    pub write: T,
}

/// The records to send now: `frees` first, then `rest` only if [`rest_goes`].
pub struct Batch<T> {
    pub frees: Vec<Item<T>>,
    pub rest: Vec<Item<T>>,
}

impl<T> Batch<T> {
    /// It holds records that free capacity (no other batch goes until it is back).
    pub fn freeing(&self) -> bool {
        !self.frees.is_empty()
    }
}

/// What [`Outbox::plan`] found.
pub struct Plan<T> {
    pub batch: Option<Batch<T>>,
    /// Changed records whose status the hub holds already: durable as they are.
    pub held: Vec<(String, Record)>,
    /// The soonest a record held back for its figures is due (ms from now).
    pub wait: Option<Ms>,
}

/// How one write of a batch ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Landed {
    /// The hub holds it.
    Written,
    /// Failed, or no answer came (it may have landed all the same).
    Failed(String),
    /// Not sent: the replica did not lead where the write left, or a record that frees
    /// capacity failed before it.
    NotSent,
    /// Nothing written: the create of a job's first record met the QueuedJob of an earlier job
    /// of the same kind and name, which the write had not been let take over. The core decides
    /// ([`Outbox::landed`]): taken over by the next write, or the job waits for the name.
    NameHeld(NameHeld),
}

/// Whether a create that met `earlier`'s QueuedJob of its name (being deleted or not, as read
/// in that request) takes it over: only one the core let it take (`take_over`:
/// [`Outbox::may_take`]), and never one being deleted (a record written into it goes with it).
/// Asked by both executors; otherwise they report [`Landed::NameHeld`].
pub fn takes(take_over: Option<&str>, earlier: &str, terminating: bool) -> bool {
    !terminating && take_over == Some(earlier)
}

/// The QueuedJob of an earlier job that a create met, as the executor read it in that request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NameHeld {
    /// The earlier job's UID (the QueuedJob's `jobRef`).
    pub uid: String,
    /// Being deleted (it never is taken over: a record written into it goes with it).
    pub terminating: bool,
    /// The record it holds (None: none readable).
    pub record: Option<Box<Record>>,
}

/// Whether a batch's other records go, given how its records that free capacity ended: only
/// when every one of them landed.
pub fn rest_goes<'a>(frees: impl IntoIterator<Item = &'a Landed>, defect: Option<Defect>) -> bool {
    defect == Some(Defect::WritesUnordered) || frees.into_iter().all(|l| *l == Landed::Written)
}

/// The batches out, as the driver reported sending them.
#[derive(Debug, Default)]
pub struct Outbox {
    batches: usize,
    freeing: usize,
    /// The jobs whose record is being written, and whether that record is charged.
    writing: BTreeMap<String, bool>,
    /// Jobs whose hub record is unsure (a write failed or got no answer since the last one that
    /// landed), and whether any of those writes was of a charged record.
    unsure: BTreeMap<String, bool>,
    /// Jobs whose create may take over the QueuedJob of an earlier job of its name, and whose
    /// (the core's rule said so when a create met it: [`tidy::takes_over`]).
    takes: BTreeMap<String, String>,
}

impl Outbox {
    /// Whether a batch may be sent now: none that frees capacity is out (whatever is decided
    /// now may use that capacity), and fewer than [`BATCHES`] are.
    pub fn may_send(&self, defect: Option<Defect>) -> bool {
        (self.freeing == 0 || defect == Some(Defect::WritesUnordered)) && self.batches < BATCHES
    }

    /// The earlier job whose QueuedJob `uid`'s create may take over: the one the core let it
    /// take when its last create met it. Any other QueuedJob of its name is left as it is and
    /// reported ([`Landed::NameHeld`]).
    pub fn may_take(&self, uid: &str) -> Option<&str> {
        self.takes.get(uid).map(String::as_str)
    }

    /// `uid`'s record on the hub is in doubt (someone else changed it: [`Book::drifted`]): it
    /// is written again, whole, as after a write whose outcome is unknown.
    pub fn doubt(&mut self, book: &Book, uid: &str) {
        let charged = book
            .get(uid)
            .and_then(|e| e.written.as_ref())
            .is_some_and(Record::charged);
        *self.unsure.entry(uid.to_string()).or_default() |= charged;
    }

    /// Whether `uid`'s record is being written.
    pub fn writing(&self, uid: &str) -> bool {
        self.writing.contains_key(uid)
    }

    /// Whether the hub may hold a charged record of `uid`: the last one known to have landed,
    /// one that may have landed without an answer, or one still out.
    fn may_hold_charged(&self, uid: &str, e: &Entry, defect: Option<Defect>) -> bool {
        let unknown = defect != Some(Defect::AnswersTrusted)
            && (self.unsure.get(uid) == Some(&true) || self.writing.get(uid) == Some(&true));
        e.written.as_ref().is_some_and(Record::charged) || unknown
    }

    /// Whether writing `e`'s record frees capacity the hub may still record as held.
    fn frees(&self, uid: &str, e: &Entry, defect: Option<Defect>) -> bool {
        !e.record.charged() && self.may_hold_charged(uid, e, defect)
    }

    /// Whether `e`'s record is to be written: it is not what the hub is known to hold, or what
    /// the hub holds is unsure.
    fn changed(&self, uid: &str, e: &Entry, defect: Option<Defect>) -> bool {
        e.written.as_ref() != Some(&e.record)
            || (self.unsure.contains_key(uid) && defect != Some(Defect::AnswersTrusted))
    }

    /// How long `e`'s record waits before it is written, when all it says beyond what the hub
    /// holds is that the copy was created: the hub holds this very admission (same member,
    /// same admission, nothing to clean up there) and the copy was made less than
    /// [`Settings::dispatched_write_delay`] ago. If the pods run within that time, one write
    /// says Running (with `dispatchedAt`) where two would say Dispatched, then Running. Nothing
    /// reads the difference: a controller that reads the admission back finds the copy and
    /// adopts it as its own, as after a crash between the create and its record's write.
    fn waits_for_pods(&self, uid: &str, e: &Entry, now: Ms, s: &Settings) -> Option<Ms> {
        let (r, w) = (&e.record, e.written.as_ref()?);
        let c = r.cluster.as_deref()?;
        let same_admission =
            w.phase == Phase::Admitted && w.records_admission(r) && !w.unconfirmed.contains(c);
        if r.phase != Phase::Dispatched || r.ran || !same_admission || self.unsure.contains_key(uid)
        {
            return None;
        }
        let due = r.dispatched_at?.saturating_add(s.dispatched_write_delay);
        (now < due).then(|| due - now)
    }

    /// Batches out.
    #[cfg(test)]
    fn out(&self) -> usize {
        self.batches
    }

    /// The next batch: every changed record not being written already, asked of `candidate`
    /// (given the job, its record and whether the record changed from what the hub holds; None
    /// skips the job). Records that free capacity first; the rest ranked admissions first,
    /// then other changed records, then what changed only for display, at most
    /// [`REST_PER_BATCH`] of them.
    pub fn plan<T>(
        &self,
        (book, now): (&Book, Ms),
        mut candidate: impl FnMut(&str, &Record, bool) -> Option<Candidate<T>>,
    ) -> Plan<T> {
        let defect = book.settings.defect;
        let mut plan = Plan {
            batch: None,
            held: Vec::new(),
            wait: None,
        };
        if !self.may_send(defect) {
            return plan;
        }
        let unordered = defect == Some(Defect::WritesUnordered);
        let (mut frees, mut rest) = (Vec::new(), Vec::new());
        // A job whose record frees capacity but whose earlier write is still out: its record
        // goes once that write is back, and nothing that may use what it frees goes before.
        let mut free_held = false;
        for (uid, e) in book.iter() {
            let changed = self.changed(uid, e, defect);
            let frees_now = changed && self.frees(uid, e, defect);
            if self.writing(uid) {
                free_held |= frees_now;
                continue;
            }
            if let Some(wait) = self.waits_for_pods(uid, e, now, &book.settings) {
                plan.wait = Some(plan.wait.map_or(wait, |w| w.min(wait)));
                continue;
            }
            let write = match candidate(uid, &e.record, changed) {
                None => continue,
                Some(Candidate::Same) => {
                    if changed {
                        plan.held.push((uid.clone(), e.record.clone()));
                    }
                    continue;
                }
                Some(Candidate::Later(wait)) => {
                    plan.wait = Some(plan.wait.map_or(wait, |w| w.min(wait)));
                    continue;
                }
                Some(Candidate::Send(w)) => w,
            };
            let item = Item {
                uid: uid.clone(),
                record: e.record.clone(),
                write,
            };
            if frees_now && !unordered {
                frees.push(item);
            } else {
                let rank = match (changed, e.record.phase) {
                    (true, Phase::Admitted) => 0,
                    // The defect: releases among the rest, behind the admissions.
                    (true, _) if unordered && frees_now => 2,
                    (true, _) => 1,
                    (false, _) => 3,
                };
                rest.push((rank, item));
            }
        }
        if free_held && !unordered {
            rest.clear();
        }
        rest.sort_by_key(|(rank, _)| *rank);
        let rest: Vec<Item<T>> = rest
            .into_iter()
            .take(REST_PER_BATCH)
            .map(|(_, i)| i)
            .collect();
        if !frees.is_empty() || !rest.is_empty() {
            plan.batch = Some(Batch { frees, rest });
        }
        plan
    }

    /// `plan` is carried out: its held records are durable, its batch is out.
    pub fn sending<T>(&mut self, book: &mut Book, plan: Plan<T>) -> Option<Batch<T>> {
        for (uid, r) in plan.held {
            book.written(&uid, Some(r));
        }
        // Jobs no longer followed need no care.
        self.unsure.retain(|u, _| book.get(u).is_some());
        let batch = plan.batch?;
        self.batches += 1;
        self.freeing += usize::from(batch.freeing());
        for i in batch.frees.iter().chain(batch.rest.iter()) {
            self.writing.insert(i.uid.clone(), i.record.charged());
        }
        Some(batch)
    }

    /// A batch is back (`freeing`: it held records that free capacity): each written record is
    /// durable, and what the hub holds of its job known again. A record that failed may have
    /// landed: its job's hub record is unsure until a later write lands. A create that met an
    /// earlier job's QueuedJob of its name is let take it over by the next write if the
    /// intake's rule allows ([`tidy::takes_over`]); else its job goes back to the intake, to
    /// wait for the name ([`Book::name_held`]). Returns those jobs, each with the earlier job.
    pub fn landed<'a>(
        &mut self,
        (book, sched): (&mut Book, &mut Scheduler),
        (freeing, now): (bool, Ms),
        out: impl IntoIterator<Item = (&'a str, &'a Record, &'a Landed)>,
    ) -> Vec<(String, String)> {
        self.batches = self.batches.saturating_sub(1);
        self.freeing = self.freeing.saturating_sub(usize::from(freeing));
        let mut back = Vec::new();
        for (uid, record, landed) in out {
            self.writing.remove(uid);
            match landed {
                Landed::Written => {
                    self.unsure.remove(uid);
                    self.takes.remove(uid);
                    book.written(uid, Some(record.clone()));
                }
                Landed::Failed(_) => {
                    *self.unsure.entry(uid.to_string()).or_default() |= record.charged();
                }
                Landed::NotSent => {}
                Landed::NameHeld(h) => {
                    let earlier = Name::Earlier {
                        uid: &h.uid,
                        terminating: h.terminating,
                        record: h.record.as_deref(),
                    };
                    if tidy::takes_over(book, earlier) {
                        self.takes.insert(uid.to_string(), h.uid.clone());
                    } else if book.name_held(sched, uid, &h.uid, now) {
                        self.takes.remove(uid);
                        self.unsure.remove(uid);
                        back.push((uid.to_string(), h.uid.clone()));
                    }
                }
            }
        }
        self.takes.retain(|u, _| book.get(u).is_some());
        back
    }
}

#[cfg(test)]
#[path = "outbox_tests.rs"]
mod tests;
