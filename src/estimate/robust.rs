//! Robust plans, for members that pin pods by node set only ([`PlacementMode::Pinned`]).
//!
//! Owns the robustness check of a plan ([`robust`]) and the choice of a plan for a pinned member
//! (`place_pinned`). On such a member each component's pod template is pinned to the *set* of
//! nodes planned for it, and the member's kube-scheduler picks a node within that set for each
//! pod, one pod at a time, in an order muster does not control. A plan is robust when every such
//! arrangement places every pod; only robust plans are made for pinned members. Pure and exact
//! (i128 milli-units), like the rest of the estimator.
//!
//! [`PlacementMode::Pinned`]: crate::fleet::PlacementMode::Pinned

use super::{Placement, PodGroup, Scratch, greedy, group_names, search};
use crate::fleet::{Cluster, Node};
use crate::resources::Demand;

/// Whether every arrangement kube-scheduler may choose when each component of `groups` is
/// pinned only to its planned node set places every pod: pods arrive one at a time in any order,
/// each goes to any node of its component's set where it still fits, and a node's capacity is
/// its free capacity as the plan saw it ([`Node::free`]).
///
/// The check is a sufficient condition:
/// - a node in the sets of two or more components must be *absorbing*: it holds all pods of all
///   components whose set contains it at once (for every resource, `pods` included, the sum of
///   their full pod counts times their per-pod demand is at most its free amount). A pod of such
///   a component then always fits there, whatever else came first;
/// - a component whose set has no absorbing node only uses nodes no other component uses, and
///   the pods those nodes can hold of it (each node's own fit count, not the planned count) add
///   up to its pod count. Its pods are identical, so placing them one by one on any node where
///   one still fits cannot fail while that sum suffices.
///
/// A plan that fails the check may still be safe in practice; a plan that passes it is safe in
/// every order. A plan whose node sets are disjoint passes it whenever it fits at all.
pub fn robust(cluster: &Cluster, groups: &[PodGroup], plan: &Placement) -> bool {
    let nodes = cluster.nodes.len();
    let set = |gi: usize| -> Vec<usize> {
        plan.groups.get(gi).map_or_else(Vec::new, |g| {
            g.iter().filter(|(_, k)| *k > 0).map(|(n, _)| *n).collect()
        })
    };
    // Per node, the components whose set contains it.
    let mut users: Vec<Vec<usize>> = vec![Vec::new(); nodes];
    for (gi, g) in groups.iter().enumerate() {
        if g.pods == 0 {
            continue;
        }
        for n in set(gi) {
            let Some(u) = users.get_mut(n) else {
                return false;
            };
            if !u.contains(&gi) {
                u.push(gi);
            }
        }
    }
    let absorbing: Vec<bool> = users
        .iter()
        .enumerate()
        .map(|(n, u)| !u.is_empty() && holds_all(&cluster.nodes[n], groups, u))
        .collect();
    if (0..nodes).any(|n| users[n].len() > 1 && !absorbing[n]) {
        return false;
    }
    let scratch = Scratch::new(cluster);
    groups.iter().enumerate().all(|(gi, g)| {
        if g.pods == 0 {
            return true;
        }
        let nodes = set(gi);
        if nodes.iter().any(|&n| absorbing[n]) {
            return true;
        }
        // Every node of the set is this component's alone (shared ones are absorbing).
        let room = nodes
            .iter()
            .fold(0i128, |a, &n| a.saturating_add(scratch.cap(n, &g.demand)));
        room >= i128::from(g.pods)
    })
}

/// Whether `node` holds every pod of every component in `users` at once.
fn holds_all(node: &Node, groups: &[PodGroup], users: &[usize]) -> bool {
    let mut total = Demand::default();
    for &gi in users {
        total.add_scaled(&groups[gi].demand, i128::from(groups[gi].pods));
    }
    total.iter().all(|(r, x)| x <= 0 || x <= node.free(r))
}

/// The plan for a member that pins by node set: `normal` (the plan made as for any member) when
/// it is robust, else a plan where a node hosts pods of one component only (greedy, then the
/// exhaustive search), else why not.
pub(super) fn place_pinned(
    cluster: &Cluster,
    groups: &[PodGroup],
    eligible: &[Vec<usize>],
    order: &[usize],
    ext: &[bool],
    normal: Placement,
) -> Result<Placement, String> {
    if robust(cluster, groups, &normal) {
        return Ok(normal);
    }
    let ok = |p: &Placement| robust(cluster, groups, p);
    greedy(cluster, groups, eligible, order, ext, true)
        .filter(ok)
        .or_else(|| search(cluster, groups, eligible, order, true).filter(ok))
        .ok_or_else(|| {
            format!(
                "places pods by node set only (pinned mode): no plan keeps {} on separate \
                 nodes (they fit together only by sharing a node)",
                group_names(groups)
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimate::{eligible, place};
    use crate::fleet::{ClusterInfo, NodeInfo, PlacementMode};
    use crate::quantity::{Quantity, ResourceList};
    use crate::resources::{ONE, PODS, ResourceTable};

    /// A member with one node per `(name, GPUs)`, 8 cpus each.
    fn member(nodes: &[(&str, i64)], mode: PlacementMode, t: &mut ResourceTable) -> Cluster {
        let info = ClusterInfo {
            name: "m".into(),
            nodes: nodes
                .iter()
                .map(|(name, gpus)| {
                    let mut allocatable = ResourceList::new();
                    allocatable.set("cpu", Quantity::from_units(8));
                    allocatable.set("nvidia.com/gpu", Quantity::from_units(*gpus));
                    NodeInfo {
                        name: (*name).into(),
                        allocatable,
                        ready: true,
                        ..Default::default()
                    }
                })
                .collect(),
            placement: mode,
            ..Default::default()
        };
        Cluster::new(&info, t, 1)
    }

    /// `pods` pods of `gpus` GPUs each (and `pods: 1`, as the scheduler builds them).
    fn group(name: &str, pods: u32, gpus: i64, t: &mut ResourceTable) -> PodGroup {
        let mut requests = ResourceList::new();
        requests.set("nvidia.com/gpu", Quantity::from_units(gpus));
        let mut demand = t.demand(&requests);
        demand.add_scaled(&Demand(vec![(PODS, ONE)]), 1);
        PodGroup {
            name: name.into(),
            pods,
            demand,
            constraints: Default::default(),
            topology: None,
        }
    }

    fn plan(groups: &[&[(usize, u32)]]) -> Placement {
        Placement {
            groups: groups.iter().map(|g| g.to_vec()).collect(),
        }
    }

    fn place_on(c: &Cluster, groups: &[PodGroup], t: &ResourceTable) -> Result<Placement, String> {
        place(c, groups, &eligible(c, groups), t)
    }

    /// master 1 GPU + 3 workers of 1 GPU on two 2-GPU nodes: the only plan shares b-0, where
    /// two workers can land first and leave the master nowhere.
    #[test]
    fn a_shared_node_that_cannot_hold_everything_is_not_robust() {
        let mut t = ResourceTable::default();
        let c = member(&[("b-0", 2), ("b-1", 2)], PlacementMode::Gates, &mut t);
        let groups = [group("master", 1, 1, &mut t), group("worker", 3, 1, &mut t)];
        let p = plan(&[&[(0, 1)], &[(0, 1), (1, 2)]]);
        assert!(!robust(&c, &groups, &p));
        // As gates place it, the same plan is what `place` returns.
        assert_eq!(place_on(&c, &groups, &t), Ok(p));
    }

    #[test]
    fn disjoint_node_sets_are_robust() {
        let mut t = ResourceTable::default();
        let c = member(
            &[("a", 1), ("b", 2), ("c", 2)],
            PlacementMode::Gates,
            &mut t,
        );
        let groups = [group("master", 1, 1, &mut t), group("worker", 3, 1, &mut t)];
        assert!(robust(&c, &groups, &plan(&[&[(0, 1)], &[(1, 2), (2, 1)]])));
        // The workers' room counts what each node can hold, not what was planned there.
        assert!(robust(&c, &groups, &plan(&[&[(0, 1)], &[(1, 1), (2, 2)]])));
        // A set that cannot hold the component is not (nor is a plan that is not one).
        assert!(!robust(&c, &groups, &plan(&[&[(0, 1)], &[(1, 3)]])));
        assert!(!robust(&c, &groups, &plan(&[&[(0, 1)], &[]])));
        assert!(!robust(&c, &groups, &plan(&[&[(7, 1)], &[(1, 2), (2, 1)]])));
    }

    #[test]
    fn a_shared_node_that_holds_everything_is_robust() {
        let mut t = ResourceTable::default();
        let c = member(&[("big", 4), ("b-0", 2)], PlacementMode::Gates, &mut t);
        let groups = [group("master", 1, 1, &mut t), group("worker", 3, 1, &mut t)];
        // big holds master and all 3 workers at once: whatever lands first, the rest fits.
        assert!(robust(&c, &groups, &plan(&[&[(0, 1)], &[(0, 3)]])));
        assert!(robust(&c, &groups, &plan(&[&[(0, 1)], &[(0, 2), (1, 1)]])));
        // Every resource counts, `pods` included.
        let mut c = c;
        crate::resources::set(&mut c.nodes[0].alloc, PODS, 3 * ONE);
        assert!(!robust(&c, &groups, &plan(&[&[(0, 1)], &[(0, 2), (1, 1)]])));
    }

    /// master 2 GPUs + 4 workers of 1 GPU on a (3), b (3), c (2): the plan made for gates puts the
    /// master and a worker on a, where 3 workers may land first; pinned, the master gets a to
    /// itself and the workers b and c.
    #[test]
    fn pinned_members_get_a_plan_with_separate_nodes() {
        let nodes = [("a", 3), ("b", 3), ("c", 2)];
        let mut t = ResourceTable::default();
        let gates = member(&nodes, PlacementMode::Gates, &mut t);
        let groups = [group("master", 1, 2, &mut t), group("worker", 4, 1, &mut t)];
        let shared = place_on(&gates, &groups, &t).expect("fits");
        assert_eq!(shared, plan(&[&[(0, 1)], &[(0, 1), (1, 3)]]));
        assert!(!robust(&gates, &groups, &shared));

        let pinned = member(&nodes, PlacementMode::Pinned, &mut t);
        let p = place_on(&pinned, &groups, &t).expect("a robust plan exists");
        assert_eq!(p, plan(&[&[(0, 1)], &[(1, 3), (2, 1)]]));
        assert!(robust(&pinned, &groups, &p));
    }

    /// When the greedy pass cannot keep the components apart, the exhaustive search does.
    /// master 2 GPUs + 3 workers of 1 GPU on a (3) and b (2): the tightest node for the master
    /// is a (first of two that hold one), which leaves the workers only b; the search puts the
    /// master on b and the workers on a.
    #[test]
    fn pinned_search_finds_separate_nodes_the_greedy_pass_misses() {
        let nodes = [("a", 3), ("b", 2)];
        let mut t = ResourceTable::default();
        let gates = member(&nodes, PlacementMode::Gates, &mut t);
        let groups = [group("master", 1, 2, &mut t), group("worker", 3, 1, &mut t)];
        assert_eq!(
            place_on(&gates, &groups, &t),
            Ok(plan(&[&[(0, 1)], &[(0, 1), (1, 2)]]))
        );
        let c = member(&nodes, PlacementMode::Pinned, &mut t);
        let order = crate::estimate::group_order(&c, &groups);
        let el = eligible(&c, &groups);
        assert_eq!(greedy(&c, &groups, &el, &order, &[], true), None);
        let p = place_on(&c, &groups, &t).expect("fits on separate nodes");
        assert_eq!(p, plan(&[&[(1, 1)], &[(0, 3)]]));
        assert!(robust(&c, &groups, &p));
    }

    #[test]
    fn pinned_members_say_when_no_plan_keeps_components_apart() {
        let mut t = ResourceTable::default();
        let c = member(&[("b-0", 2), ("b-1", 2)], PlacementMode::Pinned, &mut t);
        let groups = [group("master", 1, 1, &mut t), group("worker", 3, 1, &mut t)];
        assert_eq!(
            place_on(&c, &groups, &t),
            Err(
                "places pods by node set only (pinned mode): no plan keeps master and worker \
                 on separate nodes (they fit together only by sharing a node)"
                    .into()
            )
        );
        // Nothing fits at all: the usual reason.
        let groups = [group("master", 1, 1, &mut t), group("worker", 2, 2, &mut t)];
        assert_eq!(
            place_on(&c, &groups, &t),
            Err("master and worker fit one by one but not all together on the free nodes".into())
        );
        // One component is always robust where it fits.
        let groups = [group("worker", 4, 1, &mut t)];
        assert_eq!(place_on(&c, &groups, &t), Ok(plan(&[&[(0, 2), (1, 2)]])));
    }
}
