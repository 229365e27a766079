//! Which pods on a member muster's own copies made, and so which pods the estimator may leave
//! out of a node's usage (their job's reservation stands for them). A pod is a copy's only if it
//! is in the copy's namespace and its chain of controller owners reaches the UID muster recorded
//! for the copy (from its create response), through objects of the kinds that copy's operator
//! makes (watched here by their metadata, every hop in the same namespace). A label, an
//! annotation or an owner reference naming an object muster does not see is never enough:
//! such a pod is usage, always.
//!
//! Also owns the metadata watches of those intermediate objects (batch Jobs, JobSets,
//! RayClusters) on a member.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DynamicObject};
use kube::core::PartialObjectMeta;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::kinds;
use super::watches::{Watched, watch_trimmed};
use crate::quantity::ResourceList;
use crate::workload::{JobKind, pod_spec_requests};

/// The kinds that may stand between a copy and its pods.
pub const INTERMEDIATE: [JobKind; 3] = [JobKind::Job, JobKind::JobSet, JobKind::RayCluster];

/// The chains followed from a pod up to a copy of `kind`: each is the kinds of the objects
/// between them, from the pod's controller upward (empty: the pod's controller is the copy).
pub fn chains(kind: JobKind) -> &'static [&'static [&'static str]] {
    match kind {
        // training-operator (and a batch Job, a RayCluster) own their pods directly.
        JobKind::PyTorchJob
        | JobKind::TFJob
        | JobKind::XGBoostJob
        | JobKind::PaddleJob
        | JobKind::JAXJob
        | JobKind::Job
        | JobKind::RayCluster => &[&[]],
        // MPI operator: workers directly; the launcher's pod through its launcher Job.
        JobKind::MPIJob => &[&[], &["Job"]],
        // JobSet: through its child Jobs.
        JobKind::JobSet => &[&["Job"]],
        // KubeRay: head and workers through the RayCluster it makes; the submitter through
        // its Job.
        JobKind::RayJob => &[&["RayCluster"], &["Job"]],
        // Kubeflow Trainer: through the JobSet it makes, then that JobSet's Jobs.
        JobKind::TrainJob => &[&["Job", "JobSet"]],
    }
}

/// The longest chain followed (objects between a pod and a copy).
const MAX_BETWEEN: usize = 2;

/// A copy muster created on this member, by the UID it recorded: its kind and namespace as the
/// member's watch of copies shows that object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recorded {
    pub kind: JobKind,
    pub namespace: String,
}

/// An object that may stand between a copy and its pods, as its metadata watch saw it: its kind
/// (the watch's, never a reference's claim), namespace and controller's UID.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Link {
    pub kind: &'static str,
    pub namespace: String,
    pub controller: Option<String>,
}

/// The UID of the controller owner among `refs`.
fn controller(refs: &[OwnerReference]) -> Option<&str> {
    refs.iter()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.as_str())
}

/// The recorded copy whose pod `pod` is (its UID), if any: see the module's rule.
pub fn copy_of_pod<'a>(
    pod: &Pod,
    copies: &'a HashMap<String, Recorded>,
    links: &HashMap<String, Link>,
) -> Option<&'a str> {
    let ns = pod.metadata.namespace.as_deref()?;
    let mut owner = controller(pod.owner_references())?;
    let mut between: Vec<&'static str> = Vec::new();
    loop {
        if let Some((uid, copy)) = copies.get_key_value(owner) {
            let chain_known = chains(copy.kind).contains(&between.as_slice());
            return (copy.namespace == ns && chain_known).then_some(uid.as_str());
        }
        if between.len() == MAX_BETWEEN {
            return None;
        }
        let link = links.get(owner)?;
        if link.namespace != ns {
            return None;
        }
        between.push(link.kind);
        owner = link.controller.as_deref()?;
    }
}

/// Per node, what active pods request, leaving out only the pods of the copies muster recorded
/// on this member (`copies`, by copy UID: each an admitted job whose reservation stands for
/// them). Problems: pods whose requests do not parse (left out, reported).
pub fn usage_by_node(
    pods: &[Arc<Pod>],
    copies: &HashMap<String, Recorded>,
    links: &HashMap<String, Link>,
) -> (BTreeMap<String, ResourceList>, Vec<String>) {
    let mut out: BTreeMap<String, ResourceList> = BTreeMap::new();
    let mut problems = Vec::new();
    for p in pods {
        if !super::status::pod_is_active(p) || copy_of_pod(p, copies, links).is_some() {
            continue;
        }
        let (Some(spec), Some(node)) = (
            p.spec.as_ref(),
            p.spec.as_ref().and_then(|s| s.node_name.clone()),
        ) else {
            continue;
        };
        match pod_spec_requests(spec) {
            Ok(r) => out.entry(node).or_default().add(&r),
            Err(e) => problems.push(format!(
                "pod {}/{}: {e}",
                p.namespace().unwrap_or_default(),
                p.name_any()
            )),
        }
    }
    (out, problems)
}

type Meta = PartialObjectMeta<DynamicObject>;

/// The metadata watches of the intermediate kinds a member serves.
#[derive(Default)]
pub struct Watches {
    stores: Vec<(JobKind, Watched<Meta>)>,
}

impl Watches {
    /// Starts a metadata watch (all namespaces) of each of [`INTERMEDIATE`] in `served`. Only
    /// the UID, namespace and owner references are kept of each object.
    pub fn start(
        client: &Client,
        served: &[JobKind],
        wake: &Arc<Notify>,
        tasks: &mut Vec<JoinHandle<()>>,
    ) -> Watches {
        let mut stores = Vec::new();
        for kind in INTERMEDIATE.into_iter().filter(|k| served.contains(k)) {
            let ar = kinds::api_resource(kind);
            // Metadata-only requests (an `Api` of partial objects).
            let api: Api<Meta> = Api::all_with(client.clone(), &ar);
            let trim = |o: &mut Meta| {
                o.metadata.managed_fields = None;
                o.metadata.labels = None;
                o.metadata.annotations = None;
            };
            let w = watch_trimmed(
                api,
                watcher::Config::default(),
                ar,
                wake.clone(),
                tasks,
                trim,
            );
            stores.push((kind, w));
        }
        Watches { stores }
    }

    /// Whether every watch has listed once.
    pub fn is_ready(&self) -> bool {
        self.stores.iter().all(|(_, w)| w.is_ready())
    }

    /// Every watched object, by UID.
    pub fn links(&self) -> HashMap<String, Link> {
        let mut out = HashMap::new();
        for (kind, store) in &self.stores {
            for o in store.state() {
                let (Some(uid), Some(ns)) = (o.metadata.uid.clone(), o.metadata.namespace.clone())
                else {
                    continue;
                };
                let owner = controller(o.metadata.owner_references.as_deref().unwrap_or_default());
                out.insert(
                    uid,
                    Link {
                        kind: kind.as_str(),
                        namespace: ns,
                        controller: owner.map(str::to_string),
                    },
                );
            }
        }
        out
    }
}

#[cfg(test)]
#[path = "owned_tests.rs"]
mod tests;
