//! The simulated world of a fault run: members whose job controllers run pods on a virtual
//! clock (batch Jobs in waves, PyTorchJobs whose workers may finish before or after their
//! master), and a hub that holds jobs and QueuedJob records. Faults are applied to it by the
//! run; it never decides anything for muster.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::quantity::ResourceList;

use super::TREE_MAX;
use crate::fleet::{ClusterInfo, NodeInfo, Serves};
use crate::lifecycle::Defect;
use crate::lifecycle::outbox::{self, NameHeld};
use crate::lifecycle::patch;
use crate::lifecycle::tidy::Name;
use crate::lifecycle::wire::{QueuedJobStatus, from_status};
use crate::lifecycle::{Copy, Member as Seen, Ms, Progress, Record, Spec, spec_of};
use crate::workload::{RuntimeKey, RuntimeNeed, interpret};

/// A seeded generator (splitmix64): the same seed gives the same run.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (0 when n is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }

    /// True with probability `per_mille`/1000.
    pub fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodState {
    Pending,
    Running,
    Succeeded,
}

/// A pod on a member: `role` 0 is the master (PyTorchJob) or any pod (batch Job).
#[derive(Clone, Debug)]
pub struct Pod {
    pub role: u8,
    pub state: PodState,
    /// When it starts (Pending) or ends (Running).
    pub at: Ms,
    /// How long it runs once started.
    pub runs: Ms,
}

/// The hub's training runtime, which the jobs that `trains` name: its per-pod cpu, and when it
/// is edited (drawn from a stream of its own: a run without one is the run it was before).
#[derive(Clone, Debug, Default)]
pub struct Runtime {
    pub cpu: u32,
    /// When it is edited next (ascending).
    pub edits: Vec<Ms>,
}

/// A job's copy on a member.
#[derive(Clone, Debug)]
pub struct SimCopy {
    pub uid: String,
    pub generation: i64,
    pub pods: Vec<Pod>,
    /// Batch Job: pods at a time, and completions not started yet.
    pub par: u32,
    pub to_start: u32,
    /// Whole CPUs per pod (as the copy's spec asks).
    pub cpu: u32,
    pub outcome: Option<bool>,
    /// A batch Job: when its last pod succeeded. Its controller says Complete
    /// [`OUTCOME_LAG`] later, as a member's Job controller counts its pods on its own time.
    pub done_at: Option<Ms>,
    /// Deleted at, and held by a finalizer until (its operator does not act): it stays
    /// visible, Terminating, and its pods go on running (background deletion removes them only
    /// once it is gone).
    pub deleting: Option<(Ms, Ms)>,
}

/// How long after a batch Job's last pod succeeded its member's controller says it is complete.
pub const OUTCOME_LAG: Ms = 2_000;

/// What a job is and how it runs.
#[derive(Clone, Debug)]
pub enum Shape {
    /// A batch Job: `parallelism` pods at a time until `completions` succeeded.
    Batch { parallelism: u32, completions: u32 },
    /// A PyTorchJob: a master and `workers`; the job ends with its master. With `linger`,
    /// workers outlive it (cleanPodPolicy None), else they finish first.
    Torch { workers: u32, linger: bool },
}

#[derive(Clone, Debug)]
pub struct HubJob {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub shape: Shape,
    /// Whole CPUs per pod.
    pub cpu: u32,
    pub runs: Ms,
    pub generation: i64,
    /// A TrainJob's stand-in: its pods ask for the per-pod cpu of the hub's training runtime
    /// ([`Runtime`]), not its own `cpu`, so an edit of the runtime changes how it reads while
    /// its generation stays.
    pub trains: bool,
    pub deleted: bool,
    /// Creation time, seconds.
    pub submitted: u64,
    /// Its spec as the controller reads it (kept current by [`HubJob::read`]).
    pub spec: Spec,
}

impl HubJob {
    /// The name of its QueuedJob (named after the job: one made again under a deleted job's
    /// name finds that job's QueuedJob there).
    pub fn queued_name(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Whole CPUs per pod of a copy made now, under a training runtime of `runtime` cpu.
    pub fn pod_cpu(&self, runtime: u32) -> u32 {
        if self.trains { runtime } else { self.cpu }
    }

    /// Reads the manifest as the controller does (after every edit of it or of the training
    /// runtime, of `runtime` cpu per pod).
    pub fn read(&mut self, runtime: u32) {
        let trains = self.trains;
        let w = interpret(&self.manifest(runtime))
            .map(|mut w| {
                // A TrainJob is built from the runtime it names: a member must serve the same.
                if trains {
                    w.runtime = Some(runtime_need(runtime));
                }
                w
            })
            .map_err(|e| e.to_string());
        self.spec = spec_of(w);
    }

    pub fn manifest(&self, runtime: u32) -> Value {
        let cpu = self.pod_cpu(runtime);
        let container = json!({"name": "main", "image": "busybox",
            "resources": {"requests": {"cpu": cpu.to_string()}}});
        let meta = json!({"name": self.name, "namespace": self.namespace, "uid": self.uid,
            "generation": self.generation});
        match self.shape {
            Shape::Batch {
                parallelism,
                completions,
            } => json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
                "spec": {"parallelism": parallelism, "completions": completions, "suspend": true,
                    "template": {"spec": {"restartPolicy": "Never", "containers": [container]}}}}),
            Shape::Torch { workers, .. } => {
                let t = json!({"spec": {"containers": [container]}});
                json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": meta,
                    "spec": {"runPolicy": {"suspend": true}, "pytorchReplicaSpecs": {
                        "Master": {"replicas": 1, "template": t},
                        "Worker": {"replicas": workers, "template": t}}}})
            }
        }
    }

    /// The pods a new copy starts with, the first starting at `now + delay`, under a training
    /// runtime of `runtime` cpu per pod (a member's runtime is the hub's).
    pub fn start(&self, uid: String, now: Ms, runtime: u32, rng: &mut Rng) -> SimCopy {
        let mut pods = Vec::new();
        let mut to_start = 0;
        let at = |rng: &mut Rng| now + 1_000 + rng.below(3) * 1_000;
        match self.shape {
            Shape::Batch {
                parallelism,
                completions,
            } => {
                let first = parallelism.min(completions);
                to_start = completions - first;
                for _ in 0..first {
                    let runs = self.runs / 2 + rng.below(self.runs / 2 + 1);
                    pods.push(Pod {
                        role: 0,
                        state: PodState::Pending,
                        at: at(rng),
                        runs,
                    });
                }
            }
            Shape::Torch { workers, linger } => {
                pods.push(Pod {
                    role: 0,
                    state: PodState::Pending,
                    at: at(rng),
                    runs: self.runs,
                });
                for _ in 0..workers {
                    let runs = if linger {
                        self.runs + 5_000 + rng.below(20) * 1_000
                    } else {
                        self.runs / 2 + rng.below(self.runs / 2)
                    };
                    pods.push(Pod {
                        role: 1,
                        state: PodState::Pending,
                        at: at(rng),
                        runs,
                    });
                }
            }
        }
        let par = match self.shape {
            Shape::Batch { parallelism, .. } => parallelism,
            Shape::Torch { .. } => 0,
        };
        SimCopy {
            uid,
            generation: self.generation,
            pods,
            par,
            to_start,
            cpu: self.pod_cpu(runtime),
            outcome: None,
            done_at: None,
            deleting: None,
        }
    }
}

/// A member cluster.
#[derive(Clone, Debug, Default)]
pub struct SimMember {
    pub name: String,
    /// Does not answer (partitioned) since.
    pub down_since: Option<Ms>,
    /// Answers again, but no controller pass has seen it since: the partition is still
    /// declared (a controller that is down cannot end it).
    pub back_unseen: bool,
    /// Its MemberCluster was deleted (its copies go on running unseen), since; it may be
    /// registered again.
    pub removed: bool,
    pub removed_since: Ms,
    /// Pods do not start until then (no node can take them).
    pub stuck_until: Ms,
    /// The next creates fail (no such kind, forbidden).
    pub fail_creates: u32,
    pub copies: BTreeMap<String, SimCopy>,
    /// The copies as the controller's watch of the member shows them: refreshed at the start of
    /// every step, except while the watch lags (until `lag_until`), when it shows an older
    /// state.
    pub watched: BTreeMap<String, SimCopy>,
    pub lag_until: Ms,
    /// The member store's version (its resourceVersion): raised by every create and delete of
    /// a copy. A create's answer carries it.
    pub version: u64,
    /// The version the controller's watch has reached (what `watched` shows).
    pub watched_version: u64,
    pub next_uid: u64,
}

impl SimMember {
    pub fn up(&self) -> bool {
        self.down_since.is_none() && !self.removed
    }

    /// The controller's watch catches up with the member, unless it lags.
    pub fn watch(&mut self, now: Ms) {
        if now >= self.lag_until {
            self.watched = self.copies.clone();
            self.watched_version = self.version;
        }
    }

    /// A fresh list (a controller that starts, or relists): the watch shows the member now.
    pub fn relist(&mut self) {
        self.lag_until = 0;
        self.watched = self.copies.clone();
        self.watched_version = self.version;
    }

    /// Moves its pods to `now`: starts, ends, the next waves, the job's outcome.
    pub fn advance(&mut self, now: Ms, rng: &mut Rng) {
        // Finalizers let go.
        let before = self.copies.len();
        self.copies
            .retain(|_, c| c.deleting.is_none_or(|(_, until)| until > now));
        if self.copies.len() != before {
            self.version += 1;
        }
        let stuck = self.stuck_until > now;
        for c in self.copies.values_mut() {
            // Once the job ended, its operator starts no pod any more.
            let ended = c.outcome.is_some();
            for p in &mut c.pods {
                match p.state {
                    PodState::Pending if !stuck && !ended && p.at <= now => {
                        p.state = PodState::Running;
                        p.at = now + p.runs;
                    }
                    PodState::Running if p.at <= now => p.state = PodState::Succeeded,
                    _ => {}
                }
            }
            // A batch Job starts its next wave as pods of the last one succeed.
            let live = c
                .pods
                .iter()
                .filter(|p| p.state != PodState::Succeeded)
                .count() as u32;
            if c.outcome.is_none() && c.to_start > 0 && live < c.par {
                let runs = c.pods.first().map_or(1_000, |p| p.runs);
                for _ in 0..(c.par - live).min(c.to_start) {
                    c.pods.push(Pod {
                        role: 0,
                        state: PodState::Pending,
                        at: now + 1_000 + rng.below(2) * 1_000,
                        runs,
                    });
                    c.to_start -= 1;
                }
            }
            if c.outcome.is_none() {
                let master_done = c
                    .pods
                    .iter()
                    .any(|p| p.role == 0 && p.state == PodState::Succeeded);
                let torch = c.pods.iter().any(|p| p.role == 1);
                let all_done =
                    c.to_start == 0 && c.pods.iter().all(|p| p.state == PodState::Succeeded);
                if torch && master_done {
                    c.outcome = Some(true);
                } else if !torch && all_done {
                    let done = *c.done_at.get_or_insert(now);
                    if now >= done.saturating_add(OUTCOME_LAG) {
                        c.outcome = Some(true);
                    }
                }
            }
        }
    }

    /// A running pod of some copy vanishes (its node is lost); the job's controller replaces
    /// it with a pod that starts after `delay` (never, if `delay` is None).
    pub fn lose_pod(&mut self, rng: &mut Rng, now: Ms, delay: Option<Ms>) -> Option<String> {
        let running: Vec<(String, usize)> = self
            .copies
            .iter()
            .flat_map(|(j, c)| {
                c.pods
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| p.state == PodState::Running)
                    .map(move |(i, _)| (j.clone(), i))
            })
            .collect();
        if running.is_empty() {
            return None;
        }
        let (job, i) = running[rng.below(running.len() as u64) as usize].clone();
        let c = self.copies.get_mut(&job)?;
        let p = &mut c.pods[i];
        p.state = PodState::Pending;
        p.at = delay.map_or(Ms::MAX, |d| now + d);
        Some(job)
    }

    /// How the member looks to muster for one job.
    pub fn seen(&self, job: &str, expected: u32) -> Seen {
        if self.removed {
            return Seen::Removed;
        }
        if let Some(since) = self.down_since {
            return Seen::Silent { since };
        }
        Seen::Answering(self.watched.get(job).map(|c| view(c, expected)))
    }
}

/// A copy as the controller reads it: the outcome, else its pods judged like the real ones.
pub fn view(c: &SimCopy, expected: u32) -> Copy {
    let count = |s: PodState| c.pods.iter().filter(|p| p.state == s).count() as u32;
    let (running, pending, succeeded) = (
        count(PodState::Running),
        count(PodState::Pending),
        count(PodState::Succeeded),
    );
    // A batch Job whose last pod succeeded, its member not having said so yet.
    let pods_done = c.outcome.is_none() && c.done_at.is_some();
    let progress = match c.outcome {
        Some(true) => Progress::Succeeded,
        Some(false) => Progress::Failed("BackoffLimitExceeded".into()),
        None => Progress::judge(running, running, succeeded, pending, expected),
    };
    Copy {
        uid: c.uid.clone(),
        progress,
        live_pods: running,
        expected,
        pods_done,
        waiting: (pending > 0).then(|| format!("{pending} pods pending")),
    }
}

/// CPUs a copy uses now (its running pods: a pending pod holds nothing on a node).
pub fn cpu_used(c: &SimCopy) -> u64 {
    c.pods
        .iter()
        .filter(|p| p.state == PodState::Running)
        .count() as u64
        * u64::from(c.cpu)
}

/// The hub's QueuedJobs. Each holds its job's record in its wire form, the status JSON
/// (`lifecycle::wire`), changed only by merge patches applied as the API server applies them
/// (`json_patch::merge`, RFC 7386: null removes a key, a key the patch leaves out stays); the
/// record a controller reads back is decoded from it. A QueuedJob is named after its hub job
/// (`names`): a job made again under a deleted one's name finds that job's QueuedJob there,
/// which the controller's create takes over unless it is being deleted. The hub has no fence:
/// whatever a replaced leader sent lands (its process knows its lease is over by `term`). A
/// QueuedJob carries muster's finalizer (unless the defect leaves it out): deleted, it stays
/// (Terminating, its record readable and written) until the controller lets go of it; without
/// it, a delete takes the record with it.
#[derive(Clone, Default)]
pub struct Store {
    /// By job UID: the record the QueuedJob holding the job's name holds (decoded).
    pub records: BTreeMap<String, Record>,
    /// By job UID: that QueuedJob's status as the hub holds it.
    pub statuses: BTreeMap<String, Value>,
    /// By QueuedJob name (the job's `namespace/name`): the UID of the job it belongs to.
    pub names: BTreeMap<String, String>,
    /// QueuedJobs holding muster's finalizer.
    pub finalized: std::collections::BTreeSet<String>,
    /// QueuedJobs deleted and held by the finalizer.
    pub terminating: std::collections::BTreeSet<String>,
    /// By job UID: the resourceVersion of the QueuedJob holding its record, raised by every
    /// change to that object (its status, finalizer, deletion, a takeover).
    pub versions: BTreeMap<String, u64>,
    last_version: u64,
    pub term: u64,
}

/// One record write as the controller's executor sends it (`controller::writes::put`): the
/// whole status, the merge patch from what the writer believes the hub holds, and whether the
/// QueuedJob is created first (no write of it is known to have landed).
#[derive(Clone, Debug)]
pub struct StatusWrite {
    pub status: Value,
    pub patch: Option<Value>,
    pub create: bool,
    /// The earlier job whose QueuedJob of the name the create may take over (the core's
    /// outbox said so: `Outbox::may_take`).
    pub take_over: Option<String>,
    /// The resourceVersion the status patch is made against (the precondition it carries);
    /// None: unknown, so the executor reads the QueuedJob first.
    pub version: Option<u64>,
}

/// What the simulated API server did with a record write.
pub enum Wrote {
    /// Written (with a note for the trace).
    Done(Option<String>),
    /// The create met an earlier job's QueuedJob of the name, and took nothing over.
    NameHeld(NameHeld),
}

impl Store {
    /// Someone deletes the QueuedJob of `uid` (by hand, or its hub job's garbage collection):
    /// true when the record went with it.
    pub fn delete(&mut self, uid: &str) -> bool {
        if self.finalized.contains(uid) {
            self.bump(uid);
            self.terminating.insert(uid.to_string());
            false
        } else {
            self.forget(uid)
        }
    }

    /// The controller lets go of the QueuedJob of `uid`: a deleted one goes now.
    pub fn release(&mut self, uid: &str) {
        if self.finalized.remove(uid) {
            self.bump(uid);
        }
        if self.terminating.remove(uid) {
            self.forget(uid);
        }
    }

    /// The controller puts its finalizer on the QueuedJob of `uid` (a patch of its own).
    pub fn finalize(&mut self, uid: &str) {
        if self.statuses.contains_key(uid) && self.finalized.insert(uid.to_string()) {
            self.bump(uid);
        }
    }

    /// The QueuedJob of `uid` changed: its resourceVersion is raised.
    fn bump(&mut self, uid: &str) {
        self.last_version += 1;
        self.versions.insert(uid.to_string(), self.last_version);
    }

    /// Someone else (`kubectl edit --subresource=status`, another tool) edits the status of
    /// the QueuedJob of `uid`: its requeue count is raised by 5. Returns it, before and after.
    pub fn edit_status(&mut self, uid: &str) -> Option<(u64, u64)> {
        let st = self.statuses.get_mut(uid)?;
        let was = st.get("requeues").and_then(Value::as_u64).unwrap_or(0);
        st["requeues"] = json!(was + 5);
        if let Ok(st) = serde_json::from_value::<QueuedJobStatus>(st.clone()) {
            self.records.insert(uid.to_string(), from_status(&st, ""));
        }
        self.bump(uid);
        Some((was, was + 5))
    }

    /// The QueuedJob of `uid` is gone, and its name free.
    fn forget(&mut self, uid: &str) -> bool {
        self.names.retain(|_, u| u != uid);
        self.statuses.remove(uid);
        self.versions.remove(uid);
        self.records.remove(uid).is_some()
    }

    /// What holds the name a job's record goes under, as the intake asks.
    pub fn name(&self, name: &str, uid: &str) -> Name<'_> {
        match self.names.get(name) {
            Some(u) if u == uid => Name::Ours,
            Some(u) => Name::Earlier {
                uid: u,
                terminating: self.terminating.contains(u),
                record: self.records.get(u),
            },
            None => Name::Free,
        }
    }

    /// `uid`'s write under `name`, as the controller's executor carries it out
    /// (`controller::writes::put`) against the API server: a create that finds its own
    /// QueuedJob there (a create whose answer was lost), or an earlier job's that the core let it
    /// take over and that is not being deleted, takes it and patches its status from what is
    /// there; one that finds any other earlier job's takes nothing and reports it
    /// ([`Wrote::NameHeld`]). A status patch alone goes to the job's own QueuedJob against the
    /// resourceVersion it carries (see below; another job's, or none: refused). Err with why it
    /// was refused.
    pub fn put(
        &mut self,
        name: &str,
        uid: &str,
        w: &StatusWrite,
        defect: Option<Defect>,
    ) -> Result<Wrote, String> {
        let holder = self.names.get(name).cloned();
        let mut note = None;
        let (target, patch) = match holder {
            Some(other) if w.create => {
                if other != uid {
                    let terminating = self.terminating.contains(&other);
                    if !outbox::takes(w.take_over.as_deref(), &other, terminating) {
                        return Ok(Wrote::NameHeld(NameHeld {
                            record: self.records.get(&other).cloned().map(Box::new),
                            uid: other,
                            terminating,
                        }));
                    }
                    // Taken over: the object (its status, its finalizer) becomes this job's.
                    let there = self.statuses.remove(&other).unwrap_or_else(|| json!({}));
                    self.records.remove(&other);
                    self.versions.remove(&other);
                    if self.finalized.remove(&other) {
                        self.finalized.insert(uid.to_string());
                    }
                    self.statuses.insert(uid.to_string(), there);
                    self.names.insert(name.to_string(), uid.to_string());
                    note = Some(format!("taken over: {other}'s record is gone"));
                }
                // The create's conflict: the status patch is made from what is there.
                let there = self.statuses.get(uid).cloned().unwrap_or_else(|| json!({}));
                let patch = patch::over(&there, w.patch.as_ref(), &w.status, defect);
                (uid.to_string(), patch)
            }
            // A status patch: with the resourceVersion it was made against as its precondition
            // (read first when unknown). On a conflict the executor reads the QueuedJob again:
            // another job's now, nothing is written; its own, the patch is made again from what
            // is there. With a defect that trusts belief (`unconditioned` and the like) it lands
            // on whatever holds the name.
            Some(other) if defect.is_some_and(Defect::trusts_belief) => {
                if other != uid {
                    note = Some(format!("lands on {other}'s QueuedJob"));
                }
                (other, w.patch.clone())
            }
            // Made against the version there: as it was planned.
            Some(other)
                if other == uid
                    && w.version.is_some()
                    && w.version == self.versions.get(uid).copied() =>
            {
                (other, w.patch.clone())
            }
            // Changed since, or the version unknown: read again.
            Some(other) => {
                if w.version.is_some() {
                    note = Some(
                        "changed since (conflict): read again and patched from what is there"
                            .into(),
                    );
                }
                let there = self
                    .statuses
                    .get(&other)
                    .cloned()
                    .unwrap_or_else(|| json!({}));
                match patch::again((uid, &other), &there, (w.patch.as_ref(), &w.status), defect) {
                    Ok(patch) => (other, patch),
                    Err(other) => {
                        return Err(format!(
                            "holds {other}'s record now (conflict); nothing written"
                        ));
                    }
                }
            }
            None if w.create => {
                self.names.insert(name.to_string(), uid.to_string());
                self.statuses.insert(uid.to_string(), json!({}));
                (uid.to_string(), w.patch.clone())
            }
            None => return Err("not found".into()),
        };
        let status = self
            .statuses
            .entry(target.clone())
            .or_insert_with(|| json!({}));
        if let Some(p) = patch {
            json_patch::merge(status, &p);
        }
        match serde_json::from_value::<QueuedJobStatus>(status.clone()) {
            Ok(st) => {
                self.records.insert(target.clone(), from_status(&st, ""));
            }
            Err(e) => note = Some(format!("status unreadable: {e}")),
        }
        self.bump(&target);
        Ok(Wrote::Done(note))
    }
}

/// The quota tree of a run: two leaves of min 6 and max 12 cpu under a root of `root_max`.
pub fn tree((root_max, valid): (u64, bool)) -> serde_json::Value {
    // Invalid: a negative min, an edit the core refuses.
    let min = if valid { "6" } else { "-6" };
    let leaf = |name: &str| {
        json!({"name": name, "namespaces": [name], "min": {"cpu": min},
            "max": {"cpu": TREE_MAX.1.to_string()}})
    };
    json!({"spec": {"root": {"name": "root", "max": {"cpu": root_max.to_string()},
        "children": [leaf("team-a"), leaf("team-b")]}}})
}

/// The ClusterTrainingRuntime the jobs that `trains` name, at `cpu` per pod: its key and the
/// digest of its spec, as a TrainJob read against it needs it of a member.
pub fn runtime_need(cpu: u32) -> RuntimeNeed {
    RuntimeNeed {
        key: RuntimeKey::cluster("torch-distributed"),
        digest: format!("cpu-{cpu}"),
    }
}

/// A member of a run: two nodes of 4 cpu, serving the training runtime at `runtime` cpu per
/// pod (a member's runtime is the hub's: what its watch of the member's runtimes shows).
pub fn cluster_info(name: &str, runtime: u32) -> ClusterInfo {
    let need = runtime_need(runtime);
    let mut alloc = ResourceList::new();
    for (r, q) in [("cpu", "4"), ("memory", "64Gi"), ("pods", "110")] {
        if let Ok(q) = q.parse() {
            alloc.0.insert(r.to_string(), q);
        }
    }
    ClusterInfo {
        name: name.to_string(),
        nodes: (0..2)
            .map(|i| NodeInfo {
                name: format!("{name}-{i}"),
                labels: BTreeMap::new(),
                taints: Vec::new(),
                allocatable: alloc.clone(),
                unschedulable: false,
                ready: true,
            })
            .collect(),
        serves: Serves {
            runtimes: Some(BTreeMap::from([(need.key.to_string(), need.digest)])),
            ..Serves::default()
        },
        ..ClusterInfo::default()
    }
}
