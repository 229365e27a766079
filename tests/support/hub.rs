//! Helpers for end-to-end tests of the hub controller on the local fleet: installs muster's CRDs
//! on the hub, registers the three members (kubeconfig Secrets + MemberClusters), writes the
//! quota tree, and runs `muster controller` as a child process (killed on drop, log kept).
#![allow(dead_code)]

use std::fs::File;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use muster::controller::crd::{QueuedJob, QueuedJobState};
use serde_json::{Value, json};

use super::fleet::{self, MEMBERS, kubeconfig_path, wait_for};

pub const CONTROLLER_NS: &str = "muster-system";

/// Installs muster's CRDs on the hub and waits until they are served.
pub async fn install_crds(hub: &Client) {
    let api: Api<CustomResourceDefinition> = Api::all(hub.clone());
    for crd in muster::controller::crd::all_crds() {
        let name = crd.metadata.name.clone().expect("crd name");
        api.patch(
            &name,
            &PatchParams::apply("muster-test").force(),
            &Patch::Apply(&crd),
        )
        .await
        .unwrap_or_else(|e| panic!("applying CRD {name}: {e}"));
        wait_established(hub, &name).await;
    }
}

/// A CRD as read, made ready to be created again after it is deleted: name, labels and
/// annotations kept, server-set metadata and status dropped.
pub fn recreatable(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    crd.metadata = kube::api::ObjectMeta {
        name: crd.metadata.name.clone(),
        labels: crd.metadata.labels.clone(),
        annotations: crd.metadata.annotations.clone(),
        ..Default::default()
    };
    crd.status = None;
    crd
}

/// Waits until the CRD `name` is Established on the hub.
pub async fn wait_established(hub: &Client, name: &str) {
    let api: Api<CustomResourceDefinition> = Api::all(hub.clone());
    wait_for(
        &format!("CRD {name} established"),
        Duration::from_secs(60),
        || {
            let api = api.clone();
            async move {
                let crd = api.get(name).await.map_err(|e| e.to_string())?;
                let ok = crd
                    .status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True");
                if ok {
                    Ok(())
                } else {
                    Err("not established".into())
                }
            }
        },
    )
    .await;
}

pub async fn ensure_namespace(client: &Client, name: &str) {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
    api.patch(name, &PatchParams::apply("muster-test"), &Patch::Apply(&ns))
        .await
        .unwrap_or_else(|e| panic!("namespace {name}: {e}"));
}

/// The topology levels of each member of the example fleet (`examples/fleet.yaml`).
fn fleet_topology() -> std::collections::BTreeMap<String, Vec<String>> {
    let file = fleet::repo_root().join("examples").join("fleet.yaml");
    let text = std::fs::read_to_string(&file).expect("examples/fleet.yaml");
    let sc = muster::sim::parse_scenario("examples/fleet.yaml", &text).expect("the fleet file");
    sc.clusters
        .into_iter()
        .map(|c| (c.name, c.topology))
        .collect()
}

/// Secrets with the members' kubeconfigs and a MemberCluster for each, labelled like the
/// example fleet (region, tier), with its topology levels.
pub async fn register_members(hub: &Client) {
    ensure_namespace(hub, CONTROLLER_NS).await;
    let topology = fleet_topology();
    let secrets: Api<Secret> = Api::namespaced(hub.clone(), CONTROLLER_NS);
    let mcs: Api<DynamicObject> = member_clusters(hub);
    for (m, region, tier) in [
        ("member-a", "eu", "small"),
        ("member-b", "eu", "medium"),
        ("member-c", "us", "large"),
    ] {
        let text = std::fs::read_to_string(kubeconfig_path(m)).expect("member kubeconfig");
        let secret = json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": format!("{m}-kubeconfig"), "namespace": CONTROLLER_NS},
            "stringData": {"kubeconfig": text}
        });
        secrets
            .patch(
                &format!("{m}-kubeconfig"),
                &PatchParams::apply("muster-test").force(),
                &Patch::Apply(&secret),
            )
            .await
            .unwrap_or_else(|e| panic!("secret for {m}: {e}"));
        let mc = json!({
            "apiVersion": "muster.dev/v1alpha1", "kind": "MemberCluster",
            "metadata": {"name": m, "labels": {"region": region, "tier": tier}},
            "spec": {"kubeconfigSecretRef": {"name": format!("{m}-kubeconfig")},
                     "topology": topology.get(m).cloned().unwrap_or_default()}
        });
        mcs.patch(
            m,
            &PatchParams::apply("muster-test").force(),
            &Patch::Apply(&mc),
        )
        .await
        .unwrap_or_else(|e| panic!("MemberCluster {m}: {e}"));
    }
}

/// The hub's MemberClusters, as dynamic objects.
pub fn member_clusters(hub: &Client) -> Api<DynamicObject> {
    fleet::dynamic_api(
        hub,
        "muster.dev/v1alpha1",
        "MemberCluster",
        "memberclusters",
        None,
    )
}

/// Writes the ElasticQuotaTree `muster-e2e` in kube-system (replacing any earlier one).
pub async fn apply_tree(hub: &Client, root: Value) -> kube::Result<DynamicObject> {
    let api = fleet::dynamic_api(
        hub,
        "scheduling.sigs.k8s.io/v1beta1",
        "ElasticQuotaTree",
        "elasticquotatrees",
        Some("kube-system"),
    );
    let tree = json!({
        "apiVersion": "scheduling.sigs.k8s.io/v1beta1", "kind": "ElasticQuotaTree",
        "metadata": {"name": "muster-e2e", "namespace": "kube-system"},
        "spec": {"root": root}
    });
    api.patch(
        "muster-e2e",
        &PatchParams::apply("muster-test").force(),
        &Patch::Apply(&tree),
    )
    .await
}

/// Removes the `muster.dev/record` finalizer from every QueuedJob of `ns`.
pub async fn release_queued_jobs(hub: &Client, ns: &str) {
    let api: Api<QueuedJob> = Api::namespaced(hub.clone(), ns);
    let Ok(list) = api.list(&Default::default()).await else {
        return;
    };
    for q in list.items {
        if let Some(n) = q.metadata.name {
            let patch = serde_json::json!({"metadata": {"finalizers": null}});
            let _ = api
                .patch(&n, &Default::default(), &kube::api::Patch::Merge(patch))
                .await;
        }
    }
}

/// Removes every ElasticQuotaTree in kube-system and muster's webhook registration (left over
/// by an earlier run that was killed).
pub async fn reset_hub(hub: &Client) {
    let api = fleet::dynamic_api(
        hub,
        "scheduling.sigs.k8s.io/v1beta1",
        "ElasticQuotaTree",
        "elasticquotatrees",
        Some("kube-system"),
    );
    if let Ok(list) = api.list(&Default::default()).await {
        for t in list.items {
            if let Some(n) = t.metadata.name {
                let _ = api.delete(&n, &DeleteParams::default()).await;
            }
        }
    }
    delete_webhook(hub).await;
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(hub.clone(), CONTROLLER_NS);
    let _ = leases
        .delete("muster-controller", &DeleteParams::default())
        .await;
    // The run-time history of earlier tests' jobs.
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(hub.clone(), CONTROLLER_NS);
    let _ = cms
        .delete("muster-runtime-history", &DeleteParams::default())
        .await;
}

pub async fn delete_webhook(hub: &Client) {
    let mwc: Api<k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration> =
        Api::all(hub.clone());
    let _ = mwc.delete("muster", &DeleteParams::default()).await;
}

/// The namespaces the live webhook configuration `muster` intercepts, as its
/// `namespaceSelector` says: the values of `kubernetes.io/metadata.name In [...]`, or none for
/// `kubernetes.io/metadata.name DoesNotExist`; an error for anything else (or no configuration).
pub async fn webhook_namespaces(hub: &Client) -> Result<Vec<String>, String> {
    let mwc: Api<k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration> =
        Api::all(hub.clone());
    let live = mwc.get("muster").await.map_err(|e| e.to_string())?;
    let live = serde_json::to_value(&live).map_err(|e| e.to_string())?;
    let sel = &live["webhooks"][0]["namespaceSelector"];
    let exprs = sel["matchExpressions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    match exprs.as_slice() {
        [e] if e["key"] == "kubernetes.io/metadata.name" && e["operator"] == "In" => {
            Ok(e["values"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect())
        }
        [e] if e["key"] == "kubernetes.io/metadata.name" && e["operator"] == "DoesNotExist" => {
            Ok(Vec::new())
        }
        _ => Err(format!("namespaceSelector: {sel}")),
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A running `muster controller`; killed (SIGKILL) when dropped.
pub struct Controller {
    pub child: Child,
    pub log: PathBuf,
    pub http: u16,
    /// Its `--snapshot-addr` port (on loopback).
    pub snapshot: u16,
    pub webhook: u16,
    /// Its `--webhook-cert-dir` (made self-signed at its start).
    pub certs: PathBuf,
}

impl Controller {
    /// Starts the controller against the fleet's hub with its webhook registered on loopback,
    /// and waits until /readyz answers.
    pub async fn start(tag: &str, extra: &[&str]) -> Controller {
        Self::start_as(tag, &kubeconfig_path("hub"), free_port(), extra).await
    }

    /// Like `start`, but with the hub credentials in `kubeconfig` (e.g. a ServiceAccount's
    /// token, to run with exactly that account's RBAC) and the webhook on port `webhook` (for
    /// a caller that needs its URL beforehand).
    pub async fn start_as(
        tag: &str,
        kubeconfig: &std::path::Path,
        webhook: u16,
        extra: &[&str],
    ) -> Controller {
        let c = Self::launch(tag, kubeconfig, webhook, extra);
        c.wait_ready().await;
        c
    }

    /// Starts the controller without waiting for /readyz (which a replica that never saw a
    /// valid tree does not answer).
    pub fn start_unready(tag: &str, extra: &[&str]) -> Controller {
        Self::launch(tag, &kubeconfig_path("hub"), free_port(), extra)
    }

    fn launch(tag: &str, kubeconfig: &std::path::Path, webhook: u16, extra: &[&str]) -> Controller {
        let http = free_port();
        let snapshot = free_port();
        let dir = fleet::repo_root().join("target").join("e2e");
        std::fs::create_dir_all(&dir).expect("target/e2e");
        let log = dir.join(format!("controller-{tag}-{}.log", std::process::id()));
        let out = File::create(&log).expect("log file");
        let err = out.try_clone().expect("log file");
        let certs = dir.join(format!("certs-{tag}-{}", std::process::id()));
        let mut args: Vec<String> = vec![
            "controller".into(),
            "--kubeconfig".into(),
            kubeconfig.display().to_string(),
            "--namespace".into(),
            CONTROLLER_NS.into(),
            "--http-addr".into(),
            format!("127.0.0.1:{http}"),
            "--snapshot-addr".into(),
            format!("127.0.0.1:{snapshot}"),
            "--webhook-addr".into(),
            format!("127.0.0.1:{webhook}"),
            "--webhook-url".into(),
            format!("https://127.0.0.1:{webhook}/mutate"),
            "--webhook-cert-dir".into(),
            certs.display().to_string(),
            "--resync-seconds".into(),
            "2".into(),
            "--instance".into(),
            tag.into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let child = Command::new(env!("CARGO_BIN_EXE_muster"))
            .args(&args)
            .env("RUST_LOG", "info,kube=warn,muster=debug")
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .spawn()
            .expect("starting muster controller");
        Controller {
            child,
            log,
            http,
            snapshot,
            webhook,
            certs,
        }
    }

    async fn wait_ready(&self) {
        let url = format!("http://127.0.0.1:{}/readyz", self.http);
        let log = self.log.clone();
        wait_for(
            &format!("controller ready (log {})", log.display()),
            Duration::from_secs(60),
            || {
                let url = url.clone();
                async move {
                    let ok = tokio::task::spawn_blocking(move || http_get_ok(&url))
                        .await
                        .unwrap_or(false);
                    if ok { Ok(()) } else { Err("not ready".into()) }
                }
            },
        )
        .await;
    }

    /// Waits until exactly one of `replicas` acts as leader; its index.
    pub async fn one_leader(replicas: &[Controller]) -> usize {
        wait_for("one leader", Duration::from_secs(30), || async {
            let acting: Vec<usize> = (0..replicas.len())
                .filter(|&i| replicas[i].log_text().contains("acting as leader"))
                .collect();
            match acting.as_slice() {
                [one] => Ok(*one),
                other => Err(format!("acting: {other:?}")),
            }
        })
        .await
    }

    /// The whole log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends SIGTERM (a graceful stop, as the kubelet asks) without waiting.
    pub fn terminate(&self) {
        let ok = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(ok, "kill -TERM {}", self.child.id());
    }

    /// Waits up to `timeout` for the process to exit; its exit status, `None` if it still runs.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if let Ok(Some(st)) = self.child.try_wait() {
                return Some(st);
            }
            if std::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `muster explain NAMESPACE/NAME` against the fleet's hub: (exit success, stdout + stderr).
pub fn explain(job: &str) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_muster"))
        .args(["explain", job, "--kubeconfig"])
        .arg(kubeconfig_path("hub"))
        .output()
        .expect("running muster explain");
    let mut text = String::from_utf8_lossy(&out.stdout).to_string();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// The raw answer (status line, headers, body) to a plain HTTP/1.0 GET; empty on any error.
fn http_raw(url: &str) -> String {
    use std::io::{Read, Write};
    let Some(rest) = url.strip_prefix("http://") else {
        return String::new();
    };
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let Ok(mut s) = std::net::TcpStream::connect(host) else {
        return String::new();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    if write!(s, "GET /{path} HTTP/1.0\r\nHost: {host}\r\n\r\n").is_err() {
        return String::new();
    }
    let mut buf = String::new();
    let _ = s.read_to_string(&mut buf);
    buf
}

/// The body of a plain HTTP GET (empty on any error).
pub fn http_get(url: &str) -> String {
    http_raw(url)
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default()
}

/// The status code of a plain HTTP GET; `None` when nothing answered.
pub fn http_status(url: &str) -> Option<u16> {
    http_raw(url)
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
}

/// A plain HTTP GET that says whether the answer was 200.
pub fn http_get_ok(url: &str) -> bool {
    let raw = http_raw(url);
    raw.starts_with("HTTP/1.1 200") || raw.starts_with("HTTP/1.0 200")
}

/// The QueuedJob of a hub job.
pub async fn queued_job(hub: &Client, ns: &str, kind: &str, name: &str) -> Option<QueuedJob> {
    let api: Api<QueuedJob> = Api::namespaced(hub.clone(), ns);
    api.get_opt(&format!("{}-{name}", kind.to_lowercase()))
        .await
        .ok()
        .flatten()
}

/// Waits until the QueuedJob of a hub job is in `state`; returns it.
pub async fn wait_queued_state(
    hub: &Client,
    ns: &str,
    kind: &str,
    name: &str,
    state: QueuedJobState,
    timeout: Duration,
) -> QueuedJob {
    wait_for(
        &format!("{kind} {ns}/{name} to be {state:?}"),
        timeout,
        || async move {
            match queued_job(hub, ns, kind, name).await {
                Some(q) if q.status.as_ref().map(|s| s.state) == Some(state) => Ok(q),
                Some(q) => Err(format!("status: {:?}", q.status)),
                None => Err("no QueuedJob".into()),
            }
        },
    )
    .await
}

/// Which members hold a copy of `namespace/name` of this kind.
pub async fn members_with(
    api_version: &str,
    kind: &str,
    plural: &str,
    ns: &str,
    name: &str,
) -> Vec<String> {
    let mut out = Vec::new();
    for m in MEMBERS {
        let c = fleet::client_for(m).await;
        let api = fleet::dynamic_api(&c, api_version, kind, plural, Some(ns));
        if let Ok(Some(_)) = api.get_opt(name).await {
            out.push(m.to_string());
        }
    }
    out
}

/// A running job's Events tell its whole history: Queued, as a Queued Event or, when it was
/// admitted before a status said Queued, inside the Admitted Event ("Admitted: queued in …;
/// admitted to …"); Admitted; its dispatch, as a Dispatched Event or, when its pods ran before
/// its Dispatched status was written, inside the Running Event ("Running: created in
/// member-b; running on …"); then Running.
pub fn assert_history(events: &[String]) {
    for r in ["Admitted", "Running"] {
        assert!(
            events.iter().any(|e| e.starts_with(r)),
            "Event {r} missing: {events:?}"
        );
    }
    // Queued on its own, or said in the Admitted Event when no status said Queued first.
    let queued = events.iter().any(|e| {
        e.starts_with("Queued: queued in")
            || (e.starts_with("Admitted: queued in") && e.contains("; admitted to"))
    });
    assert!(queued, "no Event says it was queued: {events:?}");
    let dispatched = events.iter().any(|e| {
        e.starts_with("Dispatched: created in")
            || (e.starts_with("Running: created in") && e.contains("; running on"))
    });
    assert!(dispatched, "no Event says where it was created: {events:?}");
}

/// Events about an object on the hub, as "reason: note" lines.
pub async fn events_for(hub: &Client, ns: &str, name: &str) -> Vec<String> {
    let api: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(hub.clone(), ns);
    let list = api
        .list(&Default::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    list.into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .map(|e| {
            format!(
                "{}: {}",
                e.reason.unwrap_or_default(),
                e.note.unwrap_or_default()
            )
        })
        .collect()
}

/// Writes a kubeconfig for the hub that authenticates with a bearer `token` (e.g. from the
/// TokenRequest API), with the server and CA of the fleet's admin kubeconfig.
pub fn token_kubeconfig(token: &str, path: &std::path::Path) {
    let admin = std::fs::read_to_string(kubeconfig_path("hub")).expect("hub kubeconfig");
    let admin: Value = serde_yaml::from_str(&admin).expect("hub kubeconfig parses");
    let cluster = admin
        .pointer("/clusters/0/cluster")
        .cloned()
        .expect("a cluster in the hub kubeconfig");
    let kc = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "hub", "cluster": cluster}],
        "users": [{"name": "token", "user": {"token": token}}],
        "contexts": [{"name": "hub", "context": {"cluster": "hub", "user": "token"}}],
        "current-context": "hub"
    });
    std::fs::write(path, serde_yaml::to_string(&kc).expect("yaml")).expect("writing kubeconfig");
}

/// A QueuedJob's status (default when there is none yet).
pub async fn queued_status(
    hub: &Client,
    ns: &str,
    kind: &str,
    name: &str,
) -> muster::controller::crd::QueuedJobStatus {
    queued_job(hub, ns, kind, name)
        .await
        .and_then(|q| q.status)
        .unwrap_or_default()
}

/// Pods of `ns` per member that has any: (member, running, all).
pub async fn pods_per_member(ns: &str) -> Vec<(String, usize, usize)> {
    let mut out = Vec::new();
    for m in MEMBERS {
        let pods = fleet::list_pods(&fleet::client_for(m).await, ns, "").await;
        let running = pods
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count();
        if !pods.is_empty() {
            out.push((m.to_string(), running, pods.len()));
        }
    }
    out
}

/// The `Ready` condition of a MemberCluster, as JSON (`Null` when it has none yet).
pub async fn ready_condition(mcs: &Api<DynamicObject>, name: &str) -> Result<Value, String> {
    let o = serde_json::to_value(mcs.get(name).await.map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    Ok(o.pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|a| a.iter().find(|c| c["type"] == "Ready").cloned())
        .unwrap_or(Value::Null))
}
