//! Events on hub objects, published off the sync loop by one task that has a few in flight at a
//! time. Events are reports, never decisions: a burst of transitions must neither hold back a
//! pass nor open a connection to the hub per Event (one task per Event once held 355 TLS
//! connections during a burst of creates). When the queue is full an Event is dropped, and the
//! drops are logged.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder};
use tokio::sync::mpsc;

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
