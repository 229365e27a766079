//! Helpers for tests that run against the local fleet (`hack/fleet`, `make fleet-up`): one hub and
//! three member clusters (member-a, member-b, member-c), each a real kube-apiserver on 127.0.0.1.
//!
//! `ensure_fleet_up()` starts the fleet if it is not already running and healthy; a test that needs
//! the fleet calls it first and panics (fails, never skips) when the fleet cannot start.
//! `client_for("member-c")` builds a `kube::Client` from that cluster's admin kubeconfig.
#![allow(dead_code)] // each test binary uses its own subset of these helpers

use std::fs::{self, File};
use std::future::Future;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::{Client, Config};

pub const HUB: &str = "hub";
pub const MEMBERS: [&str; 3] = ["member-a", "member-b", "member-c"];

/// The repository root (where the Makefile is).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The fleet's runtime state: certificates, kubeconfigs, logs, pid files.
pub fn state_dir() -> PathBuf {
    std::env::var_os("MUSTER_FLEET_STATE")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".fleet"))
}

/// `<state>/kubeconfigs/<cluster>.kubeconfig`: admin credentials for `cluster`.
pub fn kubeconfig_path(cluster: &str) -> PathBuf {
    state_dir()
        .join("kubeconfigs")
        .join(format!("{cluster}.kubeconfig"))
}

/// Make sure the fleet is up and healthy, starting it if needed (`make fleet-up`, which reuses a
/// healthy running fleet and otherwise starts a fresh one). Runs at most once per test process;
/// concurrent test binaries serialize on a file lock (and the script takes its own lock too).
/// Panics with the script's exit status when the fleet cannot start: its log paths are in the
/// script's output, which goes straight to the test's stderr.
pub fn ensure_fleet_up() {
    static UP: OnceLock<Result<(), String>> = OnceLock::new();
    let result = UP.get_or_init(|| {
        let state = state_dir();
        fs::create_dir_all(&state).map_err(|e| format!("creating {}: {e}", state.display()))?;
        let lock_path = state.join("ensure.lock");
        let lock = File::create(&lock_path)
            .map_err(|e| format!("opening {}: {e}", lock_path.display()))?;
        lock.lock()
            .map_err(|e| format!("locking {}: {e}", lock_path.display()))?;
        let started = Instant::now();
        let status = Command::new("make")
            .arg("--no-print-directory")
            .arg("fleet-up")
            .current_dir(repo_root())
            .status()
            .map_err(|e| format!("running `make fleet-up`: {e}"))?;
        drop(lock);
        if !status.success() {
            return Err(format!(
                "`make fleet-up` failed ({status}) after {:.0?}; see its output above and the logs in {}",
                started.elapsed(),
                state.join("logs").display()
            ));
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("the local fleet is not available: {e}");
    }
}

/// A client for `cluster` ("hub", "member-a", ...), from its kubeconfig; each request it makes
/// is bounded by `READ_TIMEOUT`.
pub async fn client_for(cluster: &str) -> Client {
    let config = bounded(config_for(cluster).await);
    Client::try_from(config).unwrap_or_else(|e| panic!("client for {cluster}: {e}"))
}

/// A client for the long-lived watches a test keeps in the background (the watchdog's, the
/// auditor's): no read timeout, as kube's own default, since a member a test freezes on purpose
/// must not turn its watch into an error; kube's watcher reconnects a watch that goes quiet past
/// its server-side timeout. Never for the requests a test waits on (`client_for`).
pub async fn watch_client_for(cluster: &str) -> Client {
    let config = config_for(cluster).await;
    Client::try_from(config).unwrap_or_else(|e| panic!("client for {cluster}: {e}"))
}

async fn config_for(cluster: &str) -> Config {
    let path = kubeconfig_path(cluster);
    let kubeconfig = Kubeconfig::read_from(&path)
        .unwrap_or_else(|e| panic!("reading kubeconfig {}: {e}", path.display()));
    Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap_or_else(|e| panic!("kubeconfig {}: {e}", path.display()))
}

/// How long a test's request may go without a byte from its API server before it fails.
/// kube 5 sets no read timeout, so without it a request to a server that stops answering (a
/// member a test froze and did not resume, a connection that went half-open) waits forever, and
/// the whole suite with it; with it the request fails, and `wait_for` tries again or reports.
pub const READ_TIMEOUT: Duration = Duration::from_secs(60);

/// The server-side length of a watch a test makes on a `client_for` client, well inside
/// `READ_TIMEOUT`: the API server ends a quiet watch before the client's read timeout could, and
/// the watcher starts the next one from where it was (no event lost, no error).
pub const WATCH_SECONDS: u32 = 30;

/// `config` with the test suite's bounds on every request (see `READ_TIMEOUT`).
pub fn bounded(mut config: Config) -> Config {
    config.read_timeout = Some(READ_TIMEOUT);
    // The timeout counts from when the request is sent, not from when its pooled connection
    // went idle.
    config.reset_reader_on_write = true;
    config
}

/// The watcher configuration of a watch a test keeps on a `client_for` client (see
/// `WATCH_SECONDS`); the background watches use `watch_client_for` and kube's defaults.
pub fn watch_config() -> kube::runtime::watcher::Config {
    kube::runtime::watcher::Config::default().timeout(WATCH_SECONDS)
}

/// A name unique to this test process and call, usable as a namespace or object name.
pub fn unique_name(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() % 1_000_000)
        .unwrap_or(0);
    format!("{prefix}-{}-{t}-{n}", std::process::id())
}

/// Create a namespace (the caller deletes it with `delete_namespace`).
pub async fn create_namespace(client: &Client, name: &str) {
    let ns: Namespace = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "labels": {"muster.io/test": "true"}}
    }))
    .expect("namespace object");
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap_or_else(|e| panic!("creating namespace {name}: {e}"));
}

/// Delete a namespace and, through the controller-manager, everything in it. Does not wait.
pub async fn delete_namespace(client: &Client, name: &str) {
    let _ = Api::<Namespace>::all(client.clone())
        .delete(name, &DeleteParams::background())
        .await;
}

/// Waits up to `timeout` for the namespaces to be gone from `client`'s cluster (deleted and
/// finalized, so none of their pods holds capacity any more); the names still there, with their
/// phase, if some are not.
pub async fn namespaces_gone(client: &Client, names: &[&str], timeout: Duration) -> Vec<String> {
    let api = Api::<Namespace>::all(client.clone());
    let deadline = Instant::now() + timeout;
    loop {
        let mut left = Vec::new();
        for n in names {
            match api.get_opt(n).await {
                Ok(None) => {}
                Ok(Some(ns)) => {
                    let phase = ns.status.and_then(|s| s.phase).unwrap_or_default();
                    left.push(format!("{n} ({phase})"));
                }
                Err(e) => left.push(format!("{n} (unknown: {e})")),
            }
        }
        if left.is_empty() || Instant::now() >= deadline {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The API of a kind given by apiVersion, kind and plural, e.g. ("kubeflow.org/v1", "PyTorchJob",
/// "pytorchjobs"); namespaced when `ns` is given.
pub fn dynamic_api(
    client: &Client,
    api_version: &str,
    kind: &str,
    plural: &str,
    ns: Option<&str>,
) -> Api<DynamicObject> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    }
}

/// Create an object given as JSON (apiVersion, kind, metadata.name [, metadata.namespace]).
pub async fn create_json(
    client: &Client,
    plural: &str,
    obj: serde_json::Value,
) -> kube::Result<DynamicObject> {
    let api_version = obj["apiVersion"].as_str().expect("apiVersion").to_string();
    let kind = obj["kind"].as_str().expect("kind").to_string();
    let ns = obj["metadata"]["namespace"].as_str().map(str::to_string);
    let api = dynamic_api(client, &api_version, &kind, plural, ns.as_deref());
    let dynobj: DynamicObject = serde_json::from_value(obj).expect("a Kubernetes object");
    api.create(&PostParams::default(), &dynobj).await
}

/// Pods in `ns` matching a label selector.
pub async fn list_pods(client: &Client, ns: &str, selector: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(selector))
        .await
        .unwrap_or_else(|e| panic!("listing pods in {ns} ({selector}): {e}"))
        .items
}

/// Poll `check` every 500 ms until it returns `Ok(T)` or `timeout` passes; on timeout, panic with
/// `what` and the last `Err` message. A check that does not return at all is cut off 30 s after
/// the deadline (see `wait_within`).
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    wait_within(what, timeout, Duration::from_secs(30), check).await
}

/// `wait_for` with the grace a single check has past the deadline: a check may take its time (a
/// request retried inside it), but one that does not come back is reported, not waited on
/// forever (the suite would otherwise hang until CI's own limit).
pub async fn wait_within<T, F, Fut>(
    what: &str,
    timeout: Duration,
    grace: Duration,
    mut check: F,
) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now()) + grace;
        let result = tokio::time::timeout(left, check()).await.unwrap_or_else(|_| {
            panic!("waiting for {what}: a check did not return within {left:?} (deadline {timeout:?})")
        });
        match result {
            Ok(v) => return v,
            Err(last) if Instant::now() >= deadline => {
                panic!("timed out after {timeout:?} waiting for {what}; last state: {last}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

/// The pod's PodScheduled condition as (status, reason, message), if it has one.
pub fn pod_scheduled_condition(pod: &Pod) -> Option<(String, String, String)> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled")
        .map(|c| {
            (
                c.status.clone(),
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default(),
            )
        })
}

/// A one-line summary of pods: name, phase, node.
pub fn describe_pods(pods: &[Pod]) -> String {
    pods.iter()
        .map(|p| {
            let name = p.metadata.name.clone().unwrap_or_default();
            let phase = p
                .status
                .as_ref()
                .and_then(|s| s.phase.clone())
                .unwrap_or_default();
            let node = p
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .unwrap_or_else(|| "<unbound>".into());
            format!("{name}={phase}@{node}")
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The message of a caught panic (a `String` or `&str` payload; empty otherwise).
/// Ends a fleet test: a timeout or a caught panic fails it, with the controller's log tail.
pub fn finish<E>(outcome: std::thread::Result<Result<(), E>>, tail: &str) {
    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(_)) => panic!("timed out; controller log tail:\n{tail}"),
        Err(e) => {
            let msg = panic_message(e.as_ref());
            panic!("{msg}\ncontroller log tail:\n{tail}")
        }
    }
}

pub fn panic_message(e: &(dyn std::any::Any + Send)) -> String {
    e.downcast_ref::<String>()
        .cloned()
        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_check_that_never_returns_is_reported_not_waited_on() {
        let waited = std::panic::AssertUnwindSafe(wait_within(
            "nothing",
            Duration::from_millis(100),
            Duration::from_millis(100),
            std::future::pending::<Result<(), String>>,
        ));
        let outcome = futures::FutureExt::catch_unwind(waited).await;
        let Err(e) = outcome else {
            panic!("a check that never returns was waited out")
        };
        let text = e.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(text.contains("a check did not return"), "{text}");
    }

    #[tokio::test]
    async fn a_check_that_answers_late_in_its_grace_is_taken() {
        // The deadline is now: the one check starts before it and answers after it.
        let v = wait_within(
            "a late answer",
            Duration::ZERO,
            Duration::from_secs(30),
            || async {
                tokio::time::sleep(Duration::from_millis(100)).await;
                Ok::<_, String>(7)
            },
        )
        .await;
        assert_eq!(v, 7);
    }
}
