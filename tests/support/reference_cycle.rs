//! The reference scheduler's cycle: passes over every class head in global order, guaranteed
//! jobs first, and reclaim by the documented rule, each step a plain recomputation from the
//! jobs. The numbers in comments (A1–A8, R1–R9) are the rules of docs/concepts.md ("The
//! admission cycle", "Reclaim"): each is applied where it is cited.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};

use muster::fleet::Constraints;

use super::fair::Frac;
use super::{
    Amounts, Decided, MAX_JOBS, PODS, Plans, Reclaim, Reference, State, WITHIN_QUEUE, add, get,
    path_up,
};

/// A job's place in its queue: priority (higher first), submission time, arrival.
pub(super) type Order = (Reverse<i32>, u64, u64);
/// A class: the queue (leaf, or namespace without a tree) and, in a BestEffortFIFO queue, the
/// job's shape.
pub(super) type Class = (String, Option<String>);
/// `used(node, res) + request <= min(node, res)`: what a preemption must keep.
type Guard = (usize, String, i128);

impl Reference {
    /// A6. One admission cycle: passes until one moves nothing (at most 8); victims are back
    /// in their queues once it ends.
    pub fn cycle(&mut self, plans: &mut Plans) -> Result<Vec<Decided>, String> {
        self.reclaims.clear();
        self.fair_used.clear();
        let mut out = Vec::new();
        for _ in 0..8 {
            if !self.pass(&mut out, plans)? {
                break;
            }
        }
        self.held.clear();
        Ok(out)
    }

    pub(super) fn order(&self, j: usize) -> Order {
        let job = &self.jobs[j];
        (Reverse(job.priority), job.submitted, job.index)
    }

    /// A1. A StrictFIFO queue is one class; a BestEffortFIFO queue one per job shape.
    pub(super) fn class(&self, j: usize) -> Class {
        let queue = match self.leaf(j) {
            Some(l) => format!("leaf {l}"),
            None => format!("namespace {}", self.jobs[j].w.namespace),
        };
        if self.strict(self.leaf(j)) {
            return (queue, None);
        }
        let w = &self.jobs[j].w;
        let shape = format!(
            "{:?}|{:?}|{:?}",
            self.jobs[j].groups_key(),
            w.candidates,
            muster::fleet::Needs::of(w)
        );
        (queue, Some(shape))
    }

    /// Jobs waiting in their queues (victims of this cycle are not back yet).
    pub(super) fn waiting(&self) -> Vec<usize> {
        (0..self.jobs.len())
            .filter(|j| self.jobs[*j].state == State::Pending && !self.held.contains(j))
            .collect()
    }

    pub(super) fn head(&self, c: &Class) -> Option<usize> {
        self.waiting()
            .into_iter()
            .filter(|&j| self.class(j) == *c)
            .min_by_key(|&j| self.order(j))
    }

    /// Waiting in a StrictFIFO queue behind an earlier job: such a job waits by design.
    pub fn behind_strict_head(&self, j: usize) -> bool {
        self.strict(self.leaf(j)) && self.head(&self.class(j)).is_some_and(|h| h != j)
    }

    fn lower_gone(&self, job: usize) -> BTreeSet<usize> {
        self.lower_in_leaf(job).into_iter().collect()
    }

    /// A5. One pass: every class head, in order; first the jobs that borrow nothing (from queues
    /// whose best waiting job borrows nothing at the start of the pass), then the rest; once a
    /// reclaim happened, the rest wait for the next pass. Whether a head would borrow is read
    /// when it becomes a head of the pass, and again at its turn in the first round; after a
    /// preemption in the first round the heads set aside go back to it. True when something
    /// moved.
    fn pass(&mut self, out: &mut Vec<Decided>, plans: &mut Plans) -> Result<bool, String> {
        self.holds.clear();
        let waiting = self.waiting();
        let mut heads: BTreeMap<Class, usize> = BTreeMap::new();
        let mut best_of_leaf: BTreeMap<usize, usize> = BTreeMap::new();
        for &j in &waiting {
            let c = self.class(j);
            let better = |cur: &usize| self.order(j) < self.order(*cur);
            if heads.get(&c).is_none_or(better) {
                heads.insert(c, j);
            }
            if let Some(l) = self.leaf(j)
                && best_of_leaf.get(&l).is_none_or(better)
            {
                best_of_leaf.insert(l, j);
            }
        }
        let deferred: BTreeSet<usize> = best_of_leaf
            .iter()
            .filter(|(_, j)| !self.borrows_nothing(**j, &self.lower_gone(**j)))
            .map(|(l, _)| *l)
            .collect();
        // A head that would borrow when it becomes a head of the pass goes to the second round.
        let defers = |me: &Self, job: usize| {
            me.leaf(job).is_some_and(|leaf| {
                deferred.contains(&leaf) || !me.borrows_nothing(job, &me.lower_gone(job))
            })
        };
        let mut left: BTreeSet<(Order, Class)> = BTreeSet::new();
        let mut borrowing = Vec::new();
        for (c, j) in heads {
            if defers(self, j) {
                borrowing.push((self.order(j), c));
            } else {
                left.insert((self.order(j), c));
            }
        }
        let (mut moved, mut reclaimed) = (false, false);
        for first in [true, false] {
            if !first {
                left.extend(borrowing.drain(..));
            }
            // A7: in fair order.
            while let Some((o, c)) = self.next_fair(&left) {
                let out_of_order = left.first().is_some_and(|f| f.0 < o);
                left.remove(&(o, c.clone()));
                if !first && reclaimed {
                    break;
                }
                let Some(job) = self.head(&c) else { continue };
                // Read again: admissions since it was read may make it borrow now.
                if first && defers(self, job) {
                    borrowing.push((o, c));
                    continue;
                }
                if let Some(by_reclaim) = self.try_admit(job, out, plans)? {
                    moved = true;
                    self.fair_admits += u64::from(out_of_order);
                    reclaimed |= by_reclaim;
                    // A preemption lowered usage: the heads set aside are read again.
                    if first && by_reclaim {
                        left.extend(borrowing.drain(..));
                    }
                    if let Some(h) = self.head(&c) {
                        if first && defers(self, h) {
                            borrowing.push((self.order(h), c));
                        } else {
                            left.insert((self.order(h), c));
                        }
                    }
                }
            }
        }
        Ok(moved)
    }

    /// A5. Admits the job where it is within quota (A3) and fits (A4), or by reclaim (R1–R9);
    /// `Some(true)` when by reclaim, `None` when it waits.
    fn try_admit(
        &mut self,
        job: usize,
        out: &mut Vec<Decided>,
        plans: &mut Plans,
    ) -> Result<Option<bool>, String> {
        // A8: held behind a job of its queue, visited before it in this pass, that may take
        // it back and waited.
        if self
            .leaf(job)
            .and_then(|l| self.holds.get(&l))
            .is_some_and(|&p| p > self.jobs[job].priority)
        {
            return Ok(None);
        }
        let none = BTreeSet::new();
        let over = self.over_max(job, &none);
        if over.is_empty()
            && let Some(ci) = self.find_cluster(job, None)
        {
            self.admit(job, ci, out, plans)?;
            return Ok(Some(false));
        }
        let Some(leaf) = self.leaf(job) else {
            return Ok(None);
        };
        // R8: its own queue's jobs of lower priority, where the leaf preempts by priority.
        let own = self.lower_in_leaf(job);
        // R1: what it is short of.
        let short = if over.is_empty() {
            self.fleet_short(job)
        } else {
            over
        };
        // F1–F5: else preemption for fairness, where the tree allows it.
        let (found, fair) = match self.reclaim(job, leaf, &short, &own) {
            Some(found) => (Some(found), false),
            None => (self.fair_preempt(job, leaf, &short), true),
        };
        let Some((victims, ci)) = found else {
            // A8: it may reclaim (R2) on a leaf that preempts by priority, and room for it
            // will come (it fits a reachable candidate member once every admitted job has
            // ended): it holds its queue's jobs of lower priority.
            let all: BTreeSet<usize> = self.admitted_jobs().collect();
            if self.preempts_by_priority(leaf)
                && self.may_reclaim(job, leaf, &short, &own)
                && self.find_cluster(job, Some(&all)).is_some()
            {
                let p = self.jobs[job].priority;
                let h = self.holds.entry(leaf).or_insert(p);
                *h = (*h).max(p);
            }
            return Ok(None);
        };
        // R7: the victims are preempted, the job admitted; victims back when the cycle ends.
        for &v in &victims {
            out.push(Decided::Preempt { job: v, by: job });
            self.jobs[v].state = State::Pending;
            self.held.push(v);
        }
        self.reclaims.push(Reclaim {
            by: job,
            victims,
            short,
            fair,
        });
        self.admit(job, ci, out, plans)?;
        Ok(Some(true))
    }

    /// Records the admission with the core's plan, once that plan is checked to fit here.
    fn admit(
        &mut self,
        job: usize,
        ci: usize,
        out: &mut Vec<Decided>,
        plans: &mut Plans,
    ) -> Result<(), String> {
        let name = self.clusters[ci].name.clone();
        let label = self.jobs[job].label.clone();
        let plan = plans(job, &name)
            .ok_or_else(|| format!("the reference admits {label} on {name}; the core did not"))?;
        self.check_plan(job, ci, &plan)
            .map_err(|e| format!("the core's plan for {label} on {name} does not fit: {e}"))?;
        self.seq += 1;
        self.jobs[job].admitted_seq = self.seq;
        self.jobs[job].state = State::Admitted { cluster: ci, plan };
        out.push(Decided::Admit { job, cluster: name });
        Ok(())
    }

    fn check_plan(
        &self,
        job: usize,
        ci: usize,
        plan: &[BTreeMap<String, u32>],
    ) -> Result<(), String> {
        let c = &self.clusters[ci];
        let groups = self.jobs[job].groups();
        if plan.len() != groups.len() {
            return Err(format!("{} components planned", plan.len()));
        }
        let mut want: BTreeMap<usize, Amounts> = BTreeMap::new();
        for (gi, nodes) in plan.iter().enumerate() {
            let (k, d, cons) = &groups[gi];
            if nodes.values().sum::<u32>() != *k {
                return Err(format!("component {gi}: {nodes:?} for {k} pods"));
            }
            for (node, n) in nodes {
                let ni = c
                    .nodes
                    .iter()
                    .position(|x| x.name == *node)
                    .ok_or_else(|| format!("no node {node}"))?;
                if c.nodes[ni].filters.admits(cons).is_err() {
                    return Err(format!("{node} does not admit component {gi}"));
                }
                add(want.entry(ni).or_default(), d, i128::from(*n));
            }
        }
        for (ni, w) in want {
            let f = self.free(ci, ni, None, false);
            if w.iter().any(|(r, x)| get(&f, r) < *x) {
                return Err(format!("node {} has {f:?}, needs {w:?}", c.nodes[ni].name));
            }
        }
        Ok(())
    }

    /// R1 (capacity short): the requested resources no reachable candidate member has enough
    /// of on the nodes the job may use there: for some pod group, no node that admits it has
    /// its pod's request free, or those nodes together less than the job's total; when none
    /// alone, the job's scarcest resource.
    fn fleet_short(&self, job: usize) -> Vec<String> {
        let requested: Vec<String> = self.jobs[job]
            .charge
            .iter()
            .filter(|(r, x)| *r != PODS && *r != MAX_JOBS && **x > 0)
            .map(|(r, _)| r.clone())
            .collect();
        let groups: Vec<&(u32, Amounts, Constraints)> =
            self.jobs[job].groups().iter().filter(|g| g.0 > 0).collect();
        let mut short = Vec::new();
        for r in &requested {
            let total = get(&self.jobs[job].charge, r);
            let enough = (0..self.clusters.len())
                .filter(|&ci| self.clusters[ci].reachable && self.candidate(job, ci))
                .any(|ci| {
                    let c = &self.clusters[ci];
                    let admits = |ni: usize, cons: &Constraints| {
                        c.nodes[ni].usable && c.nodes[ni].filters.admits(cons).is_ok()
                    };
                    let free = |ni: usize| get(&self.free(ci, ni, None, false), r);
                    let each = groups.iter().all(|(_, d, cons)| {
                        let need = get(d, r);
                        need == 0
                            || (0..c.nodes.len()).any(|ni| admits(ni, cons) && free(ni) >= need)
                    });
                    let together: i128 = (0..c.nodes.len())
                        .filter(|&ni| groups.iter().any(|(_, _, cons)| admits(ni, cons)))
                        .map(|ni| free(ni).max(0))
                        .sum();
                    each && total <= together
                });
            if !enough {
                short.push(r.clone());
            }
        }
        if short.is_empty() {
            let key = self.scarcest(job);
            return if requested.contains(&key) {
                vec![key]
            } else {
                requested
            };
        }
        short
    }

    /// R6: whether victim `v` (admitted on `ci`) has a pod asking one of `short` on a node of
    /// `ci` that the job may use.
    fn frees_usable(&self, job: usize, v: usize, ci: usize, short: &[String]) -> bool {
        let State::Admitted { plan, .. } = &self.jobs[v].state else {
            return false;
        };
        let c = &self.clusters[ci];
        plan.iter().enumerate().any(|(gi, m)| {
            let asks = short.iter().any(|r| get(&self.jobs[v].groups[gi].1, r) > 0);
            asks && m.iter().any(|(name, k)| {
                *k > 0
                    && c.nodes.iter().any(|n| {
                        &n.name == name
                            && n.usable
                            && self.jobs[job]
                                .groups()
                                .iter()
                                .any(|(k, _, cons)| *k > 0 && n.filters.admits(cons).is_ok())
                    })
            })
        })
    }

    fn guard_holds(&self, guard: &[Guard], gone: &BTreeSet<usize>) -> bool {
        guard
            .iter()
            .all(|(n, r, x)| get(&self.used(*n, gone), r) + x <= self.min(*n, r))
    }

    pub(super) fn asks_any(&self, j: usize, short: &[String]) -> bool {
        short.iter().any(|r| get(&self.jobs[j].charge, r) > 0)
    }

    /// R2: within its leaf's min for every short resource, its lower-priority jobs gone.
    fn may_reclaim(&self, job: usize, leaf: usize, short: &[String], own: &[usize]) -> bool {
        let none = BTreeSet::new();
        let mut freed = Amounts::new();
        for &o in own {
            add(&mut freed, &self.jobs[o].charge, 1);
        }
        let d = &self.jobs[job].charge;
        !short.is_empty()
            && short.iter().all(|r| {
                get(&self.used(leaf, &none), r) - get(&freed, r) + get(d, r) <= self.min(leaf, r)
            })
    }

    /// Whether `leaf` preempts its jobs by priority (R8).
    fn preempts_by_priority(&self, leaf: usize) -> bool {
        self.tree.as_ref().is_some_and(|t| {
            t.nodes[leaf]
                .attributes
                .get(WITHIN_QUEUE)
                .map(String::as_str)
                == Some("LowerPriority")
        })
    }

    /// Reclaim by the documented rule: victims, and the member the job then goes to.
    fn reclaim(
        &self,
        job: usize,
        leaf: usize,
        short: &[String],
        own: &[usize],
    ) -> Option<(Vec<usize>, usize)> {
        let t = self.tree.as_ref()?;
        let none = BTreeSet::new();
        let d = self.jobs[job].charge.clone();
        let mut freed = Amounts::new();
        for &o in own {
            add(&mut freed, &self.jobs[o].charge, 1);
        }
        let within = |n: usize, r: &str| {
            get(&self.used(n, &none), r) - get(&freed, r) + get(&d, r) <= self.min(n, r)
        };
        if !self.may_reclaim(job, leaf, short, own) {
            return None;
        }
        let mut guard: Vec<Guard> = Vec::new();
        let mut leaves = BTreeSet::new();
        let victim_leaves: BTreeSet<usize> = self
            .admitted_jobs()
            .filter_map(|v| self.leaf(v))
            .filter(|&l| l != leaf)
            .collect();
        let up = path_up(t, leaf);
        for vleaf in victim_leaves {
            let vup = path_up(t, vleaf);
            let Some(vi) = vup.iter().position(|n| up.contains(n)) else {
                continue;
            };
            let Some(ji) = up.iter().position(|n| *n == vup[vi]) else {
                continue;
            };
            if vi == 0 || ji == 0 {
                continue;
            }
            // R3: the children of the meeting node on the victim's side and on the job's.
            let (mc, jc) = (vup[vi - 1], up[ji - 1]);
            let borrows = short
                .iter()
                .any(|r| get(&self.used(mc, &none), r) > self.min(mc, r));
            // R3: in every resource it asks that the victim's leaf names a min of, its leaf
            // stays within its min.
            let keeps_theirs = d.iter().all(|(r, x)| {
                r == PODS
                    || r == MAX_JOBS
                    || *x <= 0
                    || !t.nodes[vleaf].min.0.contains_key(r.as_str())
                    || within(leaf, r)
            });
            if keeps_theirs && borrows && short.iter().all(|r| within(jc, r)) {
                leaves.insert(vleaf);
                // R8: the guard, J's side at each meeting node.
                if !own.is_empty() {
                    guard.extend(short.iter().map(|r| (jc, r.clone(), get(&d, r))));
                }
            }
        }
        if !own.is_empty() {
            guard.extend(short.iter().map(|r| (leaf, r.clone(), get(&d, r))));
        }
        guard.sort();
        guard.dedup();
        // R4: the candidates, in victim order.
        let mut candidates: Vec<usize> = self
            .admitted_jobs()
            .filter(|v| self.leaf(*v).is_some_and(|l| leaves.contains(&l)))
            .filter(|v| self.asks_any(*v, short))
            .collect();
        self.victim_order(&mut candidates);
        let own: Vec<usize> = own
            .iter()
            .copied()
            .filter(|v| self.asks_any(*v, short))
            .collect();
        // R8: its own jobs that the guard needs gone come first, then R4's, then its own rest.
        let forced = (0..=own.len())
            .find(|&k| self.guard_holds(&guard, &own[..k].iter().copied().collect()))
            .unwrap_or(own.len());
        let mut order = own[..forced].to_vec();
        order.extend(candidates);
        order.extend(&own[forced..]);
        self.take_victims(job, leaf, short, &order, &guard, None)
    }

    fn admitted_jobs(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.jobs.len()).filter(|&j| matches!(self.jobs[j].state, State::Admitted { .. }))
    }

    /// R6. Per member (only quota short and the job fitting somewhere: from anywhere), the
    /// shortest prefix of its victims that lets the job fit, less those not needed; the first
    /// member in the usual order where that works.
    pub(super) fn take_victims(
        &self,
        job: usize,
        leaf: usize,
        short: &[String],
        order: &[usize],
        guard: &[Guard],
        fair: Option<(usize, Frac)>,
    ) -> Option<(Vec<usize>, usize)> {
        if order.is_empty() {
            return None;
        }
        let none = BTreeSet::new();
        if !self.over_max(job, &none).is_empty() && self.find_cluster(job, None).is_some() {
            let v = self.trials(job, (leaf, short), order, None, guard, fair)?;
            let ci = self.find_cluster(job, Some(&v.iter().copied().collect()))?;
            return Some((v, ci));
        }
        let mut by_cluster: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for &v in order {
            if let State::Admitted { cluster, .. } = &self.jobs[v].state {
                by_cluster.entry(*cluster).or_default().push(v);
            }
        }
        let key = self.scarcest(job);
        let mut clusters: Vec<(i128, String, usize)> = by_cluster
            .keys()
            .map(|&ci| {
                (
                    self.summary(ci, &key, None).1,
                    self.clusters[ci].name.clone(),
                    ci,
                )
            })
            .collect();
        clusters.sort();
        for (_, _, ci) in clusters {
            // R6: another leaf's candidate with no pod asking a short resource on a node the
            // job may use is left out.
            let on: Vec<usize> = by_cluster[&ci]
                .iter()
                .copied()
                .filter(|&v| self.leaf(v) == Some(leaf) || self.frees_usable(job, v, ci, short))
                .collect();
            if !self.clusters[ci].reachable || !self.candidate(job, ci) {
                continue;
            }
            if let Some(v) = self.trials(job, (leaf, short), &on, Some(ci), guard, fair) {
                return Some((v, ci));
            }
        }
        None
    }

    /// R6's trials: of the candidates R5 keeps; when that finds nothing (not for fairness), of
    /// every candidate that R5 would keep as the first victim of its leaf, when there are more
    /// of those, the victims it finds used only if R5 keeps them all.
    fn trials(
        &self,
        job: usize,
        (leaf, short): (usize, &[String]),
        order: &[usize],
        on: Option<usize>,
        guard: &[Guard],
        fair: Option<(usize, Frac)>,
    ) -> Option<Vec<usize>> {
        let kept = self.borrowed_only(leaf, short, order, fair);
        if let Some(v) = self.trial(job, &kept, on, guard) {
            return Some(v);
        }
        if fair.is_some() {
            return None;
        }
        let alone: Vec<usize> = order
            .iter()
            .copied()
            .filter(|&v| !self.borrowed_only(leaf, short, &[v], None).is_empty())
            .collect();
        if alone.len() == kept.len() {
            return None;
        }
        let v = self.trial(job, &alone, on, guard)?;
        (self.borrowed_only(leaf, short, &v, None) == v).then_some(v)
    }

    /// R5. The victims of `order` that take only what their leaf borrows: one of another leaf is
    /// kept while that leaf, with its victims kept before it and its jobs of lower priority
    /// that it could preempt gone, uses more than its min of every short resource it asks.
    /// F4: with `fair` (node P, share s), one is also kept only while its side below P, with
    /// the victims kept before it there and itself gone, keeps a share of at least s.
    fn borrowed_only(
        &self,
        leaf: usize,
        short: &[String],
        order: &[usize],
        fair: Option<(usize, Frac)>,
    ) -> Vec<usize> {
        let none = BTreeSet::new();
        let mut kept: Vec<usize> = Vec::new();
        for &v in order {
            let Some(vleaf) = self.leaf(v) else { continue };
            if vleaf == leaf {
                kept.push(v);
                continue;
            }
            let p = self.jobs[v].priority;
            let mut taken = Amounts::new();
            for &k in kept.iter().filter(|k| self.leaf(**k) == Some(vleaf)) {
                add(&mut taken, &self.jobs[k].charge, 1);
            }
            let preempts = self.tree.as_ref().is_some_and(|t| {
                t.nodes[vleaf]
                    .attributes
                    .get(super::WITHIN_QUEUE)
                    .map(String::as_str)
                    == Some("LowerPriority")
            });
            let mut left = Amounts::new();
            if preempts {
                for o in self.admitted_jobs() {
                    if self.leaf(o) == Some(vleaf)
                        && self.jobs[o].priority < p
                        && !kept.contains(&o)
                    {
                        add(&mut left, &self.jobs[o].charge, 1);
                    }
                }
            }
            let u = self.used(vleaf, &none);
            let vd = &self.jobs[v].charge;
            let above =
                |r: &String| get(&u, r) - get(&taken, r) - get(&left, r) > self.min(vleaf, r);
            // R5: the short resources it asks; F4: every resource it asks.
            let borrowed = match fair {
                None => short.iter().filter(|r| get(vd, r) > 0).all(above),
                Some(_) => vd.iter().filter(|(_, x)| **x > 0).all(|(r, _)| above(r)),
            };
            let fair_kept = match fair {
                None => true,
                Some((p, mine)) => self.side_below(p, vleaf).is_some_and(|b| {
                    let mut gone = Amounts::new();
                    for &k in kept.iter().chain([&v]) {
                        if self
                            .leaf(k)
                            .is_some_and(|kl| self.side_below(p, kl) == Some(b))
                        {
                            add(&mut gone, &self.jobs[k].charge, -1);
                        }
                    }
                    !self.share(b, &gone).lt(mine)
                }),
            };
            if borrowed && fair_kept {
                kept.push(v);
            }
        }
        kept
    }

    /// R6 and R7. The shortest prefix of `order` with which the job fits quota, keeps the guard
    /// and (with `on`) fits that member, then every victim not needed given back, last taken
    /// first.
    fn trial(
        &self,
        job: usize,
        order: &[usize],
        on: Option<usize>,
        guard: &[Guard],
    ) -> Option<Vec<usize>> {
        let fits = |gone: &BTreeSet<usize>| {
            self.over_max(job, gone).is_empty()
                && self.guard_holds(guard, gone)
                && on.is_none_or(|ci| self.fits_on(job, ci, Some(gone), false).is_some())
        };
        if order.is_empty() || !fits(&order.iter().copied().collect()) {
            return None;
        }
        let k = (1..=order.len()).find(|&k| fits(&order[..k].iter().copied().collect()))?;
        let mut gone: BTreeSet<usize> = order[..k].iter().copied().collect();
        let mut needed = vec![order[k - 1]];
        for &v in order[..k - 1].iter().rev() {
            gone.remove(&v);
            if !fits(&gone) {
                gone.insert(v);
                needed.push(v);
            }
        }
        needed.reverse();
        Some(needed)
    }
}
