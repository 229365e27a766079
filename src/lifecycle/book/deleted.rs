//! Hub jobs deleted while a copy may still run, known to a driver only from their record (a
//! QueuedJob kept by its finalizer): a restarted driver, or one that never followed the job,
//! charges them again from the record's [`charge`](crate::lifecycle::Record::charge) and plan,
//! until every member that may hold a copy confirms it gone. Earlier versions kept this charge
//! only in memory: a restart while a member did not answer freed quota still in use.

use std::collections::BTreeMap;

use super::Book;
use crate::lifecycle::Record;
use crate::lifecycle::gc::HubJob;
use crate::scheduler::{Scheduler, Submitted};
use crate::workload::{ClusterRestriction, Component, JobKind, Workload};

/// A QueuedJob as a driver finds it: whose record it is, whether it carries muster's finalizer
/// or is being deleted, and what the hub says of its job.
#[derive(Clone, Copy, Debug)]
pub struct Held<'a> {
    pub job: &'a str,
    pub namespace: &'a str,
    pub finalizer: bool,
    pub terminating: bool,
    pub hub: HubJob,
}

/// What becomes of a QueuedJob's finalizer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finalizer {
    /// Put it on: the book keeps the job and the record must stay.
    Add,
    /// Take it off: the hub job is gone and nothing of it is kept.
    Remove,
}

impl Book {
    /// One QueuedJob, decided once for both drivers (before a pass steps anything): a deleted
    /// job known only from it is charged again from its record while a copy may remain
    /// ([`Book::restore_deleted`]); then its finalizer is put on while the book keeps the job,
    /// and taken off once the hub job is gone and nothing of it is kept.
    /// `record` reads the record it holds (asked only when needed). Returns whether the job was
    /// charged again just now, and what becomes of its finalizer.
    pub fn keep(
        &mut self,
        sched: &mut Scheduler,
        q: &Held,
        record: impl FnOnce() -> Option<Record>,
    ) -> (bool, Option<Finalizer>) {
        let restored = q.hub == HubJob::Gone
            && !self.keeps(q.job)
            && record().is_some_and(|r| self.restore_deleted(sched, q.job, q.namespace, &r));
        let finalizer = if self.keeps(q.job) {
            let add = self.settings.defect != Some(crate::lifecycle::Defect::NoRecordFinalizer);
            (add && !q.finalizer && !q.terminating).then_some(Finalizer::Add)
        } else {
            (q.finalizer && q.hub == HubJob::Gone).then_some(Finalizer::Remove)
        };
        (restored, finalizer)
    }

    /// Whether the book keeps, or would keep once it reads it ([`Book::keep`]), the QueuedJob
    /// of `uid`, a job whose hub job is gone, holding `record`: followed, already kept, or not
    /// settled in this process and a member named in the record may still hold a copy.
    pub fn would_keep(&self, uid: &str, record: &Record) -> bool {
        self.keeps(uid)
            || (!self.settled.contains(uid)
                && (record.holds() || !record.orphans.is_empty())
                && self.settings.defect != Some(crate::lifecycle::Defect::ChargeInMemory))
    }

    /// The hub job `uid` (of `namespace`) is gone, and the hub still holds its `record`: unless
    /// it is followed, already kept, or was settled before, it is kept as deleted (charged
    /// again where its record says it holds capacity) while a member named in the record may
    /// still hold a copy. Returns whether the book keeps it ([`Book::keeps`]).
    pub fn restore_deleted(
        &mut self,
        sched: &mut Scheduler,
        uid: &str,
        namespace: &str,
        record: &Record,
    ) -> bool {
        if self.keeps(uid) || !self.would_keep(uid, record) {
            return self.keeps(uid);
        }
        let mut id = None;
        if record.charged()
            && let Some(cluster) = &record.cluster
            && let Some(w) = charged_workload(uid, namespace, record)
            && let Submitted::Queued(j) | Submitted::Inadmissible(j, _) =
                sched.restore(&w, 0, cluster, &record.placement)
        {
            self.by_id.insert(j, uid.to_string());
            id = Some(j);
        }
        self.deleted.insert(uid.to_string(), (id, record.clone()));
        true
    }
}

/// Per component, what `record` says the job was admitted with: its planned pods with their
/// per-pod requests (node constraints from `like`'s component of that name, where it has one:
/// they no longer matter once the plan is fixed). Empty when the record says nothing of it
/// (written by a version that did not record charges).
fn charged_components(record: &Record, like: Option<&Workload>) -> Vec<Component> {
    record
        .charge
        .iter()
        .filter_map(|(name, requests)| {
            let pods: u32 = record.placement.get(name)?.values().sum();
            let base = like.and_then(|w| w.components.iter().find(|c| &c.name == name));
            (pods > 0).then(|| Component {
                name: name.clone(),
                pods,
                requests: requests.clone(),
                node_selector: base.map(|c| c.node_selector.clone()).unwrap_or_default(),
                tolerations: base.map(|c| c.tolerations.clone()).unwrap_or_default(),
                required_node_affinity: base.and_then(|c| c.required_node_affinity.clone()),
                template_pointer: base.and_then(|c| c.template_pointer.clone()),
                staged: base.is_some_and(|c| c.staged),
                topology: base.and_then(|c| c.topology.clone()),
            })
        })
        .collect()
}

/// `w` (the job as it reads now) charging what `record` says it was admitted with, where the
/// record says it: a placed job that reads otherwise than it was admitted (a training runtime
/// edited, with no edit of the job) is charged again for what its copy runs.
pub(super) fn as_charged(w: &Workload, record: &Record) -> Workload {
    let components = charged_components(record, Some(w));
    if components.is_empty() {
        return w.clone();
    }
    Workload {
        components,
        ..w.clone()
    }
}

/// A workload that charges what `record` says the job was admitted with. None when the record
/// says nothing of it.
fn charged_workload(uid: &str, namespace: &str, record: &Record) -> Option<Workload> {
    let components = charged_components(record, None);
    if components.is_empty() {
        return None;
    }
    Some(Workload {
        kind: JobKind::Job,
        api_version: "batch/v1".into(),
        namespace: namespace.to_string(),
        name: format!("deleted-{uid}"),
        uid: Some(uid.to_string()),
        labels: BTreeMap::new(),
        annotations: BTreeMap::new(),
        components,
        priority_class_names: Default::default(),
        pod_priority_classes: Default::default(),
        candidates: ClusterRestriction::default(),
        runtime: None,
        topology: None,
    })
}
