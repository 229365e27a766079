//! Intake: every job of a supported kind in a namespace the quota tree covers is suspended from
//! its first moment, by a mutating admission webhook served here over TLS (the controller's
//! sync suspends anything the webhook missed). Owns the webhook's patch, its server and what a
//! replica counts as covered; the certificate is `tls`'s, the registration `registration`'s.
//! Never queues or schedules.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use kube::api::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use serde_json::{Value, json};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use super::crd::ElasticQuotaTree;
use super::dispatch::MANAGED_BY;
use super::tls::{CertReloader, RELOAD_EVERY};
use crate::workload::JobKind;

/// Namespaces the quota tree in force covers (`None` until a valid tree was seen). Shared by the
/// webhook and the sync loop.
pub type Covered = Arc<RwLock<Option<BTreeSet<String>>>>;

/// The JSON patch operations that suspend `obj` (and, on create, mark a batch Job or JobSet as
/// managed by muster so that no controller on the hub acts on it). Empty when nothing to do.
pub fn suspend_patch(kind: JobKind, obj: &Value, create: bool) -> Vec<Value> {
    let mut ops = Vec::new();
    let ptr = kind.suspend_pointer();
    if !kind.is_suspended(obj) {
        // Add the missing parents first (JSON patch `add` needs the parent to exist).
        let mut parent = String::new();
        let segs: Vec<&str> = ptr.split('/').skip(1).collect();
        for seg in &segs[..segs.len().saturating_sub(1)] {
            parent.push('/');
            parent.push_str(seg);
            if obj.pointer(&parent).is_none_or(|v| !v.is_object()) {
                ops.push(json!({"op": "add", "path": parent, "value": {}}));
            }
        }
        ops.push(json!({"op": "add", "path": ptr, "value": true}));
    }
    if create
        && matches!(kind, JobKind::Job | JobKind::JobSet)
        && obj.pointer("/spec/managedBy").is_none_or(Value::is_null)
    {
        ops.push(json!({"op": "add", "path": "/spec/managedBy", "value": MANAGED_BY}));
    }
    ops
}

/// The merge patch the sync loop uses to suspend a job the webhook missed.
pub fn suspend_merge_patch(kind: JobKind) -> Value {
    let mut v = json!({});
    super::dispatch::set_pointer(&mut v, kind.suspend_pointer(), Value::Bool(true));
    v
}

/// Decides one admission request.
pub fn review(
    req: &AdmissionRequest<DynamicObject>,
    covered: &Option<BTreeSet<String>>,
) -> AdmissionResponse {
    let resp = AdmissionResponse::from(req);
    let kind = JobKind::from_type(
        &format!(
            "{}{}{}",
            req.kind.group,
            if req.kind.group.is_empty() { "" } else { "/" },
            req.kind.version
        ),
        &req.kind.kind,
    );
    let (Some(kind), Some(obj)) = (kind, req.object.as_ref()) else {
        return resp;
    };
    if !matches!(req.operation, Operation::Create | Operation::Update) {
        return resp;
    }
    let ns = req.namespace.clone().unwrap_or_default();
    if !covered.as_ref().is_some_and(|c| c.contains(&ns)) {
        return resp;
    }
    let Ok(value) = serde_json::to_value(obj) else {
        return resp;
    };
    let ops = suspend_patch(kind, &value, req.operation == Operation::Create);
    if ops.is_empty() {
        return resp;
    }
    match serde_json::from_value::<json_patch::Patch>(Value::Array(ops)) {
        Ok(p) => match resp.clone().with_patch(p) {
            Ok(r) => r,
            Err(e) => resp.deny(format!("muster could not build its patch: {e}")),
        },
        Err(e) => resp.deny(format!("muster could not build its patch: {e}")),
    }
}

async fn mutate(
    State(covered): State<Covered>,
    axum::Json(body): axum::Json<AdmissionReview<DynamicObject>>,
) -> axum::Json<AdmissionReview<DynamicObject>> {
    let req: AdmissionRequest<DynamicObject> = match body.try_into() {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(error = %e, "malformed admission review");
            return axum::Json(AdmissionResponse::invalid(e.to_string()).into_review());
        }
    };
    let snapshot = covered.read().map(|c| c.clone()).unwrap_or(None);
    let resp = review(&req, &snapshot);
    tracing::debug!(
        kind = %req.kind.kind, namespace = ?req.namespace, name = %req.name,
        patched = resp.patch.is_some(), "admission"
    );
    axum::Json(resp.into_review())
}

/// The namespaces a quota tree lists on any node below `root`, read leniently (an invalid tree
/// still says which namespaces its author meant muster to cover).
pub fn tree_namespaces(root: &Value) -> BTreeSet<String> {
    fn walk(node: &Value, out: &mut BTreeSet<String>) {
        for ns in node
            .get("namespaces")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            out.insert(ns.to_string());
        }
        for child in node
            .get("children")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            walk(child, out);
        }
    }
    let mut out = BTreeSet::new();
    walk(root, &mut out);
    out
}

/// What a replica that does not lead (a standby, or the leader before its first sync) counts as
/// covered, from the tree in force: a valid tree's namespaces; for an invalid one, what this
/// replica counted before, else the namespaces it lists. No tree: nothing is covered.
pub fn covered_by(
    tree: Option<&ElasticQuotaTree>,
    before: &Option<BTreeSet<String>>,
) -> BTreeSet<String> {
    let Some(tree) = tree else {
        return BTreeSet::new();
    };
    match crate::quota::QuotaTree::parse(&tree.manifest()) {
        Ok(t) => t.namespaces(),
        Err(_) => before
            .clone()
            .unwrap_or_else(|| tree_namespaces(&tree.spec.root)),
    }
}

/// Serves `/mutate` over TLS on `addr` until `shutdown` resolves. Nothing is answered before the
/// replica knows which namespaces are covered (the API server then applies the webhook's failure
/// policy), so no job is ever let through unsuspended for want of a tree. The certificate is
/// read again from its files every `RELOAD_EVERY`; each new connection gets the one in force.
pub async fn serve(
    addr: SocketAddr,
    certs: Arc<CertReloader>,
    covered: Covered,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    while covered.read().map(|c| c.is_none()).unwrap_or(true) {
        tokio::select! {
            _ = tokio::time::sleep(std::time::Duration::from_millis(50)) => {}
            _ = shutdown.cancelled() => return Ok(()),
        }
    }
    let app = Router::new()
        .route("/mutate", post(mutate))
        .with_state(covered);
    let acceptor = TlsAcceptor::from(Arc::new(certs.server_config()?));
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, "admission webhook listening (TLS)");
    let mut reload = tokio::time::interval(RELOAD_EVERY);
    reload.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = reload.tick() => {
                certs.reload_logged();
                continue;
            }
            _ = shutdown.cancelled() => return Ok(()),
        };
        let Ok((tcp, _)) = accepted else { continue };
        let (acceptor, app) = (acceptor.clone(), app.clone());
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(tcp).await else {
                return;
            };
            let svc =
                hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let app = app.clone();
                    async move {
                        use tower::ServiceExt;
                        app.oneshot(req.map(axum::body::Body::new)).await
                    }
                });
            let _ =
                hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new())
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), svc)
                    .await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply(v: &Value, ops: Vec<Value>) -> Value {
        let p: json_patch::Patch = serde_json::from_value(Value::Array(ops)).expect("patch");
        let mut out = v.clone();
        json_patch::patch(&mut out, &p).expect("applies");
        out
    }

    #[test]
    fn a_replica_that_does_not_lead_knows_what_is_covered() {
        use super::super::crd::{ElasticQuotaTreeSpec, tree_in_force};
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let valid = json!({"name": "root", "max": {"cpu": "10"}, "children": [
            {"name": "a", "namespaces": ["team-a"], "max": {"cpu": "5"}},
            {"name": "b", "namespaces": ["team-b"], "max": {"cpu": "5"}}]});
        let invalid = json!({"name": "root", "max": {"cpu": "10"}, "children": [
            {"name": "a", "namespaces": ["team-a", "team-c"], "min": {"cpu": "50"}, "max": {"cpu": "5"}}]});
        let t = |root: &Value, name: &str, at: i64| {
            let mut t = ElasticQuotaTree::new(name, ElasticQuotaTreeSpec { root: root.clone() });
            t.metadata.creation_timestamp = jiff::Timestamp::from_second(at).ok().map(Time);
            Arc::new(t)
        };
        let both: BTreeSet<String> = ["team-a".to_string(), "team-b".to_string()].into();
        // The oldest tree is the one in force.
        let trees = [t(&invalid, "new", 20), t(&valid, "old", 10)];
        assert_eq!(covered_by(tree_in_force(&trees), &None), both);
        // An invalid tree: what was covered before stays; with nothing before, what it lists.
        let trees = [t(&invalid, "x", 10)];
        assert_eq!(covered_by(tree_in_force(&trees), &Some(both.clone())), both);
        assert_eq!(
            covered_by(tree_in_force(&trees), &None),
            ["team-a".to_string(), "team-c".to_string()].into()
        );
        assert!(covered_by(tree_in_force(&[]), &Some(both)).is_empty());
    }

    #[test]
    fn suspends_kubeflow_job_without_run_policy() {
        let v = json!({"spec": {"pytorchReplicaSpecs": {}}});
        let out = apply(&v, suspend_patch(JobKind::PyTorchJob, &v, true));
        assert_eq!(out.pointer("/spec/runPolicy/suspend"), Some(&json!(true)));
        assert_eq!(out.pointer("/spec/managedBy"), None);
    }

    #[test]
    fn suspends_batch_job_and_marks_it_managed_on_create_only() {
        let v = json!({"spec": {"suspend": false, "template": {}}});
        let out = apply(&v, suspend_patch(JobKind::Job, &v, true));
        assert_eq!(out.pointer("/spec/suspend"), Some(&json!(true)));
        assert_eq!(out.pointer("/spec/managedBy"), Some(&json!(MANAGED_BY)));
        let upd = suspend_patch(JobKind::Job, &v, false);
        assert_eq!(upd.len(), 1, "{upd:?}");
        let own = json!({"spec": {"suspend": true, "managedBy": "kueue.x-k8s.io/multikueue"}});
        assert!(suspend_patch(JobKind::Job, &own, true).is_empty());
    }

    #[test]
    fn merge_patch_builds_parents() {
        assert_eq!(
            suspend_merge_patch(JobKind::MPIJob),
            json!({"spec": {"runPolicy": {"suspend": true}}})
        );
        assert_eq!(
            suspend_merge_patch(JobKind::RayJob),
            json!({"spec": {"suspend": true}})
        );
    }
}
