//! A set of classes kept as a flag per class and the list of its members: the sets of sleeping
//! classes (`Scheduler::fleet_blocked`, and per tree node `quota_blocked`), which take an
//! insert on nearly every visit that is skipped and are emptied whole when capacity or quota
//! frees. A flag and a push are cheaper there than hashing. Members come out in the order they
//! went in; nothing that reads these sets depends on that order (they were hash sets, whose
//! order changes from one process to the next). Held to `HashSet` on random operations (tests
//! below).

use super::ClassId;

#[derive(Clone, Debug, Default)]
pub(super) struct ClassSet {
    /// Per class: whether it is in the set.
    on: Vec<bool>,
    /// The members, each once.
    list: Vec<ClassId>,
}

impl ClassSet {
    /// Adds `c`; false if it was there.
    pub(super) fn insert(&mut self, c: ClassId) -> bool {
        if self.on.len() <= c {
            self.on.resize(c + 1, false);
        }
        if self.on[c] {
            return false;
        }
        self.on[c] = true;
        self.list.push(c);
        true
    }

    /// Every member, in the order they went in; the set is empty after.
    pub(super) fn drain(&mut self) -> Vec<ClassId> {
        for &c in &self.list {
            self.on[c] = false;
        }
        std::mem::take(&mut self.list)
    }

    /// Takes out every member for which `out` holds, and returns them in the order they went
    /// in; the others stay, in their order.
    pub(super) fn take_where(&mut self, mut out: impl FnMut(ClassId) -> bool) -> Vec<ClassId> {
        let mut taken = Vec::new();
        let on = &mut self.on;
        self.list.retain(|&c| {
            if out(c) {
                on[c] = false;
                taken.push(c);
                false
            } else {
                true
            }
        });
        taken
    }

    pub(super) fn clear(&mut self) {
        self.drain();
    }
}

#[cfg(test)]
mod tests {
    use super::ClassSet;
    use proptest::prelude::*;
    use std::collections::HashSet;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]
        /// The same members as a `HashSet` after every operation, each once.
        #[test]
        fn behaves_as_a_hashset(ops in prop::collection::vec((0u8..4, 0usize..30), 0..200)) {
            let mut s = ClassSet::default();
            let mut r: HashSet<usize> = HashSet::new();
            for (op, x) in ops {
                match op {
                    0 | 1 => prop_assert_eq!(s.insert(x), r.insert(x)),
                    2 => {
                        // Take out the members below x.
                        let mut taken = s.take_where(|c| c < x);
                        let mut want: Vec<usize> = r.iter().copied().filter(|&c| c < x).collect();
                        r.retain(|&c| c >= x);
                        taken.sort_unstable();
                        want.sort_unstable();
                        prop_assert_eq!(taken, want);
                    }
                    _ => {
                        let mut all = s.drain();
                        let mut want: Vec<usize> = r.drain().collect();
                        all.sort_unstable();
                        want.sort_unstable();
                        prop_assert_eq!(all, want);
                    }
                }
                let mut members = s.list.clone();
                members.sort_unstable();
                let mut want: Vec<usize> = r.iter().copied().collect();
                want.sort_unstable();
                prop_assert_eq!(&members, &want);
                for c in 0..30 {
                    prop_assert_eq!(s.on.get(c).copied().unwrap_or(false), r.contains(&c));
                }
            }
        }
    }
}
