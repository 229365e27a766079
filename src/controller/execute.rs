//! Carrying out the lifecycle's intents, in order: copies created and deleted (`copies`), the
//! queue metrics, Events on the hub job (published off the loop), run times kept for
//! forecasts, and the next wake-up. Decides nothing: every intent is the core's.

use super::copies::Copies;
use super::ctx::{Core, Ctx};
use super::forecasting::Forecasts;
use super::jobs::HubJobs;
use super::membership::Fleet;
use crate::lifecycle::{Intent, Transition};
use crate::metrics::{Outcome, RequeueReason};

/// The queue of a followed job (kept while it is out of the scheduler).
fn queue_of(core: &Core, hubjobs: &HubJobs, uid: &str) -> String {
    if let Some(id) = core.book.get(uid).and_then(|e| e.id) {
        return core.sched.queue_name(id).to_string();
    }
    let j = hubjobs.jobs.get(uid);
    j.and_then(|j| j.queue.clone())
        .or_else(|| j.and_then(|j| core.sched.queue_of_namespace(&j.namespace)))
        .unwrap_or_default()
}

/// Carries out the intents of one pass, in order.
pub(super) fn execute_all(
    ctx: &Ctx,
    core: &mut Core,
    (fleet, hubjobs): (&mut Fleet, &mut HubJobs),
    (copies, forecasts): (&mut Copies, &mut Forecasts),
    intents: Vec<(String, Intent)>,
) {
    for (uid, i) in intents {
        match i {
            Intent::Create { cluster } => {
                copies.create(ctx, core, fleet, hubjobs, (&uid, &cluster))
            }
            Intent::Delete { cluster, why } => {
                copies.delete(ctx, fleet, hubjobs, &uid, &cluster, &why)
            }
            Intent::Requeued(why) => {
                let queue = queue_of(core, hubjobs, &uid);
                ctx.metrics.requeued(&queue, why);
                if why == RequeueReason::Preempted
                    && let Some(c) = core.book.get(&uid).and_then(|e| {
                        e.record
                            .orphans
                            .iter()
                            .max_by_key(|(_, since)| **since)
                            .map(|(c, _)| c.clone())
                    })
                {
                    ctx.metrics.preempted(&queue, &c);
                }
                if let Some(j) = hubjobs.jobs.get_mut(&uid) {
                    j.queued_at = jiff::Timestamp::now();
                    j.forget_placement();
                }
            }
            Intent::Ended { succeeded } => {
                let queue = queue_of(core, hubjobs, &uid);
                let cluster = core
                    .book
                    .get(&uid)
                    .and_then(|e| e.record.cluster.clone())
                    .unwrap_or_default();
                let outcome = if succeeded {
                    Outcome::Succeeded
                } else {
                    Outcome::Failed
                };
                ctx.metrics.finished(&queue, &cluster, outcome);
                if succeeded {
                    forecasts.record_run(core, hubjobs, &uid);
                }
            }
            Intent::Event {
                transition: t,
                note,
            } => transition(ctx, core, hubjobs, (&uid, t, note)),
            Intent::WakeAt(at) => {
                core.wake_at(at);
            }
            Intent::Release | Intent::Submit => {}
        }
    }
}

/// A named transition: logged and counted at once, and an Event on the hub job (a dispatch's
/// Event may wait for its status, `events::Held`).
fn transition(
    ctx: &Ctx,
    core: &mut Core,
    hubjobs: &mut HubJobs,
    (uid, t, note): (&str, Transition, String),
) {
    let queue = queue_of(core, hubjobs, uid);
    let cluster = core
        .book
        .get(uid)
        .and_then(|e| e.record.cluster.clone())
        .unwrap_or_default();
    match t {
        Transition::Queued => ctx.metrics.submitted(&queue),
        Transition::Rejected | Transition::Malformed => ctx.metrics.rejected(&queue),
        Transition::Admitted => {
            ctx.metrics.admitted(&queue, &cluster);
            if let Some(j) = hubjobs.jobs.get_mut(uid) {
                let waited = jiff::Timestamp::now().duration_since(j.queued_at);
                ctx.metrics.wait_time(&queue, waited.as_secs_f64().max(0.0));
                j.forget_placement();
            }
        }
        Transition::Dispatched => ctx.metrics.dispatched(&queue, &cluster),
        _ => {}
    }
    if t == Transition::Admitted {
        // The copy is created on the pass after the admission is written: soon.
        core.next_wake = Some(super::clock::now_ms());
    }
    let Some(j) = hubjobs.jobs.get_mut(uid) else {
        return;
    };
    let said = t.as_str().to_lowercase();
    if t.warning() {
        tracing::warn!(job = %j.label(), "{said}: {note}");
    } else {
        tracing::info!(job = %j.label(), "{said}: {note}");
    }
    let oref = j.object_ref(uid);
    // Published off the sync loop: Events are reports, never decisions.
    for (t, note) in j.held_event.transition(t, note) {
        ctx.publish(&oref, t.warning(), t.as_str(), note);
    }
}
