//! The life of one job once muster is responsible for it: a pure state machine beside the
//! scheduler. Input: the job's durable [`Record`] (what its QueuedJob status says), what was
//! [`Seen`] (its member copies, the members' health, the hub job's generation, whether the record
//! is durable, the outcome of a create just tried) and the time. Output: the new record and
//! [`Intent`]s (create or delete a copy, free the job's quota, queue it again, an Event, wake me
//! at). Every timer is a deadline kept in the record, so a restarted controller goes on where the
//! last one stopped; every transition is named ([`Transition`]).
//!
//! Two rules keep a job in exactly one member: a copy is created only once the record placing it
//! there is durable and no copy of the job may still run elsewhere (except on a member that does
//! not answer: a declared partition); a running copy is deleted only once the record saying why
//! is durable. Copies left behind are the record's `orphans` until a member confirms them gone.
//! The drivers (the hub controller, the fault simulation in `sim::faults`) only observe and
//! execute.

use std::collections::{BTreeMap, BTreeSet};

/// Milliseconds: since the Unix epoch in the controller, on the virtual clock in simulations.
pub type Ms = u64;

/// Pods per node per component (`{worker: {node-1: 2}}`).
pub type Plan = BTreeMap<String, BTreeMap<String, u32>>;

mod book;
#[cfg(test)]
mod book_tests;
pub mod gc;
pub mod outbox;
pub mod patch;
pub mod sent;
mod step;
#[cfg(test)]
mod tests;
pub mod tidy;
pub mod wire;
pub use book::{Book, Entry, Finalizer, Held, Spec, spec_of};
pub use step::{admitted, gone, preempted, step};

/// Defects of earlier controllers, kept so that `muster sim --faults-defect` can put each back
/// into the code that ships and show that the fault simulation's invariants catch it. The hub
/// controller never sets one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Defect {
    /// Without a valid tree nothing is followed, and garbage collection deletes every copy it
    /// does not follow (issue 11, defect 1).
    CollectUnknown,
    /// A replaced leader goes on writing and acting (defect 4).
    Unfenced,
    /// The outbox without its order: records that free capacity go behind admissions in one
    /// list, a failed one does not stop the rest, and batches go while one that frees capacity
    /// is out (defect 3, now in `outbox`).
    WritesUnordered,
    /// The outbox trusts only answers: a record still out, or one whose write failed or got no
    /// answer, is taken as not on the hub, so the release written after it does not count as
    /// freeing capacity and goes beside admissions (issue 28).
    AnswersTrusted,
    /// An orphan on a removed member is forgotten, and copies of followed jobs that their
    /// record does not name are never collected (issue 28).
    StraysKept,
    /// QueuedJobs are made without muster's finalizer, so one deleted while no leader runs
    /// takes the job's record with it (issue 28).
    NoRecordFinalizer,
    /// A copy being deleted holds back every create for as long as it stays (issue 28).
    DrainForever,
    /// A deleted hub job's charge lives only in memory: a driver that restarts while its copy
    /// may still run does not charge it again (issue 28).
    ChargeInMemory,
    /// A copy absent from the driver's view of a member counts as gone even when the view may
    /// not show muster's create yet (a lagging watch; issue 28).
    AbsenceTrusted,
    /// A replica dates its records by its own clock, so the next leader, its clock off, reads
    /// every deadline as long past or far off (issue 28). Set by a driver, not by the core.
    ClockTrusted,
    /// A replica takes the lease over (or a restarted one takes it again) while writes the
    /// last one sent are still on their way, so they land after it has read the hub (issue 28).
    /// Set by a driver, not by the core.
    ReleaseEarly,
    /// A hub job made again under the name of an earlier one takes over the earlier job's
    /// QueuedJob while muster keeps it (the earlier job's copy may still run, charged only
    /// through that record), or while it is being deleted (issue 28).
    NameTakenOver,
    /// A record's write is a merge patch from the status last known to have landed only, so
    /// the keys a write whose answer was lost left on the hub stay there (issue 28: "a write
    /// that timed out but landed is forgotten, so later diffs cannot remove its keys").
    PatchFromBelief,
    /// A create that takes a QueuedJob of its name over sends the status patch it planned (all
    /// of the new status, nothing for the keys there), so the earlier job's keys stay in the
    /// new job's record (issue 28: "a hub job re-created under an old name inherits the old
    /// QueuedJob's cluster, placement and orphans").
    StatusTakenOver,
    /// A placed job is taken back whenever it reads otherwise than it was admitted, even when
    /// its hub job was not edited (issue 28: "editing a hub training runtime respecs, and so
    /// kills, running TrainJobs", after the restart that reads it again).
    RuntimeRespecs,
    /// A driver trusts that nobody else changes a record on the hub: its status patches carry no
    /// resourceVersion precondition, and a record its view shows changed by someone else
    /// (`kubectl edit --subresource=status`, another tool) is not written again
    /// ([`Book::drifted`]), so the edit stays wherever the driver's patches do not reach
    /// (issue 28: resourceVersion preconditions and conflicts).
    Unconditioned,
    /// Creates go out as each job steps, before later jobs of the same pass: a job taken back
    /// in that pass (its spec edited while placed) leaves an old copy that holds back no create
    /// of it, so another job's copy runs beside it, uncharged (fault seed 8519).
    CreatesBeforeTakeBacks,
    /// A create retried as its job steps goes out even when the same pass's cycle then takes
    /// the job back: the copy is made for no admission (no admission annotation), and muster
    /// neither adopts nor deletes it (`make bench-kueue`, 2026-12-06: seven jobs stuck).
    CreatesForTakenBack,
}

impl Defect {
    /// Every defect with its name on the command line (`muster sim --faults-defect NAME`).
    pub const ALL: [(Defect, &'static str); 18] = [
        (Defect::CollectUnknown, "collect-unknown"),
        (Defect::Unfenced, "unfenced"),
        (Defect::WritesUnordered, "writes-unordered"),
        (Defect::AnswersTrusted, "answers-trusted"),
        (Defect::StraysKept, "strays-kept"),
        (Defect::NoRecordFinalizer, "no-record-finalizer"),
        (Defect::DrainForever, "drain-forever"),
        (Defect::ChargeInMemory, "charge-in-memory"),
        (Defect::AbsenceTrusted, "absence-trusted"),
        (Defect::ClockTrusted, "clock-trusted"),
        (Defect::ReleaseEarly, "release-early"),
        (Defect::NameTakenOver, "name-taken-over"),
        (Defect::PatchFromBelief, "patch-from-belief"),
        (Defect::StatusTakenOver, "status-taken-over"),
        (Defect::RuntimeRespecs, "runtime-respecs"),
        (Defect::Unconditioned, "unconditioned"),
        (Defect::CreatesBeforeTakeBacks, "creates-before-take-backs"),
        (Defect::CreatesForTakenBack, "creates-for-taken-back"),
    ];

    /// Whether the defect is of a driver that trusts its belief of what the hub holds: with it,
    /// status patches carry no resourceVersion precondition and a record someone else changed
    /// is not written again (as in the versions these defects come from; either would repair
    /// what the defect breaks, and the checker would not see it).
    pub fn trusts_belief(self) -> bool {
        matches!(
            self,
            Defect::Unconditioned
                | Defect::PatchFromBelief
                | Defect::StatusTakenOver
                | Defect::ReleaseEarly
        )
    }

    /// The defect called `name` on the command line.
    pub fn named(name: &str) -> Option<Defect> {
        Defect::ALL
            .iter()
            .find(|(_, n)| *n == name)
            .map(|(d, _)| *d)
    }
}

/// How a spec the hub's own admission refuses begins (the driver checks each pod template on
/// the hub before a job is queued): such a job is Rejected with that text as its reason, not
/// called malformed.
pub const REFUSED_BY_HUB: &str = "refused by the hub's admission";

/// Where a job stands (the QueuedJob's `state`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Phase {
    /// Waiting for quota or capacity, or backing off after a take-back.
    #[default]
    Queued,
    /// Capacity reserved on `cluster`; the copy there is being created.
    Admitted,
    /// The copy exists on `cluster`; not every pod runs (yet).
    Dispatched,
    /// Every pod of the job runs (or ran and succeeded) on `cluster`.
    Running,
    /// The member says the job succeeded.
    Finished,
    /// The member says the job failed.
    Failed,
    /// Can never run as written.
    Rejected,
}

impl Phase {
    /// Placed on a member: quota charged and capacity reserved there.
    pub fn placed(self) -> bool {
        matches!(self, Phase::Admitted | Phase::Dispatched | Phase::Running)
    }

    pub fn terminal(self) -> bool {
        matches!(self, Phase::Finished | Phase::Failed | Phase::Rejected)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Queued => "Queued",
            Phase::Admitted => "Admitted",
            Phase::Dispatched => "Dispatched",
            Phase::Running => "Running",
            Phase::Finished => "Finished",
            Phase::Failed => "Failed",
            Phase::Rejected => "Rejected",
        }
    }
}

/// Why a job was taken back from its member (the `reason` label of `muster_requeued_jobs_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RequeueReason {
    /// Its pods stayed unschedulable in the member for too long.
    StuckPods,
    /// Its pods disappeared from the member (deleted, node lost).
    PodsLost,
    /// The member it ran on became unreachable or was removed.
    MemberLost,
    /// Preempted to reclaim guaranteed quota.
    Preempted,
    /// Its copy could not be created there (no such kind, forbidden, refused).
    CreateFailed,
    /// Its copy disappeared from the member without muster deleting it.
    CopyLost,
    /// The hub job's spec (what it asks for) changed after admission.
    SpecChanged,
}

impl RequeueReason {
    pub fn as_str(self) -> &'static str {
        match self {
            RequeueReason::StuckPods => "stuck_pods",
            RequeueReason::PodsLost => "pods_lost",
            RequeueReason::MemberLost => "member_lost",
            RequeueReason::Preempted => "preempted",
            RequeueReason::CreateFailed => "create_failed",
            RequeueReason::CopyLost => "copy_lost",
            RequeueReason::SpecChanged => "spec_changed",
        }
    }
}

/// What to do with a job whose member stops answering (`--partition-policy`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Partition {
    /// After the grace period the job is placed again elsewhere; its old copy may still run
    /// unseen (the job is reported as possibly running twice) and is deleted the moment the
    /// member answers again.
    #[default]
    Replace,
    /// The job stays where it is, quota held, until the member answers: never two copies.
    Wait,
}

impl Partition {
    pub fn as_str(self) -> &'static str {
        match self {
            Partition::Replace => "replace",
            Partition::Wait => "wait",
        }
    }
}

/// Timeouts and policies (the controller's flags).
#[derive(Clone, Debug)]
pub struct Settings {
    /// A dispatched job whose pods do not all run this long after dispatch is taken back.
    pub pods_ready_timeout: Ms,
    /// A job that ran and lost pods for this long is taken back.
    pub pods_lost_timeout: Ms,
    /// A member silent for this long loses its jobs (with [`Partition::Replace`]).
    pub member_lost_grace: Ms,
    /// A dispatched copy absent from its answering member for this long was deleted by someone.
    pub copy_missing_grace: Ms,
    /// Creating the copy is retried at this interval ...
    pub create_retry: Ms,
    /// ... and given up (the job taken back, the member avoided) after failing this long.
    pub create_give_up: Ms,
    /// Backoff before a job taken back is queued again: base·2^(n-1), at most max.
    pub backoff: Ms,
    pub backoff_max: Ms,
    /// A copy being deleted holds back every create (what it uses is not free until it is
    /// gone) for at most this long after its job left its member; one that stays longer (held
    /// by a finalizer, its operator not acting) is called stuck and holds back only its own
    /// job, never every dispatch.
    pub drain_grace: Ms,
    /// A followed job's QueuedJob missing this long was deleted by someone (not a write the
    /// driver's view has yet to see) and is written again.
    pub record_settle: Ms,
    /// Creates out at once on one member (sent and not known to have landed, [`sent`]): a burst
    /// of admissions to one member goes out this many at a time, the rest on later passes.
    pub creates_per_member: usize,
    /// A record that says only that the copy was created waits this long after the create
    /// for the pods to run, so that one write says both ([`outbox`]).
    pub dispatched_write_delay: Ms,
    pub partition: Partition,
    /// An earlier controller's defect put back (`muster sim --faults-defect` only).
    pub defect: Option<Defect>,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            pods_ready_timeout: 300_000,
            pods_lost_timeout: 120_000,
            member_lost_grace: 300_000,
            copy_missing_grace: 15_000,
            create_retry: 5_000,
            create_give_up: 60_000,
            backoff: 10_000,
            backoff_max: 600_000,
            drain_grace: 60_000,
            record_settle: 5_000,
            creates_per_member: 16,
            dispatched_write_delay: 5_000,
            defect: None,
            partition: Partition::Replace,
        }
    }
}

impl Settings {
    /// The backoff before the `requeues`-th return to the queue.
    pub fn backoff_for(&self, requeues: u32) -> Ms {
        let factor = 1u64 << requeues.saturating_sub(1).min(20);
        self.backoff.saturating_mul(factor).min(self.backoff_max)
    }
}

/// Digest of what a job asks for: per component its name, pod count, requests and node
/// selector, canonically written (independent of how the manifest was laid out, and of fields
/// that do not change what is charged or where it may go, such as `suspend`). FNV-1a, hex.
pub fn digest(w: &crate::workload::Workload) -> String {
    let mut text = String::new();
    for c in &w.components {
        text.push_str(&c.name);
        text.push('|');
        text.push_str(&c.pods.to_string());
        for (r, q) in c.requests.iter() {
            text.push_str(&format!("|{r}={q}"));
        }
        for (k, v) in &c.node_selector {
            text.push_str(&format!("|{k}:{v}"));
        }
        text.push(';');
    }
    for p in &w.priority_class_names {
        text.push_str(&format!("pc={p};"));
    }
    digest_text(&text)
}

/// `w` restricted to those of `members` it does not avoid (unless that leaves none: avoiding is
/// a preference, never a reason to wait).
pub fn avoiding(
    mut w: crate::workload::Workload,
    members: impl IntoIterator<Item = String>,
    avoid: &BTreeSet<String>,
) -> crate::workload::Workload {
    if avoid.is_empty() {
        return w;
    }
    let allowed: BTreeSet<String> = members
        .into_iter()
        .filter(|n| !avoid.contains(n))
        .filter(|n| {
            w.candidates
                .names
                .as_ref()
                .is_none_or(|names| names.contains(n))
        })
        .collect();
    if !allowed.is_empty() {
        w.candidates.names = Some(allowed);
    }
    w
}

/// FNV-1a of `text`, hex.
pub fn digest_text(text: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// A job's durable record: everything a restarted driver needs to go on (the QueuedJob status).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Record {
    pub phase: Phase,
    /// The member it is placed on (or finished on).
    pub cluster: Option<String>,
    /// The reserved plan on `cluster`.
    pub placement: Plan,
    /// Digest of the hub job's spec this record was made for ([`digest`]): what is dispatched
    /// is what was admitted.
    pub spec: String,
    /// The hub job's generation `spec` was read from (None: a record from before it was kept).
    /// A placed job whose copy runs keeps its spec while the generation has not moved: a
    /// digest that differs then comes from outside the job (a training runtime edited, the
    /// hub's admission defaults, muster reading the kind otherwise after an upgrade), which
    /// does not change what already runs.
    pub generation: Option<i64>,
    pub admitted_at: Option<Ms>,
    pub dispatched_at: Option<Ms>,
    /// UID of the copy muster created (only that object is the job's copy).
    pub copy_uid: Option<String>,
    /// Creating the copy has failed since (and last at).
    pub create_failing_since: Option<Ms>,
    pub create_failed_at: Option<Ms>,
    /// Every pod ran at some point of this dispatch.
    pub ran: bool,
    /// Since when a job that ran has fewer live pods than it needs.
    pub degraded_since: Option<Ms>,
    /// Since when its copy is absent from its (answering) member.
    pub missing_since: Option<Ms>,
    /// Finished or failed, but pods still run: its quota stays charged until they end.
    pub lingering: bool,
    /// Every pod it needs has succeeded and none is left: its quota and capacity are free
    /// while the member's own word on the outcome is awaited (its phase stays).
    pub pods_done: bool,
    /// Taken back: queued again at this time.
    pub backoff_until: Option<Ms>,
    pub requeues: u32,
    /// Members where its pods could not run lately: avoided while others remain.
    pub avoid: BTreeSet<String>,
    /// Members that may still hold a copy of it (taken back, preempted), since when: deleted
    /// there, and forgotten once the member confirms it gone.
    pub orphans: BTreeMap<String, Ms>,
    /// Orphan members that were removed from the fleet: nothing can confirm their copies gone
    /// until they are registered again (said once, in an `OldCopyUnconfirmed` Event; the job
    /// may run twice meanwhile). A member registered again that answers has its copy deleted.
    pub unconfirmed: BTreeSet<String>,
    /// Per component, the per-pod requests it was admitted with: what a restarted driver
    /// charges for the job while its copy may still run after its hub job was deleted (the
    /// workload is gone then; see [`Book::restore_deleted`]).
    pub charge: BTreeMap<String, crate::quantity::ResourceList>,
    /// One line: why it waits, or what happened last.
    pub reason: String,
}

impl Record {
    /// The members the record names: the one it places the job on, then each it left (one may
    /// be both).
    pub fn members(&self) -> impl Iterator<Item = &String> {
        self.cluster.iter().chain(self.orphans.keys())
    }

    /// The pods the job's copy is expected to have: as the job reads now (`spec`), unless the
    /// record holds a copy made from another read (a training runtime edited while it ran):
    /// then as many as its plan places.
    pub fn expected_pods(&self, spec: &Spec) -> u32 {
        if self.holds() && self.spec != spec.1 {
            return self.placement.values().flat_map(|m| m.values()).sum();
        }
        spec.0.as_ref().map_or(0, |w| w.pod_count() as u32)
    }

    /// Placed on its member, or ended with pods left there: its copy there is the job's own.
    pub fn holds(&self) -> bool {
        self.phase.placed() || self.lingering
    }

    /// Charged to quota and holding capacity (what a restarted driver restores as admitted):
    /// held, unless every pod it needs has already succeeded.
    pub fn charged(&self) -> bool {
        self.holds() && !(self.pods_done && self.phase.placed())
    }

    /// The admission to `cluster` this record holds now (its time), if it holds one: what a
    /// create of the copy there is made for, and the only thing one may be sent for.
    pub fn admission_on(&self, cluster: &str) -> Option<Ms> {
        if self.phase == Phase::Admitted && self.cluster.as_deref() == Some(cluster) {
            self.admitted_at
        } else {
            None
        }
    }

    /// This record, held by the hub, allows creating the copy on `cluster`.
    pub fn places_on(&self, cluster: &str) -> bool {
        self.phase.placed() && self.cluster.as_deref() == Some(cluster)
    }

    /// This record, held by the hub, is of the admission `n` is in: placed on the same member,
    /// admitted at the same time, after as many take-backs; and it no longer lists an old copy
    /// on that member to go. (While it does, any copy there is one to delete
    /// ([`Record::removes_from`]): a copy created then would be deleted on the strength of
    /// that record, its own take-back not yet on the hub.)
    pub fn records_admission(&self, n: &Record) -> bool {
        n.cluster
            .as_deref()
            .is_some_and(|c| self.places_on(c) && !self.orphans.contains_key(c))
            && self.admitted_at == n.admitted_at
            && self.requeues == n.requeues
    }

    /// This record, held by the hub, says why the copy on `cluster` goes: the job is not placed
    /// there, or an old copy there is listed to go.
    pub fn removes_from(&self, cluster: &str) -> bool {
        !(self.holds() && self.cluster.as_deref() == Some(cluster))
            || self.orphans.contains_key(cluster)
    }

    /// Members where a copy may run while the job is placed elsewhere or waits: a declared
    /// partition (the job may run twice until they answer), a member removed from the fleet
    /// with a copy nothing confirmed gone, or one whose old copy muster deletes still has
    /// live pods.
    pub fn maybe_twice<'a>(&'a self, seen: &'a Seen) -> impl Iterator<Item = &'a str> + 'a {
        self.orphans
            .keys()
            .map(String::as_str)
            .filter(move |c| match seen.orphans.get(*c) {
                Some(Member::Answering(Some(copy))) => copy.live_pods > 0,
                Some(Member::Answering(None)) => false,
                _ => true,
            })
    }
}

/// The state of a member copy's job, from the copy and its pods.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Progress {
    /// Not every pod runs (yet).
    Starting {
        scheduled: u32,
        running: u32,
    },
    /// Every pod needed runs (succeeded pods count as progress).
    Running {
        scheduled: u32,
        running: u32,
    },
    Succeeded,
    Failed(String),
}

impl Progress {
    /// A job not over yet, from its live pods: `running` and `waiting` (Pending, or being
    /// deleted) of them, `scheduled` bound to a node, and `succeeded` pods, against the
    /// `expected` pods of the job. Succeeded pods are progress, not loss (workers that finish
    /// before their master, the last wave of a batch Job with completions > parallelism): the job
    /// runs while every live pod runs and those with the succeeded ones make up the whole job.
    pub fn judge(
        scheduled: u32,
        running: u32,
        succeeded: u32,
        waiting: u32,
        expected: u32,
    ) -> Progress {
        let whole = running >= expected || (waiting == 0 && running + succeeded >= expected);
        if expected > 0 && whole {
            Progress::Running { scheduled, running }
        } else {
            Progress::Starting { scheduled, running }
        }
    }
}

/// A copy of the job on a member, as observed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Copy {
    pub uid: String,
    pub progress: Progress,
    /// Pods running (started and not finished): what still uses the member. Pending pods of a
    /// job that ended hold nothing.
    pub live_pods: u32,
    /// Pods the job needs.
    pub expected: u32,
    /// Every pod the job needs has succeeded and none is live, so no pod of it will run again
    /// (a batch Job whose completions have succeeded), though the member's controller has not
    /// said the job is over yet.
    pub pods_done: bool,
    /// Why pods wait, in the member scheduler's words.
    pub waiting: Option<String>,
}

/// A member as one job sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Member {
    /// Connected and in sync: the job's copy there, if any.
    Answering(Option<Copy>),
    /// Answers, but the view of it does not show the job's copy and has not reached muster's
    /// create of it there (sent at `since`): the copy may be there or not ([`sent`]).
    Behind { since: Ms },
    /// Was connected; has not answered since.
    Silent { since: Ms },
    /// Known but never connected (credentials missing or refused), since.
    Unconnected { since: Ms },
    /// No such member any more.
    Removed,
}

/// What a create just tried on the member returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Created {
    Ok { uid: String },
    Failed { message: String },
}

/// What the driver observed for one job.
#[derive(Clone, Debug, Default)]
pub struct Seen {
    pub now: Ms,
    /// Digest of the hub job's spec now.
    pub spec: String,
    /// The hub job's generation that `spec` was read from.
    pub generation: Option<i64>,
    /// What the hub holds of this job's record (None: nothing yet, or its QueuedJob was
    /// deleted). A copy is created only where it places the job, deleted only where it says the
    /// job is not.
    pub hub: Option<Record>,
    /// The member the record places it on.
    pub here: Option<Member>,
    /// Each orphan member of the record.
    pub orphans: BTreeMap<String, Member>,
    /// The outcome of a create on `here` since the last step.
    pub created: Option<Created>,
    /// Why the member an admitted job was placed on cannot create it now, if it cannot: what
    /// it serves changed since the admission (a training runtime edited there, a kind or
    /// PriorityClass gone). Filled in by the book from the scheduler.
    pub refused: Option<String>,
    /// The version (a resourceVersion) each member's view named above has reached, where the
    /// driver knows it: a job's copy absent from a view is believed gone only once the view
    /// has reached muster's create of it ([`sent`]).
    pub versions: BTreeMap<String, u64>,
}

/// Named transitions (each Event's reason).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transition {
    Queued,
    Rejected,
    /// Rejected because muster cannot read the job (the note names the field).
    Malformed,
    Admitted,
    Dispatched,
    DispatchFailed,
    Running,
    Degraded,
    Finished,
    Failed,
    Requeued,
    Preempted,
    Resubmitted,
    OldCopyGone,
    OldCopyUnconfirmed,
    MemberSilent,
}

impl Transition {
    pub fn as_str(self) -> &'static str {
        match self {
            Transition::Queued => "Queued",
            Transition::Rejected => "Inadmissible",
            Transition::Malformed => "Malformed",
            Transition::Admitted => "Admitted",
            Transition::Dispatched => "Dispatched",
            Transition::DispatchFailed => "DispatchFailed",
            Transition::Running => "Running",
            Transition::Degraded => "Degraded",
            Transition::Finished => "Finished",
            Transition::Failed => "Failed",
            Transition::Requeued => "Requeued",
            Transition::Preempted => "Preempted",
            Transition::Resubmitted => "Resubmitted",
            Transition::OldCopyGone => "OldCopyGone",
            Transition::OldCopyUnconfirmed => "OldCopyUnconfirmed",
            Transition::MemberSilent => "MemberSilent",
        }
    }

    /// Shown as a Warning Event.
    pub fn warning(self) -> bool {
        matches!(
            self,
            Transition::Rejected
                | Transition::Malformed
                | Transition::DispatchFailed
                | Transition::Degraded
                | Transition::Failed
                | Transition::Requeued
                | Transition::Preempted
                | Transition::OldCopyUnconfirmed
                | Transition::MemberSilent
        )
    }
}

/// What the driver must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Intent {
    /// Create the copy on the member (the record placing it there is durable).
    Create { cluster: String },
    /// Delete the job's copy on the member (the record saying why is durable).
    Delete { cluster: String, why: String },
    /// Free the job's quota and capacity in the scheduler; it stays tracked.
    Release,
    /// (Re)submit the job's current spec to the scheduler (backoff over, spec changed).
    Submit,
    /// Counted in `muster_requeued_jobs_total`.
    Requeued(RequeueReason),
    /// Counted in `muster_finished_jobs_total`.
    Ended { succeeded: bool },
    Event {
        transition: Transition,
        note: String,
    },
    /// Step this job again at (the earliest deadline in its record).
    WakeAt(Ms),
}
