//! Deterministic simulation with faults (`muster::sim::faults`): the scheduler and the lifecycle
//! under member partitions, crashes, leader changes, lost writes and edits, seed after seed; and
//! the checker shown to catch the controller defects of earlier versions when they come back.

use muster::lifecycle::Partition;
use muster::sim::faults::{Defect, Options, Outcome, run};

fn report(o: &Outcome) -> String {
    let tail: Vec<&str> = o.trace.iter().rev().take(80).map(|s| s.as_str()).collect();
    let lines: Vec<&str> = tail.into_iter().rev().collect();
    format!(
        "{}\n(last lines of the trace)\n{}",
        o.summary(),
        lines.join("\n")
    )
}

fn seeds(from: u64, n: u64, partition: Partition) {
    let (mut freed_early, mut folded) = (0, 0);
    for seed in from..from + n {
        let o = run(&Options {
            seed,
            partition,
            ..Options::default()
        });
        assert!(o.violation.is_none(), "{}", report(&o));
        // A run that never ends a job or never injects a fault proves nothing.
        assert!(o.faults > 0 && o.finished > 0, "{}", o.summary());
        freed_early += o.freed_early;
        folded += o.folded;
    }
    // The controller's wait for pods before it says Dispatched is among what they meet: the
    // seeds hold every invariant with Dispatched folded into Running.
    assert!(
        folded >= n as u32,
        "{folded} Dispatched writes folded in {n} seeds"
    );
    // Batch Jobs whose quota was freed on their pods' success, before the member said so, are
    // among what the faults meet.
    assert!(
        freed_early >= n as u32,
        "{freed_early} jobs freed early in {n} seeds"
    );
}

// 2,000 seeds in all (1,000 per partition policy), split so that the test harness runs them on
// every core.

#[test]
fn replace_policy_seeds_0_to_500() {
    seeds(0, 500, Partition::Replace);
}

#[test]
fn replace_policy_seeds_500_to_1000() {
    seeds(500, 500, Partition::Replace);
}

#[test]
fn wait_policy_seeds_1000_to_1500() {
    seeds(1000, 500, Partition::Wait);
}

#[test]
fn wait_policy_seeds_1500_to_2000() {
    seeds(1500, 500, Partition::Wait);
}

/// The first seed of `seeds` on which the checker sees `defect`, with what it saw.
fn caught(
    defect: Defect,
    partition: Partition,
    seeds: std::ops::Range<u64>,
) -> Option<(u64, String)> {
    seeds.into_iter().find_map(|seed| {
        let o = run(&Options {
            seed,
            partition,
            defect: Some(defect),
            ..Options::default()
        });
        o.violation.map(|v| (seed, v))
    })
}

/// The seed that caught a defect breaks nothing without it (under policy Replace).
fn holds_without_the_defect(seed: u64) {
    let fixed = run(&Options {
        seed,
        partition: Partition::Replace,
        ..Options::default()
    });
    assert_eq!(fixed.violation, None, "seed {seed} without the defect");
}

// The seeds that catch each defect; when the simulation changes, find new ones with
// `cargo run --release -- sim --faults 4000 --partition-policy replace --faults-defect NAME`.

#[test]
fn checker_catches_garbage_collection_of_unknown_copies() {
    let (seed, v) = caught(Defect::CollectUnknown, Partition::Replace, 0..50).expect("not caught");
    assert!(v.starts_with("invariant 3"), "seed {seed}: {v}");
}

#[test]
fn checker_catches_a_replaced_leader_that_goes_on_acting() {
    // Rare since records land a pass or more after they are sent: the old leader's create
    // lands after the new leader placed the job elsewhere, a copy no record names.
    let (seed, v) = caught(Defect::Unfenced, Partition::Replace, 84..85).expect("not caught");
    assert!(v.starts_with("invariant 7"), "seed {seed}: {v}");
}

#[test]
fn checker_catches_record_writes_in_any_order() {
    // The outbox without its order: a take-back's record fails (or a crash comes) while an
    // admission into the quota it frees lands; a new leader finds both jobs in place.
    let (seed, v) =
        caught(Defect::WritesUnordered, Partition::Replace, 421..422).expect("not caught");
    assert!(v.starts_with("invariant 2"), "seed {seed}: {v}");
}

#[test]
fn checker_catches_an_outbox_that_trusts_only_answers() {
    // A record write whose answer was lost but that landed is taken as not on the hub: the
    // outbox drops it, and the hub keeps a record the controller no longer holds (seed 2: the
    // hub counts requeues the controller forgot). Seed 7358 once broke a max this way (a
    // release that did not count as freeing capacity); since creates wait for every job of a
    // pass to step, no seed in 0..10,000 does, and the record mismatch is caught first.
    let (seed, v) = caught(Defect::AnswersTrusted, Partition::Replace, 2..3).expect("not caught");
    assert!(v.starts_with("invariant 6"), "seed {seed}: {v}");
}

#[test]
fn checker_catches_copies_left_on_a_removed_member() {
    // A member removed while a job's old copy runs there, then registered again: the copy is
    // forgotten (and a stray of a followed job never collected): a live copy no record names,
    // which runs beside the job's own once the member answers.
    let (seed, v) = caught(Defect::StraysKept, Partition::Replace, 0..20).expect("not caught");
    assert!(v.starts_with("invariant 7"), "seed {seed}: {v}");
}

#[test]
fn checker_catches_queued_jobs_deleted_without_a_finalizer() {
    // A QueuedJob deleted while its copy runs (its hub job deleted, or by hand) takes the
    // record with it: nothing durable names the copy, and a controller that starts now admits
    // the job again as new beside it.
    let (seed, v) =
        caught(Defect::NoRecordFinalizer, Partition::Replace, 0..20).expect("not caught");
    assert!(v.starts_with("invariant 7"), "seed {seed}: {v}");
}

#[test]
fn checker_catches_a_stuck_copy_that_stops_every_dispatch() {
    // A copy held by a finalizer while it is deleted: without the drain grace, no job starts.
    // Seed 19 (13 before a job over a max waited on the highest such node, 27 before
    // admissions woke the jobs quota may move: the runs changed).
    let (seed, v) = caught(Defect::DrainForever, Partition::Replace, 19..20).expect("not caught");
    assert!(v.starts_with("invariant 5"), "seed {seed}: {v}");
    assert!(v.contains("copies muster deletes"), "seed {seed}: {v}");
}

#[test]
fn checker_catches_a_deleted_jobs_charge_kept_only_in_memory() {
    // A hub job deleted while its copy's delete hangs on a finalizer (its pods run on): only
    // its record (kept by muster's finalizer) says that copy may run. A controller that starts
    // meanwhile and does not charge the job again from the record lets the QueuedJob go: the
    // copy runs with nothing durable naming it, and its capacity goes to others.
    let (seed, v) = caught(Defect::ChargeInMemory, Partition::Replace, 69..70).expect("not caught");
    assert!(v.starts_with("invariant 7"), "seed {seed}: {v}");
}

#[test]
fn checker_catches_absence_in_a_lagging_view_taken_for_gone() {
    // The controller's watch of a member lags: a job taken back while its new copy is not yet
    // in the view has that orphan "confirmed gone", and once the member is removed the job runs
    // twice: from the moment the orphan is dropped, no record names that copy. Absence counts
    // only from a view that has reached muster's create.
    let (seed, v) = caught(Defect::AbsenceTrusted, Partition::Replace, 54..55).expect("not caught");
    assert!(v.starts_with("invariant 7"), "seed {seed}: {v}");
    holds_without_the_defect(seed);
}

#[test]
fn checker_catches_a_replica_that_dates_by_its_own_clock() {
    // A replica whose clock runs minutes behind the last leader's reads that leader's
    // deadlines as far off: a job whose pods never start holds its quota past every timeout.
    let (seed, v) = caught(Defect::ClockTrusted, Partition::Replace, 0..50).expect("not caught");
    assert!(v.starts_with("invariant 5"), "seed {seed}: {v}");
}

#[test]
fn checker_catches_a_lease_handed_over_while_writes_are_out() {
    // The hub has no fence: a record the replaced leader sent lands after the next leader
    // wrote its own, so the hub's record is no longer the one in force. A
    // replica hands its lease over only once every write sent under it is answered or given up.
    let (seed, v) = caught(Defect::ReleaseEarly, Partition::Replace, 12..13).expect("not caught");
    assert!(v.starts_with("invariant 6"), "seed {seed}: {v}");
}

// `Defect::CreatesBeforeTakeBacks` (a create beside a copy taken back in the same pass) was
// shown here with seed 8519. That run took a job back after a restart because its durable
// admission lacked the generation its spec was read from. Admissions keep it now, and no seed
// in 0..50,000 reaches the story. The defect is shown directly in
// `lifecycle::book_tests::a_create_waits_for_a_copy_taken_back_in_the_same_pass`.

#[test]
fn checker_catches_a_create_for_a_job_taken_back_in_the_same_pass() {
    // A job admitted whose copy is not made yet has its create retried as it steps; the same
    // pass's cycle then takes it back (its place reclaimed). Sent anyway, the create makes a
    // copy for no admission: on a real member it carries no admission annotation, and muster
    // neither adopts nor deletes it (`make bench-kueue`, 2026-12-06: seven jobs stuck). Seed
    // 101 is the first of 0..400 to show it (13 of them do).
    let (seed, v) =
        caught(Defect::CreatesForTakenBack, Partition::Replace, 101..102).expect("not caught");
    assert!(v.starts_with("invariant 9"), "seed {seed}: {v}");
    holds_without_the_defect(seed);
}

#[test]
fn checker_catches_a_job_made_again_that_takes_an_earlier_ones_name() {
    // A hub job deleted while its copy runs, and made again under its name at once: taken in
    // while muster keeps the earlier job's QueuedJob, the new job takes it over and the
    // earlier job's record is gone while its copy still runs, named by nothing durable. It
    // waits for the name instead (`tidy::intake`). Seed 249 (76 before admissions woke the jobs
    // quota may move; 163 and 160 earlier still).
    let (seed, v) =
        caught(Defect::NameTakenOver, Partition::Replace, 249..250).expect("not caught");
    assert!(v.starts_with("invariant 7"), "seed {seed}: {v}");
    holds_without_the_defect(seed);
}

#[test]
fn a_job_made_again_right_after_a_restart_waits_for_the_earlier_record() {
    // Seed 24 (20 before the dispatch write waited for pods, 3809 before the fair order, 1522
    // before the simulation edited training runtimes): a running job's hub
    // job is deleted with `--cascade=orphan` (its QueuedJob stays, not Terminating) and made
    // again under its name; the controller restarts. The new
    // process takes the new job in before `tidy` has charged the earlier one again from its
    // record, so `Book::keeps` alone said "not kept": the new job took the QueuedJob over while
    // the earlier copy ran (invariant 7). The intake now asks whether the book would keep it.
    let o = run(&Options {
        seed: 24,
        partition: Partition::Replace,
        ..Options::default()
    });
    assert_eq!(o.violation, None, "{}", report(&o));
    assert!(
        o.trace
            .iter()
            .any(|l| l.contains("j7n waits for the QueuedJob of j7")),
        "the seed no longer makes a job wait for an earlier one's name: find another"
    );
}

#[test]
fn checker_catches_a_patch_made_from_belief_alone() {
    // A status write whose answer was lost landed all the same; the next write, a merge patch
    // from the status last known to have landed, leaves the keys the lost one set (a member,
    // an old copy) on the hub, and the record a new leader reads is not the one written.
    let (seed, v) = caught(Defect::PatchFromBelief, Partition::Replace, 2..3).expect("not caught");
    assert!(v.starts_with("invariant 6"), "seed {seed}: {v}");
}

#[test]
fn checker_catches_a_status_taken_over_with_the_earlier_jobs_keys() {
    // A job made again under the name of a deleted one whose QueuedJob stayed (deleted with
    // `--cascade=orphan`): the create takes that QueuedJob over; its status patch, planned
    // from nothing, leaves the earlier job's keys in the new job's record.
    let (seed, v) =
        caught(Defect::StatusTakenOver, Partition::Replace, 78..79).expect("not caught");
    assert!(v.starts_with("invariant 6"), "seed {seed}: {v}");
    // The record broken is the new job's (`j0n`), not any other's.
    assert!(
        v.contains("n differs from the controller's"),
        "seed {seed}: {v}"
    );
}

#[test]
fn checker_catches_a_running_job_taken_back_for_an_edit_of_its_training_runtime() {
    // The hub's training runtime is edited while jobs that name it run: they read otherwise
    // (their generation unchanged). Taken back as edited, their running copies are killed for
    // an edit nobody made to them (invariant 8); the fix keeps them running, charged as
    // admitted, while their generation has not moved.
    let (seed, v) = caught(Defect::RuntimeRespecs, Partition::Replace, 0..20).expect("not caught");
    assert!(v.starts_with("invariant 8"), "seed {seed}: {v}");
    holds_without_the_defect(seed);
    let o = run(&Options {
        seed,
        partition: Partition::Replace,
        ..Options::default()
    });
    assert!(
        o.trace
            .iter()
            .any(|l| l.contains("the training runtime is edited")),
        "the seed no longer edits the training runtime: find another"
    );
}

#[test]
fn a_copy_is_created_only_once_the_hub_no_longer_lists_an_old_copy_on_its_member() {
    // Seed 6167 (found in the 10,000-seed run): a job taken back from member-a and admitted
    // there again; its old copy gone, but the record on the hub still listed it to go when the
    // new copy was created. The job, preempted at once, had that new copy deleted on the
    // strength of the stale listing before its take-back reached the hub (invariant 3). The
    // create now waits until the hub holds this admission without it.
    let o = run(&Options {
        seed: 6167,
        partition: Partition::Replace,
        ..Options::default()
    });
    assert_eq!(o.violation, None, "{}", report(&o));
}

#[test]
fn a_copy_is_created_only_for_the_admission_the_hub_holds() {
    // Seed 9813 (both policies, found in the 10,000-seed run): a job admitted to member-c is
    // preempted and admitted to member-c again while its take-back record is on its way. The
    // hub still held the first admission, so the copy was created; the take-back landed after
    // it, and the copy ran with no record naming it (invariant 7). The create now waits until
    // the hub holds this admission (`Record::records_admission`).
    for partition in [Partition::Replace, Partition::Wait] {
        let o = run(&Options {
            seed: 9813,
            partition,
            ..Options::default()
        });
        assert_eq!(o.violation, None, "{}", report(&o));
    }
}

#[test]
fn a_job_made_again_under_a_kept_name_takes_its_queued_job_over_only_when_let() {
    // Seed 71 (76 before the dispatch write waited for pods): job j4 is deleted with
    // `--cascade=orphan` (its QueuedJob left behind) and made again under its name as j4n. Its first create meets j4's QueuedJob and takes nothing
    // over until the core has said that record keeps nothing (`tidy::takes_over`, asked where
    // the write lands); the next write takes it. Every invariant holds throughout. (Seed 161
    // showed the same with the hub watches down between the delete and the relist; the fair
    // order changed that run, and no seed in 0..8,000 shows the story with a drop now. Seed 202
    // showed it until creates waited for every job of a pass to step.)
    let o = run(&Options {
        seed: 71,
        partition: Partition::Replace,
        ..Options::default()
    });
    assert_eq!(o.violation, None, "{}", report(&o));
    let at = |what: &str| {
        o.trace
            .iter()
            .position(|l| l.contains(what))
            .unwrap_or_else(|| panic!("no {what:?} in the trace:\n{}", o.trace.join("\n")))
    };
    let deleted = at("hub job j4 deleted");
    let tracked = at("track j4n");
    let met = at("write j4n: QueuedJob team-b/job-4 holds j4's record; nothing taken over");
    let taken = at("write j4n: QueuedJob team-b/job-4 taken over");
    assert!(deleted < tracked && tracked < met && met < taken);
}

#[test]
fn a_seed_replays_the_same_run_whatever_the_hash_keys() {
    // Seed 3842 takes three jobs back at once when member-c is removed, and the lifecycle
    // submits two of them again (their avoid list left them nowhere to go). Every run in this
    // process gets new `HashMap` keys; a decision that followed a map's order (it once did:
    // the lifecycle walked its job-id map) gave a different trace about one run in two.
    let once = || {
        run(&Options {
            seed: 3842,
            partition: Partition::Replace,
            ..Options::default()
        })
    };
    let first = once();
    assert_eq!(first.violation, None, "{}", report(&first));
    for _ in 0..10 {
        let again = once();
        assert!(
            again.trace == first.trace,
            "seed 3842 replayed differently:\n{}",
            again
                .trace
                .iter()
                .zip(&first.trace)
                .find(|(a, b)| a != b)
                .map(|(a, b)| format!("{b}\n  became\n{a}"))
                .unwrap_or_else(|| "(one trace is longer)".into())
        );
    }
}

#[test]
fn checker_catches_a_record_someone_else_changed_left_as_they_left_it() {
    // Someone edits a QueuedJob's status (its requeue count) while faults last. A driver that
    // trusts nobody else writes there (no resourceVersion precondition, no look at what the
    // hub shows) never writes that key again, and the hub's record stays other than the
    // controller's. Now the core sees the record shown otherwise for the settle time
    // (`Book::drifted`) and the job's record is written again, whole, against the view's
    // resourceVersion (a view that lags meets a conflict and the patch is made from what is
    // there).
    let (seed, v) = caught(Defect::Unconditioned, Partition::Replace, 2..3).expect("not caught");
    assert!(v.starts_with("invariant 6"), "seed {seed}: {v}");
    assert!(v.contains("requeues"), "seed {seed}: {v}");
    holds_without_the_defect(seed);
    let o = run(&Options {
        seed,
        partition: Partition::Replace,
        ..Options::default()
    });
    let edited = o
        .trace
        .iter()
        .position(|l| l.contains("someone edits the status"))
        .expect("an edit");
    assert!(
        o.trace[edited..]
            .iter()
            .any(|l| l.contains("holds a record someone else changed; written again")),
        "the edit was never written over:\n{}",
        report(&o)
    );
}
