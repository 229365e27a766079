//! What every step of a pass borrows: the clients and shared handles of the controller (`Ctx`:
//! the hub client, the flags, the hub's watch stores, the Event publisher, the wake-up, the
//! metrics, the lease), and the core's state (`Core`: the scheduler, the lifecycle book, the
//! next deadline). Each step's own state lives in the module of that step; `brain` holds them
//! side by side and lends each step what it needs. Decides nothing.

use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use tokio::sync::{Notify, mpsc};

use super::events::Events;
use super::leader;
use super::options::Options;
use super::stores::HubStores;
use crate::lifecycle::{Book, Ms};
use crate::metrics::Metrics;
use crate::scheduler::Scheduler;

/// The clients and handles a pass works with (a thin context, apart from state).
pub(super) struct Ctx {
    pub hub: Client,
    pub opts: Options,
    pub stores: HubStores,
    /// Events on hub objects, published off the loop.
    pub events: Events,
    pub wake: Arc<Notify>,
    pub metrics: Arc<Metrics>,
    pub leadership: Arc<leader::Leadership>,
    /// When this process started.
    pub epoch: Instant,
}

impl Ctx {
    /// An Event on `oref` (queued, never awaited).
    pub fn publish(&self, oref: &ObjectReference, warning: bool, reason: &str, note: String) {
        self.events.send(oref.clone(), warning, reason, &note);
    }
}

/// The core's state: the scheduler, every followed job's lifecycle record (shared with
/// `sim::faults`), and the earliest deadline of any record (the next pass comes no later).
pub(super) struct Core {
    pub sched: Scheduler,
    pub book: Book,
    pub next_wake: Option<Ms>,
}

impl Core {
    /// A pass comes no later than `at`.
    pub fn wake_at(&mut self, at: Ms) {
        self.next_wake = Some(self.next_wake.map_or(at, |w| w.min(at)));
    }
}

/// Outcomes of work a step sent off the loop, read by that step at the start of the next pass
/// (each step owns its own; every sender also wakes the loop).
pub(super) struct Inbox<T> {
    tx: mpsc::UnboundedSender<T>,
    rx: mpsc::UnboundedReceiver<T>,
}

impl<T> Default for Inbox<T> {
    fn default() -> Inbox<T> {
        let (tx, rx) = mpsc::unbounded_channel();
        Inbox { tx, rx }
    }
}

impl<T> Inbox<T> {
    /// Where a task off the loop sends its outcome.
    pub fn sender(&self) -> mpsc::UnboundedSender<T> {
        self.tx.clone()
    }

    /// Every outcome arrived since the last call, in arrival order.
    pub fn drain(&mut self) -> Vec<T> {
        let mut out = Vec::new();
        while let Ok(t) = self.rx.try_recv() {
            out.push(t);
        }
        out
    }
}
