//! Unit tests of [`Book::pass`]: what one job's copies hold back of the others' creates.

use super::*;
use crate::scheduler::{Config, Scheduler};

const D: &str = "spec-1";

fn spec() -> Spec {
    (Err("not read in this test".into()), D.into())
}

fn copy(uid: &str) -> Copy {
    Copy {
        uid: uid.into(),
        progress: Progress::Running {
            scheduled: 1,
            running: 1,
        },
        live_pods: 1,
        expected: 1,
        pods_done: false,
        waiting: None,
    }
}

/// Job `x` left member-a at 0 and its copy there is still being deleted; job `y` is admitted to
/// member-b, its admission durable. What does a pass at `now` ask for `y`?
fn creates_of_y(now: Ms) -> Vec<Intent> {
    let mut sched = Scheduler::new(Config::default());
    let mut book = Book::new(Settings::default());
    let x = Record {
        phase: Phase::Queued,
        spec: D.into(),
        orphans: [("member-a".to_string(), 0)].into_iter().collect(),
        ..Record::default()
    };
    let y = Record {
        phase: Phase::Admitted,
        cluster: Some("member-b".into()),
        spec: D.into(),
        admitted_at: Some(0),
        ..Record::default()
    };
    for (uid, r) in [("x", x), ("y", y)] {
        book.track(&mut sched, uid, uid.into(), &spec(), 0, Some(r))
            .expect("followed from its record");
    }
    let mut specs = |_: &str| Some(spec());
    let mut seen = |uid: &str, r: &Record| Seen {
        now,
        spec: D.into(),
        hub: None,
        here: r.cluster.as_ref().map(|_| Member::Answering(None)),
        orphans: r
            .orphans
            .keys()
            .map(|c| {
                let m = if uid == "x" {
                    Member::Answering(Some(copy("old-x")))
                } else {
                    Member::Answering(None)
                };
                (c.clone(), m)
            })
            .collect(),
        created: None,
    };
    book.pass(&mut sched, &mut specs, &mut seen, now, false)
        .into_iter()
        .filter(|(u, _)| u == "y")
        .map(|(_, i)| i)
        .collect()
}

#[test]
fn a_copy_being_deleted_holds_back_other_creates_only_for_the_drain_grace() {
    // Issue 28: one copy that could not be deleted (a finalizer, an operator that stopped
    // acting) held back every create on every member for ever.
    let grace = Settings::default().drain_grace;
    let early = creates_of_y(1_000);
    assert!(
        !early.iter().any(|i| matches!(i, Intent::Create { .. })),
        "within the grace the create waits: {early:?}"
    );
    assert!(early.contains(&Intent::WakeAt(2_000)));
    let late = creates_of_y(grace);
    assert!(
        late.contains(&Intent::Create {
            cluster: "member-b".into()
        }),
        "after the grace the stuck copy holds back only its own job: {late:?}"
    );
}
