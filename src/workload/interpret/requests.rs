//! Kubernetes' effective-request rules: what one pod asks of a node (containers, sidecars and
//! init containers, pod-level resources, overhead), and what the API server refuses in a
//! container's resources, refused here first with the field.

use super::*;

/// Parses a resource map (`requests`, `limits`, `overhead`), naming the bad entry.
fn parse_resources(
    map: Option<&BTreeMap<String, K8sQuantity>>,
    path: &str,
) -> Result<ResourceList, InterpretError> {
    let mut out = ResourceList::new();
    for (name, q) in map.into_iter().flatten() {
        let field = format!("{path}[{name}]");
        let v = Quantity::parse(&q.0).map_err(|e| err(&field, e.to_string()))?;
        if v.is_negative() {
            return Err(err(&field, format!("{:?} is negative", q.0)));
        }
        out.set(name.clone(), v);
    }
    Ok(out)
}

/// A container's requests after API defaulting: a limit without a request is the request.
fn container_requests(c: &Container, path: &str) -> Result<ResourceList, InterpretError> {
    let res = c.resources.as_ref();
    let mut req = parse_resources(
        res.and_then(|r| r.requests.as_ref()),
        &format!("{path}.resources.requests"),
    )?;
    let lim = parse_resources(
        res.and_then(|r| r.limits.as_ref()),
        &format!("{path}.resources.limits"),
    )?;
    check_requests_against_limits(&req, &lim, path)?;
    for (name, q) in lim.iter() {
        if !req.0.contains_key(name) {
            req.set(name, q);
        }
    }
    Ok(req)
}

/// Kubernetes' extended resources (`nvidia.com/gpu`, `example.com/foo`): a name with a domain
/// other than `kubernetes.io`, not a quota `requests.` name.
fn is_extended_resource(name: &str) -> bool {
    name.contains('/') && !name.contains("kubernetes.io/") && !name.starts_with("requests.")
}

/// What the API server refuses in a container's resources, refused here first with the same
/// words, so that a job whose pods can never be created is rejected with the field instead of
/// being dispatched: a request above its limit; for an extended resource, a quantity that is
/// not a whole number, or a request that is not equal to its limit (or has none).
fn check_requests_against_limits(
    req: &ResourceList,
    lim: &ResourceList,
    path: &str,
) -> Result<(), InterpretError> {
    for (name, q) in req.iter() {
        let field = format!("{path}.resources.requests[{name}]");
        let limit = lim.0.get(name);
        if is_extended_resource(name) {
            if q.milli() % 1000 != 0 {
                return Err(err(&field, format!("{q}: must be an integer")));
            }
            match limit {
                None => {
                    return Err(err(
                        format!("{path}.resources.limits[{name}]"),
                        "Limit must be set for non overcommitable resources",
                    ));
                }
                Some(l) if *l != q => {
                    return Err(err(
                        &field,
                        format!("{q}: must be equal to {name} limit of {l}"),
                    ));
                }
                _ => {}
            }
        } else if let Some(l) = limit
            && q > *l
        {
            return Err(err(
                &field,
                format!("{q}: must be less than or equal to {name} limit of {l}"),
            ));
        }
    }
    for (name, q) in lim.iter() {
        if is_extended_resource(name) && q.milli() % 1000 != 0 {
            return Err(err(
                format!("{path}.resources.limits[{name}]"),
                format!("{q}: must be an integer"),
            ));
        }
    }
    Ok(())
}

/// cpu, memory and hugepages-*: the resources pod-level `spec.resources` may set.
fn pod_level_supported(name: &str) -> bool {
    name == "cpu" || name == "memory" || name.starts_with("hugepages-")
}

/// The effective per-pod requests of a pod, by Kubernetes' rules
/// (k8s.io/component-helpers/resource `PodRequests` after the API server's defaulting):
/// regular containers are summed; init containers run in order, restartable ones (sidecars,
/// `restartPolicy: Always`) keep running, so they add to the regular sum and to every later
/// init container's requirement; the pod needs the larger of the two; pod-level
/// `spec.resources` then overrides cpu/memory/hugepages; finally `spec.overhead` is added.
/// `extra` are containers an operator appends to the pod (Ray autoscaler, sidecar submitter).
pub(super) fn pod_requests(
    spec: &PodSpec,
    spec_path: &str,
    extra: &[(Container, String)],
) -> Result<ResourceList, InterpretError> {
    let mut total = ResourceList::new();
    for (i, c) in spec.containers.iter().enumerate() {
        total.add(&container_requests(
            c,
            &format!("{spec_path}.containers[{i}]"),
        )?);
    }
    for (c, path) in extra {
        total.add(&container_requests(c, path)?);
    }
    let mut sidecars = ResourceList::new();
    let mut init_peak = ResourceList::new();
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        let req = container_requests(c, &format!("{spec_path}.initContainers[{i}]"))?;
        if c.restart_policy.as_deref() == Some("Always") {
            total.add(&req);
            sidecars.add(&req);
            init_peak.max_with(&sidecars);
        } else {
            let mut step = req;
            step.add(&sidecars);
            init_peak.max_with(&step);
        }
    }
    total.max_with(&init_peak);

    if let Some(pod) = &spec.resources {
        apply_pod_level(&mut total, pod, &format!("{spec_path}.resources"))?;
    }
    let overhead = parse_resources(spec.overhead.as_ref(), &format!("{spec_path}.overhead"))?;
    total.add(&overhead);
    Ok(total.without_zeros())
}

/// Pod-level resources (KEP-2837) as the API server defaults them and the scheduler reads them:
/// a pod-level request wins; without one, a pod-level limit becomes the request unless the
/// containers already request that (overcommittable) resource, in which case their aggregate
/// stands. Only cpu, memory and hugepages-* are pod-level resources.
fn apply_pod_level(
    total: &mut ResourceList,
    pod: &ResourceRequirements,
    path: &str,
) -> Result<(), InterpretError> {
    let req = parse_resources(pod.requests.as_ref(), &format!("{path}.requests"))?;
    let lim = parse_resources(pod.limits.as_ref(), &format!("{path}.limits"))?;
    let mut effective = ResourceList::new();
    for (name, q) in req.iter() {
        if pod_level_supported(name) {
            effective.set(name, q);
        }
    }
    for (name, q) in lim.iter() {
        if !pod_level_supported(name) || effective.0.contains_key(name) {
            continue;
        }
        let overcommittable = !name.starts_with("hugepages-");
        if overcommittable && total.0.contains_key(name) {
            continue;
        }
        effective.set(name, q);
    }
    for (name, q) in effective.iter() {
        total.set(name, q);
    }
    Ok(())
}

/// A pod's effective requests as the scheduler counts them (containers and sidecars vs. init
/// containers, overhead, pod-level resources), for pods read from a member cluster.
pub fn pod_spec_requests(spec: &PodSpec) -> Result<ResourceList, InterpretError> {
    pod_requests(spec, "spec", &[])
}
