//! Unit tests of the lifecycle's transitions, one per defect of issue 11 they close, written
//! with small chainable builders: a record ([`rec`]) and an observation ([`Obs`]).

use std::collections::BTreeMap;

use super::*;

const D: &str = "spec-1";

fn s() -> Settings {
    Settings {
        member_lost_grace: 60_000,
        ..Settings::default()
    }
}

/// A record of `phase` on member-a (no member when Queued).
fn rec(phase: Phase) -> Record {
    Record {
        phase,
        cluster: (phase != Phase::Queued).then(|| "member-a".to_string()),
        spec: D.into(),
        admitted_at: Some(0),
        copy_uid: matches!(phase, Phase::Dispatched | Phase::Running).then(|| "copy-1".into()),
        dispatched_at: matches!(phase, Phase::Dispatched | Phase::Running).then_some(1_000),
        ran: phase == Phase::Running,
        ..Record::default()
    }
}

/// What a step sees; by default the hub holds `r` itself and the member answers with no copy.
struct Obs(Seen);

impl Obs {
    fn of(r: &Record, now: Ms) -> Obs {
        Obs(Seen {
            now,
            spec: r.spec.clone(),
            generation: r.generation,
            hub: Some(r.clone()),
            here: r.cluster.as_ref().map(|_| Member::Answering(None)),
            orphans: r
                .orphans
                .keys()
                .map(|c| (c.clone(), Member::Answering(None)))
                .collect(),
            created: None,
            refused: None,
            versions: Default::default(),
        })
    }
    fn hub(mut self, h: Option<Record>) -> Obs {
        self.0.hub = h;
        self
    }
    fn here(mut self, m: Member) -> Obs {
        self.0.here = Some(m);
        self
    }
    fn copy(self, uid: &str, progress: Progress, live: u32) -> Obs {
        self.here(Member::Answering(Some(Copy {
            uid: uid.into(),
            progress,
            live_pods: live,
            expected: 3,
            pods_done: false,
            waiting: None,
        })))
    }
    fn orphan(mut self, c: &str, m: Member) -> Obs {
        self.0.orphans.insert(c.into(), m);
        self
    }
    fn spec(mut self, d: &str) -> Obs {
        self.0.spec = d.into();
        self
    }
    fn created(mut self, c: Created) -> Obs {
        self.0.created = Some(c);
        self
    }
    fn step(&self, r: &Record) -> (Record, Vec<Intent>) {
        step(r, &self.0, &s())
    }
    fn step_with(&self, r: &Record, settings: &Settings) -> (Record, Vec<Intent>) {
        step(r, &self.0, settings)
    }
}

fn creates(out: &[Intent]) -> bool {
    out.iter().any(|i| matches!(i, Intent::Create { .. }))
}

fn deletes(out: &[Intent]) -> Vec<String> {
    out.iter()
        .filter_map(|i| match i {
            Intent::Delete { cluster, .. } => Some(cluster.clone()),
            _ => None,
        })
        .collect()
}

fn requeued(out: &[Intent]) -> Option<RequeueReason> {
    out.iter().find_map(|i| match i {
        Intent::Requeued(r) => Some(*r),
        _ => None,
    })
}

const RUNNING: Progress = Progress::Running {
    scheduled: 3,
    running: 3,
};
const STARTING: Progress = Progress::Starting {
    scheduled: 1,
    running: 1,
};

#[test]
fn an_admission_keeps_the_generation_its_spec_was_read_from() {
    // Otherwise the next step sets it again, and the record is written twice.
    let queued = Record {
        generation: Some(3),
        ..rec(Phase::Queued)
    };
    let (n, _) = step::admitted(&queued, "member-a", BTreeMap::new(), 5_000);
    assert_eq!((n.phase, n.generation), (Phase::Admitted, Some(3)));
}

#[test]
fn the_copy_is_created_only_once_the_hub_holds_the_admission() {
    // Defect 3: a copy created before its admission is durable is created again after a crash.
    let r = rec(Phase::Admitted);
    let (_, out) = Obs::of(&r, 1_000).hub(None).step(&r);
    assert!(!creates(&out));
    let (_, out) = Obs::of(&r, 1_000).hub(Some(rec(Phase::Queued))).step(&r);
    assert!(!creates(&out));
    let (_, out) = Obs::of(&r, 1_000).step(&r);
    assert!(creates(&out));
}

#[test]
fn the_copy_waits_for_this_admission_not_an_earlier_one_to_the_same_member() {
    // Fault seed 9813: admitted to member-a, taken back (preempted; that record still on its
    // way to the hub) and admitted to member-a again. The hub holds the first admission: a
    // create on its strength ran a copy that the take-back, landing after it, left unnamed.
    let first = rec(Phase::Admitted);
    let again = Record {
        admitted_at: Some(4_000),
        requeues: 1,
        ..rec(Phase::Admitted)
    };
    let (_, out) = Obs::of(&again, 5_000).hub(Some(first)).step(&again);
    assert!(!creates(&out), "{out:?}");
    // Fault seed 6167: the hub holds this admission, but still lists the old copy on member-a
    // to go (gone since; the record saying so still on its way). A copy created now would be
    // deleted on the strength of that record, its own take-back not yet on the hub.
    let mut stale = again.clone();
    stale.orphans.insert("member-a".into(), 3_000);
    let (_, out) = Obs::of(&again, 5_000).hub(Some(stale)).step(&again);
    assert!(!creates(&out), "{out:?}");
    let (_, out) = Obs::of(&again, 5_000).step(&again);
    assert!(creates(&out), "{out:?}");
}

#[test]
fn a_copy_found_after_a_lost_create_answer_is_adopted() {
    let r = rec(Phase::Admitted);
    let (n, out) = Obs::of(&r, 2_000).copy("copy-9", STARTING, 1).step(&r);
    assert_eq!(n.phase, Phase::Dispatched);
    assert_eq!(n.copy_uid.as_deref(), Some("copy-9"));
    assert!(!creates(&out));
}

#[test]
fn failing_creates_are_retried_then_given_up_and_the_member_avoided() {
    // Defect 6: a member that can never create the job held its quota forever.
    let failed = Created::Failed {
        message: "the server could not find the requested resource".into(),
    };
    let r = rec(Phase::Admitted);
    let (r, out) = Obs::of(&r, 1_000).created(failed.clone()).step(&r);
    assert!(!creates(&out), "retried only after the retry interval");
    assert!(r.reason.contains("could not find"));
    let (r, out) = Obs::of(&r, 6_000).step(&r);
    assert!(creates(&out));
    let (r, _) = Obs::of(&r, 6_500).created(failed.clone()).step(&r);
    assert_eq!(r.phase, Phase::Admitted);
    let (n, out) = Obs::of(&r, 61_000).step(&r);
    assert_eq!(n.phase, Phase::Queued);
    assert_eq!(requeued(&out), Some(RequeueReason::CreateFailed));
    assert!(out.contains(&Intent::Release));
    assert!(n.avoid.contains("member-a"));
    assert!(
        n.orphans.contains_key("member-a"),
        "a lost create may have made a copy"
    );
    assert!(n.backoff_until.is_some());
}

#[test]
fn stuck_pods_are_timed_from_dispatch_even_without_a_dispatch_time() {
    // Defect 6: jobs whose dispatchedAt was never written were never taken back.
    let mut r = rec(Phase::Dispatched);
    r.dispatched_at = None;
    let (r, out) = Obs::of(&r, 10_000).copy("copy-1", STARTING, 1).step(&r);
    assert_eq!(r.dispatched_at, Some(10_000));
    assert!(out.contains(&Intent::WakeAt(310_000)));
    let (n, out) = Obs::of(&r, 310_000).copy("copy-1", STARTING, 1).step(&r);
    assert_eq!(requeued(&out), Some(RequeueReason::StuckPods));
    assert!(n.avoid.contains("member-a"));
}

#[test]
fn succeeded_pods_are_progress_not_loss() {
    // Defect 7: the last wave of a batch Job, workers done before their master.
    assert!(matches!(
        Progress::judge(1, 1, 2, 0, 3),
        Progress::Running { .. }
    ));
    assert!(matches!(
        Progress::judge(3, 1, 2, 0, 3),
        Progress::Running { .. }
    ));
    assert!(matches!(
        Progress::judge(2, 1, 1, 1, 3),
        Progress::Starting { .. }
    ));
    assert!(matches!(
        Progress::judge(0, 0, 0, 0, 3),
        Progress::Starting { .. }
    ));
    let r = rec(Phase::Running);
    let p = Progress::judge(1, 1, 2, 0, 3);
    let (n, out) = Obs::of(&r, 500_000).copy("copy-1", p, 1).step(&r);
    assert_eq!(n.phase, Phase::Running);
    assert_eq!(n.degraded_since, None);
    assert_eq!(requeued(&out), None);
}

#[test]
fn an_ended_job_keeps_its_quota_while_pods_still_run() {
    // Defect 8: cleanPodPolicy None, RayCluster kept after its job.
    let r = rec(Phase::Running);
    let (r, out) = Obs::of(&r, 5_000)
        .copy("copy-1", Progress::Succeeded, 2)
        .step(&r);
    assert_eq!(r.phase, Phase::Finished);
    assert!(r.lingering && r.holds());
    assert!(!out.contains(&Intent::Release));
    assert!(out.contains(&Intent::Ended { succeeded: true }));
    let silent = Member::Silent { since: 6_000 };
    let (r, out) = Obs::of(&r, 7_000).here(silent).step(&r);
    assert!(r.lingering && !out.contains(&Intent::Release));
    let (r, out) = Obs::of(&r, 8_000)
        .copy("copy-1", Progress::Succeeded, 0)
        .step(&r);
    assert!(!r.lingering && !r.holds());
    assert!(out.contains(&Intent::Release));
    assert_eq!(r.reason, "succeeded on member-a");
}

#[test]
fn a_silent_member_loses_its_job_after_the_grace_and_the_old_copy_is_deleted_when_it_answers() {
    // Defect 9 (policy Replace) and defect 16.
    let r = rec(Phase::Running);
    let silent = Member::Silent { since: 10_000 };
    let (r, out) = Obs::of(&r, 20_000).here(silent.clone()).step(&r);
    assert_eq!(r.phase, Phase::Running);
    assert!(out.contains(&Intent::WakeAt(70_000)));
    let (q, out) = Obs::of(&r, 70_000).here(silent).step(&r);
    assert_eq!(q.phase, Phase::Queued);
    assert_eq!(requeued(&out), Some(RequeueReason::MemberLost));
    assert!(
        out.contains(&Intent::Submit),
        "no backoff for a lost member"
    );
    assert_eq!(q.orphans.get("member-a"), Some(&70_000));
    assert!(q.avoid.is_empty());
    // Placed on member-b meanwhile; member-a answers with the old copy: deleted, but only
    // once the hub holds a record saying it goes.
    let mut b = q.clone();
    b.phase = Phase::Running;
    b.cluster = Some("member-b".into());
    b.copy_uid = Some("copy-b".into());
    let old = Member::Answering(Some(Copy {
        uid: "copy-1".into(),
        progress: RUNNING,
        live_pods: 3,
        expected: 3,
        pods_done: false,
        waiting: None,
    }));
    let obs = Obs::of(&b, 80_000)
        .copy("copy-b", RUNNING, 3)
        .orphan("member-a", old);
    let (_, out) = obs.step(&b);
    assert_eq!(deletes(&out), vec!["member-a".to_string()]);
    let (_, out) = Obs(Seen {
        hub: Some(rec(Phase::Running)),
        ..obs.0.clone()
    })
    .step(&b);
    assert!(
        deletes(&out).is_empty(),
        "the hub still places it on member-a"
    );
    let (n, _) = Obs::of(&b, 90_000).copy("copy-b", RUNNING, 3).step(&b);
    assert!(n.orphans.is_empty(), "confirmed gone");
    // A removed member takes its job with it at once.
    let (n, out) = Obs::of(&r, 20_000).here(Member::Removed).step(&r);
    assert_eq!(
        (n.phase, requeued(&out)),
        (Phase::Queued, Some(RequeueReason::MemberLost))
    );
}

#[test]
fn a_removed_members_copy_stays_declared_and_is_deleted_when_it_is_registered_again() {
    // Issue 28: the orphan was dropped when its member was removed, so a member registered
    // again ran its old copy beside the new one, declared nowhere.
    let r = rec(Phase::Running);
    let (q, out) = Obs::of(&r, 20_000).here(Member::Removed).step(&r);
    assert_eq!(requeued(&out), Some(RequeueReason::MemberLost));
    assert!(q.orphans.contains_key("member-a"));
    let mut b = q.clone();
    b.phase = Phase::Running;
    b.cluster = Some("member-b".into());
    b.copy_uid = Some("copy-b".into());
    // Removed: kept, said once, and declared as possibly running twice; not a reason to wait.
    let removed = Obs::of(&b, 30_000)
        .copy("copy-b", RUNNING, 3)
        .orphan("member-a", Member::Removed);
    let (n, out) = removed.step(&b);
    assert!(n.orphans.contains_key("member-a") && n.unconfirmed.contains("member-a"));
    let said = |out: &[Intent]| {
        out.iter()
            .filter(|i| {
                matches!(
                    i,
                    Intent::Event {
                        transition: Transition::OldCopyUnconfirmed,
                        ..
                    }
                )
            })
            .count()
    };
    assert_eq!(said(&out), 1);
    assert_eq!(
        n.maybe_twice(&removed.0).collect::<Vec<_>>(),
        vec!["member-a"]
    );
    let (n2, out) = removed.step(&n);
    assert_eq!(
        (said(&out), n2.orphans.len()),
        (0, 1),
        "said once, still kept"
    );
    // Registered again, with the old copy: deleted there.
    let old = Member::Answering(Some(Copy {
        uid: "copy-1".into(),
        progress: RUNNING,
        live_pods: 3,
        expected: 3,
        pods_done: false,
        waiting: None,
    }));
    let back = Obs::of(&n2, 40_000)
        .copy("copy-b", RUNNING, 3)
        .orphan("member-a", old);
    let (n3, out) = back.step(&n2);
    assert_eq!(deletes(&out), vec!["member-a".to_string()]);
    let (n4, out) = Obs::of(&n3, 50_000).copy("copy-b", RUNNING, 3).step(&n3);
    assert!(n4.orphans.is_empty() && n4.unconfirmed.is_empty());
    assert!(out.iter().any(|i| matches!(
        i,
        Intent::Event {
            transition: Transition::OldCopyGone,
            ..
        }
    )));
}

#[test]
fn with_policy_wait_a_silent_member_keeps_its_job_and_blocks_a_second_copy() {
    let mut st = s();
    st.partition = Partition::Wait;
    let r = rec(Phase::Running);
    let silent = Member::Silent { since: 0 };
    let (n, out) = Obs::of(&r, 10_000_000)
        .here(silent.clone())
        .step_with(&r, &st);
    assert_eq!(n.phase, Phase::Running);
    assert_eq!(requeued(&out), None);
    // An old copy on a silent member keeps a new admission from creating.
    let mut a = rec(Phase::Admitted);
    a.cluster = Some("member-b".into());
    a.orphans.insert("member-a".into(), 0);
    let obs = Obs::of(&a, 1_000).orphan("member-a", silent);
    let (n, out) = obs.step_with(&a, &st);
    assert!(!creates(&out));
    assert!(n.reason.contains("may still run"), "{}", n.reason);
    let (_, out) = obs.step(&a);
    assert!(creates(&out), "policy Replace accepts the risk");
}

#[test]
fn an_edited_job_is_taken_back_and_submitted_as_it_is_now() {
    // Defect 10.
    for phase in [Phase::Admitted, Phase::Running] {
        let r = rec(phase);
        let (n, out) = Obs::of(&r, 1_000).spec("spec-2").step(&r);
        assert_eq!(n.phase, Phase::Queued);
        assert_eq!(n.spec, "spec-2");
        assert!(!creates(&out));
        assert!(out.contains(&Intent::Release) && out.contains(&Intent::Submit));
        assert_eq!(requeued(&out), Some(RequeueReason::SpecChanged));
    }
}

#[test]
fn an_object_muster_did_not_create_is_not_the_jobs_copy() {
    // Defect 11: a spoofed copy that reaches Complete must not finish the job.
    let r = rec(Phase::Running);
    let (n, out) = Obs::of(&r, 1_000)
        .copy("someone-else", Progress::Succeeded, 0)
        .step(&r);
    assert_eq!(n.phase, Phase::Running);
    assert!(!out.contains(&Intent::Ended { succeeded: true }));
    assert_eq!(n.missing_since, Some(1_000));
    let (n, out) = Obs::of(&n, 16_000).step(&n);
    assert_eq!(
        (n.phase, requeued(&out)),
        (Phase::Queued, Some(RequeueReason::CopyLost))
    );
}

#[test]
fn preemption_forgets_the_timers_of_the_placement() {
    // Defect 17.
    let mut r = rec(Phase::Running);
    r.degraded_since = Some(5_000);
    r.missing_since = Some(6_000);
    let (n, out) = preempted(&r, "team-b/job-0", "reclaim", 7_000);
    assert_eq!(n.phase, Phase::Queued);
    assert!(!n.ran && n.degraded_since.is_none() && n.missing_since.is_none());
    assert!(n.dispatched_at.is_none() && n.copy_uid.is_none() && n.cluster.is_none());
    assert_eq!(n.orphans.get("member-a"), Some(&7_000));
    assert_eq!(requeued(&out), Some(RequeueReason::Preempted));
}

#[test]
fn a_deleted_hub_job_deletes_every_copy_and_frees_its_quota() {
    let mut r = rec(Phase::Running);
    r.orphans = BTreeMap::from([("member-c".to_string(), 1)]);
    let out = gone(&r);
    assert!(out.contains(&Intent::Release));
    assert_eq!(
        deletes(&out),
        vec!["member-a".to_string(), "member-c".to_string()]
    );
}

#[test]
fn the_spec_digest_ignores_layout_and_suspend() {
    let job = |suspend: bool, cpu: &str| {
        serde_json::json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "j", "namespace": "team-a"},
            "spec": {"suspend": suspend, "parallelism": 2, "template": {"spec": {"containers": [
                {"name": "c", "resources": {"requests": {"cpu": cpu}}}]}}}})
    };
    let d =
        |v: serde_json::Value| spec_of(crate::workload::interpret(&v).map_err(|e| e.to_string())).1;
    assert_eq!(d(job(true, "1")), d(job(false, "1000m")));
    assert_ne!(d(job(true, "1")), d(job(true, "2")));
}

#[test]
fn a_job_whose_pods_all_succeeded_frees_its_quota_before_the_member_says_so() {
    // A batch Job's completions succeeded; its member's Job controller has not counted them.
    let r = rec(Phase::Running);
    let done = |n: &Record, now: Ms, pods_done: bool| {
        Obs::of(n, now).here(Member::Answering(Some(Copy {
            uid: "copy-1".into(),
            progress: Progress::judge(0, 0, 3, 0, 3),
            live_pods: 0,
            expected: 3,
            pods_done,
            waiting: None,
        })))
    };
    let (n, out) = done(&r, 5_000, true).step(&r);
    assert_eq!(n.phase, Phase::Running);
    assert!(n.pods_done && n.holds() && !n.charged());
    assert_eq!(out.iter().filter(|i| **i == Intent::Release).count(), 1);
    assert!(n.reason.starts_with("every pod succeeded on member-a"));
    // Its copy stays its own: never deleted for it, and freed only once.
    assert!(!n.removes_from("member-a"));
    let (n2, out) = done(&n, 6_000, true).step(&n);
    assert!(!out.contains(&Intent::Release) && n2 == n);
    // Its pods collected before the member's word: still done, nothing taken back.
    let (n3, out) = Obs::of(&n, 7_000).copy("copy-1", STARTING, 0).step(&n);
    assert!(n3.pods_done && requeued(&out).is_none() && !out.contains(&Intent::Release));
    // An edit now changes nothing that runs: not taken back.
    let (n4, out) = done(&n, 8_000, false).spec("spec-2").step(&n);
    assert!(n4.pods_done && requeued(&out).is_none());
    // The member's word: Finished, nothing more to free (the release is idempotent).
    let (f, out) = Obs::of(&n, 9_000)
        .copy("copy-1", Progress::Succeeded, 0)
        .step(&n);
    assert_eq!(f.phase, Phase::Finished);
    assert!(out.contains(&Intent::Ended { succeeded: true }));
    assert_eq!(f.reason, "succeeded on member-a");
}

#[test]
fn a_job_still_charged_is_not_done_until_its_copy_says_so() {
    let r = rec(Phase::Running);
    let (n, out) = Obs::of(&r, 5_000)
        .copy("copy-1", Progress::judge(0, 0, 3, 0, 3), 0)
        .step(&r);
    assert!(!n.pods_done && n.charged());
    assert!(!out.contains(&Intent::Release));
}

/// A job rejected for a PriorityClass that did not exist yet, followed again from its record
/// after a restart, is judged again: still rejected while the class is missing, queued (and
/// admitted) once it is created. Before, a restored Rejected record was final.
#[test]
fn a_rejected_job_is_judged_again_after_a_restart() {
    use crate::fleet::{ClusterInfo, NodeInfo};
    use crate::scheduler::{Config, Scheduler};
    let mut sched = Scheduler::new(Config::default());
    sched.set_cluster(&ClusterInfo {
        name: "member-a".into(),
        nodes: vec![NodeInfo::ready(
            "a",
            &[("cpu", "16"), ("nvidia.com/gpu", "2"), ("pods", "110")],
        )],
        ..Default::default()
    });
    let w = crate::workload::interpret(&serde_json::json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "j", "namespace": "team"},
        "spec": {"template": {"spec": {"priorityClassName": "late", "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "x",
                "resources": {"limits": {"cpu": "1", "nvidia.com/gpu": "1"}}}]}}}
    }))
    .expect("interprets");
    let spec = spec_of(Ok(w));
    let durable = Record {
        phase: Phase::Rejected,
        spec: spec.1.clone(),
        reason: "PriorityClass late does not exist".into(),
        ..Record::default()
    };
    let mut book = Book::new(s());
    let out = book
        .track(
            &mut sched,
            "u",
            "team/j".into(),
            &spec,
            None,
            0,
            Some(durable),
        )
        .expect("followed");
    assert!(
        out.is_empty(),
        "no intake Event for a job followed again: {out:?}"
    );
    let e = book.get("u").expect("entry");
    assert_eq!(
        e.record.phase,
        Phase::Rejected,
        "still missing: {:?}",
        e.record
    );
    assert!(e.id.is_some(), "in the scheduler, to be judged again");
    sched.set_priority_classes(BTreeMap::from([("late".to_string(), 100)]));
    let mut specs = |_: &str| Some(spec.clone());
    let mut seen = |_: &str, r: &Record| Obs::of(r, 10).0;
    book.pass(&mut sched, &mut specs, &mut seen, 10, true);
    let r = &book.get("u").expect("entry").record;
    assert!(
        matches!(r.phase, Phase::Queued | Phase::Admitted),
        "the class exists now: {r:?}"
    );
}

/// Issue 28: a TrainJob admitted to a member whose training runtime is then edited there (the
/// hub's watch of its own runtime dropped, so the job still reads as before) is not created
/// there: its copy would run other pods than were charged. It is placed again, that member
/// avoided. Before the check, the create went out.
#[test]
fn an_admitted_job_is_not_created_where_its_training_runtime_changed_since() {
    use crate::fleet::{ClusterInfo, NodeInfo, Serves};
    use crate::scheduler::{Config, Scheduler};
    use crate::workload::{RuntimeKey, RuntimeNeed};
    let key = RuntimeKey::cluster("torch-distributed");
    let member = |digest: &str| ClusterInfo {
        name: "member-a".into(),
        nodes: vec![NodeInfo::ready("a", &[("cpu", "16"), ("pods", "110")])],
        serves: Serves {
            runtimes: Some(BTreeMap::from([(key.to_string(), digest.to_string())])),
            ..Serves::default()
        },
        ..Default::default()
    };
    let mut sched = Scheduler::new(Config::default());
    sched.set_cluster(&member("d1"));
    tidy::apply_tree(
        &mut sched,
        &serde_json::json!({"spec": {"root": {"name": "root", "max": {"cpu": "16"},
            "children": [{"name": "team", "namespaces": ["team"], "max": {"cpu": "16"}}]}}}),
    )
    .expect("tree");
    let mut w = crate::workload::interpret(&serde_json::json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "j", "namespace": "team"},
        "spec": {"template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "c", "image": "x",
                "resources": {"requests": {"cpu": "1"}}}]}}}
    }))
    .expect("interprets");
    w.runtime = Some(RuntimeNeed {
        key: key.clone(),
        digest: "d1".into(),
    });
    let spec = spec_of(Ok(w));
    let mut book = Book::new(s());
    book.track(&mut sched, "u", "team/j".into(), &spec, None, 0, None)
        .expect("followed");
    let mut specs = |_: &str| Some(spec.clone());
    let mut seen = |_: &str, r: &Record| Obs::of(r, 10).0;
    book.pass(&mut sched, &mut specs, &mut seen, 10, true);
    let r = book.get("u").expect("entry").record.clone();
    assert_eq!(r.phase, Phase::Admitted, "{r:?}");
    book.written("u", Some(r));
    // While the member serves the runtime the job was read against, the copy is created.
    let out = book.pass(&mut sched, &mut specs, &mut seen, 20, true);
    assert!(
        out.iter().any(|(_, i)| matches!(i, Intent::Create { .. })),
        "{out:?}"
    );
    // The runtime is edited on the member before the next create.
    sched.set_cluster(&member("d2"));
    let out = book.pass(&mut sched, &mut specs, &mut seen, 30, true);
    assert!(
        !out.iter().any(|(_, i)| matches!(i, Intent::Create { .. })),
        "no copy made from a runtime the job was not read against: {out:?}"
    );
    let r = &book.get("u").expect("entry").record;
    assert_eq!(r.phase, Phase::Queued, "{r:?}");
    assert!(r.avoid.contains("member-a"), "{r:?}");
    assert!(
        r.reason.contains("no longer serves the job")
            && r.reason.contains("differs from the hub's"),
        "{}",
        r.reason
    );
}

/// Issue 28, found by the fleet test: a job admitted again to the member where its own old copy
/// is held by a finalizer. The controller sees that copy only as the orphan there (it was not
/// made for this admission), never as the job's copy; past the drain grace the job is placed
/// elsewhere all the same, that member avoided, instead of waiting for ever.
#[test]
fn a_job_whose_own_old_copy_is_stuck_where_it_is_admitted_goes_elsewhere_after_the_grace() {
    let mut r = rec(Phase::Admitted);
    r.orphans.insert("member-a".into(), 0);
    let stuck = Member::Answering(Some(Copy {
        uid: "old".into(),
        progress: Progress::Starting {
            scheduled: 0,
            running: 0,
        },
        live_pods: 0,
        expected: 3,
        pods_done: false,
        waiting: None,
    }));
    let grace = s().drain_grace;
    let early = Obs::of(&r, grace - 1_000).orphan("member-a", stuck.clone());
    let (n, out) = early.step(&r);
    assert_eq!(n.phase, Phase::Admitted, "within the grace it waits: {n:?}");
    assert!(!out.iter().any(|i| matches!(i, Intent::Create { .. })));
    let late = Obs::of(&r, grace).orphan("member-a", stuck);
    let (n, _) = late.step(&r);
    assert_eq!(n.phase, Phase::Queued, "taken back: {n:?}");
    assert!(n.avoid.contains("member-a"), "that member avoided: {n:?}");
}

#[test]
fn every_defect_has_one_name() {
    let mut names: Vec<&str> = Defect::ALL.iter().map(|(_, n)| *n).collect();
    for (d, n) in Defect::ALL {
        assert_eq!(Defect::named(n), Some(d));
    }
    names.sort();
    names.dedup();
    assert_eq!(names.len(), Defect::ALL.len());
}
