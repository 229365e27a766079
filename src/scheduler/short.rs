//! What a job that waits for the fleet is short of (R1): the requested resources that no
//! candidate member has enough of on the nodes the job may use. Owns that reading and its two
//! memos: the answer per shape and fleet version, and per shape and member, which of the
//! shape's requested resources the member has enough of, kept while the member's version is
//! the same. A change of usage touches one member; only that member is read again.

use super::{JobId, Scheduler, ShapeId};
use crate::resources::{MAX_JOBS, PODS, Res, at};

impl Scheduler {
    /// The requested resources the candidate clusters lack for `job` on the nodes it may use
    /// (R1): in every candidate cluster, for some pod group no node that admits it has its
    /// pod's request free, or those nodes together less than the job's total. When no single
    /// resource is short (fragmentation), the job's scarcest resource (its `key_res`).
    pub(super) fn fleet_short(&mut self, job: JobId) -> Vec<Res> {
        let shape_id = self.jobs[job].shape;
        // Every change of a member (usage, nodes, reachability, what it serves) bumps the
        // fleet version; the shape's candidates and demand never change.
        if let Some((v, short)) = &self.shapes[shape_id].fleet_short
            && *v == self.fleet_version
        {
            let short = short.clone();
            debug_assert_eq!(short, self.fleet_short_read(shape_id), "fleet_short memo");
            return short;
        }
        let short = self.fleet_short_now(shape_id);
        debug_assert_eq!(
            short,
            self.fleet_short_read(shape_id),
            "fleet_short from what each member was last read to have enough of"
        );
        self.shapes[shape_id].fleet_short = Some((self.fleet_version, short.clone()));
        short
    }

    /// The resources the shape asks for that quota counts per job and that a member may lack,
    /// in the order of its demand.
    fn requested(&self, shape_id: ShapeId) -> Vec<Res> {
        self.shapes[shape_id]
            .quota_demand
            .iter()
            .filter(|(r, x)| *r != PODS && *r != MAX_JOBS && *x > 0)
            .map(|(r, _)| r)
            .collect()
    }

    /// [`Self::fleet_short`] from what each member was last read to have enough of
    /// ([`Self::enough_on`]): the same reading, resource by resource and member by member,
    /// with a member read again only when its version changed.
    fn fleet_short_now(&mut self, shape_id: ShapeId) -> Vec<Res> {
        let requested = self.requested(shape_id);
        if requested.len() > 64 {
            return self.fleet_short_read(shape_id);
        }
        let mut short = Vec::new();
        'res: for (i, &r) in requested.iter().enumerate() {
            for ci in 0..self.clusters.len() {
                if self.enough_on(shape_id, ci, i, r) {
                    continue 'res;
                }
            }
            short.push(r);
        }
        self.fragmented(shape_id, short, requested)
    }

    /// Whether member `ci` has enough of `r`, the shape's `i`-th requested resource, on the
    /// nodes it may use (never when the member is unreachable or no candidate). Kept per
    /// member version, one bit per resource read: every change of a member's usage, nodes,
    /// reachability or what it serves gives it a new version.
    fn enough_on(&mut self, shape_id: ShapeId, ci: usize, i: usize, r: Res) -> bool {
        let v = self.clusters[ci].version;
        let bit = 1u64 << i;
        let (known, have) = match self.shapes[shape_id].enough.get(ci) {
            Some(&Some((mv, known, have))) if mv == v => (known, have),
            _ => (0, 0),
        };
        if known & bit != 0 {
            return have & bit != 0;
        }
        let enough = self.clusters[ci].reachable
            && self.candidate(shape_id, ci)
            && self.enough_of(shape_id, ci, r);
        let memo = &mut self.shapes[shape_id].enough;
        if memo.len() <= ci {
            memo.resize(ci + 1, None);
        }
        memo[ci] = Some((v, known | bit, if enough { have | bit } else { have }));
        enough
    }

    /// Whether member `ci` (reachable and a candidate) has enough of `r` for the shape: each
    /// pod group's pod request on one node that admits it, and the job's total on those nodes
    /// together.
    fn enough_of(&mut self, shape_id: ShapeId, ci: usize, r: Res) -> bool {
        let total = self.shapes[shape_id].quota_demand.get(r);
        let per_pod = self.shapes[shape_id]
            .groups
            .iter()
            .filter(|g| g.pods > 0)
            .map(|g| g.demand.get(r))
            .max()
            .unwrap_or(0);
        // The nodes it may use are among those the summary counts: short there is short on
        // them.
        let s = self.clusters[ci].summary();
        if per_pod > at(&s.max_free, r) || total > at(&s.total_free, r) {
            return false;
        }
        self.enough_on_usable(shape_id, ci, r, total)
    }

    /// The reference for [`Self::fleet_short_now`]: every requested resource read from every
    /// member as it is now, without the per-member memo (held to it in debug builds).
    fn fleet_short_read(&mut self, shape_id: ShapeId) -> Vec<Res> {
        let requested = self.requested(shape_id);
        let mut short = Vec::new();
        'res: for &r in &requested {
            for ci in 0..self.clusters.len() {
                if self.clusters[ci].reachable
                    && self.candidate(shape_id, ci)
                    && self.enough_of(shape_id, ci, r)
                {
                    continue 'res;
                }
            }
            short.push(r);
        }
        self.fragmented(shape_id, short, requested)
    }

    /// `short`, or when it is empty (fragmentation: no one resource is short on its own) the
    /// binding one, taken to be the job's scarcest (what chooses its member).
    fn fragmented(&self, shape_id: ShapeId, short: Vec<Res>, requested: Vec<Res>) -> Vec<Res> {
        if !short.is_empty() {
            return short;
        }
        let key = self.shapes[shape_id].key_res;
        if requested.contains(&key) {
            return vec![key];
        }
        requested
    }

    /// Whether the nodes of `ci` the shape may use have enough of `r` free: every pod group's
    /// pod request on one node that admits it, and `total` on them together.
    fn enough_on_usable(&mut self, shape_id: ShapeId, ci: usize, r: Res, total: i128) -> bool {
        let fit = self.shapes[shape_id].fit;
        self.ensure_usable_free(fit, ci);
        let u = &self.fits[fit].usable_free[&ci].2;
        self.fits[fit].groups.iter().enumerate().all(|(g, pg)| {
            let need = pg.demand.get(r);
            pg.pods == 0 || need == 0 || u.most.get(g).is_some_and(|m| at(m, r) >= need)
        }) && total <= at(&u.total, r)
    }
}
