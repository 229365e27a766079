//! Reclaiming guaranteed quota (min) by preemption: it happens when a job within its leaf's min
//! cannot run because borrowers hold the capacity, and it never turns into a preemption
//! ping-pong (two jobs evicting each other forever).

use muster::quota::QuotaTree;
use muster::scheduler::{Config, Decision, JobId, Scheduler, Submitted};
use muster::sim::{self, Progress};
use muster::workload::interpret;

fn scenario(name: &str) -> sim::Scenario {
    let path = format!("{}/tests/data/scenarios/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).expect("scenario file");
    sim::parse_scenario(&path, &text).expect("scenario parses")
}

/// A scheduler loaded with a scenario's fleet, tree and priority classes (no jobs).
fn scheduler(sc: &sim::Scenario) -> Scheduler {
    let mut s = Scheduler::new(Config::default());
    if let Some(q) = &sc.quota {
        s.set_quota_tree(Some(QuotaTree::parse(q).expect("valid tree")));
    }
    s.set_priority_classes(sc.priority_classes.clone());
    for c in sim::cluster_infos(sc) {
        s.set_cluster(&c);
    }
    s
}

fn submit(s: &mut Scheduler, sc: &sim::Scenario, i: usize, at: u64) -> JobId {
    let w = interpret(&sc.jobs[i].manifest.value()).expect("manifest");
    match s.submit(&w, at) {
        Submitted::Queued(id) => id,
        other => panic!("job {i} not queued: {other:?}"),
    }
}

fn preemptions(ds: &[Decision]) -> Vec<(JobId, JobId)> {
    ds.iter()
        .filter_map(|d| match d {
            Decision::Preempt { job, by, .. } => Some((*job, *by)),
            _ => None,
        })
        .collect()
}

/// Fails a run whose virtual clock runs away (a run that never ends), deterministically.
struct VirtualWatchdog(u64);

impl Progress for VirtualWatchdog {
    fn tick(&mut self, done: usize, total: usize, now_ms: u64) {
        assert!(
            now_ms <= self.0,
            "the run never ends: virtual time {}s after {done} events ({total} without preemptions)",
            now_ms / 1000
        );
    }
}

#[test]
fn a_guaranteed_job_goes_before_a_borrower_in_the_same_cycle() {
    // a-borrower (team-a, above its min) and team-b's job (within its min) wait in the same
    // cycle, a-borrower submitted first; only one fits. team-b's job is admitted, a-borrower
    // waits, and nobody is preempted (admitting a-borrower first would have it reclaimed at once).
    let sc = scenario("reclaim.yaml");
    let mut s = scheduler(&sc);
    let a_first = submit(&mut s, &sc, 0, 0);
    s.cycle();
    let a_borrower = submit(&mut s, &sc, 1, 60);
    let b = submit(&mut s, &sc, 2, 61);
    let ds = s.cycle();
    assert_eq!(preemptions(&ds), [], "{ds:#?}");
    let admitted: Vec<JobId> = ds
        .iter()
        .filter_map(|d| match d {
            Decision::Admit { job, .. } => Some(*job),
            _ => None,
        })
        .collect();
    assert_eq!(admitted, [b], "{ds:#?}");
    assert!(matches!(
        s.state(a_first),
        muster::scheduler::JobState::Admitted { .. }
    ));
    assert!(!matches!(
        s.state(a_borrower),
        muster::scheduler::JobState::Admitted { .. }
    ));
}

#[test]
fn reclaim_preempts_the_most_recent_borrower_once() {
    let sc = scenario("reclaim.yaml");
    let mut s = scheduler(&sc);
    let a_first = submit(&mut s, &sc, 0, 0);
    s.cycle();
    let a_borrower = submit(&mut s, &sc, 1, 60);
    s.cycle();
    let b = submit(&mut s, &sc, 2, 600);
    let ds = s.cycle();
    assert_eq!(preemptions(&ds), [(a_borrower, b)], "{ds:#?}");
    assert!(
        ds.iter()
            .any(|d| matches!(d, Decision::Admit { job, .. } if *job == b)),
        "{ds:#?}"
    );
    assert!(matches!(
        s.state(a_first),
        muster::scheduler::JobState::Admitted { .. }
    ));
    // The victim waits; it does not take its capacity back from a job within its min.
    for _ in 0..3 {
        let ds = s.cycle();
        assert!(preemptions(&ds).is_empty(), "{ds:#?}");
    }
    assert_eq!(s.preemptions(a_borrower), 1);
    assert_eq!(s.preemptions(a_first), 0);
}

#[test]
fn no_preemption_ping_pong_within_a_cycle() {
    let sc = scenario("reclaim_pingpong.yaml");
    let mut s = scheduler(&sc);
    let v = submit(&mut s, &sc, 0, 0);
    let ds = s.cycle();
    assert!(
        ds.iter()
            .any(|d| matches!(d, Decision::Admit { job, .. } if *job == v))
    );
    let x = submit(&mut s, &sc, 1, 60);
    let ds = s.cycle();
    let p = preemptions(&ds);
    // A victim is requeued for the next cycle: no job is preempted twice in one cycle, and a
    // victim never evicts the job that evicted it.
    assert!(p.len() <= 1, "preemptions in one cycle: {p:?}");
    assert!(
        !p.contains(&(x, v)) || !p.contains(&(v, x)),
        "ping-pong: {p:?}"
    );
}

#[test]
fn no_preemption_ping_pong_across_cycles() {
    let sc = scenario("reclaim_pingpong.yaml");
    let mut s = scheduler(&sc);
    submit(&mut s, &sc, 0, 0);
    s.cycle();
    submit(&mut s, &sc, 1, 60);
    let mut all = Vec::new();
    for _ in 0..5 {
        all.extend(preemptions(&s.cycle()));
    }
    assert!(all.len() <= 1, "jobs keep evicting each other: {all:?}");
}

#[test]
fn sim_run_with_competing_guarantees_ends() {
    let sc = scenario("reclaim_pingpong.yaml");
    // Two 1h jobs: done within 2h of the last submission without preemption; allow far more.
    let mut watchdog = VirtualWatchdog(100 * 3_600_000);
    let r = sim::run("reclaim_pingpong.yaml", &sc, &mut watchdog).expect("runs");
    assert_eq!(r.summary.finished, 2, "{:#?}", r.jobs);
    assert!(r.summary.preemptions <= 1, "{:#?}", r.summary);
}

// ----- priority within a queue (`muster.dev/within-queue-preemption`) -------------------------

const A_LOW_1: usize = 0;
const B_1: usize = 1;
const B_2: usize = 2;
const A_HIGH: usize = 3;
const A_LOW_2: usize = 4;
const B_HIGH: usize = 5;
const A_HIGH_SMALL: usize = 6;

fn admitted(s: &Scheduler, job: JobId) -> bool {
    matches!(s.state(job), muster::scheduler::JobState::Admitted { .. })
}

fn reasons(ds: &[Decision]) -> Vec<(JobId, String)> {
    ds.iter()
        .filter_map(|d| match d {
            Decision::Preempt { job, reason, .. } => Some((*job, reason.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn a_job_preempts_its_queues_most_recent_lower_priority_job_where_the_leaf_allows_it() {
    // team-a's two low jobs fill its min, team-b's job its own; a high job of team-a asks 2.
    let sc = scenario("priority-preemption.yaml");
    let mut s = scheduler(&sc);
    let low_1 = submit(&mut s, &sc, A_LOW_1, 0);
    let low_2 = submit(&mut s, &sc, A_LOW_2, 1);
    let b = submit(&mut s, &sc, B_1, 2);
    s.cycle();
    assert!(admitted(&s, low_1) && admitted(&s, low_2) && admitted(&s, b));
    let high = submit(&mut s, &sc, A_HIGH_SMALL, 10);
    let ds = s.cycle();
    assert_eq!(preemptions(&ds), [(low_2, high)], "{ds:#?}");
    assert_eq!(
        reasons(&ds),
        [(
            low_2,
            "preempted in queue root/team-a for team-a/a-high-small of higher priority (100)"
                .into()
        )]
    );
    assert!(admitted(&s, high) && admitted(&s, low_1) && admitted(&s, b));
    // The victim waits behind it and never takes its place back.
    for _ in 0..3 {
        let ds = s.cycle();
        assert!(preemptions(&ds).is_empty(), "{ds:#?}");
    }
    assert!(!admitted(&s, low_2));
}

#[test]
fn a_leaf_without_the_attribute_never_preempts_its_own_jobs() {
    // team-b's high job would be within team-b's min with b-1 gone, but team-b does not allow
    // preemption by priority: it waits.
    let sc = scenario("priority-preemption.yaml");
    let mut s = scheduler(&sc);
    let b = submit(&mut s, &sc, B_1, 0);
    submit(&mut s, &sc, A_LOW_1, 1);
    submit(&mut s, &sc, A_LOW_2, 2);
    s.cycle();
    let high = submit(&mut s, &sc, B_HIGH, 10);
    for _ in 0..3 {
        let ds = s.cycle();
        assert!(preemptions(&ds).is_empty(), "{ds:#?}");
    }
    assert!(admitted(&s, b) && !admitted(&s, high));
}

#[test]
fn no_preemption_by_priority_for_a_place_above_the_min() {
    // team-a holds a high job and a low one (its min); a second high job would still borrow
    // with the low one gone (2 + 4 > 4): nothing is preempted for it.
    let sc = scenario("priority-preemption.yaml");
    let mut s = scheduler(&sc);
    let first = submit(&mut s, &sc, A_HIGH_SMALL, 0);
    let low = submit(&mut s, &sc, A_LOW_1, 1);
    submit(&mut s, &sc, B_1, 2);
    s.cycle();
    let high = submit(&mut s, &sc, A_HIGH, 10);
    for _ in 0..3 {
        let ds = s.cycle();
        assert!(preemptions(&ds).is_empty(), "{ds:#?}");
    }
    assert!(admitted(&s, first) && admitted(&s, low) && !admitted(&s, high));
}

#[test]
fn borrowed_capacity_is_taken_back_before_the_queues_own_jobs_and_only_what_is_needed() {
    // team-a's low job (2) and team-b's 4 + 2 (borrowing 2) fill the fleet. team-a's high job
    // (4) is within team-a's min once its low job is gone: it takes back team-b's borrowed 2
    // and preempts its low job; team-b's job within its min stays.
    let sc = scenario("priority-preemption.yaml");
    let mut s = scheduler(&sc);
    let low = submit(&mut s, &sc, A_LOW_1, 0);
    let b_1 = submit(&mut s, &sc, B_1, 1);
    let b_2 = submit(&mut s, &sc, B_2, 2);
    s.cycle();
    assert!(admitted(&s, low) && admitted(&s, b_1) && admitted(&s, b_2));
    let high = submit(&mut s, &sc, A_HIGH, 10);
    let ds = s.cycle();
    let mut got = preemptions(&ds);
    got.sort();
    let mut want = vec![(low, high), (b_2, high)];
    want.sort();
    assert_eq!(got, want, "{ds:#?}");
    for (job, reason) in reasons(&ds) {
        let kind = if job == low {
            "preempted in queue"
        } else {
            "preempted to reclaim"
        };
        assert!(reason.starts_with(kind), "{job}: {reason}");
    }
    assert!(admitted(&s, high) && admitted(&s, b_1));
    for _ in 0..3 {
        let ds = s.cycle();
        assert!(preemptions(&ds).is_empty(), "{ds:#?}");
    }
}

/// The issue "Min is a guarantee again": mins on cpu and memory as well as GPUs. team-a borrows
/// 4 GPUs while it uses 2 of its 32 guaranteed cpus; team-b's job within its GPU min preempts
/// one of team-a's jobs (the most recently admitted) and starts at once, not an hour later.
#[test]
fn a_min_on_cpu_and_memory_does_not_keep_borrowed_gpus_from_being_reclaimed() {
    let sc = scenario("reclaim_multi_resource.yaml");
    let mut s = scheduler(&sc);
    let a_one = submit(&mut s, &sc, 0, 0);
    let a_two = submit(&mut s, &sc, 1, 1_000);
    let ds = s.cycle();
    assert_eq!(
        ds.iter()
            .filter(|d| matches!(d, Decision::Admit { .. }))
            .count(),
        2,
        "{ds:?}"
    );
    let b_one = submit(&mut s, &sc, 2, 600_000);
    let ds = s.cycle();
    assert_eq!(preemptions(&ds), vec![(a_two, b_one)], "{ds:?}");
    assert!(
        ds.iter()
            .any(|d| matches!(d, Decision::Admit { job, .. } if *job == b_one)),
        "{ds:?}"
    );
    assert!(matches!(
        s.state(a_one),
        muster::scheduler::JobState::Admitted { .. }
    ));
    // And through `muster sim`'s driver: b-one is dispatched at its submission, 10m.
    let report = sim::run("reclaim_multi_resource.yaml", &sc, &mut ()).expect("runs");
    let b = report
        .jobs
        .iter()
        .find(|j| j.name == "b-one")
        .expect("b-one reported");
    assert_eq!(b.dispatched, serde_json::json!(600), "{b:?}");
    let a = report
        .jobs
        .iter()
        .find(|j| j.name == "a-two")
        .expect("a-two reported");
    assert_eq!(a.preemptions, 1, "{a:?}");
}

/// Records every preemption of a run, as it happens.
#[derive(Default)]
struct Preemptions(Vec<(u64, JobId, JobId)>, usize);

impl Progress for Preemptions {
    fn cycled(&mut self, now_ms: u64, decisions: &[Decision], _: &Scheduler) {
        self.1 += 1;
        for (v, by) in preemptions(decisions) {
            self.0.push((now_ms, v, by));
        }
    }
}

/// Leaves guaranteed different resources, each job asking both: reclaiming for cpu would have
/// team-a's job take what team-b is guaranteed in GPUs, and team-b take it back (a ping-pong
/// the differential test found). A job reclaims only while it stays within its own min in what
/// the victim's leaf is guaranteed: nothing is preempted at any cycle, a-job waits for b-job.
/// A scenario file run through `muster sim`'s driver, every cycle watched (at least three).
fn watched(name: &str) -> (sim::Report, Preemptions) {
    let sc = scenario(name);
    let mut watch = Preemptions::default();
    let report = sim::run(name, &sc, &mut watch).expect("runs");
    assert!(watch.1 >= 3, "the run was not watched: {} cycles", watch.1);
    (report, watch)
}

/// The report of the job named `name`.
fn reported<'a>(report: &'a sim::Report, name: &str) -> &'a sim::JobReport {
    report
        .jobs
        .iter()
        .find(|j| j.name == name)
        .unwrap_or_else(|| panic!("{name} reported"))
}

#[test]
fn reclaim_never_takes_what_the_victims_leaf_is_guaranteed_in_another_resource() {
    let (report, watch) = watched("reclaim_cross_resource.yaml");
    assert!(watch.0.is_empty(), "preemptions: {:?}", watch.0);
    let job = |name: &str| reported(&report, name);
    assert_eq!(job("b-job").dispatched, serde_json::json!(0));
    assert_eq!(job("a-job").dispatched, serde_json::json!(3600));
    assert_eq!(job("a-job").preemptions + job("b-job").preemptions, 0);
}

/// A job that may use one node pool reclaims what is borrowed on that pool: shortness is read
/// from the nodes it may use (R1), and a borrower's job on another pool, which frees nothing
/// it can use, does not stand in for the one that does (R6). Watched at every cycle: exactly
/// one preemption, b-mid for a-job at 10s.
#[test]
fn reclaim_reads_shortness_and_victims_from_the_nodes_the_job_may_use() {
    let (report, watch) = watched("reclaim_node_pools.yaml");
    let times: Vec<u64> = watch.0.iter().map(|(at, _, _)| *at).collect();
    assert_eq!(times, vec![10_000], "preemptions: {:?}", watch.0);
    let job = |name: &str| reported(&report, name);
    assert_eq!(job("a-job").dispatched, serde_json::json!(10));
    assert_eq!(job("b-mid").preemptions, 1);
    assert_eq!(job("b-low").preemptions, 0);
    assert_eq!(job("b-low").dispatched, serde_json::json!(0));
}

/// A victim kept first that frees too little (a cpu pod on the job's pool, the rest of its
/// charge on another) does not use up what its leaf borrows, so that the victim whose going
/// lets the job fit is left out (R6's second trial, R7; differential seed 64300). Watched at
/// every cycle: exactly one preemption, b-gpu for a-job at 10s.
#[test]
fn a_victim_kept_first_that_frees_too_little_does_not_keep_out_the_one_needed() {
    let (report, watch) = watched("reclaim_useless_victim_first.yaml");
    let times: Vec<u64> = watch.0.iter().map(|(at, _, _)| *at).collect();
    assert_eq!(times, vec![10_000], "preemptions: {:?}", watch.0);
    let job = |name: &str| reported(&report, name);
    assert_eq!(job("a-job").dispatched, serde_json::json!(10));
    assert_eq!(job("b-gpu").preemptions, 1);
    assert_eq!(job("b-low").preemptions, 0);
    assert_eq!(job("b-low").dispatched, serde_json::json!(0));
}
