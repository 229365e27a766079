//! The differential test: random scenarios run through `muster sim`'s own driver (the optimized
//! `Scheduler`, with its memos, skipped visits and incremental state) and, cycle by cycle,
//! through the reference scheduler (tests/support/reference.rs), which must make the same
//! decisions (admit where, preempt whom, who waits) and reach the same state; and the
//! properties of reclaim checked on every run (see `check_cycle` and `check_instant`).
//!
//! `MUSTER_DIFF_CASES` (default 6000, about 32 s in a debug build; 2000 until two divergences
//! were found beyond them) scenarios from `MUSTER_DIFF_SEED` (default 1) on (with
//! `MUSTER_DIFF_TRACE` set, each seed is named on stderr as it starts and its scenario written to
//! `differential-current.yaml` in the test tmpdir): a soak run sets more (a release build runs
//! about 600 cases a second: `MUSTER_DIFF_CASES=40000 MUSTER_DIFF_SEED=6001 cargo test
//! --release --test differential`), and one seed replays with `MUSTER_DIFF_CASES=1
//! MUSTER_DIFF_SEED=N`. A failing scenario is shrunk (jobs, members, node groups and changes
//! taken out while it still fails) and written as a scenario file that `muster sim` replays; the
//! failure names the file.

#[path = "support/follower.rs"]
mod follower;
#[path = "support/reference.rs"]
mod reference;
#[path = "support/scenarios.rs"]
mod scenarios;

use follower::Seen;
use muster::sim;
use scenarios::GScenario;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs one generated scenario through both; the failure, if any.
fn run(g: &GScenario, seen: &mut Seen) -> Option<String> {
    match sim::parse_scenario("generated.yaml", &g.to_yaml()) {
        Ok(sc) => follower::run_scenario("generated.yaml", &sc, seen),
        Err(e) => Some(format!("the generated scenario does not read: {e}")),
    }
}

/// Takes out jobs, changes, members and node groups while the scenario still fails.
fn shrink(mut g: GScenario) -> (GScenario, String) {
    let mut seen = Seen::default();
    let mut why = run(&g, &mut seen).unwrap_or_default();
    loop {
        let mut smaller = false;
        for cand in g.smaller() {
            if let Some(w) = run(&cand, &mut seen) {
                g = cand;
                why = w;
                smaller = true;
                break;
            }
        }
        if !smaller {
            return (g, why);
        }
    }
}

#[test]
fn the_scheduler_decides_as_the_reference_on_random_scenarios() {
    let cases = env_u64("MUSTER_DIFF_CASES", 6000);
    let base = env_u64("MUSTER_DIFF_SEED", 1);
    let trace = std::env::var("MUSTER_DIFF_TRACE").is_ok();
    let mut seen = Seen::default();
    // Seeds that once caught a defect, run every time too when outside the range (not in a
    // one-seed replay):
    // - 2811 (inside the default range since it grew to 6,000) lost a head of the fair order's
    //   round (a reclaim marked an inner node as a leaf to refresh), found at 8,000 cases;
    // - 6255 left asleep a job waiting for the fleet that an admission in its queue had put
    //   over its leaf's max, where the reference preempted its queue's job of lower priority
    //   in the next pass (admissions now wake the classes quota may move:
    //   `Scheduler::admission_wakes`), found at 4,255 cases;
    // - 13549 skipped a reclaim trial as failed after quota usage had changed (the memo of a
    //   trial that failed on quota now holds only while nothing the tree charges changed),
    //   found at 11,549 cases;
    // - 24639 failed the reclaim property: a job needing cpu on one node pool waited while a
    //   sibling borrowed cpu there (R1 now reads shortness, and R6 victims, from the nodes a
    //   job may use), and the property itself now counts, as R5 does, a victim's queue's jobs
    //   of lower priority that it could preempt to come back; found at 22,639 cases;
    // - 57987 left asleep a job over its leaf's max and the root's: it waited on its leaf, and
    //   a release under the root elsewhere brought it within the root's max, so that it could
    //   preempt its queue's jobs (a job over a max now waits on the highest such node of its
    //   path); found at 33,348 cases;
    // - 64300 failed the reclaim property: R5 kept first a job of lowest priority whose going
    //   alone did not let the job fit, and counting it gone put its leaf at its cpu min, so the
    //   job holding the GPUs needed was left out (R6 now makes a second trial, over every
    //   candidate R5 would keep as the first victim of its leaf, when the ones it keeps do not
    //   do, and uses the victims R7 leaves if R5 keeps them all); found at 58,300 cases.
    const KEPT: &[u64] = &[2811, 6255, 13549, 24639, 57987, 64300];
    let kept = KEPT
        .iter()
        .copied()
        .filter(|s| cases > 1 && !(base..base + cases).contains(s));
    for seed in (base..base + cases).chain(kept) {
        let g = scenarios::generate(seed);
        if trace {
            eprintln!("differential: seed {seed}");
            let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
            std::fs::write(dir.join("differential-current.yaml"), g.to_yaml())
                .expect("write the current scenario");
        }
        if let Some(why) = run(&g, &mut seen) {
            if trace {
                eprintln!("differential: seed {seed} fails, shrinking: {why}");
            }
            let (small, why_small) = shrink(g);
            let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
            let file = dir.join(format!("differential-seed-{seed}.yaml"));
            let text = format!(
                "# Shrunk from seed {seed} of tests/differential.rs: {}\n{}",
                why_small.lines().next().unwrap_or_default(),
                small.to_yaml()
            );
            std::fs::write(&file, text).expect("write the shrunk scenario");
            panic!(
                "seed {seed}: {why}\nshrunk to {} ({} jobs): {why_small}\nreplay: cargo run -- sim {} --output table\nagain: MUSTER_DIFF_CASES=1 MUSTER_DIFF_SEED={seed} cargo test --test differential",
                file.display(),
                small.jobs.len(),
                file.display()
            );
        }
    }
    eprintln!("differential: {cases} scenarios from seed {base}: {seen:?}");
    // The generator must keep exercising what the reference is there for.
    if cases >= 200 {
        assert!(seen.admits > cases, "{seen:?}");
        // 41 reclaims in the 2,000 default cases before fair sharing, 40 with it (borrowers
        // visited by share take less that a guaranteed job must then reclaim).
        assert!(seen.reclaims >= cases / 50, "too few reclaims: {seen:?}");
        assert!(
            seen.within_queue > 0,
            "no preemption within a queue: {seen:?}"
        );
        assert!(seen.waits_at_end > 0, "no job ever waited: {seen:?}");
        assert!(
            seen.fair_admits > cases / 50,
            "too few admissions out of queue order by fair sharing: {seen:?}"
        );
        assert!(
            seen.fair_preemptions >= cases / 200,
            "too few preemptions for fairness: {seen:?}"
        );
    }
}
