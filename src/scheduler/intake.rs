//! Intake: a submitted workload becomes a queued job. Owns how a job's queue (its quota leaf),
//! class (the jobs a pass treats as one) and shape (its pod groups, quota charge and fit memo)
//! are found or made, and whether it could ever run as written (`admissibility`), rechecked for
//! inadmissible jobs whenever the fleet, tree or priority classes change.

use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap};

use super::{Class, ClassId, JobId, JobState, Scheduler, Shape, ShapeId, fit};
use crate::estimate::{self, PodGroup};
use crate::fleet::{Constraints, Needs};
use crate::quantity::Quantity;
use crate::quota::Strategy;
use crate::resources::{Demand, MAX_JOBS, ONE, PODS, Res, at, res_bits};
use crate::workload::Workload;

impl Scheduler {
    pub(super) fn recheck_inadmissible(&mut self) {
        let ids: Vec<JobId> = self.inadmissible.iter().copied().collect();
        for j in ids {
            let ns = self.jobs[j].namespace.clone();
            let (queue, ok) = self.queue_for(&ns);
            if !ok {
                continue;
            }
            self.jobs[j].queue = queue;
            self.jobs[j].class = self.class_for(queue, self.jobs[j].shape);
            match self.admissibility(j) {
                Ok(p) => {
                    self.inadmissible.remove(&j);
                    self.jobs[j].priority = p;
                    self.jobs[j].order.priority = Reverse(p);
                    self.jobs[j].state = JobState::Pending;
                    self.enqueue(j);
                }
                Err(r) => self.jobs[j].state = JobState::Inadmissible(r),
            }
        }
    }

    /// The job's priority if it could ever run, else why not.
    pub(super) fn admissibility(&mut self, job: JobId) -> Result<i32, String> {
        let mut prio: Option<i32> = None;
        for name in &self.jobs[job].priority_classes {
            match self.priorities.get(name) {
                Some(v) => prio = Some(prio.map_or(*v, |p: i32| p.max(*v))),
                None => return Err(format!("PriorityClass {name:?} does not exist")),
            }
        }
        let shape_id = self.jobs[job].shape;
        if let (Some(q), Some(leaf)) = (&self.quota, self.queues.leaf(self.jobs[job].queue))
            && let Some(s) = q.never_fits(leaf, &self.shapes[shape_id].quota_demand)
        {
            return Err(format!(
                "requests {} but quota {} allows at most {}: can never be admitted",
                self.table.fmt_amount(s.res, s.request),
                q.tree.nodes[s.node].path,
                Quantity::from_milli(s.max)
            ));
        }
        // Could the whole job fit in some candidate cluster if it were empty?
        let mut reasons = Vec::new();
        let mut refused = Vec::new();
        let mut any = false;
        for ci in 0..self.clusters.len() {
            let c = &self.clusters[ci];
            if !self.shapes[shape_id].candidates.allows(&c.name, &c.labels) {
                continue;
            }
            if let Some(why) = self.refusal(shape_id, ci) {
                refused.push(why);
                continue;
            }
            any = true;
            let stale = self
                .empty_clusters
                .get(&ci)
                .is_none_or(|(v, _)| *v != c.topology);
            if stale {
                let mut e = c.clone();
                for n in &mut e.nodes {
                    n.reserved.clear();
                    n.external.clear();
                }
                self.empty_clusters.insert(ci, (c.topology, e));
            }
            // Eligibility depends on topology only, which the empty copy shares.
            let fit = self.shapes[shape_id].fit;
            self.ensure_eligible(fit, ci);
            let Some((_, empty)) = self.empty_clusters.get(&ci) else {
                continue;
            };
            // The estimate on the empty copy depends on the pod shape and the copy alone (the
            // table only grows, its names stay): one per pod shape and topology version.
            let topology = self.clusters[ci].topology;
            let answer = match self.fits[fit].empty.get(&ci) {
                Some((t, answer)) if *t == topology => answer.clone(),
                _ => {
                    let shape = &self.shapes[shape_id];
                    let elig = self.eligible_on(fit, ci);
                    let answer =
                        estimate::place(empty, &shape.groups, elig, &self.table).map(|_| ());
                    self.fits[fit].empty.insert(ci, (topology, answer.clone()));
                    answer
                }
            };
            debug_assert_eq!(
                answer,
                estimate::place(
                    empty,
                    &self.shapes[shape_id].groups,
                    self.eligible_on(fit, ci),
                    &self.table
                )
                .map(|_| ()),
                "the empty estimate kept per pod shape"
            );
            match answer {
                Ok(()) => return Ok(prio.unwrap_or(0)),
                Err(r) => reasons.push(format!("{}: {r}", self.clusters[ci].name)),
            }
        }
        if !any {
            return Err(if self.clusters.is_empty() {
                "no member clusters are known".to_string()
            } else if !refused.is_empty() {
                format!("no member can create it: {}", refused.join("; "))
            } else {
                "no member cluster matches the job's cluster restriction".to_string()
            });
        }
        // The members that could create it but never hold it, then those that cannot create it.
        reasons.extend(refused);
        Err(format!(
            "can never fit in any member, even empty: {}",
            reasons.join("; ")
        ))
    }

    pub(super) fn queue_for(&mut self, namespace: &str) -> (usize, bool) {
        match &self.quota {
            Some(q) => match q.tree.leaf_for(namespace) {
                Some(leaf) => {
                    let name = q.tree.nodes[leaf].path.clone();
                    let strategy = q.tree.strategy(leaf);
                    (self.queues.get_or_add(&name, Some(leaf), strategy), true)
                }
                None => (0, false),
            },
            None => (
                self.queues
                    .get_or_add(namespace, None, self.config.default_strategy),
                true,
            ),
        }
    }

    pub(super) fn class_for(&mut self, queue: usize, shape: ShapeId) -> ClassId {
        let key = match self.queues.strategy(queue) {
            Strategy::StrictFIFO => (queue, None),
            Strategy::BestEffortFIFO => (queue, Some(shape)),
        };
        if let Some(&c) = self.class_ids.get(&key) {
            return c;
        }
        let id = self.classes.len();
        self.classes.push(Class {
            jobs: BTreeSet::new(),
            reason: None,
            reason_cycle: 0,
            reason_job: None,
            over_max: None,
            holds: None,
            dirty: false,
            reclaim_failed: HashMap::new(),
        });
        self.class_ids.insert(key, id);
        self.queue_classes.entry(queue).or_default().push(id);
        id
    }

    pub(super) fn shape_for(&mut self, w: &Workload) -> ShapeId {
        let groups: Vec<PodGroup> = w
            .components
            .iter()
            .map(|c| {
                let mut demand = self.table.demand(&c.requests);
                demand.add_scaled(&Demand(vec![(PODS, ONE)]), 1);
                PodGroup {
                    name: c.name.clone(),
                    pods: c.pods,
                    demand,
                    constraints: Constraints {
                        node_selector: c.node_selector.clone(),
                        tolerations: c.tolerations.clone(),
                        affinity: c.required_node_affinity.clone(),
                    },
                    topology: c.topology.clone().or_else(|| w.topology.clone()),
                }
            })
            .collect();
        let needs = Needs::of(w);
        let key = format!("{:?}|{:?}|{:?}", groups, w.candidates, needs);
        if let Some(&s) = self.shape_ids.get(&key) {
            return s;
        }
        let mut quota_demand = Demand::default();
        for g in &groups {
            quota_demand.add_scaled(&g.demand, i128::from(g.pods));
        }
        quota_demand.add_scaled(&Demand(vec![(MAX_JOBS, ONE)]), 1);
        let key_res = self.key_resource(&quota_demand);
        // Shapes of the same pods share what was learnt about where they fit.
        let pods_key = format!("{groups:?}");
        let fit = match self.fit_ids.get(&pods_key) {
            Some(&f) => f,
            None => {
                let f = self.fits.len();
                let memo = fit::FitMemo::new(groups.clone(), quota_demand.clone());
                self.fits.push(memo);
                self.fit_ids.insert(pods_key, f);
                f
            }
        };
        let id = self.shapes.len();
        let (asks, _) = res_bits(quota_demand.iter().filter(|(_, x)| *x > 0).map(|(r, _)| r));
        self.shapes.push(Shape {
            groups,
            asks,
            quota_demand,
            candidates: w.candidates.clone(),
            needs,
            key_res,
            fit,
            nowhere: None,
            fleet_short: None,
            enough: Vec::new(),
        });
        self.shape_ids.insert(key, id);
        id
    }

    /// The requested resource with the highest share of the fleet's allocatable (ties by name).
    pub(super) fn key_resource(&mut self, d: &Demand) -> Res {
        let mut totals: Vec<i128> = Vec::new();
        for c in &mut self.clusters {
            let s = c.summary();
            for (i, v) in s.total_alloc.iter().enumerate() {
                if totals.len() <= i {
                    totals.resize(i + 1, 0);
                }
                totals[i] = totals[i].saturating_add(*v);
            }
        }
        let mut best = (0i128, PODS);
        for (r, x) in d.iter() {
            if r == PODS || r == MAX_JOBS {
                continue;
            }
            let share = x.saturating_mul(1_000_000_000) / at(&totals, r).max(1);
            // Ties by name, so that the choice does not depend on the order names were seen.
            if share > best.0
                || (share == best.0
                    && (best.1 == PODS || self.table.name(r) < self.table.name(best.1)))
            {
                best = (share, r);
            }
        }
        best.1
    }
}
