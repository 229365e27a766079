//! KubeRay's kinds read into pod groups: a RayCluster (its head and worker groups, and the
//! autoscaler container KubeRay adds to the head with in-tree autoscaling) and a RayJob (its
//! cluster, and the submitter KubeRay runs: a Job of one pod in K8sJobMode, a container of the
//! head in SidecarMode).

use super::*;

/// A container with fixed requests and limits, as an operator injects it.
fn injected_container(name: &str, requests: &[(&str, &str)], limits: &[(&str, &str)]) -> Container {
    let list = |pairs: &[(&str, &str)]| -> BTreeMap<String, K8sQuantity> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), K8sQuantity(v.to_string())))
            .collect()
    };
    Container {
        name: name.to_string(),
        resources: Some(ResourceRequirements {
            requests: Some(list(requests)),
            limits: Some(list(limits)),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// KubeRay's default submitter container (ray-project/kuberay,
/// ray-operator/controllers/ray/common/job.go, `GetDefaultSubmitterContainer`, used by
/// `GetSubmitterTemplate` when `spec.submitterPodTemplate` is absent and, always, for
/// SidecarMode): requests cpu 500m / memory 200Mi, limits cpu 1 / memory 1Gi.
fn default_submitter_container() -> Container {
    injected_container(
        "ray-job-submitter",
        &[("cpu", "500m"), ("memory", "200Mi")],
        &[("cpu", "1"), ("memory", "1Gi")],
    )
}

/// A RayCluster spec at `path` (`spec` of a RayCluster, `spec.rayClusterSpec` of a RayJob).
/// `head_extra` are containers the RayJob controller appends to the head pod.
pub(super) fn ray_cluster(
    spec: &Value,
    path: &str,
    head_extra: &[(Container, String)],
    parts: &mut Parts,
) -> Result<(), InterpretError> {
    let head = req_obj(
        spec,
        "headGroupSpec",
        path,
        "a Ray cluster needs a head group",
    )?;
    let hpath = join_key(path, "headGroupSpec");
    let (head_tpl, head_tpath) = pod_template_at(head, "template", &hpath)?;

    // With in-tree autoscaling KubeRay appends the autoscaler container to the head pod
    // (ray-operator/controllers/ray/common/pod.go `BuildAutoscalerContainer`: requests and
    // limits cpu 500m / memory 512Mi), replaced wholesale by `autoscalerOptions.resources`.
    let mut extra: Vec<(Container, String)> = Vec::new();
    if opt_bool(spec, "enableInTreeAutoscaling", path)?.unwrap_or(false) {
        let opts_path = join_key(path, "autoscalerOptions");
        let res_v = spec
            .get("autoscalerOptions")
            .filter(|v| !v.is_null())
            .and_then(|o| o.get("resources"))
            .filter(|v| !v.is_null());
        let container = match res_v {
            Some(v) => {
                let rpath = format!("{opts_path}.resources");
                Container {
                    name: "autoscaler".to_string(),
                    resources: Some(deserialize_at::<ResourceRequirements>(v, &rpath)?),
                    ..Default::default()
                }
            }
            None => injected_container(
                "autoscaler",
                &[("cpu", "500m"), ("memory", "512Mi")],
                &[("cpu", "500m"), ("memory", "512Mi")],
            ),
        };
        extra.push((container, opts_path));
    }
    extra.extend(head_extra.iter().cloned());
    parts.push(template_component(
        "head",
        1,
        &head_tpl,
        &head_tpath,
        &extra,
    )?);

    let groups = match spec.get("workerGroupSpecs") {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Array(a)) => a,
        Some(v) => {
            return Err(err(
                join_key(path, "workerGroupSpecs"),
                format!("expected a list, found {v}"),
            ));
        }
    };
    for (i, g) in groups.iter().enumerate() {
        let gpath = format!("{}[{i}]", join_key(path, "workerGroupSpecs"));
        if !g.is_object() {
            return Err(err(gpath, format!("expected an object, found {g}")));
        }
        let name = opt_str(g, "groupName", &gpath)?
            .filter(|n| !n.is_empty())
            .ok_or_else(|| err(format!("{gpath}.groupName"), "missing"))?;
        let (tpl, tpath) = pod_template_at(g, "template", &gpath)?;
        // KubeRay `GetWorkerGroupDesiredReplicas`: a suspended group has none; otherwise
        // replicas (default minReplicas) clamped to [minReplicas (0), maxReplicas (MaxInt32)],
        // times numOfHosts (1).
        let min = opt_count(g, "minReplicas", &gpath)?.unwrap_or(0);
        let max = opt_count(g, "maxReplicas", &gpath)?.unwrap_or(i32::MAX as u32);
        if min > max {
            return Err(err(
                format!("{gpath}.minReplicas"),
                format!("{min} is greater than maxReplicas {max}"),
            ));
        }
        let replicas = opt_count(g, "replicas", &gpath)?
            .unwrap_or(min)
            .clamp(min, max);
        let hosts = opt_count(g, "numOfHosts", &gpath)?.unwrap_or(1);
        let suspended = opt_bool(g, "suspend", &gpath)?.unwrap_or(false);
        let pods = if suspended {
            0
        } else {
            mul_pods(replicas, hosts, &gpath)?
        };
        parts.push(template_component(name, pods, &tpl, &tpath, &[])?);
    }
    Ok(())
}

pub(super) fn ray_job(spec: &Value, parts: &mut Parts) -> Result<(), InterpretError> {
    if let Some(sel) = spec.get("clusterSelector").filter(|v| !v.is_null())
        && sel.as_object().is_none_or(|m| !m.is_empty())
    {
        return Err(err(
            "spec.clusterSelector",
            "the RayJob runs on an existing RayCluster; muster dispatches whole jobs and \
             cannot place it (use spec.rayClusterSpec)",
        ));
    }
    let mode = opt_str(spec, "submissionMode", "spec")?.unwrap_or("K8sJobMode");
    let head_extra = match mode {
        "K8sJobMode" | "HTTPMode" | "InteractiveMode" => Vec::new(),
        // KubeRay appends the default submitter container to the head pod and ignores
        // submitterPodTemplate in this mode (rayjob_controller.go `getSubmitterContainer`).
        "SidecarMode" => vec![(
            default_submitter_container(),
            "spec.submissionMode(SidecarMode submitter)".to_string(),
        )],
        other => {
            return Err(err(
                "spec.submissionMode",
                format!(
                    "{other:?} is not one of K8sJobMode, HTTPMode, InteractiveMode, SidecarMode"
                ),
            ));
        }
    };
    let cluster = req_obj(
        spec,
        "rayClusterSpec",
        "spec",
        "the RayJob has no rayClusterSpec",
    )?;
    ray_cluster(cluster, "spec.rayClusterSpec", &head_extra, parts)?;

    if mode == "K8sJobMode" {
        // The submitter is a Kubernetes Job with one pod, from spec.submitterPodTemplate or
        // KubeRay's default template (`GetSubmitterTemplate`).
        let t = match spec.get("submitterPodTemplate").filter(|v| !v.is_null()) {
            Some(_) => {
                let (tpl, tpath) = pod_template_at(spec, "submitterPodTemplate", "spec")?;
                template_component("submitter", 1, &tpl, &tpath, &[])?
            }
            None => {
                let tpl = PodTemplateSpec {
                    spec: Some(PodSpec {
                        containers: vec![default_submitter_container()],
                        restart_policy: Some("Never".to_string()),
                        ..Default::default()
                    }),
                    ..Default::default()
                };
                template_component(
                    "submitter",
                    1,
                    &tpl,
                    "spec.submitterPodTemplate(default)",
                    &[],
                )?
            }
        };
        parts.push(t);
    }
    Ok(())
}
