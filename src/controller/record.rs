//! The status recorder: the one writer of QueuedJob status. A job's lifecycle record
//! (`crate::lifecycle::Record`) is its QueuedJob status: written in the order the book gives
//! (records leaving a member first, admissions last; a failed write of a record that frees
//! capacity stops the rest; many at a time within those two steps, off the sync loop in
//! `writes`), as a merge patch of what changed, only while this replica leads, and read back by a restarted controller or a new leader. The display fields (queue,
//! priority, explanation, pods, per-pod placement) ride along.

use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use super::crd::queued_job_name;
use super::crd::{JobRef, QueuedJob, QueuedJobSpec, QueuedJobState, QueuedJobStatus};
use super::ctx::{Core, Ctx};
use super::events::truncate;
use super::forecasting::Forecasts;
use super::jobs::HubJobs;
use super::membership::Fleet;
use super::writes::Put;
use super::writes::Writer;
use crate::lifecycle::outbox::Candidate;
use crate::lifecycle::{Phase, Record};
use crate::scheduler::JobState;

pub(super) use crate::lifecycle::wire::to_status;

/// How often a waiting job's status is written when its words changed only in their figures.
pub(super) const FIGURES_EVERY: Duration = Duration::from_secs(10);

/// `s` with every number in it replaced by `#`: what a reason says, not the figures it quotes.
pub(super) fn words(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut in_number = false;
    for c in s.chars() {
        if c.is_ascii_digit() || (in_number && c == '.') {
            if !in_number {
                out.push('#');
                in_number = true;
            }
        } else {
            in_number = false;
            out.push(c);
        }
    }
    out
}

/// Two statuses that are [`same`] once `plain` has blanked, in each, what may differ.
fn alike(a: &QueuedJobStatus, b: &QueuedJobStatus, plain: impl Fn(&mut QueuedJobStatus)) -> bool {
    let (mut a, mut b) = (a.clone(), b.clone());
    plain(&mut a);
    plain(&mut b);
    same(&a, &b)
}

/// Two statuses of a waiting job that differ only in the figures their reason and explanation
/// quote.
fn figures_only(a: &QueuedJobStatus, b: &QueuedJobStatus) -> bool {
    a.state == QueuedJobState::Queued
        && b.state == QueuedJobState::Queued
        && alike(a, b, |s| {
            s.reason = s.reason.as_deref().map(words);
            s.explanation = s.explanation.as_deref().map(words);
        })
}

/// Two statuses of a placed job that differ only in how its pods look right now (their counts
/// and where each is): shown at most every [`FIGURES_EVERY`], or with the record's next change.
fn pods_only(a: &QueuedJobStatus, b: &QueuedJobStatus) -> bool {
    let placed = matches!(
        a.state,
        QueuedJobState::Admitted | QueuedJobState::Dispatched | QueuedJobState::Running
    );
    placed
        && a.state == b.state
        && alike(a, b, |s| {
            s.pods = None;
            s.pod_placement.clear();
        })
}

/// Two statuses that differ only in when the state last changed.
fn same(a: &QueuedJobStatus, b: &QueuedJobStatus) -> bool {
    if a.last_transition == b.last_transition {
        return a == b;
    }
    let mut a = a.clone();
    a.last_transition = b.last_transition.clone();
    a == *b
}

/// Each followed job's queue and priority, and for a waiting one why it waits, as the core
/// says. The full explanation tries every member, so it is recomputed when the core's
/// reason says something new, when only its figures changed at most every
/// [`FIGURES_EVERY`], and otherwise every 30 s.
pub(super) fn sync_reasons(core: &mut Core, hubjobs: &mut HubJobs) {
    let ids: Vec<(String, crate::scheduler::JobId)> = core
        .book
        .iter()
        .filter_map(|(u, e)| Some((u.clone(), e.id?)))
        .collect();
    let mut refresh: Option<Duration> = None;
    for (uid, id) in ids {
        let Some(j) = hubjobs.jobs.get_mut(&uid) else {
            continue;
        };
        j.queue = Some(core.sched.queue_name(id).to_string());
        j.priority = Some(core.sched.priority(id));
        let waiting = matches!(
            core.sched.state(id),
            JobState::Pending | JobState::Inadmissible(_)
        );
        if !waiting {
            j.explanation = None;
            j.summary = None;
            j.explained = None;
            continue;
        }
        let core_reason = core.sched.reason(id).unwrap_or_default();
        let stale = j.explained.as_ref().is_none_or(|(r, at)| {
            let age = at.elapsed();
            (*r != core_reason && (age >= FIGURES_EVERY || words(r) != words(&core_reason)))
                || age > Duration::from_secs(30)
        });
        if stale {
            let e = core.sched.explain(id);
            j.summary = Some(e.summary());
            j.explanation = Some(truncate(&e.to_string(), 8000));
            j.explained = Some((core_reason, Instant::now()));
        } else if let Some((r, at)) = &j.explained
            && *r != core_reason
        {
            // New figures: shown once FIGURES_EVERY has passed since the last ones.
            let due = FIGURES_EVERY.saturating_sub(at.elapsed());
            refresh = Some(refresh.map_or(due, |d: Duration| d.min(due)));
        }
    }
    if let Some(d) = refresh {
        let at = super::clock::now_ms() + d.as_millis() as u64;
        core.wake_at(at);
    }
}

/// The whole QueuedJob status of `uid` for record `r`.
fn compose(
    (core, hubjobs, fleet, forecasts): (&Core, &HubJobs, &Fleet, &Forecasts),
    uid: &str,
    r: &Record,
) -> Option<QueuedJobStatus> {
    let j = hubjobs.jobs.get(uid)?;
    let twice: Vec<String> = r
        .orphans
        .keys()
        .filter(|c| !fleet.answering(c))
        .cloned()
        .collect();
    let mut st = to_status(r, twice);
    st.queue = j.queue.clone();
    st.priority = j.priority;
    let waiting = matches!(r.phase, Phase::Queued | Phase::Rejected)
        && r.backoff_until.is_none()
        && core.book.get(uid).is_some_and(|e| e.id.is_some());
    if matches!(r.phase, Phase::Queued | Phase::Rejected) {
        let written = j.written.as_ref().and_then(|w| w.estimate.as_ref());
        st.estimate = forecasts.estimate_for(uid, written);
    }
    if waiting {
        st.explanation = j.explanation.clone();
        if let Some(s) = &j.summary
            && r.orphans.is_empty()
        {
            st.reason = Some(s.clone());
        }
    }
    if r.holds() || r.phase.terminal() {
        st.pods = j.pods.clone();
        st.pod_placement = j.pod_placement.clone();
    }
    st.last_transition = match &j.written {
        Some(w) if w.state == st.state => w.last_transition.clone(),
        _ => Some(super::clock::now().to_string()),
    };
    Some(st)
}

/// Sends the next batch of QueuedJob statuses off the loop ([`Writer::send_records`]), as
/// the core's outbox plans it (`lifecycle::outbox`: records that free capacity first, the
/// rest only once those are durable, nothing while such a batch is out). Each status is
/// composed here: one the hub already holds is not written again, and a waiting job's
/// whose words changed only in their figures (the live usage a reason quotes) at most
/// every [`FIGURES_EVERY`]. Returns the jobs whose changed record the hub holds already, with
/// the state it holds: as good as landed (their held Events go, `events::Held`).
pub(super) fn write_records(
    ctx: &Ctx,
    core: &mut Core,
    (hubjobs, fleet, forecasts): (&HubJobs, &Fleet, &Forecasts),
    writer: &mut Writer,
) -> Vec<(String, QueuedJobState)> {
    let shared: &Core = core;
    let now = super::clock::now_ms();
    let mut held = Vec::new();
    let plan = writer
        .outbox
        .plan((&shared.book, now), |uid, record, changed| {
            let st = compose((shared, hubjobs, fleet, forecasts), uid, record)?;
            let j = hubjobs.jobs.get(uid)?;
            // What the hub holds is known only when no write since the last that landed
            // failed or went unanswered; otherwise the status goes now, whole.
            if let Some(w) = &j.written
                && j.unsure.is_none()
            {
                if same(&st, w) {
                    if changed {
                        held.push((uid.to_string(), st.state));
                    }
                    return Some(Candidate::Same);
                }
                let age = j.written_at.map_or(FIGURES_EVERY, |t| t.elapsed());
                if (figures_only(&st, w) || pods_only(&st, w)) && age < FIGURES_EVERY {
                    let wait = (FIGURES_EVERY - age).as_millis() as u64;
                    return Some(Candidate::Later(wait));
                }
            }
            let take_over = writer.outbox.may_take(uid).map(str::to_string);
            put(ctx, shared, hubjobs, (uid, st), take_over).map(Candidate::Send)
        });
    if let Some(wait) = plan.wait {
        core.wake_at(now + wait);
    }
    if let Some(batch) = writer.outbox.sending(&mut core.book, plan) {
        writer.send_records(ctx, core.book.settings.defect, batch);
    }
    held
}

/// The write of `status` for `uid`: a merge patch from what the hub holds (the status last
/// written, or the one the hub's QueuedJob has), and the QueuedJob itself first when none
/// is known.
fn put(
    ctx: &Ctx,
    core: &Core,
    hubjobs: &HubJobs,
    (uid, status): (&str, QueuedJobStatus),
    take_over: Option<String>,
) -> Option<Put> {
    let t = hubjobs.jobs.get(uid)?;
    let name = queued_job_name(t.kind, &t.name);
    let key = kube::runtime::reflector::ObjectRef::<QueuedJob>::new(&name).within(&t.namespace);
    // What the hub holds, with the resourceVersion it was seen at: the last write that landed,
    // else the view's.
    let (held, version) = match &t.written {
        Some(w) => (Some(w.clone()), t.version.clone()),
        None => ctx
            .stores
            .queued
            .get(&key)
            .filter(|q| q.spec.job_ref.uid == uid)
            .map_or((None, None), |q| {
                (q.status.clone(), q.metadata.resource_version.clone())
            }),
    };
    let create = t.written.is_none().then(|| {
        let mut qj = QueuedJob::new(
            &name,
            QueuedJobSpec {
                job_ref: JobRef {
                    api_version: t.api_version.clone(),
                    kind: t.kind.as_str().into(),
                    name: t.name.clone(),
                    uid: uid.to_string(),
                },
            },
        );
        qj.metadata.namespace = Some(t.namespace.clone());
        // Kept while muster needs the record (see `finalizers`).
        qj.metadata.finalizers = Some(vec![super::finalizers::RECORD_FINALIZER.into()]);
        qj.metadata.owner_references = Some(vec![OwnerReference {
            api_version: t.api_version.clone(),
            kind: t.kind.as_str().into(),
            name: t.name.clone(),
            uid: uid.to_string(),
            controller: Some(true),
            block_owner_deletion: Some(false),
        }]);
        qj
    });
    Some(Put::new(
        status,
        (held.as_ref(), t.unsure.as_ref()),
        (t.namespace.clone(), name, uid.to_string()),
        (create, take_over),
        version,
        core.book.settings.defect,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_are_not_words() {
        assert_eq!(
            words("cpu 120 in use + 5 requested = 125.5, above max 120"),
            "cpu # in use + # requested = #, above max #"
        );
        assert_eq!(words("nvidia.com/gpu: 2Gi."), "nvidia.com/gpu: #Gi.");
        let waiting = |reason: &str| QueuedJobStatus {
            state: QueuedJobState::Queued,
            reason: Some(reason.into()),
            ..QueuedJobStatus::default()
        };
        let a = waiting("cpu 120 in use + 5 requested = 125, above max 120");
        let b = waiting("cpu 118 in use + 5 requested = 123, above max 120");
        assert!(figures_only(&a, &b));
        // New words are written at once.
        assert!(!figures_only(
            &a,
            &waiting("fits nowhere: member-a lacks cpu")
        ));
        // So is anything of a job that is not waiting.
        let mut running = a.clone();
        running.state = QueuedJobState::Running;
        let mut running_b = b.clone();
        running_b.state = QueuedJobState::Running;
        assert!(!figures_only(&running, &running_b));
        // And any other field.
        let mut c = b.clone();
        c.requeues = 1;
        assert!(!figures_only(&a, &c));
    }

    #[test]
    fn how_the_pods_of_a_placed_job_look_is_not_news() {
        use crate::lifecycle::wire::PodCounts;
        let dispatched = |scheduled: u32| QueuedJobStatus {
            state: QueuedJobState::Dispatched,
            reason: Some("dispatched to member-a".into()),
            pods: Some(PodCounts {
                expected: 2,
                scheduled,
                running: 0,
            }),
            ..QueuedJobStatus::default()
        };
        assert!(pods_only(&dispatched(0), &dispatched(1)));
        // Anything else of the record is written at once.
        let mut running = dispatched(2);
        running.state = QueuedJobState::Running;
        assert!(!pods_only(&dispatched(2), &running));
        let mut moved = dispatched(1);
        moved.reason = Some("dispatched to member-a: 1/2 pods running".into());
        assert!(!pods_only(&dispatched(0), &moved));
        // A waiting job has no pods to show; its other fields follow `figures_only`.
        let mut waiting = dispatched(0);
        waiting.state = QueuedJobState::Queued;
        let mut waiting_b = dispatched(1);
        waiting_b.state = QueuedJobState::Queued;
        assert!(!pods_only(&waiting, &waiting_b));
    }
}
