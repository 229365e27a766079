//! The simulated controller process: its memory (the scheduler, the book, its outbox and the
//! batches it sent), its clock, one pass as the controller's `Brain::sync` makes it (the core's
//! `tidy`, fresh reads for `lifecycle::sent`, `Book::pass`), and its creates and deletes on the
//! simulated members; a process that ends ([`retire`]) only lands what it sent.

use super::check::Checker;
use std::collections::BTreeMap;
use std::rc::Rc;

use serde_json::Value;

use super::world::{self, Rng, StatusWrite, Store, cluster_info, tree};
use super::{Defect, Jobs, MEMBERS, TICK, World};
use crate::lifecycle::outbox::{Batch, Outbox};
use crate::lifecycle::tidy::{self, Intake};
use crate::lifecycle::{
    Book, Created, Finalizer, Held, Intent, Member, Ms, Phase, Record, RequeueReason, gc,
};
use crate::scheduler::{Config, Scheduler};

/// The controller process: all it has is memory, lost on a crash.
pub(super) struct Process {
    pub(super) sched: Scheduler,
    pub(super) book: Book,
    pub(super) term: u64,
    /// The tree in force (None: none valid seen since the start).
    pub(super) tree: Option<u64>,
    /// The hub's tree last applied or refused.
    pub(super) tried: Option<(u64, bool)>,
    pub(super) defect: Option<Defect>,
    /// Crashed in the middle of its writes.
    pub(super) crashed: bool,
    /// Which records go to the hub and when (the controller's outbox).
    pub(super) outbox: Outbox,
    /// Batches sent and not landed yet, with the time each lands (known durable only once
    /// landed, as the controller's writer knows them).
    pub(super) sent: Vec<(Ms, Batch<StatusWrite>)>,
    /// Per job: the status it believes the hub holds (the last write known to have landed),
    /// and the keys of writes since whose outcome it does not know (`lifecycle::patch`).
    pub(super) known: BTreeMap<String, (Value, Option<Value>)>,
    /// Per job: the resourceVersion of its QueuedJob after the last write of it that landed
    /// (forgotten when a change of its own makes it stale; then the view's is used).
    pub(super) known_versions: BTreeMap<String, u64>,
    /// What its clock says minus the hub's (the world's): what it dates its records by.
    pub(super) clock: i64,
    /// Crashed or replaced: it only lands what it sent before.
    pub(super) retired: bool,
    /// How far its watch of the quota tree lags behind the hub (0, or 2–10 s for one replica in
    /// three started while faults last): until then it sees the tree before the last change.
    pub(super) tree_lag: Ms,
    /// Jobs said to wait for an earlier job's QueuedJob of their name (said once).
    pub(super) name_waits: std::collections::BTreeSet<String>,
    /// Whether its watches of the hub's jobs and QueuedJobs drop now and then (one replica in
    /// three started while faults last).
    pub(super) drops: bool,
    /// While they are down (dropped, then relisting): until when, and the hub as they last
    /// showed it, which is all this replica sees of the hub meanwhile.
    pub(super) dropped: Option<Dropped>,
    /// The members' training runtime (per-pod cpu) as its member watches last showed it.
    pub(super) serves: u32,
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

/// How far the tree watch of the replica that starts as `term` lags: one in three started
/// while faults last sees each tree change 2–10 s late. Drawn apart from the run's randomness.
fn tree_lag(w: &World, term: u64) -> Ms {
    let mut r = Rng::new(w.now ^ term.rotate_left(17) ^ 0x7EE5);
    if w.now >= w.fault_end || !r.chance(333) {
        return 0;
    }
    (2 + r.below(9)) * 1_000
}

/// What a replica whose hub watches dropped still sees, until they relist at `until`: the hub's
/// QueuedJobs as they last showed them, and its jobs too unless only the QueuedJob watch
/// dropped (`jobs` None: each kind has a watch of its own, and one may drop while the other
/// stays up). The hub's training runtime drops with the jobs: they read as they did (the
/// members' runtimes are seen as they are, so a job read against a runtime that changed since
/// is not created where the new one is served).
pub(super) struct Dropped {
    until: Ms,
    jobs: Option<Rc<Jobs>>,
    store: Rc<Store>,
}

/// Whether the hub watches of the replica that starts as `term` drop now and then: one in three
/// started while faults last. Drawn apart from the run's randomness.
fn drops(w: &World, term: u64) -> bool {
    let mut r = Rng::new(w.now ^ term.rotate_left(23) ^ 0xD209);
    w.now < w.fault_end && r.chance(333)
}

/// A controller process ends (crashed, or replaced by another replica): it sends nothing more,
/// but the batches it sent are on their way and land (or were given up) on schedule, among the
/// `retired`. Returns when the next process may start, given that it would start at `at`: not
/// before the last of those batches settled, since a replica takes the lease over only once the
/// last one's lease ran out or was handed over, which happens only after every write sent under
/// it was answered or given up (a restarted process has a new identity, so it too waits for
/// its old lease). With the defect `release-early` the next one starts at `at`.
pub(super) fn retire(mut old: Process, w: &World, at: Ms, retired: &mut Vec<Process>) -> Ms {
    old.retired = true;
    let settled = old.sent.iter().map(|(t, _)| *t).max().unwrap_or(w.now);
    let early = old.defect == Some(Defect::ReleaseEarly);
    if !old.sent.is_empty() {
        retired.push(old);
    }
    if early { at } else { at.max(settled + TICK) }
}

impl Process {
    /// A (re)started controller: everything it knows it reads from the hub and the members.
    pub(super) fn start(w: &mut World, term: u64, defect: Option<Defect>) -> Process {
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
            tree_lag: tree_lag(w, term),
            name_waits: Default::default(),
            known: BTreeMap::new(),
            known_versions: BTreeMap::new(),
            drops: drops(w, term),
            dropped: None,
            serves: w.runtime.cpu,
        };
        for name in MEMBERS {
            p.sched.set_cluster(&cluster_info(name, w.runtime.cpu));
        }
        let store = Rc::make_mut(&mut w.store);
        store.term = store.term.max(term);
        // Its watches start with a list: they show each member as it is now.
        for m in w.members.values_mut() {
            m.relist();
        }
        w.log(format!("controller starts (term {term})"));
        if p.clock != 0 {
            w.log(format!("its clock is {} ms off the hub's", p.clock));
        }
        if p.tree_lag != 0 {
            w.log(format!("its watch of the tree lags {} ms", p.tree_lag));
        }
        if p.drops {
            w.log("its watches of the hub's jobs and QueuedJobs drop now and then".into());
        }
        p
    }

    /// The hub's jobs and QueuedJobs as this replica's watches show them. A replica whose
    /// watches drop (see [`drops`]) loses them now and then for 2–10 s while faults last
    /// (a watch that ends, and relists): meanwhile it sees the hub as they last showed it, and
    /// then the hub as it is, whatever happened between (a job deleted and made again, a
    /// QueuedJob deleted and written again, its own writes).
    pub(super) fn hub(&mut self, w: &mut World) -> (Rc<Jobs>, Rc<Store>) {
        if self.dropped.as_ref().is_some_and(|d| w.now >= d.until) {
            self.dropped = None;
            w.log("its hub watches relist: it sees the hub as it is".into());
        }
        let mut r = Rng::new(w.now ^ self.term.rotate_left(41) ^ 0xD40B);
        if self.dropped.is_none() && self.drops && w.now < w.fault_end && r.chance(20) {
            let until = w.now + (2 + r.below(9)) * 1_000;
            let both = r.chance(500);
            self.dropped = Some(Dropped {
                until,
                jobs: both.then(|| Rc::clone(&w.jobs)),
                store: Rc::clone(&w.store),
            });
            w.log(format!(
                "its {} drop until {}s: it sees {} as it is now till then",
                if both {
                    "hub watches"
                } else {
                    "QueuedJob watch"
                },
                until / 1000,
                if both { "the hub" } else { "the QueuedJobs" }
            ));
        }
        let jobs = match self.dropped.as_ref().and_then(|d| d.jobs.as_ref()) {
            Some(jobs) => Rc::clone(jobs),
            None => Rc::clone(&w.jobs),
        };
        (jobs, self.hub_store(w))
    }

    /// The QueuedJobs as its watch shows them: what it dropped with, else the hub's.
    pub(super) fn hub_store(&self, w: &World) -> Rc<Store> {
        match &self.dropped {
            Some(d) => Rc::clone(&d.store),
            None => Rc::clone(&w.store),
        }
    }

    /// Now, as this replica dates things.
    pub(super) fn now(&self, w: &World) -> Ms {
        (w.now as i64).saturating_add(self.clock).max(0) as Ms
    }

    /// One pass of the controller, as `controller::Brain::sync` does it.
    pub(super) fn pass(&mut self, w: &mut World, ck: &mut Checker) {
        if self.retired || self.fenced(w) {
            self.land_late(w);
            return;
        }
        let now = self.now(w);
        // The tree in force: a valid one replaces it; an invalid one leaves it.
        // The tree on the hub, as the core applies it (`tidy::apply_tree`: a valid one replaces
        // the one in force; an invalid one leaves it).
        // Its watch of the tree may lag: what it sees is the tree before the last change until
        // the lag has passed since (replicas see different trees for a while).
        let (before, changed) = w.tree_before;
        let on_hub = if w.now < changed + self.tree_lag {
            before
        } else {
            w.tree
        };
        if self.tried != Some(on_hub) {
            self.tried = Some(on_hub);
            if tidy::apply_tree(&mut self.sched, &tree(on_hub)).is_ok() {
                self.tree = Some(on_hub.0);
            }
        }
        // The hub as its watches show it (the hub itself, unless they dropped).
        let (jobs, store) = self.hub(w);
        // Its watches of the members' runtimes show each as it is (a member's is the hub's).
        if self.serves != w.runtime.cpu {
            self.serves = w.runtime.cpu;
            for name in MEMBERS {
                self.sched.set_cluster(&cluster_info(name, self.serves));
            }
        }
        for (name, m) in w.members.iter_mut() {
            self.sched.set_reachable(name, m.up());
            m.back_unseen &= !m.up();
        }
        // Intake: a job not followed yet is taken in as the core says (`tidy::intake`), from
        // its durable record if any, or waits for an earlier job's QueuedJob of its name.
        let visible: Vec<String> = jobs
            .values()
            .filter(|j| !j.deleted && j.submitted * 1000 <= w.now)
            .map(|j| j.uid.clone())
            .collect();
        for uid in visible {
            let Some(j) = jobs.get(&uid) else { continue };
            if self.book.get(&uid).is_some() {
                continue;
            }
            let name = store.name(&j.queued_name(), &uid);
            match tidy::intake(&self.book, (&uid, name), self.tree.is_some(), w.now) {
                Intake::Leave => continue,
                Intake::WaitForName { earlier } => {
                    if self.name_waits.insert(uid.clone()) {
                        w.log(format!("{uid} waits for the QueuedJob of {earlier} to go"));
                    }
                    continue;
                }
                Intake::Track => {}
            }
            let spec = j.spec.clone();
            let label = format!("{} {}/{}", "job", j.namespace, j.name);
            let durable = store.records.get(&uid).cloned();
            let submitted = j.submitted;
            if self
                .book
                .track(
                    &mut self.sched,
                    &uid,
                    label,
                    &spec,
                    Some(j.generation),
                    submitted,
                    durable,
                )
                .is_some()
            {
                w.log(format!("track {uid}"));
            }
        }
        // The housekeeping (the core's `tidy`, in its order): gone hub jobs, copies on members
        // that answer, QueuedJobs deleted or to keep.
        let hub = |uid: &str| match jobs.get(uid) {
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
        let queued: Vec<Held> = store
            .records
            .keys()
            .map(|uid| Held {
                job: uid,
                namespace: jobs.get(uid).map_or("", |j| j.namespace.as_str()),
                finalizer: store.finalized.contains(uid),
                terminating: store.terminating.contains(uid),
                hub: hub(uid),
            })
            .collect();
        let record = |uid: &str| store.records.get(uid).map(std::borrow::Cow::Borrowed);
        let facts = tidy::Facts {
            gone,
            copies,
            deleting,
            queued: Some(queued),
            record: &record,
        };
        let done = tidy::tidy(&mut self.book, &mut self.sched, facts, now);
        // Let go before the hub is written (a write would copy a store still shared).
        drop(store);
        for d in done.deletes {
            delete(w, ck, &d.job, &d.member, &d.why);
        }
        for uid in done.rewrite {
            // Made again from nothing (the controller forgets what it wrote: `written`).
            self.known.remove(&uid);
            self.known_versions.remove(&uid);
            w.log(format!("the QueuedJob of {uid} is gone; written again"));
        }
        for uid in done.drifted {
            // Its next patch is made from what the view shows, with the view's resourceVersion
            // as its precondition: a view that lags meets a conflict and the patch is made
            // again from what is there (a stale status beside a current version would make a
            // patch that leaves the hub as it is).
            // Whole (every key the view shows may be there), so that a status the view shows
            // as it should be is sent all the same.
            let shown = self.hub_store(w).statuses.get(&uid).cloned();
            let shown = shown.unwrap_or_else(|| serde_json::json!({}));
            self.known.insert(uid.clone(), (shown.clone(), Some(shown)));
            self.known_versions.remove(&uid);
            self.outbox.doubt(&self.book, &uid);
            w.log(format!(
                "the QueuedJob of {uid} holds a record someone else changed; written again"
            ));
        }
        for uid in done.restored {
            w.log(format!("deleted job {uid} charged again from its record"));
        }
        for (uid, change) in done.finalizers {
            match change {
                Finalizer::Add => {
                    Rc::make_mut(&mut w.store).finalize(&uid);
                    self.known_versions.remove(&uid);
                }
                Finalizer::Remove => {
                    w.log(format!("QueuedJob of {uid} let go"));
                    Rc::make_mut(&mut w.store).release(&uid);
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
        // Where each job's copy runs before this pass: a take-back as edited is judged by it.
        let placed: BTreeMap<String, String> = self
            .book
            .iter()
            .filter(|(_, e)| matches!(e.record.phase, Phase::Dispatched | Phase::Running))
            .filter_map(|(u, e)| Some((u.clone(), e.record.cluster.clone()?)))
            .collect();
        // Every job stepped, one cycle.
        let intents = {
            let world: &World = w;
            let spec = |uid: &str| jobs.get(uid).map(|j| j.spec.clone());
            let clock = self.clock;
            let mut seen = |uid: &str, r: &Record| {
                let mut s = world.seen(&jobs, uid, r);
                // How long a member has been silent, dated by this replica's clock.
                for m in s.here.iter_mut().chain(s.orphans.values_mut()) {
                    if let Member::Silent { since } = m {
                        *since = (*since as i64).saturating_add(clock).max(0) as Ms;
                    }
                }
                s
            };
            let mut specs = spec;
            let admit = self.tree.is_some();
            self.book
                .pass(&mut self.sched, &mut specs, &mut seen, now, admit)
        };
        for (uid, i) in intents {
            if i == Intent::Requeued(RequeueReason::SpecChanged)
                && let Some(c) = placed.get(&uid)
            {
                ck.respecced(w, &uid, c);
            }
            self.execute(w, ck, &jobs, &uid, i);
        }
        self.write(w);
    }

    /// Another replica leads now: this one knows (its lease is over) and does nothing.
    pub(super) fn fenced(&self, w: &World) -> bool {
        self.term < w.store.term && self.defect != Some(Defect::Unfenced)
    }

    fn execute(&mut self, w: &mut World, ck: &mut Checker, jobs: &Jobs, uid: &str, i: Intent) {
        if self.fenced(w) {
            return;
        }
        match i {
            Intent::Delete { cluster, why } => {
                delete(w, ck, uid, &cluster, &why);
            }
            Intent::Create { cluster } => {
                ck.create_sent(uid, &cluster, self.book.get(uid).map(|e| &e.record));
                let Some(j) = jobs.get(uid).cloned() else {
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
                    let copy = j.start(copy_uid.clone(), now, w.runtime.cpu, &mut w.rng);
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
