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

/// A job's Dispatched Event not yet published: its note ("created in member-b").
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Held(Option<String>);

impl Held {
    /// The Events to publish for transition `t` (with `note`), in order. Dispatched is held
    /// (one held before it goes first: a new placement); Running takes a held dispatch into its
    /// note; any other transition publishes a held dispatch before itself.
    pub fn transition(&mut self, t: Transition, note: String) -> Vec<(Transition, String)> {
        match (t, self.0.take()) {
            (Transition::Dispatched, earlier) => {
                self.0 = Some(note);
                earlier
                    .map(|d| (Transition::Dispatched, d))
                    .into_iter()
                    .collect()
            }
            (Transition::Running, Some(d)) => vec![(Transition::Running, format!("{d}; {note}"))],
            (_, earlier) => earlier
                .map(|d| (Transition::Dispatched, d))
                .into_iter()
                .chain([(t, note)])
                .collect(),
        }
    }

    /// The held Dispatched Event, to publish now: the QueuedJob says Dispatched (the pods did
    /// not all run within the outbox's wait), or the controller stops.
    pub fn release(&mut self) -> Option<(Transition, String)> {
        self.0.take().map(|d| (Transition::Dispatched, d))
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
    use Transition::*;

    fn said(h: &mut Held, t: Transition, note: &str) -> Vec<(Transition, String)> {
        h.transition(t, note.to_string())
    }

    #[test]
    fn pods_that_run_first_make_one_running_event_that_says_both() {
        let mut h = Held::default();
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
        assert_eq!(
            h.release(),
            Some((Dispatched, "created in member-a".to_string()))
        );
        assert_eq!(
            said(&mut h, Running, "running"),
            vec![(Running, "running".to_string())]
        );
    }

    #[test]
    fn any_other_transition_publishes_a_held_dispatch_before_itself() {
        for t in [
            Requeued,
            DispatchFailed,
            Preempted,
            Degraded,
            Finished,
            Failed,
        ] {
            let mut h = Held::default();
            said(&mut h, Dispatched, "created in member-c");
            assert_eq!(
                said(&mut h, t, "why"),
                vec![
                    (Dispatched, "created in member-c".to_string()),
                    (t, "why".to_string())
                ],
                "{t:?}"
            );
            assert_eq!(h.release(), None);
        }
        // A second dispatch (a new placement) publishes the first.
        let mut h = Held::default();
        said(&mut h, Dispatched, "created in member-a");
        assert_eq!(
            said(&mut h, Dispatched, "created in member-b"),
            vec![(Dispatched, "created in member-a".to_string())]
        );
        assert_eq!(
            h.release(),
            Some((Dispatched, "created in member-b".to_string()))
        );
    }
}
