//! Topology-aware estimation against worked cases and, on random small members, against a
//! brute-force reference that tries every placement of every pod.

use super::*;
use crate::estimate::{eligible, place_or_why};
use crate::fleet::{ClusterInfo, NodeInfo, PlacementMode};
use crate::quantity::{Quantity, ResourceList};
use crate::resources::ONE;
use proptest::prelude::*;

const BLOCK: &str = "example.com/block";
const RACK: &str = "example.com/rack";

/// One node per `(block, rack, GPUs free)`, 64 cpus each; levels block, rack, hostname.
fn member(nodes: &[(&str, &str, i64)], mode: PlacementMode, t: &mut ResourceTable) -> Cluster {
    let info = ClusterInfo {
        name: "m".into(),
        nodes: nodes
            .iter()
            .enumerate()
            .map(|(i, (b, r, gpus))| {
                let mut allocatable = ResourceList::new();
                allocatable.set("cpu", Quantity::from_units(64));
                allocatable.set("nvidia.com/gpu", Quantity::from_units(*gpus));
                let mut n = NodeInfo {
                    name: format!("n{i}"),
                    allocatable,
                    ready: true,
                    ..Default::default()
                };
                for (k, v) in [(BLOCK, *b), (RACK, *r), ("kubernetes.io/hostname", &n.name)] {
                    if !v.is_empty() {
                        n.labels.insert(k.into(), v.to_string());
                    }
                }
                n
            })
            .collect(),
        placement: mode,
        topology: vec![BLOCK.into(), RACK.into(), "kubernetes.io/hostname".into()],
        ..Default::default()
    };
    Cluster::new(&info, t, 1)
}

fn group(
    name: &str,
    pods: u32,
    gpus: i64,
    ask: Option<TopologyAsk>,
    t: &mut ResourceTable,
) -> PodGroup {
    let mut requests = ResourceList::new();
    requests.set("nvidia.com/gpu", Quantity::from_units(gpus));
    requests.set("cpu", Quantity::from_units(1));
    let mut demand = t.demand(&requests);
    demand.add_scaled(&Demand(vec![(PODS, ONE)]), 1);
    PodGroup {
        name: name.into(),
        pods,
        demand,
        constraints: Default::default(),
        topology: ask,
    }
}

fn ask(level: &str, required: bool, whole_job: bool) -> Option<TopologyAsk> {
    Some(TopologyAsk {
        level: level.into(),
        required,
        whole_job,
    })
}

fn run(c: &Cluster, groups: &[PodGroup], t: &ResourceTable) -> Result<Placement, NoFit> {
    place_or_why(c, groups, &eligible(c, groups), t)
}

fn nodes_of(p: &Placement) -> Vec<usize> {
    let mut v: Vec<usize> = p.groups.iter().flatten().map(|(n, _)| *n).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Enough GPUs in the member and in block b1, but no rack holds 8: the required rack fails and
/// names the largest free rack; the required block fits, in b1's two racks.
#[test]
fn a_required_rack_is_one_rack_and_the_reason_names_the_largest() {
    let mut t = ResourceTable::default();
    let c = member(
        &[
            ("b1", "r1", 4),
            ("b1", "r1", 2),
            ("b1", "r2", 4),
            ("b2", "r1", 2),
            ("b2", "r1", 4),
        ],
        PlacementMode::Gates,
        &mut t,
    );
    let job =
        |level: &str, t: &mut ResourceTable| vec![group("worker", 8, 1, ask(level, true, true), t)];
    let g = job(RACK, &mut t);
    let no = run(&c, &g, &t).unwrap_err();
    assert!(no.capacity, "{no:?}");
    assert_eq!(
        no.reason,
        "needs worker in one example.com/rack (nvidia.com/gpu 8 in all): the largest free \
         example.com/rack is b1/r1 with nvidia.com/gpu 6 free on the nodes that admit it"
    );
    let g = job(BLOCK, &mut t);
    let p = run(&c, &g, &t).unwrap();
    assert_eq!(nodes_of(&p), vec![0, 2]);
    // Without the ask, the same pods fit (and nothing below is asked of the estimate).
    let mut free = g.clone();
    free[0].topology = None;
    assert!(run(&c, &free, &t).is_ok());
}

/// The tightest rack that holds the job is chosen: 4 GPUs go to the 4-GPU rack, not the 8.
#[test]
fn the_tightest_domain_wins_and_preferred_falls_back_level_by_level() {
    let mut t = ResourceTable::default();
    let c = member(
        &[
            ("b1", "r1", 8),
            ("b1", "r2", 4),
            ("b2", "r3", 2),
            ("b2", "r4", 2),
        ],
        PlacementMode::Gates,
        &mut t,
    );
    let g = vec![group("worker", 4, 1, ask(RACK, true, true), &mut t)];
    assert_eq!(nodes_of(&run(&c, &g, &t).unwrap()), vec![1]);
    // Preferred rack for 4 GPUs in b2: no rack of b2 holds them, so a block does: the tightest
    // block holding 4 is b2 (4 free) over b1 (12).
    let mut t2 = ResourceTable::default();
    let c2 = member(
        &[
            ("b1", "r1", 8),
            ("b1", "r2", 4),
            ("b2", "r3", 2),
            ("b2", "r4", 2),
        ],
        PlacementMode::Gates,
        &mut t2,
    );
    let g = vec![group("worker", 6, 1, ask(RACK, false, true), &mut t2)];
    assert_eq!(nodes_of(&run(&c2, &g, &t2).unwrap()), vec![0]);
    let g = vec![group("worker", 14, 1, ask(RACK, false, true), &mut t2)];
    let anywhere = nodes_of(&run(&c2, &g, &t2).unwrap());
    assert_eq!(
        c2.levels.common(0, anywhere.iter().copied()),
        None,
        "anywhere at last"
    );
    let g = vec![group("worker", 10, 1, ask(RACK, false, true), &mut t2)];
    assert_eq!(
        nodes_of(&run(&c2, &g, &t2).unwrap()),
        vec![0, 1],
        "block b1"
    );
}

/// Per-component asks give each component its own rack; an unknown required level fails with
/// the member's levels named; an unknown preferred one is ignored.
#[test]
fn components_get_their_own_domains_and_unknown_levels_are_named() {
    let mut t = ResourceTable::default();
    let c = member(
        &[("b1", "r1", 4), ("b1", "r2", 4), ("b2", "r3", 4)],
        PlacementMode::Gates,
        &mut t,
    );
    let g = vec![
        group("master", 1, 4, ask(RACK, true, false), &mut t),
        group("worker", 8, 1, ask(BLOCK, true, false), &mut t),
    ];
    let p = run(&c, &g, &t).unwrap();
    assert_eq!(p.groups[0], vec![(2, 1)], "the master takes b2's rack");
    assert_eq!(
        nodes_of(&Placement {
            groups: vec![p.groups[1].clone()]
        }),
        vec![0, 1]
    );
    let g = vec![group(
        "worker",
        1,
        1,
        ask("example.com/zone", true, true),
        &mut t,
    )];
    let no = run(&c, &g, &t).unwrap_err();
    assert!(
        no.reason
            .contains("levels are example.com/block, example.com/rack"),
        "{}",
        no.reason
    );
    let g = vec![group(
        "worker",
        1,
        1,
        ask("example.com/zone", false, true),
        &mut t,
    )];
    assert!(run(&c, &g, &t).is_ok());
}

/// A pinned member gets a robust plan inside the domain.
#[test]
fn pinned_members_get_plans_inside_one_domain() {
    let mut t = ResourceTable::default();
    let c = member(
        &[("b1", "r1", 2), ("b1", "r1", 2), ("b1", "r2", 8)],
        PlacementMode::Pinned,
        &mut t,
    );
    let g = vec![
        group("master", 1, 1, ask(RACK, true, true), &mut t),
        group("worker", 3, 1, ask(RACK, true, true), &mut t),
    ];
    let p = run(&c, &g, &t).unwrap();
    assert!(crate::estimate::robust(&c, &g, &p));
    let d = c.levels.tightest(&nodes_of(&p)).map(|(l, d)| (l, d.name()));
    assert!(matches!(d, Some((l, _)) if l >= 1), "{d:?}");
}

/// Every placement of every pod (pods of a group are identical): whether any honours the asks.
fn reference_fits(c: &Cluster, groups: &[PodGroup]) -> bool {
    let n = c.nodes.len();
    let doms = &c.levels;
    // The unit domains a placement uses must be one per unit at the asked level.
    let units = units(groups);
    #[allow(clippy::too_many_arguments)] // the brute-force reference keeps its whole state explicit
    fn rec(
        c: &Cluster,
        groups: &[PodGroup],
        gi: usize,
        left: u32,
        ni: usize,
        used: &mut Vec<Vec<i128>>,
        nodes_of: &mut Vec<Vec<usize>>,
        ok: &dyn Fn(&[Vec<usize>]) -> bool,
    ) -> bool {
        if gi == groups.len() {
            return ok(nodes_of);
        }
        if left == 0 {
            let next = groups.get(gi + 1).map_or(0, |g| g.pods);
            return rec(c, groups, gi + 1, next, 0, used, nodes_of, ok);
        }
        if ni == c.nodes.len() {
            return false;
        }
        let g = &groups[gi];
        // k pods of this group on node ni (k from 0 while one more fits).
        let mut k = 0u32;
        loop {
            if rec(c, groups, gi, left - k, ni + 1, used, nodes_of, ok) {
                for _ in 0..k {
                    crate::resources::add_demand(&mut used[ni], &g.demand, -1);
                }
                return true;
            }
            if k == left {
                break;
            }
            let fits = g
                .demand
                .iter()
                .all(|(r, x)| x <= 0 || c.nodes[ni].free(r) - at(&used[ni], r) >= x);
            if !fits {
                break;
            }
            crate::resources::add_demand(&mut used[ni], &g.demand, 1);
            if k == 0 {
                nodes_of[gi].push(ni);
            }
            k += 1;
        }
        for _ in 0..k {
            crate::resources::add_demand(&mut used[ni], &g.demand, -1);
        }
        if k > 0 {
            nodes_of[gi].pop();
        }
        false
    }
    let ok = |nodes_of: &[Vec<usize>]| {
        units.iter().all(|u| {
            let Some(li) = doms.level(&u.ask.level) else {
                return !u.ask.required;
            };
            if !u.ask.required {
                return true;
            }
            doms.common(
                li,
                u.groups.iter().flat_map(|&g| nodes_of[g].iter().copied()),
            )
            .is_some()
        })
    };
    let mut used = vec![Vec::new(); n];
    let mut nodes_of = vec![Vec::new(); groups.len()];
    let first = groups.first().map_or(0, |g| g.pods);
    rec(c, groups, 0, first, 0, &mut used, &mut nodes_of, &ok)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]
    /// On random members of up to 6 nodes in 2 blocks × 2 racks (some nodes unlabelled) and
    /// jobs of 1–2 components with required or preferred asks, per component or for the job:
    /// the estimate finds a plan exactly when one exists, and every plan it returns keeps each
    /// node within its free capacity and each required unit in one domain of its level.
    #[test]
    fn the_estimate_finds_a_plan_exactly_when_one_exists(
        nodes in prop::collection::vec((0usize..3, 0usize..3, 0i64..5), 1..7),
        comps in prop::collection::vec((1u32..5, 0i64..3, 0usize..4, any::<bool>()), 1..3),
        whole in any::<bool>(),
    ) {
        let mut t = ResourceTable::default();
        let names = ["", "b1", "b2"];
        let racks = ["", "r1", "r2"];
        let spec: Vec<(&str, &str, i64)> =
            nodes.iter().map(|(b, r, g)| (names[*b], racks[*r], *g)).collect();
        let c = member(&spec, PlacementMode::Gates, &mut t);
        let levels = [BLOCK, RACK, "kubernetes.io/hostname", "example.com/zone"];
        let groups: Vec<PodGroup> = comps
            .iter()
            .enumerate()
            .map(|(i, (pods, gpus, level, required))| {
                let a = ask(levels[*level], *required, whole);
                let a = if whole { ask(levels[comps[0].2], comps[0].3, true) } else if i == 1 && *gpus == 0 { None } else { a };
                group(&format!("g{i}"), *pods, *gpus, a, &mut t)
            })
            .collect();
        let want = reference_fits(&c, &groups);
        match run(&c, &groups, &t) {
            Ok(p) => {
                prop_assert!(want, "the estimate placed what the reference cannot: {p:?}");
                let mut used = vec![Vec::new(); c.nodes.len()];
                for (gi, g) in p.groups.iter().enumerate() {
                    let total: u32 = g.iter().map(|(_, k)| *k).sum();
                    prop_assert_eq!(total, groups[gi].pods);
                    for (n, k) in g {
                        crate::resources::add_demand(&mut used[*n], &groups[gi].demand, i128::from(*k));
                    }
                }
                for (n, u) in used.iter().enumerate() {
                    for (i, x) in u.iter().enumerate() {
                        prop_assert!(*x <= c.nodes[n].free(Res(i as u16)), "node {n} over capacity");
                    }
                }
                for u in units(&groups) {
                    if let (true, Some(li)) = (u.ask.required, c.levels.level(&u.ask.level)) {
                        let ns = u.groups.iter().flat_map(|&g| p.groups[g].iter().map(|(n, _)| *n));
                        prop_assert!(c.levels.common(li, ns).is_some(), "{} not in one {}", u.name, u.ask.level);
                    }
                }
            }
            Err(no) => prop_assert!(!want, "a plan exists but the estimate says: {}", no.reason),
        }
    }
}
