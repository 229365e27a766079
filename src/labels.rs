//! Label selectors: owns parsing, printing and matching of Kubernetes set-based selectors.
//! Never guesses: a selector it cannot read is an error naming the bad token, never "match all".

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1 as metav1;

/// A conjunction of requirements (`region=eu,tier in (large,medium),!spot`).
/// The empty selector matches every label set.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector {
    /// Sorted by key (stable), as Kubernetes does, so equal selectors compare equal.
    requirements: Vec<Requirement>,
}

/// One requirement of a selector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requirement {
    pub key: String,
    pub op: Operator,
    /// The values of `=`, `!=` (exactly one), `in` and `notin` (one or more); empty otherwise.
    pub values: BTreeSet<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operator {
    /// `a=b` and `a==b`.
    Equals,
    /// `a!=b`.
    NotEquals,
    In,
    NotIn,
    /// `a`.
    Exists,
    /// `!a`.
    DoesNotExist,
}

impl Requirement {
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        match self.op {
            Operator::Equals | Operator::In => value.is_some_and(|v| self.values.contains(v)),
            Operator::NotEquals | Operator::NotIn => value.is_none_or(|v| !self.values.contains(v)),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let joined = || self.values.iter().cloned().collect::<Vec<_>>().join(",");
        match self.op {
            Operator::Equals => write!(f, "{}={}", self.key, joined()),
            Operator::NotEquals => write!(f, "{}!={}", self.key, joined()),
            Operator::In => write!(f, "{} in ({})", self.key, joined()),
            Operator::NotIn => write!(f, "{} notin ({})", self.key, joined()),
            Operator::Exists => write!(f, "{}", self.key),
            Operator::DoesNotExist => write!(f, "!{}", self.key),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Token {
    Ident(String),
    Comma,
    Eq,
    DoubleEq,
    NotEq,
    Bang,
    Open,
    Close,
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Token::Ident(s) => write!(f, "{s:?}"),
            Token::Comma => f.write_str("\",\""),
            Token::Eq => f.write_str("\"=\""),
            Token::DoubleEq => f.write_str("\"==\""),
            Token::NotEq => f.write_str("\"!=\""),
            Token::Bang => f.write_str("\"!\""),
            Token::Open => f.write_str("\"(\""),
            Token::Close => f.write_str("\")\""),
        }
    }
}

fn tokenize(s: &str) -> Vec<Token> {
    let mut out = Vec::new();
    let mut chars = s.chars().peekable();
    while let Some(&c) = chars.peek() {
        match c {
            c if c.is_whitespace() => {
                chars.next();
            }
            ',' => {
                chars.next();
                out.push(Token::Comma);
            }
            '(' => {
                chars.next();
                out.push(Token::Open);
            }
            ')' => {
                chars.next();
                out.push(Token::Close);
            }
            '=' => {
                chars.next();
                if chars.peek() == Some(&'=') {
                    chars.next();
                    out.push(Token::DoubleEq);
                } else {
                    out.push(Token::Eq);
                }
            }
            '!' => {
                chars.next();
                if chars.peek() == Some(&'=') {
                    chars.next();
                    out.push(Token::NotEq);
                } else {
                    out.push(Token::Bang);
                }
            }
            _ => {
                let mut ident = String::new();
                while let Some(&c) = chars.peek() {
                    if c.is_whitespace() || matches!(c, ',' | '(' | ')' | '=' | '!') {
                        break;
                    }
                    ident.push(c);
                    chars.next();
                }
                out.push(Token::Ident(ident));
            }
        }
    }
    out
}

/// `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`, at most 63 characters: the name part of a label
/// key, and any non-empty label value.
pub fn is_label_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// A DNS-1123 subdomain: lower-case alphanumerics, `-` and `.`, at most 253 characters.
fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|part| {
            let b = part.as_bytes();
            !b.is_empty()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
                && b[0] != b'-'
                && b[b.len() - 1] != b'-'
        })
}

fn check_key(key: &str) -> Result<(), String> {
    let ok = match key.split_once('/') {
        Some((prefix, name)) => is_dns_subdomain(prefix) && is_label_name(name),
        None => is_label_name(key),
    };
    if ok {
        Ok(())
    } else {
        Err(format!("{key:?} is not a valid label key"))
    }
}

fn check_value(value: &str) -> Result<(), String> {
    if value.is_empty() || is_label_name(value) {
        Ok(())
    } else {
        Err(format!("{value:?} is not a valid label value"))
    }
}

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }

    fn next(&mut self) -> Option<Token> {
        let t = self.tokens.get(self.pos).cloned();
        self.pos += 1;
        t
    }

    fn key(&mut self) -> Result<String, String> {
        match self.next() {
            Some(Token::Ident(k)) if k == "in" || k == "notin" => {
                Err(format!("expected a label key, found keyword {k:?}"))
            }
            Some(Token::Ident(k)) => {
                check_key(&k)?;
                Ok(k)
            }
            Some(t) => Err(format!("expected a label key, found {t}")),
            None => Err("expected a label key, found the end".to_string()),
        }
    }

    /// A single value after `=`, `==` or `!=`; may be empty (`a=` selects an empty value).
    fn single_value(&mut self) -> Result<String, String> {
        match self.peek() {
            None | Some(Token::Comma) => Ok(String::new()),
            Some(Token::Ident(_)) => match self.next() {
                Some(Token::Ident(v)) => {
                    check_value(&v)?;
                    Ok(v)
                }
                _ => Err("expected a value".to_string()),
            },
            Some(t) => Err(format!("expected a value, found {t}")),
        }
    }

    /// `( v1, v2, ... )`; as in Kubernetes, `()` and empty items stand for the empty value.
    fn value_set(&mut self) -> Result<BTreeSet<String>, String> {
        match self.next() {
            Some(Token::Open) => {}
            Some(t) => return Err(format!("expected \"(\", found {t}")),
            None => return Err("expected \"(\", found the end".to_string()),
        }
        let mut values = BTreeSet::new();
        let mut current = String::new();
        loop {
            match self.next() {
                Some(Token::Ident(v)) if current.is_empty() => {
                    check_value(&v)?;
                    current = v;
                }
                Some(Token::Comma) => {
                    values.insert(std::mem::take(&mut current));
                }
                Some(Token::Close) => {
                    values.insert(current);
                    return Ok(values);
                }
                Some(t) => return Err(format!("expected a value, \",\" or \")\", found {t}")),
                None => return Err("expected \")\", found the end".to_string()),
            }
        }
    }

    fn requirement(&mut self) -> Result<Requirement, String> {
        if self.peek() == Some(&Token::Bang) {
            self.next();
            let key = self.key()?;
            return Ok(Requirement {
                key,
                op: Operator::DoesNotExist,
                values: BTreeSet::new(),
            });
        }
        let key = self.key()?;
        let (op, values) = match self.peek() {
            None | Some(Token::Comma) => (Operator::Exists, BTreeSet::new()),
            Some(Token::Eq) | Some(Token::DoubleEq) => {
                self.next();
                (Operator::Equals, BTreeSet::from([self.single_value()?]))
            }
            Some(Token::NotEq) => {
                self.next();
                (Operator::NotEquals, BTreeSet::from([self.single_value()?]))
            }
            Some(Token::Ident(w)) if w == "in" => {
                self.next();
                (Operator::In, self.value_set()?)
            }
            Some(Token::Ident(w)) if w == "notin" => {
                self.next();
                (Operator::NotIn, self.value_set()?)
            }
            Some(t) => {
                return Err(format!(
                    "expected \"=\", \"==\", \"!=\", \"in\", \"notin\" or \",\" after {key:?}, found {t}"
                ));
            }
        };
        Ok(Requirement { key, op, values })
    }
}

impl LabelSelector {
    /// The selector that matches everything.
    pub fn everything() -> Self {
        Self::default()
    }

    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    fn from_requirements(mut requirements: Vec<Requirement>) -> Self {
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Self { requirements }
    }

    /// Parses the Kubernetes selector string syntax. The empty (or all-blank) string is the
    /// selector that matches everything.
    pub fn parse(s: &str) -> Result<LabelSelector, String> {
        let mut p = Parser {
            tokens: tokenize(s),
            pos: 0,
        };
        let mut requirements = Vec::new();
        if p.peek().is_none() {
            return Ok(Self::everything());
        }
        loop {
            let r = p
                .requirement()
                .map_err(|e| format!("invalid label selector {s:?}: {e}"))?;
            requirements.push(r);
            match p.next() {
                None => break,
                Some(Token::Comma) => {}
                Some(t) => {
                    return Err(format!(
                        "invalid label selector {s:?}: expected \",\" or the end, found {t}"
                    ));
                }
            }
        }
        Ok(Self::from_requirements(requirements))
    }

    /// Converts a `metav1.LabelSelector` (matchLabels + matchExpressions).
    pub fn from_k8s(sel: &metav1::LabelSelector) -> Result<LabelSelector, String> {
        let mut requirements = Vec::new();
        for (k, v) in sel.match_labels.iter().flatten() {
            check_key(k)?;
            check_value(v)?;
            requirements.push(Requirement {
                key: k.clone(),
                op: Operator::Equals,
                values: BTreeSet::from([v.clone()]),
            });
        }
        for (i, e) in sel.match_expressions.iter().flatten().enumerate() {
            let at = format!("matchExpressions[{i}]");
            check_key(&e.key).map_err(|m| format!("{at}.key: {m}"))?;
            let values: BTreeSet<String> = e.values.iter().flatten().cloned().collect();
            for v in &values {
                check_value(v).map_err(|m| format!("{at}.values: {m}"))?;
            }
            let op = match e.operator.as_str() {
                "In" => Operator::In,
                "NotIn" => Operator::NotIn,
                "Exists" => Operator::Exists,
                "DoesNotExist" => Operator::DoesNotExist,
                other => {
                    return Err(format!(
                        "{at}.operator: {other:?} is not one of In, NotIn, Exists, DoesNotExist"
                    ));
                }
            };
            let needs_values = matches!(op, Operator::In | Operator::NotIn);
            if needs_values && values.is_empty() {
                return Err(format!(
                    "{at}.values: {} needs at least one value",
                    e.operator
                ));
            }
            if !needs_values && !values.is_empty() {
                return Err(format!("{at}.values: {} takes no values", e.operator));
            }
            requirements.push(Requirement {
                key: e.key.clone(),
                op,
                values,
            });
        }
        Ok(Self::from_requirements(requirements))
    }

    /// True when every requirement holds (always true for the empty selector).
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }
}

impl fmt::Display for LabelSelector {
    /// The canonical string: requirements sorted by key, `==` printed as `=`, values sorted.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for LabelSelector {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        LabelSelector::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn sel(s: &str) -> LabelSelector {
        LabelSelector::parse(s).unwrap()
    }

    #[test]
    fn equality_forms() {
        let l = labels(&[("region", "eu"), ("tier", "large")]);
        assert!(sel("region=eu").matches(&l));
        assert!(sel("region==eu").matches(&l));
        assert!(!sel("region=us").matches(&l));
        assert!(sel("region!=us").matches(&l));
        assert!(!sel("region!=eu").matches(&l));
        // `!=` matches when the label is absent, as in Kubernetes.
        assert!(sel("zone!=a").matches(&l));
        assert_eq!(sel("region==eu"), sel("region=eu"));
    }

    #[test]
    fn set_forms() {
        let l = labels(&[("region", "eu"), ("tier", "large")]);
        assert!(sel("tier in (large,medium)").matches(&l));
        assert!(!sel("tier in (small)").matches(&l));
        assert!(sel("tier notin (small, medium)").matches(&l));
        assert!(!sel("tier notin (large)").matches(&l));
        assert!(sel("zone notin (a)").matches(&l));
        assert!(!sel("zone in (a)").matches(&l));
        assert!(sel("region").matches(&l));
        assert!(!sel("zone").matches(&l));
        assert!(sel("!zone").matches(&l));
        assert!(!sel("!region").matches(&l));
    }

    #[test]
    fn conjunction_and_whitespace() {
        let l = labels(&[("region", "eu"), ("tier", "large")]);
        assert!(sel("  region = eu ,  tier   in(large) , !spot ").matches(&l));
        assert!(!sel("region=eu,tier=small").matches(&l));
        assert!(sel("").matches(&l));
        assert!(sel("   ").is_empty());
        assert!(LabelSelector::everything().matches(&BTreeMap::new()));
    }

    #[test]
    fn empty_values() {
        assert!(sel("a=").matches(&labels(&[("a", "")])));
        assert!(!sel("a=").matches(&labels(&[("a", "x")])));
        assert!(sel("a in ()").matches(&labels(&[("a", "")])));
        assert!(sel("a in (x,)").matches(&labels(&[("a", "")])));
    }

    #[test]
    fn prefixed_keys() {
        let l = labels(&[("topology.kubernetes.io/region", "eu-west-1")]);
        assert!(sel("topology.kubernetes.io/region in (eu-west-1, eu-west-2)").matches(&l));
    }

    #[test]
    fn canonical_display() {
        for (input, want) in [
            (
                "tier in (medium,large), region==eu",
                "region=eu,tier in (large,medium)",
            ),
            ("!spot,a!=b", "a!=b,!spot"),
            ("x notin ( b , a )", "x notin (a,b)"),
            ("gpu", "gpu"),
            ("", ""),
        ] {
            let s = sel(input);
            assert_eq!(s.to_string(), want, "{input}");
            assert_eq!(sel(&s.to_string()), s, "round trip of {input}");
        }
    }

    #[test]
    fn errors_name_the_bad_token() {
        for (input, needle) in [
            ("a=b,", "the end"),
            ("a in b", "\"b\""),
            ("a in (b", "the end"),
            ("a b", "\"b\""),
            ("a=(b)", "\"(\""),
            ("in=b", "\"in\""),
            ("a,,b", "\",\""),
            ("-bad-", "\"-bad-\""),
            ("a=b c", "\"c\""),
            ("a=~x", "\"~x\""),
            ("!", "the end"),
            ("a in (x y)", "\"y\""),
        ] {
            let err = LabelSelector::parse(input).unwrap_err();
            assert!(err.contains(needle), "{input:?}: {err}");
        }
    }

    #[test]
    fn from_k8s_selector() {
        let k: metav1::LabelSelector = serde_json::from_value(serde_json::json!({
            "matchLabels": {"region": "eu"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["large", "medium"]},
                {"key": "spot", "operator": "DoesNotExist"},
                {"key": "gpu", "operator": "Exists"},
                {"key": "zone", "operator": "NotIn", "values": ["c"]}
            ]
        }))
        .unwrap();
        let s = LabelSelector::from_k8s(&k).unwrap();
        assert_eq!(
            s,
            sel("region=eu,tier in (large,medium),!spot,gpu,zone notin (c)")
        );
        assert!(s.matches(&labels(&[("region", "eu"), ("tier", "large"), ("gpu", "")])));
        assert!(!s.matches(&labels(&[("region", "eu"), ("tier", "large")])));
        assert!(
            LabelSelector::from_k8s(&metav1::LabelSelector::default())
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn from_k8s_errors() {
        for (expr, needle) in [
            (
                serde_json::json!({"key": "a", "operator": "Gt", "values": ["1"]}),
                "operator",
            ),
            (
                serde_json::json!({"key": "a", "operator": "In", "values": []}),
                "at least one",
            ),
            (
                serde_json::json!({"key": "a", "operator": "Exists", "values": ["x"]}),
                "no values",
            ),
            (
                serde_json::json!({"key": "-a", "operator": "Exists"}),
                "key",
            ),
        ] {
            let k: metav1::LabelSelector =
                serde_json::from_value(serde_json::json!({"matchExpressions": [expr]})).unwrap();
            let err = LabelSelector::from_k8s(&k).unwrap_err();
            assert!(err.contains(needle), "{err}");
        }
    }

    proptest::proptest! {
        /// Printing a selector and parsing it back gives the same selector, and it matches
        /// a label set exactly when every requirement does.
        #[test]
        fn print_parse_roundtrip(
            reqs in proptest::collection::vec(
                (0usize..4, 0usize..6, proptest::collection::btree_set("[a-c]{0,2}", 1..3)),
                0..5,
            ),
            labels in proptest::collection::btree_map("k[0-3]", "[a-c]{0,2}", 0..4),
        ) {
            let ops = [
                Operator::Equals,
                Operator::NotEquals,
                Operator::In,
                Operator::NotIn,
                Operator::Exists,
                Operator::DoesNotExist,
            ];
            let requirements: Vec<Requirement> = reqs
                .into_iter()
                .map(|(k, op, values)| {
                    let op = ops[op];
                    let values = match op {
                        Operator::Equals | Operator::NotEquals => {
                            values.into_iter().take(1).collect()
                        }
                        Operator::In | Operator::NotIn => values,
                        _ => BTreeSet::new(),
                    };
                    Requirement { key: format!("k{k}"), op, values }
                })
                .collect();
            let s = LabelSelector::from_requirements(requirements.clone());
            let text = s.to_string();
            let back = LabelSelector::parse(&text).unwrap();
            proptest::prop_assert_eq!(&back, &s, "{}", text);
            proptest::prop_assert_eq!(
                back.matches(&labels),
                requirements.iter().all(|r| r.matches(&labels))
            );
        }
    }
}
