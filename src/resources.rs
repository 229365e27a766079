//! Dense resource vectors for the hot path: resource names interned to small ids.
//!
//! Owns the mapping `resource name -> Res` shared by the fleet, the quota tree and the estimator,
//! so fits are checked on `i128` milli-unit slices instead of string maps. Holds no policy.

use std::collections::HashMap;

use crate::quantity::{Quantity, ResourceList};

/// An interned resource name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Res(pub u16);

/// `pods`: every pod asks for one; a node's `pods` allocatable caps how many it holds.
pub const PODS: Res = Res(0);
/// `kube-queue/max-jobs`: every job asks for one in quota.
pub const MAX_JOBS: Res = Res(1);
pub const MAX_JOBS_NAME: &str = "kube-queue/max-jobs";
/// One unit in milli-units.
pub const ONE: i128 = 1000;

/// At most this many distinct names are interned from job manifests (users write them); past
/// it a job's unknown names all become [`OVERFLOW`], which no node offers, so such a job never
/// fits and says why. Names from nodes and the quota tree (admins') are interned up to
/// `u16::MAX - 1`.
pub const MAX_JOB_NAMES: usize = 4096;
/// The resource every name past the table's bounds becomes.
pub const OVERFLOW: Res = Res(u16::MAX);
const OVERFLOW_NAME: &str = "(a resource name past muster's limit of distinct names)";

/// Resources that are scarce accelerators or devices rather than cpu/memory/storage/pods (the
/// estimator keeps a pod off a node whose such devices it does not use, where it can).
pub fn is_extended(name: &str) -> bool {
    !matches!(
        name,
        "cpu" | "memory" | "pods" | "ephemeral-storage" | "storage"
    ) && !name.starts_with("hugepages-")
        && name != MAX_JOBS_NAME
}

/// Interns resource names. Ids are stable for the life of the table.
#[derive(Clone, Debug)]
pub struct ResourceTable {
    names: Vec<String>,
    ids: HashMap<String, Res>,
    /// Per id, whether the name is an extended resource ([`is_extended`]).
    extended: Vec<bool>,
}

impl Default for ResourceTable {
    fn default() -> Self {
        let mut t = ResourceTable {
            names: Vec::new(),
            ids: HashMap::new(),
            extended: Vec::new(),
        };
        t.intern("pods");
        t.intern(MAX_JOBS_NAME);
        t
    }
}

impl ResourceTable {
    pub fn intern(&mut self, name: &str) -> Res {
        self.intern_within(name, usize::from(u16::MAX))
    }

    /// Interns `name` while the table holds fewer than `limit` names; else [`OVERFLOW`] (the
    /// table does not grow).
    fn intern_within(&mut self, name: &str, limit: usize) -> Res {
        if let Some(r) = self.ids.get(name) {
            return *r;
        }
        let n = self.names.len();
        if n >= limit.min(usize::from(u16::MAX)) {
            return OVERFLOW;
        }
        let r = Res(n as u16);
        self.names.push(name.to_string());
        self.extended.push(is_extended(name));
        self.ids.insert(name.to_string(), r);
        r
    }

    pub fn get(&self, name: &str) -> Option<Res> {
        self.ids.get(name).copied()
    }

    pub fn name(&self, r: Res) -> &str {
        if r == OVERFLOW {
            return OVERFLOW_NAME;
        }
        self.names.get(usize::from(r.0)).map_or("?", String::as_str)
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Per id, whether the resource is an extended one (a device, not cpu, memory, storage or
    /// pods): [`is_extended`] of each name, read once when it is interned.
    pub fn extended(&self) -> &[bool] {
        &self.extended
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// A sparse demand from a job's resource list (zero entries dropped), sorted by id. Names
    /// past [`MAX_JOB_NAMES`] become [`OVERFLOW`].
    pub fn demand(&mut self, list: &ResourceList) -> Demand {
        let mut d: Vec<(Res, i128)> = Vec::new();
        for (n, q) in list.iter().filter(|(_, q)| !q.is_zero()) {
            let r = self.intern_within(n, MAX_JOB_NAMES);
            match d.iter_mut().find(|(x, _)| *x == r) {
                Some((_, v)) => *v = v.saturating_add(q.milli()),
                None => d.push((r, q.milli())),
            }
        }
        d.sort_unstable_by_key(|(r, _)| *r);
        Demand(d)
    }

    /// A dense vector from a resource list.
    pub fn dense(&mut self, list: &ResourceList) -> Vec<i128> {
        let mut v = Vec::new();
        for (n, q) in list.iter() {
            let r = self.intern(n);
            set(&mut v, r, q.milli());
        }
        v
    }

    /// Back to a named list, for reports.
    pub fn list(&self, d: &Demand) -> ResourceList {
        d.0.iter()
            .map(|(r, v)| (self.name(*r).to_string(), Quantity::from_milli(*v)))
            .collect()
    }

    pub fn fmt_amount(&self, r: Res, milli: i128) -> String {
        format!("{} {}", self.name(r), Quantity::from_milli(milli))
    }
}

/// Sparse, sorted `(resource, milli)` pairs: what a pod or a job asks for.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Demand(pub Vec<(Res, i128)>);

impl Demand {
    pub fn get(&self, r: Res) -> i128 {
        self.0
            .binary_search_by_key(&r, |(k, _)| *k)
            .map_or(0, |i| self.0[i].1)
    }

    pub fn iter(&self) -> impl Iterator<Item = (Res, i128)> + '_ {
        self.0.iter().copied()
    }

    /// `self + other * n`.
    pub fn add_scaled(&mut self, other: &Demand, n: i128) {
        for (r, v) in other.iter() {
            match self.0.binary_search_by_key(&r, |(k, _)| *k) {
                Ok(i) => self.0[i].1 = self.0[i].1.saturating_add(v.saturating_mul(n)),
                Err(i) => self.0.insert(i, (r, v.saturating_mul(n))),
            }
        }
    }
}

/// Resources as a set of bits, one per resource numbered below 64, and whether any of `rs` is
/// numbered 64 or above (such a set is not whole in the bits).
pub fn res_bits(rs: impl IntoIterator<Item = Res>) -> (u64, bool) {
    let mut bits = 0u64;
    let mut wide = false;
    for r in rs {
        match 1u64.checked_shl(u32::from(r.0)) {
            Some(b) => bits |= b,
            None => wide = true,
        }
    }
    (bits, wide)
}

/// `rs` as bits when every one of them is numbered below 64; `None` otherwise (then a test of
/// membership reads the resources one by one).
pub fn whole_bits(rs: &[Res]) -> Option<u64> {
    match res_bits(rs.iter().copied()) {
        (b, false) => Some(b),
        (_, true) => None,
    }
}

/// Reads entry `r` of a dense vector (missing = 0).
#[inline]
pub fn at(v: &[i128], r: Res) -> i128 {
    v.get(usize::from(r.0)).copied().unwrap_or(0)
}

/// Writes entry `r` of a dense vector, growing it.
pub fn set(v: &mut Vec<i128>, r: Res, x: i128) {
    let i = usize::from(r.0);
    if v.len() <= i {
        v.resize(i + 1, 0);
    }
    v[i] = x;
}

/// `v[r] += x` for every entry of `d` scaled by `n`.
pub fn add_demand(v: &mut Vec<i128>, d: &Demand, n: i128) {
    for (r, x) in d.iter() {
        let cur = at(v, r);
        set(v, r, cur.saturating_add(x.saturating_mul(n)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two sets of resources meet exactly when their bits do, whenever the second is whole in
    /// its bits (numbered below 64); a resource numbered 64 or above is reported, never folded
    /// into a bit. Random sets over numbers 0..80, held to a read of the sets themselves.
    #[test]
    fn resource_bits_meet_as_the_sets_do() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut checked = 0;
        for _ in 0..5000 {
            let mut set = || -> Vec<Res> {
                let n = next() % 6;
                (0..n).map(|_| Res((next() % 80) as u16)).collect()
            };
            let (a, b) = (set(), set());
            let (ab, _) = res_bits(a.iter().copied());
            let (bb, wide) = res_bits(b.iter().copied());
            assert_eq!(wide, b.iter().any(|r| r.0 >= 64), "{b:?}");
            assert_eq!(whole_bits(&b), (!wide).then_some(bb), "{b:?}");
            if !wide {
                assert_eq!(ab & bb != 0, a.iter().any(|r| b.contains(r)), "{a:?} {b:?}");
                checked += 1;
            }
        }
        assert!(
            checked > 1000,
            "too few sets whole in their bits: {checked}"
        );
    }

    /// Names from job manifests fill the table only up to MAX_JOB_NAMES; the rest become
    /// OVERFLOW and the table stops growing, while admins' names (nodes, tree) still get ids.
    #[test]
    fn job_names_past_the_limit_overflow_without_growing_the_table() {
        let mut t = ResourceTable::default();
        for i in 0..MAX_JOB_NAMES + 10 {
            let mut l = ResourceList::new();
            l.set(format!("example.com/r{i}"), Quantity::from_milli(1000));
            let d = t.demand(&l);
            // `pods` and `kube-queue/max-jobs` hold the first two ids.
            assert_eq!(d.0[0].0 == OVERFLOW, i >= MAX_JOB_NAMES - 2, "name {i}");
        }
        assert_eq!(t.len(), MAX_JOB_NAMES);
        let mut l = ResourceList::new();
        l.set("example.com/late-a", Quantity::from_milli(1000));
        l.set("example.com/late-b", Quantity::from_milli(2000));
        let d = t.demand(&l);
        assert_eq!(d.0, vec![(OVERFLOW, 3000)], "both overflow, summed");
        assert!(t.name(OVERFLOW).contains("limit"));
        assert_eq!(t.len(), MAX_JOB_NAMES, "the table did not grow");
        let node = t.intern("example.com/offered-by-a-node");
        assert_ne!(node, OVERFLOW);
        assert_eq!(t.len(), MAX_JOB_NAMES + 1);
    }
}
