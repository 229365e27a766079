//! What a job makes of the members that do not show it plainly: the members it left, whose
//! old copies go and hold back its create until confirmed gone ([`orphans`]), a member that does
//! not answer ([`lost`]), and one whose view has not reached muster's create of its copy
//! ([`behind`]).

use super::super::{Member, Ms, Partition, Record, RequeueReason, Seen, Settings, Transition};
use super::{Intent, cluster_of, event, take_back};

/// Deletes the copies left on members the job is no longer on (once the record saying so is
/// durable) and forgets those confirmed gone. Returns why the job's copy may not be created yet:
/// a copy that may still run elsewhere.
pub(super) fn orphans(
    r: &Record,
    n: &mut Record,
    seen: &Seen,
    s: &Settings,
    out: &mut Vec<Intent>,
) -> Option<String> {
    let mut blocked = None;
    for (c, since) in &r.orphans {
        match seen.orphans.get(c) {
            Some(Member::Answering(Some(copy))) => {
                if n.phase.placed()
                    && n.cluster.as_deref() == Some(c)
                    && n.copy_uid.as_deref() == Some(&copy.uid)
                {
                    // Placed there again and created: that copy is the job's own.
                    n.orphans.remove(c);
                    n.unconfirmed.remove(c);
                    continue;
                }
                if seen.hub.as_ref().is_some_and(|h| h.removes_from(c)) {
                    out.push(Intent::Delete {
                        cluster: c.clone(),
                        why: format!("the job left {c}: {}", r.reason),
                    });
                }
                let waited = seen.now.saturating_sub(*since);
                // Stuck (past the grace) with no pod left: an object, not a run; it holds
                // back no create elsewhere.
                if waited >= s.drain_grace && copy.live_pods == 0 && n.cluster.as_deref() != Some(c)
                {
                    continue;
                }
                blocked.get_or_insert(if waited >= s.drain_grace {
                    format!(
                        "its old copy on {c} has not gone in {}s since muster deleted it (a finalizer holds it, or its operator does not act)",
                        waited / 1000
                    )
                } else {
                    format!("its old copy on {c} is being deleted")
                });
            }
            Some(Member::Answering(None)) => {
                n.orphans.remove(c);
                if n.unconfirmed.remove(c) || seen.now.saturating_sub(*since) >= s.member_lost_grace
                {
                    event(
                        out,
                        Transition::OldCopyGone,
                        format!("{c} answers again; the copy left there is gone"),
                    );
                }
            }
            // Created there, and the view does not show it yet: it may run.
            Some(Member::Behind { .. }) => {
                blocked.get_or_insert(format!(
                    "its copy on {c} may be there (muster created it; its view of {c} does not show it yet)"
                ));
            }
            Some(Member::Silent { .. } | Member::Unconnected { .. }) => {
                if s.partition == Partition::Wait || n.cluster.as_deref() == Some(c) {
                    blocked.get_or_insert(format!(
                        "its old copy on {c} may still run ({c} does not answer)"
                    ));
                }
            }
            // Removed from the fleet: its copy may still run there, and a member registered
            // again (a Secret rotated, a GitOps prune undone) brings it back. The orphan stays
            // (the job may run twice, and says so) until the member answers without the copy;
            // it does not hold the job back, since nothing may ever answer for it.
            Some(Member::Removed) | None if s.defect == Some(super::super::Defect::StraysKept) => {
                n.orphans.remove(c);
                event(
                    out,
                    Transition::OldCopyUnconfirmed,
                    format!("member {c} was removed (defect: strays-kept)"),
                );
            }
            Some(Member::Removed) | None => {
                if n.unconfirmed.insert(c.clone()) {
                    event(
                        out,
                        Transition::OldCopyUnconfirmed,
                        format!(
                            "member {c} was removed: its copy may still run there; muster deletes it if {c} is registered again"
                        ),
                    );
                }
            }
        }
    }
    blocked
}

/// A member that does not answer: its job is placed elsewhere after the grace period
/// ([`Partition::Replace`]) or waits for it ([`Partition::Wait`]).
pub(super) fn lost(
    mut n: Record,
    since: Ms,
    seen: &Seen,
    s: &Settings,
    out: &mut Vec<Intent>,
) -> Record {
    let c = cluster_of(&n);
    let deadline = since.saturating_add(s.member_lost_grace);
    match s.partition {
        Partition::Replace if seen.now >= deadline => {
            let text = format!(
                "member {c} has not answered for over {}s",
                s.member_lost_grace / 1000
            );
            take_back(&n, RequeueReason::MemberLost, text, false, seen.now, s, out)
        }
        Partition::Replace => {
            let reason = format!(
                "member {c} does not answer; placed elsewhere if it stays silent {}s",
                s.member_lost_grace / 1000
            );
            if n.reason != reason {
                event(out, Transition::MemberSilent, reason.clone());
            }
            n.reason = reason;
            out.push(Intent::WakeAt(deadline));
            n
        }
        Partition::Wait => {
            let reason =
                format!("member {c} does not answer; waiting for it (partition policy Wait)");
            if n.reason != reason {
                event(out, Transition::MemberSilent, reason.clone());
            }
            n.reason = reason;
            n
        }
    }
}

/// A member that answers, but whose view has not reached muster's create of the job's copy
/// there (sent at `since`): the copy is neither created again nor called missing while the view
/// catches up. A view still behind after the lost grace is a member muster cannot see: as one
/// that does not answer, the job is placed elsewhere ([`Partition::Replace`]), its copy there an
/// orphan until the view shows it gone, or waits ([`Partition::Wait`]).
pub(super) fn behind(
    n: Record,
    since: Ms,
    seen: &Seen,
    s: &Settings,
    out: &mut Vec<Intent>,
) -> Record {
    let deadline = since.saturating_add(s.member_lost_grace);
    if seen.now < deadline {
        out.push(Intent::WakeAt(
            seen.now.saturating_add(s.create_retry).min(deadline),
        ));
        return n;
    }
    let c = cluster_of(&n);
    match s.partition {
        Partition::Replace => {
            let text = format!(
                "muster's view of member {c} has not shown the copy it created there for over {}s",
                s.member_lost_grace / 1000
            );
            take_back(&n, RequeueReason::MemberLost, text, false, seen.now, s, out)
        }
        Partition::Wait => {
            let mut n = n;
            let reason = format!(
                "muster's view of member {c} has not shown the copy it created there; waiting for it (partition policy Wait)"
            );
            if n.reason != reason {
                event(out, Transition::MemberSilent, reason.clone());
            }
            n.reason = reason;
            n
        }
    }
}
