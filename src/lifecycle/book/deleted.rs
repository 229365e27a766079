//! Hub jobs deleted while a copy may still run, known to a driver only from their record (a
//! QueuedJob kept by its finalizer): a restarted driver, or one that never followed the job,
//! charges them again from the record's [`charge`](crate::lifecycle::Record::charge) and plan,
//! until every member that may hold a copy confirms it gone. Earlier versions kept this charge
//! only in memory: a restart while a member did not answer freed quota still in use.

use std::collections::BTreeMap;

use super::Book;
use crate::lifecycle::Record;
use crate::scheduler::{Scheduler, Submitted};
use crate::workload::{ClusterRestriction, Component, JobKind, Workload};

impl Book {
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
        if self.keeps(uid) || self.settled.contains(uid) {
            return self.keeps(uid);
        }
        if (!record.holds() && record.orphans.is_empty())
            || self.settings.defect == Some(crate::lifecycle::Defect::ChargeInMemory)
        {
            return false;
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

/// A workload that charges what `record` says the job was admitted with: per component, its
/// planned pods times its per-pod requests. None when the record says nothing of it (written
/// by a version that did not record charges).
fn charged_workload(uid: &str, namespace: &str, record: &Record) -> Option<Workload> {
    let components: Vec<Component> = record
        .charge
        .iter()
        .filter_map(|(name, requests)| {
            let pods: u32 = record.placement.get(name)?.values().sum();
            (pods > 0).then(|| Component {
                name: name.clone(),
                pods,
                requests: requests.clone(),
                node_selector: BTreeMap::new(),
                tolerations: Vec::new(),
                required_node_affinity: None,
                template_pointer: None,
                staged: false,
            })
        })
        .collect();
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
    })
}
