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
