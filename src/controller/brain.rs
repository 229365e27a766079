//! The controller's state and its pass. `Brain::sync` is the one place that says in what order
//! things happen: read the tree, the members and the hub jobs; observe every followed job on its
//! members; one pass of the lifecycle book (every job stepped, one scheduling cycle); carry out
//! the intents, then the writes observing asked for (pod releases, hub statuses); send the
//! records; report. No step waits for a hub or member write: they go off the loop (`execute`,
//! `writes`) and their outcomes are read at the start of the next pass. Each step lives in the
//! module named after what it owns (`tree`, `membership`, `jobs`, `gc`, `observe`, `execute`,
//! `record`); what each decides is the core's.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::ResourceExt;
use kube::runtime::events::Recorder;
use tokio::sync::{Notify, mpsc};

use super::crd::{ElasticQuotaTreeStatus, MemberClusterStatus};
use super::execute::Done;
use super::jobs::Job;
use super::members::Member;
use super::{HubStores, Options, intake, leader};
use crate::fleet::ClusterInfo;
use crate::lifecycle::{Book, Ms, Settings};
use crate::metrics::Metrics;
use crate::quantity::ResourceList;
use crate::scheduler::{Config, Scheduler};
use crate::workload::{JobKind, TrainingRuntimes};

pub(super) struct Brain {
    pub hub: Client,
    pub opts: Options,
    pub stores: HubStores,
    pub covered: intake::Covered,
    /// Events on hub objects, published off the loop.
    pub events: super::events::Events,
    pub wake: Arc<Notify>,
    pub metrics: Arc<Metrics>,
    pub leadership: Arc<leader::Leadership>,
    pub sched: Scheduler,
    /// Every followed job's lifecycle record and scheduler entry (shared with `sim::faults`).
    pub book: Book,
    /// What the controller knows of each followed hub job beyond its record.
    pub jobs: HashMap<String, Job>,
    /// Hub jobs muster does not queue (outside the tree), by the generation last tried.
    pub ignored: HashMap<String, i64>,
    /// Hub jobs made again under the name of an earlier job whose QueuedJob is still kept, by
    /// that job's UID (they wait for it to go; said once).
    pub name_waits: HashMap<String, String>,
    /// Member I/O finished off the sync loop (creates), read at the start of the next pass.
    pub done_tx: mpsc::UnboundedSender<Done>,
    pub done_rx: mpsc::UnboundedReceiver<Done>,
    /// Member writes under way: (job, member).
    pub in_flight: std::collections::BTreeSet<(String, String)>,
    /// Fresh reads of members under way: (job, member) ([`super::reads`]).
    pub reading: std::collections::BTreeSet<(String, String)>,
    /// QueuedJob status batches out (which go, and when: the core's).
    pub outbox: crate::lifecycle::outbox::Outbox,
    /// Permits and observed writes under way.
    pub in_flight_writes: super::writes::InFlight,
    /// Quota tree and member status reports under way.
    pub reports: super::reports::Reports,
    /// The earliest deadline of any record: the next pass comes no later.
    pub next_wake: Option<Ms>,
    pub members: BTreeMap<String, Member>,
    /// New connections of connected members, swapped in once in sync.
    pub incoming: BTreeMap<String, Member>,
    /// Members being connected (their source, the task).
    pub connecting: BTreeMap<String, (String, tokio::task::JoinHandle<anyhow::Result<Member>>)>,
    /// Members known but not connected, since when (this process's view).
    pub unconnected_since: BTreeMap<String, Ms>,
    /// Per member: why it could not be connected (for its status).
    pub member_errors: BTreeMap<String, String>,
    /// Last written MemberCluster status, and when.
    pub member_status: BTreeMap<String, (MemberClusterStatus, Instant)>,
    /// Per member: what the core was last told (nodes, reachability, per-node usage).
    pub told_nodes: HashMap<String, ClusterInfo>,
    pub told_reachable: HashMap<String, bool>,
    pub told_usage: HashMap<String, BTreeMap<String, ResourceList>>,
    /// The tree in force: (uid, generation) of the object last applied or rejected.
    pub tree_seen: Option<(String, i64)>,
    pub tree_status: Option<ElasticQuotaTreeStatus>,
    pub tree_status_written: Option<ElasticQuotaTreeStatus>,
    pub tree_ref: Option<(String, String)>,
    /// Members seen dropping muster's scheduling gate (placed in pinned mode from then on),
    /// with the evidence.
    pub gates_dropped: BTreeMap<String, String>,
    pub priorities: BTreeMap<String, i32>,
    /// The hub's training runtimes, which TrainJobs are read against.
    pub runtimes: TrainingRuntimes,
    /// Members whose operator for a kind is seen not to act.
    pub operators: super::operators::Operators,
    pub epoch: Instant,
    /// When the hub's job kinds were last discovered.
    pub kinds_checked: Instant,
    /// Members to connect again (they do not watch a kind a job needs), and when last asked.
    pub rediscover: BTreeMap<String, Instant>,
    /// Start-time forecasts and the run-time history.
    pub forecasts: super::forecasting::Forecasts,
    /// The quota tree in force, as applied (for snapshots).
    pub tree_manifest: Option<serde_json::Value>,
    /// Snapshots asked for over HTTP, answered at the end of a pass.
    pub snapshots: Option<mpsc::Receiver<super::snapshot::Ask>>,
    /// The hub's verdicts on pod templates (server-side dry runs).
    pub hub_checks: super::hubcheck::HubChecks,
    /// QueuedJobs whose `muster.dev/record` finalizer is being added or removed.
    pub finalizing: super::finalizers::Finalizing,
}

impl Brain {
    pub fn new(
        hub: Client,
        opts: Options,
        stores: HubStores,
        covered: intake::Covered,
        recorder: Recorder,
        wake: Arc<Notify>,
        metrics: Arc<Metrics>,
    ) -> Brain {
        let (done_tx, done_rx) = mpsc::unbounded_channel();
        let settings = settings(&opts);
        Brain {
            metrics,
            leadership: leader::Leadership::always(),
            hub,
            opts,
            stores,
            covered,
            events: super::events::Events::start(recorder),
            wake,
            sched: Scheduler::new(Config::default()),
            book: Book::new(settings),
            jobs: HashMap::new(),
            ignored: HashMap::new(),
            name_waits: HashMap::new(),
            done_tx,
            done_rx,
            in_flight: Default::default(),
            reading: Default::default(),
            outbox: Default::default(),
            in_flight_writes: Default::default(),
            reports: Default::default(),
            next_wake: None,
            members: BTreeMap::new(),
            incoming: BTreeMap::new(),
            connecting: BTreeMap::new(),
            unconnected_since: BTreeMap::new(),
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
            runtimes: TrainingRuntimes::default(),
            operators: Default::default(),
            epoch: Instant::now(),
            kinds_checked: Instant::now(),
            rediscover: BTreeMap::new(),
            forecasts: Default::default(),
            tree_manifest: None,
            snapshots: None,
            hub_checks: Default::default(),
            finalizing: Default::default(),
        }
    }

    /// One pass: observe, decide, act, report. A pass slower than a second says where its
    /// time went.
    pub async fn sync(&mut self) {
        let mut t = Steps::new();
        // 1. What the hub and the members say.
        self.next_wake = None;
        self.sync_priorities();
        self.sync_runtimes();
        self.sync_tree().await;
        self.sync_members().await;
        t.mark("tree+members");
        if !self.members_settled() {
            // Deciding before every member's nodes are known would call jobs unfit (or place
            // them on the members that happened to answer first).
            return;
        }
        self.collect_done();
        self.discover_kinds().await;
        let gone = self.sync_jobs().await;
        self.sync_usage();
        t.mark("jobs");
        // 2. The housekeeping (the core's `tidy`): gone hub jobs, copies to collect, QueuedJobs
        // deleted or to keep. Then every followed job on its members (pods to place, hub status
        // to sync).
        self.tidy(gone);
        self.settle_sent();
        let (view, writes) = self.observe();
        // 3. The lifecycle: every job stepped, one scheduling cycle.
        let started = Instant::now();
        let intents = self.step_all(&view);
        self.metrics.cycle_duration(started.elapsed().as_secs_f64());
        t.mark("decide");
        // 4. Carry out what it says (creates start at once, off the loop), then what observing
        // asked for; send the records (in the book's order, off the loop); report.
        self.execute_all(intents).await;
        self.carry_out(writes);
        t.mark("execute+observed");
        self.sync_reasons();
        t.mark("reasons");
        self.write_records();
        t.mark("records");
        self.write_tree_status();
        self.write_member_statuses();
        self.metrics.observe(&self.sched);
        let mut twice: BTreeMap<String, i64> = BTreeMap::new();
        for (_, e) in self.book.iter() {
            for c in e.record.orphans.keys() {
                if e.record.cluster.as_deref() != Some(c) && !self.answering(c) {
                    *twice.entry(c.clone()).or_default() += 1;
                }
            }
        }
        self.metrics.maybe_running_twice(&twice);
        t.mark("statuses");
        // 5. Forecasts (off the loop) and snapshots asked for.
        self.forecast().await;
        self.answer_snapshots();
        t.mark("forecast");
        t.report(self.book.iter().count());
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

    /// The hub's training runtimes; when they change, every TrainJob is read again. One that
    /// waits, or is admitted with no copy yet, is judged as it reads now; one whose copy runs
    /// keeps the spec it was admitted with while its generation has not moved (the core's
    /// rule: taking it back would kill a running job for an edit it never asked for; Trainer
    /// does not respec a running TrainJob either).
    fn sync_runtimes(&mut self) {
        let Some(w) = &self.stores.runtimes else {
            return;
        };
        let now = w.index();
        if now != self.runtimes {
            self.runtimes = now;
            for j in self.jobs.values_mut() {
                if j.kind == JobKind::TrainJob {
                    j.read_again = true;
                }
            }
        }
    }

    /// An Event on the hub job `uid` (queued, never awaited).
    pub fn event(&self, uid: &str, warning: bool, reason: &str, note: String) {
        if let Some(t) = self.jobs.get(uid) {
            self.publish(&t.object_ref(uid), warning, reason, note);
        }
    }

    pub fn publish(&self, oref: &ObjectReference, warning: bool, reason: &str, note: String) {
        self.events.send(oref.clone(), warning, reason, &note);
    }
}

/// How long each step of a pass took.
struct Steps {
    start: Instant,
    last: Instant,
    steps: Vec<(&'static str, std::time::Duration)>,
}

impl Steps {
    fn new() -> Steps {
        let now = Instant::now();
        Steps {
            start: now,
            last: now,
            steps: Vec::new(),
        }
    }

    fn mark(&mut self, step: &'static str) {
        let now = Instant::now();
        self.steps.push((step, now - self.last));
        self.last = now;
    }

    /// Logged when the pass took more than a second.
    fn report(&self, jobs: usize) {
        let total = self.start.elapsed();
        if total < std::time::Duration::from_secs(1) {
            return;
        }
        let steps: Vec<String> = self
            .steps
            .iter()
            .map(|(s, d)| format!("{s} {} ms", d.as_millis()))
            .collect();
        tracing::info!(
            jobs,
            "slow pass: {} ms ({})",
            total.as_millis(),
            steps.join(", ")
        );
    }
}

/// The lifecycle's settings from the controller's flags.
pub(super) fn settings(o: &Options) -> Settings {
    let ms = |d: std::time::Duration| d.as_millis().min(u128::from(u64::MAX)) as u64;
    Settings {
        pods_ready_timeout: ms(o.pods_ready_timeout),
        pods_lost_timeout: ms(o.pods_lost_timeout),
        member_lost_grace: ms(o.member_lost_grace),
        copy_missing_grace: ms(o.copy_missing_grace),
        create_retry: 5_000,
        create_give_up: ms(o.create_give_up),
        backoff: ms(o.requeue_backoff),
        backoff_max: ms(o.requeue_backoff_max),
        drain_grace: Settings::default().drain_grace,
        record_settle: Settings::default().record_settle,
        creates_per_member: super::members::WRITES_PER_MEMBER,
        defect: None,
        partition: o.partition,
    }
}

pub(super) fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}
