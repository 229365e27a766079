//! The jobs a driver follows: each job's record, what the hub holds of it, and its entry in the
//! scheduler. The glue between [`step`](super::step) and the scheduling core, shared by the hub
//! controller and the fault simulation so that both do exactly the same: restore from durable
//! records, submit (avoiding members as a preference), step every job, run a scheduling cycle,
//! turn its decisions into records, and say which records to write, in a safe order.

mod deleted;
mod drift;
mod names;

pub use deleted::{Finalizer, Held};

use std::collections::{BTreeMap, BTreeSet};

use super::{
    Created, Intent, Member, Ms, Phase, Record, Seen, Settings, Transition, admitted, gone,
    preempted,
};
use crate::scheduler::{Decision, JobId, JobState, Scheduler, Submitted};
use crate::workload::Workload;

/// One followed job.
#[derive(Clone, Debug)]
pub struct Entry {
    pub record: Record,
    /// What the hub holds (None: no QueuedJob yet, or it was deleted).
    pub written: Option<Record>,
    pub id: Option<JobId>,
    /// `kind namespace/name`, for messages.
    pub label: String,
    /// Hub creation time, seconds (queue order).
    pub submitted: u64,
    /// The outcome of the last create, for the next step.
    created: Option<Created>,
}

/// A job's spec as the driver reads it now: its workload (or why it cannot be read) and its
/// digest ([`super::digest`]).
pub type Spec = (Result<Workload, String>, String);

/// The spec of a workload, or of a job that cannot be read.
pub fn spec_of(w: Result<Workload, String>) -> Spec {
    match w {
        Ok(w) => {
            let d = super::digest(&w);
            (Ok(w), d)
        }
        Err(e) => {
            let d = super::digest_text(&e);
            (Err(e), d)
        }
    }
}

/// Per component, the per-pod requests of `w` (see [`Record::charge`]).
pub fn charge_of(w: &Workload) -> BTreeMap<String, crate::quantity::ResourceList> {
    w.components
        .iter()
        .map(|c| (c.name.clone(), c.requests.clone()))
        .collect()
}

/// The followed jobs.
#[derive(Default)]
pub struct Book {
    pub settings: Settings,
    jobs: BTreeMap<String, Entry>,
    /// Job id → UID; ordered, since step 4 of `pass` walks it and may submit jobs again (the
    /// order it walks is the order they are submitted in, so it must not depend on hash keys).
    by_id: BTreeMap<JobId, String>,
    /// Hub jobs deleted while a copy may still run on a member that does not answer: their
    /// quota stays charged (the last record, with its member and orphans) until every such
    /// member confirms the copy gone.
    deleted: BTreeMap<String, (Option<JobId>, Record)>,
    /// Copies of jobs not followed (their hub job deleted) that muster deletes and that may
    /// still run: (member, deleted at). They hold back creates as the followed jobs' old copies
    /// do (see [`Book::pass`]). The driver says so before each pass.
    pub deleting: Vec<(String, Ms)>,
    /// Deleted jobs whose copies were confirmed gone: never restored again (their QueuedJob may
    /// linger until the driver lets it go).
    settled: BTreeSet<String>,
    /// Followed jobs whose record the hub held and is not seen to hold now, since when.
    missing: BTreeMap<String, Ms>,
    /// Jobs sent back to the intake because their create met an earlier job's QueuedJob that
    /// the core keeps: (that job, since) (see `names`).
    names_held: BTreeMap<String, (String, Ms)>,
    /// Followed jobs whose QueuedJob the view shows holding another record than the one
    /// written, since when (see `drift`).
    drift: BTreeMap<String, Ms>,
    /// Creates the driver's views may not show yet: the driver marks each create it sends and
    /// reports where it landed; each pass judges what it saw by them.
    pub sent: super::sent::Marks,
}

impl Book {
    pub fn new(settings: Settings) -> Book {
        Book {
            sent: super::sent::Marks::new(settings.defect),
            settings,
            ..Book::default()
        }
    }

    pub fn get(&self, uid: &str) -> Option<&Entry> {
        self.jobs.get(uid)
    }

    /// A followed job's record, to change in a test as a pass would.
    #[cfg(test)]
    pub(crate) fn record_mut(&mut self, uid: &str) -> Option<&mut Record> {
        self.jobs.get_mut(uid).map(|e| &mut e.record)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &Entry)> {
        self.jobs.iter()
    }

    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    pub fn uid_of(&self, id: JobId) -> Option<&str> {
        self.by_id.get(&id).map(String::as_str)
    }

    /// Starts following a job: from its durable record (an earlier run's), or new. Returns the
    /// intents of its intake (an Event), or None when the job is not muster's (outside the tree).
    #[allow(clippy::too_many_arguments)]
    pub fn track(
        &mut self,
        sched: &mut Scheduler,
        uid: &str,
        label: String,
        spec: &Spec,
        generation: Option<i64>,
        submitted: u64,
        durable: Option<Record>,
    ) -> Option<Vec<Intent>> {
        self.names_held.remove(uid);
        let mut e = Entry {
            record: durable.clone().unwrap_or_else(|| Record {
                spec: spec.1.clone(),
                generation,
                ..Record::default()
            }),
            written: durable.clone(),
            id: None,
            label,
            submitted,
            created: None,
        };
        let mut out = Vec::new();
        // A record from before charges were recorded: the spec it was admitted with.
        if let (Some(r), Ok(w)) = (&durable, &spec.0)
            && r.holds()
            && r.charge.is_empty()
            && r.spec == spec.1
        {
            e.record.charge = charge_of(w);
        }
        // A record from before generations were kept, for the spec the job reads as now.
        if let Some(r) = &durable
            && r.generation.is_none()
            && r.spec == spec.1
        {
            e.record.generation = generation;
        }
        match (&durable, &spec.0) {
            (Some(r), Ok(w)) if r.charged() => {
                let c = r.cluster.clone().unwrap_or_default();
                // Charged as admitted: the job may read otherwise now (a training runtime
                // edited) while its copy runs as it was made.
                let w = if r.spec != spec.1 {
                    std::borrow::Cow::Owned(deleted::as_charged(w, r))
                } else {
                    std::borrow::Cow::Borrowed(w)
                };
                match sched.restore(&w, submitted, &c, &r.placement) {
                    Submitted::Queued(id) | Submitted::Inadmissible(id, _) => e.id = Some(id),
                    // Outside the tree now: still followed (its copy runs), charged nowhere.
                    Submitted::Ignored(why) => {
                        e.record.reason = format!("{}; {why}", e.record.reason);
                    }
                }
            }
            // Not charged: ended, backing off, placed with every pod done, or placed but
            // unreadable now (it runs; reported). A rejected job is judged again (below): what
            // rejected it (a PriorityClass, the fleet, the tree) may have changed meanwhile.
            (Some(r), _)
                if (r.phase.terminal() && r.phase != Phase::Rejected)
                    || r.backoff_until.is_some()
                    || r.holds() => {}
            _ => {
                if !self.submit(sched, &mut e, spec) && durable.is_none() {
                    return None;
                }
                // Judged as it reads now: the record's spec is this generation's.
                e.record.generation = generation;
                if durable.is_none() {
                    let (transition, note) = match &spec.0 {
                        Err(msg) if msg.starts_with(super::REFUSED_BY_HUB) => {
                            (Transition::Rejected, msg.clone())
                        }
                        Err(msg) => (
                            Transition::Malformed,
                            format!("muster cannot read this job: {msg}"),
                        ),
                        Ok(_) if e.record.phase == Phase::Rejected => {
                            (Transition::Rejected, e.record.reason.clone())
                        }
                        Ok(_) => (Transition::Queued, e.record.reason.clone()),
                    };
                    out.push(Intent::Event { transition, note });
                }
            }
        }
        if let Some(id) = e.id {
            self.by_id.insert(id, uid.to_string());
        }
        self.jobs.insert(uid.to_string(), e);
        Some(out)
    }

    /// (Re)submits the entry's current spec, avoiding members as a preference: a job that fits
    /// nowhere else is judged against every member, never rejected for its avoid list. Returns
    /// false when the job is not muster's.
    fn submit(&mut self, sched: &mut Scheduler, e: &mut Entry, spec: &Spec) -> bool {
        submit(sched, &mut self.by_id, e, spec)
    }
}

/// [`Book::submit`], on the book's index of scheduler ids alone (a pass steps the entries in
/// place).
fn submit(
    sched: &mut Scheduler,
    by_id: &mut BTreeMap<JobId, String>,
    e: &mut Entry,
    spec: &Spec,
) -> bool {
    if let Some(id) = e.id.take() {
        done(sched, id);
        by_id.remove(&id);
    }
    e.record.spec = spec.1.clone();
    let w = match &spec.0 {
        Err(msg) => {
            e.record.phase = Phase::Rejected;
            e.record.reason = if msg.starts_with(super::REFUSED_BY_HUB) {
                msg.clone()
            } else {
                format!("malformed: {msg}")
            };
            return true;
        }
        Ok(w) => w,
    };
    let mut s = sched.submit(&avoiding(sched, w, &e.record.avoid), e.submitted);
    if let Submitted::Inadmissible(id, _) = &s
        && !e.record.avoid.is_empty()
    {
        done(sched, *id);
        e.record.avoid.clear();
        s = sched.submit(w, e.submitted);
    }
    match s {
        Submitted::Queued(id) => {
            e.id = Some(id);
            e.record.phase = Phase::Queued;
            e.record.reason = format!("queued in {}", sched.queue_name(id));
        }
        Submitted::Inadmissible(id, reason) => {
            e.id = Some(id);
            e.record.phase = Phase::Rejected;
            e.record.reason = reason;
        }
        Submitted::Ignored(why) => {
            // Muster does not queue it; known jobs stay followed (and say why they wait).
            if e.record.phase == Phase::Queued {
                e.record.reason = why;
            }
            return false;
        }
    }
    true
}

impl Book {
    /// The driver wrote `record` for `uid` (or learnt what the hub holds).
    pub fn written(&mut self, uid: &str, record: Option<Record>) {
        if let Some(e) = self.jobs.get_mut(uid) {
            e.written = record;
        }
    }

    /// The outcome of a create the driver tried for `uid`.
    pub fn created(&mut self, uid: &str, c: Created) {
        if let Some(e) = self.jobs.get_mut(uid) {
            e.created = Some(c);
        }
    }

    /// The hub job is gone: stop following it. Returns the deletes of its copies.
    pub fn untrack(&mut self, sched: &mut Scheduler, uid: &str) -> Vec<Intent> {
        let Some(e) = self.jobs.remove(uid) else {
            return Vec::new();
        };
        let deletes: Vec<Intent> = gone(&e.record)
            .into_iter()
            .filter(|i| !matches!(i, Intent::Release))
            .collect();
        match e.id {
            // Charged, with copies that may remain: charged until they are confirmed gone.
            Some(id) if !deletes.is_empty() && e.record.holds() => {
                self.deleted.insert(uid.to_string(), (Some(id), e.record));
            }
            Some(id) => {
                done(sched, id);
                self.by_id.remove(&id);
                self.sent.forget(uid);
            }
            None => self.sent.forget(uid),
        }
        deletes
    }

    /// The plan a placed job's pods go by: the scheduler's while it holds the job, else the
    /// one its record reserved (a job followed from its record outside the tree in force has no
    /// scheduler entry, and its gated pods must still be released onto their nodes).
    pub fn plan(&self, sched: &Scheduler, uid: &str) -> Option<super::Plan> {
        let e = self.jobs.get(uid)?;
        if let Some((_, p)) = e.id.and_then(|id| sched.plan(id)) {
            return Some(p);
        }
        (e.record.phase.placed() && !e.record.placement.is_empty())
            .then(|| e.record.placement.clone())
    }

    /// Whether the job's QueuedJob must stay (its finalizer kept): the job is followed, or
    /// deleted but still charged while a copy may remain. Otherwise the driver lets it go.
    pub fn keeps(&self, uid: &str) -> bool {
        self.jobs.contains_key(uid) || self.deleted.contains_key(uid)
    }

    /// Followed jobs whose record the hub held and holds no more (`held` says whether the hub
    /// holds a QueuedJob for a job): someone deleted it. The driver writes it again; until then
    /// the hub holds no record of the job, so nothing is created or deleted on its behalf.
    /// A record counts as lost once it has been missing for the settle time (the driver's
    /// view of the QueuedJobs lags behind a write that landed).
    pub fn lost_records(&mut self, held: impl Fn(&str) -> bool, now: Ms) -> Vec<String> {
        let missing: BTreeSet<String> = self
            .jobs
            .iter()
            .filter(|(u, e)| e.written.is_some() && !held(u))
            .map(|(u, _)| u.clone())
            .collect();
        held_for(&mut self.missing, missing, now, self.settings.record_settle)
    }

    /// Deleted jobs still charged (see [`Book::untrack`]).
    pub fn deleted(&self) -> impl Iterator<Item = (&String, &Record)> {
        self.deleted.iter().map(|(u, (_, r))| (u, r))
    }

    /// Frees the quota of deleted jobs whose members all confirm their copies gone.
    fn settle_deleted(
        &mut self,
        sched: &mut Scheduler,
        seen: &mut dyn FnMut(&str, &Record) -> Seen,
    ) {
        let uids: Vec<String> = self.deleted.keys().cloned().collect();
        for uid in uids {
            let Some((id, r)) = self.deleted.get(&uid) else {
                continue;
            };
            let mut s = seen(&uid, r);
            self.sent.judge(&uid, r.cluster.as_deref(), &mut s);
            let gone = |m: Option<&Member>| {
                matches!(m, None | Some(Member::Removed | Member::Answering(None)))
            };
            if gone(s.here.as_ref()) && s.orphans.values().all(|m| gone(Some(m))) {
                if let Some(id) = id {
                    done(sched, *id);
                    self.by_id.remove(id);
                }
                self.deleted.remove(&uid);
                self.sent.forget(&uid);
                self.settled.insert(uid);
            }
        }
    }

    /// The scheduler took back or admitted a deleted job: it leaves the scheduler.
    fn drop_deleted(&mut self, sched: &mut Scheduler, job: JobId) -> bool {
        let Some(uid) = self.by_id.get(&job).cloned() else {
            return false;
        };
        if self.deleted.remove(&uid).is_none() {
            return false;
        }
        self.sent.forget(&uid);
        done(sched, job);
        self.by_id.remove(&job);
        true
    }

    /// One pass at `now`: every job stepped from what `seen` says of it (the driver fills in
    /// `here` and `orphans`), then one scheduling cycle when `admit` (a quota tree is in force).
    /// Returns the intents for the driver to carry out, per job, in order: deletes before
    /// creates.
    pub fn pass(
        &mut self,
        sched: &mut Scheduler,
        spec: &mut dyn FnMut(&str) -> Option<Spec>,
        seen: &mut dyn FnMut(&str, &Record) -> Seen,
        now: Ms,
        admit: bool,
    ) -> Vec<(String, Intent)> {
        let mut out: Vec<(String, Intent)> = Vec::new();
        self.settle_deleted(sched, seen);
        // 1. Observe every job first: a copy still being deleted anywhere holds back every
        //    create (the capacity and quota it uses are not free until it is gone), for at
        //    most the drain grace after its job left; a copy that stays longer is stuck (a
        //    finalizer, an operator that does not act) and holds back only its own job.
        // In the order of `self.jobs`, which nothing changes until step 2 has stepped them.
        let mut views: Vec<Seen> = Vec::with_capacity(self.jobs.len());
        let mut draining = BTreeSet::new();
        let grace = self.settings.drain_grace;
        for (c, since) in &self.deleting {
            if now.saturating_sub(*since) < grace
                || self.settings.defect == Some(super::Defect::DrainForever)
            {
                draining.insert(c.clone());
            }
        }
        for (uid, e) in self.jobs.iter_mut() {
            let mut s = seen(uid, &e.record);
            self.sent.judge(uid, e.record.cluster.as_deref(), &mut s);
            s.now = now;
            s.created = e.created.take();
            if e.record.phase == Phase::Admitted && s.created.is_none() {
                s.refused = e.id.and_then(|id| sched.refused_now(id));
            }
            for (c, m) in &s.orphans {
                let fresh = e.record.orphans.get(c).is_some_and(|since| {
                    now.saturating_sub(*since) < grace
                        || self.settings.defect == Some(super::Defect::DrainForever)
                });
                // Any copy but the job's own current one: an old copy on the member the job
                // was placed on again (its spec edited, say) uses capacity too.
                let old = match m {
                    Member::Answering(Some(copy)) => {
                        e.record.cluster.as_deref() != Some(c)
                            || e.record.copy_uid.as_deref() != Some(&copy.uid)
                    }
                    // A copy created there that the view does not show yet.
                    Member::Behind { .. } => true,
                    _ => false,
                };
                if old && fresh {
                    draining.insert(c.clone());
                }
            }
            views.push(s);
        }
        // 2. Step every job; quota freed and jobs queued again at once. Creates go out at most
        //    `creates_per_member` at a time per member (counting those still out).
        let mut out_on: BTreeMap<String, usize> = BTreeMap::new();
        let mut creates: Vec<(String, String)> = Vec::new();
        let by_id = &mut self.by_id;
        for ((uid, e), mut s) in self.jobs.iter_mut().zip(views) {
            // What the hub holds, lent to the step (nothing changed it since step 1).
            s.hub = e.written.take();
            let (n, intents) = super::step(&e.record, &s, &self.settings);
            e.written = s.hub.take();
            e.record = n;
            for i in intents {
                match i {
                    Intent::Release => {
                        if let Some(id) = e.id.take() {
                            done(sched, id);
                            by_id.remove(&id);
                        }
                    }
                    Intent::Submit => {
                        if let Some(sp) = spec(uid) {
                            submit(sched, by_id, e, &sp);
                            e.record.generation = s.generation;
                        }
                    }
                    Intent::Create { cluster } => creates.push((uid.clone(), cluster)),
                    other => out.push((uid.clone(), other)),
                }
            }
            if let Some(id) = e.id
                && by_id.get(&id) != Some(uid)
            {
                by_id.insert(id, uid.clone());
            }
        }
        // 2b. The creates, once every job has stepped: a job taken back in this step (its spec
        //     edited while placed, say) leaves its copy behind as an old one, which holds back
        //     every create as those seen in step 1 do (another job's create on its member in
        //     this same pass would otherwise run beside it, uncharged).
        let defect = self.settings.defect == Some(super::Defect::CreatesBeforeTakeBacks);
        for e in self.jobs.values().filter(|_| !defect) {
            for (c, since) in &e.record.orphans {
                if *since == now {
                    draining.insert(c.clone());
                }
            }
        }
        for (uid, cluster) in creates {
            if !draining.is_empty() {
                let others: Vec<&str> = draining.iter().map(String::as_str).collect();
                if let Some(e) = self.jobs.get_mut(&uid) {
                    e.record.reason = format!(
                        "admitted to {cluster}; waiting until the copies muster deletes on {} are gone",
                        others.join(", ")
                    );
                }
                out.push((uid, Intent::WakeAt(now + 1_000)));
                continue;
            }
            let n = out_on
                .entry(cluster.clone())
                .or_insert_with(|| self.sent.out_on(&cluster));
            if *n >= self.settings.creates_per_member {
                out.push((uid, Intent::WakeAt(now + 1_000)));
            } else {
                *n += 1;
                out.push((uid, Intent::Create { cluster }));
            }
        }
        // 3. One scheduling cycle; admissions and preemptions become records.
        let decisions = if admit { sched.cycle() } else { Vec::new() };
        for d in decisions {
            match d {
                Decision::Admit { job, .. } | Decision::Preempt { job, .. }
                    if self.drop_deleted(sched, job) => {}
                Decision::Admit { job, cluster, .. } => {
                    let Some(uid) = self.by_id.get(&job).cloned() else {
                        continue;
                    };
                    let plan = sched.plan(job).map(|(_, p)| p).unwrap_or_default();
                    let Some(e) = self.jobs.get_mut(&uid) else {
                        continue;
                    };
                    let (n, intents) = admitted(&e.record, &cluster, plan, now);
                    e.record = n;
                    if let Some((Ok(w), _)) = spec(&uid) {
                        e.record.charge = charge_of(&w);
                    }
                    out.extend(intents.into_iter().map(|i| (uid.clone(), i)));
                }
                Decision::Preempt { job, by, reason } => {
                    let Some(uid) = self.by_id.get(&job).cloned() else {
                        continue;
                    };
                    let by_label = sched.job_label(by);
                    let Some(e) = self.jobs.get_mut(&uid) else {
                        continue;
                    };
                    let (n, intents) = preempted(&e.record, &by_label, &reason, now);
                    e.record = n;
                    for i in intents {
                        if i == Intent::Release {
                            if let Some(id) = e.id.take() {
                                done(sched, id);
                                self.by_id.remove(&id);
                            }
                        } else {
                            out.push((uid.clone(), i));
                        }
                    }
                }
                Decision::Wait { job, reason } => {
                    if let Some(uid) = self.by_id.get(&job)
                        && let Some(e) = self.jobs.get_mut(uid)
                        && e.record.phase == Phase::Queued
                    {
                        e.record.reason = reason;
                    }
                }
            }
        }
        // 4. Waiting jobs follow the core: admissible again after a tree change, or not any
        //    more; avoiding members never makes a job inadmissible.
        let ids: Vec<(JobId, String)> = self.by_id.iter().map(|(i, u)| (*i, u.clone())).collect();
        for (id, uid) in ids {
            let Some(mut e) = self.jobs.remove(&uid) else {
                continue;
            };
            match sched.state(id) {
                JobState::Pending if e.record.phase == Phase::Rejected => {
                    e.record.phase = Phase::Queued;
                    e.record.reason = sched.reason(id).unwrap_or_default();
                }
                // Avoiding is a preference: dropped when it leaves the job nowhere to go (every
                // other member unreachable now, or none could ever hold it).
                JobState::Pending | JobState::Inadmissible(_)
                    if !e.record.avoid.is_empty()
                        && (matches!(sched.state(id), JobState::Inadmissible(_))
                            || !sched
                                .clusters()
                                .iter()
                                .any(|c| c.reachable && !e.record.avoid.contains(&c.name))) =>
                {
                    e.record.avoid.clear();
                    if let Some(sp) = spec(&uid) {
                        self.submit(sched, &mut e, &sp);
                    }
                }
                JobState::Inadmissible(r) if e.record.phase == Phase::Queued => {
                    e.record.phase = Phase::Rejected;
                    e.record.reason = r.clone();
                }
                _ => {}
            }
            if let Some(id) = e.id {
                self.by_id.insert(id, uid.clone());
            }
            self.jobs.insert(uid, e);
        }
        // 5. A create goes out only for the admission its job's record still holds: one taken
        //    back by this pass's cycle (its create retried in step 2, its place then given to
        //    another) sends none. Sent, it would make a copy for no admission, carrying no
        //    admission annotation, which muster then neither adopts nor deletes.
        if self.settings.defect != Some(super::Defect::CreatesForTakenBack) {
            out.retain(|(uid, i)| match i {
                Intent::Create { cluster } => self
                    .jobs
                    .get(uid)
                    .is_some_and(|e| e.record.admission_on(cluster).is_some()),
                _ => true,
            });
        }
        // Deletes first, then creates, whatever job they belong to.
        out.sort_by_key(|(_, i)| match i {
            Intent::Delete { .. } => 0,
            Intent::Create { .. } => 2,
            _ => 1,
        });
        out
    }
}

/// A job leaves the scheduler for good: finished, and its slot free for the next submission
/// (the book never uses an id again once it has let go of it).
/// Of the jobs a condition holds for now (`holds`), those it has held for at least `settle`:
/// `since` keeps when each was first seen so, forgets a job once the condition no longer holds
/// for it, and once it is returned (so each is returned once per `settle` while it holds).
pub(super) fn held_for(
    since: &mut BTreeMap<String, Ms>,
    holds: BTreeSet<String>,
    now: Ms,
    settle: Ms,
) -> Vec<String> {
    since.retain(|u, _| holds.contains(u));
    let mut out = Vec::new();
    for u in holds {
        let from = *since.entry(u.clone()).or_insert(now);
        if now.saturating_sub(from) >= settle {
            since.remove(&u);
            out.push(u);
        }
    }
    out
}

fn done(sched: &mut Scheduler, id: JobId) {
    sched.finish(id);
    sched.forget(id);
}

/// The workload restricted to the scheduler's members it does not avoid.
fn avoiding(sched: &Scheduler, w: &Workload, avoid: &BTreeSet<String>) -> Workload {
    let members = sched.clusters().iter().map(|c| c.name.clone());
    super::avoiding(w.clone(), members, avoid)
}
