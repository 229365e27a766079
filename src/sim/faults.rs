//! `muster sim --faults`: deterministic simulation with faults. A seeded run drives the real
//! scheduler and the real lifecycle ([`Book`], the same glue the controller uses) against
//! simulated members and a simulated hub, injects faults at any step (members partitioned,
//! removed or stuck, pods lost or finishing in any order, batch Jobs' last waves, failed and
//! lost status writes and a replaced leader's landing late, failed creates, member watches that
//! lag, controller crashes and leader changes, replicas with skewed clocks, spec and tree edits
//! valid and invalid, QueuedJobs and hub jobs deleted), and checks the invariants of [`check`]
//! after every step. A failing seed prints its trace; the same seed replays it. The simulated
//! controller process is [`process`].

mod check;
mod inject;
mod process;
mod world;
mod writes;

use std::collections::BTreeMap;
use std::rc::Rc;

use crate::lifecycle::{Member, Ms, Partition, Record, Seen, Settings};
use check::Checker;
use process::{Process, retire};
pub use world::Rng;
use world::{HubJob, Shape, SimMember, Store};

/// One run's settings.
#[derive(Clone, Debug)]
pub struct Options {
    pub seed: u64,
    /// Virtual seconds with faults; then every fault heals and the run goes on until every job
    /// ended (or a limit).
    pub ticks: u32,
    pub jobs: u32,
    pub partition: Partition,
    /// Re-introduce a known defect into the controller's glue (to show the checker catches it).
    pub defect: Option<Defect>,
    /// How long a record that says only that the copy was created waits for the pods to run
    /// (`Settings::dispatched_write_delay`; [`DISPATCHED_WRITE_DELAY`] by default, 0 to write
    /// each step as it comes).
    pub dispatched_write_delay: Ms,
}

/// The fault runs' [`Options::dispatched_write_delay`]: 3 virtual seconds (the controller's
/// 5 s, scaled as its other timeouts are).
pub const DISPATCHED_WRITE_DELAY: Ms = 3_000;

pub use crate::lifecycle::Defect;

impl Default for Options {
    fn default() -> Options {
        Options {
            seed: 1,
            ticks: 300,
            jobs: 14,
            partition: Partition::Replace,
            defect: None,
            dispatched_write_delay: DISPATCHED_WRITE_DELAY,
        }
    }
}

/// What a run saw.
#[derive(Debug, Default)]
pub struct Outcome {
    pub seed: u64,
    pub partition: Partition,
    /// The first invariant broken, if any.
    pub violation: Option<String>,
    /// Everything that happened, one line per event (kept whole for replay).
    pub trace: Vec<String>,
    pub faults: u32,
    pub crashes: u32,
    pub requeues: u32,
    pub finished: u32,
    /// Jobs whose quota was freed once every pod succeeded, before their member said so.
    pub freed_early: u32,
    /// Jobs whose first record on a member that landed said Running: the write that would have
    /// said Dispatched waited for the pods and was folded into it.
    pub folded: u32,
}

impl Outcome {
    /// One line: the seed, what broke (or that nothing did), and how to replay it.
    pub fn summary(&self) -> String {
        let policy = self.partition.as_str();
        match &self.violation {
            Some(v) => format!(
                "seed {} ({policy}): {v}\n  replay: cargo run --release -- sim --faults-seed {} --partition-policy {policy}",
                self.seed, self.seed
            ),
            None => format!(
                "seed {} ({policy}): every invariant held; {} faults, {} crashes, {} requeues, {} jobs ended ({} freed before their member said so, {} Dispatched writes folded into Running)",
                self.seed,
                self.faults,
                self.crashes,
                self.requeues,
                self.finished,
                self.freed_early,
                self.folded
            ),
        }
    }
}

pub const TICK: Ms = 1_000;
const MEMBERS: [&str; 3] = ["member-a", "member-b", "member-c"];
pub const TREE_MAX: (u64, u64) = (16, 12);

/// The settings of a fault run: the controller's timeouts, scaled to a short virtual run.
pub fn settings(
    partition: Partition,
    defect: Option<Defect>,
    dispatched_write_delay: Ms,
) -> Settings {
    Settings {
        pods_ready_timeout: 30_000,
        pods_lost_timeout: 20_000,
        member_lost_grace: 30_000,
        copy_missing_grace: 5_000,
        create_retry: 2_000,
        create_give_up: 15_000,
        backoff: 5_000,
        backoff_max: 40_000,
        drain_grace: 15_000,
        record_settle: 3_000,
        creates_per_member: 2,
        dispatched_write_delay,
        defect,
        partition,
    }
}

/// The hub jobs by UID.
pub type Jobs = BTreeMap<String, HubJob>;

/// The whole simulated world.
pub struct World {
    pub rng: Rng,
    pub now: Ms,
    pub members: BTreeMap<String, SimMember>,
    /// The hub jobs and the hub's QueuedJobs, shared with the snapshots replicas whose watches
    /// dropped still see (copied on a write while one is held).
    pub jobs: Rc<Jobs>,
    pub store: Rc<Store>,
    /// Root max of the tree on the hub, and whether it is valid.
    pub tree: (u64, bool),
    /// The tree before its last change, and when it changed (a lagging watch still shows it).
    pub tree_before: ((u64, bool), Ms),
    pub settings: Settings,
    pub trace: Vec<String>,
    /// Faults happen before this time only.
    pub fault_end: Ms,
    /// The hub's training runtime.
    pub runtime: world::Runtime,
    /// Jobs a durable record once showed with every pod done, still placed.
    pub freed_early: std::collections::BTreeSet<String>,
    /// Jobs whose Dispatched write was folded into their Running one ([`Outcome::folded`]).
    pub folded: std::collections::BTreeSet<String>,
}

impl World {
    /// The tree on the hub becomes `t`.
    fn set_tree(&mut self, t: (u64, bool)) {
        self.tree_before = (self.tree, self.now);
        self.tree = t;
    }

    fn log(&mut self, line: String) {
        self.trace.push(format!("{:>5}s {line}", self.now / 1000));
    }

    /// What a controller observes of the job `uid` whose record is `r`: its spec as read from
    /// `jobs` (the hub as its watches show it) and the generation it was read at, and each
    /// member the record names.
    fn seen(&self, jobs: &Jobs, uid: &str, r: &Record) -> Seen {
        let job = jobs.get(uid);
        let expected = job.map_or(0, |j| r.expected_pods(&j.spec));
        let member = |c: &str| {
            self.members
                .get(c)
                .map_or(Member::Removed, |m| m.seen(uid, expected))
        };
        let versions = r
            .members()
            .filter_map(|c| Some((c.clone(), self.members.get(c)?.watched_version)))
            .collect();
        Seen {
            now: self.now,
            spec: job.map(|j| j.spec.1.clone()).unwrap_or_default(),
            generation: job.map(|j| j.generation),
            hub: None,
            here: r.cluster.as_deref().map(member),
            orphans: r.orphans.keys().map(|c| (c.clone(), member(c))).collect(),
            created: None,
            refused: None,
            versions,
        }
    }
}

/// Runs one seed.
pub fn run(o: &Options) -> Outcome {
    let mut w = World {
        rng: Rng::new(o.seed),
        now: 0,
        members: MEMBERS
            .iter()
            .map(|n| {
                (
                    n.to_string(),
                    SimMember {
                        name: n.to_string(),
                        ..SimMember::default()
                    },
                )
            })
            .collect(),
        jobs: Rc::new(BTreeMap::new()),
        store: Rc::new(Store::default()),
        freed_early: Default::default(),
        folded: Default::default(),
        tree: (TREE_MAX.0, true),
        tree_before: ((TREE_MAX.0, true), 0),
        settings: settings(o.partition, o.defect, o.dispatched_write_delay),
        trace: Vec::new(),
        fault_end: Ms::from(o.ticks) * TICK,
        runtime: world::Runtime {
            cpu: 1,
            edits: Vec::new(),
        },
    };
    let fault_end = w.fault_end;
    // One run in three has a training runtime, edited one to three times while faults last;
    // about half its jobs name it. From a stream of its own: the other runs are as they were.
    let mut trainer = Rng::new(o.seed ^ 0x7472_6169_6e65_7273);
    let training = trainer.chance(333);
    if training {
        let n = 1 + trainer.below(3);
        let mut edits: Vec<Ms> = (0..n).map(|_| trainer.below(fault_end.max(1))).collect();
        edits.sort_unstable();
        w.runtime.edits = edits;
    }
    for i in 0..o.jobs {
        let ns = if w.rng.chance(500) {
            "team-a"
        } else {
            "team-b"
        };
        let shape = if w.rng.chance(500) {
            let parallelism = 1 + w.rng.below(3) as u32;
            Shape::Batch {
                parallelism,
                completions: parallelism + w.rng.below(4) as u32,
            }
        } else {
            Shape::Torch {
                workers: 1 + w.rng.below(3) as u32,
                linger: w.rng.chance(250),
            }
        };
        let mut job = HubJob {
            uid: format!("j{i}"),
            namespace: ns.into(),
            name: format!("job-{i}"),
            shape,
            cpu: 1 + w.rng.below(2) as u32,
            runs: (10 + w.rng.below(40)) * 1000,
            generation: 1,
            trains: training && trainer.chance(500),
            deleted: false,
            submitted: w.rng.below(u64::from(o.ticks) / 2),
            spec: (Err(String::new()), String::new()),
        };
        job.read(w.runtime.cpu);
        w.log(format!(
            "job {} {}/{} {:?} cpu {} runs {}s at {}s",
            job.uid,
            job.namespace,
            job.name,
            job.shape,
            job.cpu,
            job.runs / 1000,
            job.submitted
        ));
        Rc::make_mut(&mut w.jobs).insert(job.uid.clone(), job);
    }
    let mut ck = Checker::new(fault_end);
    let mut term = 1;
    let mut proc = Some(Process::start(&mut w, term, o.defect));
    let mut restart_at: Option<Ms> = None;
    let mut stale: Option<(Process, Ms)> = None;
    let mut retired: Vec<Process> = Vec::new();
    let limit = fault_end + 1_200 * TICK;
    let mut out = Outcome {
        seed: o.seed,
        partition: o.partition,
        ..Outcome::default()
    };
    while w.now <= limit {
        if w.now < fault_end {
            out.faults += inject::runtime_edits(&mut w);
            out.faults += inject::status_edits(&mut w, o.seed);
            out.faults += inject::faults(
                &mut w,
                &mut proc,
                &mut restart_at,
                &mut out.crashes,
                &mut term,
                &mut stale,
                &mut retired,
            );
        } else if w.now == fault_end {
            inject::heal(&mut w);
        }
        if restart_at.is_some_and(|t| w.now >= t) {
            restart_at = None;
            term += 1;
            proc = Some(Process::start(&mut w, term, o.defect));
        }
        let now = w.now;
        let mut rng = Rng::new(o.seed ^ now);
        for m in w.members.values_mut() {
            m.advance(now, &mut rng);
            m.watch(now);
        }
        if let Some((old, until)) = stale.as_mut() {
            if w.now < *until {
                old.pass(&mut w, &mut ck);
            } else {
                stale = None;
            }
        }
        for old in retired.iter_mut() {
            old.pass(&mut w, &mut ck);
        }
        retired.retain(|p| !p.sent.is_empty());
        if let Some(p) = proc.as_mut() {
            p.pass(&mut w, &mut ck);
            if p.crashed {
                out.crashes += 1;
                let back = w.now + (1 + w.rng.below(8)) * TICK;
                let back = match proc.take() {
                    Some(old) => retire(old, &w, back, &mut retired),
                    None => back,
                };
                restart_at = Some(back);
                w.log(format!("controller crashed; back at {}s", back / 1000));
            }
        }
        if let Err(v) = ck.after_step(&w, proc.as_ref().map(|p| (&p.sched, &p.book))) {
            out.violation = Some(v);
            break;
        }
        // Settled, and what the controller holds is on the hub (a record it has yet to write,
        // such as an old copy confirmed gone, lands on a later step; one that never lands is
        // invariant 6's to report at the limit).
        if w.now > fault_end
            && let Some(p) = proc.as_ref()
            && ck.settled(&w)
            && p.book
                .iter()
                .all(|(uid, e)| w.store.records.get(uid) == Some(&e.record))
        {
            break;
        }
        w.now += TICK;
    }
    if out.violation.is_none() {
        out.violation = ck.at_end(&w, proc.as_ref().map(|p| &p.book)).err();
    }
    if out.violation.is_some()
        && let Some(p) = proc.as_ref()
    {
        // The controller's view at the end, for the replay.
        for (uid, e) in p.book.iter() {
            let state = e.id.map(|id| format!("{:?}", p.sched.state(id)));
            let line = format!(
                "end: {uid} {} on {:?}, scheduler: {}",
                e.record.phase.as_str(),
                e.record.cluster,
                state.unwrap_or_else(|| "-".into())
            );
            w.log(line);
        }
    }
    out.requeues = ck.requeues;
    out.finished = w
        .store
        .records
        .values()
        .filter(|r| r.phase.terminal())
        .count() as u32;
    out.freed_early = w.freed_early.len() as u32;
    out.folded = w.folded.len() as u32;
    out.trace = std::mem::take(&mut w.trace);
    out
}
