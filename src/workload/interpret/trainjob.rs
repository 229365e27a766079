//! TrainJob (Kubeflow Trainer v2, `trainer.kubeflow.org/v1alpha1`): the JobSet Kubeflow Trainer
//! v2.2.0 builds from the job's training runtime, read as a JobSet.
//!
//! The rules are Trainer's own (`pkg/runtime/core/trainingruntime.go` `newRuntimeInfo` and
//! `mergeRuntimePatches`, `pkg/runtime/framework/plugins/jobset` `Build` and `Builder.Trainer`,
//! the ML-policy plugins' `EnforceMLPolicy`):
//! - the runtime's `spec.template` is the JobSet; each `spec.runtimePatches[].trainingRuntimeSpec`
//!   patch is merged into the replicated job of the same name (strategic merge);
//! - each replicated job's Job runs `count` pods (`parallelism = completions = count`): the
//!   trainer step (label `trainer.kubeflow.org/trainjob-ancestor-step: trainer`) runs the
//!   runtime's `mlPolicy.numNodes` (1 if unset), any other step its template's `parallelism`
//!   (1 if unset); `spec.trainer.numNodes` overrides the trainer step, or, under an MPI policy,
//!   the step named `node` (one less with `runLauncherAsNode`, at least 1);
//! - the trainer step and the initializers run one replica; other steps keep `replicas`;
//! - `spec.trainer.resourcesPerNode` replaces the resources of the trainer step's container
//!   `node` (and of step `node` under MPI with `runLauncherAsNode`).
//!
//! Muster's own pod-template changes (labels, node pinning, its scheduling gate) go into one more
//! runtime patch that the dispatcher appends: each component's template pointer points there.

use serde_json::{Map, Value, json};

use super::{Parts, err, jobset, opt_count, opt_int, opt_str, req_obj};
use crate::workload::{InterpretError, RuntimeKey, RuntimeNeed, TrainingRuntimes};

const TRAINER_GROUP: &str = "trainer.kubeflow.org";
/// The label Trainer reads to know which step of the job a replicated job is.
const ANCESTOR_LABEL: &str = "trainer.kubeflow.org/trainjob-ancestor-step";
const ANCESTOR_TRAINER: &str = "trainer";
const INITIALIZERS: [&str; 2] = ["dataset-initializer", "model-initializer"];
/// The container whose resources `resourcesPerNode` sets.
const NODE: &str = "node";

/// Reads a TrainJob's `spec` against the hub's runtimes; returns the runtime it needs.
pub(super) fn trainjob(
    spec: &Value,
    namespace: &str,
    runtimes: &TrainingRuntimes,
    parts: &mut Parts,
) -> Result<RuntimeNeed, InterpretError> {
    let key = runtime_key(spec, namespace)?;
    let Some(runtime) = runtimes.get(&key) else {
        return Err(err(
            "spec.runtimeRef",
            format!(
                "{key} is not on the hub: muster counts a TrainJob's pods from its runtime \
                 (create the runtime on the hub, as on the members)"
            ),
        ));
    };
    let rt_path = format!("{key}: spec");
    let template = req_obj(&runtime.spec, "template", &rt_path, "no JobSet template")?;
    let tpath = format!("{rt_path}.template");
    let jobset_spec = req_obj(template, "spec", &tpath, "no JobSet spec")?;
    let mut effective = jobset_spec.clone();
    let Some(Value::Array(rjs)) = effective.get_mut("replicatedJobs") else {
        return Err(err(
            format!("{tpath}.spec.replicatedJobs"),
            "missing: the runtime's JobSet has no replicated jobs",
        ));
    };

    // 1. The TrainJob's runtime patches, in order.
    let patches = match spec.get("runtimePatches") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a.clone(),
        Some(v) => {
            return Err(err(
                "spec.runtimePatches",
                format!("expected a list, found {v}"),
            ));
        }
    };
    for (pi, p) in patches.iter().enumerate() {
        let ppath = format!("spec.runtimePatches[{pi}].trainingRuntimeSpec.template.spec");
        let Some(list) = p
            .pointer("/trainingRuntimeSpec/template/spec/replicatedJobs")
            .and_then(Value::as_array)
        else {
            continue;
        };
        for (ji, rp) in list.iter().enumerate() {
            let jpath = format!("{ppath}.replicatedJobs[{ji}]");
            let name = opt_str(rp, "name", &jpath)?.unwrap_or_default();
            let Some(target) = rjs
                .iter_mut()
                .find(|rj| rj.get("name").and_then(Value::as_str) == Some(name))
            else {
                return Err(err(
                    format!("{jpath}.name"),
                    format!("{name:?}: {key} has no replicated job of that name"),
                ));
            };
            if let Some(t) = rp.get("template") {
                let base = target.get("template").cloned().unwrap_or(Value::Null);
                let merged = merge_job_template(&base, t, &format!("{jpath}.template"))?;
                target["template"] = merged;
            }
        }
    }

    // 2. Pods per replicated job and the trainer's overrides.
    let policy = runtime.spec.get("mlPolicy").filter(|p| !p.is_null());
    let ppath = format!("{rt_path}.mlPolicy");
    if policy.is_some_and(|p| p.get("flux").is_some_and(|f| !f.is_null())) {
        return Err(err(
            ppath,
            "a Flux policy adds its own init containers: muster cannot count its pods",
        ));
    }
    let mpi = policy.and_then(|p| p.get("mpi")).filter(|m| !m.is_null());
    let launcher_as_node = mpi
        .and_then(|m| m.get("runLauncherAsNode"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let trainer = spec.get("trainer").filter(|t| !t.is_null());
    let num_nodes = match trainer {
        Some(t) => opt_int(t, "numNodes", "spec.trainer")?,
        None => None,
    };
    if let Some(n) = num_nodes
        && n < 1
    {
        return Err(err(
            "spec.trainer.numNodes",
            format!("{n}: must be at least 1"),
        ));
    }
    let resources = trainer.and_then(|t| t.get("resourcesPerNode")).filter(|r| {
        ["limits", "requests"]
            .iter()
            .any(|k| r.get(*k).is_some_and(Value::is_object))
    });
    for (i, rj) in rjs.iter_mut().enumerate() {
        let path = format!("{tpath}.spec.replicatedJobs[{i}]");
        let name = rj
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let ancestor = rj
            .pointer("/template/metadata/labels")
            .and_then(|l| l.get(ANCESTOR_LABEL))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let is_trainer = ancestor == ANCESTOR_TRAINER;
        let job_spec = rj.pointer("/template/spec").cloned().unwrap_or(Value::Null);
        let mut count = match (is_trainer, policy) {
            (true, Some(p)) => opt_count(p, "numNodes", &ppath)?.unwrap_or(1),
            _ => {
                opt_count(&job_spec, "parallelism", &format!("{path}.template.spec"))?.unwrap_or(1)
            }
        };
        if let Some(n) = num_nodes {
            let n = u32::try_from(n).map_err(|_| err("spec.trainer.numNodes", "too large"))?;
            if mpi.is_some() {
                if name == NODE {
                    count = if launcher_as_node {
                        n.saturating_sub(1).max(1)
                    } else {
                        n
                    };
                }
            } else if is_trainer {
                count = n;
            }
        }
        let replicas = if is_trainer || INITIALIZERS.contains(&ancestor.as_str()) {
            1
        } else {
            opt_count(rj, "replicas", &path)?.unwrap_or(1)
        };
        rj["replicas"] = json!(replicas);
        set(rj, &["template", "spec", "parallelism"], json!(count));
        set(rj, &["template", "spec", "completions"], json!(count));
        if let Some(r) = resources
            && (is_trainer || (launcher_as_node && name == NODE))
            && let Some(Value::Array(cs)) =
                rj.pointer_mut("/template/spec/template/spec/containers")
            && let Some(c) = cs
                .iter_mut()
                .find(|c| c.get("name").and_then(Value::as_str) == Some(NODE))
        {
            let mut req = Map::new();
            for k in ["limits", "requests"] {
                if let Some(v) = r.get(k).filter(|v| v.is_object()) {
                    req.insert(k.to_string(), v.clone());
                }
            }
            c["resources"] = Value::Object(req);
        }
    }

    // 3. The result is a JobSet; errors name the runtime's fields, pointers muster's patch.
    let first = parts.components.len();
    jobset(&effective, parts).map_err(|e| InterpretError {
        field: match e.field.strip_prefix("spec.") {
            Some(rest) => format!("{tpath}.spec.{rest}"),
            None => e.field,
        },
        message: e.message,
    })?;
    let own = patches.len();
    for (i, c) in parts.components[first..].iter_mut().enumerate() {
        c.template_pointer = Some(format!(
            "/spec/runtimePatches/{own}/trainingRuntimeSpec/template/spec/replicatedJobs/{i}/template/spec/template"
        ));
    }
    Ok(RuntimeNeed {
        key,
        digest: runtime.digest.clone(),
    })
}

/// The runtime a TrainJob names (`spec.runtimeRef`, defaults as Trainer's CRD has them).
fn runtime_key(spec: &Value, namespace: &str) -> Result<RuntimeKey, InterpretError> {
    let r = req_obj(spec, "runtimeRef", "spec", "a TrainJob names its runtime")?;
    let name = opt_str(r, "name", "spec.runtimeRef")?
        .filter(|n| !n.is_empty())
        .ok_or_else(|| err("spec.runtimeRef.name", "missing"))?;
    let group = opt_str(r, "apiGroup", "spec.runtimeRef")?.unwrap_or(TRAINER_GROUP);
    if group != TRAINER_GROUP {
        return Err(err(
            "spec.runtimeRef.apiGroup",
            format!("{group:?}: muster reads only {TRAINER_GROUP} runtimes"),
        ));
    }
    match opt_str(r, "kind", "spec.runtimeRef")?.unwrap_or("ClusterTrainingRuntime") {
        "ClusterTrainingRuntime" => Ok(RuntimeKey::cluster(name)),
        "TrainingRuntime" => Ok(RuntimeKey::namespaced(namespace, name)),
        k => Err(err(
            "spec.runtimeRef.kind",
            format!("{k:?}: expected ClusterTrainingRuntime or TrainingRuntime"),
        )),
    }
}

/// Sets `v[path...]`, making objects on the way.
fn set(v: &mut Value, path: &[&str], x: Value) {
    let mut cur = v;
    for k in path {
        if !cur.is_object() {
            *cur = json!({});
        }
        cur = &mut cur[*k];
    }
    *cur = x;
}

/// The strategic merge of a replicated job's Job template with a runtime patch's, for what
/// muster reads: maps merge (a `null` value removes the key), `tolerations` and every other
/// list are replaced, except the lists Kubernetes merges by name (`containers`,
/// `initContainers`, `schedulingGates`, `volumes`): a patch cannot change resources (Trainer's
/// container patches carry env, volume mounts and security context only).
fn merge_job_template(base: &Value, patch: &Value, path: &str) -> Result<Value, InterpretError> {
    merge(base, patch, path, None)
}

fn merge(
    base: &Value,
    patch: &Value,
    path: &str,
    key: Option<&str>,
) -> Result<Value, InterpretError> {
    match (base, patch) {
        (_, Value::Object(p)) => {
            let mut out = match base {
                Value::Object(b) => b.clone(),
                _ => Map::new(),
            };
            for (k, pv) in p {
                if k.starts_with('$') {
                    return Err(err(
                        format!("{path}.{k}"),
                        "strategic-merge directives are not read by muster",
                    ));
                }
                if pv.is_null() {
                    out.remove(k);
                    continue;
                }
                let merged = merge(
                    out.get(k).unwrap_or(&Value::Null),
                    pv,
                    &format!("{path}.{k}"),
                    Some(k),
                )?;
                out.insert(k.clone(), merged);
            }
            Ok(Value::Object(out))
        }
        (Value::Array(b), Value::Array(p))
            if matches!(
                key,
                Some("containers" | "initContainers" | "schedulingGates" | "volumes")
            ) =>
        {
            let mut out = b.clone();
            for (i, item) in p.iter().enumerate() {
                let name = item.get("name").and_then(Value::as_str);
                match out
                    .iter_mut()
                    .find(|x| name.is_some() && x.get("name").and_then(Value::as_str) == name)
                {
                    Some(x) => *x = merge(x, item, &format!("{path}[{i}]"), None)?,
                    None => out.push(item.clone()),
                }
            }
            Ok(Value::Array(out))
        }
        (_, p) => Ok(p.clone()),
    }
}
