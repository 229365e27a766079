//! What a job asks of the topology inside a member, and what a member says its topology is.
//!
//! Owns the topology annotations and their reading (a job's whole-job ask on its metadata, a
//! component's ask on its pod template's metadata), and the check of a member's levels
//! (`MemberCluster.spec.topology`, a scenario's `topology:`). Pure: the estimator
//! (`estimate/topology.rs`) finds placements that honour an ask; the fleet (`fleet/domains.rs`)
//! groups a member's nodes into domains per level.

use std::collections::{BTreeMap, BTreeSet};

/// All pods in one domain of this level (on the job: every pod of the job; on a pod template:
/// every pod of that component).
pub const REQUIRED: &str = "muster.dev/topology-required";
/// As few domains as possible: one domain of this level if any fits, else one of the next wider
/// level, ..., else anywhere on the member.
pub const PREFERRED: &str = "muster.dev/topology-preferred";
/// Kueue's pod-set annotations, read the same way on a pod template.
pub const KUEUE_REQUIRED: &str = "kueue.x-k8s.io/podset-required-topology";
pub const KUEUE_PREFERRED: &str = "kueue.x-k8s.io/podset-preferred-topology";

/// A topology ask: a node-label level and whether one domain of it is required or preferred.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopologyAsk {
    /// A node label key listed in the member's levels, e.g. `example.com/rack`.
    pub level: String,
    /// Required: all the pods in one domain of `level`, or the job does not fit the member.
    pub required: bool,
    /// Asked on the job: every component together in one domain. Otherwise the ask is one
    /// component's, and each component with an ask gets its own domain.
    pub whole_job: bool,
}

impl TopologyAsk {
    /// `required example.com/rack` (with `for the whole job` when it is the job's).
    pub fn describe(&self) -> String {
        format!(
            "{} {}{}",
            if self.required {
                "required"
            } else {
                "preferred"
            },
            self.level,
            if self.whole_job {
                " for the whole job"
            } else {
                ""
            }
        )
    }
}

/// Reads the topology ask in `annotations` (a job's metadata when `whole_job`, else a pod
/// template's). `path` is the JSON path of the annotations, for errors: `(field, message)`.
/// Kueue's pod-set annotations are read on pod templates only (Kueue reads them there).
pub fn read_ask(
    annotations: &BTreeMap<String, String>,
    path: &str,
    whole_job: bool,
) -> Result<Option<TopologyAsk>, (String, String)> {
    let mut keys = vec![(REQUIRED, true), (PREFERRED, false)];
    if !whole_job {
        keys.push((KUEUE_REQUIRED, true));
        keys.push((KUEUE_PREFERRED, false));
    }
    let mut found: Option<(&str, TopologyAsk)> = None;
    for (key, required) in keys {
        let Some(v) = annotations.get(key) else {
            continue;
        };
        let field = format!("{path}[{key}]");
        check_label_key(v).map_err(|m| (field.clone(), m))?;
        let ask = TopologyAsk {
            level: v.clone(),
            required,
            whole_job,
        };
        if let Some((first, had)) = &found
            && *had != ask
        {
            return Err((
                field,
                format!(
                    "conflicts with {first} ({}); ask for one level only",
                    had.level
                ),
            ));
        }
        found.get_or_insert((key, ask));
    }
    Ok(found.map(|(_, a)| a))
}

/// Checks a member's topology levels (widest first): each a label key, none twice.
pub fn check_levels(levels: &[String]) -> Result<(), String> {
    let mut seen = BTreeSet::new();
    for (i, l) in levels.iter().enumerate() {
        check_label_key(l).map_err(|m| format!("[{i}]: {m}"))?;
        if !seen.insert(l.as_str()) {
            return Err(format!("[{i}]: level {l} is listed twice"));
        }
    }
    Ok(())
}

/// A Kubernetes label key: an optional DNS-subdomain prefix and `/`, then a name of at most 63
/// characters of alphanumerics, `-`, `_`, `.`, starting and ending alphanumeric.
pub fn check_label_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    let bad = |why: &str| Err(format!("{key:?} is not a node label key: {why}"));
    if name.is_empty() || name.len() > 63 {
        return bad("the name part must have 1 to 63 characters");
    }
    let alnum = |c: char| c.is_ascii_alphanumeric();
    if !name.starts_with(alnum)
        || !name.ends_with(alnum)
        || !name
            .chars()
            .all(|c| alnum(c) || matches!(c, '-' | '_' | '.'))
    {
        return bad(
            "the name part takes letters, digits, '-', '_', '.', and starts and ends with a letter or digit",
        );
    }
    if let Some(p) = prefix
        && (p.is_empty()
            || p.len() > 253
            || !p.split('.').all(|s| {
                !s.is_empty()
                    && s.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
                    && s.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
                    && s.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            }))
    {
        return bad("the prefix must be a lower-case DNS subdomain");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ann(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn asks_are_read_with_their_field_on_error() {
        let a = read_ask(&ann(&[(REQUIRED, "example.com/rack")]), "m", true).unwrap();
        assert_eq!(
            a,
            Some(TopologyAsk {
                level: "example.com/rack".into(),
                required: true,
                whole_job: true
            })
        );
        // Kueue's annotation counts on a template, not on the job.
        assert_eq!(
            read_ask(&ann(&[(KUEUE_PREFERRED, "rack")]), "t", true).unwrap(),
            None
        );
        let p = read_ask(&ann(&[(KUEUE_PREFERRED, "rack")]), "t", false)
            .unwrap()
            .unwrap();
        assert!(!p.required && !p.whole_job);
        let (field, msg) =
            read_ask(&ann(&[(REQUIRED, "a"), (PREFERRED, "b")]), "meta", true).unwrap_err();
        assert_eq!(field, format!("meta[{PREFERRED}]"));
        assert!(msg.contains("conflicts"), "{msg}");
        let (field, msg) = read_ask(&ann(&[(REQUIRED, "Rack/x")]), "meta", true).unwrap_err();
        assert_eq!(field, format!("meta[{REQUIRED}]"));
        assert!(msg.contains("prefix"), "{msg}");
        assert!(read_ask(&ann(&[(REQUIRED, "")]), "m", true).is_err());
    }

    #[test]
    fn levels_are_label_keys_listed_once() {
        let l = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(check_levels(&l(&["example.com/block", "kubernetes.io/hostname"])).is_ok());
        assert_eq!(
            check_levels(&l(&["rack", "rack"])).unwrap_err(),
            "[1]: level rack is listed twice"
        );
        assert!(check_levels(&l(&["-rack"])).unwrap_err().starts_with("[0]"));
    }
}
