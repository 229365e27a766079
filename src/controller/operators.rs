//! Operators that do not act. A kind's CRD on a member says nothing of whether its operator runs
//! there; what can be seen is whether it acts on muster's copies. A copy that, `SILENCE` after its
//! creation, has neither a status nor a single pod shows the member's operator for that kind not
//! at work: the member is then no candidate for that kind (the core's `Serves::stalled`, with
//! the evidence as the reason) until a copy of the kind there shows a status or a pod, or until
//! `RETRY` has passed (a job may then go there again, and show it again). The job whose copy
//! shows it is taken back by the lifecycle's own stuck-pods rule.

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
        if acted(copy, pods) {
            return self.stalled.remove(&key).is_some();
        }
        if copy.metadata.deletion_timestamp.is_some() || self.stalled.contains_key(&key) {
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
        serde_json::from_value(json!({
            "apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
            "metadata": {"name": "j", "namespace": "ns", "creationTimestamp": created},
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
        o.observe("m", JobKind::MPIJob, &silent, 0, at(50));
        let busy = copy(
            T0,
            json!({"conditions": [{"type": "Created", "status": "True"}]}),
        );
        assert!(o.observe("m", JobKind::MPIJob, &busy, 0, at(60)));
        assert!(o.stalled("m", at(60)).is_empty());
        // An empty status is no evidence; the stall expires after RETRY.
        let empty = copy(T0, json!({}));
        assert!(o.observe("m", JobKind::MPIJob, &empty, 0, at(61)));
        assert_eq!(o.stalled("m", at(61 + 299)).len(), 1);
        assert!(o.stalled("m", at(61 + 300)).is_empty());
    }
}
