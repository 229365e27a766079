//! A watchdog for failure tests: it watches every member's pods of muster's jobs and the hub's
//! QueuedJobs for the whole of a test, every event in order, and finds the first instant that
//! breaks muster's promise:
//!
//! - **twice**: pods of one job Running on two members at once, unless muster itself declared
//!   the partition (the job's QueuedJob lists the other member in `status.lifecycle.orphans`: an
//!   old copy it cannot reach and will delete when the member answers);
//! - **unrecorded delete**: a Running pod of a job that disappears (deleted) from a member while
//!   the record in force says the job is there (not taken back, placed elsewhere, ended, an
//!   orphan there, or the QueuedJob deleted with its hub job). The record in force is the last
//!   one received before that instant, or one received up to `LAG` after it (`GC_LAG` for the
//!   QueuedJob marked deleted by the hub's garbage collector when its hub job goes); never an
//!   earlier one (a Queued record from before the job was placed explains nothing).
//!
//! It fails when a watch does not list within 30 s, when a watch reports an error (events may
//! have been missed while it reconnected), and when a test saw no pod event at all.
//!
//! A job's pod is one labelled with its UID *and* made by a controller (an owner reference with
//! `controller: true`): a label alone is what a tenant can put on a pod of its own.
//!
//! The two sides are separate API servers whose watches may lag one another, so a suspect
//! instant is judged with the hub records received up to `LAG` after it.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::watcher::{self, Event};
use muster::controller::crd::{QueuedJob, QueuedJobState};
use tokio::task::JoinHandle;

use super::fleet;

/// How far the hub's watch may lag a member's.
const LAG: Duration = Duration::from_millis(1500);
/// How far the mark of a hub job's deletion on its QueuedJob may lag the deletion itself:
/// muster deletes the copies as soon as it sees the hub job gone, while the hub's garbage
/// collector marks the QueuedJob (its dependent) on its own time.
const GC_LAG: Duration = Duration::from_secs(5);

/// One version of a job's record, as received.
#[derive(Clone, Debug)]
struct Rec {
    at: Instant,
    /// The QueuedJob was deleted (with its hub job).
    deleted: bool,
    state: QueuedJobState,
    cluster: Option<String>,
    orphans: BTreeSet<String>,
}

impl Rec {
    /// This record says the job is not (or may no longer be) running on `member`. Admitted
    /// says so too: its copy there is yet to be made, so pods running there are an earlier
    /// copy's (a job taken back for an edit and admitted again to the same member), which go
    /// before the new copy is made.
    fn releases(&self, member: &str) -> bool {
        let placed = matches!(
            self.state,
            QueuedJobState::Admitted | QueuedJobState::Dispatched | QueuedJobState::Running
        );
        self.deleted
            || !placed
            || self.cluster.as_deref() != Some(member)
            || self.orphans.contains(member)
            || matches!(
                self.state,
                QueuedJobState::Admitted | QueuedJobState::Finished | QueuedJobState::Failed
            )
    }
}

#[derive(Default)]
struct State {
    /// The namespaces of the test's jobs (anything else is left alone).
    namespaces: BTreeSet<String>,
    /// Per member, per job UID: its Running pods.
    running: BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
    /// Per job UID: every record version received.
    records: BTreeMap<String, Vec<Rec>>,
    /// Suspect instants: (when, job, what, members involved).
    suspects: Vec<(Instant, String, Suspect)>,
    /// Pod observations seen (for the report).
    events: usize,
    /// Every pod seen, as `member: namespace/name`.
    seen: BTreeSet<String>,
    /// Per hub job UID: when its deletion was first seen.
    hub_deleted: BTreeMap<String, Instant>,
    /// Every state of each job's record received, by `namespace/job name`, in order.
    states: BTreeMap<String, Vec<QueuedJobState>>,
    /// Errors the watches reported (each a gap in what the watchdog saw).
    errors: Vec<String>,
}

#[derive(Clone, Debug)]
enum Suspect {
    Twice(BTreeSet<String>),
    Deleted { member: String, pod: String },
}

pub struct Watchdog {
    state: Arc<Mutex<State>>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

fn running(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

impl Watchdog {
    /// Starts watching the jobs of `namespaces` on `members` and the hub; returns once every
    /// watch has listed.
    pub async fn start(hub: &kube::Client, members: &[&str], namespaces: &[&str]) -> Watchdog {
        let state: Arc<Mutex<State>> = Arc::new(Mutex::new(State {
            namespaces: namespaces.iter().map(|n| n.to_string()).collect(),
            ..State::default()
        }));
        let mut tasks = Vec::new();
        let mut ready = Vec::new();
        // Watches outlive any one request: they go on an unbounded client (see `watch_client_for`).
        let watch_hub = fleet::watch_client_for("hub").await;
        for m in members {
            let api: Api<Pod> = Api::all(fleet::watch_client_for(m).await);
            let (tx, rx) = tokio::sync::oneshot::channel::<()>();
            ready.push(rx);
            let (state, member) = (state.clone(), m.to_string());
            tasks.push(tokio::spawn(async move {
                let mut tx = Some(tx);
                let cfg = watcher::Config::default().labels("muster.dev/job-uid");
                let mut stream = watcher::watcher(api, cfg).boxed();
                // Pods listed again after a watch restart: those not listed are gone.
                let mut relisted: Option<BTreeSet<(String, String)>> = None;
                while let Some(ev) = stream.next().await {
                    let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
                    match ev {
                        Ok(Event::Apply(p)) => s.pod(&member, &p, false),
                        Ok(Event::Delete(p)) => s.pod(&member, &p, true),
                        Ok(Event::Init) => relisted = Some(BTreeSet::new()),
                        Ok(Event::InitApply(p)) => {
                            if let (Some(r), Some(uid)) =
                                (relisted.as_mut(), p.labels().get("muster.dev/job-uid"))
                            {
                                let name = format!(
                                    "{}/{}",
                                    p.namespace().unwrap_or_default(),
                                    p.name_any()
                                );
                                r.insert((uid.clone(), name));
                            }
                            s.pod(&member, &p, false);
                        }
                        Ok(Event::InitDone) => {
                            if let Some(r) = relisted.take() {
                                s.gone_unless(&member, &r);
                            }
                            if let Some(t) = tx.take() {
                                let _ = t.send(());
                            }
                        }
                        Err(e) => s.errors.push(format!("{member}'s pods: {e}")),
                    }
                }
            }));
        }
        {
            let api: Api<QueuedJob> = Api::all(watch_hub.clone());
            let (tx, rx) = tokio::sync::oneshot::channel::<()>();
            ready.push(rx);
            let state = state.clone();
            tasks.push(tokio::spawn(async move {
                let mut tx = Some(tx);
                let mut stream = watcher::watcher(api, watcher::Config::default()).boxed();
                while let Some(ev) = stream.next().await {
                    match ev {
                        Ok(Event::Apply(q) | Event::InitApply(q)) => {
                            let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
                            s.record(&q, false);
                        }
                        // Gone with its hub job: nothing of the job should run any more.
                        Ok(Event::Delete(q)) => {
                            let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
                            s.record(&q, true);
                        }
                        Ok(Event::InitDone) => {
                            if let Some(t) = tx.take() {
                                let _ = t.send(());
                            }
                        }
                        Err(e) => {
                            let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
                            s.errors.push(format!("the hub's QueuedJobs: {e}"));
                        }
                        _ => {}
                    }
                }
            }));
        }
        // The hub jobs of every kind the hub serves: when each was deleted (muster deletes the
        // copies of a deleted hub job at once; the QueuedJob goes later, with the garbage
        // collector, which may lag by tens of seconds right after the hub starts).
        let kinds = muster::controller::kinds::served(hub)
            .await
            .expect("watchdog: the hub's job kinds");
        let mut watched = Vec::new();
        for kind in kinds {
            let ar = muster::controller::kinds::api_resource(kind);
            let api: Api<DynamicObject> = Api::all_with(watch_hub.clone(), &ar);
            let (tx, rx) = tokio::sync::oneshot::channel::<()>();
            ready.push(rx);
            watched.push(format!("the hub's {}s", kind.as_str()));
            let (state, what) = (state.clone(), format!("the hub's {}s", kind.as_str()));
            tasks.push(tokio::spawn(async move {
                let mut tx = Some(tx);
                let mut stream = watcher::watcher(api, watcher::Config::default()).boxed();
                while let Some(ev) = stream.next().await {
                    let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
                    match ev {
                        Ok(Event::Apply(j) | Event::InitApply(j))
                            if j.metadata.deletion_timestamp.is_some() =>
                        {
                            s.hub_job_deleted(&j)
                        }
                        Ok(Event::Delete(j)) => s.hub_job_deleted(&j),
                        Ok(Event::InitDone) => {
                            if let Some(t) = tx.take() {
                                let _ = t.send(());
                            }
                        }
                        Err(e) => s.errors.push(format!("{what}: {e}")),
                        _ => {}
                    }
                }
            }));
        }
        for (i, r) in ready.into_iter().enumerate() {
            let what = members
                .get(i)
                .map(|m| m.to_string())
                .or_else(|| (i == members.len()).then(|| "the hub's QueuedJobs".to_string()))
                .or_else(|| watched.get(i - members.len() - 1).cloned())
                .unwrap_or_default();
            match tokio::time::timeout(Duration::from_secs(30), r).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => panic!("watchdog: the watch of {what} ended before it listed"),
                Err(_) => panic!("watchdog: the watch of {what} did not list within 30 s"),
            }
        }
        Watchdog { state, tasks }
    }

    /// Every broken instant so far (judged once the hub has had `LAG` to catch up).
    pub async fn violations(&self) -> Vec<String> {
        tokio::time::sleep(LAG).await;
        let recent = {
            let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
            if s.judge().is_empty() {
                return Vec::new();
            }
            s.suspects.iter().map(|(at, _, _)| *at).max()
        };
        // A delete the garbage collector's mark may still explain: judged once it had time.
        if let Some(at) = recent {
            let wait = (at + GC_LAG).saturating_duration_since(Instant::now());
            tokio::time::sleep(wait).await;
        }
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.judge()
    }

    /// Every pod of muster's jobs seen on a member so far, as `member: namespace/name`.
    pub fn pods_seen(&self) -> Vec<String> {
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.seen.iter().cloned().collect()
    }

    /// Every state of the job `namespace/name`'s record received so far, in order.
    pub fn states_of(&self, job: &str) -> Vec<QueuedJobState> {
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.states.get(job).cloned().unwrap_or_default()
    }

    /// Panics with every broken instant, if any.
    pub async fn assert_clean(&self, what: &str) {
        let v = self.violations().await;
        let events = self.state.lock().map(|s| s.events).unwrap_or(0);
        assert!(
            events > 0,
            "{what}: the watchdog saw no pod event at all: it watched nothing"
        );
        assert!(
            v.is_empty(),
            "{what}: the watchdog saw {} broken instant(s) in {events} pod events:\n{}",
            v.len(),
            v.join("\n")
        );
        eprintln!("{what}: watchdog clean over {events} pod events");
    }
}

impl State {
    fn hub_job_deleted(&mut self, j: &DynamicObject) {
        if !self.namespaces.contains(&j.namespace().unwrap_or_default()) {
            return;
        }
        if let Some(uid) = j.uid() {
            self.hub_deleted.entry(uid).or_insert_with(Instant::now);
        }
    }

    fn record(&mut self, q: &QueuedJob, deleted: bool) {
        if !self.namespaces.contains(&q.namespace().unwrap_or_default()) {
            return;
        }
        let Some(st) = &q.status else { return };
        let rec = Rec {
            at: Instant::now(),
            // Terminating: the hub's garbage collector marks it once its hub job is deleted.
            deleted: deleted || q.metadata.deletion_timestamp.is_some(),
            state: st.state,
            cluster: st.cluster.clone(),
            orphans: st
                .lifecycle
                .as_ref()
                .map(|l| l.orphans.keys().cloned().collect())
                .unwrap_or_default(),
        };
        self.states
            .entry(format!(
                "{}/{}",
                q.namespace().unwrap_or_default(),
                q.spec.job_ref.name
            ))
            .or_default()
            .push(st.state);
        self.records
            .entry(q.spec.job_ref.uid.clone())
            .or_default()
            .push(rec);
    }

    /// After a relist of `member`: its running pods not listed are gone (deleted meanwhile).
    fn gone_unless(&mut self, member: &str, listed: &BTreeSet<(String, String)>) {
        let now = Instant::now();
        let Some(jobs) = self.running.get_mut(member) else {
            return;
        };
        let mut gone = Vec::new();
        for (uid, pods) in jobs.iter_mut() {
            pods.retain(|pod| {
                let keep = listed.contains(&(uid.clone(), pod.clone()));
                if !keep {
                    gone.push((uid.clone(), pod.clone()));
                }
                keep
            });
        }
        for (uid, pod) in gone {
            let member = member.to_string();
            self.suspects
                .push((now, uid, Suspect::Deleted { member, pod }));
        }
    }

    fn pod(&mut self, member: &str, p: &Pod, deleted: bool) {
        if !self.namespaces.contains(&p.namespace().unwrap_or_default()) {
            return;
        }
        self.events += 1;
        self.seen.insert(format!(
            "{member}: {}/{}",
            p.namespace().unwrap_or_default(),
            p.name_any()
        ));
        let Some(uid) = p.labels().get("muster.dev/job-uid").cloned() else {
            return;
        };
        // A pod no controller made is no job's pod, whatever its labels say (a tenant can
        // label its own pod with a job's UID).
        let controlled = p
            .metadata
            .owner_references
            .as_ref()
            .is_some_and(|o| o.iter().any(|r| r.controller == Some(true)));
        if !controlled {
            return;
        }
        let name = format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any());
        let now = Instant::now();
        let on = self
            .running
            .entry(member.to_string())
            .or_default()
            .entry(uid.clone())
            .or_default();
        let was = on.contains(&name);
        let is = !deleted && running(p);
        if is {
            on.insert(name.clone());
        } else {
            on.remove(&name);
        }
        let gone = deleted || p.metadata.deletion_timestamp.is_some();
        if was && gone {
            self.suspects.push((
                now,
                uid.clone(),
                Suspect::Deleted {
                    member: member.to_string(),
                    pod: name,
                },
            ));
        }
        if is && !was {
            let members: BTreeSet<String> = self
                .running
                .iter()
                .filter(|(_, jobs)| jobs.get(&uid).is_some_and(|p| !p.is_empty()))
                .map(|(m, _)| m.clone())
                .collect();
            if members.len() > 1 {
                self.suspects.push((now, uid, Suspect::Twice(members)));
            }
        }
    }

    fn judge(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .errors
            .iter()
            .map(|e| format!("the watch of {e}: what came meanwhile may be unseen"))
            .collect();
        for (at, uid, s) in &self.suspects {
            let known = in_force(self.records.get(uid).map(Vec::as_slice).unwrap_or(&[]), *at);
            match s {
                Suspect::Twice(members) => {
                    // Declared: every member but one is an orphan in some record up to then.
                    let undeclared: Vec<&String> = members
                        .iter()
                        .filter(|m| !known.iter().any(|r| r.orphans.contains(*m)))
                        .collect();
                    if undeclared.len() > 1 {
                        out.push(format!(
                            "job {uid}: pods running on {members:?} at once, no partition declared for {undeclared:?}"
                        ));
                    }
                }
                Suspect::Deleted { member, pod } => {
                    // The hub job deleted before (or, as the hub's watch may lag, just after).
                    let hub_gone = self.hub_deleted.get(uid).is_some_and(|t| *t <= *at + LAG);
                    if !hub_gone && !known.iter().any(|r| r.releases(member)) {
                        out.push(format!(
                            "job {uid}: running pod {pod} deleted on {member} while no record said the job was not there (records: {:?})",
                            known.iter().map(|r| (r.state, r.cluster.clone())).collect::<Vec<_>>()
                        ));
                    }
                }
            }
        }
        out
    }
}

/// The records that may explain an instant `at`: the one in force then (the last received at
/// or before it) and those received up to `LAG` after it (the hub's watch may lag a
/// member's), or `GC_LAG` for the QueuedJob marked deleted with its hub job. Not the earlier
/// ones: a Queued record before the job was placed says nothing of a pod deleted while it runs.
fn in_force(records: &[Rec], at: Instant) -> Vec<&Rec> {
    let last_before = records.iter().rposition(|r| r.at <= at);
    records
        .iter()
        .enumerate()
        .filter(|(i, r)| {
            let lag = if r.deleted { GC_LAG } else { LAG };
            Some(*i) == last_before || (r.at > at && r.at <= at + lag)
        })
        .map(|(_, r)| r)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(at: Instant, state: QueuedJobState, cluster: Option<&str>) -> Rec {
        Rec {
            at,
            deleted: false,
            state,
            cluster: cluster.map(str::to_string),
            orphans: BTreeSet::new(),
        }
    }

    /// Queued, then admitted and running on member-a; a running pod deleted there long after
    /// with no new record is unexplained, whatever the Queued record before said. (Judged
    /// against every record ever received, the early Queued one excused it.)
    #[test]
    fn a_delete_is_judged_by_the_record_in_force() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut s = State::default();
        s.records.insert(
            "u".into(),
            vec![
                rec(at(0), QueuedJobState::Queued, None),
                rec(at(10), QueuedJobState::Admitted, Some("member-a")),
                rec(at(12), QueuedJobState::Running, Some("member-a")),
            ],
        );
        let deleted = Suspect::Deleted {
            member: "member-a".into(),
            pod: "ns/p".into(),
        };
        s.suspects.push((at(60), "u".into(), deleted.clone()));
        assert_eq!(s.judge().len(), 1, "{:?}", s.judge());
        // A record taking it back, received within LAG of the delete, explains it.
        if let Some(v) = s.records.get_mut("u") {
            v.push(rec(at(60) + LAG / 2, QueuedJobState::Queued, None));
        }
        assert!(s.judge().is_empty(), "{:?}", s.judge());
        // So does one in force before it (taken back at 50 s).
        let mut s2 = State::default();
        s2.records.insert(
            "u".into(),
            vec![
                rec(at(10), QueuedJobState::Running, Some("member-a")),
                rec(at(50), QueuedJobState::Queued, None),
            ],
        );
        s2.suspects.push((at(60), "u".into(), deleted.clone()));
        assert!(s2.judge().is_empty(), "{:?}", s2.judge());
        // So does an admission to the same member (an edit taken back and admitted again: the
        // earlier copy there goes before the new one is made).
        let mut s3 = State::default();
        s3.records.insert(
            "u".into(),
            vec![
                rec(at(10), QueuedJobState::Running, Some("member-a")),
                rec(at(59), QueuedJobState::Admitted, Some("member-a")),
            ],
        );
        s3.suspects.push((at(60), "u".into(), deleted.clone()));
        assert!(s3.judge().is_empty(), "{:?}", s3.judge());
    }

    /// The hub job seen deleted before the pod went (or within `LAG` after) explains the
    /// delete whatever the records say; seen deleted later, it does not.
    #[test]
    fn a_delete_after_the_hub_job_was_deleted_is_explained() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let judged = |hub_deleted: Instant| {
            let mut s = State::default();
            s.records.insert(
                "u".into(),
                vec![rec(at(10), QueuedJobState::Running, Some("member-a"))],
            );
            s.hub_deleted.insert("u".into(), hub_deleted);
            let deleted = Suspect::Deleted {
                member: "member-a".into(),
                pod: "ns/p".into(),
            };
            s.suspects.push((at(60), "u".into(), deleted));
            s.judge().len()
        };
        assert_eq!(judged(at(59)), 0);
        assert_eq!(judged(at(60) + LAG / 2), 0);
        assert_eq!(judged(at(60) + LAG * 2), 1);
    }

    /// The hub job deleted: muster deletes its copy at once, and the garbage collector marks
    /// its QueuedJob a few seconds later. That mark explains the delete within `GC_LAG`, not
    /// later, and a record that is not a deletion still gets only `LAG`.
    #[test]
    fn a_delete_is_explained_by_the_garbage_collectors_mark_within_its_lag() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let deleted = Suspect::Deleted {
            member: "member-a".into(),
            pod: "ns/p".into(),
        };
        let judged = |mark_after: Duration, deletion: bool| {
            let mut s = State::default();
            let mut mark = rec(
                at(60) + mark_after,
                QueuedJobState::Running,
                Some("member-a"),
            );
            mark.deleted = deletion;
            if !deletion {
                mark.state = QueuedJobState::Queued;
                mark.cluster = None;
            }
            s.records.insert(
                "u".into(),
                vec![rec(at(10), QueuedJobState::Running, Some("member-a")), mark],
            );
            s.suspects.push((at(60), "u".into(), deleted.clone()));
            s.judge().len()
        };
        assert_eq!(judged(Duration::from_secs(3), true), 0);
        assert_eq!(judged(GC_LAG + Duration::from_secs(1), true), 1);
        assert_eq!(judged(Duration::from_secs(3), false), 1);
        assert_eq!(judged(LAG / 2, false), 0);
    }

    #[test]
    fn a_watch_error_is_a_failure() {
        let mut s = State::default();
        assert!(s.judge().is_empty());
        s.errors
            .push("member-a's pods: connection reset by peer".into());
        let v = s.judge();
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].contains("member-a's pods"), "{v:?}");
    }
}
