//! Topology-aware estimation: a job (or some of its components) asks for one domain of a
//! topology level (a rack, a block) on the member ([`TopologyAsk`]).
//!
//! Owns the choice of domains. Each *unit* (the whole job, or one component with its own ask)
//! gets a list of choices: for a required level, the domains of that level; for a preferred
//! one, the domains of that level, then of each wider level, then anywhere. Domains whose free
//! capacity cannot hold the unit even pod by pod are left out; the others are tried tightest
//! first (least free of the unit's scarcest resource, so big domains stay whole for big jobs).
//! Every combination is checked by the exact per-node estimate ([`place_nodes`]) with each
//! unit's nodes restricted to its domain, so a plan found is a real per-node plan, and pinned
//! members get robust plans inside the domain as anywhere else. The number of per-node
//! estimates per call is bounded ([`TOPOLOGY_BUDGET`]). Pure and exact, like the rest.

use super::{NoFit, Placement, PodGroup, Scratch, group_names, place_nodes};
use crate::fleet::Cluster;
use crate::resources::{Demand, PODS, Res, ResourceTable, at};
use crate::topology::TopologyAsk;

/// Per-node estimates one topology placement may make before it gives up.
pub const TOPOLOGY_BUDGET: u32 = 256;

/// The whole job, or one component, with its ask.
struct Unit<'a> {
    groups: Vec<usize>,
    ask: &'a TopologyAsk,
    /// `worker`, or `master and worker` for the whole job.
    name: String,
}

/// Where a unit goes: a domain (level, index) or anywhere on the member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Choice {
    In(usize, usize),
    Anywhere,
}

/// Places `groups` honouring their topology asks (see the module comment).
pub(super) fn place(
    cluster: &Cluster,
    groups: &[PodGroup],
    eligible: &[Vec<usize>],
    table: &ResourceTable,
) -> Result<Placement, NoFit> {
    let units = units(groups);
    let scratch = Scratch::new(cluster);
    let mut choices: Vec<Vec<Choice>> = Vec::with_capacity(units.len());
    for u in &units {
        choices.push(unit_choices(cluster, groups, eligible, table, &scratch, u)?);
    }
    let mut search = Search {
        cluster,
        groups,
        eligible,
        table,
        units: &units,
        choices: &choices,
        picked: Vec::with_capacity(units.len()),
        budget: TOPOLOGY_BUDGET,
        tried: 0,
        unrestricted: None,
    };
    if let Some(plan) = search.next(0) {
        return Ok(plan);
    }
    // Anywhere for every unit failed on its own terms: that reason (and its kind) holds.
    if let Some(no) = search.unrestricted {
        return Err(no);
    }
    let u = &units[0];
    let level = &u.ask.level;
    Err(NoFit {
        reason: if search.budget == 0 {
            format!(
                "needs {} in one {level} each: gave up after {} estimates of domain choices",
                unit_names(&units),
                search.tried
            )
        } else if units.len() == 1 {
            format!(
                "needs {} in one {level}: the {} {level} domain{} with room for each pod \
                 cannot hold them all together",
                u.name,
                choices[0].len(),
                if choices[0].len() == 1 { "" } else { "s" }
            )
        } else {
            format!(
                "needs {} each in one {level}: no choice of domains holds them all together \
                 ({} tried)",
                unit_names(&units),
                search.tried
            )
        },
        capacity: false,
    })
}

/// The units of `groups`: the whole job when any group carries the job's ask, else one per
/// component that asks.
fn units(groups: &[PodGroup]) -> Vec<Unit<'_>> {
    if let Some(ask) = groups
        .iter()
        .filter_map(|g| g.topology.as_ref())
        .find(|a| a.whole_job)
    {
        return vec![Unit {
            groups: (0..groups.len()).filter(|&g| groups[g].pods > 0).collect(),
            ask,
            name: group_names(groups),
        }];
    }
    groups
        .iter()
        .enumerate()
        .filter(|(_, g)| g.pods > 0)
        .filter_map(|(gi, g)| {
            g.topology.as_ref().map(|ask| Unit {
                groups: vec![gi],
                ask,
                name: g.name.clone(),
            })
        })
        .collect()
}

/// `master, worker`: the units' names, for reasons.
fn unit_names(units: &[Unit<'_>]) -> String {
    units
        .iter()
        .map(|u| u.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The unit's choices in the order they are tried, or why none can hold it.
fn unit_choices(
    cluster: &Cluster,
    groups: &[PodGroup],
    eligible: &[Vec<usize>],
    table: &ResourceTable,
    scratch: &Scratch<'_>,
    u: &Unit<'_>,
) -> Result<Vec<Choice>, NoFit> {
    let doms = &cluster.levels;
    let Some(li) = doms.level(&u.ask.level) else {
        if !u.ask.required {
            return Ok(vec![Choice::Anywhere]);
        }
        return Err(NoFit {
            reason: if doms.levels.is_empty() {
                format!(
                    "needs {} in one {}; the member declares no topology levels",
                    u.name, u.ask.level
                )
            } else {
                format!(
                    "needs {} in one {}; the member's topology levels are {}",
                    u.name,
                    u.ask.level,
                    doms.levels.join(", ")
                )
            },
            capacity: true,
        });
    };
    let mut demand = Demand::default();
    for &g in &u.groups {
        demand.add_scaled(&groups[g].demand, i128::from(groups[g].pods));
    }
    let key = key_resource(cluster, &demand);
    let levels: Vec<usize> = if u.ask.required {
        vec![li]
    } else {
        (0..=li).rev().collect()
    };
    let mut out = Vec::new();
    // The domain with the most free of the key resource, for the reason.
    let mut largest: Option<(i128, usize)> = None;
    for l in levels {
        let mut fit: Vec<(i128, usize)> = Vec::new();
        for (di, d) in doms.per_level[l].iter().enumerate() {
            let free = domain_free(scratch, eligible, &u.groups, &d.nodes, key);
            if l == li && largest.is_none_or(|(f, _)| free > f) {
                largest = Some((free, di));
            }
            if holds_each(scratch, groups, eligible, &u.groups, &d.nodes) {
                fit.push((free, di));
            }
        }
        fit.sort_unstable();
        out.extend(fit.into_iter().map(|(_, di)| Choice::In(l, di)));
    }
    if !u.ask.required {
        out.push(Choice::Anywhere);
    }
    if out.is_empty() {
        let level = &u.ask.level;
        let need = table.fmt_amount(key, demand.get(key));
        return Err(NoFit {
            reason: match largest {
                Some((free, di)) if free > 0 => format!(
                    "needs {} in one {level} ({need} in all): the largest free {level} is {} \
                     with {} free on the nodes that admit it",
                    u.name,
                    doms.per_level[li][di].name(),
                    table.fmt_amount(key, free)
                ),
                Some(_) => format!(
                    "needs {} in one {level} ({need} in all): no {level} has any free on the \
                     nodes that admit it",
                    u.name
                ),
                None => format!(
                    "needs {} in one {level}: no node of the member has the label {level}",
                    u.name
                ),
            },
            capacity: true,
        });
    }
    Ok(out)
}

/// The resource the unit asks the largest share of the member's allocatable of (`pods` only
/// when it asks nothing else).
fn key_resource(cluster: &Cluster, demand: &Demand) -> Res {
    let mut best: Option<(i128, Res)> = None;
    for (r, x) in demand.iter() {
        if r == PODS || x <= 0 {
            continue;
        }
        let total = cluster
            .nodes
            .iter()
            .fold(0i128, |a, n| a.saturating_add(at(&n.alloc, r)));
        let share = x.saturating_mul(1_000_000) / total.max(1);
        if best.is_none_or(|(s, b)| share > s || (share == s && r < b)) {
            best = Some((share, r));
        }
    }
    best.map_or(PODS, |(_, r)| r)
}

/// Free `key` on the nodes of `domain` that admit any group of the unit.
fn domain_free(
    s: &Scratch<'_>,
    eligible: &[Vec<usize>],
    unit: &[usize],
    domain: &[usize],
    key: Res,
) -> i128 {
    domain
        .iter()
        .filter(|n| unit.iter().any(|&g| eligible[g].binary_search(n).is_ok()))
        .fold(0i128, |a, &n| a.saturating_add(s.free(n, key).max(0)))
}

/// Whether the domain's eligible nodes hold every group of the unit, each on its own, pod by
/// pod (a necessary condition; it stays false while free capacity only shrinks).
fn holds_each(
    s: &Scratch<'_>,
    groups: &[PodGroup],
    eligible: &[Vec<usize>],
    unit: &[usize],
    domain: &[usize],
) -> bool {
    unit.iter().all(|&g| {
        let want = i128::from(groups[g].pods);
        let mut room = 0i128;
        for &n in domain {
            if eligible[g].binary_search(&n).is_ok() {
                room = room.saturating_add(s.cap(n, &groups[g].demand));
                if room >= want {
                    return true;
                }
            }
        }
        false
    })
}

/// Depth-first over the units' choices; each full choice is one per-node estimate.
struct Search<'a> {
    cluster: &'a Cluster,
    groups: &'a [PodGroup],
    eligible: &'a [Vec<usize>],
    table: &'a ResourceTable,
    units: &'a [Unit<'a>],
    choices: &'a [Vec<Choice>],
    picked: Vec<Choice>,
    budget: u32,
    tried: u32,
    /// The failure of the choice that restricts nothing, when it was tried.
    unrestricted: Option<NoFit>,
}

impl Search<'_> {
    fn next(&mut self, ui: usize) -> Option<Placement> {
        if ui == self.units.len() {
            return self.estimate();
        }
        for &c in &self.choices[ui] {
            if self.budget == 0 {
                return None;
            }
            self.picked.push(c);
            let found = self.next(ui + 1);
            self.picked.pop();
            if found.is_some() {
                return found;
            }
        }
        None
    }

    /// The per-node estimate with each unit's groups kept to its picked domain.
    fn estimate(&mut self) -> Option<Placement> {
        self.budget -= 1;
        self.tried += 1;
        let mut elig: Vec<Vec<usize>> = self.eligible.to_vec();
        for (u, c) in self.units.iter().zip(&self.picked) {
            if let Choice::In(l, di) = *c {
                let nodes = &self.cluster.levels.per_level[l][di].nodes;
                for &g in &u.groups {
                    elig[g].retain(|n| nodes.binary_search(n).is_ok());
                }
            }
        }
        match place_nodes(self.cluster, self.groups, &elig, self.table) {
            Ok(p) => Some(p),
            Err(no) => {
                if self.picked.iter().all(|c| *c == Choice::Anywhere) {
                    self.unrestricted = Some(no);
                }
                None
            }
        }
    }
}

#[cfg(test)]
mod tests;
