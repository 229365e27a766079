//! `muster sim --faults`: deterministic simulation with faults. A seeded run drives the real
//! scheduler and the real lifecycle ([`Book`], the same glue the controller uses) against
//! simulated members and a simulated hub, injects faults at any step (members partitioned,
//! removed or stuck, pods lost or finishing in any order, batch Jobs' last waves, failed, lost
//! and fenced status writes, failed creates, controller crashes and leader changes, spec and
//! tree edits valid and invalid, QueuedJobs and hub jobs deleted), and checks the invariants of
//! [`check`] after every step. A failing seed prints its trace; the same seed replays it.

mod check;
mod inject;
mod world;
mod writes;

use std::collections::BTreeMap;

use crate::lifecycle::outbox::{Batch, Outbox};
use crate::lifecycle::{
    Book, Created, Finalizer, Held, Intent, Member, Ms, Partition, Record, Seen, Settings, gc, tidy,
};
use crate::scheduler::{Config, Scheduler};
use check::Checker;
pub use world::Rng;
use world::{HubJob, Shape, SimMember, Store, cluster_info, tree};

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
}

pub use crate::lifecycle::Defect;

impl Default for Options {
    fn default() -> Options {
        Options {
            seed: 1,
            ticks: 300,
            jobs: 14,
            partition: Partition::Replace,
            defect: None,
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
                "seed {} ({policy}): every invariant held; {} faults, {} crashes, {} requeues, {} jobs ended ({} freed before their member said so)",
                self.seed,
                self.faults,
                self.crashes,
                self.requeues,
                self.finished,
                self.freed_early
            ),
        }
    }
}

pub const TICK: Ms = 1_000;
const MEMBERS: [&str; 3] = ["member-a", "member-b", "member-c"];
pub const TREE_MAX: (u64, u64) = (16, 12);

/// The settings of a fault run: the controller's timeouts, scaled to a short virtual run.
pub fn settings(partition: Partition, defect: Option<Defect>) -> Settings {
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
        defect,
        partition,
    }
}

/// The controller process: all it has is memory, lost on a crash.
struct Process {
    sched: Scheduler,
    book: Book,
    term: u64,
    /// The tree in force (None: none valid seen since the start).
    tree: Option<u64>,
    /// The hub's tree last applied or refused.
    tried: Option<(u64, bool)>,
    defect: Option<Defect>,
    /// Crashed in the middle of its writes.
    crashed: bool,
    /// Which records go to the hub and when (the controller's outbox).
    outbox: Outbox,
    /// Batches sent and not landed yet, with the time each lands (known durable only once
    /// landed, as the controller's writer knows them).
    sent: Vec<(Ms, Batch<()>)>,
    /// What its clock says minus the hub's (the world's): what it dates its records by.
    clock: i64,
    /// Crashed or replaced: it only lands what it sent before.
    retired: bool,
}

/// The clock of the replica that starts as `term`, minus the hub's. While faults last, one in
/// three replicas runs on a machine whose clock is 1–10 minutes off either way; it dates its
/// records by the hub's clock, measured to within half a second (the controller's `clock`), or
/// by its own with the defect `clock-trusted`. Drawn apart from the run's randomness.
fn clock(w: &World, term: u64, defect: Option<Defect>) -> i64 {
    let mut r = Rng::new(w.now ^ term.rotate_left(29) ^ 0xC10C);
    if w.now >= w.fault_end || !r.chance(333) {
        return 0;
    }
    let off = (60_000 + r.below(540_000)) as i64;
    let skew = if r.chance(500) { off } else { -off };
    if defect == Some(Defect::ClockTrusted) {
        skew
    } else {
        r.below(1_000) as i64 - 500
    }
}

/// A controller process ends (crashed, or replaced by another replica): it sends nothing more,
/// but the batches it sent are on their way and land (or were given up) on schedule, among the
/// `retired`. Returns when the next process may start, given that it would start at `at`: not
/// before the last of those batches settled, since a replica takes the lease over only once the
/// last one's lease ran out or was handed over, which happens only after every write sent under
/// it was answered or given up (a restarted process has a new identity, so it too waits for
/// its old lease). With the defect `release-early` the next one starts at `at`.
fn retire(mut old: Process, w: &World, at: Ms, retired: &mut Vec<Process>) -> Ms {
    old.retired = true;
    let settled = old.sent.iter().map(|(t, _)| *t).max().unwrap_or(w.now);
    let early = old.defect == Some(Defect::ReleaseEarly);
    if !old.sent.is_empty() {
        retired.push(old);
    }
    if early { at } else { at.max(settled + TICK) }
}

/// The whole simulated world.
pub struct World {
    pub rng: Rng,
    pub now: Ms,
    pub members: BTreeMap<String, SimMember>,
    pub jobs: BTreeMap<String, HubJob>,
    pub store: Store,
    /// Root max of the tree on the hub, and whether it is valid.
    pub tree: (u64, bool),
    pub settings: Settings,
    pub trace: Vec<String>,
    /// Faults happen before this time only.
    pub fault_end: Ms,
    /// Jobs a durable record once showed with every pod done, still placed.
    pub freed_early: std::collections::BTreeSet<String>,
}

impl World {
    fn log(&mut self, line: String) {
        self.trace.push(format!("{:>5}s {line}", self.now / 1000));
    }

    fn expected(&self, uid: &str) -> u32 {
        self.jobs.get(uid).map_or(0, |j| j.expected)
    }

    fn seen(&self, uid: &str, r: &Record) -> Seen {
        let expected = self.expected(uid);
        let member = |c: &str| {
            self.members
                .get(c)
                .map_or(Member::Removed, |m| m.seen(uid, expected))
        };
        let versions = r
            .cluster
            .iter()
            .chain(r.orphans.keys())
            .filter_map(|c| Some((c.clone(), self.members.get(c)?.watched_version)))
            .collect();
        Seen {
            now: self.now,
            spec: String::new(),
            hub: None,
            here: r.cluster.as_deref().map(member),
            orphans: r.orphans.keys().map(|c| (c.clone(), member(c))).collect(),
            created: None,
            versions,
        }
    }
}

impl Process {
    /// A (re)started controller: everything it knows it reads from the hub and the members.
    fn start(w: &mut World, term: u64, defect: Option<Defect>) -> Process {
        let mut p = Process {
            sched: Scheduler::new(Config::default()),
            book: Book::new(w.settings.clone()),
            term,
            tree: None,
            tried: None,
            defect,
            crashed: false,
            outbox: Outbox::default(),
            sent: Vec::new(),
            clock: clock(w, term, defect),
            retired: false,
        };
        for name in MEMBERS {
            p.sched.set_cluster(&cluster_info(name));
        }
        w.store.term = w.store.term.max(term);
        // Its watches start with a list: they show each member as it is now.
        for m in w.members.values_mut() {
            m.relist();
        }
        w.log(format!("controller starts (term {term})"));
        if p.clock != 0 {
            w.log(format!("its clock is {} ms off the hub's", p.clock));
        }
        p
    }

    /// Now, as this replica dates things.
    fn now(&self, w: &World) -> Ms {
        (w.now as i64).saturating_add(self.clock).max(0) as Ms
    }

    /// One pass of the controller, as `controller::Brain::sync` does it.
    fn pass(&mut self, w: &mut World, ck: &mut Checker) {
        if self.retired || self.fenced(w) {
            self.land_late(w);
            return;
        }
        let now = self.now(w);
        // The tree in force: a valid one replaces it; an invalid one leaves it.
        // The tree on the hub, as the core applies it (`tidy::apply_tree`: a valid one replaces
        // the one in force; an invalid one leaves it).
        if self.tried != Some(w.tree) {
            self.tried = Some(w.tree);
            if tidy::apply_tree(&mut self.sched, &tree(w.tree)).is_ok() {
                self.tree = Some(w.tree.0);
            }
        }
        for (name, m) in w.members.iter_mut() {
            self.sched.set_reachable(name, m.up());
            m.back_unseen &= !m.up();
        }
        // Intake: a job not followed yet is taken in as the core says (`tidy::follows`), from
        // its durable record if any.
        let visible: Vec<String> = w
            .jobs
            .values()
            .filter(|j| !j.deleted && j.submitted * 1000 <= w.now)
            .map(|j| j.uid.clone())
            .collect();
        for uid in visible {
            let recorded = w.store.records.contains_key(&uid);
            if self.book.get(&uid).is_some()
                || !tidy::follows(recorded, self.tree.is_some(), self.defect)
            {
                continue;
            }
            let Some(j) = w.jobs.get(&uid) else { continue };
            let spec = j.spec.clone();
            let label = format!("{} {}/{}", "job", j.namespace, j.name);
            let durable = w.store.records.get(&uid).cloned();
            let submitted = j.submitted;
            if self
                .book
                .track(&mut self.sched, &uid, label, &spec, submitted, durable)
                .is_some()
            {
                w.log(format!("track {uid}"));
            }
        }
        // The housekeeping (the core's `tidy`, in its order): gone hub jobs, copies on members
        // that answer, QueuedJobs deleted or to keep.
        let hub = |uid: &str| match w.jobs.get(uid) {
            Some(j) if !j.deleted => gc::HubJob::Exists,
            _ => gc::HubJob::Gone,
        };
        let gone: Vec<String> = self
            .book
            .iter()
            .filter(|(u, _)| hub(u) == gc::HubJob::Gone)
            .map(|(u, _)| u.clone())
            .collect();
        let mut copies = Vec::new();
        let mut deleting = Vec::new();
        for (name, m) in w.members.iter().filter(|(_, m)| m.up()) {
            for (uid, c) in &m.watched {
                match c.deleting {
                    Some((since, _)) => deleting.push(gc::Deleting {
                        job: uid.clone(),
                        member: name.clone(),
                        since,
                    }),
                    None => copies.push(gc::Found {
                        job: uid,
                        member: name,
                        hub: hub(uid),
                    }),
                }
            }
        }
        let queued: Vec<Held> = w
            .store
            .records
            .keys()
            .map(|uid| Held {
                job: uid,
                namespace: w.jobs.get(uid).map_or("", |j| j.namespace.as_str()),
                finalizer: w.store.finalized.contains(uid),
                terminating: w.store.terminating.contains(uid),
                hub: hub(uid),
            })
            .collect();
        let record = |uid: &str| w.store.records.get(uid).cloned();
        let facts = tidy::Facts {
            gone,
            copies,
            deleting,
            queued: Some(queued),
            record: &record,
        };
        let done = tidy::tidy(&mut self.book, &mut self.sched, facts, now);
        for d in done.deletes {
            delete(w, ck, &d.job, &d.member, &d.why);
        }
        for uid in done.rewrite {
            w.log(format!("the QueuedJob of {uid} is gone; written again"));
        }
        for uid in done.restored {
            w.log(format!("deleted job {uid} charged again from its record"));
        }
        for (uid, change) in done.finalizers {
            match change {
                Finalizer::Add => {
                    w.store.finalized.insert(uid);
                }
                Finalizer::Remove => {
                    w.log(format!("QueuedJob of {uid} let go"));
                    w.store.release(&uid);
                }
            }
        }
        // Creates whose answer was lost or refused, or that the view has not shown for a
        // while: a fresh read of each member that answers (the controller gets the copy by
        // name) finds the copy, at the store's version, or not.
        let unsettled: Vec<(String, String)> = self
            .book
            .sent
            .unsettled(now)
            .map(|(u, c)| (u.to_string(), c.to_string()))
            .collect();
        for (u, c) in unsettled {
            if let Some(m) = w.members.get(&c).filter(|m| m.up()) {
                let found = m.copies.contains_key(&u).then_some(m.version);
                self.book.sent.read(&u, &c, found, now);
            }
        }
        // Every job stepped, one cycle.
        let intents = {
            let world: &World = w;
            let spec = |uid: &str| world.jobs.get(uid).map(|j| j.spec.clone());
            let clock = self.clock;
            let mut seen = |uid: &str, r: &Record| {
                let mut s = world.seen(uid, r);
                // How long a member has been silent, dated by this replica's clock.
                for m in s.here.iter_mut().chain(s.orphans.values_mut()) {
                    if let Member::Silent { since } = m {
                        *since = (*since as i64).saturating_add(clock).max(0) as Ms;
                    }
                }
                s.spec = world
                    .jobs
                    .get(uid)
                    .map(|j| j.spec.1.clone())
                    .unwrap_or_default();
                s
            };
            let mut specs = spec;
            let admit = self.tree.is_some();
            self.book
                .pass(&mut self.sched, &mut specs, &mut seen, now, admit)
        };
        for (uid, i) in intents {
            self.execute(w, ck, &uid, i);
        }
        self.write(w);
    }

    /// Another replica leads now: this one knows (its lease is over) and does nothing.
    fn fenced(&self, w: &World) -> bool {
        self.term < w.store.term && self.defect != Some(Defect::Unfenced)
    }

    fn execute(&mut self, w: &mut World, ck: &mut Checker, uid: &str, i: Intent) {
        if self.fenced(w) {
            return;
        }
        match i {
            Intent::Delete { cluster, why } => {
                delete(w, ck, uid, &cluster, &why);
            }
            Intent::Create { cluster } => {
                let Some(j) = w.jobs.get(uid).cloned() else {
                    return;
                };
                // What is dispatched is what was admitted.
                let spec = j.spec.1.clone();
                if self.book.get(uid).is_none_or(|e| e.record.spec != spec) {
                    return;
                }
                let sent_at = self.now(w);
                let Some(m) = w.members.get_mut(&cluster) else {
                    return;
                };
                self.book.sent.sending(uid, &cluster, sent_at);
                let result = if !m.up() {
                    Created::Failed {
                        message: format!("{cluster} does not answer"),
                    }
                } else if m.fail_creates > 0 {
                    m.fail_creates -= 1;
                    Created::Failed {
                        message: "the server could not find the requested resource".into(),
                    }
                } else if m.copies.get(uid).is_some_and(|c| c.deleting.is_some()) {
                    // An earlier copy, Terminating: the name is taken until it is gone.
                    Created::Failed {
                        message: "an earlier copy of the job is being deleted there".into(),
                    }
                } else if let Some(c) = m.copies.get(uid) {
                    Created::Ok { uid: c.uid.clone() }
                } else {
                    m.next_uid += 1;
                    let copy_uid = format!("{cluster}/{}", m.next_uid);
                    let now = w.now;
                    let copy = j.start(copy_uid.clone(), now, &mut w.rng);
                    if let Some(m) = w.members.get_mut(&cluster) {
                        m.copies.insert(uid.to_string(), copy);
                        m.version += 1;
                    }
                    Created::Ok { uid: copy_uid }
                };
                w.log(format!("create {uid} on {cluster}: {result:?}"));
                // A lost answer: created, but the controller never hears of it (it reads the
                // member afresh before it believes the copy absent: `settle_sent`).
                if matches!(result, Created::Ok { .. }) && w.rng.chance(30) && ck.faulty(w.now) {
                    w.log(format!("create answer for {uid} lost"));
                    return;
                }
                // The answer carries the store's version: what landed is at or below it. (A
                // refusal is settled the same way the controller settles every failure: by a
                // fresh read.)
                if matches!(result, Created::Ok { .. })
                    && let Some(m) = w.members.get(&cluster)
                {
                    self.book.sent.landed(uid, &cluster, m.version, self.now(w));
                }
                self.book.created(uid, result);
            }
            Intent::Requeued(why) => {
                ck.requeues += 1;
                w.log(format!("requeue {uid}: {}", why.as_str()));
            }
            Intent::Event { transition, note } => {
                w.log(format!("event {uid} {}: {note}", transition.as_str()));
            }
            Intent::Ended { .. } | Intent::WakeAt(_) | Intent::Release | Intent::Submit => {}
        }
    }
}

/// Deletes a job's copy on a member that answers (one that does not keeps it: the garbage
/// collector finds it once the member answers again). While faults last,
/// a copy may be held by a finalizer (its operator not acting) for up to two minutes: it stays,
/// Terminating, its pods running.
fn delete(w: &mut World, ck: &mut Checker, uid: &str, cluster: &str, why: &str) {
    let now = w.now;
    let held = ck.faulty(now) && w.rng.chance(150);
    let hold = 20_000 + w.rng.below(100) * 1_000;
    let Some(m) = w.members.get_mut(cluster) else {
        return;
    };
    if !m.up() {
        return;
    }
    let Some(c) = m.copies.get_mut(uid) else {
        return;
    };
    if c.deleting.is_some() {
        return;
    }
    let live = world::cpu_used(c) > 0 && c.outcome.is_none();
    m.version += 1;
    let line = if held {
        c.deleting = Some((now, now + hold));
        format!(
            "delete {uid} on {cluster} ({why}): held by a finalizer until {}s",
            (now + hold) / 1000
        )
    } else {
        m.copies.remove(uid);
        format!("delete {uid} on {cluster} ({why})")
    };
    w.log(line);
    ck.deleted(w, uid, cluster, live);
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
        jobs: BTreeMap::new(),
        store: Store::default(),
        freed_early: Default::default(),
        tree: (TREE_MAX.0, true),
        settings: settings(o.partition, o.defect),
        trace: Vec::new(),
        fault_end: Ms::from(o.ticks) * TICK,
    };
    let fault_end = w.fault_end;
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
            deleted: false,
            submitted: w.rng.below(u64::from(o.ticks) / 2),
            spec: (Err(String::new()), String::new()),
            expected: 0,
        };
        job.read();
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
        w.jobs.insert(job.uid.clone(), job);
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
    out.trace = std::mem::take(&mut w.trace);
    out
}
