//! The workload interpreter: reads a job manifest exactly as a user submits it and returns the
//! [`Workload`] its operator would run (pod counts, effective per-pod requests, constraints).
//!
//! Pod templates are read with k8s-openapi's own types through `serde_path_to_error`, so a
//! structural problem names its full path. k8s-openapi 0.29's `Quantity` deserializer accepts
//! JSON/YAML numbers (`nvidia.com/gpu: 1`, `cpu: 0.5`) and turns them into their decimal string,
//! so no normalisation is needed before deserializing; every quantity is then parsed exactly by
//! [`crate::quantity::Quantity::parse`].

use k8s_openapi::api::batch::v1::{JobSpec, JobTemplateSpec};
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

use super::{
    CLUSTER_SELECTOR_ANNOTATION, CLUSTERS_ANNOTATION, ClusterRestriction, Component,
    InterpretError, JobKind, TrainingRuntimes, Workload,
};
use crate::labels::LabelSelector;
use crate::quantity::{Quantity, ResourceList};
use crate::topology::TopologyAsk;

mod ray;
mod requests;
mod trainjob;
use requests::pod_requests;
pub use requests::pod_spec_requests;

fn err(field: impl Into<String>, message: impl Into<String>) -> InterpretError {
    InterpretError::new(field, message)
}

/// Appends a map key to a path: `a.b` for plain keys, `a[nvidia.com/gpu]` for keys that
/// contain anything but letters, digits, `-` and `_`.
fn join_key(path: &str, key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    match (path.is_empty(), plain) {
        (true, true) => key.to_string(),
        (false, true) => format!("{path}.{key}"),
        (_, false) => format!("{path}[{key}]"),
    }
}

/// Deserializes `value` (found at `path`) into a k8s-openapi type, naming the exact field that
/// does not fit.
fn deserialize_at<T: DeserializeOwned>(value: &Value, path: &str) -> Result<T, InterpretError> {
    serde_path_to_error::deserialize::<_, T>(value).map_err(|e| {
        let mut field = path.to_string();
        for seg in e.path().iter() {
            use serde_path_to_error::Segment;
            field = match seg {
                Segment::Seq { index } => format!("{field}[{index}]"),
                Segment::Map { key } => join_key(&field, key),
                Segment::Enum { variant } => join_key(&field, variant),
                Segment::Unknown => format!("{field}.?"),
            };
        }
        err(field, e.into_inner().to_string())
    })
}

/// An optional integer field (`replicas: 2`); `null`/absent is `None`.
fn opt_int(obj: &Value, key: &str, path: &str) -> Result<Option<i64>, InterpretError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_i64().map(Some).ok_or_else(|| {
            err(
                join_key(path, key),
                format!("expected an integer, found {v}"),
            )
        }),
    }
}

/// An optional non-negative count that fits a Kubernetes int32.
fn opt_count(obj: &Value, key: &str, path: &str) -> Result<Option<u32>, InterpretError> {
    match opt_int(obj, key, path)? {
        None => Ok(None),
        Some(n) if n < 0 => Err(err(join_key(path, key), format!("{n} is negative"))),
        Some(n) if n > i64::from(i32::MAX) => Err(err(
            join_key(path, key),
            format!("{n} is larger than the int32 Kubernetes allows"),
        )),
        Some(n) => Ok(Some(n as u32)),
    }
}

fn opt_bool(obj: &Value, key: &str, path: &str) -> Result<Option<bool>, InterpretError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(err(
            join_key(path, key),
            format!("expected true or false, found {v}"),
        )),
    }
}

fn opt_str<'a>(obj: &'a Value, key: &str, path: &str) -> Result<Option<&'a str>, InterpretError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(v) => Err(err(
            join_key(path, key),
            format!("expected a string, found {v}"),
        )),
    }
}

/// A required object field; absent, `null` or not an object is an error naming it.
fn req_obj<'a>(
    obj: &'a Value,
    key: &str,
    path: &str,
    what: &str,
) -> Result<&'a Value, InterpretError> {
    match obj.get(key) {
        None | Some(Value::Null) => Err(err(join_key(path, key), format!("missing: {what}"))),
        Some(v @ Value::Object(_)) => Ok(v),
        Some(v) => Err(err(
            join_key(path, key),
            format!("expected an object, found {v}"),
        )),
    }
}

fn mul_pods(a: u32, b: u32, path: &str) -> Result<u32, InterpretError> {
    a.checked_mul(b).ok_or_else(|| {
        err(
            path,
            format!("{a} x {b} pods is more than muster can count"),
        )
    })
}

/// Turns a field path of this module (`spec.a[nvidia.com/gpu].b[0]`) into a JSON pointer
/// (`/spec/a/nvidia.com~1gpu/b/0`); `None` for a synthetic path such as `x(default)`.
fn path_to_pointer(path: &str) -> Option<String> {
    if path.contains('(') {
        return None;
    }
    let mut segs: Vec<String> = Vec::new();
    let mut cur = String::new();
    let mut chars = path.chars();
    while let Some(ch) = chars.next() {
        match ch {
            '.' => segs.push(std::mem::take(&mut cur)),
            '[' => {
                if !cur.is_empty() {
                    segs.push(std::mem::take(&mut cur));
                }
                let key: String = chars.by_ref().take_while(|c| *c != ']').collect();
                segs.push(key);
                // A `.` after `]` starts the next segment; skip it so it doesn't push "".
                cur.clear();
            }
            c => cur.push(c),
        }
    }
    if !cur.is_empty() {
        segs.push(cur);
    }
    let mut out = String::new();
    for s in segs.iter().filter(|s| !s.is_empty()) {
        out.push('/');
        out.push_str(&s.replace('~', "~0").replace('/', "~1"));
    }
    Some(out)
}

/// What one pod template contributes.
struct Template {
    component: Component,
    priority_class: Option<String>,
}

fn template_component(
    name: &str,
    pods: u32,
    template: &PodTemplateSpec,
    template_path: &str,
    extra: &[(Container, String)],
) -> Result<Template, InterpretError> {
    let spec_path = format!("{template_path}.spec");
    let Some(spec) = &template.spec else {
        return Err(err(spec_path, "missing: the pod template has no spec"));
    };
    if spec.containers.is_empty() {
        // k8s-openapi defaults a missing list to empty; the API server would reject the pod.
        return Err(err(
            format!("{spec_path}.containers"),
            "missing: a pod needs at least one container",
        ));
    }
    let requests = pod_requests(spec, &spec_path, extra)?;
    let required_node_affinity = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|na| {
            na.required_during_scheduling_ignored_during_execution
                .clone()
        });
    Ok(Template {
        component: Component {
            name: name.to_string(),
            pods,
            requests,
            node_selector: spec.node_selector.clone().unwrap_or_default(),
            tolerations: spec.tolerations.clone().unwrap_or_default(),
            required_node_affinity,
            template_pointer: path_to_pointer(template_path),
            staged: false,
            topology: topology_ask(template, template_path)?,
        },
        priority_class: spec.priority_class_name.clone().filter(|s| !s.is_empty()),
    })
}

/// A pod template's own topology ask (its metadata's annotations).
fn topology_ask(
    template: &PodTemplateSpec,
    template_path: &str,
) -> Result<Option<TopologyAsk>, InterpretError> {
    let Some(ann) = template
        .metadata
        .as_ref()
        .and_then(|m| m.annotations.as_ref())
    else {
        return Ok(None);
    };
    crate::topology::read_ask(ann, &format!("{template_path}.metadata.annotations"), false)
        .map_err(|(field, message)| err(field, message))
}

/// Reads `obj[key]` as a pod template (required).
/// A copy of `v` keeping only `keys` when it is an object (anything else is kept whole, so the
/// deserializer reports it).
fn pick(v: &Value, keys: &[&str], f: impl Fn(&str, &Value) -> Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| keys.contains(&k.as_str()))
                .map(|(k, x)| (k.clone(), f(k, x)))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn keep(_: &str, v: &Value) -> Value {
    v.clone()
}

fn prune_containers(v: &Value) -> Value {
    match v {
        Value::Array(a) => Value::Array(
            a.iter()
                .map(|c| pick(c, &["name", "resources", "restartPolicy"], keep))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// The part of a pod template muster reads. Fields it never reads (volumes, env, probes, ...)
/// are dropped before deserializing, so they cannot reject a job the API server accepts: e.g.
/// KubeRay's own `ray-cluster.autoscaler.yaml` has `defaultMode: 0777`, an octal int to kubectl
/// (YAML 1.1) but the string "0777" to serde_yaml (YAML 1.2). Paths are unchanged (list
/// indices are kept), so errors in what is read still name the exact field.
fn prune_pod_template(v: &Value) -> Value {
    pick(v, &["metadata", "spec"], |k, spec| {
        if k == "metadata" {
            return pick(spec, &["annotations"], keep);
        }
        pick(
            spec,
            &[
                "containers",
                "initContainers",
                "overhead",
                "resources",
                "nodeSelector",
                "tolerations",
                "affinity",
                "priorityClassName",
            ],
            |k, x| match k {
                "containers" | "initContainers" => prune_containers(x),
                "affinity" => pick(x, &["nodeAffinity"], |_, na| {
                    pick(
                        na,
                        &["requiredDuringSchedulingIgnoredDuringExecution"],
                        keep,
                    )
                }),
                _ => x.clone(),
            },
        )
    })
}

/// The part of a Job spec muster reads (see [`prune_pod_template`]).
fn prune_job_spec(v: &Value) -> Value {
    pick(v, &["parallelism", "completions", "template"], |k, x| {
        if k == "template" {
            prune_pod_template(x)
        } else {
            x.clone()
        }
    })
}

fn pod_template_at(
    obj: &Value,
    key: &str,
    path: &str,
) -> Result<(PodTemplateSpec, String), InterpretError> {
    let v = req_obj(obj, key, path, "no pod template")?;
    let tpath = join_key(path, key);
    Ok((
        deserialize_at::<PodTemplateSpec>(&prune_pod_template(v), &tpath)?,
        tpath,
    ))
}

/// Accumulates components and priority classes while a kind is read.
#[derive(Default)]
struct Parts {
    components: Vec<Component>,
    priority_class_names: BTreeSet<String>,
    pod_priority_classes: BTreeSet<String>,
}

impl Parts {
    fn push(&mut self, t: Template) {
        if let Some(pc) = t.priority_class {
            self.pod_priority_classes.insert(pc.clone());
            self.priority_class_names.insert(pc);
        }
        self.components.push(t.component);
    }
}

/// Interprets a job manifest (already parsed from YAML or JSON). A TrainJob needs its training
/// runtime: see [`interpret_with`].
pub fn interpret(manifest: &Value) -> Result<Workload, InterpretError> {
    interpret_with(manifest, &TrainingRuntimes::default())
}

/// Interprets a job manifest; a TrainJob is read against `runtimes` (the hub's).
pub fn interpret_with(
    manifest: &Value,
    runtimes: &TrainingRuntimes,
) -> Result<Workload, InterpretError> {
    if !manifest.is_object() {
        return Err(err(
            ".",
            format!("a manifest must be an object, found {manifest}"),
        ));
    }
    let api_version =
        opt_str(manifest, "apiVersion", "")?.ok_or_else(|| err("apiVersion", "missing"))?;
    let kind_str = opt_str(manifest, "kind", "")?.ok_or_else(|| err("kind", "missing"))?;
    let kind = match JobKind::from_type(api_version, kind_str) {
        Some(k) => k,
        None => {
            return Err(match JobKind::ALL.iter().find(|k| k.as_str() == kind_str) {
                Some(k) => err(
                    "apiVersion",
                    format!(
                        "{kind_str} must have apiVersion {}, not {api_version:?}",
                        k.api_versions().join(" or ")
                    ),
                ),
                None => err(
                    "kind",
                    format!(
                        "muster cannot interpret kind {kind_str:?} (apiVersion {api_version:?}); \
                         it understands {}",
                        JobKind::ALL
                            .iter()
                            .map(|k| format!("{}/{}", k.api_version(), k))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ),
            });
        }
    };

    let meta: ObjectMeta = match manifest.get("metadata") {
        None | Some(Value::Null) => return Err(err("metadata", "missing")),
        Some(m) => deserialize_at(
            &pick(
                m,
                &[
                    "name",
                    "generateName",
                    "namespace",
                    "uid",
                    "labels",
                    "annotations",
                ],
                keep,
            ),
            "metadata",
        )?,
    };
    let name = match meta.name.as_deref() {
        Some(n) if !n.is_empty() => n.to_string(),
        _ if meta.generate_name.is_some() => {
            return Err(err(
                "metadata.name",
                "missing: only generateName is set; muster needs the name the API server \
                 assigns on create",
            ));
        }
        _ => return Err(err("metadata.name", "missing")),
    };
    let namespace = meta
        .namespace
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "default".to_string());
    let annotations = meta.annotations.clone().unwrap_or_default();
    let candidates = cluster_restriction(&annotations)?;
    let topology = crate::topology::read_ask(&annotations, "metadata.annotations", true)
        .map_err(|(field, message)| err(field, message))?;

    let spec = match manifest.get("spec") {
        Some(s @ Value::Object(_)) => s,
        None | Some(Value::Null) => return Err(err("spec", "missing: the job has no spec")),
        Some(v) => return Err(err("spec", format!("expected an object, found {v}"))),
    };

    let mut parts = Parts::default();
    let mut runtime = None;
    match kind {
        JobKind::PyTorchJob => kubeflow(spec, "pytorchReplicaSpecs", kind, &mut parts)?,
        JobKind::TFJob => kubeflow(spec, "tfReplicaSpecs", kind, &mut parts)?,
        JobKind::XGBoostJob => kubeflow(spec, "xgbReplicaSpecs", kind, &mut parts)?,
        JobKind::PaddleJob => kubeflow(spec, "paddleReplicaSpecs", kind, &mut parts)?,
        JobKind::JAXJob => kubeflow(spec, "jaxReplicaSpecs", kind, &mut parts)?,
        JobKind::MPIJob => kubeflow(spec, "mpiReplicaSpecs", kind, &mut parts)?,
        JobKind::Job => batch_job(spec, &mut parts)?,
        JobKind::JobSet => jobset(spec, &mut parts)?,
        JobKind::TrainJob => {
            runtime = Some(trainjob::trainjob(spec, &namespace, runtimes, &mut parts)?);
        }
        JobKind::RayCluster => ray::ray_cluster(spec, "spec", &[], &mut parts)?,
        JobKind::RayJob => ray::ray_job(spec, &mut parts)?,
    }
    // What the operators create only once the rest runs (JobSet's stages are read with it).
    for c in &mut parts.components {
        c.staged |= matches!(
            (kind, c.name.as_str()),
            (JobKind::MPIJob, "launcher") | (JobKind::RayJob, "submitter")
        );
    }

    let mut seen = BTreeSet::new();
    for c in &parts.components {
        if !seen.insert(c.name.as_str()) {
            return Err(err(
                "spec",
                format!(
                    "two pod templates are both named {:?}; muster needs distinct component names",
                    c.name
                ),
            ));
        }
    }

    let workload = Workload {
        kind,
        api_version: api_version.to_string(),
        namespace,
        name,
        uid: meta.uid.clone(),
        labels: meta.labels.clone().unwrap_or_default(),
        annotations,
        components: parts.components,
        priority_class_names: parts.priority_class_names,
        pod_priority_classes: parts.pod_priority_classes,
        candidates,
        runtime,
        topology,
    };
    if workload.topology.is_some()
        && let Some(c) = workload.components.iter().find(|c| c.topology.is_some())
    {
        return Err(err(
            format!("metadata.annotations[{}]", crate::topology::REQUIRED),
            format!(
                "the job asks for one domain for all its pods and its {} pods ask for their own; \
                 ask on the job or on its pod templates, not both",
                c.name
            ),
        ));
    }
    if workload.pod_count() == 0 {
        return Err(err(
            "spec",
            format!(
                "{kind} {} has no pods ({})",
                workload.key(),
                workload
                    .components
                    .iter()
                    .map(|c| format!("{} 0", c.name))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    Ok(workload)
}

fn cluster_restriction(
    annotations: &BTreeMap<String, String>,
) -> Result<ClusterRestriction, InterpretError> {
    let mut r = ClusterRestriction::default();
    if let Some(list) = annotations.get(CLUSTERS_ANNOTATION) {
        let names: BTreeSet<String> = list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        if names.is_empty() {
            return Err(err(
                format!("metadata.annotations[{CLUSTERS_ANNOTATION}]"),
                "lists no cluster (remove the annotation to allow every cluster)",
            ));
        }
        r.names = Some(names);
    }
    if let Some(s) = annotations.get(CLUSTER_SELECTOR_ANNOTATION) {
        let sel = LabelSelector::parse(s).map_err(|e| {
            err(
                format!("metadata.annotations[{CLUSTER_SELECTOR_ANNOTATION}]"),
                e,
            )
        })?;
        if !sel.is_empty() {
            r.selector = Some(sel);
        }
    }
    Ok(r)
}

/// Kubeflow training-operator v1 kinds and the mpi-operator's v2beta1 MPIJob:
/// `spec.<field>` maps a replica type (`Master`, `Worker`, `Launcher`, ...) to
/// `{replicas, template}`.
fn kubeflow(
    spec: &Value,
    field: &str,
    kind: JobKind,
    parts: &mut Parts,
) -> Result<(), InterpretError> {
    let path = format!("spec.{field}");
    let specs = match spec.get(field) {
        Some(Value::Object(m)) if !m.is_empty() => m,
        Some(Value::Object(_)) | None | Some(Value::Null) => {
            return Err(err(
                path,
                format!("missing: a {kind} needs at least one replica spec"),
            ));
        }
        Some(v) => return Err(err(path, format!("expected an object, found {v}"))),
    };
    for (rtype, rspec) in specs {
        let rpath = join_key(&path, rtype);
        if !rspec.is_object() {
            return Err(err(
                rpath,
                format!("expected a replica spec object, found {rspec}"),
            ));
        }
        // Operator defaulting: 1 replica, except MPIJob workers (0 in both the training-operator
        // v1 and the mpi-operator v2beta1 `SetDefaults_MPIJob`).
        let default = if kind == JobKind::MPIJob && rtype == "Worker" {
            0
        } else {
            1
        };
        let replicas = opt_count(rspec, "replicas", &rpath)?.unwrap_or(default);
        let (template, tpath) = pod_template_at(rspec, "template", &rpath)?;
        parts.push(template_component(
            &rtype.to_lowercase(),
            replicas,
            &template,
            &tpath,
            &[],
        )?);
    }
    // spec.runPolicy.schedulingPolicy.priorityClass (training-operator v1 and mpi-operator).
    if let Some(run_policy) = spec.get("runPolicy").filter(|v| !v.is_null())
        && let Some(sp) = run_policy.get("schedulingPolicy").filter(|v| !v.is_null())
        && let Some(pc) = opt_str(sp, "priorityClass", "spec.runPolicy.schedulingPolicy")?
        && !pc.is_empty()
    {
        parts.priority_class_names.insert(pc.to_string());
    }
    Ok(())
}

/// Pods a Job runs at once: parallelism (default 1), never more than completions.
fn job_pods(js: &JobSpec, path: &str) -> Result<u32, InterpretError> {
    let count = |v: Option<i32>, key: &str| -> Result<Option<u32>, InterpretError> {
        match v {
            None => Ok(None),
            Some(n) if n < 0 => Err(err(join_key(path, key), format!("{n} is negative"))),
            Some(n) => Ok(Some(n as u32)),
        }
    };
    let parallelism = count(js.parallelism, "parallelism")?.unwrap_or(1);
    let completions = count(js.completions, "completions")?;
    Ok(completions.map_or(parallelism, |c| parallelism.min(c)))
}

fn batch_job(spec: &Value, parts: &mut Parts) -> Result<(), InterpretError> {
    req_obj(spec, "template", "spec", "no pod template")?;
    let js: JobSpec = deserialize_at(&prune_job_spec(spec), "spec")?;
    let pods = job_pods(&js, "spec")?;
    parts.push(template_component(
        "job",
        pods,
        &js.template,
        "spec.template",
        &[],
    )?);
    Ok(())
}

fn jobset(spec: &Value, parts: &mut Parts) -> Result<(), InterpretError> {
    let rjs = match spec.get("replicatedJobs") {
        Some(Value::Array(a)) if !a.is_empty() => a,
        Some(Value::Array(_)) | None | Some(Value::Null) => {
            return Err(err(
                "spec.replicatedJobs",
                "missing: a JobSet needs at least one replicated job",
            ));
        }
        Some(v) => {
            return Err(err(
                "spec.replicatedJobs",
                format!("expected a list, found {v}"),
            ));
        }
    };
    let in_order = spec
        .pointer("/startupPolicy/startupPolicyOrder")
        .and_then(Value::as_str)
        == Some("InOrder");
    for (i, rj) in rjs.iter().enumerate() {
        let path = format!("spec.replicatedJobs[{i}]");
        if !rj.is_object() {
            return Err(err(path, format!("expected an object, found {rj}")));
        }
        let name = opt_str(rj, "name", &path)?
            .filter(|n| !n.is_empty())
            .ok_or_else(|| err(format!("{path}.name"), "missing"))?;
        let replicas = opt_count(rj, "replicas", &path)?.unwrap_or(1);
        let tv = req_obj(rj, "template", &path, "no Job template")?;
        let tpath = format!("{path}.template");
        let jspec_v = req_obj(tv, "spec", &tpath, "no Job spec")?;
        let jpath = format!("{tpath}.spec");
        req_obj(jspec_v, "template", &jpath, "no pod template")?;
        let jt: JobTemplateSpec =
            deserialize_at(&pick(tv, &["spec"], |_, x| prune_job_spec(x)), &tpath)?;
        let Some(js) = &jt.spec else {
            return Err(err(jpath, "missing: no Job spec"));
        };
        let per_job = job_pods(js, &jpath)?;
        let pods = mul_pods(replicas, per_job, &path)?;
        let mut t =
            template_component(name, pods, &js.template, &format!("{jpath}.template"), &[])?;
        // Created only once the earlier ones are ready: in order, or after what it depends on.
        let depends = rj
            .get("dependsOn")
            .and_then(Value::as_array)
            .is_some_and(|d| !d.is_empty());
        t.component.staged = depends || (i > 0 && in_order);
        parts.push(t);
    }
    Ok(())
}

#[cfg(test)]
mod pointer_tests {
    use super::path_to_pointer;

    #[test]
    fn field_paths_become_json_pointers() {
        assert_eq!(
            path_to_pointer("spec.pytorchReplicaSpecs.Worker.template").as_deref(),
            Some("/spec/pytorchReplicaSpecs/Worker/template")
        );
        assert_eq!(
            path_to_pointer("spec.replicatedJobs[1].template.spec.template").as_deref(),
            Some("/spec/replicatedJobs/1/template/spec/template")
        );
        assert_eq!(
            path_to_pointer("spec.x[a/b~c].template").as_deref(),
            Some("/spec/x/a~1b~0c/template")
        );
        assert_eq!(path_to_pointer("spec.submitterPodTemplate(default)"), None);
    }
}

#[cfg(test)]
#[path = "interpret_tests.rs"]
mod tests;
