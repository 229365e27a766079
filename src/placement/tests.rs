//! Tests of per-pod placement: exact slots, gang release, staged components, recreated pods,
//! restarts in the middle of a release, and pods found where the plan does not put them.

use super::*;

fn plan(entries: &[(&str, &[(&str, u32)])]) -> Plan {
    entries
        .iter()
        .map(|(c, nodes)| {
            (
                c.to_string(),
                nodes.iter().map(|(n, k)| (n.to_string(), *k)).collect(),
            )
        })
        .collect()
}

fn gated(name: &str, component: &str) -> PodSeen {
    PodSeen {
        name: name.into(),
        component: component.into(),
        gated: true,
        ..Default::default()
    }
}

fn running(name: &str, component: &str, node: &str) -> PodSeen {
    PodSeen {
        name: name.into(),
        component: component.into(),
        gated: false,
        allowed: Some([node.to_string()].into()),
        bound: Some(node.into()),
        ..Default::default()
    }
}

/// One step for a job with no staged or pinned component and nothing released before.
fn fresh(plan: &Plan, pods: &[PodSeen]) -> Step {
    step(
        plan,
        &BTreeSet::new(),
        &BTreeSet::new(),
        pods,
        &BTreeSet::new(),
    )
}

fn readme_plan() -> Plan {
    plan(&[
        ("master", &[("b-0", 1)]),
        ("worker", &[("b-0", 1), ("b-1", 2)]),
    ])
}

fn per_node(step: &Step, pods: &[PodSeen]) -> Plan {
    let mut out = Plan::new();
    for (pod, node) in &step.release {
        let c = &pods.iter().find(|p| &p.name == pod).expect("pod").component;
        *out.entry(c.clone())
            .or_default()
            .entry(node.clone())
            .or_insert(0) += 1;
    }
    out
}

#[test]
fn readme_example_gets_exactly_its_plan() {
    let pods = vec![
        gated("pt-master-0", "master"),
        gated("pt-worker-0", "worker"),
        gated("pt-worker-1", "worker"),
        gated("pt-worker-2", "worker"),
    ];
    let s = fresh(&readme_plan(), &pods);
    assert_eq!(s.release.len(), 4, "{s:?}");
    assert!(s.held.is_empty());
    assert_eq!(per_node(&s, &pods), readme_plan());
    assert!(s.release.contains(&("pt-master-0".into(), "b-0".into())));
    assert_eq!(
        s.released,
        ["master".to_string(), "worker".to_string()].into()
    );
    assert!(s.pods.iter().all(|r| !r.gated && r.planned.is_some()));
}

#[test]
fn nothing_is_released_before_every_pod_exists() {
    let pods = vec![
        gated("pt-master-0", "master"),
        gated("pt-worker-0", "worker"),
        gated("pt-worker-2", "worker"),
    ];
    let s = fresh(&readme_plan(), &pods);
    assert!(s.release.is_empty(), "{s:?}");
    assert_eq!(s.held.len(), 3);
    assert_eq!(s.held[0].1, "held until every pod exists: 3 of 4 created");
    assert!(s.released.is_empty());
}

#[test]
fn a_recreated_pod_gets_the_free_slot_at_once() {
    let pods = vec![
        running("pt-master-0", "master", "b-0"),
        running("pt-worker-0", "worker", "b-1"),
        running("pt-worker-1", "worker", "b-1"),
        // worker-2 was on b-0, deleted; its replacement arrives alone.
        gated("pt-worker-2", "worker"),
    ];
    let s = fresh(&readme_plan(), &pods);
    assert_eq!(s.release, vec![("pt-worker-2".into(), "b-0".into())]);
    // A terminating pod frees its slot for its replacement.
    let mut pods2 = pods.clone();
    pods2[1].deleting = true;
    pods2.push(gated("pt-worker-9", "worker"));
    let s2 = fresh(&readme_plan(), &pods2);
    let nodes: BTreeSet<&str> = s2.release.iter().map(|(_, n)| n.as_str()).collect();
    assert_eq!(s2.release.len(), 2);
    assert_eq!(nodes, ["b-0", "b-1"].into());
}

#[test]
fn a_staged_launcher_waits_for_the_workers_then_goes_alone() {
    let p = plan(&[
        ("launcher", &[("n1", 1)]),
        ("worker", &[("n1", 1), ("n2", 1)]),
    ]);
    let staged: BTreeSet<String> = ["launcher".to_string()].into();
    // Workers first, launcher not created yet: the workers go.
    let pods = vec![gated("w-0", "worker"), gated("w-1", "worker")];
    let s = step(&p, &staged, &BTreeSet::new(), &pods, &BTreeSet::new());
    assert_eq!(s.release.len(), 2);
    // The launcher alone before the workers: held.
    let s = step(
        &p,
        &staged,
        &BTreeSet::new(),
        &[gated("l", "launcher")],
        &BTreeSet::new(),
    );
    assert!(s.release.is_empty());
    assert_eq!(
        s.held[0].1,
        "held until the pods created before it are released"
    );
    // Workers running, launcher arrives: released onto its slot.
    let pods = vec![
        running("w-0", "worker", "n1"),
        running("w-1", "worker", "n2"),
        gated("l", "launcher"),
    ];
    let s = step(&p, &staged, &BTreeSet::new(), &pods, &BTreeSet::new());
    assert_eq!(s.release, vec![("l".into(), "n1".into())]);
    // Created at startup together: all three released in one step.
    let pods = vec![
        gated("w-0", "worker"),
        gated("w-1", "worker"),
        gated("l", "launcher"),
    ];
    assert_eq!(
        step(&p, &staged, &BTreeSet::new(), &pods, &BTreeSet::new())
            .release
            .len(),
        3
    );
}

#[test]
fn the_last_wave_of_a_batch_job_is_released_pod_by_pod() {
    let p = plan(&[("job", &[("n1", 2)])]);
    let mut done = running("j-a", "job", "n1");
    done.finished = true;
    let mut done2 = running("j-b", "job", "n1");
    done2.finished = true;
    let pods = vec![done, done2, gated("j-c", "job")];
    let s = fresh(&p, &pods);
    assert_eq!(s.release, vec![("j-c".into(), "n1".into())]);
    // Even when the finished pods are gone, the record says the job was released.
    let s = step(
        &p,
        &BTreeSet::new(),
        &BTreeSet::new(),
        &[gated("j-c", "job")],
        &["job".to_string()].into(),
    );
    assert_eq!(s.release, vec![("j-c".into(), "n1".into())]);
}

#[test]
fn a_restart_in_the_middle_of_a_release_places_nothing_twice() {
    // Two pods were released (restricted to one node, not bound yet) before the crash.
    let mut m = running("pt-master-0", "master", "b-0");
    m.bound = None;
    let mut w = running("pt-worker-0", "worker", "b-0");
    w.bound = None;
    let pods = vec![
        m,
        w,
        gated("pt-worker-1", "worker"),
        gated("pt-worker-2", "worker"),
    ];
    let s = fresh(&readme_plan(), &pods);
    assert_eq!(
        s.release,
        vec![
            ("pt-worker-1".into(), "b-1".into()),
            ("pt-worker-2".into(), "b-1".into())
        ]
    );
    assert!(s.mismatches.is_empty());
}

#[test]
fn a_gated_pod_keeps_the_node_it_is_already_restricted_to() {
    let mut a = gated("w-a", "worker");
    a.allowed = Some(["b-1".to_string()].into());
    let pods = vec![
        gated("m", "master"),
        gated("w-0", "worker"),
        gated("w-1", "worker"),
        a,
    ];
    let s = fresh(&readme_plan(), &pods);
    assert!(s.release.contains(&("w-a".into(), "b-1".into())), "{s:?}");
    assert_eq!(per_node(&s, &pods), readme_plan());
}

#[test]
fn extra_pods_wait_and_misplaced_pods_are_reported() {
    let p = plan(&[("worker", &[("n1", 1)])]);
    let pods = vec![running("w-0", "worker", "n1"), gated("w-1", "worker")];
    let s = fresh(&p, &pods);
    assert!(s.release.is_empty());
    assert_eq!(s.held[0].0, "w-1");
    assert!(
        s.held[0]
            .1
            .starts_with("no free planned slot for a worker pod (plan: n1×1)")
    );

    let mut stray = running("w-2", "worker", "n9");
    stray.allowed = None;
    let s = fresh(&p, &[running("w-0", "worker", "n1"), stray]);
    assert_eq!(s.mismatches.len(), 1);
    assert_eq!(s.mismatches[0].node, "n9");

    let mut moved = running("w-0", "worker", "n1");
    moved.bound = Some("n2".into());
    let s = fresh(&p, &[moved]);
    assert!(
        s.mismatches
            .iter()
            .any(|m| m.why == "assigned to n1, bound to n2"),
        "{s:?}"
    );
}

#[test]
fn pinned_components_are_off_plan_only_outside_their_nodes() {
    let p = plan(&[("worker", &[("n1", 1), ("n2", 1)])]);
    let pinned: BTreeSet<String> = ["worker".to_string()].into();
    let on = |name: &str, node: &str| PodSeen {
        allowed: Some(["n1".to_string(), "n2".to_string()].into()),
        ..running(name, "worker", node)
    };
    // Both on n1: the member chose within the set, as pinned mode lets it.
    let both = [on("w-0", "n1"), on("w-1", "n1")];
    let s = step(&p, &BTreeSet::new(), &pinned, &both, &BTreeSet::new());
    assert!(s.mismatches.is_empty(), "{:?}", s.mismatches);
    // Gated (exact) components: the same arrangement is off the plan.
    let s = fresh(&p, &both);
    assert_eq!(s.mismatches.len(), 1, "{:?}", s.mismatches);
    // A node outside the plan is off it either way.
    let s = step(
        &p,
        &BTreeSet::new(),
        &pinned,
        &[on("w-0", "n9")],
        &BTreeSet::new(),
    );
    assert_eq!(s.mismatches.len(), 1, "{:?}", s.mismatches);
}

/// A small deterministic generator (no dependency on a crate's RNG for a test this size).
struct Rng(u64);
impl Rng {
    fn next(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

/// Pods arrive one by one in any order, the driver releases what `step` says after each
/// arrival, the member scheduler binds released pods where they are restricted to, and pods are
/// deleted and recreated at random: at every instant no slot is over-filled, nothing is
/// released before the initial gang exists, and at the end every component is on its plan.
#[test]
fn random_arrivals_and_restarts_end_exactly_on_the_plan() {
    for seed in 1..400u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let comps = 1 + rng.next(3) as usize;
        let nodes = 1 + rng.next(4) as usize;
        let mut p = Plan::new();
        for c in 0..comps {
            let mut m = BTreeMap::new();
            for _ in 0..1 + rng.next(3) {
                *m.entry(format!("n{}", rng.next(nodes as u64))).or_insert(0) +=
                    1 + rng.next(2) as u32;
            }
            p.insert(format!("c{c}"), m);
        }
        let staged: BTreeSet<String> = if comps > 1 && rng.next(2) == 0 {
            ["c0".to_string()].into()
        } else {
            BTreeSet::new()
        };
        let mut to_create: Vec<PodSeen> = Vec::new();
        for (c, m) in &p {
            for i in 0..m.values().sum::<u32>() {
                to_create.push(gated(&format!("{c}-{i}"), c));
            }
        }
        let initial_total = to_create
            .iter()
            .filter(|q| !staged.contains(&q.component))
            .count();
        let mut pods: Vec<PodSeen> = Vec::new();
        let mut released: BTreeSet<String> = BTreeSet::new();
        let mut next_name = 1000;
        let mut steps = 0;
        while steps < 200 {
            steps += 1;
            // The operator creates staged pods only after the initial ones run.
            let initial_up = pods
                .iter()
                .filter(|q| !staged.contains(&q.component) && q.bound.is_some())
                .count()
                == initial_total;
            if let Some(i) = (0..to_create.len())
                .find(|&i| !staged.contains(&to_create[i].component) || initial_up)
                .filter(|_| rng.next(3) > 0)
            {
                let k = i + rng.next((to_create.len() - i) as u64) as usize;
                let q =
                    to_create.remove(if staged.contains(&to_create[k].component) && !initial_up {
                        i
                    } else {
                        k
                    });
                pods.push(q);
            } else if rng.next(8) == 0 && !pods.is_empty() {
                // A pod is deleted; its operator recreates it under a new name.
                let k = rng.next(pods.len() as u64) as usize;
                let gone = pods.remove(k);
                next_name += 1;
                to_create.push(gated(
                    &format!("{}-r{next_name}", gone.component),
                    &gone.component,
                ));
            }
            let s = step(&p, &staged, &BTreeSet::new(), &pods, &released);
            let created_initial = pods
                .iter()
                .filter(|q| !staged.contains(&q.component))
                .count();
            if released.is_empty() && !s.release.is_empty() {
                assert_eq!(
                    created_initial, initial_total,
                    "seed {seed}: released before the gang existed"
                );
            }
            assert!(s.mismatches.is_empty(), "seed {seed}: {:?}", s.mismatches);
            released = s.released.clone();
            for (pod, node) in &s.release {
                let q = pods
                    .iter_mut()
                    .find(|q| &q.name == pod)
                    .expect("released pod");
                q.gated = false;
                q.allowed = Some([node.clone()].into());
                q.bound = Some(node.clone());
            }
            let mut on = Plan::new();
            for q in pods.iter().filter(|q| q.bound.is_some()) {
                *on.entry(q.component.clone())
                    .or_default()
                    .entry(q.bound.clone().unwrap_or_default())
                    .or_insert(0) += 1;
            }
            for (c, m) in &on {
                for (n, k) in m {
                    assert!(
                        *k <= p[c][n],
                        "seed {seed}: {c} has {k} pods on {n}, plan {:?}",
                        p[c]
                    );
                }
            }
            if to_create.is_empty() && pods.iter().all(|q| q.bound.is_some()) {
                assert_eq!(on, p, "seed {seed}");
                break;
            }
        }
        assert!(steps < 200, "seed {seed}: never converged");
    }
}

#[test]
fn a_plan_of_one_pod_goes_pinned_and_is_held_to_its_node() {
    let one = plan(&[("main", &[("n1", 1)])]);
    assert!(!super::gated(&one));
    // Two pods (of one component or two, on one node or two) keep the gate.
    assert!(super::gated(&plan(&[("worker", &[("n1", 2)])])));
    assert!(super::gated(&plan(&[("worker", &[("n1", 1), ("n2", 1)])])));
    assert!(super::gated(&plan(&[
        ("master", &[("n1", 1)]),
        ("worker", &[("n1", 1)])
    ])));
    // Dispatched without the gate, its pod on its node is placed, with nothing to release.
    let pinned: BTreeSet<String> = ["main".to_string()].into();
    let on = |node: &str| {
        let pod = PodSeen {
            allowed: Some(["n1".to_string()].into()),
            ..running("m-0", "main", node)
        };
        step(&one, &BTreeSet::new(), &pinned, &[pod], &BTreeSet::new())
    };
    let s = on("n1");
    assert!(s.release.is_empty() && s.mismatches.is_empty(), "{s:?}");
    assert!(s.released.contains("main"));
    // Anywhere else, it is off the plan.
    let s = on("n2");
    assert!(
        s.mismatches
            .iter()
            .any(|m| m.pod == "m-0" && m.node == "n2"),
        "{:?}",
        s.mismatches
    );
}
