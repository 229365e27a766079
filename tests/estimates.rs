//! Start-time estimates in the simulator: when no job arrives later and run times are declared
//! exactly, the forecast made at submission is the start that happens, for every job (the
//! forecast runs the same core the same way); with arrivals spread over time, each forecast is the
//! start the job gets when the jobs submitted after it are left out, so later arrivals are the
//! only thing that moves a start away from its estimate. A snapshot's running jobs hold their
//! nodes until their time is up. A forecast stopped early (the controller's time budget) gives
//! the whole run's answer for every job it saw start and a true lower bound for the rest.

use std::time::Duration;

use muster::forecast::{self, Arrival, Inputs, Start};
use muster::quota::QuotaTree;
use muster::runtime::ANNOTATION;
use muster::scheduler::{Config, JobState, Scheduler, Submitted};
use muster::sim::{self, Budget, Estimating, Scenario};
use muster::workload::interpret;
use serde_json::{Value, json};

/// xorshift64*, deterministic per seed.
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

fn estimating() -> Estimating {
    Estimating {
        at_submission: true,
        ..Estimating::default()
    }
}

/// Two members of GPU nodes, a tree of two teams that borrow from each other, two priorities,
/// and `jobs` batch Jobs submitted at once with their exact run time declared.
fn random(seed: u64, jobs: usize) -> Scenario {
    random_over(seed, jobs, 0)
}

/// The same, submitted over `spread` seconds (each at a random second of it).
fn random_over(seed: u64, jobs: usize, spread: u64) -> Scenario {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut text = String::from(
        "clusters:\n\
         - name: m1\n  nodes: [{name: a, count: 3, allocatable: {cpu: '16', memory: 64Gi, pods: '110', nvidia.com/gpu: '4'}}]\n\
         - name: m2\n  nodes: [{name: b, count: 2, allocatable: {cpu: '16', memory: 64Gi, pods: '110', nvidia.com/gpu: '8'}}]\n\
         priorityClasses: {low: 0, high: 100}\n\
         quota:\n  apiVersion: scheduling.sigs.k8s.io/v1beta1\n  kind: ElasticQuotaTree\n  metadata: {name: t, namespace: kube-system}\n  spec:\n    root:\n      name: root\n      max: {nvidia.com/gpu: '28'}\n      children:\n      - {name: a, namespaces: [team-a], min: {nvidia.com/gpu: '12'}, max: {nvidia.com/gpu: '28'}}\n      - {name: b, namespaces: [team-b], min: {nvidia.com/gpu: '16'}, max: {nvidia.com/gpu: '28'}}\n\
         jobs: []\n",
    );
    text.push('\n');
    let mut sc = sim::parse_scenario("random", &text).expect("scenario reads");
    for i in 0..jobs {
        let run_s = 10 + rng.below(600);
        let ns = ["team-a", "team-b"][rng.below(2) as usize];
        let prio = ["low", "high"][rng.below(2) as usize];
        let pods = 1 + rng.below(3);
        let gpus = 1 + rng.below(4);
        let at = if spread == 0 { 0 } else { rng.below(spread) };
        let manifest = json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": format!("j{i}"), "namespace": ns,
                "annotations": {ANNOTATION: format!("{run_s}s")}},
            "spec": {"parallelism": pods, "completions": pods, "template": {"spec": {
                "priorityClassName": prio,
                "containers": [{"name": "c", "image": "x", "resources": {"limits": {
                    "cpu": "1", "nvidia.com/gpu": gpus}}}]}}}
        });
        let spec: sim::JobSpec = serde_json::from_value(json!({
            "at": format!("{at}s"), "runFor": format!("{run_s}s"), "manifest": manifest
        }))
        .expect("job spec reads");
        sc.jobs.push(spec);
    }
    sc
}

#[test]
fn with_exact_run_times_and_no_later_arrival_every_estimate_is_the_start() {
    let mut waited = 0;
    let mut preempted = 0;
    for seed in 1..=40 {
        let sc = random(seed, 30);
        let r = sim::run_estimated("random", &sc, &mut (), &estimating()).expect("runs");
        preempted += r.summary.preemptions;
        for j in &r.jobs {
            let e = j
                .estimate
                .as_ref()
                .unwrap_or_else(|| panic!("seed {seed}: {} has no estimate", j.name));
            // The estimate is of the first start (a job may be preempted later).
            let first = j.first_dispatched.clone().unwrap_or(j.dispatched.clone());
            if e.start != Value::Null && j.preemptions == 0 {
                assert_eq!(e.cluster, j.cluster, "seed {seed}: {}", j.name);
            }
            assert_eq!(
                e.start, first,
                "seed {seed}: {}/{} estimated {:?} on {:?}, started {:?} on {:?}",
                j.namespace, j.name, e.start, e.cluster, j.dispatched, j.cluster
            );
            if j.dispatched.as_f64().is_some_and(|d| d > 0.0) {
                waited += 1;
            }
        }
    }
    assert!(
        waited > 200,
        "the scenarios make jobs wait ({waited} waited)"
    );
    assert!(
        preempted > 20,
        "and reclaim preempts ({preempted} preemptions)"
    );
}

#[test]
fn each_estimate_is_the_start_the_job_gets_if_no_job_arrives_after_it() {
    // Arrivals over 20 minutes: estimates at submission are often wrong (a later job of higher
    // priority goes first, a team reclaims its min); run again without the jobs submitted after
    // a job, and the job starts exactly when and where its estimate said.
    let (mut checked, mut wrong, mut waited) = (0, 0, 0);
    for seed in 1..=12 {
        let sc = random_over(seed, 24, 1200);
        let r = sim::run_estimated("arrivals", &sc, &mut (), &estimating()).expect("runs");
        for (i, j) in r.jobs.iter().enumerate() {
            let e = j.estimate.as_ref().expect("an estimate at submission");
            let first = j.first_dispatched.clone().unwrap_or(j.dispatched.clone());
            if e.start != first {
                wrong += 1;
            }
            let at = sc.jobs[i].at;
            let mut known = sc.clone();
            known.jobs.retain(|k| k.at <= at);
            let alone = sim::run("known", &known, &mut ()).expect("runs");
            let k = alone
                .jobs
                .iter()
                .find(|k| k.name == j.name)
                .expect("the job itself is known");
            let k_first = k.first_dispatched.clone().unwrap_or(k.dispatched.clone());
            assert_eq!(
                e.start, k_first,
                "seed {seed}: {} estimated {:?} on {:?} at {at} ms; without later arrivals it starts {:?} on {:?}",
                j.name, e.start, e.cluster, k_first, k.cluster
            );
            if e.start != Value::Null && k.preemptions == 0 {
                assert_eq!(e.cluster, k.cluster, "seed {seed}: {}", j.name);
            }
            if first
                .as_f64()
                .zip(j.submitted.as_f64())
                .is_some_and(|(d, s)| d > s)
            {
                waited += 1;
            }
            checked += 1;
        }
    }
    eprintln!("{checked} jobs, {waited} waited, {wrong} estimates moved by later arrivals");
    assert!(waited > 60, "jobs wait ({waited} of {checked})");
    assert!(
        wrong > 10,
        "later arrivals make some estimates wrong ({wrong} of {checked})"
    );
}

#[test]
fn a_later_arrival_of_higher_priority_is_what_makes_an_estimate_wrong() {
    // The embedded scenario: eval-normal (submitted at 60 s) expects to start when eval-first
    // ends (900 s); eval-urgent, submitted later with a higher priority, goes first.
    let sc = sim::parse_scenario("default", sim::DEFAULT_SCENARIO).expect("reads");
    let r = sim::run_estimated("default", &sc, &mut (), &estimating()).expect("runs");
    let job = |n: &str| r.jobs.iter().find(|j| j.name == n).expect("job");
    let normal = job("eval-normal");
    assert_eq!(normal.estimated_start, Some(json!(900)));
    assert_eq!(normal.dispatched, json!(1500));
    let urgent = job("eval-urgent");
    assert_eq!(urgent.estimated_start, Some(urgent.dispatched.clone()));
    let wide = job("train-wide");
    assert_eq!(wide.estimated_start, Some(Value::Null));
    let why = wide
        .estimate
        .as_ref()
        .and_then(|e| e.never.clone())
        .unwrap_or_default();
    assert!(why.contains("can never fit"), "{why}");
}

#[test]
fn running_jobs_of_a_snapshot_hold_their_nodes_until_their_time_is_up() {
    let text = r#"
clusters:
- name: m1
  nodes: [{name: n, allocatable: {cpu: '8', nvidia.com/gpu: '2'}, used: {cpu: '4'}}]
- name: m2
  reachable: false
  nodes: [{name: n, allocatable: {cpu: '8', nvidia.com/gpu: '2'}}]
jobs:
- at: 0s
  runFor: 100s
  running: {cluster: m1, placement: {job: {n: 1}}}
  manifest:
    apiVersion: batch/v1
    kind: Job
    metadata: {name: old, namespace: ns, annotations: {muster.dev/expected-runtime: 100s}}
    spec: {template: {spec: {containers: [{name: c, image: x, resources: {limits: {nvidia.com/gpu: 2}}}]}}}
- at: 0s
  runFor: 50s
  manifest:
    apiVersion: batch/v1
    kind: Job
    metadata: {name: new, namespace: ns, annotations: {muster.dev/expected-runtime: 50s}}
    spec: {template: {spec: {containers: [{name: c, image: x, resources: {limits: {nvidia.com/gpu: 1, cpu: '4'}}}]}}}
- at: 0s
  runFor: 50s
  manifest:
    apiVersion: batch/v1
    kind: Job
    metadata: {name: too-much-cpu, namespace: ns}
    spec: {template: {spec: {containers: [{name: c, image: x, resources: {limits: {cpu: '5'}}}]}}}
"#;
    let sc = sim::parse_scenario("snap", text).expect("reads");
    let r = sim::run_estimated("snap", &sc, &mut (), &estimating()).expect("runs");
    let job = |n: &str| r.jobs.iter().find(|j| j.name == n).expect("job");
    assert_eq!(job("old").dispatched, json!(0));
    assert_eq!(job("old").finished, json!(100));
    // m2 does not answer; on m1 the old job holds both GPUs until 100 s.
    assert_eq!(job("new").estimated_start, Some(json!(100)));
    assert_eq!(job("new").dispatched, json!(100));
    assert_eq!(job("new").cluster.as_deref(), Some("m1"));
    // 4 of m1's 8 cpus are used by other pods: 5 never fit there.
    assert_eq!(job("too-much-cpu").state, "Pending");
    assert_eq!(job("too-much-cpu").estimated_start, Some(Value::Null));
    // A scenario written back reads the same.
    let again = serde_yaml::to_string(&sc).expect("writes");
    let back = sim::parse_scenario("again", &again).expect("reads back");
    let r2 = sim::run_estimated("again", &back, &mut (), &estimating()).expect("runs");
    assert_eq!(
        serde_json::to_value(&r2.jobs).expect("json"),
        serde_json::to_value(&r.jobs).expect("json")
    );
}

#[test]
fn a_running_job_whose_plan_does_not_place_its_pods_is_refused_with_the_components() {
    let text = r#"
clusters:
- name: m1
  nodes: [{name: n, allocatable: {cpu: '8'}}]
jobs:
- at: 0s
  runFor: 100s
  running: {cluster: m1, placement: {main: {n: 1}}}
  manifest:
    apiVersion: batch/v1
    kind: Job
    metadata: {name: old, namespace: ns}
    spec: {template: {spec: {containers: [{name: c, image: x, resources: {limits: {cpu: 1}}}]}}}
"#;
    let sc = sim::parse_scenario("snap", text).expect("reads");
    let r = sim::run("snap", &sc, &mut ()).expect("runs");
    assert_eq!(r.jobs[0].state, "Rejected");
    let why = r.jobs[0].reason.clone().unwrap_or_default();
    assert!(why.contains("job: 1"), "{why}");
}

/// Seconds of a report value (whole or fractional) as milliseconds.
fn ms(v: &Value) -> u64 {
    v.as_u64()
        .map(|s| s * 1000)
        .or_else(|| v.as_f64().map(|s| (s * 1000.0).round() as u64))
        .expect("a time")
}

#[test]
fn a_spent_budget_puts_estimates_off_says_so_and_what_it_makes_is_exact() {
    let (mut later, mut skipped) = (0, 0);
    for seed in 1..=8 {
        let sc = random_over(seed, 80, 1800);
        let run = |budget| {
            let e = Estimating {
                budget,
                ..estimating()
            };
            sim::run_estimated("budget", &sc, &mut (), &e).expect("runs")
        };
        let exact = run(Budget::unbounded());
        // A small first allowance that grows by one forecast cycle per cycle of the run.
        let tight_budget = Budget {
            per_cycle: 1,
            base: 40,
            min_forecast: 1,
        };
        let tight = run(tight_budget);
        assert_eq!(exact.summary.trace, tight.summary.trace, "same decisions");
        let e = exact.summary.estimates.clone().expect("estimates");
        assert_eq!((e.later, e.skipped, e.budget), (0, 0, None), "seed {seed}");
        assert_eq!(e.at_submission as usize, sc.jobs.len(), "seed {seed}");
        let t = tight.summary.estimates.clone().expect("estimates");
        assert_eq!(
            (t.at_submission + t.later + t.skipped) as usize,
            sc.jobs.len(),
            "seed {seed}: every job accounted for: {t:?}"
        );
        // The forecasts stop within an instant (16 cycles) of the budget.
        let allowed = tight.summary.cycles + tight_budget.base;
        assert!(
            t.forecast_cycles <= allowed + 16 * t.forecasts,
            "seed {seed}: {t:?} against {allowed}"
        );
        later += t.later;
        skipped += t.skipped;
        // What the budget put off is made at a later instant of the wait; each estimate is
        // the one an unbounded forecast makes at that same instant.
        let mut again = std::collections::BTreeMap::new();
        let mut counted = (0, 0, 0);
        for (i, (x, y)) in exact.jobs.iter().zip(&tight.jobs).enumerate() {
            let Some(te) = &y.estimate else {
                counted.2 += 1;
                assert!(
                    y.first_dispatched.is_some() || !y.dispatched.is_null(),
                    "{y:?}"
                );
                continue;
            };
            if te.made_at == y.submitted {
                counted.0 += 1;
                assert_eq!(x.estimate.as_ref(), Some(te), "seed {seed} job {i}");
            } else {
                counted.1 += 1;
                let first = y.first_dispatched.as_ref().unwrap_or(&y.dispatched);
                assert!(ms(&te.made_at) > ms(&y.submitted), "{y:?}");
                if !first.is_null() && te.start != Value::Null {
                    assert!(ms(&te.made_at) <= ms(first), "made in the wait: {y:?}");
                }
                again.insert(i, ms(&te.made_at));
            }
        }
        assert_eq!(
            counted,
            (t.at_submission, t.later, t.skipped),
            "seed {seed}: the summary counts what the jobs show"
        );
        let check = sim::run_estimated(
            "again",
            &sc,
            &mut (),
            &Estimating {
                again_at: again.clone(),
                budget: Budget::unbounded(),
                ..estimating()
            },
        )
        .expect("runs");
        for &i in again.keys() {
            assert_eq!(
                check.jobs[i].estimate_again, tight.jobs[i].estimate,
                "seed {seed} job {i}: the later estimate is the forecast of its instant"
            );
        }
    }
    assert!(
        later > 0 && skipped > 0,
        "the budget did bite: {later} later, {skipped} skipped"
    );
}

/// The controller's starting point for a forecast: `sc`'s fleet, tree and priorities, the jobs
/// at 0 submitted and the cycles of that instant run; the later jobs are arrivals (as jobs in
/// back-off are). Returns the core and the forecast's inputs (run times exact).
fn controller_state(sc: &Scenario) -> (Scheduler, Inputs) {
    let mut sched = Scheduler::new(Config::default());
    if let Some(q) = &sc.quota {
        sched.set_quota_tree(Some(QuotaTree::parse(q).expect("the tree reads")));
    }
    sched.set_priority_classes(sc.priority_classes.clone());
    sim::apply_fleet(&mut sched, sc);
    let mut inputs = Inputs {
        default_runtime: 3_600_000,
        ..Inputs::default()
    };
    let mut now_ids = Vec::new();
    for j in &sc.jobs {
        let w = interpret(&j.manifest.value()).expect("the job reads");
        if j.at > 0 {
            inputs.arrivals.push(Arrival {
                workload: w,
                at: j.at,
                runtime: j.run_for,
            });
        } else if let Submitted::Queued(id) | Submitted::Inadmissible(id, _) = sched.submit(&w, 0) {
            now_ids.push((id, j.run_for));
        }
    }
    forecast::settle(&mut sched);
    for (id, run_for) in now_ids {
        if matches!(sched.state(id), JobState::Admitted { .. }) {
            inputs.ends.insert(id, run_for);
        }
        inputs.runtimes.insert(id, run_for);
    }
    (sched, inputs)
}

/// The lower bound of a forecast stopped early, checked against the whole run's answer.
fn holds(bound: &Start, whole: &Start) -> bool {
    match (bound, whole) {
        (Start::NotBefore { at }, Start::At { at: start, .. }) => start >= at,
        (Start::NotBefore { .. }, Start::Never(_)) => true,
        (b, w) => b == w,
    }
}

#[test]
fn a_forecast_stopped_early_answers_as_the_whole_run_and_bounds_the_rest_from_below() {
    let (mut bounds, mut exact) = (0, 0);
    for seed in 1..=6 {
        // Two thirds waiting at the start, a third arriving later (ms on the scenario's clock).
        let mut sc = random(seed, 90);
        for (i, j) in sc.jobs.iter_mut().enumerate().filter(|(i, _)| i % 3 == 0) {
            j.at = 1000 * (1 + (i as u64 * 37) % 900);
        }
        let (sched, inputs) = controller_state(&sc);
        let whole = forecast::forecast(sched.clone(), &inputs);
        assert!(!whole.stopped, "seed {seed}");
        // One instant at a time to its end: the same run.
        let mut run = forecast::Forward::new(sched.clone(), &inputs);
        let mut steps = 0;
        while !run.advance(1) {
            steps += 1;
        }
        let stepped = run.finish();
        assert!(steps > 3, "seed {seed}: the run has instants to stop at");
        assert_eq!(
            (
                &stepped.jobs,
                &stepped.arrivals,
                stepped.cycles,
                stepped.stopped
            ),
            (&whole.jobs, &whole.arrivals, whole.cycles, false),
            "seed {seed}"
        );
        // Stopped after a few cycles, or after a few instants of a clock the test turns.
        for cut in [1, 16, 40, whole.cycles / 2] {
            let part = forecast::forecast(
                sched.clone(),
                &Inputs {
                    max_cycles: Some(cut),
                    ..inputs.clone()
                },
            );
            let mut ticks = 0u64;
            let timed = forecast::forecast_within(
                sched.clone(),
                &inputs,
                Duration::from_millis(cut.min(5)),
                || {
                    ticks += 1;
                    Duration::from_millis(ticks)
                },
            );
            assert!(
                timed.stopped && timed.instants as u64 == cut.min(5),
                "seed {seed}"
            );
            for p in [&part, &timed] {
                assert!(p.stopped, "seed {seed} cut {cut}");
                assert_eq!(
                    p.jobs.len(),
                    whole.jobs.len(),
                    "seed {seed}: every job answered"
                );
                for (job, s) in &p.jobs {
                    assert!(
                        holds(s, &whole.jobs[job]),
                        "seed {seed} cut {cut}: {s:?} against {:?}",
                        whole.jobs[job]
                    );
                    match s {
                        Start::NotBefore { at } => {
                            bounds += 1;
                            assert_eq!(*at, p.reached, "seed {seed}");
                        }
                        _ => exact += 1,
                    }
                }
                for (s, w) in p.arrivals.iter().zip(&whole.arrivals) {
                    assert!(
                        holds(s, w),
                        "seed {seed} cut {cut}: arrival {s:?} against {w:?}"
                    );
                    if let Start::NotBefore { at } = s {
                        bounds += 1;
                        assert!(*at >= p.reached, "seed {seed}");
                    }
                }
            }
        }
    }
    // Both kinds of answer were seen, or the test proved nothing.
    assert!(
        bounds > 100 && exact > 100,
        "{bounds} bounds, {exact} exact"
    );
}
