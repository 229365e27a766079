//! The hub objects muster watches: one reflector store per kind, read by every step of a pass.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::DynamicObject;
use kube::runtime::reflector;

use super::crd::{ElasticQuotaTree, MemberCluster, QueuedJob};
use super::kinds;
use super::members::Watched;
use super::runtimes;
use crate::workload::JobKind;

/// The hub objects muster watches.
pub(super) struct HubStores {
    pub trees: Watched<ElasticQuotaTree>,
    pub members: Watched<MemberCluster>,
    pub queued: Watched<QueuedJob>,
    pub priorities: Watched<PriorityClass>,
    /// The hub's namespaces (their pod-security labels).
    pub namespaces: Watched<Namespace>,
    /// Kubeflow Trainer's runtimes, when the hub serves TrainJob.
    pub runtimes: Option<runtimes::Watches>,
    pub jobs: BTreeMap<JobKind, Watched<DynamicObject>>,
    pub _tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl HubStores {
    /// A hub job as last seen.
    pub fn job(&self, kind: JobKind, namespace: &str, name: &str) -> Option<Arc<DynamicObject>> {
        let key = reflector::ObjectRef::<DynamicObject>::new_with(name, kinds::api_resource(kind))
            .within(namespace);
        self.jobs.get(&kind)?.get(&key)
    }

    pub fn ready(&self) -> bool {
        self.trees.is_ready()
            && self.members.is_ready()
            && self.queued.is_ready()
            && self.priorities.is_ready()
            && self.namespaces.is_ready()
            && self.runtimes.as_ref().is_none_or(|r| r.is_ready())
            && self.jobs.values().all(|s| s.is_ready())
    }
}
