//! Status: what a dispatched job's member copy and its pods say, reduced to a muster state
//! (Running only when every expected pod runs; Finished/Failed as the member's own controller
//! says). Pure: reads objects, never writes.

use std::cell::LazyCell;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;

use crate::lifecycle::patch;
use crate::workload::JobKind;

/// A member copy as observed: the lifecycle's view of its progress.
pub use crate::lifecycle::Progress as Observed;

fn condition_true<'a>(status: &'a Value, types: &[&str]) -> Option<&'a Value> {
    status.get("conditions")?.as_array()?.iter().find(|c| {
        c.get("status").and_then(Value::as_str) == Some("True")
            && c.get("type")
                .and_then(Value::as_str)
                .is_some_and(|t| types.contains(&t))
    })
}

fn message(c: &Value) -> String {
    let reason = c.get("reason").and_then(Value::as_str).unwrap_or("");
    let msg = c.get("message").and_then(Value::as_str).unwrap_or("");
    match (reason.is_empty(), msg.is_empty()) {
        (false, false) => format!("{reason}: {msg}"),
        (false, true) => reason.to_string(),
        _ => msg.to_string(),
    }
}

/// The outcome the member's controller reports, if the job is over.
pub fn outcome(kind: JobKind, copy: &Value) -> Option<Observed> {
    let status = copy.get("status")?;
    match kind {
        JobKind::RayJob => {
            let deployment = status.get("jobDeploymentStatus").and_then(Value::as_str);
            let job = status.get("jobStatus").and_then(Value::as_str);
            match (deployment, job) {
                (_, Some("SUCCEEDED")) => Some(Observed::Succeeded),
                (_, Some("FAILED") | Some("STOPPED")) | (Some("Failed"), _) => {
                    Some(Observed::Failed(
                        status
                            .get("message")
                            .and_then(Value::as_str)
                            .unwrap_or("RayJob failed")
                            .to_string(),
                    ))
                }
                _ => None,
            }
        }
        JobKind::RayCluster => None,
        _ => {
            let (ok, bad): (&[&str], &[&str]) = match kind {
                JobKind::Job | JobKind::TrainJob => (&["Complete"], &["Failed"]),
                JobKind::JobSet => (&["Completed"], &["Failed"]),
                _ => (&["Succeeded"], &["Failed"]),
            };
            if condition_true(status, ok).is_some() {
                Some(Observed::Succeeded)
            } else {
                condition_true(status, bad).map(|c| Observed::Failed(message(c)))
            }
        }
    }
}

/// A job's pods, counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Live pods bound to a node.
    pub scheduled: u32,
    /// Pods Running and not being deleted.
    pub running: u32,
    pub succeeded: u32,
    /// Live pods that do not run (Pending, or Running but being deleted).
    pub waiting: u32,
}

/// Counts a job's pods in one pass.
pub fn tally(pods: &[&Arc<Pod>]) -> Tally {
    let mut t = Tally::default();
    for p in pods {
        let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
        match phase {
            Some("Succeeded") => {
                t.succeeded += 1;
                continue;
            }
            Some("Failed") => continue,
            _ => {}
        }
        if p.spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| !n.is_empty())
        {
            t.scheduled += 1;
        }
        if phase == Some("Running") && p.metadata.deletion_timestamp.is_none() {
            t.running += 1;
        } else {
            t.waiting += 1;
        }
    }
    t
}

/// The state of a dispatched job from its member copy and its pods (`expected` pods in all).
pub fn observe(kind: JobKind, copy: &Value, pods: &[&Arc<Pod>], expected: u32) -> Observed {
    if let Some(o) = outcome(kind, copy) {
        return o;
    }
    let Tally {
        scheduled,
        running,
        succeeded,
        waiting,
    } = tally(pods);
    Observed::judge(scheduled, running, succeeded, waiting, expected)
}

/// Whether every pod the job needs has succeeded and none is left, so that no pod of it will
/// run again though the member's controller has not said it is over (it counts its pods on its
/// own time: seconds on a busy member). Only for a batch Job, whose rule is its own: its
/// `completions` succeeded (distinct indexes of an Indexed Job; one pod of a work queue without
/// `completions`), no pod pending or running, and no failure condition on it. A Job with a
/// `successPolicy` or any other kind waits for the member's word.
pub fn pods_done(kind: JobKind, copy: &Value, pods: &[&Arc<Pod>]) -> bool {
    if kind != JobKind::Job {
        return false;
    }
    let spec = copy.get("spec");
    let field = |k: &str| spec.and_then(|s| s.get(k));
    if field("successPolicy").is_some_and(|p| !p.is_null()) {
        return false;
    }
    if copy
        .get("status")
        .is_some_and(|st| condition_true(st, &["Failed", "FailureTarget"]).is_some())
    {
        return false;
    }
    let t = tally(pods);
    if t.running > 0 || t.waiting > 0 {
        return false;
    }
    let succeeded: Vec<&&Arc<Pod>> = pods
        .iter()
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded"))
        .collect();
    let Some(completions) = field("completions").and_then(Value::as_u64) else {
        // A work queue: done once one pod succeeded and the others ended.
        return !succeeded.is_empty() && field("completions").is_none_or(Value::is_null);
    };
    let indexed = field("completionMode").and_then(Value::as_str) == Some("Indexed");
    let done = if indexed {
        succeeded
            .iter()
            .filter_map(|p| {
                p.metadata
                    .annotations
                    .as_ref()?
                    .get("batch.kubernetes.io/job-completion-index")
                    .cloned()
            })
            .collect::<std::collections::BTreeSet<_>>()
            .len()
    } else {
        succeeded.len()
    };
    completions > 0 && done as u64 >= completions
}

/// Whether a job is on its way to an outcome its member has not said yet: its pods are done
/// ([`pods_done`]), or a batch Job's controller says its success criteria are met or its
/// failure is decided (`SuccessCriteriaMet`, `FailureTarget`: the status in between, written
/// before the pods' ends are counted and `Complete` or `Failed` follows).
pub fn ending(kind: JobKind, copy: &Value, pods: &[&Arc<Pod>]) -> bool {
    let between = kind == JobKind::Job
        && copy.get("status").is_some_and(|st| {
            condition_true(st, &["SuccessCriteriaMet", "FailureTarget"]).is_some()
        });
    between || pods_done(kind, copy, pods)
}

/// Status fields no user reads off a hub job: the live pod gauges and bookkeeping of the
/// member's controller (a batch Job's `ready`, `terminating` and `uncountedTerminatedPods`,
/// operators' reconcile and probe times), at any depth.
const UNREAD: [&str; 6] = [
    "ready",
    "terminating",
    "uncountedTerminatedPods",
    "lastReconcileTime",
    "lastProbeTime",
    "lastUpdateTime",
];

/// What a user reads of a job's status: `status` without the [`UNREAD`] fields. The hub job's
/// status is copied from the member only when this changes (the copy is then whole).
pub fn user_view(status: &Value) -> Value {
    match status {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !UNREAD.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), user_view(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(user_view).collect()),
        v => v.clone(),
    }
}

/// How often a running job's member status is copied to the hub job at most.
pub const STATUS_EVERY: Duration = Duration::from_secs(5);
/// How long a job whose pods are all done waits for its member to say it ended before the
/// status in between (a batch Job's `SuccessCriteriaMet`) is copied.
pub const ENDING_WAIT: Duration = Duration::from_secs(30);

/// What this process last copied of a job's member status to its hub job, and when.
#[derive(Clone, Copy, Default)]
pub struct Copied<'a> {
    /// The member status last copied, of this copy or an earlier one (none yet: the job's
    /// first copy, or since a restart).
    pub status: Option<&'a Value>,
    /// Time since that copy landed.
    pub since: Option<Duration>,
    /// Time since every pod of the job was seen done, its member not yet saying it ended.
    pub ending: Option<Duration>,
    /// The job ended (its member says so, or its record does).
    pub ended: bool,
}

/// What the hub job's copy of its member's status needs now.
#[derive(Debug, PartialEq)]
pub enum StatusCopy {
    /// Nothing: what a user reads of it is what was last copied.
    Nothing,
    /// Nothing to send, the hub job already shows it: taken as copied.
    Shown,
    /// Due in this long (a running job's status goes at most every [`STATUS_EVERY`]; once its
    /// pods are done, the member's word on the outcome is awaited at most [`ENDING_WAIT`]).
    Later(Duration),
    /// This merge patch of `status`, from what the hub holds to what the member says.
    Send(Value),
}

/// Whether the member's `status` of a job is copied to its hub job now, whose own status is
/// `hub` (none: it has none), given what was `copied` before. Copied when what a user reads
/// of it changed (a pod's readiness alone is not); an ended job's at once. Before anything is
/// copied (the job's first copy, whose status is `{}`, or a restart), what the hub job already
/// shows counts as copied: a patch of nothing is still a request the hub serves.
pub fn copy_due(
    copied: Copied<'_>,
    hub: impl FnOnce() -> Option<Value>,
    status: &Value,
) -> StatusCopy {
    let shows = |held: &Value| held == status || user_view(held) == user_view(status);
    if copied.status.is_some_and(shows) {
        return StatusCopy::Nothing;
    }
    // Read at most once, and only on the paths below that need it.
    let hub = LazyCell::new(hub);
    if copied.status.is_none() && shows(hub.as_ref().unwrap_or(&Value::Object(Default::default())))
    {
        return StatusCopy::Shown;
    }
    let wait = [(copied.since, STATUS_EVERY), (copied.ending, ENDING_WAIT)]
        .into_iter()
        .filter_map(|(since, every)| Some(every.saturating_sub(since?)))
        .max();
    match wait {
        Some(d) if !copied.ended && !d.is_zero() => StatusCopy::Later(d),
        _ => {
            // From what the hub job may hold: its status as the hub's store last showed it
            // and the copy last landed, which that store may not show yet. A key either may
            // hold that the member's status has no more (a batch Job's `active` once it ends)
            // is cleared; one left behind would be refused (a finished Job with pods active).
            // The keys and the patch that covers them are the core's, as for QueuedJobs.
            let keys = [hub.as_ref(), copied.status]
                .into_iter()
                .flatten()
                .fold(None, |keys: Option<Value>, held| {
                    Some(patch::unsure_keys(keys.as_ref(), held))
                });
            StatusCopy::Send(match keys {
                Some(keys) => patch::covering_patch(&keys, status),
                None => status.clone(),
            })
        }
    }
}

/// Whether a pod holds node resources: bound and not terminated.
pub fn pod_is_active(p: &Pod) -> bool {
    let bound = p
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
    bound && !matches!(phase, Some("Succeeded") | Some("Failed"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(node: Option<&str>, phase: &str) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": "p"},
                "spec": {"nodeName": node, "containers": []},
                "status": {"phase": phase}
            }))
            .expect("pod"),
        )
    }

    fn indexed(i: u32, phase: &str) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": format!("p-{i}"),
                    "annotations": {"batch.kubernetes.io/job-completion-index": i.to_string()}},
                "spec": {"nodeName": "n", "containers": []},
                "status": {"phase": phase}
            }))
            .expect("pod"),
        )
    }

    #[test]
    fn a_batch_job_is_done_once_its_completions_succeeded() {
        let ok = pod(Some("n"), "Succeeded");
        let failed = pod(Some("n"), "Failed");
        let run = pod(Some("n"), "Running");
        let job = |spec: Value| json!({"spec": spec, "status": {}});
        let two = job(json!({"parallelism": 2, "completions": 2}));
        assert!(pods_done(JobKind::Job, &two, &[&ok, &ok]));
        // A failed pod replaced by one that succeeded: done; one still to succeed: not.
        assert!(pods_done(JobKind::Job, &two, &[&ok, &failed, &ok]));
        assert!(!pods_done(JobKind::Job, &two, &[&ok, &failed]));
        assert!(!pods_done(JobKind::Job, &two, &[&ok]));
        // Waves: completions 4 at parallelism 2 after the first wave.
        let waves = job(json!({"parallelism": 2, "completions": 4}));
        assert!(!pods_done(JobKind::Job, &waves, &[&ok, &ok]));
        // Any live pod: not done.
        let one = job(json!({"completions": 1}));
        assert!(!pods_done(JobKind::Job, &one, &[&ok, &run]));
        assert!(pods_done(JobKind::Job, &one, &[&ok]));
        // Indexed: distinct indexes count, not pods.
        let idx = job(json!({"completions": 2, "parallelism": 2, "completionMode": "Indexed"}));
        let (a, a2, b) = (
            indexed(0, "Succeeded"),
            indexed(0, "Succeeded"),
            indexed(1, "Succeeded"),
        );
        assert!(!pods_done(JobKind::Job, &idx, &[&a, &a2]));
        assert!(pods_done(JobKind::Job, &idx, &[&a, &b]));
        // A work queue (no completions): one success and nothing left.
        let queue = job(json!({"parallelism": 3}));
        assert!(pods_done(JobKind::Job, &queue, &[&ok, &failed]));
        assert!(!pods_done(JobKind::Job, &queue, &[&failed]));
        // Rules of its own, a failure on the way, another kind: the member's word is awaited.
        let policy = job(json!({"completions": 2, "completionMode": "Indexed",
            "successPolicy": {"rules": [{"succeededCount": 1}]}}));
        assert!(!pods_done(JobKind::Job, &policy, &[&a, &b]));
        let failing = json!({"spec": {"completions": 1}, "status": {"conditions": [
            {"type": "FailureTarget", "status": "True"}]}});
        assert!(!pods_done(JobKind::Job, &failing, &[&ok]));
        assert!(!pods_done(JobKind::PyTorchJob, &one, &[&ok]));
        assert!(!pods_done(JobKind::JobSet, &one, &[&ok]));
    }

    #[test]
    fn running_only_when_every_pod_runs() {
        let copy = json!({"status": {}});
        let a = pod(Some("n"), "Running");
        let b = pod(Some("n"), "Pending");
        let c = pod(None, "Pending");
        assert_eq!(
            observe(JobKind::PyTorchJob, &copy, &[&a, &b, &c], 3),
            Observed::Starting {
                scheduled: 2,
                running: 1
            }
        );
        let b2 = pod(Some("n"), "Running");
        let c2 = pod(Some("m"), "Running");
        assert_eq!(
            observe(JobKind::PyTorchJob, &copy, &[&a, &b2, &c2], 3),
            Observed::Running {
                scheduled: 3,
                running: 3
            }
        );
    }

    #[test]
    fn succeeded_pods_are_progress_not_loss() {
        let copy = json!({"status": {}});
        let done = pod(Some("n"), "Succeeded");
        let run = pod(Some("n"), "Running");
        let pending = pod(None, "Pending");
        // Workers that finished before their master: still running.
        assert!(matches!(
            observe(JobKind::PyTorchJob, &copy, &[&run, &done, &done, &done], 4),
            Observed::Running { running: 1, .. }
        ));
        // The last wave of a batch Job (parallelism 2, one pod left to run).
        assert!(matches!(
            observe(JobKind::Job, &copy, &[&done, &done, &done, &done, &run], 2),
            Observed::Running { .. }
        ));
        // A live pod that does not run is not hidden by the ones that succeeded.
        assert!(matches!(
            observe(JobKind::Job, &copy, &[&done, &run, &pending], 2),
            Observed::Starting { .. }
        ));
        // Every pod succeeded, the member's controller has not said so yet: nothing was lost.
        assert!(matches!(
            observe(JobKind::Job, &copy, &[&done, &done], 2),
            Observed::Running { running: 0, .. }
        ));
        // A failed pod is not progress.
        let failed = pod(Some("n"), "Failed");
        assert!(matches!(
            observe(JobKind::Job, &copy, &[&done, &failed], 2),
            Observed::Starting { .. }
        ));
    }

    /// The patch a status copy sends from a known base (the core's `covering_patch` over that
    /// base's keys) turns it into exactly the new status: stale fields become null at any depth.
    #[test]
    fn a_copy_patch_nulls_stale_fields() {
        let old = json!({"active": 2, "uncounted": {"succeeded": ["a"]}, "conditions": [1]});
        let new = json!({"succeeded": 2, "uncounted": {}, "conditions": [2]});
        let p = patch::covering_patch(&patch::unsure_keys(None, &old), &new);
        assert_eq!(
            p,
            json!({"active": null, "succeeded": 2, "uncounted": {"succeeded": null}, "conditions": [2]})
        );
        let mut merged = old.clone();
        json_patch::merge(&mut merged, &p);
        assert_eq!(merged, new);
    }

    #[test]
    fn a_user_reads_counts_and_conditions_not_pod_gauges() {
        let started = json!({"startTime": "t0", "active": 1, "ready": 0, "terminating": 0,
            "uncountedTerminatedPods": {}});
        // The pod became ready: nothing a user reads changed.
        let ready = json!({"startTime": "t0", "active": 1, "ready": 1, "terminating": 0,
            "uncountedTerminatedPods": {}});
        assert_eq!(user_view(&started), user_view(&ready));
        // It ended: the counts and the condition did.
        let done = json!({"startTime": "t0", "active": 0, "ready": 0, "succeeded": 1,
            "conditions": [{"type": "Complete", "status": "True"}]});
        assert_ne!(user_view(&ready), user_view(&done));
        // At any depth (an operator's replica statuses), and only those fields.
        let a = json!({"replicaStatuses": {"Worker": {"active": 2}},
            "conditions": [{"type": "Running", "lastUpdateTime": "t1"}], "lastReconcileTime": "t1"});
        let b = json!({"replicaStatuses": {"Worker": {"active": 2}},
            "conditions": [{"type": "Running", "lastUpdateTime": "t2"}], "lastReconcileTime": "t2"});
        assert_eq!(user_view(&a), user_view(&b));
        let c = json!({"replicaStatuses": {"Worker": {"active": 1}},
            "conditions": [{"type": "Running", "lastUpdateTime": "t2"}], "lastReconcileTime": "t2"});
        assert_ne!(user_view(&b), user_view(&c));
    }

    #[test]
    fn outcomes_per_kind() {
        let done = |t: &str| json!({"status": {"conditions": [{"type": t, "status": "True", "reason": "R", "message": "m"}]}});
        assert_eq!(
            outcome(JobKind::Job, &done("Complete")),
            Some(Observed::Succeeded)
        );
        assert_eq!(outcome(JobKind::Job, &done("Succeeded")), None);
        assert_eq!(
            outcome(JobKind::PyTorchJob, &done("Succeeded")),
            Some(Observed::Succeeded)
        );
        assert_eq!(
            outcome(JobKind::JobSet, &done("Completed")),
            Some(Observed::Succeeded)
        );
        assert_eq!(
            outcome(JobKind::MPIJob, &done("Failed")),
            Some(Observed::Failed("R: m".into()))
        );
        let ray = json!({"status": {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"}});
        assert_eq!(outcome(JobKind::RayJob, &ray), Some(Observed::Succeeded));
        assert_eq!(
            outcome(
                JobKind::PyTorchJob,
                &json!({"status": {"conditions": [{"type": "Failed", "status": "False"}]}})
            ),
            None
        );
    }

    #[test]
    fn a_status_the_hub_job_already_shows_is_not_sent() {
        let empty = json!({});
        let running = json!({"active": 1, "ready": 0, "startTime": "t"});
        let ready = json!({"active": 1, "ready": 1, "startTime": "t"});
        let fresh = Copied::default();
        // A new copy's status is `{}`: nothing to send to a hub job with no status or `{}`.
        assert_eq!(copy_due(fresh, || None, &empty), StatusCopy::Shown);
        assert_eq!(
            copy_due(fresh, || Some(empty.clone()), &empty),
            StatusCopy::Shown
        );
        // After a restart, a hub job that shows what a user reads of the member's status.
        assert_eq!(
            copy_due(fresh, || Some(running.clone()), &ready),
            StatusCopy::Shown
        );
        // What it does not show goes at once, as a patch from what it holds.
        assert_eq!(
            copy_due(fresh, || Some(empty.clone()), &running),
            StatusCopy::Send(json!({"active": 1, "ready": 0, "startTime": "t"}))
        );
        // Once copied, a pod's readiness alone is nothing new, whatever the hub job holds.
        let copied = Copied {
            status: Some(&running),
            since: Some(Duration::from_secs(1)),
            ..Copied::default()
        };
        assert_eq!(
            copy_due(copied, || Some(empty.clone()), &ready),
            StatusCopy::Nothing
        );
        // A change within STATUS_EVERY of the last copy waits for the rest of it; an ended
        // job's goes at once.
        let done = json!({"succeeded": 1, "completionTime": "u"});
        assert_eq!(
            copy_due(copied, || Some(running.clone()), &done),
            StatusCopy::Later(STATUS_EVERY - Duration::from_secs(1))
        );
        let ended = Copied {
            ended: true,
            ..copied
        };
        assert!(matches!(
            copy_due(ended, || Some(running.clone()), &done),
            StatusCopy::Send(_)
        ));
        // The copy that landed last, not yet in the hub's store: what it set is cleared too.
        let ended_at_once = Copied {
            status: Some(&running),
            since: Some(Duration::from_millis(200)),
            ended: true,
            ..Copied::default()
        };
        assert_eq!(
            copy_due(ended_at_once, || Some(empty.clone()), &done),
            StatusCopy::Send(json!({"active": null, "ready": null, "startTime": null,
                "succeeded": 1, "completionTime": "u"}))
        );
        // A job taken back and placed again: its new copy's `{}` clears what the last one said.
        let last = Copied {
            status: Some(&done),
            since: Some(STATUS_EVERY),
            ..Copied::default()
        };
        assert_eq!(
            copy_due(last, || Some(done.clone()), &empty),
            StatusCopy::Send(json!({"succeeded": null, "completionTime": null}))
        );
    }

    #[test]
    fn a_job_is_ending_once_its_pods_are_done_or_its_member_says_it_is_in_between() {
        let run = pod(Some("n"), "Running");
        let ok = pod(Some("n"), "Succeeded");
        let job = |conds: Value| {
            json!({"spec": {"completions": 1},
                "status": {"active": 1, "conditions": conds}})
        };
        let met = json!([{"type": "SuccessCriteriaMet", "status": "True"}]);
        // The member's word before the pods' ends reach muster's view.
        assert!(ending(JobKind::Job, &job(met.clone()), &[&run]));
        assert!(ending(
            JobKind::Job,
            &job(json!([{"type": "FailureTarget", "status": "True"}])),
            &[&run]
        ));
        // The pods' ends before the member's word.
        assert!(ending(JobKind::Job, &job(json!([])), &[&ok]));
        // Neither: it runs.
        assert!(!ending(JobKind::Job, &job(json!([])), &[&run]));
        assert!(!ending(
            JobKind::Job,
            &job(json!([{"type": "SuccessCriteriaMet", "status": "False"}])),
            &[&run]
        ));
        // Other kinds wait for their member's word.
        assert!(!ending(JobKind::PyTorchJob, &job(met), &[&ok]));
    }
}
