//! Member clusters at runtime: a client per member (from the kubeconfig Secret its
//! MemberCluster names), watches of its Nodes, Pods, PriorityClasses, warning Events, muster's
//! job copies and (their metadata, started by `owned`) the objects between copies and pods, a
//! liveness probe, discovery of the job kinds it serves (again every 15 s), and the
//! translation of what is watched into the core's view (nodes, what the member can create; the
//! per-node usage of pods muster does not account for itself is `owned`'s) and into what a
//! copy's status says (the member's refusals of its pods). Never decides anything.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Event, Node, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, DynamicObject};
use kube::config::KubeConfigOptions;
use kube::runtime::watcher;
use kube::{Client, Config, ResourceExt};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::kinds;
use super::owned;
pub use super::status::pod_is_active;
pub(super) use super::watches::optional_watch;
pub use super::watches::{Watched, watch, watch_trimmed};
use crate::fleet::{ClusterInfo, NodeInfo, Serves};
use crate::workload::JobKind;

/// Label on a member copy and on each of its pod templates: the hub job's UID.
pub const JOB_UID_LABEL: &str = "muster.dev/job-uid";
/// Label on each pod template of a member copy: the component (replica type) name.
pub const COMPONENT_LABEL: &str = "muster.dev/component";
/// Label on a member copy: the hub job's namespace/name would not fit a label, so the origin
/// (the hub's identity) is kept here for garbage collection across hubs.
pub const ORIGIN_LABEL: &str = "muster.dev/origin";

/// Failed probes in a row after which a member is taken as not answering. One alone is a blip
/// of the transport (a connection reset, a request the API server dropped under load), not a
/// silence: taken as one, it once marked every job placed on a busy member as on a silent
/// member for a second (an Event and two status writes each, 940 of them at once). The
/// silence still dates from the last good answer, so nothing that counts from it waits longer.
pub const SILENT_AFTER: u64 = 2;

/// Liveness as the probe last saw it.
#[derive(Default)]
pub struct Health {
    /// Milliseconds since `epoch` of the last good answer; 0 = never.
    last_ok_ms: AtomicU64,
    /// Consecutive failed probes.
    failures: AtomicU64,
    epoch: std::sync::OnceLock<Instant>,
}

impl Health {
    fn epoch(&self) -> Instant {
        *self.epoch.get_or_init(Instant::now)
    }

    fn ok(&self) {
        let ms = self.epoch().elapsed().as_millis() as u64;
        self.last_ok_ms.store(ms.max(1), Ordering::Relaxed);
        self.failures.store(0, Ordering::Relaxed);
    }

    fn failed(&self) {
        self.failures.fetch_add(1, Ordering::Relaxed);
    }

    /// Time since the last good answer (None if it never answered).
    pub fn silent_for(&self) -> Option<Duration> {
        let ms = self.last_ok_ms.load(Ordering::Relaxed);
        (ms > 0).then(|| {
            self.epoch()
                .elapsed()
                .saturating_sub(Duration::from_millis(ms))
        })
    }

    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    /// Whether the member answers: fewer than [`SILENT_AFTER`] probes in a row failed.
    pub fn answering(&self) -> bool {
        self.failures() < SILENT_AFTER
    }
}

/// One connected member.
pub struct Member {
    pub name: String,
    pub client: Client,
    /// What the connection was built from (Secret resourceVersion + MemberCluster generation):
    /// a change reconnects.
    pub source: String,
    pub kinds: Vec<JobKind>,
    /// The kinds the member serves as last discovered (every 15 s): when they differ from
    /// `kinds`, the member is connected again.
    discovered: Arc<std::sync::Mutex<Vec<JobKind>>>,
    pub nodes: Watched<Node>,
    pub pods: Watched<Pod>,
    /// `None` when the member's API server does not let muster list PriorityClasses: then
    /// they are not checked there.
    pub priority_classes: Option<Watched<PriorityClass>>,
    /// Warning Events about objects other than pods (a job controller's `FailedCreate`): what
    /// the member refused of a copy. `None` when the member does not let muster list Events.
    pub warnings: Option<Watched<Event>>,
    /// Its training runtimes, when it serves TrainJob and lets muster list them.
    pub runtimes: Option<super::runtimes::Watches>,
    pub jobs: HashMap<JobKind, Watched<DynamicObject>>,
    /// The objects that may stand between a copy and its pods (their metadata): see
    /// [`super::owned`].
    pub intermediates: owned::Watches,
    /// The API server's (major, minor) version at connection ((0, 0) when unreadable).
    pub server_version: (u32, u32),
    pub health: Arc<Health>,
    /// When this connection was made.
    pub connected_at: Instant,
    /// Creates and deletes of copies in flight at once on this member (each waits for a
    /// permit): a burst of admissions never opens a connection per copy.
    pub writes: Arc<tokio::sync::Semaphore>,
    tasks: Vec<JoinHandle<()>>,
}

/// Copy creates and deletes in flight at once on one member.
pub const WRITES_PER_MEMBER: usize = 16;

impl Drop for Member {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// A client for a member from the kubeconfig text its Secret holds.
pub async fn client_from_kubeconfig(name: &str, text: &str) -> anyhow::Result<Client> {
    // Errors name fields, never values: the text is a Secret's (see `kubeconfig_errors`).
    let kc = super::kubeconfig::parse(text)
        .map_err(|e| anyhow::anyhow!("member {name}: the kubeconfig does not parse: {e}"))?;
    for cluster in super::kubeconfig::unverified_clusters(&kc) {
        tracing::warn!(member = %name, %cluster, "insecure-skip-tls-verify: the API server's certificate is not verified");
    }
    let mut cfg = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|e| {
            let e = super::kubeconfig::redact(&e.to_string());
            anyhow::anyhow!("member {name}: unusable kubeconfig: {e}")
        })?;
    cfg.connect_timeout = Some(Duration::from_secs(3));
    cfg.read_timeout = Some(Duration::from_secs(15));
    Client::try_from(cfg).map_err(|e| {
        let e = super::kubeconfig::redact(&e.to_string());
        anyhow::anyhow!("member {name}: unusable kubeconfig: {e}")
    })
}

impl Member {
    /// Connects: finds which job kinds the member serves and starts the watches. `wake` is
    /// notified on every change seen.
    pub async fn connect(
        name: &str,
        client: Client,
        source: String,
        wake: Arc<Notify>,
    ) -> anyhow::Result<Member> {
        let kinds = tokio::time::timeout(Duration::from_secs(10), kinds::served(&client))
            .await
            .map_err(|_| anyhow::anyhow!("member {name}: discovery timed out"))??;
        let version = tokio::time::timeout(Duration::from_secs(10), client.apiserver_version())
            .await
            .map_err(|_| anyhow::anyhow!("member {name}: /version timed out"))??;
        let server_version = (
            version.major.trim_end_matches('+').parse().unwrap_or(0),
            version.minor.trim_end_matches('+').parse().unwrap_or(0),
        );
        let mut tasks = Vec::new();
        let nodes = watch(
            Api::<Node>::all(client.clone()),
            watcher::Config::default(),
            (),
            wake.clone(),
            &mut tasks,
        );
        let pods = watch(
            Api::<Pod>::all(client.clone()),
            watcher::Config::default(),
            (),
            wake.clone(),
            &mut tasks,
        );
        let priority_classes = optional_watch(
            name,
            Api::<PriorityClass>::all(client.clone()),
            (),
            None,
            "the jobs' PriorityClasses are not checked on this member",
            &wake,
            &mut tasks,
        )
        .await?;
        let warnings = optional_watch(
            name,
            Api::<Event>::all(client.clone()),
            (),
            Some("type=Warning,involvedObject.kind!=Pod"),
            "the member's refusals of a job's pods are not shown",
            &wake,
            &mut tasks,
        )
        .await?;
        let runtimes = if kinds.contains(&JobKind::TrainJob) {
            super::runtimes::Watches::start(name, &client, &wake, &mut tasks).await?
        } else {
            None
        };
        let discovered = Arc::new(std::sync::Mutex::new(kinds.clone()));
        {
            let (d, c, w) = (discovered.clone(), client.clone(), wake.clone());
            tasks.push(tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_secs(15)).await;
                    let found =
                        tokio::time::timeout(Duration::from_secs(10), kinds::served(&c)).await;
                    if let Ok(Ok(k)) = found
                        && let Ok(mut was) = d.lock()
                        && *was != k
                    {
                        *was = k;
                        w.notify_one();
                    }
                }
            }));
        }
        let mut jobs = HashMap::new();
        for &k in &kinds {
            let ar = kinds::api_resource(k);
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
            let cfg = watcher::Config::default().labels(JOB_UID_LABEL);
            jobs.insert(k, watch(api, cfg, ar, wake.clone(), &mut tasks));
        }
        let intermediates = owned::Watches::start(&client, &kinds, &wake, &mut tasks);
        let health = Arc::new(Health::default());
        health.ok();
        {
            let (h, c, w) = (health.clone(), client.clone(), wake.clone());
            tasks.push(tokio::spawn(async move {
                loop {
                    let answered =
                        tokio::time::timeout(Duration::from_secs(3), c.apiserver_version()).await;
                    let was_answering = h.answering();
                    match answered {
                        Ok(Ok(_)) => h.ok(),
                        _ => h.failed(),
                    }
                    if was_answering != h.answering() {
                        w.notify_one();
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }));
        }
        Ok(Member {
            name: name.to_string(),
            server_version,
            client,
            source,
            kinds,
            discovered,
            nodes,
            pods,
            priority_classes,
            warnings,
            runtimes,
            jobs,
            intermediates,
            health,
            connected_at: Instant::now(),
            writes: Arc::new(tokio::sync::Semaphore::new(WRITES_PER_MEMBER)),
            tasks,
        })
    }

    /// Whether every watch has listed once (a view the core may trust).
    pub fn synced(&self) -> bool {
        self.nodes.is_ready()
            && self.pods.is_ready()
            && self.priority_classes.as_ref().is_none_or(|p| p.is_ready())
            && self.runtimes.as_ref().is_none_or(|r| r.is_ready())
            && self.jobs.values().all(|s| s.is_ready())
            && self.intermediates.is_ready()
    }

    /// Whether the kinds the member serves changed since this connection was made (a CRD
    /// installed or removed there): the connection is then made again.
    pub fn kinds_changed(&self) -> bool {
        self.discovered
            .lock()
            .map(|d| *d != self.kinds)
            .unwrap_or(false)
    }

    /// The member's newest refusal of something the copy needs: a warning Event whose reason
    /// starts with `Failed` (`FailedCreate`, `FailedCreatePod`, ...) about the copy itself, or
    /// about a Job it made (a JobSet's child Jobs, an MPIJob's launcher, named `<copy>-...`),
    /// since the copy was created. As `FailedCreate: <message>`.
    pub fn refusal(&self, copy: &DynamicObject) -> Option<String> {
        let events = self.warnings.as_ref()?.state();
        refusal_in(&events, copy)
    }

    /// What the member can create: the kinds this connection serves, its PriorityClasses and
    /// training runtimes (unknown when it does not let muster list them).
    pub fn serves(&self) -> Serves {
        Serves {
            kinds: Some(self.kinds.iter().copied().collect()),
            priority_classes: self.priority_classes.as_ref().map(|p| {
                p.state()
                    .iter()
                    .map(|pc| pc.name_any())
                    .collect::<BTreeSet<String>>()
            }),
            runtimes: self.runtimes.as_ref().map(|r| {
                r.index()
                    .digests()
                    .into_iter()
                    .map(|(k, d)| (k.to_string(), d))
                    .collect()
            }),
            stalled: Default::default(),
        }
    }

    /// Of the copy UIDs muster recorded (`recorded`), those of objects this member holds, with
    /// their kind and namespace as the member says.
    pub fn recorded_copies(&self, recorded: &HashSet<String>) -> HashMap<String, owned::Recorded> {
        let mut out = HashMap::new();
        if recorded.is_empty() {
            return out;
        }
        for (&kind, store) in &self.jobs {
            for o in store.state() {
                let (Some(uid), Some(namespace)) = (o.uid(), o.namespace()) else {
                    continue;
                };
                if recorded.contains(&uid) {
                    out.insert(uid, owned::Recorded { kind, namespace });
                }
            }
        }
        out
    }

    /// The member's copy of a hub job, by the hub job's UID.
    pub fn copy_of(&self, kind: JobKind, uid: &str) -> Option<Arc<DynamicObject>> {
        self.jobs
            .get(&kind)?
            .state()
            .into_iter()
            .find(|o| o.labels().get(JOB_UID_LABEL).map(String::as_str) == Some(uid))
    }
}

/// The newest refusal about `copy` among `events` (see [`Member::refusal`]).
pub fn refusal_in(events: &[Arc<Event>], copy: &DynamicObject) -> Option<String> {
    let (uid, ns, name) = (copy.uid()?, copy.namespace()?, copy.name_any());
    let created = copy.creation_timestamp().map(|t| t.0);
    let child = format!("{name}-");
    events
        .iter()
        .filter(|e| e.reason.as_deref().is_some_and(|r| r.starts_with("Failed")))
        .filter(|e| {
            let o = &e.involved_object;
            o.uid.as_deref() == Some(uid.as_str())
                || (o.namespace.as_deref() == Some(ns.as_str())
                    && o.kind.as_deref() == Some("Job")
                    && o.name.as_deref().is_some_and(|n| n.starts_with(&child)))
        })
        .filter_map(|e| {
            let at = e
                .last_timestamp
                .as_ref()
                .map(|t| t.0)
                .or(e.event_time.as_ref().map(|t| t.0))
                .or(e.metadata.creation_timestamp.as_ref().map(|t| t.0))?;
            created.is_none_or(|c| at >= c).then_some((at, e))
        })
        .max_by_key(|(at, _)| *at)
        .map(|(_, e)| {
            format!(
                "{}: {}",
                e.reason.as_deref().unwrap_or_default(),
                e.message.as_deref().unwrap_or_default().trim()
            )
        })
}

/// The core's description of a member from its Node objects (sorted by name). Nodes whose
/// quantities do not parse are left out and reported.
pub fn cluster_info(
    name: &str,
    labels: &BTreeMap<String, String>,
    nodes: &[Arc<Node>],
) -> (ClusterInfo, Vec<String>) {
    let mut out = Vec::new();
    let mut problems = Vec::new();
    for n in nodes {
        match NodeInfo::from_node(n) {
            Ok(info) => out.push(info),
            Err(e) => problems.push(e),
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    (
        ClusterInfo {
            name: name.to_string(),
            labels: labels.clone(),
            nodes: out,
            placement: Default::default(),
            serves: Default::default(),
            topology: Vec::new(),
        },
        problems,
    )
}

/// Pods of a dispatched job on its member, from the pod store.
pub fn pods_of<'a>(pods: &'a [Arc<Pod>], uid: &str) -> Vec<&'a Arc<Pod>> {
    pods.iter()
        .filter(|p| p.labels().get(JOB_UID_LABEL).map(String::as_str) == Some(uid))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One failed probe is a blip of the transport; two in a row are a silence, which ends at
    /// the next good answer.
    #[test]
    fn one_failed_probe_is_a_blip_and_two_in_a_row_a_silence() {
        let h = Health::default();
        h.ok();
        assert!(h.answering());
        h.failed();
        assert!(h.answering(), "one failed probe is a blip");
        h.ok();
        h.failed();
        assert!(h.answering(), "failures are counted in a row");
        h.failed();
        assert!(!h.answering(), "two in a row are a silence");
        assert!(h.silent_for().is_some());
        h.ok();
        assert!(h.answering());
    }

    fn pod(node: Option<&str>, phase: &str, cpu: &str, uid: Option<&str>) -> Arc<Pod> {
        let mut labels = serde_json::Map::new();
        if let Some(u) = uid {
            labels.insert(JOB_UID_LABEL.into(), u.into());
        }
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "p", "namespace": "ns", "labels": labels},
                "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
                "status": {"phase": phase}
            }))
            .expect("pod"),
        )
    }

    #[test]
    fn active_pods_are_bound_and_not_terminated() {
        assert!(pod_is_active(&pod(Some("n1"), "Running", "1", None)));
        assert!(pod_is_active(&pod(Some("n1"), "Pending", "1", None)));
        assert!(!pod_is_active(&pod(Some("n1"), "Succeeded", "1", None)));
        assert!(!pod_is_active(&pod(Some("n1"), "Failed", "1", None)));
        assert!(!pod_is_active(&pod(None, "Pending", "1", None)));
        let pods = vec![
            pod(Some("n2"), "Running", "2", Some("held")),
            pod(Some("n2"), "Running", "3", Some("gone")),
        ];
        assert_eq!(pods_of(&pods, "held").len(), 1);
    }

    fn event(kind: &str, name: &str, uid: &str, reason: &str, at: &str, msg: &str) -> Arc<Event> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": format!("{name}.{at}"), "namespace": "ns"},
                "involvedObject": {"kind": kind, "name": name, "namespace": "ns", "uid": uid},
                "reason": reason, "message": msg, "type": "Warning", "lastTimestamp": at
            }))
            .expect("an Event"),
        )
    }

    #[test]
    fn the_newest_failure_about_the_copy_or_its_jobs_since_it_was_made_is_its_refusal() {
        let copy: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "js", "namespace": "ns", "uid": "u1",
                         "creationTimestamp": "2026-12-01T10:00:00Z"}
        }))
        .expect("a copy");
        let quota = "pods \"js-w-0-0\" is forbidden: exceeded quota: none, requested: pods=1";
        let events = vec![
            // Before the copy was made: an earlier copy of the same name.
            event(
                "Job",
                "js-w-0",
                "old",
                "FailedCreate",
                "2026-12-01T09:00:00Z",
                "old",
            ),
            // Not a failure.
            event(
                "JobSet",
                "js",
                "u1",
                "UpdateFailed?",
                "2026-12-01T10:00:02Z",
                "x",
            ),
            event(
                "JobSet",
                "js",
                "u1",
                "SuccessfulCreate",
                "2026-12-01T10:00:03Z",
                "ok",
            ),
            // Another job's.
            event(
                "Job",
                "jsx-w-0",
                "u9",
                "FailedCreate",
                "2026-12-01T10:00:09Z",
                "other",
            ),
            event(
                "Job",
                "js-w-0",
                "u2",
                "FailedCreate",
                "2026-12-01T10:00:05Z",
                quota,
            ),
        ];
        assert_eq!(
            refusal_in(&events, &copy).as_deref(),
            Some(format!("FailedCreate: {quota}").as_str())
        );
        assert_eq!(refusal_in(&events[..3], &copy), None);
    }
}
