//! The hub controller: drives the scheduling core against real clusters. Watches the hub (jobs,
//! the quota tree, MemberClusters, QueuedJobs, PriorityClasses) and every member (Nodes, Pods,
//! muster's job copies), feeds the core, applies its decisions (record, reserve, dispatch,
//! preempt) and writes back what is true (QueuedJob status, hub job status, Events).
//!
//! Everything that must survive a restart is in the API: a QueuedJob's status records the
//! admission (cluster and per-node plan) before the copy is created, so a new process rebuilds
//! the core's queues, quota usage and reservations from it. Nothing is kept only in memory.

pub mod crd;
pub mod dispatch;
pub mod explain;
pub mod gates;
pub mod intake;
pub mod kinds;
pub mod kubeconfig;
pub mod leader;
pub mod members;
mod placing;
pub mod registration;
pub mod shutdown;
pub mod status;
pub mod tls;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ObjectReference, Secret};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector;
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde_json::{Value, json};
use tokio::sync::Notify;

use crate::fleet::ClusterInfo;
use crate::metrics::{Metrics, Outcome, RequeueReason};
use crate::quantity::{Quantity, ResourceList};
use crate::quota::QuotaTree;
use crate::resources::MAX_JOBS;
use crate::scheduler::{Config, Decision, JobId, JobState, Plan, Scheduler, Submitted};
use crate::workload::{JobKind, Workload, interpret};
use crd::{
    ElasticQuotaTree, ElasticQuotaTreeStatus, JobRef, MemberCluster, MemberClusterStatus,
    PodCounts, QueuedJob, QueuedJobSpec, QueuedJobState, QueuedJobStatus, QuotaNodeStatus,
};
use members::{COMPONENT_LABEL, Member, Watched, watch};
use status::Observed;

/// Field manager of everything muster writes with server-side apply.
pub const MANAGER: &str = "muster";

/// How the controller runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// Kubeconfig of the hub (in-cluster or the default chain when `None`).
    pub hub_kubeconfig: Option<PathBuf>,
    /// The controller's namespace: member Secrets without a namespace live here.
    pub namespace: String,
    /// Namespace of the ElasticQuotaTree in force.
    pub quota_namespace: String,
    /// Identity of this hub, written on member copies (`muster.dev/origin`).
    pub origin: String,
    /// Name of this replica (Events, leader election).
    pub instance: String,
    /// /healthz and /readyz.
    pub http_addr: SocketAddr,
    /// The admission webhook (TLS); none = no webhook (the sync loop still suspends).
    pub webhook_addr: Option<SocketAddr>,
    pub webhook_cert_dir: PathBuf,
    /// DNS names / IPs the serving certificate is made for.
    pub webhook_hosts: Vec<String>,
    /// Register the MutatingWebhookConfiguration pointing here.
    pub webhook_endpoint: Option<registration::Endpoint>,
    pub webhook_failure_policy: String,
    /// Longest time between two syncs when nothing happens.
    pub resync: Duration,
    /// Take a dispatched job back when not every pod runs this long after dispatch.
    pub pods_ready_timeout: Duration,
    /// Take a running job back when some of its pods are gone (node lost) this long.
    pub pods_lost_timeout: Duration,
    /// Requeue the jobs of a member that does not answer for this long.
    pub member_lost_grace: Duration,
    /// Backoff before a job taken back is queued again: base·2^(n-1), at most max.
    pub requeue_backoff: Duration,
    pub requeue_backoff_max: Duration,
    /// Leader election (None: this replica always acts).
    pub lease: Option<leader::LeaseConfig>,
    /// Accept member kubeconfigs that run programs or read files (`kubeconfig::check`).
    pub allow_kubeconfig_files_and_exec: bool,
    /// How long the webhook and health servers keep answering, not ready, after a stop.
    pub shutdown_drain: Duration,
}

/// The hub objects muster watches.
struct HubStores {
    trees: Watched<ElasticQuotaTree>,
    members: Watched<MemberCluster>,
    queued: Watched<QueuedJob>,
    priorities: Watched<PriorityClass>,
    jobs: BTreeMap<JobKind, Watched<DynamicObject>>,
    _tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl HubStores {
    /// A hub job as last seen.
    fn job(&self, kind: JobKind, namespace: &str, name: &str) -> Option<Arc<DynamicObject>> {
        let key = reflector::ObjectRef::<DynamicObject>::new_with(name, kinds::api_resource(kind))
            .within(namespace);
        self.jobs.get(&kind)?.get(&key)
    }

    fn ready(&self) -> bool {
        self.trees.is_ready()
            && self.members.is_ready()
            && self.queued.is_ready()
            && self.priorities.is_ready()
            && self.jobs.values().all(|s| s.is_ready())
    }
}

/// Runs the controller until SIGTERM / SIGINT (then drains: see `shutdown`).
pub async fn run(opts: Options) -> anyhow::Result<()> {
    let stop = shutdown::Stop::new(opts.shutdown_drain);
    let result = run_until(opts, &stop).await;
    stop.finish().await;
    result
}

async fn run_until(opts: Options, stop: &shutdown::Stop) -> anyhow::Result<()> {
    let hub = match &opts.hub_kubeconfig {
        Some(p) => {
            let text =
                std::fs::read_to_string(p).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?;
            members::client_from_kubeconfig("hub", &text).await?
        }
        None => Client::try_default().await?,
    };
    let token = stop.token.clone();
    {
        let token = token.clone();
        tokio::spawn(async move {
            shutdown_signal().await;
            tracing::info!("shutdown requested");
            token.cancel();
        });
    }
    let wake = Arc::new(Notify::new());
    let hub_kinds = kinds::served(&hub).await?;
    tracing::info!(kinds = ?hub_kinds, "job kinds served by the hub");
    let mut tasks = Vec::new();
    let cfg = watcher::Config::default;
    let stores = HubStores {
        trees: watch(
            Api::namespaced(hub.clone(), &opts.quota_namespace),
            cfg(),
            (),
            wake.clone(),
            &mut tasks,
        ),
        members: watch(Api::all(hub.clone()), cfg(), (), wake.clone(), &mut tasks),
        queued: watch(Api::all(hub.clone()), cfg(), (), wake.clone(), &mut tasks),
        priorities: watch(Api::all(hub.clone()), cfg(), (), wake.clone(), &mut tasks),
        jobs: hub_kinds
            .iter()
            .map(|&k| {
                let ar = kinds::api_resource(k);
                let api: Api<DynamicObject> = Api::all_with(hub.clone(), &ar);
                (k, watch(api, cfg(), ar, wake.clone(), &mut tasks))
            })
            .collect(),
        _tasks: tasks,
    };
    let covered: intake::Covered = Default::default();
    // Every replica knows what is covered from its first answer, leader or not; once this one
    // leads, its sync (which keeps the last valid tree in force) is the only writer.
    let leading = Arc::new(AtomicBool::new(false));
    {
        let (trees, covered, leading, token) = (
            stores.trees.clone_store(),
            covered.clone(),
            leading.clone(),
            token.clone(),
        );
        tokio::spawn(async move {
            let mut seen = None;
            loop {
                if leading.load(Ordering::Relaxed) {
                    return;
                }
                let (store, ready) = &trees;
                let now = store.state();
                // Read again only when a tree changed.
                let key: Vec<_> = now
                    .iter()
                    .map(|t| (t.metadata.uid.clone(), t.metadata.resource_version.clone()))
                    .collect();
                if ready.load(Ordering::Relaxed) && seen.as_ref() != Some(&key) {
                    if let Ok(mut c) = covered.write() {
                        let next = intake::covered_by(crd::tree_in_force(&now), &c);
                        *c = Some(next);
                    }
                    seen = Some(key);
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(200)) => {}
                    _ = token.cancelled() => return,
                }
            }
        });
    }
    let ready = Arc::new(AtomicBool::new(false));
    let metrics = Arc::new(Metrics::new());
    let http = tokio::spawn(serve_http(
        opts.http_addr,
        ready.clone(),
        metrics.clone(),
        stop.clone(),
    ));
    let mut webhook = None;
    let mut registration = None;
    if let Some(addr) = opts.webhook_addr {
        let certs = tls::CertReloader::load_or_create(&opts.webhook_cert_dir, &opts.webhook_hosts)?;
        let exclude = vec!["kube-system".to_string(), opts.namespace.clone()];
        registration = opts.webhook_endpoint.clone().map(|ep| {
            let policy = &opts.webhook_failure_policy;
            registration::Registration::new(hub.clone(), ep, policy, exclude, certs.clone())
        });
        let (c, t) = (covered.clone(), stop.servers.clone());
        webhook = Some(tokio::spawn(async move {
            if let Err(e) = intake::serve(addr, certs, c, t).await {
                tracing::error!(error = %e, "webhook server failed");
            }
        }));
    }
    // Wait for the hub's view before deciding anything.
    while !stores.ready() {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            _ = token.cancelled() => return Ok(()),
        }
    }
    // Every replica registers the webhook for the namespaces it knows the tree covers.
    if let Some(r) = registration.as_mut() {
        r.register(&covered, &token).await?;
    }
    let mut elector = None;
    let leadership = match opts.lease.clone() {
        Some(cfg) => {
            let l = Arc::new(leader::Leadership::default());
            elector = Some(tokio::spawn(leader::run(
                hub.clone(),
                cfg,
                l.clone(),
                token.clone(),
            )));
            l
        }
        None => leader::Leadership::always(),
    };
    ready.store(true, Ordering::Relaxed);
    if !leadership.is_leader() {
        tracing::info!("standing by: another replica holds the lease");
    }
    while !leadership.is_leader() {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            _ = token.cancelled() => return Ok(()),
        }
    }
    let recorder = Recorder::new(
        hub.clone(),
        Reporter {
            controller: "muster".into(),
            instance: Some(opts.instance.clone()),
        },
    );
    leading.store(true, Ordering::Relaxed);
    if let Some(r) = registration {
        tokio::spawn(r.keep(covered.clone(), token.clone()));
    }
    let mut brain = Brain::new(hub, opts, stores, covered, recorder, wake.clone(), metrics);
    brain.leadership = leadership.clone();
    tracing::info!("hub view synced; acting as leader");
    let mut result = Ok(());
    loop {
        // A stop asked during the last sync comes first: the elector has released the lease
        // because of it, which is not a lost leadership.
        if token.is_cancelled() {
            break;
        }
        if !leadership.is_leader() {
            // Everything is in the API: a fresh start (this process restarted, or the new
            // leader) rebuilds from it. Acting on without the lease could double-dispatch.
            tracing::error!("lost leadership; exiting");
            token.cancel();
            result = Err(anyhow::anyhow!("lost leadership"));
            break;
        }
        let started = Instant::now();
        brain.sync().await;
        let busy = brain.sched.has_work();
        let resync = brain.opts.resync;
        tokio::select! {
            _ = wake.notified() => {}
            _ = tokio::time::sleep(if busy { Duration::ZERO } else { resync }) => {}
            _ = token.cancelled() => break,
        }
        // Let a burst of watch events settle into one sync.
        let elapsed = started.elapsed();
        if elapsed < Duration::from_millis(200) {
            tokio::time::sleep(Duration::from_millis(200) - elapsed).await;
        }
    }
    ready.store(false, Ordering::Relaxed);
    if let Some(w) = webhook {
        let _ = w.await;
    }
    let _ = http.await;
    // Let the elector release the lease so that a standby takes over at once.
    if let Some(e) = elector {
        let _ = tokio::time::timeout(Duration::from_secs(3), e).await;
    }
    tracing::info!("stopped");
    result
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! { _ = ctrl_c => {}, _ = term.recv() => {} }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

async fn serve_http(
    addr: SocketAddr,
    ready: Arc<AtomicBool>,
    metrics: Arc<Metrics>,
    stop: shutdown::Stop,
) {
    let servers = stop.servers.clone();
    use axum::routing::get;
    let app = axum::Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/metrics",
            get(move || {
                let metrics = metrics.clone();
                async move {
                    (
                        [(
                            axum::http::header::CONTENT_TYPE,
                            "text/plain; version=0.0.4; charset=utf-8",
                        )],
                        metrics.encode(),
                    )
                }
            }),
        )
        .route(
            "/readyz",
            get(move || {
                let (ready, stop) = (ready.clone(), stop.clone());
                async move {
                    if stop.ready(&ready) {
                        (axum::http::StatusCode::OK, "ready")
                    } else {
                        (axum::http::StatusCode::SERVICE_UNAVAILABLE, "not ready")
                    }
                }
            }),
        );
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(%addr, error = %e, "cannot bind the health endpoint");
            return;
        }
    };
    tracing::info!(%addr, "health endpoints listening");
    let _ = axum::serve(listener, app)
        .with_graceful_shutdown(async move { servers.cancelled().await })
        .await;
}

fn now_rfc3339() -> String {
    jiff::Timestamp::now().to_string()
}

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

/// Flags checked before anything starts: `--origin` must be a label value (it labels every
/// member copy), and a lease must be renewed at least twice within its duration.
pub fn check_flags(
    origin: &str,
    leader_elect: bool,
    lease_duration_seconds: u64,
    lease_retry_seconds: u64,
) -> Result<(), String> {
    if !crate::labels::is_label_name(origin) {
        return Err(format!(
            "--origin {origin:?}: must be a label value (1-63 characters [A-Za-z0-9_.-], starting and ending with a letter or digit)"
        ));
    }
    if leader_elect && lease_retry_seconds.max(1) * 2 > lease_duration_seconds.max(2) {
        return Err(format!(
            "--lease-retry-seconds {lease_retry_seconds}: must be at most half of --lease-duration-seconds ({lease_duration_seconds}), so that the leader renews before its lease can expire"
        ));
    }
    Ok(())
}

/// One hub job muster is responsible for.
struct Tracked {
    kind: JobKind,
    namespace: String,
    name: String,
    api_version: String,
    generation: i64,
    workload: Option<Workload>,
    id: Option<JobId>,
    /// What the QueuedJob status should say.
    status: QueuedJobStatus,
    /// What was last written (None: the QueuedJob may not exist yet).
    written: Option<QueuedJobStatus>,
    /// Hub job status last copied from the member.
    synced_status: Option<Value>,
    /// When the copy was last (re)created (rate limit for re-creating a missing copy).
    last_create: Option<Instant>,
    /// When it last entered its queue (submission or requeue), for the wait-time histogram.
    queued_at: jiff::Timestamp,
    /// The core's reason when the explanation was last computed, and when.
    explained: Option<(String, Instant)>,
    /// Taken back: not queued again before this.
    backoff_until: Option<Instant>,
    /// Members where its pods could not run lately: avoided while others remain.
    avoid: BTreeSet<String>,
    /// Since when a job that ran has fewer running pods than expected.
    degraded_since: Option<Instant>,
    /// Whether every pod ran at some point of this dispatch.
    ran: bool,
    /// Components whose pods were released from muster's scheduling gate in this dispatch.
    released: BTreeSet<String>,
    /// Pods already reported as placed where the plan does not put them.
    mismatched: BTreeSet<String>,
}

impl Tracked {
    /// A new admission (or none): the per-pod placement of the last dispatch no longer holds.
    fn forget_placement(&mut self) {
        self.status.pod_placement.clear();
        self.released.clear();
        self.mismatched.clear();
    }

    fn label(&self) -> String {
        format!("{} {}/{}", self.kind, self.namespace, self.name)
    }

    fn object_ref(&self, uid: &str) -> ObjectReference {
        ObjectReference {
            api_version: Some(self.api_version.clone()),
            kind: Some(self.kind.as_str().to_string()),
            namespace: Some(self.namespace.clone()),
            name: Some(self.name.clone()),
            uid: Some(uid.to_string()),
            ..Default::default()
        }
    }
}

struct Brain {
    hub: Client,
    opts: Options,
    stores: HubStores,
    covered: intake::Covered,
    recorder: Recorder,
    wake: Arc<Notify>,
    metrics: Arc<Metrics>,
    leadership: Arc<leader::Leadership>,
    sched: Scheduler,
    members: BTreeMap<String, Member>,
    /// Per member: why it could not be connected (for its status).
    member_errors: BTreeMap<String, String>,
    /// Last written MemberCluster status, and when.
    member_status: BTreeMap<String, (MemberClusterStatus, Instant)>,
    /// Per member: what the core was last told (nodes, reachability, per-node usage).
    told_nodes: HashMap<String, ClusterInfo>,
    told_reachable: HashMap<String, bool>,
    told_usage: HashMap<String, BTreeMap<String, ResourceList>>,
    /// The tree in force: (uid, generation) of the object last applied or rejected.
    tree_seen: Option<(String, i64)>,
    tree_status: Option<ElasticQuotaTreeStatus>,
    tree_status_written: Option<ElasticQuotaTreeStatus>,
    tree_ref: Option<(String, String)>,
    /// Members seen dropping muster's scheduling gate (placed in pinned mode from then on),
    /// with the evidence.
    gates_dropped: BTreeMap<String, String>,
    priorities: BTreeMap<String, i32>,
    jobs: HashMap<String, Tracked>,
    by_id: HashMap<JobId, String>,
    epoch: Instant,
}

impl Brain {
    fn new(
        hub: Client,
        opts: Options,
        stores: HubStores,
        covered: intake::Covered,
        recorder: Recorder,
        wake: Arc<Notify>,
        metrics: Arc<Metrics>,
    ) -> Brain {
        Brain {
            metrics,
            leadership: leader::Leadership::always(),
            hub,
            opts,
            stores,
            covered,
            recorder,
            wake,
            sched: Scheduler::new(Config::default()),
            members: BTreeMap::new(),
            member_errors: BTreeMap::new(),
            member_status: BTreeMap::new(),
            told_nodes: HashMap::new(),
            told_reachable: HashMap::new(),
            told_usage: HashMap::new(),
            tree_seen: None,
            tree_status: None,
            tree_status_written: None,
            tree_ref: None,
            gates_dropped: BTreeMap::new(),
            priorities: BTreeMap::new(),
            jobs: HashMap::new(),
            by_id: HashMap::new(),
            epoch: Instant::now(),
        }
    }

    /// An Event on the hub job `uid`.
    async fn event(&self, uid: &str, warning: bool, reason: &str, note: String) {
        if let Some(t) = self.jobs.get(uid) {
            self.publish(&t.object_ref(uid), warning, reason, note)
                .await;
        }
    }

    /// One pass: observe, decide, act, report.
    async fn sync(&mut self) {
        self.sync_priorities();
        self.sync_tree().await;
        self.sync_members().await;
        if !self.members_settled() {
            // Deciding before every member's nodes are known would call jobs unfit (or place
            // them on the members that happened to answer first).
            return;
        }
        self.sync_jobs().await;
        self.sync_usage();
        let started = Instant::now();
        let decisions = self.sched.cycle();
        self.metrics.cycle_duration(started.elapsed().as_secs_f64());
        for d in decisions {
            self.apply(d).await;
        }
        self.sync_dispatched().await;
        self.requeue_from_lost_members().await;
        self.collect_garbage().await;
        self.forget_unkeepable_avoid();
        self.sync_reasons();
        self.write_statuses().await;
        self.write_tree_status().await;
        self.write_member_statuses().await;
        self.metrics.observe(&self.sched);
    }

    fn sync_priorities(&mut self) {
        let p: BTreeMap<String, i32> = self
            .stores
            .priorities
            .state()
            .iter()
            .map(|pc| (pc.name_any(), pc.value.unwrap_or(0)))
            .collect();
        if p != self.priorities {
            self.sched.set_priority_classes(p.clone());
            self.priorities = p;
        }
    }

    // ----- quota tree ------------------------------------------------------------------------

    async fn sync_tree(&mut self) {
        let trees = self.stores.trees.state();
        let Some(tree) = crd::tree_in_force(&trees) else {
            return;
        };
        let key = (
            tree.uid().unwrap_or_default(),
            tree.metadata.generation.unwrap_or(0),
        );
        if self.tree_seen.as_ref() == Some(&key) {
            return;
        }
        self.tree_seen = Some(key);
        self.tree_ref = Some((tree.namespace().unwrap_or_default(), tree.name_any()));
        let oref = tree.object_ref(&());
        let now = Time(jiff::Timestamp::now());
        match QuotaTree::parse(&tree.manifest()) {
            Ok(t) => {
                let ns = t.namespaces();
                tracing::info!(tree = %tree.name_any(), leaves = ns.len(), "quota tree applied");
                self.sched.set_quota_tree(Some(t));
                if let Ok(mut c) = self.covered.write() {
                    *c = Some(ns);
                }
                self.tree_status = Some(ElasticQuotaTreeStatus {
                    conditions: vec![Condition {
                        type_: "Valid".into(),
                        status: "True".into(),
                        reason: "Applied".into(),
                        message: "this tree is in force".into(),
                        last_transition_time: now,
                        observed_generation: tree.metadata.generation,
                    }],
                    problems: vec![],
                    nodes: vec![],
                });
                self.publish(
                    &oref,
                    false,
                    "QuotaTreeApplied",
                    "the quota tree is in force".into(),
                )
                .await;
            }
            Err(problems) => {
                let msgs: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
                tracing::warn!(tree = %tree.name_any(), problems = ?msgs, "invalid quota tree; the last valid one stays in force");
                let in_force = if self.sched.quota().is_some() {
                    "the last valid tree stays in force"
                } else {
                    "no tree is in force: no job is queued"
                };
                self.tree_status = Some(ElasticQuotaTreeStatus {
                    conditions: vec![Condition {
                        type_: "Valid".into(),
                        status: "False".into(),
                        reason: "Invalid".into(),
                        message: truncate(&format!("{}; {in_force}", msgs.join("; ")), 4000),
                        last_transition_time: now,
                        observed_generation: tree.metadata.generation,
                    }],
                    problems: msgs.clone(),
                    nodes: self.tree_status.take().map(|s| s.nodes).unwrap_or_default(),
                });
                self.publish(
                    &oref,
                    true,
                    "InvalidQuotaTree",
                    format!("{} ({in_force})", msgs.join("; ")),
                )
                .await;
            }
        }
    }

    async fn publish(&self, oref: &ObjectReference, warning: bool, reason: &str, note: String) {
        let ev = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.to_string(),
            note: Some(truncate(&note, 1000)),
            action: reason.to_string(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&ev, oref).await {
            tracing::warn!(object = ?oref.name, error = %e, "could not publish an Event");
        }
    }

    async fn write_tree_status(&mut self) {
        let (Some((ns, name)), Some(mut st)) = (self.tree_ref.clone(), self.tree_status.clone())
        else {
            return;
        };
        if let Some(q) = self.sched.quota() {
            let table = &self.sched.table;
            st.nodes = q
                .tree
                .nodes
                .iter()
                .enumerate()
                .map(|(i, n)| {
                    let mut used = BTreeMap::new();
                    for r in (0..table.len()).map(|i| crate::resources::Res(i as u16)) {
                        let u = q.used_of(i, r);
                        if u != 0
                            || n.min.get(table.name(r)).milli() != 0
                            || q.max_of(i, r).is_some()
                        {
                            used.insert(
                                table.name(r).to_string(),
                                Quantity::from_milli(u).to_string(),
                            );
                        }
                    }
                    QuotaNodeStatus {
                        path: n.path.clone(),
                        used,
                        min: n
                            .min
                            .iter()
                            .map(|(k, v)| (k.to_string(), v.to_string()))
                            .collect(),
                        max: n
                            .max
                            .iter()
                            .map(|(k, v)| (k.to_string(), v.to_string()))
                            .collect(),
                    }
                })
                .collect();
        }
        if self.tree_status_written.as_ref() == Some(&st) {
            return;
        }
        let api: Api<ElasticQuotaTree> = Api::namespaced(self.hub.clone(), &ns);
        let body = json!({
            "apiVersion": "scheduling.sigs.k8s.io/v1beta1", "kind": "ElasticQuotaTree",
            "status": st,
        });
        match api
            .patch_status(
                &name,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(&body),
            )
            .await
        {
            Ok(_) => self.tree_status_written = Some(st),
            Err(e) => {
                tracing::warn!(tree = %name, error = %e, "could not write the quota tree status")
            }
        }
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

// ----- members ----------------------------------------------------------------------------------

impl Brain {
    async fn kubeconfig_of(&self, mc: &MemberCluster) -> Result<(String, String), String> {
        let r = &mc.spec.kubeconfig_secret_ref;
        let ns = r
            .namespace
            .clone()
            .unwrap_or_else(|| self.opts.namespace.clone());
        let key = r.key.clone().unwrap_or_else(|| "kubeconfig".into());
        let api: Api<Secret> = Api::namespaced(self.hub.clone(), &ns);
        let secret = api
            .get(&r.name)
            .await
            .map_err(|e| format!("Secret {ns}/{}: {e}", r.name))?;
        let data = secret
            .data
            .as_ref()
            .and_then(|d| d.get(&key))
            .ok_or_else(|| format!("Secret {ns}/{} has no key {key:?}", r.name))?;
        let text = String::from_utf8(data.0.clone())
            .map_err(|_| format!("Secret {ns}/{} key {key:?} is not UTF-8", r.name))?;
        let allow = self.opts.allow_kubeconfig_files_and_exec;
        kubeconfig::check(&text, allow, &format!("{ns}/{}", r.name), &key)?;
        Ok((text, secret.resource_version().unwrap_or_default()))
    }

    async fn sync_members(&mut self) {
        let wanted: BTreeMap<String, Arc<MemberCluster>> = self
            .stores
            .members
            .state()
            .into_iter()
            .map(|m| (m.name_any(), m))
            .collect();
        // Removed members: stop watching; nothing more is placed there.
        let gone: Vec<String> = self
            .members
            .keys()
            .filter(|n| !wanted.contains_key(*n))
            .cloned()
            .collect();
        for name in gone {
            tracing::info!(member = %name, "member removed");
            self.members.remove(&name);
            self.sched.set_cluster(&ClusterInfo {
                name: name.clone(),
                ..Default::default()
            });
            self.sched.set_reachable(&name, false);
            self.told_nodes.remove(&name);
            self.told_reachable.insert(name.clone(), false);
            self.told_usage.remove(&name);
            self.member_status.remove(&name);
        }
        for (name, mc) in &wanted {
            // (Re)connect when new, when its spec or Secret changed, checked every few seconds.
            let due = self
                .member_status
                .get(name)
                .is_none_or(|(_, at)| at.elapsed() > Duration::from_secs(10))
                || !self.members.contains_key(name);
            if due {
                match self.kubeconfig_of(mc).await {
                    Ok((text, rv)) => {
                        let source = format!("{}/{rv}", mc.metadata.generation.unwrap_or(0));
                        let stale = self.members.get(name).is_none_or(|m| m.source != source);
                        if stale {
                            let connected = match members::client_from_kubeconfig(name, &text).await
                            {
                                Ok(c) => Member::connect(name, c, source, self.wake.clone()).await,
                                Err(e) => Err(e),
                            };
                            match connected {
                                Ok(m) => {
                                    tracing::info!(member = %name, kinds = ?m.kinds, "member connected");
                                    self.members.insert(name.clone(), m);
                                    self.member_errors.remove(name);
                                }
                                Err(e) => {
                                    tracing::warn!(member = %name, error = %e, "cannot connect to member");
                                    self.member_errors.insert(name.clone(), e.to_string());
                                }
                            }
                        }
                    }
                    Err(e) => {
                        self.member_errors.insert(name.clone(), e);
                    }
                }
                if let Some((st, _)) = self.member_status.get(name).cloned() {
                    self.member_status
                        .insert(name.clone(), (st, Instant::now()));
                } else {
                    self.member_status.insert(
                        name.clone(),
                        (MemberClusterStatus::default(), Instant::now()),
                    );
                }
            }
            let labels = mc.labels().clone();
            let (info, reachable) = match self.members.get(name) {
                Some(m) if m.synced() => {
                    let (mut info, problems) =
                        members::cluster_info(name, &labels, &m.nodes.state());
                    // The core makes only robust plans for a member placed by node set.
                    info.placement = self.placement_mode(name).0;
                    for p in problems {
                        tracing::warn!(member = %name, problem = %p, "node left out");
                    }
                    (Some(info), m.health.failures() == 0)
                }
                _ => (None, false),
            };
            if let Some(info) = info
                && self.told_nodes.get(name) != Some(&info)
            {
                self.sched.set_cluster(&info);
                self.told_nodes.insert(name.clone(), info);
                self.told_usage.remove(name);
            }
            if self.told_reachable.get(name) != Some(&reachable)
                && (self.told_nodes.contains_key(name) || !reachable)
            {
                tracing::info!(member = %name, reachable, "member reachability");
                if !self.told_nodes.contains_key(name) {
                    self.sched.set_cluster(&ClusterInfo {
                        name: name.clone(),
                        labels: labels.clone(),
                        nodes: vec![],
                        placement: Default::default(),
                    });
                }
                self.sched.set_reachable(name, reachable);
                self.told_reachable.insert(name.clone(), reachable);
            }
        }
    }

    /// Whether every MemberCluster has been described to the core, or could not be reached
    /// (its connection failed, or it has not synced for 30 s since the controller started).
    fn members_settled(&self) -> bool {
        let patience = self.epoch.elapsed() > Duration::from_secs(30);
        self.stores.members.state().iter().all(|mc| {
            let name = mc.name_any();
            self.told_nodes.contains_key(&name)
                || self.member_errors.contains_key(&name)
                || patience
        })
    }

    /// Tells the core what pods it does not account for use, per node.
    fn sync_usage(&mut self) {
        let held: BTreeSet<String> = self
            .jobs
            .iter()
            .filter(|(_, t)| {
                t.id.is_some_and(|id| matches!(self.sched.state(id), JobState::Admitted { .. }))
            })
            .map(|(u, _)| u.clone())
            .collect();
        for (name, m) in &self.members {
            if !m.synced() || !self.told_nodes.contains_key(name) {
                continue;
            }
            let (usage, problems) = members::usage_by_node(&m.pods.state(), |u| held.contains(u));
            for p in problems {
                tracing::warn!(member = %name, problem = %p, "pod usage unreadable");
            }
            let before = self.told_usage.get(name).cloned().unwrap_or_default();
            if before == usage {
                continue;
            }
            for node in before.keys().filter(|n| !usage.contains_key(*n)) {
                self.sched
                    .set_external_usage(name, node, &ResourceList::new());
            }
            for (node, used) in &usage {
                if before.get(node) != Some(used) {
                    self.sched.set_external_usage(name, node, used);
                }
            }
            self.told_usage.insert(name.clone(), usage);
        }
    }

    async fn write_member_statuses(&mut self) {
        let names: Vec<String> = self.member_status.keys().cloned().collect();
        for name in names {
            let table = &self.sched.table;
            let cluster = self.sched.clusters().iter().find(|c| c.name == name);
            let mut st = MemberClusterStatus::default();
            let (mode, why) = self.placement_mode(&name);
            st.placement = Some(mode.as_str().to_string());
            st.placement_reason = Some(why);
            let reachable = self.told_reachable.get(&name).copied().unwrap_or(false);
            let (status, reason, message) = match (self.member_errors.get(&name), cluster) {
                (Some(e), _) => ("False", "Unreachable", e.clone()),
                (None, Some(c)) if reachable => (
                    "True",
                    "Watching",
                    format!("{} nodes watched", c.nodes.len()),
                ),
                (None, _) => (
                    "False",
                    "Unreachable",
                    "the member does not answer".to_string(),
                ),
            };
            if let Some(c) = cluster {
                st.nodes = c.nodes.len() as u32;
                for r in (0..table.len()).map(|i| crate::resources::Res(i as u16)) {
                    if r == MAX_JOBS {
                        continue;
                    }
                    let alloc: i128 = c
                        .nodes
                        .iter()
                        .map(|n| crate::resources::at(&n.alloc, r))
                        .sum();
                    if alloc == 0 {
                        continue;
                    }
                    let free: i128 = c.nodes.iter().map(|n| n.free(r).max(0)).sum();
                    st.allocatable.insert(
                        table.name(r).to_string(),
                        Quantity::from_milli(alloc).to_string(),
                    );
                    st.free.insert(
                        table.name(r).to_string(),
                        Quantity::from_milli(free).to_string(),
                    );
                }
            }
            let prev = self
                .member_status
                .get(&name)
                .map(|(s, _)| s.clone())
                .unwrap_or_default();
            let prev_cond = prev.conditions.first();
            let same_cond = prev_cond.is_some_and(|c| c.status == status && c.message == message);
            let last_contact = self
                .members
                .get(&name)
                .and_then(|m| m.health.silent_for())
                .map(|d| {
                    jiff::Timestamp::now()
                        .checked_sub(jiff::SignedDuration::from_secs(d.as_secs() as i64))
                        .unwrap_or_else(|_| jiff::Timestamp::now())
                });
            st.conditions = vec![Condition {
                type_: "Ready".into(),
                status: status.into(),
                reason: reason.into(),
                message,
                last_transition_time: match prev_cond {
                    Some(c) if same_cond => c.last_transition_time.clone(),
                    _ => Time(jiff::Timestamp::now()),
                },
                observed_generation: None,
            }];
            // Last contact moves every second: written when something else changed or every 30 s.
            let stale_contact = prev
                .last_contact
                .as_deref()
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                .is_none_or(|t| jiff::Timestamp::now().duration_since(t).as_secs() > 30);
            st.last_contact = if stale_contact {
                last_contact.map(|t| t.to_string())
            } else {
                prev.last_contact.clone()
            };
            if st == prev {
                continue;
            }
            let api: Api<MemberCluster> = Api::all(self.hub.clone());
            let body =
                json!({"apiVersion": "muster.dev/v1alpha1", "kind": "MemberCluster", "status": st});
            match api
                .patch_status(
                    &name,
                    &PatchParams::apply(MANAGER).force(),
                    &Patch::Apply(&body),
                )
                .await
            {
                Ok(_) => {
                    let at = self
                        .member_status
                        .get(&name)
                        .map(|(_, a)| *a)
                        .unwrap_or_else(Instant::now);
                    self.member_status.insert(name.clone(), (st, at));
                }
                Err(e) => {
                    tracing::warn!(member = %name, error = %e, "could not write MemberCluster status")
                }
            }
        }
    }
}

// ----- jobs -------------------------------------------------------------------------------------

impl Brain {
    fn covered(&self, ns: &str) -> bool {
        self.covered
            .read()
            .map(|c| c.as_ref().is_some_and(|c| c.contains(ns)))
            .unwrap_or(false)
    }

    /// The QueuedJob recorded for a hub job (what an earlier run decided), by the job's UID.
    fn recorded(&self, ns: &str, kind: JobKind, name: &str, uid: &str) -> Option<QueuedJobStatus> {
        let key = reflector::ObjectRef::<QueuedJob>::new(&queued_job_name(kind, name)).within(ns);
        let qj = self.stores.queued.get(&key)?;
        (qj.spec.job_ref.uid == uid)
            .then(|| qj.status.clone())
            .flatten()
    }

    async fn sync_jobs(&mut self) {
        let mut seen: BTreeSet<String> = BTreeSet::new();
        let mut objs: Vec<(JobKind, Arc<DynamicObject>)> = Vec::new();
        for (&kind, store) in &self.stores.jobs {
            for o in store.state() {
                objs.push((kind, o));
            }
        }
        // Oldest first: a rebuilt queue keeps submission order.
        objs.sort_by(|(_, a), (_, b)| {
            (
                a.metadata.creation_timestamp.as_ref().map(|t| t.0),
                a.namespace(),
                a.name_any(),
            )
                .cmp(&(
                    b.metadata.creation_timestamp.as_ref().map(|t| t.0),
                    b.namespace(),
                    b.name_any(),
                ))
        });
        for (kind, obj) in objs {
            let Some(uid) = obj.uid() else { continue };
            let ns = obj.namespace().unwrap_or_default();
            if obj.metadata.deletion_timestamp.is_some() {
                continue;
            }
            if !self.jobs.contains_key(&uid) && !self.covered(&ns) {
                continue;
            }
            seen.insert(uid.clone());
            let value = match serde_json::to_value(obj.as_ref()) {
                Ok(v) => v,
                Err(_) => continue,
            };
            // The hub copy never runs: suspend what the webhook missed (or a user un-suspended).
            if value.pointer(kind.suspend_pointer()) != Some(&Value::Bool(true)) {
                let api: Api<DynamicObject> =
                    Api::namespaced_with(self.hub.clone(), &ns, &kinds::api_resource(kind));
                match api
                    .patch(
                        &obj.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(intake::suspend_merge_patch(kind)),
                    )
                    .await
                {
                    Ok(_) => {
                        tracing::info!(kind = %kind, job = %format!("{ns}/{}", obj.name_any()), "suspended on the hub")
                    }
                    Err(e) => {
                        tracing::warn!(kind = %kind, job = %format!("{ns}/{}", obj.name_any()), error = %e, "could not suspend")
                    }
                }
            }
            let generation = obj.metadata.generation.unwrap_or(0);
            let changed = match self.jobs.get(&uid) {
                None => true,
                Some(t)
                    if t.id.is_none() && t.workload.is_some() && !t.status.state.is_terminal() =>
                {
                    // Taken back: queued again once its backoff has passed.
                    t.backoff_until.is_some_and(|b| Instant::now() >= b)
                }
                Some(t) => {
                    t.generation != generation
                        && t.id.is_none_or(|id| {
                            !matches!(
                                self.sched.state(id),
                                JobState::Admitted { .. } | JobState::Finished
                            )
                        })
                        && !t.status.state.is_terminal()
                }
            };
            if !changed {
                continue;
            }
            let submitted = obj
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.as_second().max(0) as u64)
                .unwrap_or(0);
            let recorded = self.recorded(&ns, kind, &obj.name_any(), &uid);
            let previous = self.jobs.remove(&uid);
            if let Some(id) = previous.as_ref().and_then(|t| t.id) {
                self.sched.finish(id);
                self.by_id.remove(&id);
            }
            let mut t = Tracked {
                kind,
                namespace: ns.clone(),
                name: obj.name_any(),
                api_version: obj
                    .types
                    .as_ref()
                    .map(|t| t.api_version.clone())
                    .unwrap_or_else(|| kind.api_version().into()),
                generation,
                workload: None,
                id: None,
                status: previous
                    .as_ref()
                    .map(|p| p.status.clone())
                    .or_else(|| recorded.clone())
                    .unwrap_or_default(),
                written: previous
                    .as_ref()
                    .and_then(|p| p.written.clone())
                    .or_else(|| recorded.clone()),
                synced_status: None,
                last_create: None,
                queued_at: obj
                    .metadata
                    .creation_timestamp
                    .as_ref()
                    .map(|t| t.0)
                    .unwrap_or_else(jiff::Timestamp::now),
                explained: None,
                backoff_until: None,
                avoid: previous
                    .as_ref()
                    .map(|p| p.avoid.clone())
                    .unwrap_or_default(),
                degraded_since: None,
                ran: false,
                released: BTreeSet::new(),
                mismatched: BTreeSet::new(),
            };
            // Which components a previous run released (the record, and the pods themselves).
            t.released = previous
                .as_ref()
                .map(|p| p.released.clone())
                .unwrap_or_else(|| {
                    t.status
                        .pod_placement
                        .iter()
                        .filter(|p| !p.gated)
                        .map(|p| p.component.clone())
                        .collect()
                });
            if let Some(p) = &previous {
                t.queued_at = p.queued_at;
            }
            let mut events: Vec<(bool, &str, String)> = Vec::new();
            match interpret(&value) {
                Err(e) => {
                    t.status.state = QueuedJobState::Rejected;
                    t.status.reason = Some(format!("malformed: {e}"));
                    let q = self
                        .sched
                        .queue_of_namespace(&ns)
                        .unwrap_or_else(|| ns.clone());
                    self.metrics.rejected(&q);
                    events.push((
                        true,
                        "Malformed",
                        format!("muster cannot read this job: {e}"),
                    ));
                }
                Ok(full) => {
                    let mut w = self.avoiding(full.clone(), &t.avoid);
                    let rec =
                        recorded.filter(|r| r.state.holds_capacity() || r.state.is_terminal());
                    match rec {
                        Some(r) if r.state.is_terminal() => {
                            // Finished in an earlier run: nothing to queue.
                            t.status = r;
                        }
                        Some(r) => {
                            let cluster = r.cluster.clone().unwrap_or_default();
                            match self.sched.restore(&w, submitted, &cluster, &r.placement) {
                                Submitted::Queued(id) | Submitted::Inadmissible(id, _) => {
                                    t.id = Some(id);
                                    tracing::info!(job = %t.label(), cluster = %cluster, state = r.state.as_str(), "restored an admitted job");
                                }
                                Submitted::Ignored(_) => {}
                            }
                        }
                        None => match self.submit_preferring(&mut t, &mut w, full, submitted) {
                            Submitted::Queued(id) => {
                                t.id = Some(id);
                                self.metrics.submitted(self.sched.queue_name(id));
                                t.status.state = QueuedJobState::Queued;
                                t.status.cluster = None;
                                t.status.placement.clear();
                                if previous.is_none() {
                                    events.push((
                                        false,
                                        "Queued",
                                        format!("queued in {}", self.sched.queue_name(id)),
                                    ));
                                }
                            }
                            Submitted::Inadmissible(id, reason) => {
                                t.id = Some(id);
                                self.metrics.rejected(self.sched.queue_name(id));
                                t.status.state = QueuedJobState::Rejected;
                                t.status.reason = Some(reason.clone());
                                events.push((true, "Inadmissible", reason));
                            }
                            Submitted::Ignored(_) => continue,
                        },
                    }
                    t.workload = Some(w);
                }
            }
            if let Some(id) = t.id {
                self.by_id.insert(id, uid.clone());
                t.status.queue = Some(self.sched.queue_name(id).to_string());
                t.status.priority = Some(self.sched.priority(id));
            }
            self.jobs.insert(uid.clone(), t);
            for (warn, reason, note) in events {
                self.event(&uid, warn, reason, note).await;
            }
        }
        // Deleted hub jobs: free their quota and capacity, delete their member copy.
        let gone: Vec<String> = self
            .jobs
            .keys()
            .filter(|u| !seen.contains(*u))
            .cloned()
            .collect();
        for uid in gone {
            let Some(t) = self.jobs.remove(&uid) else {
                continue;
            };
            if let Some(cluster) = t.status.cluster.clone()
                && (t.status.state.holds_capacity() || t.status.state.is_terminal())
                && let Some(m) = self.members.get(&cluster)
            {
                match dispatch::delete(&m.client, t.kind, &t.namespace, &t.name, &uid).await {
                    Ok(deleted) => {
                        tracing::info!(job = %t.label(), %cluster, deleted, "hub job deleted; member copy removed")
                    }
                    Err(e) => {
                        tracing::warn!(job = %t.label(), %cluster, error = %e, "could not delete the member copy; will retry");
                        // Keep tracking it so that the deletion is retried.
                        self.jobs.insert(uid, t);
                        continue;
                    }
                }
            }
            if let Some(id) = t.id {
                self.sched.finish(id);
                self.by_id.remove(&id);
            }
            tracing::info!(job = %t.label(), "hub job gone");
        }
    }

    /// The workload restricted to members where its pods did not get stuck lately (unless that
    /// leaves none).
    fn avoiding(&self, w: Workload, avoid: &BTreeSet<String>) -> Workload {
        let members = self
            .stores
            .members
            .state()
            .iter()
            .map(|m| m.name_any())
            .collect::<Vec<_>>();
        crate::lifecycle::avoiding(w, members, avoid)
    }

    /// Submits `w` (the job restricted to the members it does not avoid). Avoiding a member is a
    /// preference: a job that could not run on the others is submitted again as `full`, judged
    /// against every member, never rejected for the avoid list.
    fn submit_preferring(
        &mut self,
        t: &mut Tracked,
        w: &mut Workload,
        full: Workload,
        submitted: u64,
    ) -> Submitted {
        let s = self.sched.submit(w, submitted);
        match &s {
            Submitted::Inadmissible(id, _) if !t.avoid.is_empty() => {
                self.sched.finish(*id);
                t.avoid.clear();
                *w = full;
                self.sched.submit(w, submitted)
            }
            _ => s,
        }
    }

    /// A job that became inadmissible while it avoids members (where its pods got stuck lately)
    /// is queued again without avoiding them: "can never fit" is judged against every member.
    fn forget_unkeepable_avoid(&mut self) {
        let stuck: Vec<String> = self
            .jobs
            .iter()
            .filter(|(_, t)| {
                !t.avoid.is_empty()
                    && t.id
                        .is_some_and(|id| matches!(self.sched.state(id), JobState::Inadmissible(_)))
            })
            .map(|(u, _)| u.clone())
            .collect();
        for uid in stuck {
            let Some(t) = self.jobs.get_mut(&uid) else {
                continue;
            };
            if let Some(id) = t.id.take() {
                self.sched.finish(id);
                self.by_id.remove(&id);
            }
            tracing::info!(job = %t.label(), avoided = ?t.avoid, "no other member can hold it; no member avoided any more");
            t.avoid.clear();
            // Submitted again (to every member) on the next pass.
            t.backoff_until = Some(Instant::now());
        }
    }

    fn backoff(&self, requeues: u32) -> Duration {
        let base = self.opts.requeue_backoff;
        let factor = 1u32 << requeues.saturating_sub(1).min(16);
        (base * factor).min(self.opts.requeue_backoff_max)
    }

    /// Takes a dispatched job back: its copy deleted (or, if the member does not answer, left
    /// for the garbage collection when it returns), its quota and capacity freed, queued again
    /// after a backoff (none for a lost member), remembering why.
    async fn take_back(&mut self, uid: &str, why: RequeueReason, text: String, avoid: bool) {
        let Some(t) = self.jobs.get(uid) else { return };
        let cluster = t.status.cluster.clone().unwrap_or_default();
        let (kind, ns, name, label) = (t.kind, t.namespace.clone(), t.name.clone(), t.label());
        if why != RequeueReason::MemberLost
            && self.leadership.is_leader()
            && let Some(m) = self.members.get(&cluster)
            && let Err(e) = dispatch::delete(&m.client, kind, &ns, &name, uid).await
        {
            tracing::warn!(job = %label, %cluster, error = %e, "could not delete the copy; the garbage collection will");
        }
        let queue = self
            .jobs
            .get(uid)
            .and_then(|t| t.status.queue.clone())
            .unwrap_or_default();
        self.metrics.requeued(&queue, why);
        let requeues = self
            .jobs
            .get(uid)
            .map(|t| t.status.requeues + 1)
            .unwrap_or(1);
        let wait = if why == RequeueReason::MemberLost {
            Duration::ZERO
        } else {
            self.backoff(requeues)
        };
        let Some(t) = self.jobs.get_mut(uid) else {
            return;
        };
        if let Some(id) = t.id.take() {
            self.sched.finish(id);
            self.by_id.remove(&id);
        }
        if avoid {
            t.avoid.insert(cluster.clone());
        }
        t.backoff_until = Some(Instant::now() + wait);
        t.status.state = QueuedJobState::Queued;
        t.status.cluster = None;
        t.status.placement.clear();
        t.status.pods = None;
        t.forget_placement();
        t.status.dispatched_at = None;
        t.status.requeues = requeues;
        t.queued_at = jiff::Timestamp::now();
        t.degraded_since = None;
        t.ran = false;
        t.explained = None;
        let msg = if wait.is_zero() {
            format!("taken back from {cluster}: {text}; queued again")
        } else {
            format!(
                "taken back from {cluster}: {text}; queued again in {}s",
                wait.as_secs()
            )
        };
        t.status.reason = Some(msg.clone());
        tracing::warn!(job = %label, %cluster, reason = why.as_str(), "{msg}");
        self.event(uid, true, "Requeued", msg).await;
    }

    /// Members that have not answered for longer than the grace period: their jobs are taken
    /// back and placed elsewhere.
    async fn requeue_from_lost_members(&mut self) {
        let grace = self.opts.member_lost_grace;
        let lost: Vec<String> = self
            .members
            .iter()
            .filter(|(_, m)| {
                m.health.failures() > 0 && m.health.silent_for().is_some_and(|d| d > grace)
            })
            .map(|(n, _)| n.clone())
            .collect();
        for cluster in lost {
            let uids: Vec<String> = self
                .jobs
                .iter()
                .filter(|(_, t)| {
                    t.status.state.holds_capacity() && t.status.cluster.as_deref() == Some(&cluster)
                })
                .map(|(u, _)| u.clone())
                .collect();
            for uid in uids {
                let text = format!(
                    "member {cluster} has not answered for over {}s",
                    grace.as_secs()
                );
                self.take_back(&uid, RequeueReason::MemberLost, text, false)
                    .await;
            }
        }
    }

    /// Deletes member copies no job should have there: the hub job is gone (known deleted: not in
    /// the synced hub store, or there under another UID), or a job muster follows now runs (or
    /// waits) elsewhere. A copy of a job muster does not follow (no valid tree in force, its
    /// namespace no longer covered, its kind not watched) is never touched. Level-triggered from
    /// what the members and the hub say, so it also cleans up after a member that was lost and
    /// came back, and after a restart.
    async fn collect_garbage(&mut self) {
        if !self.leadership.is_leader() {
            return;
        }
        let mut doomed = Vec::new();
        for (cluster, m) in &self.members {
            if !m.synced() || m.health.failures() > 0 {
                continue;
            }
            for (&kind, store) in &m.jobs {
                for copy in store.state() {
                    let labels = copy.labels();
                    if labels.get(members::ORIGIN_LABEL) != Some(&self.opts.origin) {
                        continue;
                    }
                    let Some(uid) = labels.get(members::JOB_UID_LABEL) else {
                        continue;
                    };
                    let (ns, name) = (copy.namespace().unwrap_or_default(), copy.name_any());
                    let keep = match self.jobs.get(uid) {
                        Some(t) => {
                            t.status.cluster.as_deref() == Some(cluster.as_str())
                                && (t.status.state.holds_capacity() || t.status.state.is_terminal())
                        }
                        // Not followed (no valid tree in force, its namespace left the tree):
                        // never touched while its hub job exists; only the copy of a hub job
                        // known deleted goes.
                        None => {
                            !self.stores.jobs.contains_key(&kind)
                                || self.stores.job(kind, &ns, &name).is_some_and(|hub| {
                                    hub.metadata.uid.as_deref() == Some(uid.as_str())
                                })
                        }
                    };
                    if !keep && copy.metadata.deletion_timestamp.is_none() {
                        doomed.push((cluster.clone(), kind, ns, name, uid.clone()));
                    }
                }
            }
        }
        for (cluster, kind, ns, name, uid) in doomed {
            let Some(m) = self.members.get(&cluster) else {
                continue;
            };
            match dispatch::delete(&m.client, kind, &ns, &name, &uid).await {
                Ok(true) => {
                    tracing::info!(%cluster, job = %format!("{kind} {ns}/{name}"), "deleted a stale copy")
                }
                Ok(false) => {}
                Err(e) => tracing::warn!(%cluster, error = %e, "could not delete a stale copy"),
            }
        }
    }

    async fn apply(&mut self, d: Decision) {
        match d {
            Decision::Admit { job, cluster, .. } => {
                let Some(uid) = self.by_id.get(&job).cloned() else {
                    return;
                };
                let plan = self.sched.plan(job).map(|(_, p)| p).unwrap_or_default();
                let Some(t) = self.jobs.get_mut(&uid) else {
                    return;
                };
                t.status.state = QueuedJobState::Admitted;
                t.status.cluster = Some(cluster.clone());
                t.status.placement = plan.clone();
                t.status.admitted_at = Some(now_rfc3339());
                t.status.dispatched_at = None;
                t.status.pods = None;
                t.forget_placement();
                t.status.reason = Some(format!("admitted to {cluster}"));
                // The admission is durable before anything is created on the member.
                if let Err(e) = self.write_status(&uid).await {
                    tracing::warn!(job = %uid, error = %e, "could not record the admission; requeued");
                    self.sched
                        .requeue(job, &format!("could not record the admission: {e}"));
                    if let Some(t) = self.jobs.get_mut(&uid) {
                        t.status.state = QueuedJobState::Queued;
                        t.status.cluster = None;
                        t.status.placement.clear();
                    }
                    return;
                }
                let queue = self.sched.queue_name(job).to_string();
                self.metrics.admitted(&queue, &cluster);
                if let Some(t) = self.jobs.get(&uid) {
                    let waited = jiff::Timestamp::now().duration_since(t.queued_at);
                    self.metrics
                        .wait_time(&queue, waited.as_secs_f64().max(0.0));
                }
                let nodes: Vec<String> = plan
                    .values()
                    .flat_map(|m| m.iter().map(|(n, k)| format!("{n}×{k}")))
                    .collect();
                self.event(
                    &uid,
                    false,
                    "Admitted",
                    format!(
                        "admitted to {cluster}, pods planned on {}",
                        nodes.join(", ")
                    ),
                )
                .await;
                self.dispatch(&uid).await;
            }
            Decision::Preempt { job, by, reason } => {
                let Some(uid) = self.by_id.get(&job).cloned() else {
                    return;
                };
                let by_label = self.sched.job_label(by);
                let queue = self.sched.queue_name(job).to_string();
                if let Some(c) = self.jobs.get(&uid).and_then(|t| t.status.cluster.clone()) {
                    self.metrics.preempted(&queue, &c);
                }
                self.metrics.requeued(&queue, RequeueReason::Preempted);
                if let Some(t) = self.jobs.get(&uid)
                    && let Some(cluster) = t.status.cluster.clone()
                    && let Some(m) = self.members.get(&cluster)
                    && let Err(e) =
                        dispatch::delete(&m.client, t.kind, &t.namespace, &t.name, &uid).await
                {
                    tracing::warn!(job = %t.label(), error = %e, "could not delete a preempted copy");
                }
                if let Some(t) = self.jobs.get_mut(&uid) {
                    t.status.state = QueuedJobState::Queued;
                    t.status.cluster = None;
                    t.status.placement.clear();
                    t.status.pods = None;
                    t.forget_placement();
                    t.status.requeues += 1;
                    t.status.reason =
                        Some(format!("preempted so that {by_label} can run: {reason}"));
                }
                self.event(
                    &uid,
                    true,
                    "Preempted",
                    format!("taken back so that {by_label} can run: {reason}"),
                )
                .await;
            }
            Decision::Wait { job, reason } => {
                if let Some(uid) = self.by_id.get(&job).cloned()
                    && let Some(t) = self.jobs.get_mut(&uid)
                {
                    t.status.reason = Some(reason);
                }
            }
        }
    }

    /// Creates the member copy of an admitted job (idempotent).
    async fn dispatch(&mut self, uid: &str) {
        if !self.leadership.is_leader() {
            return;
        }
        let Some(t) = self.jobs.get(uid) else { return };
        let (Some(cluster), Some(w)) = (t.status.cluster.clone(), t.workload.clone()) else {
            return;
        };
        let Some(m) = self.members.get(&cluster) else {
            tracing::warn!(job = %t.label(), %cluster, "member not connected; dispatch retried later");
            return;
        };
        let kind = t.kind;
        let Some(hub_obj) = self.stores.job(kind, &t.namespace, &t.name) else {
            return;
        };
        let Ok(hub_value) = serde_json::to_value(hub_obj.as_ref()) else {
            return;
        };
        let gates = self.placement_mode(&cluster).0 == crate::fleet::PlacementMode::Gates;
        let copy = dispatch::member_copy(
            &hub_value,
            &w,
            uid,
            &self.opts.origin,
            &t.status.placement,
            gates,
        );
        let result = dispatch::create(&m.client, &cluster, kind, &copy).await;
        let queue = t.status.queue.clone().unwrap_or_default();
        let Some(t) = self.jobs.get_mut(uid) else {
            return;
        };
        t.last_create = Some(Instant::now());
        match result {
            Ok(_) => {
                if t.status.state == QueuedJobState::Admitted {
                    self.metrics.dispatched(&queue, &cluster);
                    t.status.state = QueuedJobState::Dispatched;
                    t.status.dispatched_at = Some(now_rfc3339());
                    t.status.reason =
                        Some(format!("dispatched to {cluster}; waiting for its pods"));
                    tracing::info!(job = %t.label(), %cluster, "dispatched");
                    self.event(uid, false, "Dispatched", format!("created in {cluster}"))
                        .await;
                }
            }
            Err(e) => {
                self.metrics.dispatch_error(&cluster, e.failure());
                tracing::warn!(job = %t.label(), %cluster, reason = e.reason(), error = %e, "dispatch failed");
                t.status.reason = Some(format!("dispatch to {cluster} failed: {e}"));
                self.event(uid, true, "DispatchFailed", format!("{cluster}: {e}"))
                    .await;
            }
        }
    }

    /// Follows every dispatched job on its member: pods, outcome, status back to the hub.
    async fn sync_dispatched(&mut self) {
        let uids: Vec<String> = self
            .jobs
            .iter()
            .filter(|(_, t)| t.status.state.holds_capacity())
            .map(|(u, _)| u.clone())
            .collect();
        for uid in uids {
            let Some(t) = self.jobs.get(&uid) else {
                continue;
            };
            let Some(cluster) = t.status.cluster.clone() else {
                continue;
            };
            let Some(m) = self.members.get(&cluster) else {
                continue;
            };
            if !m.synced() {
                continue;
            }
            let kind = t.kind;
            let copy = m.copy_of(kind, &uid);
            let Some(copy) = copy else {
                // Not created yet, or not seen yet: create (idempotent), at most every 5 s.
                if t.last_create
                    .is_none_or(|at| at.elapsed() > Duration::from_secs(5))
                {
                    self.dispatch(&uid).await;
                }
                continue;
            };
            let expected = t
                .workload
                .as_ref()
                .map(|w| w.pod_count() as u32)
                .unwrap_or(0);
            let pods_all = m.pods.state();
            let pods = members::pods_of(&pods_all, &uid);
            let Ok(copy_value) = serde_json::to_value(copy.as_ref()) else {
                continue;
            };
            let observed = status::observe(kind, &copy_value, &pods, expected);
            // Once every pod is bound, the reservation becomes where the pods really are.
            let scheduled = status::tally(&pods).scheduled;
            if expected > 0
                && scheduled == expected
                && let Some(id) = t.id
            {
                let mut plan: Plan = BTreeMap::new();
                for p in &pods {
                    let comp = p.labels().get(COMPONENT_LABEL).cloned().unwrap_or_default();
                    if let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.clone()) {
                        *plan.entry(comp).or_default().entry(node).or_insert(0) += 1;
                    }
                }
                self.sched.rebind(id, &plan);
            }
            // Each pod onto its planned node; why pods wait, in the member scheduler's words.
            let placed = self.place_pods(&uid, &cluster, &copy_value, &pods).await;
            let unschedulable = placed.pending.or(placed.held);
            let member_status = copy_value.get("status").cloned();
            let Some(t) = self.jobs.get_mut(&uid) else {
                continue;
            };
            let before = t.status.state;
            match &observed {
                Observed::Starting { scheduled, running } => {
                    t.status.pods = Some(PodCounts {
                        expected,
                        scheduled: *scheduled,
                        running: *running,
                    });
                    if before == QueuedJobState::Running || before == QueuedJobState::Admitted {
                        t.status.state = QueuedJobState::Dispatched;
                    }
                    t.status.reason = Some(format!(
                        "dispatched to {cluster}: {running}/{expected} pods running, {scheduled} scheduled{}",
                        unschedulable
                            .as_ref()
                            .map(|u| format!("; {u}"))
                            .unwrap_or_default()
                    ));
                }
                Observed::Running { scheduled, running } => {
                    t.status.pods = Some(PodCounts {
                        expected,
                        scheduled: *scheduled,
                        running: *running,
                    });
                    t.status.state = QueuedJobState::Running;
                    t.status.reason =
                        Some(format!("running on {cluster}: {running}/{expected} pods"));
                }
                Observed::Succeeded => {
                    t.status.state = QueuedJobState::Finished;
                    t.status.reason = Some(format!("succeeded on {cluster}"));
                }
                Observed::Failed(msg) => {
                    t.status.state = QueuedJobState::Failed;
                    t.status.reason = Some(format!("failed on {cluster}: {msg}"));
                }
            }
            let after = t.status.state;
            // Stuck or lost pods: take the job back (the decision was wrong or is no longer true).
            let mut take: Option<(RequeueReason, String, bool)> = None;
            match &observed {
                Observed::Running { .. } => {
                    t.ran = true;
                    t.degraded_since = None;
                }
                Observed::Starting { running, .. } if t.ran => {
                    let since = *t.degraded_since.get_or_insert_with(Instant::now);
                    if since.elapsed() > self.opts.pods_lost_timeout {
                        take = Some((
                            RequeueReason::PodsLost,
                            format!(
                                "only {running} of {expected} pods running for over {}s after it ran",
                                self.opts.pods_lost_timeout.as_secs()
                            ),
                            false,
                        ));
                    }
                }
                Observed::Starting { running, .. } => {
                    let waited = t
                        .status
                        .dispatched_at
                        .as_deref()
                        .and_then(|d| d.parse::<jiff::Timestamp>().ok())
                        .map(|d| jiff::Timestamp::now().duration_since(d));
                    if waited.is_some_and(|w| {
                        w.as_secs() >= self.opts.pods_ready_timeout.as_secs() as i64
                    }) {
                        take = Some((
                            RequeueReason::StuckPods,
                            format!(
                                "{running} of {expected} pods running {}s after dispatch{}",
                                self.opts.pods_ready_timeout.as_secs(),
                                unschedulable
                                    .as_ref()
                                    .map(|u| format!(" ({u})"))
                                    .unwrap_or_default()
                            ),
                            true,
                        ));
                    }
                }
                _ => {}
            }
            if after.is_terminal()
                && let Some(id) = t.id
            {
                // Frees quota and capacity for the next cycle.
                let outcome = if after == QueuedJobState::Finished {
                    Outcome::Succeeded
                } else {
                    Outcome::Failed
                };
                self.metrics
                    .finished(self.sched.queue_name(id), &cluster, outcome);
                self.sched.finish(id);
            }
            let sync_hub = member_status.is_some() && t.synced_status != member_status;
            let (ns, name, label) = (t.namespace.clone(), t.name.clone(), t.label());
            if sync_hub && let Some(st) = member_status {
                let hub_status = self
                    .stores
                    .job(kind, &ns, &name)
                    .and_then(|o| o.data.get("status").cloned());
                let patch = status::replace_patch(hub_status.as_ref(), &st);
                let api: Api<DynamicObject> =
                    Api::namespaced_with(self.hub.clone(), &ns, &kinds::api_resource(kind));
                match api
                    .patch_status(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"status": patch})),
                    )
                    .await
                {
                    Ok(_) => {
                        if let Some(t) = self.jobs.get_mut(&uid) {
                            t.synced_status = Some(st);
                        }
                    }
                    Err(e) => {
                        tracing::debug!(job = %label, error = %e, "hub job status not updated")
                    }
                }
            }
            if before != after {
                tracing::info!(job = %label, from = before.as_str(), to = after.as_str(), "state");
                let note = self
                    .jobs
                    .get(&uid)
                    .and_then(|t| t.status.reason.clone())
                    .unwrap_or_default();
                self.event(&uid, after == QueuedJobState::Failed, after.as_str(), note)
                    .await;
            }
            if let Some((why, text, avoid)) = take {
                self.take_back(&uid, why, text, avoid).await;
            }
        }
    }

    /// Why each queued job waits, as the core says; the full explanation is recomputed when the
    /// core's reason changes (and at most every 30 s otherwise), since it tries every member.
    fn sync_reasons(&mut self) {
        for t in self.jobs.values_mut() {
            let Some(id) = t.id else { continue };
            t.status.queue = Some(self.sched.queue_name(id).to_string());
            t.status.priority = Some(self.sched.priority(id));
            let waiting = match self.sched.state(id) {
                JobState::Pending => {
                    t.status.state = QueuedJobState::Queued;
                    true
                }
                JobState::Inadmissible(_) => {
                    t.status.state = QueuedJobState::Rejected;
                    true
                }
                _ => false,
            };
            if !waiting {
                t.status.explanation = None;
                t.explained = None;
                continue;
            }
            let core_reason = self.sched.reason(id).unwrap_or_default();
            let stale = t
                .explained
                .as_ref()
                .is_none_or(|(r, at)| *r != core_reason || at.elapsed() > Duration::from_secs(30));
            if stale {
                let e = self.sched.explain(id);
                t.status.reason = Some(e.summary());
                t.status.explanation = Some(truncate(&e.to_string(), 8000));
                t.explained = Some((core_reason, Instant::now()));
            }
        }
    }

    async fn write_status(&mut self, uid: &str) -> Result<(), kube::Error> {
        let Some(t) = self.jobs.get(uid) else {
            return Ok(());
        };
        let api: Api<QueuedJob> = Api::namespaced(self.hub.clone(), &t.namespace);
        let name = queued_job_name(t.kind, &t.name);
        let mut status = t.status.clone();
        if t.written.as_ref().map(|w| w.state) != Some(status.state) {
            status.last_transition = Some(now_rfc3339());
        } else if let Some(w) = &t.written {
            status.last_transition = w.last_transition.clone();
        }
        if t.written.as_ref() == Some(&status) {
            return Ok(());
        }
        if t.written.is_none() {
            let mut qj = QueuedJob::new(
                &name,
                QueuedJobSpec {
                    job_ref: JobRef {
                        api_version: t.api_version.clone(),
                        kind: t.kind.as_str().into(),
                        name: t.name.clone(),
                        uid: uid.to_string(),
                    },
                },
            );
            qj.metadata.namespace = Some(t.namespace.clone());
            qj.metadata.owner_references = Some(vec![
                k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                    api_version: t.api_version.clone(),
                    kind: t.kind.as_str().into(),
                    name: t.name.clone(),
                    uid: uid.to_string(),
                    controller: Some(true),
                    block_owner_deletion: Some(false),
                },
            ]);
            api.patch(
                &name,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(&qj),
            )
            .await?;
        }
        let body =
            json!({"apiVersion": "muster.dev/v1alpha1", "kind": "QueuedJob", "status": status});
        api.patch_status(
            &name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await?;
        if let Some(t) = self.jobs.get_mut(uid) {
            t.status.last_transition = status.last_transition.clone();
            t.written = Some(status);
        }
        Ok(())
    }

    async fn write_statuses(&mut self) {
        let dirty: Vec<String> = self
            .jobs
            .iter()
            .filter(|(_, t)| {
                t.written.as_ref().is_none_or(|w| {
                    let mut a = w.clone();
                    a.last_transition = None;
                    let mut b = t.status.clone();
                    b.last_transition = None;
                    a != b
                })
            })
            .map(|(u, _)| u.clone())
            .collect();
        for uid in dirty {
            let prev = self
                .jobs
                .get(&uid)
                .and_then(|t| t.written.as_ref().map(|w| w.state));
            if let Err(e) = self.write_status(&uid).await {
                tracing::warn!(job = %uid, error = %e, "could not write QueuedJob status");
                continue;
            }
            // A rejected job that became admissible (a tree or PriorityClass change) gets its
            // Event here; every other transition gets one where it happens.
            if let Some(t) = self.jobs.get(&uid) {
                let now = t.status.state;
                if prev == Some(QueuedJobState::Rejected) && now == QueuedJobState::Queued {
                    let note = t.status.reason.clone().unwrap_or_default();
                    self.event(&uid, false, "Queued", note).await;
                }
            }
        }
    }
}
