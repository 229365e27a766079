//! Expected run times: how long a job will hold its capacity once dispatched, for start-time
//! forecasts. Owns the rules (declared annotation, the job's own deadline, the history of finished
//! jobs of the same queue and shape, a default), the history itself (bounded, serialisable, so a
//! driver can keep it durable) and the rule for jobs that overran their estimate.
//! Pure: times are plain milliseconds handed in by a driver.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::workload::Workload;

/// The annotation a submitter sets to declare a job's expected run time (`3h`, `90m`, `45s`).
pub const ANNOTATION: &str = "muster.dev/expected-runtime";

/// Finished run times kept per queue and shape (the newest ones).
pub const HISTORY_SAMPLES: usize = 32;
/// At most this many queue × shape keys are kept; the least recently updated go first.
pub const HISTORY_KEYS: usize = 4096;

type Ms = u64;

/// Where an expected run time came from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Source {
    /// `muster.dev/expected-runtime` (capped by the job's deadline).
    Declared,
    /// `activeDeadlineSeconds` / `runPolicy.activeDeadlineSeconds`: the job cannot run longer.
    Deadline,
    /// A quantile of the run times of finished jobs of the same queue and shape.
    History,
    /// The configured default.
    #[default]
    Default,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Declared => "declared",
            Source::Deadline => "deadline",
            Source::History => "history",
            Source::Default => "default",
        }
    }
}

/// How expected run times are chosen when a job declares none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rules {
    /// Run time of a job with no annotation, no deadline and no history.
    pub default: Ms,
    /// Which quantile of the history is used, in percent (50 = median).
    pub quantile: u8,
    /// Finished jobs needed before the history of a queue × shape is used.
    pub min_samples: usize,
}

impl Default for Rules {
    fn default() -> Rules {
        Rules {
            default: 3_600_000,
            quantile: 80,
            min_samples: 3,
        }
    }
}

/// The declared run time, if the annotation is set; an unreadable value is an error naming it.
pub fn declared(w: &Workload) -> Result<Option<Ms>, String> {
    match w.annotations.get(ANNOTATION) {
        None => Ok(None),
        Some(v) => crate::sim::parse_duration(v)
            .map(Some)
            .map_err(|e| format!("metadata.annotations[{ANNOTATION}]: {e}")),
    }
}

/// The job's own deadline: `spec.activeDeadlineSeconds` (batch Job, RayJob) or
/// `spec.runPolicy.activeDeadlineSeconds` (Kubeflow training jobs, MPIJob).
pub fn deadline(manifest: &Value) -> Option<Ms> {
    let spec = manifest.get("spec")?;
    spec.get("activeDeadlineSeconds")
        .or_else(|| spec.get("runPolicy")?.get("activeDeadlineSeconds"))
        .and_then(Value::as_u64)
        .and_then(|s| s.checked_mul(1000))
}

/// What a job needs to be forecast: its queue × shape key and what it declares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Declared {
    pub key: String,
    pub declared: Option<Ms>,
    pub deadline: Option<Ms>,
}

impl Declared {
    /// Reads a job: `queue` is the core's queue name for it. An unreadable annotation counts as
    /// none (the caller reports the error it got from [`declared`]).
    pub fn of(w: &Workload, manifest: &Value, queue: &str) -> Declared {
        Declared {
            key: history_key(queue, w),
            declared: declared(w).ok().flatten(),
            deadline: deadline(manifest),
        }
    }

    /// The expected run time and where it came from.
    pub fn expected(&self, history: &History, rules: &Rules) -> (Ms, Source) {
        let cap = |ms: Ms| self.deadline.map_or(ms, |d| ms.min(d));
        if let Some(d) = self.declared {
            return (cap(d), Source::Declared);
        }
        if let Some(d) = self.deadline {
            return (d, Source::Deadline);
        }
        if let Some(h) = history.quantile(&self.key, rules.quantile, rules.min_samples) {
            return (h, Source::History);
        }
        (rules.default, Source::Default)
    }
}

/// What is left of a job's expected run time at `now`, for a job dispatched at `started`.
///
/// A job past its expected end is assumed to end soon: one tenth of its expected run time from
/// now, at least a second and at most an hour. Never negative.
pub fn remaining(started: Ms, expected: Ms, now: Ms) -> Ms {
    let end = started.saturating_add(expected);
    if end > now {
        end - now
    } else {
        (expected / 10).clamp(1000, 3_600_000)
    }
}

/// A stable key for a queue and a job shape: kind, and per component its name, pod count and
/// requests. The same job submitted again has the same key, across restarts and versions.
pub fn history_key(queue: &str, w: &Workload) -> String {
    let mut text = format!("{}", w.kind);
    for c in &w.components {
        text.push_str(&format!("|{}x{}:{}", c.name, c.pods, c.requests));
    }
    format!("{queue}/{}/{:016x}", w.kind, fnv1a(text.as_bytes()))
}

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Run times of finished jobs, per queue × shape key: the newest [`HISTORY_SAMPLES`] of each,
/// at most [`HISTORY_KEYS`] keys. Serialised as the controller's durable history.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct History {
    /// key → run times in milliseconds, oldest first.
    runs: BTreeMap<String, VecDeque<Ms>>,
    /// key → when it was last recorded (a counter), to drop the stalest key first.
    #[serde(default)]
    touched: BTreeMap<String, u64>,
    #[serde(default)]
    clock: u64,
}

impl History {
    /// Records one finished run.
    pub fn record(&mut self, key: &str, ran: Ms) {
        self.clock += 1;
        let runs = self.runs.entry(key.to_string()).or_default();
        runs.push_back(ran);
        while runs.len() > HISTORY_SAMPLES {
            runs.pop_front();
        }
        self.touched.insert(key.to_string(), self.clock);
        while self.runs.len() > HISTORY_KEYS {
            let Some(stalest) = self
                .touched
                .iter()
                .min_by_key(|(_, t)| **t)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            self.runs.remove(&stalest);
            self.touched.remove(&stalest);
        }
    }

    /// The `q`-th percentile (nearest rank) of a key's runs, if it has at least `min` of them.
    pub fn quantile(&self, key: &str, q: u8, min: usize) -> Option<Ms> {
        let runs = self.runs.get(key)?;
        if runs.is_empty() || runs.len() < min {
            return None;
        }
        let mut v: Vec<Ms> = runs.iter().copied().collect();
        v.sort_unstable();
        let q = usize::from(q.clamp(1, 100));
        let rank = (q * v.len()).div_ceil(100).max(1);
        v.get(rank - 1).copied()
    }

    /// How many keys it holds.
    pub fn len(&self) -> usize {
        self.runs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::interpret;
    use serde_json::json;

    fn job(annotations: Value, spec_extra: Value) -> (Workload, Value) {
        let mut m = json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "j", "namespace": "ns", "annotations": annotations},
            "spec": {"template": {"spec": {"containers": [
                {"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}]}}}
        });
        if let (Some(s), Some(extra)) = (m["spec"].as_object_mut(), spec_extra.as_object()) {
            for (k, v) in extra {
                s.insert(k.clone(), v.clone());
            }
        }
        (interpret(&m).expect("job reads"), m)
    }

    #[test]
    fn declared_then_deadline_then_history_then_default() {
        let rules = Rules::default();
        let mut h = History::default();
        let (w, m) = job(
            json!({ANNOTATION: "90m"}),
            json!({"activeDeadlineSeconds": 3600}),
        );
        let d = Declared::of(&w, &m, "q");
        assert_eq!(d.expected(&h, &rules), (3_600_000, Source::Declared));
        let (w, m) = job(json!({ANNOTATION: "20m"}), json!({}));
        assert_eq!(
            Declared::of(&w, &m, "q").expected(&h, &rules),
            (1_200_000, Source::Declared)
        );
        let (w, m) = job(json!({}), json!({"activeDeadlineSeconds": 600}));
        assert_eq!(
            Declared::of(&w, &m, "q").expected(&h, &rules),
            (600_000, Source::Deadline)
        );
        let (w, m) = job(json!({}), json!({}));
        let d = Declared::of(&w, &m, "q");
        assert_eq!(d.expected(&h, &rules), (3_600_000, Source::Default));
        for ms in [10_000, 20_000] {
            h.record(&d.key, ms);
        }
        assert_eq!(
            d.expected(&h, &rules).1,
            Source::Default,
            "two samples are too few"
        );
        h.record(&d.key, 40_000);
        assert_eq!(d.expected(&h, &rules), (40_000, Source::History));
        // Another queue has its own history.
        assert_eq!(
            Declared::of(&w, &m, "other").expected(&h, &rules).1,
            Source::Default
        );
    }

    #[test]
    fn kubeflow_deadline_and_bad_annotation() {
        let m = json!({"spec": {"runPolicy": {"activeDeadlineSeconds": 7}}});
        assert_eq!(deadline(&m), Some(7000));
        let (w, _) = job(json!({ANNOTATION: "soon"}), json!({}));
        let e = declared(&w).expect_err("not a duration");
        assert!(e.contains(ANNOTATION), "{e}");
    }

    #[test]
    fn quantiles_are_nearest_rank() {
        let mut h = History::default();
        for ms in 1..=10 {
            h.record("k", ms * 1000);
        }
        assert_eq!(h.quantile("k", 50, 1), Some(5000));
        assert_eq!(h.quantile("k", 80, 1), Some(8000));
        assert_eq!(h.quantile("k", 100, 1), Some(10_000));
        assert_eq!(h.quantile("k", 80, 11), None);
        for _ in 0..HISTORY_SAMPLES {
            h.record("k", 1);
        }
        assert_eq!(
            h.quantile("k", 100, 1),
            Some(1),
            "only the newest runs are kept"
        );
    }

    #[test]
    fn history_keeps_at_most_its_keys() {
        let mut h = History::default();
        for i in 0..=HISTORY_KEYS {
            h.record(&format!("k{i}"), 1);
        }
        assert_eq!(h.len(), HISTORY_KEYS);
        assert_eq!(h.quantile("k0", 50, 1), None, "the stalest key went first");
        let text = serde_json::to_string(&h).expect("serialises");
        let back: History = serde_json::from_str(&text).expect("reads back");
        assert_eq!(back, h);
    }

    #[test]
    fn overrun_jobs_end_soon_never_in_the_past() {
        assert_eq!(remaining(1000, 10_000, 5000), 6000);
        assert_eq!(remaining(0, 30_000, 40_000), 3000);
        assert_eq!(remaining(0, 5000, 10_000), 1000);
        assert_eq!(remaining(0, 36_000_000, 99_000_000), 3_600_000);
        assert_eq!(remaining(0, 1_000_000, 2_000_000), 100_000);
    }
}
