//! Dispatch: the member copy of a hub job (suspend cleared, labelled with the hub job's UID, each
//! pod template pinned to the nodes the plan reserved) and its idempotent creation and deletion
//! on exactly the member the core chose. Never chooses a member itself.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams, Preconditions};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use super::kinds;
use super::members::{COMPONENT_LABEL, JOB_UID_LABEL, ORIGIN_LABEL};
use crate::placement::GATE;
use crate::workload::{JobKind, Workload};

/// What muster writes into `managedBy` of a hub batch Job / JobSet so that no controller on the
/// hub acts on it (the member copy does not carry it).
pub const MANAGED_BY: &str = "muster.dev/muster";

/// Labels the API server generates on a batch Job's template and selector; the member's API
/// server generates its own, so the copy must not carry the hub's.
const JOB_GENERATED_LABELS: [&str; 4] = [
    "batch.kubernetes.io/controller-uid",
    "controller-uid",
    "batch.kubernetes.io/job-name",
    "job-name",
];

/// Whether `job`'s template carries labels (and a selector) the hub's API server generated for
/// this one job: a batch Job without a manual selector.
pub(super) fn carries_generated_labels(kind: JobKind, job: &Value) -> bool {
    kind == JobKind::Job
        && job.pointer("/spec/manualSelector").and_then(Value::as_bool) != Some(true)
}

/// Takes the labels the hub's API server generated for a batch Job out of a template's labels.
pub(super) fn drop_generated_labels(labels: &mut serde_json::Map<String, Value>) {
    for k in JOB_GENERATED_LABELS {
        labels.remove(k);
    }
}

/// Builds the member copy of `hub` (the hub job as JSON) for `plan` (`{component: {node: pods}}`).
/// With `gates`, every pod template also carries muster's scheduling gate: its pods wait until
/// muster assigns each one its planned node (see [`super::gates`]).
pub fn member_copy(
    hub: &Value,
    w: &Workload,
    uid: &str,
    origin: &str,
    plan: &BTreeMap<String, BTreeMap<String, u32>>,
    gates: bool,
) -> Value {
    let mut meta = json!({
        "name": w.name,
        "namespace": w.namespace,
        "labels": hub.pointer("/metadata/labels").cloned().unwrap_or_else(|| json!({})),
        "annotations": hub.pointer("/metadata/annotations").cloned().unwrap_or_else(|| json!({})),
    });
    if let Some(a) = meta["annotations"].as_object_mut() {
        a.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
    if let Some(l) = meta["labels"].as_object_mut() {
        l.insert(JOB_UID_LABEL.into(), uid.into());
        l.insert(ORIGIN_LABEL.into(), origin.into());
    }
    let mut obj = json!({
        "apiVersion": hub.get("apiVersion").cloned().unwrap_or_else(|| w.api_version.clone().into()),
        "kind": w.kind.as_str(),
        "metadata": meta,
        "spec": hub.get("spec").cloned().unwrap_or_else(|| json!({})),
    });
    set_pointer(&mut obj, w.kind.suspend_pointer(), Value::Bool(false));
    if matches!(w.kind, JobKind::Job | JobKind::JobSet)
        && obj.pointer("/spec/managedBy").and_then(Value::as_str) == Some(MANAGED_BY)
        && let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut)
    {
        spec.remove("managedBy");
    }
    if carries_generated_labels(w.kind, &obj) {
        if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
            spec.remove("selector");
        }
        if let Some(l) = obj
            .pointer_mut("/spec/template/metadata/labels")
            .and_then(Value::as_object_mut)
        {
            drop_generated_labels(l);
        }
    }
    if w.kind == JobKind::TrainJob {
        add_runtime_patch(&mut obj, w);
    }
    for c in &w.components {
        let Some(tp) = &c.template_pointer else {
            continue;
        };
        set_pointer(
            &mut obj,
            &format!("{tp}/metadata/labels/{}", escape(JOB_UID_LABEL)),
            uid.into(),
        );
        set_pointer(
            &mut obj,
            &format!("{tp}/metadata/labels/{}", escape(COMPONENT_LABEL)),
            c.name.clone().into(),
        );
        let nodes: Vec<&String> = plan
            .get(&c.name)
            .map(|m| m.keys().collect())
            .unwrap_or_default();
        if !nodes.is_empty() {
            pin_to_nodes(&mut obj, tp, &nodes);
        }
        if gates {
            add_gate(&mut obj, tp);
        }
    }
    obj
}

/// A TrainJob's pods are made by Kubeflow Trainer from its runtime: muster's labels, node pins and
/// gate go into one more runtime patch (manager [`MANAGED_BY`]), with one replicated job per
/// component in the order the components' template pointers name. Trainer merges the patch into
/// the runtime's pod templates with a strategic merge, which replaces lists: each template starts
/// with the job's own required node-affinity terms, so that pinning ANDs into them.
fn add_runtime_patch(obj: &mut Value, w: &Workload) {
    let jobs: Vec<Value> = w
        .components
        .iter()
        .map(|c| {
            let mut spec = json!({});
            if let Some(a) = &c.required_node_affinity {
                spec = json!({"affinity": {"nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": a
                }}});
            }
            json!({
                "name": c.name,
                "template": {"spec": {"template": {"metadata": {"labels": {}}, "spec": spec}}},
            })
        })
        .collect();
    let patch = json!({
        "manager": MANAGED_BY,
        "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": jobs}}},
    });
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    match spec.get_mut("runtimePatches") {
        Some(Value::Array(a)) => a.push(patch),
        _ => {
            spec.insert("runtimePatches".into(), Value::Array(vec![patch]));
        }
    }
}

/// Appends muster's scheduling gate to a pod template (once).
fn add_gate(obj: &mut Value, template: &str) {
    let ptr = format!("{template}/spec/schedulingGates");
    let mut gates: Vec<Value> = obj
        .pointer(&ptr)
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if !gates
        .iter()
        .any(|g| g.get("name").and_then(Value::as_str) == Some(GATE))
    {
        gates.push(json!({ "name": GATE }));
    }
    set_pointer(obj, &ptr, Value::Array(gates));
}

/// Restricts the template to the planned nodes: a node field selector may name one node per
/// requirement, so every existing required node-selector term (they are ORed) is repeated once
/// per planned node with `metadata.name In [node]` ANDed in; with no terms, one term per node.
fn pin_to_nodes(obj: &mut Value, template: &str, nodes: &[&String]) {
    let ptr = format!(
        "{template}/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms"
    );
    let existing: Vec<Value> = obj
        .pointer(&ptr)
        .and_then(Value::as_array)
        .filter(|t| !t.is_empty())
        .cloned()
        .unwrap_or_else(|| vec![json!({})]);
    let mut terms = Vec::new();
    for t in &existing {
        for n in nodes {
            let mut term = t.clone();
            if !term.is_object() {
                term = json!({});
            }
            let req = json!({"key": "metadata.name", "operator": "In", "values": [n]});
            match term.get_mut("matchFields").and_then(Value::as_array_mut) {
                Some(a) => a.push(req),
                None => term["matchFields"] = json!([req]),
            }
            terms.push(term);
        }
    }
    set_pointer(obj, &ptr, Value::Array(terms));
}

fn escape(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

/// Sets the value at a JSON pointer, creating the objects on the way.
pub fn set_pointer(obj: &mut Value, pointer: &str, value: Value) {
    let mut cur = obj;
    let segs: Vec<String> = pointer
        .split('/')
        .skip(1)
        .map(|s| s.replace("~1", "/").replace("~0", "~"))
        .collect();
    for (i, seg) in segs.iter().enumerate() {
        let last = i + 1 == segs.len();
        if let Value::Array(a) = cur {
            let Some(item) = seg.parse::<usize>().ok().and_then(|n| a.get_mut(n)) else {
                return;
            };
            if last {
                *item = value;
                return;
            }
            cur = item;
            continue;
        }
        if !cur.is_object() {
            *cur = json!({});
        }
        let Some(map) = cur.as_object_mut() else {
            return;
        };
        if last {
            map.insert(seg.clone(), value);
            return;
        }
        cur = map.entry(seg.clone()).or_insert_with(|| json!({}));
    }
}

/// Why a dispatch did not happen (retried on the next sync unless `Conflict`).
#[derive(Debug, thiserror::Error)]
pub enum DispatchError {
    #[error("{0}")]
    Api(#[from] kube::Error),
    #[error("{0}")]
    Invalid(String),
    #[error("{kind} {namespace}/{name} already exists on {cluster} and is not this job's copy")]
    Conflict {
        kind: JobKind,
        namespace: String,
        name: String,
        cluster: String,
    },
    /// An object with the job's name and UID label that does not carry muster's admission
    /// annotation: muster did not make it (for any admission). Neither adopted nor deleted;
    /// the create fails until it goes, or the job is placed elsewhere.
    #[error(
        "{kind} {namespace}/{name} on {cluster} carries this job's UID label but not this admission's annotation {ADMISSION_ANNOTATION}={admission:?}: muster did not make it for this admission; not adopted, not deleted"
    )]
    NotMusters {
        kind: JobKind,
        namespace: String,
        name: String,
        cluster: String,
        admission: String,
    },
    /// The job's copy there was made for an earlier admission (another plan): it is deleted
    /// before this one is made.
    #[error("{kind} {namespace}/{name} on {cluster} is a copy made for an earlier admission")]
    Earlier {
        kind: JobKind,
        namespace: String,
        name: String,
        cluster: String,
    },
}

/// The annotation on a copy naming the admission it was made for (its time, ms).
pub const ADMISSION_ANNOTATION: &str = "muster.dev/admission";

/// What an existing object of the copy's name is to a create of the copy for the admission
/// `admission` (the copy's [`ADMISSION_ANNOTATION`]) of hub job `uid`.
#[derive(Debug, PartialEq, Eq)]
pub enum Existing {
    /// The copy made for this admission (its create's answer was lost): adopted.
    Adopt,
    /// A copy made for an earlier admission: deleted before this one is made.
    Earlier,
    /// The job's UID label without this admission's annotation, or with none expected: not
    /// muster's for this admission. Left alone.
    NotMusters,
    /// Another object (not labelled with the job's UID): left alone.
    Foreign,
}

/// Judges `existing` for the create of hub job `uid`'s copy for `admission`. Only an object
/// that carries exactly the annotation this admission writes is adopted: a label alone is what
/// anyone who can create the object can write.
pub fn existing(existing: &DynamicObject, uid: &str, admission: Option<&str>) -> Existing {
    if existing.labels().get(JOB_UID_LABEL).map(String::as_str) != Some(uid) {
        return Existing::Foreign;
    }
    let made_for = existing
        .annotations()
        .get(ADMISSION_ANNOTATION)
        .map(String::as_str);
    match (made_for, admission) {
        (Some(a), Some(b)) if a == b => Existing::Adopt,
        (Some(_), Some(_)) => Existing::Earlier,
        _ => Existing::NotMusters,
    }
}

/// Whether `o` says muster made it (for some admission): what muster deletes must.
pub fn made_by_muster(o: &DynamicObject) -> bool {
    o.annotations().contains_key(ADMISSION_ANNOTATION)
}

/// `copy` marked as made for the admission at `admitted_at`.
pub fn for_admission(copy: &mut Value, admitted_at: u64) {
    if let Some(meta) = copy.get_mut("metadata").and_then(Value::as_object_mut) {
        let a = meta.entry("annotations").or_insert_with(|| json!({}));
        if let Some(a) = a.as_object_mut() {
            a.insert(ADMISSION_ANNOTATION.into(), json!(admitted_at.to_string()));
        }
    }
}

impl DispatchError {
    /// The metrics label for this failure.
    pub fn failure(&self) -> crate::metrics::DispatchFailure {
        use crate::metrics::DispatchFailure as F;
        match self.reason() {
            "unreachable" => F::Unreachable,
            "invalid" | "forbidden" => F::Refused,
            "conflict" | "not_musters" => F::Conflict,
            _ => F::Other,
        }
    }

    /// A short, bounded reason for logs and Events.
    pub fn reason(&self) -> &'static str {
        match self {
            DispatchError::Api(kube::Error::Api(e)) if e.code == 422 => "invalid",
            DispatchError::Api(kube::Error::Api(e)) if e.code == 403 => "forbidden",
            DispatchError::Api(kube::Error::Api(_)) => "api_error",
            DispatchError::Api(_) => "unreachable",
            DispatchError::Invalid(_) => "invalid",
            DispatchError::Conflict { .. } => "conflict",
            DispatchError::NotMusters { .. } => "not_musters",
            DispatchError::Earlier { .. } => "earlier_copy",
        }
    }
}

/// Creates the copy on the member (namespace ensured, made with `ns_labels`: the hub
/// namespace's pod-security labels). Idempotent: an existing copy made for the same admission
/// (the job's UID label and this admission's annotation) counts as created; one made for an
/// earlier admission is [`DispatchError::Earlier`]; any other object of that name is left alone
/// ([`Existing`]).
pub async fn create(
    member: &Client,
    cluster: &str,
    kind: JobKind,
    copy: &Value,
    ns_labels: &std::collections::BTreeMap<String, String>,
) -> Result<DynamicObject, DispatchError> {
    let ns = copy
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let name = copy
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let uid = copy
        .pointer(&format!("/metadata/labels/{}", escape(JOB_UID_LABEL)))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let api: Api<DynamicObject> =
        Api::namespaced_with(member.clone(), &ns, &kinds::api_resource(kind));
    let obj: DynamicObject =
        serde_json::from_value(copy.clone()).map_err(|e| DispatchError::Invalid(e.to_string()))?;
    // The namespace is made only when the member says it is missing (one request per copy, not
    // two).
    let first = match api.create(&PostParams::default(), &obj).await {
        Err(kube::Error::Api(e)) if e.code == 404 => {
            let namespaces: Api<Namespace> = Api::all(member.clone());
            let nsobj: Namespace =
                serde_json::from_value(json!({"metadata": {"name": ns, "labels": ns_labels}}))
                    .map_err(|e| DispatchError::Invalid(e.to_string()))?;
            match namespaces.create(&PostParams::default(), &nsobj).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
            None
        }
        other => Some(other),
    };
    let created = match first {
        Some(r) => r,
        None => api.create(&PostParams::default(), &obj).await,
    };
    match created {
        Ok(o) => Ok(o),
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let found = api.get(&name).await?;
            let admission = obj.annotations().get(ADMISSION_ANNOTATION).cloned();
            let cluster = cluster.to_string();
            match existing(&found, &uid, admission.as_deref()) {
                Existing::Adopt => Ok(found),
                Existing::Earlier => Err(DispatchError::Earlier {
                    kind,
                    namespace: ns,
                    name,
                    cluster,
                }),
                Existing::NotMusters => {
                    tracing::warn!(member = %cluster, namespace = %ns, %name, %kind,
                        "an object with this job's name and UID label that muster did not make for this admission is there: not adopted, not deleted");
                    Err(DispatchError::NotMusters {
                        kind,
                        namespace: ns,
                        name,
                        cluster,
                        admission: admission.unwrap_or_default(),
                    })
                }
                Existing::Foreign => Err(DispatchError::Conflict {
                    kind,
                    namespace: ns,
                    name,
                    cluster,
                }),
            }
        }
        Err(e) => Err(e.into()),
    }
}

/// Deletes the member copy of hub job `uid`, if that is what `namespace/name` is there: the
/// job's UID label and muster's admission annotation ([`made_by_muster`]); anything else is
/// left alone.
/// Returns whether something was deleted (or was already gone: false).
pub async fn delete(
    member: &Client,
    kind: JobKind,
    namespace: &str,
    name: &str,
    uid: &str,
) -> Result<bool, kube::Error> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(member.clone(), namespace, &kinds::api_resource(kind));
    let existing = match api.get_opt(name).await? {
        Some(o) => o,
        None => return Ok(false),
    };
    if existing.labels().get(JOB_UID_LABEL).map(String::as_str) != Some(uid)
        || !made_by_muster(&existing)
    {
        return Ok(false);
    }
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid: existing.metadata.uid.clone(),
            resource_version: None,
        }),
        ..DeleteParams::background()
    };
    match api.delete(name, &dp).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
#[path = "dispatch_tests.rs"]
mod tests;
