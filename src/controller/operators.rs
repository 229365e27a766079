//! Operators that do not act. A kind's CRD on a member says nothing of whether its operator runs
//! there; what can be seen is whether it acts on muster's copies. A copy that, `SILENCE` after its
//! creation, has neither a status nor a single pod shows the member's operator for that kind not
//! at work: the member is then no candidate for that kind (the core's `Serves::stalled`, with
//! the evidence as the reason) until a copy of the kind there shows a status or a pod, or until
//! `RETRY` has passed (a job may then go there again, and show it again). The job whose copy
//! shows it is taken back by the lifecycle's own stuck-pods rule.
//!
//! An operator that is behind is not one that does not act: while a copy seen untouched was
//! acted on within the last `SILENCE` (a member's job controller working through a burst of
//! copies at its API rate limit), no copy's silence counts as evidence. Without this, each copy
//! acted on cleared the stall and the next untouched one set it again, pass after pass.

use std::collections::BTreeMap;

use kube::ResourceExt;
use kube::api::DynamicObject;

use crate::lifecycle::Ms;
use crate::workload::JobKind;

/// How long a copy may stay untouched by its operator (no status, no pod).
pub const SILENCE: Ms = 30_000;
/// How long a member stays refused for a kind without new evidence either way.
pub const RETRY: Ms = 300_000;

#[derive(Debug, Default)]
pub struct Operators {
    /// (member, kind) → (since, the reason).
    stalled: BTreeMap<(String, JobKind), (Ms, String)>,
    /// (member, kind) → the copies seen untouched (no status, no pod), by UID, and when first.
    untouched: BTreeMap<(String, JobKind), BTreeMap<String, Ms>>,
    /// (member, kind) → when a copy seen untouched was last seen acted on.
    progress: BTreeMap<(String, JobKind), Ms>,
}

/// Whether an operator acted on `copy`: it wrote a status, or made a pod.
fn acted(copy: &DynamicObject, pods: usize) -> bool {
    pods > 0
        || copy
            .data
            .get("status")
            .is_some_and(|s| s.as_object().is_some_and(|m| !m.is_empty()) || s.is_string())
}

impl Operators {
    /// One of muster's copies on `member`, with the number of its pods there, at `now`. True
    /// when what is known of the member changed.
    pub fn observe(
        &mut self,
        member: &str,
        kind: JobKind,
        copy: &DynamicObject,
        pods: usize,
        now: Ms,
    ) -> bool {
        let key = (member.to_string(), kind);
        let uid = copy.uid().unwrap_or_else(|| copy.name_any());
        if acted(copy, pods) {
            if self
                .untouched
                .get_mut(&key)
                .and_then(|u| u.remove(&uid))
                .is_some()
            {
                self.progress.insert(key.clone(), now);
            }
            return self.stalled.remove(&key).is_some();
        }
        if copy.metadata.deletion_timestamp.is_some() {
            if let Some(u) = self.untouched.get_mut(&key) {
                u.remove(&uid);
            }
            return false;
        }
        self.untouched
            .entry(key.clone())
            .or_default()
            .entry(uid)
            .or_insert(now);
        let behind = self
            .progress
            .get(&key)
            .is_some_and(|p| now.saturating_sub(*p) < SILENCE);
        if behind || self.stalled.contains_key(&key) {
            return false;
        }
        let Some(created) = copy
            .creation_timestamp()
            .map(|t| t.0.as_millisecond().max(0) as u64)
        else {
            return false;
        };
        if now.saturating_sub(created) < SILENCE {
            return false;
        }
        let reason = format!(
            "{member}'s {kind} operator does not act: {}/{} has had no status and no pod for {}s",
            copy.namespace().unwrap_or_default(),
            copy.name_any(),
            now.saturating_sub(created) / 1000
        );
        tracing::warn!(member = %member, kind = %kind, %reason, "an operator does not act");
        self.stalled.insert(key, (now, reason));
        true
    }

    /// Why `member` is refused for `kind`, if it is.
    pub fn reason(&self, member: &str, kind: JobKind) -> Option<&str> {
        self.stalled
            .get(&(member.to_string(), kind))
            .map(|(_, why)| why.as_str())
    }

    /// The kinds `member` is refused for now, with why; stalls older than `RETRY` are dropped.
    pub fn stalled(&mut self, member: &str, now: Ms) -> BTreeMap<JobKind, String> {
        self.stalled
            .retain(|_, (since, _)| now.saturating_sub(*since) < RETRY);
        // Copies not seen again (deleted): forgotten; one still there is seen again.
        for u in self.untouched.values_mut() {
            u.retain(|_, first| now.saturating_sub(*first) < RETRY);
        }
        self.untouched.retain(|_, u| !u.is_empty());
        self.progress
            .retain(|_, at| now.saturating_sub(*at) < SILENCE);
        self.stalled
            .iter()
            .filter(|((m, _), _)| m == member)
            .map(|((_, k), (_, why))| (*k, why.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn copy(created: &str, status: Value) -> DynamicObject {
        named("j", created, status)
    }

    fn named(name: &str, created: &str, status: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
            "metadata": {"name": name, "namespace": "ns", "creationTimestamp": created,
                         "uid": format!("uid-{name}")},
            "spec": {}, "status": status,
        }))
        .expect("object")
    }

    const T0: &str = "2026-12-01T10:00:00Z";
    fn at(secs: u64) -> Ms {
        T0.parse::<jiff::Timestamp>()
            .expect("time")
            .as_millisecond() as u64
            + secs * 1000
    }

    #[test]
    fn a_copy_left_untouched_stalls_the_kind_until_an_operator_acts() {
        let mut o = Operators::default();
        let silent = copy(T0, Value::Null);
        assert!(
            !o.observe("m", JobKind::MPIJob, &silent, 0, at(29)),
            "not yet"
        );
        assert!(o.stalled("m", at(29)).is_empty());
        assert!(o.observe("m", JobKind::MPIJob, &silent, 0, at(31)));
        let why = o.stalled("m", at(31));
        assert_eq!(
            why.get(&JobKind::MPIJob).map(String::as_str),
            Some("m's MPIJob operator does not act: ns/j has had no status and no pod for 31s")
        );
        assert!(o.stalled("other", at(31)).is_empty(), "per member");
        // A pod, or a status, on a copy of that kind there: acting again.
        assert!(o.observe("m", JobKind::MPIJob, &silent, 1, at(40)));
        assert!(o.stalled("m", at(40)).is_empty());
        // It made progress at 40 s (the copy seen untouched got its pod): untouched again,
        // the copy stalls the kind only once SILENCE has passed since.
        assert!(!o.observe("m", JobKind::MPIJob, &silent, 0, at(50)));
        assert!(o.observe("m", JobKind::MPIJob, &silent, 0, at(70)));
        let busy = copy(
            T0,
            json!({"conditions": [{"type": "Created", "status": "True"}]}),
        );
        assert!(o.observe("m", JobKind::MPIJob, &busy, 0, at(80)));
        assert!(o.stalled("m", at(80)).is_empty());
        // An empty status is no evidence; the stall expires after RETRY.
        let empty = copy(T0, json!({}));
        assert!(o.observe("m", JobKind::MPIJob, &empty, 0, at(111)));
        assert_eq!(o.stalled("m", at(111 + 299)).len(), 1);
        assert!(o.stalled("m", at(111 + 300)).is_empty());
    }

    #[test]
    fn an_operator_behind_is_not_one_that_does_not_act() {
        // A burst: copies made at T0 that the member's job controller reaches one by one.
        let mut o = Operators::default();
        let (a, b, c) = (
            named("a", T0, Value::Null),
            named("b", T0, Value::Null),
            named("c", T0, Value::Null),
        );
        for x in [&a, &b, &c] {
            assert!(!o.observe("m", JobKind::MPIJob, x, 0, at(1)));
        }
        // `a` gets its pod at 25 s: the operator works, behind.
        assert!(!o.observe("m", JobKind::MPIJob, &a, 1, at(25)));
        // `b` and `c`, untouched for over SILENCE, are no evidence while it made progress
        // within SILENCE: no stall, and nothing changes pass after pass.
        for t in [31, 40, 54] {
            assert!(!o.observe("m", JobKind::MPIJob, &b, 0, at(t)), "at {t}s");
            assert!(!o.observe("m", JobKind::MPIJob, &c, 0, at(t)), "at {t}s");
            assert!(o.stalled("m", at(t)).is_empty(), "at {t}s");
        }
        // No progress for SILENCE: now it counts, once, and stays said while nothing acts.
        assert!(o.observe("m", JobKind::MPIJob, &b, 0, at(55)));
        let why = o.stalled("m", at(55));
        assert!(!o.observe("m", JobKind::MPIJob, &c, 0, at(56)));
        assert_eq!(o.stalled("m", at(56)), why, "the reason is not rewritten");
        // `b` acted on: the stall goes, and `c` alone does not bring it back at once.
        assert!(o.observe("m", JobKind::MPIJob, &b, 1, at(60)));
        assert!(!o.observe("m", JobKind::MPIJob, &c, 0, at(61)));
        assert!(o.stalled("m", at(61)).is_empty());
        // A copy acted on that was never seen untouched says nothing of progress.
        let d = named("d", T0, json!({"active": 1}));
        let mut fresh = Operators::default();
        assert!(!fresh.observe("m", JobKind::MPIJob, &d, 1, at(40)));
        assert!(fresh.observe("m", JobKind::MPIJob, &c, 0, at(41)));
    }
}
