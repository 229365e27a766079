//! A small ordered set kept as a sorted vector: the per-node sets of the fair round
//! ([`super::fair`]), which hold a few to a few hundred entries and are touched on every visit.
//! For sets that small a vector's binary search and short moves beat a B-tree's node walks.
//! Held to `BTreeSet` on random operations (tests below).

/// Ascending, no duplicates.
#[derive(Clone, Debug)]
pub(super) struct Sorted<T>(Vec<T>);

impl<T> Default for Sorted<T> {
    fn default() -> Self {
        Sorted(Vec::new())
    }
}

impl<T: Ord> Sorted<T> {
    /// Adds `t`; false if it was there.
    pub(super) fn insert(&mut self, t: T) -> bool {
        match self.0.binary_search(&t) {
            Ok(_) => false,
            Err(i) => {
                self.0.insert(i, t);
                true
            }
        }
    }

    /// Takes `t` out; false if it was not there.
    pub(super) fn remove(&mut self, t: &T) -> bool {
        match self.0.binary_search(t) {
            Ok(i) => {
                self.0.remove(i);
                true
            }
            Err(_) => false,
        }
    }

    /// The least entry.
    pub(super) fn first(&self) -> Option<&T> {
        self.0.first()
    }

    pub(super) fn clear(&mut self) {
        self.0.clear();
    }

    /// Every entry, ascending; the set is empty after.
    pub(super) fn take(&mut self) -> Vec<T> {
        std::mem::take(&mut self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::Sorted;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]
        /// The same answers and contents as a `BTreeSet` after every operation.
        #[test]
        fn behaves_as_a_btreeset(ops in prop::collection::vec((0u8..3, 0u16..40), 0..200)) {
            let mut s: Sorted<u16> = Sorted::default();
            let mut r: BTreeSet<u16> = BTreeSet::new();
            for (op, x) in ops {
                match op {
                    0 | 1 => prop_assert_eq!(s.insert(x), r.insert(x)),
                    _ => prop_assert_eq!(s.remove(&x), r.remove(&x)),
                }
                prop_assert_eq!(s.first(), r.first());
                prop_assert_eq!(&s.0, &r.iter().copied().collect::<Vec<_>>());
            }
            let all = s.take();
            prop_assert_eq!(all, r.into_iter().collect::<Vec<_>>());
            prop_assert!(s.first().is_none());
        }
    }
}
