//! Events on hub objects, published off the sync loop by one task that has a few in flight at a
//! time. Events are reports, never decisions: a burst of transitions must neither hold back a
//! pass nor open a connection to the hub per Event (one task per Event once held 355 TLS
//! connections during a burst of creates). When the queue is full an Event is dropped, and the
//! drops are logged.
//!
//! Also owns which Events a transition publishes ([`Held`]): a job's Dispatched Event waits
//! with its QueuedJob's Dispatched status, which the outbox holds back a few seconds for the
//! pods (`lifecycle::outbox`); when they run first, one Running Event says both, as one status
//! write does.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder};
use tokio::sync::mpsc;

use crate::lifecycle::Transition;
use crate::lifecycle::wire::QueuedJobState;

/// Events published at once.
const IN_FLIGHT: usize = 8;
/// Events waiting to be published at most.
const QUEUED: usize = 4096;

/// The publisher's queue.
#[derive(Clone)]
pub(super) struct Events {
    tx: mpsc::Sender<(Event, ObjectReference)>,
    dropped: Arc<AtomicU64>,
}

impl Events {
    /// Starts the publisher task on `recorder`.
    pub fn start(recorder: Recorder) -> Events {
        let (tx, rx) = mpsc::channel::<(Event, ObjectReference)>(QUEUED);
        let queue = futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        });
        tokio::spawn(queue.for_each_concurrent(IN_FLIGHT, move |(ev, oref)| {
            let recorder = recorder.clone();
            async move {
                if let Err(e) = recorder.publish(&ev, &oref).await {
                    tracing::warn!(object = ?oref.name, reason = %ev.reason, error = %e, "could not publish an Event");
                }
            }
        }));
        Events {
            tx,
            dropped: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Queues an Event on `oref` (`reason` is also its action); never waits.
    pub fn send(&self, oref: ObjectReference, warning: bool, reason: &str, note: &str) {
        let ev = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.to_string(),
            note: Some(truncate(note, 1000)),
            action: reason.to_string(),
            secondary: None,
        };
        if self.tx.try_send((ev, oref)).is_err() {
            let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            if n == 1 || n.is_multiple_of(100) {
                tracing::warn!(
                    dropped = n,
                    "Event queue full ({QUEUED} waiting): Events dropped so far"
                );
            }
        }
    }
}

/// A job's Events not yet published, in order: Queued, Admitted and Dispatched each wait for
/// the QueuedJob status that records them. The outbox writes only what a job's record says
/// when the write goes, so a job admitted before its first status write never has `Queued`
/// written, and one whose pods run within the outbox's wait never has `Dispatched` written
/// (`lifecycle::outbox`). Their Events fold the same way: what the hub never records as a
/// state of its own is said in the Event of the state that it does record.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Held(Vec<(Transition, String)>);

/// The order in which the held transitions follow one another (None: never held).
fn step(t: Transition) -> Option<u8> {
    match t {
        Transition::Queued => Some(0),
        Transition::Admitted => Some(1),
        Transition::Dispatched => Some(2),
        _ => None,
    }
}

/// The held Events as one: the last one's reason, every note in order.
fn fold(held: Vec<(Transition, String)>) -> Option<(Transition, String)> {
    let (t, _) = *held.last()?;
    let notes: Vec<String> = held.into_iter().map(|(_, n)| n).collect();
    Some((t, notes.join("; ")))
}

impl Held {
    /// The Events to publish for transition `t` (with `note`), in order. Queued, Admitted and
    /// Dispatched are held behind what is held already when they follow it (a transition held
    /// already, or one earlier in that order, publishes what is held first: a new placement);
    /// Running takes what is held into its note; any other transition publishes what is held
    /// before itself.
    pub fn transition(&mut self, t: Transition, note: String) -> Vec<(Transition, String)> {
        match step(t) {
            Some(s) => {
                let follows = self
                    .0
                    .last()
                    .is_none_or(|&(h, _)| step(h).is_some_and(|h| h < s));
                let earlier = if follows {
                    None
                } else {
                    fold(std::mem::take(&mut self.0))
                };
                self.0.push((t, note));
                earlier.into_iter().collect()
            }
            None if t == Transition::Running => {
                let mut held = std::mem::take(&mut self.0);
                held.push((t, note));
                fold(held).into_iter().collect()
            }
            None => fold(std::mem::take(&mut self.0))
                .into_iter()
                .chain([(t, note)])
                .collect(),
        }
    }

    /// The Event to publish now that a status saying `landed` is on the hub: what is held up to
    /// that state, as one Event. A status past the three publishes nothing: every transition to
    /// such a state published what was held before itself, so what is held now came after it
    /// (a write sent before a preemption that lands after a new admission).
    pub fn landed(&mut self, landed: QueuedJobState) -> Option<(Transition, String)> {
        let said = match landed {
            QueuedJobState::Queued => Some(Transition::Queued),
            QueuedJobState::Admitted => Some(Transition::Admitted),
            QueuedJobState::Dispatched => Some(Transition::Dispatched),
            _ => None,
        };
        let s = said.and_then(step)?;
        let upto = self
            .0
            .iter()
            .rposition(|&(h, _)| step(h).is_some_and(|h| h <= s))?;
        fold(self.0.drain(..=upto).collect())
    }

    /// Everything held, as one Event, to publish now: the status it waits for may not land (a
    /// failed write, a name held by an earlier job), or the controller stops.
    pub fn release(&mut self) -> Option<(Transition, String)> {
        fold(std::mem::take(&mut self.0))
    }
}

/// `s` cut to at most `max` bytes (at a character boundary), with an ellipsis when cut.
pub(super) fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use QueuedJobState as S;
    use Transition::*;

    fn said(h: &mut Held, t: Transition, note: &str) -> Vec<(Transition, String)> {
        h.transition(t, note.to_string())
    }

    fn one(t: Transition, note: &str) -> Option<(Transition, String)> {
        Some((t, note.to_string()))
    }

    #[test]
    fn a_job_admitted_before_its_first_status_write_has_one_admitted_event() {
        let mut h = Held::default();
        assert_eq!(said(&mut h, Queued, "queued in team-a"), vec![]);
        assert_eq!(said(&mut h, Admitted, "admitted to member-a"), vec![]);
        assert_eq!(
            h.landed(S::Admitted),
            one(Admitted, "queued in team-a; admitted to member-a")
        );
        assert_eq!(h.release(), None, "nothing left to publish");
    }

    #[test]
    fn a_queued_status_that_lands_first_is_published_alone() {
        let mut h = Held::default();
        said(&mut h, Queued, "queued in team-a");
        said(&mut h, Admitted, "admitted to member-a");
        // The Queued status was sent before the admission and lands now.
        assert_eq!(h.landed(S::Queued), one(Queued, "queued in team-a"));
        assert_eq!(h.landed(S::Queued), None, "the admission is not said yet");
        assert_eq!(h.landed(S::Admitted), one(Admitted, "admitted to member-a"));
    }

    #[test]
    fn a_status_of_an_earlier_state_leaves_a_later_event_held() {
        let mut h = Held::default();
        assert_eq!(
            said(&mut h, Requeued, "member-b has not answered"),
            vec![(Requeued, "member-b has not answered".to_string())]
        );
        said(&mut h, Admitted, "admitted to member-c");
        assert_eq!(h.landed(S::Queued), None);
        // A Running status written before the preemption lands late: it says nothing of the
        // admission since.
        assert_eq!(h.landed(S::Running), None);
        assert_eq!(h.landed(S::Admitted), one(Admitted, "admitted to member-c"));
    }

    #[test]
    fn pods_that_run_first_make_one_running_event_that_says_both() {
        let mut h = Held::default();
        said(&mut h, Queued, "queued in team-a");
        said(&mut h, Admitted, "admitted to member-b");
        h.landed(S::Admitted);
        assert_eq!(said(&mut h, Dispatched, "created in member-b"), vec![]);
        assert_eq!(
            said(&mut h, Running, "running on member-b: 2/2 pods"),
            vec![(
                Running,
                "created in member-b; running on member-b: 2/2 pods".to_string()
            )]
        );
        assert_eq!(h.release(), None, "nothing left to publish");
    }

    #[test]
    fn a_dispatch_written_first_is_published_then_and_running_stands_alone() {
        let mut h = Held::default();
        said(&mut h, Dispatched, "created in member-a");
        assert_eq!(h.landed(S::Admitted), None, "an earlier state");
        assert_eq!(
            h.landed(S::Dispatched),
            one(Dispatched, "created in member-a")
        );
        assert_eq!(
            said(&mut h, Running, "running"),
            vec![(Running, "running".to_string())]
        );
    }

    #[test]
    fn any_other_transition_publishes_what_is_held_before_itself() {
        for t in [
            Rejected,
            Requeued,
            DispatchFailed,
            Preempted,
            Degraded,
            Finished,
            Failed,
        ] {
            let mut h = Held::default();
            said(&mut h, Admitted, "admitted to member-c");
            said(&mut h, Dispatched, "created in member-c");
            assert_eq!(
                said(&mut h, t, "why"),
                vec![
                    (
                        Dispatched,
                        "admitted to member-c; created in member-c".to_string()
                    ),
                    (t, "why".to_string())
                ],
                "{t:?}"
            );
            assert_eq!(h.release(), None);
        }
    }

    #[test]
    fn a_transition_held_already_or_an_earlier_one_publishes_what_is_held_first() {
        // A second dispatch (a new placement) publishes the first.
        let mut h = Held::default();
        said(&mut h, Dispatched, "created in member-a");
        assert_eq!(
            said(&mut h, Dispatched, "created in member-b"),
            vec![(Dispatched, "created in member-a".to_string())]
        );
        assert_eq!(h.release(), one(Dispatched, "created in member-b"));
        // Queued after an admission (taken back without an Event of its own) publishes it.
        let mut h = Held::default();
        said(&mut h, Admitted, "admitted to member-a");
        assert_eq!(
            said(&mut h, Queued, "queued in team-a"),
            vec![(Admitted, "admitted to member-a".to_string())]
        );
        assert_eq!(h.landed(S::Queued), one(Queued, "queued in team-a"));
    }

    #[test]
    fn the_fold_is_the_shortest_write_history() {
        // Every job's Events: as many as the statuses that said a state of the three, plus
        // the transitions past them; each note said once, in order.
        let mut h = Held::default();
        let mut out = Vec::new();
        out.extend(said(&mut h, Queued, "q"));
        out.extend(said(&mut h, Admitted, "a"));
        out.extend(h.landed(S::Admitted));
        out.extend(said(&mut h, Dispatched, "d"));
        out.extend(h.landed(S::Dispatched));
        out.extend(said(&mut h, Running, "r"));
        out.extend(said(&mut h, Finished, "f"));
        let notes: Vec<String> = out.iter().map(|(_, n)| n.clone()).collect();
        assert_eq!(notes, ["q; a", "d", "r", "f"]);
        assert_eq!(
            out.iter().map(|(t, _)| *t).collect::<Vec<_>>(),
            [Admitted, Dispatched, Running, Finished]
        );
    }
}
