//! Workloads: what muster needs to know about a submitted job, read from the real manifest.
//!
//! Owns the translation of a job manifest (PyTorchJob, TFJob, ..., batch Job, JobSet, RayJob) into
//! a [`Workload`]: one [`Component`] per pod template with its pod count, effective per-pod
//! requests (Kubernetes' rules) and node constraints. Never guesses: a manifest it cannot read
//! is an [`InterpretError`] naming the field, never a job counted as zero.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{NodeSelector, Toleration};

use crate::labels::LabelSelector;
use crate::quantity::ResourceList;
pub use crate::topology::TopologyAsk;

mod interpret;
mod kind;
mod runtimes;
pub use interpret::{interpret, interpret_with, pod_spec_requests};
pub use kind::JobKind;
pub use runtimes::{RuntimeKey, RuntimeNeed, TrainingRuntime, TrainingRuntimes};

/// Annotation restricting the clusters a job may be dispatched to, by name (comma-separated).
pub const CLUSTERS_ANNOTATION: &str = "muster.dev/clusters";
/// Annotation restricting the clusters a job may be dispatched to, by a label selector over the
/// MemberCluster labels (`region=eu,tier in (large,medium)`).
pub const CLUSTER_SELECTOR_ANNOTATION: &str = "muster.dev/cluster-selector";

/// A job as the scheduling core sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    pub kind: JobKind,
    pub api_version: String,
    pub namespace: String,
    pub name: String,
    pub uid: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// One per pod template, in manifest order.
    pub components: Vec<Component>,
    /// The PriorityClass that gives the job its priority: the one of highest value among the
    /// templates' `priorityClassName` (and a Kubeflow `runPolicy.schedulingPolicy.priorityClass`).
    /// Resolved to a value by the core, which knows the PriorityClasses.
    pub priority_class_names: BTreeSet<String>,
    /// The templates' own `priorityClassName`s: each must exist on the member, whose API server
    /// refuses a pod that names a missing one.
    pub pod_priority_classes: BTreeSet<String>,
    /// Which member clusters the job may go to (from the annotations above).
    pub candidates: ClusterRestriction,
    /// The training runtime a TrainJob is built from: a member must have the same one.
    pub runtime: Option<RuntimeNeed>,
    /// One domain of a topology level for every pod of the job (`muster.dev/topology-required`
    /// or `-preferred` on its metadata).
    pub topology: Option<TopologyAsk>,
}

/// One pod template of a job and how many pods it makes.
#[derive(Clone, Debug, PartialEq)]
pub struct Component {
    /// Lower-case replica type or group name: `master`, `worker`, `launcher`, `head`, ...
    pub name: String,
    pub pods: u32,
    /// Effective per-pod requests: containers + sidecars vs. init containers, limits standing in
    /// for missing requests, pod overhead and pod-level resources applied. Zero entries dropped.
    pub requests: ResourceList,
    pub node_selector: BTreeMap<String, String>,
    pub tolerations: Vec<Toleration>,
    /// `affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution`.
    pub required_node_affinity: Option<NodeSelector>,
    /// JSON pointer (RFC 6901) of this component's pod template in the manifest, where a
    /// dispatcher adds labels and node affinity; `None` for a template muster defaulted.
    pub template_pointer: Option<String>,
    /// Its pods are created only after the earlier components run (an MPIJob's launcher, a
    /// RayJob's submitter, a replicated job that starts in order or depends on another): the
    /// operator's gang is released in stages.
    pub staged: bool,
    /// One domain of a topology level for this component's pods (the same annotations, or
    /// Kueue's `podset-*-topology`, on its pod template's metadata).
    pub topology: Option<TopologyAsk>,
}

/// The member clusters a job may be placed in. Empty restriction = all clusters.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClusterRestriction {
    pub names: Option<BTreeSet<String>>,
    pub selector: Option<LabelSelector>,
}

impl ClusterRestriction {
    pub fn allows(&self, name: &str, labels: &BTreeMap<String, String>) -> bool {
        self.names.as_ref().is_none_or(|n| n.contains(name))
            && self.selector.as_ref().is_none_or(|s| s.matches(labels))
    }

    pub fn is_unrestricted(&self) -> bool {
        self.names.is_none() && self.selector.is_none()
    }
}

/// Why a manifest cannot be turned into a workload; `field` is a JSON path such as
/// `spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].resources.limits[nvidia.com/gpu]`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct InterpretError {
    pub field: String,
    pub message: String,
}

impl InterpretError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl Workload {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Total pods over all components.
    pub fn pod_count(&self) -> u64 {
        self.components.iter().map(|c| u64::from(c.pods)).sum()
    }

    /// Sum of every pod's requests (what quota is charged).
    pub fn total_requests(&self) -> ResourceList {
        let mut total = ResourceList::new();
        for c in &self.components {
            total.add(&c.requests.scaled(i128::from(c.pods)));
        }
        total
    }
}
