//! The wire form of a job's record: the QueuedJob status, which is what the hub holds of it.
//! The core owns it because both drivers write it: the controller to the hub's QueuedJobs, the
//! fault simulation to its simulated hub, each as merge patches (`lifecycle::patch`), so what
//! the simulated hub holds after a lost answer is what the API server would. [`to_status`] is
//! the record part of a status (the controller adds its display fields), [`from_status`] the
//! record a status holds.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Ms, Phase, Record};
use crate::quantity::ResourceList;

/// The states of a QueuedJob.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub enum QueuedJobState {
    /// Waiting for quota or capacity (see `reason`).
    #[default]
    Queued,
    /// Capacity reserved on `cluster`; the copy there is being created.
    Admitted,
    /// The copy exists on `cluster`; not every pod runs yet.
    Dispatched,
    /// Every pod of the job runs on `cluster`.
    Running,
    /// The member says the job succeeded.
    Finished,
    /// The member says the job failed.
    Failed,
    /// Can never run as written (malformed, above a max, never fits): see `reason`.
    Rejected,
}

impl QueuedJobState {
    /// States in which the job holds quota and capacity on a member.
    pub fn holds_capacity(self) -> bool {
        matches!(self, Self::Admitted | Self::Dispatched | Self::Running)
    }

    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Finished | Self::Failed)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "Queued",
            Self::Admitted => "Admitted",
            Self::Dispatched => "Dispatched",
            Self::Running => "Running",
            Self::Finished => "Finished",
            Self::Failed => "Failed",
            Self::Rejected => "Rejected",
        }
    }
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct QueuedJobStatus {
    #[serde(default)]
    pub state: QueuedJobState,
    /// The quota tree leaf (queue) the job waits in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// The member the job was admitted to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// Why the job waits, or what happened last (one line).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// For a waiting or rejected job: the quota check at each tree node and the fit on each
    /// member, as `muster explain` prints it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explanation: Option<String>,
    /// The plan muster reserved: pods per node per component (`{worker: {node-1: 2}}`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub placement: BTreeMap<String, BTreeMap<String, u32>>,
    /// When the current admission happened (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admitted_at: Option<String>,
    /// When the copy was created on the member (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dispatched_at: Option<String>,
    /// Pods on the member: running / expected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods: Option<PodCounts>,
    /// Per pod on the member: the planned node muster assigned it and the node it is on
    /// (the record a restarted controller continues from; at most 500 pods listed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pod_placement: Vec<PodPlacement>,
    /// Times the job was taken back from a member and queued again.
    #[serde(default)]
    pub requeues: u32,
    /// Last change of `state` (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition: Option<String>,
    /// The rest of the job's durable lifecycle record: what a restarted controller (or a new
    /// leader) goes on from. Every timer is a deadline here, never only in memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<LifecycleStatus>,
    /// For a waiting job: when it should start, from the last forecast (the live state run
    /// forward with every job's expected run time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimate: Option<StartEstimate>,
}

/// A waiting job's start forecast.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StartEstimate {
    /// When it should be dispatched (RFC 3339); absent when it is not expected to start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<String>,
    /// The member it should land on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// The running or earlier jobs whose end it waits for (`namespace/name`; a few, then
    /// `+N more`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<String>,
    /// Why it is not expected to start while the known jobs run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub never: Option<String>,
    /// The forecast stopped at its time budget (`--estimate-budget-ms`) before it started:
    /// it starts no earlier than this (RFC 3339). A lower bound, set instead of `start`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<String>,
    /// Its own expected run time once started (e.g. `30m`) and where that came from:
    /// `declared`, `deadline`, `history` or `default`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_source: Option<String>,
}

/// The durable part of a job's lifecycle beyond its state (times are RFC 3339).
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LifecycleStatus {
    /// Digest of the hub job's spec this record was made for: what is dispatched is what was
    /// admitted.
    #[serde(default)]
    pub spec: String,
    /// The hub job's generation that `spec` was read from: while it has not moved, a job whose
    /// copy runs keeps `spec`, even when the job reads otherwise now (a training runtime
    /// edited, say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_generation: Option<i64>,
    /// UID of the member copy muster created (only that object is the job's copy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copy_uid: Option<String>,
    /// Creating the copy has failed since (and last at).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub create_failing_since: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub create_failed_at: Option<String>,
    /// Every pod ran at some point of this dispatch.
    #[serde(default)]
    pub ran: bool,
    /// Since when a job that ran has fewer live pods than it needs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub degraded_since: Option<String>,
    /// Since when its copy is absent from its member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missing_since: Option<String>,
    /// Ended, but pods still run: its quota stays charged until they end.
    #[serde(default)]
    pub lingering: bool,
    /// Every pod it needs has succeeded: its quota is free while the member's word on the
    /// outcome is awaited.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pods_done: bool,
    /// Taken back: queued again at this time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_until: Option<String>,
    /// Members avoided while others remain (its pods could not run there lately).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub avoid: Vec<String>,
    /// Members that may still hold a copy of the job, since when: deleted there, and forgotten
    /// once the member confirms it gone. While such a member does not answer, the job may run
    /// twice (condition-like: see `mayRunTwiceOn`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub orphans: BTreeMap<String, String>,
    /// Orphan members removed from the fleet: their copies cannot be confirmed gone until they
    /// are registered again (then they are deleted).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unconfirmed: Vec<String>,
    /// Per component, the per-pod requests the job was admitted with: what is charged again
    /// for a deleted job whose copy may still run, after a restart.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub charge: BTreeMap<String, BTreeMap<String, String>>,
    /// Members that do not answer and may still run an old copy while the job is placed
    /// elsewhere (the partition policy Replace): the job may be running twice.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub may_run_twice_on: Vec<String>,
}

/// One pod of a dispatched job: where the plan puts it and where it is.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodPlacement {
    pub pod: String,
    pub component: String,
    /// The node muster assigned it (one of the plan's slots for its component).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planned_node: Option<String>,
    /// The node it is bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Still behind muster's scheduling gate.
    #[serde(default)]
    pub gated: bool,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodCounts {
    pub expected: u32,
    pub scheduled: u32,
    pub running: u32,
}

fn time(ms: Ms) -> String {
    jiff::Timestamp::from_millisecond(ms.min(i64::MAX as u64) as i64)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

fn ms(t: &str) -> Option<Ms> {
    t.parse::<jiff::Timestamp>()
        .ok()
        .map(|t| t.as_millisecond().max(0) as u64)
}

fn state(p: Phase) -> QueuedJobState {
    match p {
        Phase::Queued => QueuedJobState::Queued,
        Phase::Admitted => QueuedJobState::Admitted,
        Phase::Dispatched => QueuedJobState::Dispatched,
        Phase::Running => QueuedJobState::Running,
        Phase::Finished => QueuedJobState::Finished,
        Phase::Failed => QueuedJobState::Failed,
        Phase::Rejected => QueuedJobState::Rejected,
    }
}

fn phase(s: QueuedJobState) -> Phase {
    match s {
        QueuedJobState::Queued => Phase::Queued,
        QueuedJobState::Admitted => Phase::Admitted,
        QueuedJobState::Dispatched => Phase::Dispatched,
        QueuedJobState::Running => Phase::Running,
        QueuedJobState::Finished => Phase::Finished,
        QueuedJobState::Failed => Phase::Failed,
        QueuedJobState::Rejected => Phase::Rejected,
    }
}

/// The record part of a QueuedJob status (the display fields are left empty).
pub fn to_status(r: &Record, may_run_twice_on: Vec<String>) -> QueuedJobStatus {
    QueuedJobStatus {
        state: state(r.phase),
        cluster: r.cluster.clone(),
        reason: (!r.reason.is_empty()).then(|| r.reason.clone()),
        placement: r.placement.clone(),
        admitted_at: r.admitted_at.map(time),
        dispatched_at: r.dispatched_at.map(time),
        requeues: r.requeues,
        lifecycle: Some(LifecycleStatus {
            spec: r.spec.clone(),
            job_generation: r.generation,
            copy_uid: r.copy_uid.clone(),
            create_failing_since: r.create_failing_since.map(time),
            create_failed_at: r.create_failed_at.map(time),
            ran: r.ran,
            degraded_since: r.degraded_since.map(time),
            missing_since: r.missing_since.map(time),
            lingering: r.lingering,
            pods_done: r.pods_done,
            backoff_until: r.backoff_until.map(time),
            avoid: r.avoid.iter().cloned().collect(),
            orphans: r
                .orphans
                .iter()
                .map(|(c, since)| (c.clone(), time(*since)))
                .collect(),
            unconfirmed: r.unconfirmed.iter().cloned().collect(),
            charge: r
                .charge
                .iter()
                .map(|(c, l)| {
                    let m = l.0.iter().map(|(k, q)| (k.clone(), q.to_string()));
                    (c.clone(), m.collect())
                })
                .collect(),
            may_run_twice_on,
        }),
        ..QueuedJobStatus::default()
    }
}

/// The record a QueuedJob status holds. A status written before records carried a spec digest
/// is taken to be for the spec the hub job has now (`spec`).
pub fn from_status(st: &QueuedJobStatus, spec: &str) -> Record {
    let none = LifecycleStatus::default();
    let l = st.lifecycle.as_ref().unwrap_or(&none);
    let t = |v: &Option<String>| v.as_deref().and_then(ms);
    Record {
        phase: phase(st.state),
        cluster: st.cluster.clone(),
        placement: st.placement.clone(),
        spec: if st.lifecycle.is_some() {
            l.spec.clone()
        } else {
            spec.to_string()
        },
        generation: l.job_generation,
        admitted_at: t(&st.admitted_at),
        dispatched_at: t(&st.dispatched_at),
        copy_uid: l.copy_uid.clone(),
        create_failing_since: t(&l.create_failing_since),
        create_failed_at: t(&l.create_failed_at),
        ran: l.ran,
        degraded_since: t(&l.degraded_since),
        missing_since: t(&l.missing_since),
        lingering: l.lingering,
        pods_done: l.pods_done,
        backoff_until: t(&l.backoff_until),
        requeues: st.requeues,
        avoid: l.avoid.iter().cloned().collect(),
        orphans: l
            .orphans
            .iter()
            .filter_map(|(c, since)| Some((c.clone(), ms(since)?)))
            .collect::<BTreeMap<_, _>>(),
        unconfirmed: l.unconfirmed.iter().cloned().collect(),
        // An unreadable entry drops that component's charge (the record stays usable).
        charge: l
            .charge
            .iter()
            .filter_map(|(c, r)| Some((c.clone(), ResourceList::parse_map(r).ok()?)))
            .collect(),
        reason: st.reason.clone().unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_survives_its_status() {
        let mut r = Record {
            phase: Phase::Running,
            cluster: Some("member-a".into()),
            spec: "abc".into(),
            generation: Some(3),
            admitted_at: Some(1_700_000_000_123),
            dispatched_at: Some(1_700_000_001_000),
            copy_uid: Some("u-1".into()),
            ran: true,
            degraded_since: Some(1_700_000_002_000),
            lingering: false,
            pods_done: true,
            backoff_until: None,
            requeues: 2,
            reason: "running on member-a: 2/2 pods".into(),
            ..Record::default()
        };
        r.placement
            .entry("worker".into())
            .or_default()
            .insert("node-1".into(), 2);
        r.avoid.insert("member-b".into());
        r.orphans.insert("member-c".into(), 1_699_999_999_000);
        r.unconfirmed.insert("member-c".into());
        let gpu = crate::quantity::ResourceList::parse_map(&BTreeMap::from([
            ("cpu".to_string(), "500m".to_string()),
            ("nvidia.com/gpu".to_string(), "2".to_string()),
        ]))
        .expect("requests");
        r.charge.insert("worker".into(), gpu);
        let st = to_status(&r, vec!["member-c".into()]);
        let text = serde_json::to_string(&st).expect("serialises");
        let back: QueuedJobStatus = serde_json::from_str(&text).expect("parses");
        assert_eq!(from_status(&back, "other"), r);
        assert_eq!(
            back.lifecycle.expect("lifecycle").may_run_twice_on,
            vec!["member-c".to_string()]
        );
    }

    #[test]
    fn a_status_from_before_records_keeps_its_job_where_it_runs() {
        let st = QueuedJobStatus {
            state: QueuedJobState::Running,
            cluster: Some("member-a".into()),
            ..QueuedJobStatus::default()
        };
        let r = from_status(&st, "digest-now");
        assert_eq!(r.spec, "digest-now");
        assert!(r.places_on("member-a"));
    }
}
