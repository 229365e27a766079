//! The custom resources muster serves on the hub: `MemberCluster` (a member and how to reach it),
//! `QueuedJob` (one per submitted job: its place in the queue and the durable record of where it
//! was dispatched) and `ElasticQuotaTree` (the quota hierarchy, in the upstream group so existing
//! trees apply unchanged). Types only: no client calls here.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::workload::JobKind;

/// Field manager of everything muster writes with server-side apply.
pub const MANAGER: &str = "muster";

/// Name of the QueuedJob of a job: `<kind>-<name>`, lower-case.
pub fn queued_job_name(kind: JobKind, name: &str) -> String {
    let n = format!("{}-{name}", kind.as_str().to_lowercase());
    if n.len() <= 253 {
        return n;
    }
    // Cut, then made unique again by a hash of the whole name (two long names that share their
    // first 253 characters must not share a QueuedJob).
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in n.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    let cut: String = n.chars().take(253 - 11).collect();
    format!(
        "{}-{:010x}",
        cut.trim_end_matches(['-', '.']),
        h & 0xff_ffff_ffff
    )
}

/// Where a member's kubeconfig lives on the hub.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// Secret name.
    pub name: String,
    /// Secret namespace; the controller's namespace when empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Key holding the kubeconfig; `kubeconfig` when empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// A member cluster jobs can be dispatched to. Its labels (metadata.labels) are what the
/// `muster.dev/cluster-selector` annotation of a job selects on.
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "muster.dev",
    version = "v1alpha1",
    kind = "MemberCluster",
    status = "MemberClusterStatus",
    shortname = "mc",
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Nodes","type":"integer","jsonPath":".status.nodes"}"#,
    printcolumn = r#"{"name":"Last Contact","type":"date","jsonPath":".status.lastContact"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct MemberClusterSpec {
    /// The Secret holding a kubeconfig for the member's API server.
    pub kubeconfig_secret_ref: SecretKeyRef,
    /// How muster carries out a plan on this member: `Gates` (every pod waits behind a
    /// scheduling gate until muster gives it exactly one planned node), `Pinned` (each component
    /// is pinned to its planned nodes and only plans that start under any arrangement are
    /// made), or `Auto` (the default: gates, unless the API server is older than 1.30 or the
    /// member is seen dropping muster's gate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<PlacementPolicy>,
    /// The member's topology: node-label keys from the widest level to the narrowest, e.g.
    /// `[example.com/block, example.com/rack, kubernetes.io/hostname]`. A job that asks for one
    /// domain of a level (`muster.dev/topology-required` or `-preferred`) is placed by the
    /// nodes' values of these labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<Vec<String>>,
}

/// `spec.placement` of a MemberCluster.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub enum PlacementPolicy {
    #[default]
    Auto,
    Gates,
    Pinned,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MemberClusterStatus {
    /// `Ready`: the member answers and its nodes and pods are being watched.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Last successful contact (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_contact: Option<String>,
    /// Nodes muster sees.
    #[serde(default)]
    pub nodes: u32,
    /// Sum of node allocatable per resource.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub allocatable: BTreeMap<String, String>,
    /// Allocatable minus what pods and reservations hold, per resource (summed over nodes;
    /// the estimator itself always decides per node).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub free: BTreeMap<String, String>,
    /// How plans are carried out on this member now: `gates` or `pinned`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<String>,
    /// Why that mode (spec, API server version, gates seen dropped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement_reason: Option<String>,
    /// The job kinds the member serves (their CRDs are installed there); a job of another kind
    /// is never sent to it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kinds: Vec<String>,
    /// The member's PriorityClasses; a job whose pods name another is never sent to it. Absent
    /// when muster may not list them there (then they are not checked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_classes: Option<Vec<String>>,
    /// Its Kubeflow Trainer runtimes (`ClusterTrainingRuntime NAME`, `TrainingRuntime NS/NAME`):
    /// a TrainJob is sent only where the runtime it names is the same as the hub's. Absent when
    /// the member does not serve TrainJob or muster may not list them there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtimes: Option<Vec<String>>,
    /// Kinds whose operator is seen not to act there (a copy left without status or pod), with
    /// the evidence: no job of such a kind is sent to it until the operator acts again.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub stalled: BTreeMap<String, String>,
    /// Per topology level of `spec.topology`, how many domains its nodes form.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub topology_domains: BTreeMap<String, u32>,
    /// Why `spec.topology` is not used (a level that is not a label key, or listed twice).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_error: Option<String>,
}

/// Reference to the job a QueuedJob stands for.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct JobRef {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub uid: String,
}

/// One submitted job's place in muster: queue, state, where it runs and why it waits.
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "muster.dev",
    version = "v1alpha1",
    kind = "QueuedJob",
    namespaced,
    status = "QueuedJobStatus",
    shortname = "qj",
    printcolumn = r#"{"name":"Kind","type":"string","jsonPath":".spec.jobRef.kind"}"#,
    printcolumn = r#"{"name":"Queue","type":"string","jsonPath":".status.queue"}"#,
    printcolumn = r#"{"name":"Priority","type":"integer","jsonPath":".status.priority"}"#,
    printcolumn = r#"{"name":"State","type":"string","jsonPath":".status.state"}"#,
    printcolumn = r#"{"name":"Cluster","type":"string","jsonPath":".status.cluster"}"#,
    printcolumn = r#"{"name":"Estimated Start","type":"string","jsonPath":".status.estimate.start"}"#,
    printcolumn = r#"{"name":"Expected Cluster","type":"string","jsonPath":".status.estimate.cluster","priority":1}"#,
    printcolumn = r#"{"name":"Not Before","type":"string","jsonPath":".status.estimate.notBefore","priority":1}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.reason","priority":0}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct QueuedJobSpec {
    pub job_ref: JobRef,
}

// The QueuedJob's status is the record's wire form, which the core owns (both drivers write
// it): see `lifecycle::wire`.
pub use crate::lifecycle::wire::{
    LifecycleStatus, PodCounts, PodPlacement, QueuedJobState, QueuedJobStatus, StartEstimate,
};

/// The quota hierarchy (upstream `scheduling.sigs.k8s.io/v1beta1`). `spec.root` is recursive;
/// its schema preserves unknown fields and muster validates it itself, reporting every
/// problem with its field path in `status` and Events.
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "scheduling.sigs.k8s.io",
    version = "v1beta1",
    kind = "ElasticQuotaTree",
    namespaced,
    status = "ElasticQuotaTreeStatus",
    shortname = "eqt",
    printcolumn = r#"{"name":"Valid","type":"string","jsonPath":".status.conditions[?(@.type==\"Valid\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
pub struct ElasticQuotaTreeSpec {
    /// `{name, namespaces, attributes, min, max, children}`, recursively.
    #[schemars(schema_with = "preserve_unknown_object")]
    pub root: serde_json::Value,
}

impl ElasticQuotaTree {
    /// The object as [`crate::quota::QuotaTree::parse`] reads it.
    pub fn manifest(&self) -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "scheduling.sigs.k8s.io/v1beta1",
            "kind": "ElasticQuotaTree",
            "metadata": {"name": self.metadata.name, "namespace": self.metadata.namespace},
            "spec": self.spec,
        })
    }
}

/// The tree in force among those in the quota namespace: the oldest (ties: the first by name).
pub fn tree_in_force(trees: &[std::sync::Arc<ElasticQuotaTree>]) -> Option<&ElasticQuotaTree> {
    trees
        .iter()
        .min_by_key(|t| {
            (
                t.metadata.creation_timestamp.as_ref().map(|c| c.0),
                t.metadata.name.clone(),
            )
        })
        .map(|t| t.as_ref())
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ElasticQuotaTreeStatus {
    /// `Valid`: the spec in force is this object's current generation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Every problem of the current spec, with its field path.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
    /// Usage per tree node (admitted and dispatched jobs), as Kubernetes quantities.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<QuotaNodeStatus>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct QuotaNodeStatus {
    /// Slash-separated path from the root (`root/research/team-a`).
    pub path: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub used: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub min: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub max: BTreeMap<String, String>,
}

fn preserve_unknown_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true
    })
}

/// The annotation Kubernetes requires on a CRD in a `*.k8s.io` group.
pub const API_APPROVED: &str = "api-approved.kubernetes.io";

/// The three CRDs as the hub needs them, in a stable order.
pub fn all_crds()
-> Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>
{
    use kube::CustomResourceExt;
    let mut eqt = ElasticQuotaTree::crd();
    eqt.metadata.annotations = Some(BTreeMap::from([(
        API_APPROVED.to_string(),
        "https://github.com/kubernetes-sigs/scheduler-plugins/pull/1".to_string(),
    )]));
    vec![MemberCluster::crd(), QueuedJob::crd(), eqt]
        .into_iter()
        .map(known_formats)
        .collect()
}

/// schemars writes `format: uint32` for unsigned integers, a format Kubernetes does not know
/// (kubectl warns on every apply); an unsigned 32-bit count fits `int64`.
fn known_formats(
    crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
) -> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    fn walk(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(m) => {
                let unsigned = m
                    .get("format")
                    .and_then(|f| f.as_str())
                    .is_some_and(|f| f.starts_with("uint"));
                if unsigned {
                    m.insert("format".into(), "int64".into());
                }
                m.values_mut().for_each(walk);
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(walk),
            _ => {}
        }
    }
    let Ok(mut v) = serde_json::to_value(&crd) else {
        return crd;
    };
    walk(&mut v);
    serde_json::from_value(v).unwrap_or(crd)
}

/// The CRDs as one multi-document YAML stream (what `muster crds` prints).
pub fn crds_yaml() -> Result<String, serde_yaml::Error> {
    let mut out = String::new();
    for crd in all_crds() {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(&crd)?);
    }
    Ok(out)
}

/// The first line of every file `crd_files` makes.
pub const GENERATED_HEADER: &str =
    "# Generated from src/controller/crd.rs by `make crds` (muster crds --dir); do not edit.\n";

/// The CRDs as files, one per CRD: `(<group>_<plural>.yaml, contents)`, in `all_crds()` order
/// (what `muster crds --dir DIR` writes, and what `crds/` and `charts/muster/crds/` hold).
pub fn crd_files() -> Result<Vec<(String, String)>, serde_yaml::Error> {
    all_crds()
        .into_iter()
        .map(|crd| {
            let file = format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural);
            Ok((
                file,
                format!("{GENERATED_HEADER}{}", serde_yaml::to_string(&crd)?),
            ))
        })
        .collect()
}
