//! Before every pass, what becomes of the hub's jobs, QueuedJobs and member copies outside the
//! lifecycle's own steps, decided once for both drivers (the hub controller's `controller::gc`
//! and the fault simulation) and always in this order:
//! 1. who is followed: [`intake`] says whether a hub job not followed yet is taken in, or
//!    waits for an earlier job's QueuedJob of its name to go (called per job);
//! 2. followed jobs whose hub job is gone stop being followed ([`Book::untrack`]): their copies
//!    go;
//! 3. copies muster made on members that answer, judged by [`gc::doomed`];
//! 4. records someone deleted on the hub, missing for longer than the settle time (the
//!    QueuedJob watch lags behind a write that landed), are written again; records someone
//!    else changed, shown otherwise for that long, too ([`Book::drifted`]);
//! 5. every QueuedJob as [`Book::keep`] decides it (charged again while a deleted job's copy
//!    may run; the finalizer on or off);
//! 6. copies being deleted of jobs not followed hold back creates ([`gc::deleting`]).
//!
//! The driver finds the facts and carries out what comes back; it decides none of it.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashSet};

use super::gc::{self, Doomed, Found};
use super::{Book, Defect, Finalizer, Held, Ms, Record};
use crate::scheduler::Scheduler;

/// Whether a driver starts following a hub job it does not follow yet. One whose record the
/// hub holds is followed whatever the tree says (a copy of it may run; muster stays
/// responsible for it until it ends). Any other only while a quota tree covering its namespace
/// is in force: without one, nothing new is touched.
pub fn follows(recorded: bool, covered: bool, defect: Option<Defect>) -> bool {
    covered || (recorded && defect != Some(Defect::CollectUnknown))
}

/// The QueuedJob that holds a hub job's name (QueuedJobs are named after their job's kind and
/// name), as a driver finds it on the hub.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Name<'a> {
    /// No QueuedJob of that name.
    Free,
    /// It holds this job's record.
    Ours,
    /// It belongs to another job of the same kind and name (one deleted, this one made again
    /// under its name): its UID, whether it is being deleted (Terminating), and the record it
    /// holds (None: none readable).
    Earlier {
        uid: &'a str,
        terminating: bool,
        record: Option<&'a Record>,
    },
}

/// What a driver does with a hub job it does not follow yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Intake {
    /// Not muster's (see [`follows`]): untouched.
    Leave,
    /// Made again under the name of an earlier job whose QueuedJob muster keeps (that job may
    /// still run somewhere, charged only through its record) or that is being deleted (a record
    /// written into it goes with it): the job waits, unqueued, until that QueuedJob is gone.
    WaitForName { earlier: String },
    /// Followed from now on (from its record when the hub holds one).
    Track,
}

/// Whether and how a driver takes in the hub job `job` it does not follow yet (step 1 of the
/// order above), at `now`. Taking an earlier job's QueuedJob over while muster keeps it, or
/// would keep it once `tidy` reads it ([`Book::would_keep`]: its record says a copy may still
/// run), would lose that job's charge and the copies it names (defect `name-taken-over`). A
/// job whose create met such a QueuedJob lately waits for it even while the driver's view
/// shows the name free ([`Book::waits_for_name`]: the view lags).
pub fn intake(book: &Book, (job, name): (&str, Name<'_>), covered: bool, now: Ms) -> Intake {
    let defect = book.settings.defect;
    if !follows(name == Name::Ours, covered, defect) {
        return Intake::Leave;
    }
    let earlier = match name {
        Name::Free => book.waits_for_name(job, now).map(str::to_string),
        _ => waits_for(book, name),
    };
    match earlier {
        Some(earlier) => Intake::WaitForName { earlier },
        None => Intake::Track,
    }
}

/// Whether a followed job's first record write, whose create met `earlier`'s QueuedJob of its
/// name (read in that request), may take that QueuedJob over: by the intake's rule, as if the
/// driver's view had shown it. The executors ask before they take anything over (they once
/// took any QueuedJob that was not being deleted), so the rule holds where the write lands,
/// not only where the job was taken in, from a view that may lag.
pub fn takes_over(book: &Book, earlier: Name<'_>) -> bool {
    waits_for(book, earlier).is_none()
}

/// The earlier job a job of the name waits for, if any: one whose QueuedJob is being deleted
/// (a record written into it goes with it), kept, or about to be kept (a driver takes new jobs
/// in before `tidy` reads the QueuedJobs of jobs already gone: a process that just started
/// has not charged them yet).
fn waits_for(book: &Book, name: Name<'_>) -> Option<String> {
    match name {
        Name::Earlier {
            uid,
            terminating,
            record,
        } if book.settings.defect != Some(Defect::NameTakenOver)
            && (terminating
                || book.keeps(uid)
                || record.is_some_and(|r| book.would_keep(uid, r))) =>
        {
            Some(uid.to_string())
        }
        _ => None,
    }
}

/// The quota tree a driver sees on the hub, applied by the core's rule: a valid one replaces
/// the tree in force (returned: the namespaces it covers); an invalid one leaves the tree in
/// force as it is (returned: its problems). With no tree in force, nothing new is followed
/// ([`follows`]) and nothing is admitted.
pub fn apply_tree(
    sched: &mut Scheduler,
    manifest: &serde_json::Value,
) -> Result<BTreeSet<String>, Vec<crate::quota::Problem>> {
    let t = crate::quota::QuotaTree::parse(manifest)?;
    let covered = t.namespaces();
    sched.set_quota_tree(Some(t));
    Ok(covered)
}

/// What a driver found on the hub and the members before a pass.
pub struct Facts<'a> {
    /// Followed jobs whose hub job is gone: absent from a listed store, there under another
    /// UID, or being deleted.
    pub gone: Vec<String>,
    /// Copies muster made on members that answer and are in sync, not being deleted.
    pub copies: Vec<Found<'a>>,
    /// Copies muster made being deleted (Terminating) on members that answer.
    pub deleting: Vec<gc::Deleting>,
    /// Every QueuedJob on the hub, or None while the driver has not listed them.
    pub queued: Option<Vec<Held<'a>>>,
    /// The record a QueuedJob holds (asked only when needed; lent when the driver keeps it
    /// read).
    pub record: &'a dyn Fn(&str) -> Option<Cow<'a, Record>>,
}

/// What the driver carries out.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Tidied {
    /// Copies to delete (each once), the garbage collector's first.
    pub deletes: Vec<Doomed>,
    /// QueuedJobs whose finalizer goes on or off, by job UID.
    pub finalizers: Vec<(String, Finalizer)>,
    /// Followed jobs whose QueuedJob was deleted: written again (the book already counts them
    /// as not on the hub).
    pub rewrite: Vec<String>,
    /// Followed jobs whose record someone else changed on the hub: written again, whole
    /// (the driver tells its outbox: `Outbox::doubt`), each patch made from what the driver's
    /// view shows.
    pub drifted: Vec<String>,
    /// Deleted jobs charged again from their record just now.
    pub restored: Vec<String>,
    /// Followed jobs that stopped being followed (their hub job gone).
    pub untracked: Vec<String>,
}

/// The housekeeping before a pass at `now` (see the module's comment for the order).
pub fn tidy(book: &mut Book, sched: &mut Scheduler, found: Facts, now: Ms) -> Tidied {
    let mut out = Tidied::default();
    // 2. Gone hub jobs: not followed any more; their copies go.
    let mut untracked_deletes = Vec::new();
    for uid in found.gone {
        if book.get(&uid).is_none() {
            continue;
        }
        for i in book.untrack(sched, &uid) {
            if let super::Intent::Delete { cluster, .. } = i {
                untracked_deletes.push(Doomed {
                    job: uid.clone(),
                    member: cluster,
                    why: "the hub job was deleted".into(),
                });
            }
        }
        out.untracked.push(uid);
    }
    // 3. The garbage collector, over the copies found (after step 2: a gone job's copies are
    //    those of a job not followed whose hub job is gone).
    out.deletes = gc::doomed(book, found.copies);
    let mut seen: BTreeSet<(String, String)> = out
        .deletes
        .iter()
        .map(|d| (d.job.clone(), d.member.clone()))
        .collect();
    for d in untracked_deletes {
        if seen.insert((d.job.clone(), d.member.clone())) {
            out.deletes.push(d);
        }
    }
    if let Some(queued) = found.queued {
        // 4. Records deleted on the hub.
        // Read only through `contains`: a hash set, built once a pass.
        let held: HashSet<&str> = queued.iter().map(|q| q.job).collect();
        for uid in book.lost_records(|u| held.contains(u), now) {
            book.written(&uid, None);
            out.rewrite.push(uid);
        }
        out.drifted = book.drifted(
            |u| held.contains(u).then(|| (found.record)(u)).flatten(),
            now,
        );
        // 5. Every QueuedJob.
        for q in &queued {
            let (restored, change) =
                book.keep(sched, q, || (found.record)(q.job).map(Cow::into_owned));
            if restored {
                out.restored.push(q.job.to_string());
            }
            if let Some(c) = change {
                out.finalizers.push((q.job.to_string(), c));
            }
        }
    }
    // 6. Copies being deleted of jobs not followed.
    gc::deleting(book, found.deleting);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lifecycle::gc::HubJob;
    use crate::lifecycle::{Phase, Settings};
    use crate::scheduler::Config;

    fn spec() -> super::super::Spec {
        (Err("not read in this test".into()), "spec-1".into())
    }

    /// `x` runs on member-a, its record on the hub.
    fn running() -> (Scheduler, Book) {
        let mut sched = Scheduler::new(Config::default());
        let mut book = Book::new(Settings::default());
        let r = Record {
            phase: Phase::Running,
            cluster: Some("member-a".into()),
            spec: "spec-1".into(),
            admitted_at: Some(0),
            copy_uid: Some("c1".into()),
            ..Record::default()
        };
        book.track(
            &mut sched,
            "x",
            "x".into(),
            &spec(),
            None,
            0,
            Some(r.clone()),
        )
        .expect("followed");
        book.written("x", Some(r));
        (sched, book)
    }

    /// The record of a job that ended.
    fn finished() -> Record {
        Record {
            phase: Phase::Finished,
            ..Record::default()
        }
    }

    fn held(job: &str) -> Held<'_> {
        Held {
            job,
            namespace: "team-a",
            finalizer: true,
            terminating: false,
            hub: HubJob::Exists,
        }
    }

    #[test]
    fn a_job_is_followed_when_recorded_or_covered() {
        assert!(follows(true, false, None));
        assert!(follows(false, true, None));
        assert!(follows(true, true, None));
        assert!(!follows(false, false, None));
        assert!(!follows(true, false, Some(Defect::CollectUnknown)));
    }

    #[test]
    fn a_job_made_again_under_a_kept_name_waits_for_it() {
        let (_, book) = running();
        let wait = Intake::WaitForName {
            earlier: "x".into(),
        };
        // `x` is followed: its QueuedJob is kept, and a new job of its name waits.
        let kept = Name::Earlier {
            uid: "x",
            terminating: false,
            record: None,
        };
        assert_eq!(intake(&book, ("new", kept), true, 0), wait);
        // Not muster's at all without a tree: left alone, not said to wait.
        assert_eq!(intake(&book, ("new", kept), false, 0), Intake::Leave);
        // Being deleted: a record written into it goes with it.
        let deleting = Name::Earlier {
            uid: "old",
            terminating: true,
            record: None,
        };
        assert_eq!(
            intake(&book, ("new", deleting), true, 0),
            Intake::WaitForName {
                earlier: "old".into()
            }
        );
        // A stale QueuedJob muster no longer keeps is taken over.
        let ended = finished();
        let stale = Name::Earlier {
            uid: "old",
            terminating: false,
            record: Some(&ended),
        };
        assert_eq!(intake(&book, ("new", stale), true, 0), Intake::Track);
        // Unless its record says a copy may still run: `tidy` will charge it again (a process
        // that just started takes new jobs in before it reads the QueuedJobs of gone ones).
        let ran = Record {
            phase: Phase::Running,
            cluster: Some("member-a".into()),
            ..Record::default()
        };
        let running = Name::Earlier {
            uid: "old",
            terminating: false,
            record: Some(&ran),
        };
        assert_eq!(
            intake(&book, ("new", running), true, 0),
            Intake::WaitForName {
                earlier: "old".into()
            }
        );
        assert_eq!(intake(&book, ("new", Name::Free), true, 0), Intake::Track);
        // Its own record: followed whatever the tree says.
        assert_eq!(intake(&book, ("new", Name::Ours), false, 0), Intake::Track);
        // The defect takes the kept one over.
        let mut careless = Book::new(Settings {
            defect: Some(Defect::NameTakenOver),
            ..Settings::default()
        });
        let mut sched = Scheduler::new(Config::default());
        careless
            .track(&mut sched, "x", "x".into(), &spec(), None, 0, None)
            .expect("followed");
        assert_eq!(intake(&careless, ("new", kept), true, 0), Intake::Track);
        assert_eq!(intake(&careless, ("new", deleting), true, 0), Intake::Track);
    }

    #[test]
    fn a_create_that_meets_a_kept_name_sends_the_job_back_to_wait_for_it() {
        let (mut sched, mut book) = running();
        let settle = book.settings.record_settle;
        let kept = Name::Earlier {
            uid: "x",
            terminating: false,
            record: None,
        };
        let ended = finished();
        let stale = Name::Earlier {
            uid: "old",
            terminating: false,
            record: Some(&ended),
        };
        // The executors ask the intake's rule before they take a QueuedJob over.
        assert!(!takes_over(&book, kept));
        assert!(takes_over(&book, stale));
        // `new` was taken in while the driver's view showed its name free (a dropped watch);
        // its create met x's QueuedJob, which the core keeps.
        assert_eq!(intake(&book, ("new", Name::Free), true, 0), Intake::Track);
        book.track(&mut sched, "new", "new".into(), &spec(), None, 1, None)
            .expect("followed");
        assert!(book.name_held(&mut sched, "new", "x", 1_000));
        assert!(book.get("new").is_none(), "followed no more");
        // It waits for the name though the view still shows it free, for the settle time.
        let wait = Intake::WaitForName {
            earlier: "x".into(),
        };
        assert_eq!(intake(&book, ("new", Name::Free), true, 1_000), wait);
        assert_eq!(
            intake(&book, ("new", Name::Free), true, 1_000 + settle - 1),
            wait
        );
        assert_eq!(
            intake(&book, ("other", Name::Free), true, 1_000),
            Intake::Track
        );
        // Then its write is tried again (and meets the name again while x is kept).
        assert_eq!(
            intake(&book, ("new", Name::Free), true, 1_000 + settle),
            Intake::Track
        );
        // A job with a record on the hub is never sent back.
        assert!(!book.name_held(&mut sched, "x", "y", 2_000));
        assert!(book.get("x").is_some());
    }

    #[test]
    fn a_deleted_record_is_written_again_only_after_the_settle_time() {
        let (mut sched, mut book) = running();
        let settle = book.settings.record_settle;
        let none = |_: &str| None;
        let facts = |queued: Vec<Held<'static>>| Facts {
            gone: Vec::new(),
            copies: Vec::new(),
            deleting: Vec::new(),
            queued: Some(queued),
            record: &none,
        };
        // Held: nothing to do.
        let t = tidy(&mut book, &mut sched, facts(vec![held("x")]), 1_000);
        assert!(t.rewrite.is_empty(), "{t:?}");
        // Missing from 2 s: not yet lost while the view may lag.
        for now in [2_000, 2_000 + settle - 1] {
            let t = tidy(&mut book, &mut sched, facts(Vec::new()), now);
            assert!(t.rewrite.is_empty(), "at {now}: {t:?}");
        }
        assert!(book.get("x").is_some_and(|e| e.written.is_some()));
        // Seen again: the clock starts over.
        tidy(
            &mut book,
            &mut sched,
            facts(vec![held("x")]),
            2_000 + settle,
        );
        let t = tidy(&mut book, &mut sched, facts(Vec::new()), 3_000 + settle);
        assert!(t.rewrite.is_empty(), "{t:?}");
        let t = tidy(&mut book, &mut sched, facts(Vec::new()), 3_000 + 2 * settle);
        assert_eq!(t.rewrite, vec!["x".to_string()]);
        assert!(book.get("x").is_some_and(|e| e.written.is_none()));
        // Not listed yet: nothing is judged.
        let facts = Facts {
            gone: Vec::new(),
            copies: Vec::new(),
            deleting: Vec::new(),
            queued: None,
            record: &none,
        };
        assert_eq!(
            tidy(&mut book, &mut sched, facts, 10 * settle),
            Tidied::default()
        );
    }

    #[test]
    fn a_gone_jobs_copy_is_deleted_once_and_its_queued_job_kept_while_charged() {
        let (mut sched, mut book) = running();
        let on_hub = book.get("x").and_then(|e| e.written.clone());
        let record = |_: &str| on_hub.as_ref().map(Cow::Borrowed);
        let q = Held {
            hub: HubJob::Gone,
            finalizer: false,
            ..held("x")
        };
        let t = tidy(
            &mut book,
            &mut sched,
            Facts {
                gone: vec!["x".into()],
                copies: vec![Found {
                    job: "x",
                    member: "member-a",
                    hub: HubJob::Gone,
                }],
                deleting: Vec::new(),
                queued: Some(vec![q]),
                record: &record,
            },
            1_000,
        );
        assert_eq!(t.untracked, vec!["x".to_string()]);
        assert_eq!(t.deletes.len(), 1, "{t:?}");
        assert_eq!(t.deletes[0].member, "member-a");
        // Kept while its copy may run (known again from the record its QueuedJob holds), so
        // the QueuedJob keeps the record.
        assert!(book.keeps("x"));
        assert_eq!(t.finalizers, vec![("x".to_string(), Finalizer::Add)]);
    }
}
