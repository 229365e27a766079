//! Fair sharing's measure: a tree node's weighted dominant share of what it borrows from its
//! parent, as an exact fraction (no floats), and the node weights it is divided by.
//!
//! For node N under parent P and a resource r: N borrows `used(N, r) + request - min(N, r)`
//! (when above zero) of what P lends of r (P's max of r, or the sum of its children's mins when
//! P names no max); its share is the largest, over resources, of borrowed / lent, divided by
//! N's weight. `pods` and `kube-queue/max-jobs` do not count; nor does a resource P lends none of.

use std::cmp::Ordering;
use std::fmt;

use super::QuotaState;
use crate::quantity::Quantity;
use crate::resources::{Demand, MAX_JOBS, PODS, Res, ResourceTable, at};

/// Attribute on a tree node: its weight in fair sharing among its siblings (a quantity above
/// zero, at most [`MAX_WEIGHT`]; default 1). A node of weight 2 is entitled to twice the
/// borrowed capacity of a sibling of weight 1.
pub const WEIGHT_ATTRIBUTE: &str = "muster.dev/fair-sharing-weight";

/// The largest weight, in whole units.
pub const MAX_WEIGHT: i128 = 1_000_000;

/// Attribute on a tree node: whether a job below one of its children may preempt jobs below
/// another child for fairness ([`FINAL_SHARE`]) or not (`Never`, the default). docs/concepts.md,
/// rules F1–F5.
pub const FAIR_PREEMPTION_ATTRIBUTE: &str = "muster.dev/fair-sharing-preemption";

/// The one strategy of [`FAIR_PREEMPTION_ATTRIBUTE`]: as Kueue's, a victim's side keeps at
/// least the share the preemptor's side has with the job admitted.
pub const FINAL_SHARE: &str = "LessThanOrEqualToFinalShare";

/// Reads a node's fair-sharing attributes: its weight (1 unless set), each problem reported at
/// `{field}.attributes[...]`.
pub(super) fn read_fairness(
    attributes: &std::collections::BTreeMap<String, String>,
    field: &str,
    problems: &mut Vec<super::Problem>,
) -> Quantity {
    let mut err = |attr: &str, message: String| {
        problems.push(super::Problem {
            severity: super::Severity::Error,
            field: format!("{field}.attributes[{attr}]"),
            message,
        })
    };
    if let Some(s) = attributes.get(FAIR_PREEMPTION_ATTRIBUTE)
        && s != FINAL_SHARE
        && s != "Never"
    {
        err(
            FAIR_PREEMPTION_ATTRIBUTE,
            format!("{s:?} is not {FINAL_SHARE} or Never"),
        );
    }
    let mut weight = Quantity::from_milli(1000);
    if let Some(s) = attributes.get(WEIGHT_ATTRIBUTE) {
        match Quantity::parse(s) {
            Err(_) => err(WEIGHT_ATTRIBUTE, format!("{s:?} is not a quantity")),
            Ok(q) if q.milli() <= 0 => err(WEIGHT_ATTRIBUTE, format!("{s:?} must be above 0")),
            Ok(q) if q.milli() > MAX_WEIGHT * 1000 => err(
                WEIGHT_ATTRIBUTE,
                format!("{s:?} is above the largest weight, {MAX_WEIGHT}"),
            ),
            Ok(q) => weight = q,
        }
    }
    weight
}

/// A weighted dominant share: `num / den`, exact. Compared by cross-multiplying in 256 bits.
#[derive(Clone, Copy, Debug)]
pub struct Share {
    pub num: u128,
    /// Above zero.
    pub den: u128,
}

impl Share {
    pub const ZERO: Share = Share { num: 0, den: 1 };

    /// `borrowed / (lent × weight)`, the amounts in milli-units and the weight in milli.
    pub fn of(borrowed: i128, lent: i128, weight_milli: i128) -> Share {
        let b = u128::try_from(borrowed.max(0)).unwrap_or(0);
        let l = u128::try_from(lent.max(1)).unwrap_or(1);
        let w = u128::try_from(weight_milli.max(1)).unwrap_or(1);
        Share {
            num: b.saturating_mul(1000),
            den: l.saturating_mul(w),
        }
    }

    pub fn is_zero(&self) -> bool {
        self.num == 0
    }
}

/// `a × b` as (high, low) 128-bit halves.
fn mul_wide(a: u128, b: u128) -> (u128, u128) {
    const LO: u128 = u64::MAX as u128;
    let (a1, a0) = (a >> 64, a & LO);
    let (b1, b0) = (b >> 64, b & LO);
    let p00 = a0 * b0;
    let p01 = a0 * b1;
    let p10 = a1 * b0;
    let p11 = a1 * b1;
    // The middle column: carries from the low halves into the high word.
    let mid = (p00 >> 64) + (p01 & LO) + (p10 & LO);
    let low = (p00 & LO) | (mid << 64);
    let high = p11 + (p01 >> 64) + (p10 >> 64) + (mid >> 64);
    (high, low)
}

impl Ord for Share {
    fn cmp(&self, o: &Self) -> Ordering {
        // Every part within 64 bits (the usual case: milli-amounts times a milli-weight): the
        // products fit 128 bits. Otherwise the 256-bit products ([`Share::cmp_wide`]).
        if (self.num | self.den | o.num | o.den) >> 64 == 0 {
            (self.num * o.den).cmp(&(o.num * self.den))
        } else {
            self.cmp_wide(o)
        }
    }
}

impl Share {
    /// The comparison by 256-bit cross products, for any parts: the reference
    /// [`Ord::cmp`]'s fast path is held to.
    fn cmp_wide(&self, o: &Self) -> Ordering {
        mul_wide(self.num, o.den).cmp(&mul_wide(o.num, self.den))
    }
}

impl PartialOrd for Share {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

impl PartialEq for Share {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}

impl Eq for Share {}

fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// `3/8 (0.375)`; `1/3 (≈0.333)` when three decimals do not say it exactly; `0`.
impl fmt::Display for Share {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.num == 0 {
            return write!(f, "0");
        }
        let g = gcd(self.num, self.den).max(1);
        let (n, d) = (self.num / g, self.den / g);
        let whole = n / d;
        let rest = n % d;
        // Three decimals, half up: exact up to the saturation of the product.
        let milli = (rest.saturating_mul(2000) / d).div_ceil(2);
        let (whole, milli) = if milli >= 1000 {
            (whole + 1, milli - 1000)
        } else {
            (whole, milli)
        };
        let exact = rest.saturating_mul(1000) % d == 0;
        let approx = if exact { "" } else { "≈" };
        if d == 1 {
            write!(f, "{n}")
        } else {
            write!(f, "{n}/{d} ({approx}{whole}.{milli:03})")
        }
    }
}

/// What a node's share comes from: its dominant resource, borrowed and lent (milli-units).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dominant {
    pub res: Res,
    pub borrowed: i128,
    pub lent: i128,
}

impl QuotaState {
    /// A node's weight in milli (1000: weight 1).
    pub fn weight_milli(&self, n: usize) -> i128 {
        self.tree.nodes[n].weight.milli()
    }

    /// What `p` lends of `r` to its children: its max of `r`, or, naming none, the sum of its
    /// children's mins of `r` (computed once per tree; a resource the tree does not name: 0).
    pub fn lendable(&self, p: usize, r: Res) -> i128 {
        at(&self.lend[p], r)
    }

    /// [`Self::lendable`], computed.
    pub(super) fn lending(&self, p: usize, r: Res) -> i128 {
        self.max_of(p, r).unwrap_or_else(|| {
            self.tree.nodes[p]
                .children
                .iter()
                .map(|&c| self.min_of(c, r))
                .sum()
        })
    }

    /// The weighted dominant share node `n` would have with `request` charged to it (zero for
    /// the root, and for a node that borrows nothing), and the resource it comes from.
    pub fn share(&self, n: usize, request: &Demand) -> (Share, Option<Dominant>) {
        let Some(p) = self.tree.nodes[n].parent else {
            return (Share::ZERO, None);
        };
        let w = self.weight_milli(n);
        let last = request.iter().map(|(r, _)| usize::from(r.0) + 1).max();
        let len = self.used[n].len().max(last.unwrap_or(0));
        let mut best = (Share::ZERO, None);
        for i in 0..len {
            let Ok(i) = u16::try_from(i) else { break };
            let r = Res(i);
            if r == PODS || r == MAX_JOBS {
                continue;
            }
            let borrowed = self.used_of(n, r) + request.get(r) - self.min_of(n, r);
            if borrowed <= 0 {
                continue;
            }
            let lent = self.lendable(p, r);
            if lent <= 0 {
                continue;
            }
            let s = Share::of(borrowed, lent, w);
            if s > best.0 {
                best = (
                    s,
                    Some(Dominant {
                        res: r,
                        borrowed,
                        lent,
                    }),
                );
            }
        }
        best
    }

    /// `nvidia.com/gpu 6 of 16`: what a share comes from.
    pub fn describe_dominant(&self, d: &Dominant, table: &ResourceTable) -> String {
        format!(
            "{} {} above min of {} lent",
            table.name(d.res),
            Quantity::from_milli(d.borrowed),
            Quantity::from_milli(d.lent)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(num: u128, den: u128) -> Share {
        Share { num, den }
    }

    #[test]
    fn shares_compare_as_fractions_even_past_128_bits() {
        assert_eq!(s(1, 2), s(2, 4));
        assert!(s(1, 3) < s(1, 2));
        assert!(s(0, 5) < s(1, u128::MAX));
        let big = u128::MAX / 3;
        assert!(s(big, big - 1) > s(big - 1, big));
        assert_eq!(s(big, big), s(1, 1));
        assert!(s(u128::MAX, u128::MAX - 1) < s(u128::MAX - 1, u128::MAX - 2));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
        /// The 128-bit fast path orders as the 256-bit products do, on parts near and past 64
        /// bits alike.
        #[test]
        fn the_fast_comparison_is_the_wide_one(
            parts in proptest::array::uniform4(proptest::prop_oneof![
                0u128..1000,
                (u64::MAX as u128 - 1000)..=(u64::MAX as u128),
                (u64::MAX as u128)..=(u64::MAX as u128 + 1000),
                proptest::num::u128::ANY,
            ]),
        ) {
            let a = s(parts[0], parts[1].max(1));
            let b = s(parts[2], parts[3].max(1));
            proptest::prop_assert_eq!(a.cmp(&b), a.cmp_wide(&b));
            proptest::prop_assert_eq!(b.cmp(&a), b.cmp_wide(&a));
        }
    }

    #[test]
    fn the_wide_product_is_exact() {
        for (a, b) in [
            (u128::MAX, u128::MAX),
            (u128::MAX, 2),
            (1 << 64, 1 << 64),
            (12345678901234567890123, 98765432109876543210),
        ] {
            let (h, l) = mul_wide(a, b);
            // Checked against schoolbook long multiplication by 32-bit limbs.
            let limbs = |x: u128| {
                [
                    x as u32,
                    (x >> 32) as u32,
                    (x >> 64) as u32,
                    (x >> 96) as u32,
                ]
            };
            let (x, y) = (limbs(a), limbs(b));
            let mut acc = [0u64; 9];
            for i in 0..4 {
                for j in 0..4 {
                    acc[i + j] += (x[i] as u64 * y[j] as u64) & 0xFFFF_FFFF;
                    acc[i + j + 1] += (x[i] as u64 * y[j] as u64) >> 32;
                }
            }
            for k in 0..8 {
                let carry = acc[k] >> 32;
                acc[k] &= 0xFFFF_FFFF;
                acc[k + 1] += carry;
            }
            let word = |k: usize| {
                (acc[k] as u128)
                    | ((acc[k + 1] as u128) << 32)
                    | ((acc[k + 2] as u128) << 64)
                    | ((acc[k + 3] as u128) << 96)
            };
            assert_eq!((h, l), (word(4), word(0)), "{a} × {b}");
        }
    }

    #[test]
    fn shares_print_as_reduced_fractions_with_three_decimals() {
        assert_eq!(s(0, 7).to_string(), "0");
        assert_eq!(s(6, 16).to_string(), "3/8 (0.375)");
        assert_eq!(s(1, 3).to_string(), "1/3 (≈0.333)");
        assert_eq!(s(2, 3).to_string(), "2/3 (≈0.667)");
        assert_eq!(s(4, 2).to_string(), "2");
        assert_eq!(s(1999, 1000).to_string(), "1999/1000 (1.999)");
        assert_eq!(s(19999, 10000).to_string(), "19999/10000 (≈2.000)");
    }
}
