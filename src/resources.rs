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

/// Interns resource names. Ids are stable for the life of the table.
#[derive(Clone, Debug)]
pub struct ResourceTable {
    names: Vec<String>,
    ids: HashMap<String, Res>,
}

impl Default for ResourceTable {
    fn default() -> Self {
        let mut t = ResourceTable {
            names: Vec::new(),
            ids: HashMap::new(),
        };
        t.intern("pods");
        t.intern(MAX_JOBS_NAME);
        t
    }
}

impl ResourceTable {
    pub fn intern(&mut self, name: &str) -> Res {
        if let Some(r) = self.ids.get(name) {
            return *r;
        }
        let r = Res(u16::try_from(self.names.len()).unwrap_or(u16::MAX));
        self.names.push(name.to_string());
        self.ids.insert(name.to_string(), r);
        r
    }

    pub fn get(&self, name: &str) -> Option<Res> {
        self.ids.get(name).copied()
    }

    pub fn name(&self, r: Res) -> &str {
        self.names.get(usize::from(r.0)).map_or("?", String::as_str)
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// A sparse demand from a resource list (zero entries dropped), sorted by id.
    pub fn demand(&mut self, list: &ResourceList) -> Demand {
        let mut d: Vec<(Res, i128)> = list
            .iter()
            .filter(|(_, q)| !q.is_zero())
            .map(|(n, q)| (self.intern(n), q.milli()))
            .collect();
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
