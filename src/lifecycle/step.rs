//! The lifecycle's transitions: [`step`] (what was observed, and the time), [`admitted`] and
//! [`preempted`] (the scheduler's decisions), [`gone`] (the hub job deleted). Each returns the
//! new record and the intents; nothing here reads a clock or does I/O.

mod unseen;

use unseen::{behind, lost, orphans};

use super::{
    Copy, Created, Intent, Member, Ms, Phase, Plan, Progress, Record, RequeueReason, Seen,
    Settings, Transition,
};

fn event(out: &mut Vec<Intent>, transition: Transition, note: impl Into<String>) {
    out.push(Intent::Event {
        transition,
        note: note.into(),
    });
}

/// The record of a job leaving its member for the queue: what held for that placement is
/// forgotten, and the member becomes an orphan (a copy may exist there until it is confirmed
/// gone, even one whose create response was lost).
fn back_to_queue(r: &Record, now: Ms) -> Record {
    let mut orphans = r.orphans.clone();
    if let Some(c) = &r.cluster
        && r.phase.placed()
    {
        orphans.entry(c.clone()).or_insert(now);
    }
    Record {
        phase: Phase::Queued,
        spec: r.spec.clone(),
        requeues: r.requeues,
        avoid: r.avoid.clone(),
        orphans,
        unconfirmed: r.unconfirmed.clone(),
        reason: r.reason.clone(),
        ..Record::default()
    }
}

/// The scheduler admitted the job on `cluster` with `placement` (for the spec it was submitted
/// with, `r.spec`).
pub fn admitted(r: &Record, cluster: &str, placement: Plan, now: Ms) -> (Record, Vec<Intent>) {
    let nodes: Vec<String> = placement
        .values()
        .flat_map(|m| m.iter().map(|(n, k)| format!("{n}×{k}")))
        .collect();
    let n = Record {
        phase: Phase::Admitted,
        cluster: Some(cluster.to_string()),
        placement,
        spec: r.spec.clone(),
        // The generation that spec was read from (a write of its own otherwise, a pass later).
        generation: r.generation,
        admitted_at: Some(now),
        requeues: r.requeues,
        avoid: r.avoid.clone(),
        orphans: r.orphans.clone(),
        unconfirmed: r.unconfirmed.clone(),
        reason: format!("admitted to {cluster}"),
        ..Record::default()
    };
    let mut out = Vec::new();
    event(
        &mut out,
        Transition::Admitted,
        format!(
            "admitted to {cluster}, pods planned on {}",
            nodes.join(", ")
        ),
    );
    (n, out)
}

/// The scheduler took the job back so that `by` can run (it is queued again already). A job
/// that already ended but whose pods still run keeps its outcome: its remaining pods go, and it
/// leaves the queue ([`Intent::Release`]).
pub fn preempted(r: &Record, by: &str, why: &str, now: Ms) -> (Record, Vec<Intent>) {
    if r.phase.terminal() {
        let mut n = r.clone();
        n.lingering = false;
        if let Some(c) = &r.cluster {
            n.orphans.entry(c.clone()).or_insert(now);
        }
        if let Some(base) = n.reason.strip_suffix(LINGERING) {
            n.reason = base.to_string();
        }
        let note = format!("its remaining pods are deleted so that {by} can run: {why}");
        n.reason = format!("{}; {note}", n.reason);
        let out = vec![
            Intent::Release,
            Intent::Event {
                transition: Transition::Preempted,
                note,
            },
        ];
        return (n, out);
    }
    let mut n = back_to_queue(r, now);
    n.requeues += 1;
    n.reason = format!("preempted so that {by} can run: {why}");
    let out = vec![
        Intent::Requeued(RequeueReason::Preempted),
        Intent::Event {
            transition: Transition::Preempted,
            note: format!("taken back so that {by} can run: {why}"),
        },
    ];
    (n, out)
}

/// The hub job was deleted: every copy goes, and its quota with it.
pub fn gone(r: &Record) -> Vec<Intent> {
    let mut out = vec![Intent::Release];
    let clusters = r.members();
    let mut done = std::collections::BTreeSet::new();
    for c in clusters {
        if done.insert(c.clone()) {
            out.push(Intent::Delete {
                cluster: c.clone(),
                why: "the hub job was deleted".into(),
            });
        }
    }
    out
}

/// Takes a placed job back: quota freed, the member an orphan (and avoided if its pods could
/// not run there), queued again after a backoff (none when the member was lost).
fn take_back(
    r: &Record,
    why: RequeueReason,
    text: String,
    avoid: bool,
    now: Ms,
    s: &Settings,
    out: &mut Vec<Intent>,
) -> Record {
    let cluster = r.cluster.clone().unwrap_or_default();
    let mut n = back_to_queue(r, now);
    n.requeues += 1;
    if avoid {
        n.avoid.insert(cluster.clone());
    }
    out.push(Intent::Release);
    out.push(Intent::Requeued(why));
    let wait = if why == RequeueReason::MemberLost {
        0
    } else {
        s.backoff_for(n.requeues)
    };
    n.reason = if wait == 0 {
        out.push(Intent::Submit);
        format!("taken back from {cluster}: {text}; queued again")
    } else {
        n.backoff_until = Some(now.saturating_add(wait));
        out.push(Intent::WakeAt(now.saturating_add(wait)));
        format!(
            "taken back from {cluster}: {text}; queued again in {}s",
            wait / 1000
        )
    };
    event(out, Transition::Requeued, n.reason.clone());
    n
}

/// One step of a job's life from what was observed at `seen.now`.
pub fn step(r: &Record, seen: &Seen, s: &Settings) -> (Record, Vec<Intent>) {
    let mut out = Vec::new();
    let mut n = r.clone();
    // A later generation that reads the same (an edit of what muster does not count): the
    // record's spec is that generation's too.
    if seen.spec == r.spec && seen.generation.is_some() {
        n.generation = seen.generation;
    }
    let blocked = orphans(r, &mut n, seen, s, &mut out);
    let n = match r.phase {
        Phase::Queued => queued(n, seen, &mut out),
        Phase::Admitted => admitted_step(n, seen, s, blocked, &mut out),
        Phase::Dispatched | Phase::Running => placed(n, seen, s, &mut out),
        Phase::Finished | Phase::Failed => ended(n, seen, s, &mut out),
        Phase::Rejected => {
            if seen.spec != r.spec {
                read(&mut n, seen);
                out.push(Intent::Submit);
            }
            n
        }
    };
    (n, out)
}

fn queued(mut n: Record, seen: &Seen, out: &mut Vec<Intent>) -> Record {
    match n.backoff_until {
        Some(b) if seen.now >= b => {
            n.backoff_until = None;
            read(&mut n, seen);
            out.push(Intent::Submit);
        }
        Some(b) => out.push(Intent::WakeAt(b)),
        None if seen.spec != n.spec => {
            read(&mut n, seen);
            out.push(Intent::Submit);
        }
        None => {}
    }
    n
}

/// The record takes the job's spec as read now.
fn read(n: &mut Record, seen: &Seen) {
    n.spec = seen.spec.clone();
    n.generation = seen.generation;
}

/// The hub job has the generation the record's spec was read from: a digest that differs now
/// does not come from an edit of the job.
fn unedited(n: &Record, seen: &Seen, s: &Settings) -> bool {
    n.generation.is_some()
        && n.generation == seen.generation
        && s.defect != Some(super::Defect::RuntimeRespecs)
}

fn cluster_of(n: &Record) -> String {
    n.cluster.clone().unwrap_or_default()
}

/// Admitted: create the copy once the admission is durable (retried; given up after a while).
fn admitted_step(
    mut n: Record,
    seen: &Seen,
    s: &Settings,
    blocked: Option<String>,
    out: &mut Vec<Intent>,
) -> Record {
    let c = cluster_of(&n);
    let now = seen.now;
    if seen.spec != n.spec {
        return respec(&n, seen, out);
    }
    match &seen.created {
        Some(Created::Ok { uid }) => return dispatched(n, uid, now, out),
        Some(Created::Failed { message }) => {
            n.create_failing_since.get_or_insert(now);
            n.create_failed_at = Some(now);
            n.reason = format!("dispatch to {c} failed: {message}");
            event(out, Transition::DispatchFailed, format!("{c}: {message}"));
        }
        None => {}
    }
    match &seen.here {
        Some(Member::Answering(Some(copy))) if !n.orphans.contains_key(&c) => {
            // Created by an earlier run whose answer was lost: the job's own copy.
            dispatched(n, &copy.uid, now, out)
        }
        // Its old copy there has not gone within the grace of its admission (a finalizer holds
        // it): the name is taken, so the copy cannot be made there; placed elsewhere, that
        // member avoided. (A driver may see the old copy only as the orphan there: it was not
        // made for this admission.)
        Some(Member::Answering(here))
            if (here.is_some()
                || matches!(seen.orphans.get(&c), Some(Member::Answering(Some(_)))))
                && n.orphans.get(&c).is_some_and(|since| {
                    let from = (*since).max(n.admitted_at.unwrap_or(0));
                    now.saturating_sub(from) >= s.drain_grace
                })
                && s.defect != Some(super::Defect::DrainForever) =>
        {
            let text = format!(
                "its old copy there has not gone in {}s since muster deleted it (a finalizer holds it, or its operator does not act)",
                s.drain_grace / 1000
            );
            take_back(&n, RequeueReason::CreateFailed, text, true, now, s, out)
        }
        Some(Member::Answering(None)) if seen.refused.is_some() => {
            // What the member serves changed since the admission (a training runtime edited
            // there): a copy made now would run other pods than were charged. Placed again.
            let why = seen.refused.clone().unwrap_or_default();
            let text = format!("it no longer serves the job: {why}");
            take_back(&n, RequeueReason::CreateFailed, text, true, now, s, out)
        }
        Some(Member::Answering(_)) => {
            if let Some(since) = n.create_failing_since
                && now.saturating_sub(since) >= s.create_give_up
            {
                let text = format!(
                    "its copy could not be created there for {}s ({})",
                    s.create_give_up / 1000,
                    n.reason
                );
                return take_back(&n, RequeueReason::CreateFailed, text, true, now, s, out);
            }
            let next = n
                .create_failed_at
                .map_or(now, |t| t.saturating_add(s.create_retry));
            if let Some(why) = blocked {
                n.reason = format!("admitted to {c}; waiting: {why}");
                out.push(Intent::WakeAt(now.saturating_add(s.create_retry)));
            } else if !seen.hub.as_ref().is_some_and(|h| h.records_admission(&n)) {
                // The admission is written first; the next step creates. The hub must hold
                // this admission, not an earlier one to the same member: a take-back written
                // after that one may still be on its way and land after the create.
                out.push(Intent::WakeAt(now));
            } else if now >= next {
                out.push(Intent::Create { cluster: c });
                out.push(Intent::WakeAt(now.saturating_add(s.create_retry)));
            } else {
                out.push(Intent::WakeAt(next));
            }
            n
        }
        Some(Member::Silent { since } | Member::Unconnected { since }) => {
            let since = (*since).max(n.admitted_at.unwrap_or(0));
            lost(n, since, seen, s, out)
        }
        Some(Member::Behind { since }) => behind(n, *since, seen, s, out),
        Some(Member::Removed) | None => {
            let text = format!("member {c} was removed");
            take_back(&n, RequeueReason::MemberLost, text, false, now, s, out)
        }
    }
}

/// The hub job asks for something else than what was admitted (edited, or edited while the
/// controller was down): what runs must be what was charged, so it is taken back and queued
/// again as it is now.
fn respec(n: &Record, seen: &Seen, out: &mut Vec<Intent>) -> Record {
    let c = cluster_of(n);
    let mut b = back_to_queue(n, seen.now);
    read(&mut b, seen);
    b.requeues += 1;
    b.reason = if n.phase == Phase::Admitted {
        format!("its spec changed before dispatch to {c}; queued again as it is now")
    } else {
        format!("its spec changed while placed on {c}; taken back and queued again as it is now")
    };
    out.push(Intent::Release);
    out.push(Intent::Requeued(RequeueReason::SpecChanged));
    out.push(Intent::Submit);
    event(out, Transition::Resubmitted, b.reason.clone());
    b
}

fn dispatched(mut n: Record, uid: &str, now: Ms, out: &mut Vec<Intent>) -> Record {
    let c = cluster_of(&n);
    n.phase = Phase::Dispatched;
    n.copy_uid = Some(uid.to_string());
    n.dispatched_at = Some(now);
    n.create_failing_since = None;
    n.create_failed_at = None;
    n.orphans.remove(&c);
    n.unconfirmed.remove(&c);
    n.reason = format!("dispatched to {c}; waiting for its pods");
    event(out, Transition::Dispatched, format!("created in {c}"));
    n
}

/// Dispatched or Running: follow the copy and its pods; take the job back when they cannot run.
fn placed(mut n: Record, seen: &Seen, s: &Settings, out: &mut Vec<Intent>) -> Record {
    let c = cluster_of(&n);
    let now = seen.now;
    // A job whose pods are all done runs nothing: an edit now changes nothing that runs. Nor
    // does a digest that moved while the hub job did not (a training runtime edited, say): the
    // copy runs as it was made, charged as admitted; read again once it waits again.
    if seen.spec != n.spec && !n.pods_done && !unedited(&n, seen, s) {
        return respec(&n, seen, out);
    }
    match &seen.here {
        Some(Member::Answering(Some(copy)))
            if n.copy_uid.as_deref().is_none_or(|u| u == copy.uid) =>
        {
            n.copy_uid = Some(copy.uid.clone());
            n.missing_since = None;
            progress(n, copy, seen, s, out)
        }
        Some(Member::Answering(_)) => {
            // Absent (or replaced by an object muster did not create).
            let since = *n.missing_since.get_or_insert(now);
            if now.saturating_sub(since) >= s.copy_missing_grace {
                let text = format!("its copy on {c} was deleted, not by muster");
                take_back(&n, RequeueReason::CopyLost, text, false, now, s, out)
            } else {
                out.push(Intent::WakeAt(since.saturating_add(s.copy_missing_grace)));
                n
            }
        }
        Some(Member::Silent { since } | Member::Unconnected { since }) => {
            lost(n, *since, seen, s, out)
        }
        Some(Member::Behind { since }) => behind(n, *since, seen, s, out),
        Some(Member::Removed) | None => {
            let text = format!("member {c} was removed");
            take_back(&n, RequeueReason::MemberLost, text, false, now, s, out)
        }
    }
}

fn progress(
    mut n: Record,
    copy: &Copy,
    seen: &Seen,
    s: &Settings,
    out: &mut Vec<Intent>,
) -> Record {
    let c = cluster_of(&n);
    let now = seen.now;
    let expected = copy.expected;
    let was = n.phase;
    match &copy.progress {
        Progress::Running { .. } | Progress::Starting { .. } if copy.pods_done || n.pods_done => {
            // Its pods are all done: what it held goes back at once, not when the member's
            // controller gets round to saying so (seconds on a busy member).
            n.phase = Phase::Running;
            n.ran = true;
            n.degraded_since = None;
            n.reason = format!(
                "every pod succeeded on {c}; waiting for {c} to say the job is complete (its quota is free)"
            );
            if !n.pods_done {
                n.pods_done = true;
                out.push(Intent::Release);
            }
            n
        }
        Progress::Running { running, .. } => {
            n.phase = Phase::Running;
            n.ran = true;
            n.degraded_since = None;
            n.reason = format!("running on {c}: {running}/{expected} pods");
            if was != Phase::Running {
                event(out, Transition::Running, n.reason.clone());
            }
            n
        }
        Progress::Starting { scheduled, running } => {
            n.phase = Phase::Dispatched;
            let waiting = copy
                .waiting
                .as_ref()
                .map(|w| format!("; {w}"))
                .unwrap_or_default();
            n.reason = format!(
                "dispatched to {c}: {running}/{expected} pods running, {scheduled} scheduled{waiting}"
            );
            if n.ran {
                let since = *n.degraded_since.get_or_insert(now);
                if was == Phase::Running {
                    event(out, Transition::Degraded, n.reason.clone());
                }
                let deadline = since.saturating_add(s.pods_lost_timeout);
                if now >= deadline {
                    let text = format!(
                        "only {running} of {expected} pods running for over {}s after it ran",
                        s.pods_lost_timeout / 1000
                    );
                    return take_back(&n, RequeueReason::PodsLost, text, false, now, s, out);
                }
                out.push(Intent::WakeAt(deadline));
            } else {
                let from = *n.dispatched_at.get_or_insert(now);
                let deadline = from.saturating_add(s.pods_ready_timeout);
                if now >= deadline {
                    let text = format!(
                        "{running} of {expected} pods running {}s after dispatch{}",
                        s.pods_ready_timeout / 1000,
                        copy.waiting
                            .as_ref()
                            .map(|w| format!(" ({w})"))
                            .unwrap_or_default()
                    );
                    return take_back(&n, RequeueReason::StuckPods, text, true, now, s, out);
                }
                out.push(Intent::WakeAt(deadline));
            }
            n
        }
        Progress::Succeeded | Progress::Failed(_) => {
            let succeeded = copy.progress == Progress::Succeeded;
            n.phase = if succeeded {
                Phase::Finished
            } else {
                Phase::Failed
            };
            n.reason = match &copy.progress {
                Progress::Failed(msg) => format!("failed on {c}: {msg}"),
                _ => format!("succeeded on {c}"),
            };
            n.lingering = copy.live_pods > 0;
            if n.lingering {
                n.reason.push_str(LINGERING);
            } else {
                out.push(Intent::Release);
            }
            out.push(Intent::Ended { succeeded });
            let t = if succeeded {
                Transition::Finished
            } else {
                Transition::Failed
            };
            event(out, t, n.reason.clone());
            n
        }
    }
}

const LINGERING: &str = "; pods still run there, counted in its quota until they end";

/// Finished or failed: quota stays charged while pods still run (a cleanPodPolicy of None, a
/// RayCluster kept after its job).
fn ended(mut n: Record, seen: &Seen, s: &Settings, out: &mut Vec<Intent>) -> Record {
    if !n.lingering {
        return n;
    }
    let live = match &seen.here {
        Some(Member::Answering(Some(copy))) => copy.live_pods,
        Some(Member::Silent { .. } | Member::Unconnected { .. } | Member::Behind { .. }) => {
            return n;
        }
        Some(Member::Answering(None)) => 0,
        // Its member was removed, its pods perhaps still running there: out of muster's
        // fleet and quota, but declared (an unconfirmed old copy, deleted if the member is
        // registered again).
        Some(Member::Removed) | None => {
            if let Some(c) = n.cluster.clone()
                && s.defect != Some(super::Defect::StraysKept)
            {
                n.orphans.entry(c.clone()).or_insert(seen.now);
                n.unconfirmed.insert(c.clone());
                event(
                    out,
                    Transition::OldCopyUnconfirmed,
                    format!(
                        "member {c} was removed while pods of the ended job still ran there: they may still run; muster deletes its copy if {c} is registered again"
                    ),
                );
            }
            0
        }
    };
    if live == 0 {
        n.lingering = false;
        if let Some(base) = n.reason.strip_suffix(LINGERING) {
            n.reason = base.to_string();
        }
        out.push(Intent::Release);
    }
    n
}
