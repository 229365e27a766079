//! Exact Kubernetes quantities: parsing, arithmetic and printing of `resource.Quantity` strings.
//!
//! Owns the one numeric representation muster uses for every resource (cpu, memory, pods,
//! `nvidia.com/gpu`, `rdma/*`, ...): a signed count of milli-units in an `i128`. Never uses floats.
//! Parsing rounds up to the next milli-unit, as Kubernetes' `MilliValue()` does, so `1n` cpu
//! counts as `1m` and nothing is ever counted as zero that asked for something.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::{Add, AddAssign, Sub, SubAssign};

/// A Kubernetes quantity in milli-units (`"1"` is 1000, `"500m"` is 500, `"1Ki"` is 1_024_000).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Quantity(i128);

/// Why a string is not a Kubernetes quantity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error("{0:?} is not a quantity: empty")]
    Empty(String),
    #[error("{0:?} is not a quantity: expected digits")]
    NoDigits(String),
    #[error("{0:?} is not a quantity: unknown suffix {1:?}")]
    Suffix(String, String),
    #[error("{0:?} is not a quantity: too large")]
    Overflow(String),
}

const MILLI: i128 = 1000;

impl Quantity {
    pub const ZERO: Quantity = Quantity(0);

    /// A quantity of `milli` thousandths.
    pub const fn from_milli(milli: i128) -> Self {
        Quantity(milli)
    }

    /// A whole number of units (`from_units(3)` is `"3"`).
    pub const fn from_units(units: i64) -> Self {
        Quantity(units as i128 * MILLI)
    }

    pub const fn milli(self) -> i128 {
        self.0
    }

    pub fn is_zero(self) -> bool {
        self.0 == 0
    }

    pub fn is_negative(self) -> bool {
        self.0 < 0
    }

    /// Whole units, rounded up (Kubernetes' `Value()`).
    pub fn units_ceil(self) -> i128 {
        self.0.div_euclid(MILLI) + i128::from(self.0.rem_euclid(MILLI) != 0)
    }

    /// How many times `per` fits into `self` (0 when `per` is zero or negative: callers treat a
    /// zero request as unlimited before asking).
    pub fn times(self, per: Quantity) -> i128 {
        if per.0 <= 0 || self.0 <= 0 {
            return 0;
        }
        self.0 / per.0
    }

    pub fn checked_mul(self, n: i128) -> Option<Quantity> {
        self.0.checked_mul(n).map(Quantity)
    }

    pub fn saturating_mul(self, n: i128) -> Quantity {
        Quantity(self.0.saturating_mul(n))
    }

    /// Parses a quantity exactly as the Kubernetes grammar defines it:
    /// `[+-]digits[.digits](Ki|Mi|Gi|Ti|Pi|Ei|n|u|m||k|M|G|T|P|E|e<int>|E<int>)`.
    pub fn parse(s: &str) -> Result<Self, QuantityError> {
        let err_s = || s.to_string();
        let t = s.trim();
        if t.is_empty() {
            return Err(QuantityError::Empty(err_s()));
        }
        let bytes = t.as_bytes();
        let mut i = 0;
        let mut negative = false;
        if bytes[0] == b'+' || bytes[0] == b'-' {
            negative = bytes[0] == b'-';
            i = 1;
        }
        let mut mantissa: i128 = 0;
        let mut frac_digits: i32 = 0;
        let mut digits = 0;
        let mut seen_dot = false;
        // Leading zeros and digits beyond i128 precision: keep exactness by refusing overflow.
        while i < bytes.len() {
            let c = bytes[i];
            if c.is_ascii_digit() {
                mantissa = mantissa
                    .checked_mul(10)
                    .and_then(|m| m.checked_add(i128::from(c - b'0')))
                    .ok_or_else(|| QuantityError::Overflow(err_s()))?;
                digits += 1;
                if seen_dot {
                    frac_digits += 1;
                }
            } else if c == b'.' && !seen_dot {
                seen_dot = true;
            } else {
                break;
            }
            i += 1;
        }
        if digits == 0 {
            return Err(QuantityError::NoDigits(err_s()));
        }
        let suffix = &t[i..];
        // (binary multiplier, decimal exponent)
        let (bin, exp): (i128, i32) = match suffix {
            "" => (1, 0),
            "n" => (1, -9),
            "u" => (1, -6),
            "m" => (1, -3),
            "k" => (1, 3),
            "M" => (1, 6),
            "G" => (1, 9),
            "T" => (1, 12),
            "P" => (1, 15),
            "E" => (1, 18),
            "Ki" => (1 << 10, 0),
            "Mi" => (1 << 20, 0),
            "Gi" => (1 << 30, 0),
            "Ti" => (1 << 40, 0),
            "Pi" => (1 << 50, 0),
            "Ei" => (1 << 60, 0),
            other => {
                let rest = other
                    .strip_prefix('e')
                    .or_else(|| other.strip_prefix('E'))
                    .ok_or_else(|| QuantityError::Suffix(err_s(), other.to_string()))?;
                let valid = {
                    let r = rest.strip_prefix(['+', '-']).unwrap_or(rest);
                    !r.is_empty() && r.bytes().all(|b| b.is_ascii_digit())
                };
                if !valid {
                    return Err(QuantityError::Suffix(err_s(), other.to_string()));
                }
                let e: i32 = rest.parse().map_err(|_| QuantityError::Overflow(err_s()))?;
                (1, e)
            }
        };
        // value_milli = mantissa * bin * 10^(exp + 3 - frac_digits), rounded up.
        let scaled = mantissa
            .checked_mul(bin)
            .ok_or_else(|| QuantityError::Overflow(err_s()))?;
        let shift = exp
            .checked_add(3)
            .and_then(|e| e.checked_sub(frac_digits))
            .ok_or_else(|| QuantityError::Overflow(err_s()))?;
        let magnitude = if shift >= 0 {
            if scaled == 0 {
                0
            } else {
                let p = pow10(shift).ok_or_else(|| QuantityError::Overflow(err_s()))?;
                scaled
                    .checked_mul(p)
                    .ok_or_else(|| QuantityError::Overflow(err_s()))?
            }
        } else {
            match pow10(-shift) {
                // Dividing by more than 10^38 leaves any non-zero value below one milli-unit.
                None => i128::from(scaled != 0),
                Some(p) => {
                    let q = scaled / p;
                    // Round away from zero in magnitude; for negatives that is toward -inf, and
                    // we correct it below so the result is always the ceiling.
                    q + i128::from(scaled % p != 0)
                }
            }
        };
        if negative {
            // ceil(-x) = -floor(x); magnitude above is ceil(x).
            let floor = if shift < 0 {
                match pow10(-shift) {
                    None => 0,
                    Some(p) => scaled / p,
                }
            } else {
                magnitude
            };
            Ok(Quantity(-floor))
        } else {
            Ok(Quantity(magnitude))
        }
    }
}

fn pow10(e: i32) -> Option<i128> {
    if e < 0 {
        return None;
    }
    10i128.checked_pow(u32::try_from(e).ok()?)
}

impl std::str::FromStr for Quantity {
    type Err = QuantityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Quantity::parse(s)
    }
}

impl fmt::Display for Quantity {
    /// Canonical, exact form: `500m`, `3`, `64Gi`, `1500m`. Whole multiples of 1024 use the
    /// largest binary suffix that divides them exactly.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.0;
        if v % MILLI != 0 {
            return write!(f, "{v}m");
        }
        let units = v / MILLI;
        if units != 0 {
            for (shift, suffix) in [
                (60, "Ei"),
                (50, "Pi"),
                (40, "Ti"),
                (30, "Gi"),
                (20, "Mi"),
                (10, "Ki"),
            ] {
                let m = 1i128 << shift;
                if units % m == 0 {
                    return write!(f, "{}{}", units / m, suffix);
                }
            }
        }
        write!(f, "{units}")
    }
}

impl Add for Quantity {
    type Output = Quantity;
    fn add(self, o: Quantity) -> Quantity {
        Quantity(self.0.saturating_add(o.0))
    }
}
impl AddAssign for Quantity {
    fn add_assign(&mut self, o: Quantity) {
        self.0 = self.0.saturating_add(o.0);
    }
}
impl Sub for Quantity {
    type Output = Quantity;
    fn sub(self, o: Quantity) -> Quantity {
        Quantity(self.0.saturating_sub(o.0))
    }
}
impl SubAssign for Quantity {
    fn sub_assign(&mut self, o: Quantity) {
        self.0 = self.0.saturating_sub(o.0);
    }
}

impl serde::Serialize for Quantity {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Quantity {
    /// Accepts a quantity string, or a plain JSON/YAML number (as `kubectl` does for `cpu: 2`).
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = serde_json::Value::deserialize(d)?;
        let s = match &v {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Number(n) => n.to_string(),
            other => {
                return Err(serde::de::Error::custom(format!(
                    "expected a quantity, found {other}"
                )));
            }
        };
        Quantity::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// A resource list (`{cpu: "2", nvidia.com/gpu: "1"}`) with exact values, ordered by name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct ResourceList(pub BTreeMap<String, Quantity>);

impl ResourceList {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn get(&self, name: &str) -> Quantity {
        self.0.get(name).copied().unwrap_or_default()
    }

    pub fn set(&mut self, name: impl Into<String>, q: Quantity) {
        self.0.insert(name.into(), q);
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, Quantity)> {
        self.0.iter().map(|(k, v)| (k.as_str(), *v))
    }

    /// Adds every entry of `other` into `self`.
    pub fn add(&mut self, other: &ResourceList) {
        for (k, v) in &other.0 {
            *self.0.entry(k.clone()).or_default() += *v;
        }
    }

    /// Element-wise maximum (used for init containers).
    pub fn max_with(&mut self, other: &ResourceList) {
        for (k, v) in &other.0 {
            let e = self.0.entry(k.clone()).or_default();
            if *v > *e {
                *e = *v;
            }
        }
    }

    /// `self * n`, saturating.
    pub fn scaled(&self, n: i128) -> ResourceList {
        ResourceList(
            self.0
                .iter()
                .map(|(k, v)| (k.clone(), v.saturating_mul(n)))
                .collect(),
        )
    }

    /// Drops zero entries (a zero request asks for nothing).
    pub fn without_zeros(mut self) -> ResourceList {
        self.0.retain(|_, v| !v.is_zero());
        self
    }

    /// Parses a `{name: "quantity"}` map, naming the entry that fails.
    pub fn parse_map<'a>(
        entries: impl IntoIterator<Item = (&'a String, &'a String)>,
    ) -> Result<ResourceList, (String, QuantityError)> {
        let mut out = ResourceList::new();
        for (k, v) in entries {
            let q = Quantity::parse(v).map_err(|e| (k.clone(), e))?;
            out.0.insert(k.clone(), q);
        }
        Ok(out)
    }
}

impl fmt::Display for ResourceList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (k, v) in &self.0 {
            if !first {
                f.write_str(", ")?;
            }
            first = false;
            write!(f, "{k} {v}")?;
        }
        if first {
            f.write_str("nothing")?;
        }
        Ok(())
    }
}

impl FromIterator<(String, Quantity)> for ResourceList {
    fn from_iter<T: IntoIterator<Item = (String, Quantity)>>(iter: T) -> Self {
        ResourceList(iter.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn q(s: &str) -> i128 {
        Quantity::parse(s).expect(s).milli()
    }

    #[test]
    fn suffixes() {
        assert_eq!(q("1"), 1000);
        assert_eq!(q("500m"), 500);
        assert_eq!(q("0.5"), 500);
        assert_eq!(q(".5"), 500);
        assert_eq!(q("5."), 5000);
        assert_eq!(q("1k"), 1_000_000);
        assert_eq!(q("1M"), 1_000_000_000);
        assert_eq!(q("1G"), 1_000_000_000_000);
        assert_eq!(q("1E"), 1_000_000_000_000_000_000_000);
        assert_eq!(q("1Ki"), 1_024_000);
        assert_eq!(q("64Gi"), 64 * (1i128 << 30) * 1000);
        assert_eq!(q("1Ei"), (1i128 << 60) * 1000);
        assert_eq!(q("1e3"), 1_000_000);
        assert_eq!(q("1E3"), 1_000_000);
        assert_eq!(q("1e-3"), 1);
        assert_eq!(q("12e+2"), 1_200_000);
        assert_eq!(q("1.5Gi"), 3 * (1i128 << 29) * 1000);
        assert_eq!(q("+2"), 2000);
        assert_eq!(q("-2"), -2000);
        assert_eq!(q("0"), 0);
    }

    #[test]
    fn rounds_up_to_milli() {
        assert_eq!(q("1n"), 1);
        assert_eq!(q("1u"), 1);
        assert_eq!(q("1001u"), 2);
        assert_eq!(q("0.0001"), 1);
        assert_eq!(q("1e-40"), 1);
        assert_eq!(q("-1n"), 0);
        assert_eq!(q("-1500u"), -1);
    }

    #[test]
    fn rejects_garbage() {
        for bad in [
            "", "two", "1x", "Gi", "1GB", "1.2.3", "1e", "1e+", "--1", "1 Gi", "1e99",
        ] {
            assert!(Quantity::parse(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn prints_canonically() {
        for (s, want) in [
            ("500m", "500m"),
            ("3", "3"),
            ("64Gi", "64Gi"),
            ("1.5", "1500m"),
            ("1024", "1Ki"),
            ("110", "110"),
            ("0", "0"),
        ] {
            assert_eq!(Quantity::parse(s).unwrap().to_string(), want);
        }
    }

    #[test]
    fn deserializes_numbers_and_strings() {
        let l: ResourceList =
            serde_json::from_str(r#"{"cpu": 2, "memory": "1Gi", "x": 0.5}"#).unwrap();
        assert_eq!(l.get("cpu"), Quantity::from_units(2));
        assert_eq!(l.get("x").milli(), 500);
        assert!(serde_json::from_str::<ResourceList>(r#"{"cpu": "two"}"#).is_err());
    }

    proptest! {
        /// Printing then parsing gives back the same value.
        #[test]
        fn print_parse_roundtrip(m in -1_000_000_000_000_000i128..1_000_000_000_000_000i128) {
            let a = Quantity::from_milli(m);
            prop_assert_eq!(Quantity::parse(&a.to_string()).unwrap(), a);
        }

        /// Decimal and binary suffixes mean exactly what they say.
        #[test]
        fn suffix_scaling(n in 0i64..1_000_000, k in 0usize..6) {
            let dec = ["k", "M", "G", "T", "P", "E"][k];
            let bin = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][k];
            let n128 = i128::from(n);
            prop_assert_eq!(q(&format!("{n}{dec}")), n128 * 10i128.pow(3 * (k as u32 + 1)) * 1000);
            prop_assert_eq!(q(&format!("{n}{bin}")), n128 * (1i128 << (10 * (k + 1))) * 1000);
            prop_assert_eq!(q(&format!("{n}e{}", 3 * (k + 1))), q(&format!("{n}{dec}")));
        }

        /// A fractional value is the ceiling of its exact milli value.
        #[test]
        fn fractions_round_up(int in 0i64..1_000_000, frac in 0u32..1_000_000) {
            let s = format!("{int}.{frac:06}");
            let exact_micro = i128::from(int) * 1_000_000 + i128::from(frac);
            let want = exact_micro / 1000 + i128::from(exact_micro % 1000 != 0);
            prop_assert_eq!(q(&s), want);
        }

        /// Addition is exact and order-independent.
        #[test]
        fn addition_exact(a in 0i64..1_000_000_000, b in 0i64..1_000_000_000) {
            let qa = Quantity::parse(&format!("{a}m")).unwrap();
            let qb = Quantity::parse(&format!("{b}Ki")).unwrap();
            prop_assert_eq!((qa + qb).milli(), i128::from(a) + i128::from(b) * 1024 * 1000);
            prop_assert_eq!(qa + qb, qb + qa);
            prop_assert_eq!(qa + qb - qb, qa);
        }
    }
}
