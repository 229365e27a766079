//! Unit tests of the outbox (`lifecycle::outbox`): batch order, what the hub holds, the wait
//! of a dispatch for its pods.

use super::*;
use crate::lifecycle::{Phase, Settings, Spec};
use crate::scheduler::{Config, Scheduler};

fn spec() -> Spec {
    (Err("not read in this test".into()), "d".into())
}

fn running(on: &str) -> Record {
    Record {
        phase: Phase::Running,
        cluster: Some(on.into()),
        spec: "d".into(),
        admitted_at: Some(0),
        ..Record::default()
    }
}

fn queued() -> Record {
    Record {
        spec: "d".into(),
        ..Record::default()
    }
}

/// `x` runs on member-a and `y` waits, both durable.
fn book(defect: Option<Defect>) -> (Scheduler, Book) {
    let mut sched = Scheduler::new(Config::default());
    let mut book = Book::new(Settings {
        defect,
        ..Settings::default()
    });
    for (uid, r) in [("x", running("member-a")), ("y", queued())] {
        book.track(&mut sched, uid, uid.into(), &spec(), None, 0, Some(r))
            .expect("followed from its record");
    }
    (sched, book)
}

/// A pass takes `x` back and admits `y` into what it frees.
fn take_back_and_admit(book: &mut Book) {
    *book.record_mut("x").expect("x") = queued();
    let mut y = running("member-a");
    y.phase = Phase::Admitted;
    *book.record_mut("y").expect("y") = y;
}

fn send_changed(book: &Book, o: &Outbox) -> Plan<()> {
    o.plan((book, 0), |_, _, changed| {
        changed.then_some(Candidate::Send(()))
    })
}

fn uids(items: &[Item<()>]) -> Vec<&str> {
    items.iter().map(|i| i.uid.as_str()).collect()
}

fn land(o: &mut Outbox, book: &mut Book, b: &Batch<()>, frees: Landed, rest: Landed) {
    let out: Vec<(&str, &Record, Landed)> = b
        .frees
        .iter()
        .map(|i| (i.uid.as_str(), &i.record, frees.clone()))
        .chain(
            b.rest
                .iter()
                .map(|i| (i.uid.as_str(), &i.record, rest.clone())),
        )
        .collect();
    // No create here meets a name: the scheduler is not asked.
    let mut sched = Scheduler::new(Config::default());
    o.landed(
        (book, &mut sched),
        (b.freeing(), 0),
        out.iter().map(|(u, r, l)| (*u, *r, l)),
    );
}

#[test]
fn a_dispatch_waits_for_its_pods_so_that_one_write_says_running() {
    let (_s, mut book) = book(None);
    let delay = book.settings.dispatched_write_delay;
    // `y` admitted to member-a, durable.
    let mut admitted = running("member-a");
    admitted.phase = Phase::Admitted;
    *book.record_mut("y").expect("y") = admitted.clone();
    book.written("y", Some(admitted.clone()));
    // Its copy was created at 10 s.
    let mut dispatched = admitted.clone();
    dispatched.phase = Phase::Dispatched;
    dispatched.dispatched_at = Some(10_000);
    *book.record_mut("y").expect("y") = dispatched.clone();
    let mut o = Outbox::default();
    let p = o.plan((&book, 11_000), |_, _, c| c.then_some(Candidate::Send(())));
    assert!(p.batch.is_none(), "held for its pods");
    assert_eq!(p.wait, Some(10_000 + delay - 11_000));
    // Its pods run: the record says Running, and goes at once.
    let mut run = dispatched.clone();
    run.phase = Phase::Running;
    run.ran = true;
    *book.record_mut("y").expect("y") = run;
    let p = o.plan((&book, 12_000), |_, _, c| c.then_some(Candidate::Send(())));
    assert_eq!(uids(&p.batch.expect("sent").rest), ["y"]);
    // Pods that do not run within the delay: Dispatched goes when it is over.
    *book.record_mut("y").expect("y") = dispatched.clone();
    let p = o.plan((&book, 10_000 + delay), |_, _, c| {
        c.then_some(Candidate::Send(()))
    });
    assert_eq!(uids(&p.batch.expect("sent").rest), ["y"]);
    // Never when the hub holds anything but this admission, or is unsure of what it holds.
    let mut other = admitted.clone();
    other.requeues += 1;
    book.written("y", Some(other));
    let p = o.plan((&book, 11_000), |_, _, c| c.then_some(Candidate::Send(())));
    assert!(p.batch.is_some(), "another admission is held");
    book.written("y", Some(admitted));
    o.doubt(&book, "y");
    let p = o.plan((&book, 11_000), |_, _, c| c.then_some(Candidate::Send(())));
    assert!(p.batch.is_some(), "the hub's record is unsure");
    let _ = o.sending(&mut book, p);
}

#[test]
fn a_release_goes_before_the_admission_into_what_it_frees() {
    let (_s, mut book) = book(None);
    let mut o = Outbox::default();
    take_back_and_admit(&mut book);
    let p = send_changed(&book, &o);
    let b = o.sending(&mut book, p).expect("a batch");
    assert_eq!(uids(&b.frees), ["x"]);
    assert_eq!(uids(&b.rest), ["y"]);
    // While it is out, nothing else goes.
    assert!(!o.may_send(None));
    assert!(send_changed(&book, &o).batch.is_none());
    // The release failed: the admission does not go; both are planned again.
    let failed = Landed::Failed("refused".into());
    assert!(!rest_goes([&failed], None));
    land(&mut o, &mut book, &b, failed, Landed::NotSent);
    assert_ne!(
        book.get("x").and_then(|e| e.written.clone()),
        Some(queued())
    );
    let again = send_changed(&book, &o).batch.expect("planned again");
    assert_eq!(
        (uids(&again.frees), uids(&again.rest)),
        (vec!["x"], vec!["y"])
    );
    // Both landed: nothing left to write.
    assert!(rest_goes([&Landed::Written], None));
    land(&mut o, &mut book, &again, Landed::Written, Landed::Written);
    assert!(
        book.iter()
            .all(|(_, e)| e.written.as_ref() == Some(&e.record))
    );
    assert!(send_changed(&book, &o).batch.is_none());
    assert_eq!(o.out(), 0);
}

#[test]
fn a_release_decided_while_an_earlier_write_of_its_job_is_out_holds_back_the_rest() {
    let (_s, mut book) = book(None);
    let mut o = Outbox::default();
    // x's record changes for display-relevant reasons (its reason), a batch goes.
    book.record_mut("x").expect("x").reason = "running: 2/2 pods".into();
    let p = send_changed(&book, &o);
    let first = o.sending(&mut book, p).expect("a batch");
    assert!(!first.freeing());
    assert!(o.writing("x"));
    // Then x is taken back and y admitted, with x's earlier write still out.
    take_back_and_admit(&mut book);
    let p = send_changed(&book, &o);
    assert!(
        p.batch.is_none(),
        "y's admission must not go before x's release"
    );
    land(&mut o, &mut book, &first, Landed::NotSent, Landed::Written);
    let b = send_changed(&book, &o).batch.expect("now");
    assert_eq!((uids(&b.frees), uids(&b.rest)), (vec!["x"], vec!["y"]));
}

#[test]
fn batches_that_free_nothing_go_together_up_to_the_limit() {
    let (mut sched, mut book) = book(None);
    for i in 0..(BATCHES + 2) {
        let uid = format!("q{i}");
        book.track(&mut sched, &uid, uid.clone(), &spec(), None, 0, None)
            .expect("followed");
    }
    let mut o = Outbox::default();
    let mut sent = 0;
    for i in 0..(BATCHES + 2) {
        let only = format!("q{i}");
        let p = o.plan((&book, 0), |uid, _, changed| {
            (changed && uid == only).then_some(Candidate::Send(()))
        });
        if o.sending(&mut book, p).is_some() {
            sent += 1;
        }
    }
    assert_eq!(sent, BATCHES);
    assert_eq!(o.out(), BATCHES);
}

#[test]
fn what_the_hub_holds_already_is_durable_and_figures_wait() {
    let (_s, mut book) = book(None);
    let o = Outbox::default();
    take_back_and_admit(&mut book);
    let p = o.plan((&book, 0), |uid, _, _| {
        Some(if uid == "x" {
            Candidate::<()>::Same
        } else {
            Candidate::Later(3_000)
        })
    });
    assert!(p.batch.is_none());
    assert_eq!(p.wait, Some(3_000));
    assert_eq!(p.held.len(), 1);
    let mut o = o;
    assert!(o.sending(&mut book, p).is_none());
    assert_eq!(
        book.get("x").and_then(|e| e.written.clone()),
        Some(queued())
    );
}

#[test]
fn the_defect_puts_the_admission_first_and_ignores_failures() {
    let d = Some(Defect::WritesUnordered);
    let (_s, mut book) = book(d);
    let mut o = Outbox::default();
    take_back_and_admit(&mut book);
    let p = send_changed(&book, &o);
    let b = o.sending(&mut book, p).expect("a batch");
    assert!(b.frees.is_empty());
    assert_eq!(uids(&b.rest), ["y", "x"]);
    assert!(rest_goes([&Landed::Failed("x".into())], d));
    assert!(o.may_send(d));
}

#[test]
fn a_create_that_meets_an_earlier_name_takes_it_only_if_the_core_lets_it() {
    let (mut sched, mut book) = book(None);
    let mut o = Outbox::default();
    for uid in ["x", "y"] {
        let r = book.get(uid).map(|e| e.record.clone());
        book.written(uid, r);
    }
    // `n` and `m` are new: their first writes are creates.
    for uid in ["n", "m"] {
        book.track(&mut sched, uid, uid.into(), &spec(), None, 1, None)
            .expect("followed");
    }
    let p = send_changed(&book, &o);
    let b = o.sending(&mut book, p).expect("a batch");
    assert_eq!(uids(&b.rest), ["m", "n"]);
    let ended = Record {
        phase: Phase::Finished,
        ..Record::default()
    };
    // `n` met the QueuedJob of `x`, which runs (the book keeps it); `m` met that of a
    // job that ended long ago.
    let met = |uid: &str, record: Option<Record>| {
        Landed::NameHeld(NameHeld {
            uid: uid.into(),
            terminating: false,
            record: record.map(Box::new),
        })
    };
    let out = [
        ("m", &b.rest[0].record, met("old", Some(ended))),
        ("n", &b.rest[1].record, met("x", None)),
    ];
    let back = o.landed(
        (&mut book, &mut sched),
        (b.freeing(), 5_000),
        out.iter().map(|(u, r, l)| (*u, *r, l)),
    );
    assert_eq!(back, [("n".to_string(), "x".to_string())]);
    assert!(book.get("n").is_none(), "n goes back to the intake");
    assert_eq!(book.waits_for_name("n", 5_000), Some("x"));
    assert!(book.get("x").is_some(), "x's record is untouched");
    assert_eq!(o.may_take("m"), Some("old"), "m takes it at its next write");
    assert_eq!(o.may_take("n"), None);
    // Nothing was written: m's record goes again, and once it lands the leave is spent.
    let p = send_changed(&book, &o);
    let b = o.sending(&mut book, p).expect("m again");
    assert_eq!(uids(&b.rest), ["m"]);
    land(&mut o, &mut book, &b, Landed::Written, Landed::Written);
    assert_eq!(o.may_take("m"), None);
    // One being deleted is never taken over (a record written into it goes with it).
    assert!(!tidy::takes_over(
        &book,
        Name::Earlier {
            uid: "old",
            terminating: true,
            record: None,
        }
    ));
}
