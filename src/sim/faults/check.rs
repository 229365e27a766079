//! The invariants of a fault run, checked after every step (and at the end):
//! 1. never a job's copy running in two members, except on members of a declared partition
//!    (silent, or answering again but not yet seen by a controller pass, and listed in the
//!    job's durable record as possibly still holding a copy);
//! 2. quota usage counted from the pods that really live on the members never above a max;
//! 3. no running copy deleted without a durable reason (the hub job deleted, or its record
//!    placing it elsewhere or listing that copy as one to go);
//! 4. no job lost: once faults heal, every job ends Finished, Failed or Rejected;
//! 5. no quota held beyond the timeouts by a job with nothing running on its answering member
//!    (except, under policy Wait, while an old copy may still run on a silent member);
//! 6. after restarts the records converge: what the hub holds is what the controller holds,
//!    and copies exist only where records place them.
//! 7. every live copy is named by its job's record on the hub (placed there, or an old copy
//!    to go), unless muster cannot see it any more (a removed member, a copy held by a
//!    finalizer past the drain grace): nothing else tells a controller that starts now of it.
//! 8. a job whose copy runs is taken back as edited only when its hub job was edited since the
//!    copy was made: an edit of what it names (the training runtime) kills nothing that runs.

use std::collections::BTreeMap;

use super::world::{PodState, SimCopy, SimMember, cpu_used};
use super::{TICK, TREE_MAX, World};
use crate::lifecycle::{Book, Ms, Partition};
use crate::scheduler::{JobState, Scheduler};

pub struct Checker {
    fault_end: Ms,
    /// Per job: on which member and admission, and how long, it has held quota with nothing
    /// running (a job placed again, elsewhere or on the same member after its spec was edited,
    /// starts counting again: each placement has its timeouts).
    idle: BTreeMap<String, (String, Ms)>,
    broken: Option<String>,
    pub requeues: u32,
    /// Copies of deleted hub jobs seen on a removed member: muster may let their record go
    /// (nothing can confirm them gone), so once the member is registered again nothing durable
    /// names them; the garbage collector deletes them as copies of gone jobs (docs/controller.md,
    /// "not guaranteed").
    out_of_sight: std::collections::BTreeSet<(String, String)>,
}

fn alive(c: &SimCopy) -> bool {
    cpu_used(c) > 0
}

impl Checker {
    pub fn new(fault_end: Ms) -> Checker {
        Checker {
            fault_end,
            idle: BTreeMap::new(),
            broken: None,
            requeues: 0,
            out_of_sight: Default::default(),
        }
    }

    /// Faults may still happen at `now`.
    pub fn faulty(&self, now: Ms) -> bool {
        now < self.fault_end
    }

    /// Invariant 8: the job `uid`, whose copy ran on `cluster`, was taken back as edited; its
    /// hub job must be at another generation than the one its running copy was made from.
    pub fn respecced(&mut self, w: &World, uid: &str, cluster: &str) {
        if self.broken.is_some() {
            return;
        }
        let Some(j) = w.jobs.get(uid).filter(|j| !j.deleted) else {
            return;
        };
        let Some(c) = w.members.get(cluster).and_then(|m| m.copies.get(uid)) else {
            return;
        };
        if alive(c) && c.deleting.is_none() && c.generation == j.generation {
            self.broken = Some(format!(
                "invariant 8: {uid} was taken back as edited while its copy runs on {cluster}, but its hub job is at generation {}, the one that copy was made from",
                j.generation
            ));
        }
    }

    /// Invariant 9: a create goes out only for an admission the job's record holds now, on that
    /// member. A copy made for none carries no admission annotation: muster neither adopts nor
    /// deletes it, and the job, admitted there again, cannot be created (bench-kueue run
    /// 20261206T014959Z: seven jobs stuck).
    pub fn create_sent(
        &mut self,
        uid: &str,
        cluster: &str,
        record: Option<&crate::lifecycle::Record>,
    ) {
        if self.broken.is_some() {
            return;
        }
        if record.and_then(|r| r.admission_on(cluster)).is_none() {
            self.broken = Some(format!(
                "invariant 9: a create of {uid} went to {cluster}, but its record holds no admission there ({})",
                record.map_or("no record".to_string(), |r| format!(
                    "{} on {:?}",
                    r.phase.as_str(),
                    r.cluster
                ))
            ));
        }
    }

    /// 3. A copy with live pods was deleted: only with a durable reason.
    pub fn deleted(&mut self, w: &World, uid: &str, cluster: &str, live: bool) {
        if !live || self.broken.is_some() {
            return;
        }
        let hub_deleted = w.jobs.get(uid).is_none_or(|j| j.deleted);
        let recorded_elsewhere = w
            .store
            .records
            .get(uid)
            .is_some_and(|r| r.removes_from(cluster));
        if !hub_deleted && !recorded_elsewhere {
            let held = w
                .store
                .records
                .get(uid)
                .map_or("no record".to_string(), |r| {
                    format!("{} on {:?}", r.phase.as_str(), r.cluster)
                });
            self.broken = Some(format!(
                "invariant 3: the running copy of {uid} on {cluster} was deleted while the hub records {held}"
            ));
        }
    }

    /// Declared: the job's durable record lists the member as one it left, and the member does
    /// not answer (silent, or removed from the fleet), or answers with the copy being deleted
    /// (its pods not gone yet: a finalizer holds it, or they are terminating).
    fn declared(w: &World, uid: &str, cluster: &str) -> bool {
        let silent = w.members.get(cluster).is_some_and(|m| {
            m.down_since.is_some()
                || m.back_unseen
                || m.removed
                || m.copies.get(uid).is_some_and(|c| c.deleting.is_some())
        });
        silent
            && w.store
                .records
                .get(uid)
                .is_some_and(|r| r.orphans.contains_key(cluster))
    }

    /// A copy muster deleted that a finalizer holds, out of muster's hands: for longer than the
    /// drain grace (its job says so, and waits for it; no other job does), or on a member
    /// removed from the fleet since (nothing of it can be seen).
    /// A copy of a deleted hub job on a removed member is out of sight too: no job, no record.
    fn stuck(&self, w: &World, member: &SimMember, uid: &str, c: &SimCopy) -> bool {
        let deleted = w.jobs.get(uid).is_none_or(|j| j.deleted);
        (member.removed && deleted)
            || c.deleting.is_some_and(|(at, _)| {
                member.removed || w.now.saturating_sub(at) >= w.settings.drain_grace
            })
    }

    /// A copy out of sight (of a hub job deleted while its member was removed: no record
    /// names it) on a member registered again that no controller pass has seen since, or
    /// that the garbage collector is deleting: nothing could charge it meanwhile
    /// (docs/controller.md, "not guaranteed"). Once a pass has seen the member, a copy not
    /// being deleted counts again.
    fn unseen_since_return(&self, m: &SimMember, uid: &str, name: &str, c: &SimCopy) -> bool {
        (m.removed || m.back_unseen || c.deleting.is_some())
            && self
                .out_of_sight
                .contains(&(uid.to_string(), name.to_string()))
    }

    pub fn after_step(
        &mut self,
        w: &World,
        proc: Option<(&Scheduler, &Book)>,
    ) -> Result<(), String> {
        if let Some(b) = self.broken.take() {
            return Err(b);
        }
        // 1 and 2.
        let mut per_job: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        let mut used: BTreeMap<&str, u64> = BTreeMap::new();
        let mut users: Vec<String> = Vec::new();
        for (name, m) in &w.members {
            for (uid, c) in &m.copies {
                if !alive(c)
                    || Self::declared(w, uid, name)
                    || self.stuck(w, m, uid, c)
                    || self.unseen_since_return(m, uid, name, c)
                {
                    continue;
                }
                per_job.entry(uid).or_default().push(name);
                let ns = w.jobs.get(uid).map_or("", |j| j.namespace.as_str());
                *used.entry(ns).or_default() += cpu_used(c);
                users.push(format!("{uid}@{name}:{}", cpu_used(c)));
            }
        }
        if let Some((uid, ms)) = per_job.iter().find(|(_, ms)| ms.len() > 1) {
            return Err(format!(
                "invariant 1: {uid} runs on {} outside a declared partition",
                ms.join(" and ")
            ));
        }
        let total: u64 = used.values().sum();
        if total > w.tree.0 {
            return Err(format!(
                "invariant 2: {total} cpu in use, above the root's max of {} ({})",
                w.tree.0,
                users.join(" ")
            ));
        }
        if let Some((ns, u)) = used.iter().find(|(_, u)| **u > TREE_MAX.1) {
            return Err(format!(
                "invariant 2: {u} cpu in use in {ns}, above its max of {} ({})",
                TREE_MAX.1,
                users.join(" ")
            ));
        }
        // 7.
        for (name, m) in &w.members {
            for (uid, c) in &m.copies {
                if m.removed && w.jobs.get(uid).is_none_or(|j| j.deleted) {
                    self.out_of_sight.insert((uid.clone(), name.clone()));
                }
                if !alive(c)
                    || self.stuck(w, m, uid, c)
                    || self.out_of_sight.contains(&(uid.clone(), name.clone()))
                {
                    continue;
                }
                let named = w
                    .store
                    .records
                    .get(uid)
                    .is_some_and(|r| r.members().any(|c| c == name));
                if !named {
                    return Err(format!(
                        "invariant 7: the live copy of {uid} on {name} is named by no record on the hub ({})",
                        w.store.records.get(uid).map_or("none".into(), |r| format!(
                            "{} on {:?}",
                            r.phase.as_str(),
                            r.cluster
                        ))
                    ));
                }
            }
        }
        // 5.
        let Some((sched, book)) = proc else {
            return Ok(());
        };
        let s = &book.settings;
        let bound = s.pods_ready_timeout + s.create_give_up + s.pods_lost_timeout + 10 * TICK;
        for (uid, e) in book.iter() {
            let charged =
                e.id.is_some_and(|id| matches!(sched.state(id), JobState::Admitted { .. }));
            let member = e.record.cluster.as_deref().and_then(|c| w.members.get(c));
            // Under policy Wait a job whose old copy may still run on a silent member waits
            // for it, quota held: what that policy promises.
            let waits = s.partition == Partition::Wait
                && e.record
                    .orphans
                    .keys()
                    .any(|c| w.members.get(c).is_some_and(|m| !m.up()));
            let watched = charged && !waits && member.is_some_and(|m| m.up());
            let running = member
                .and_then(|m| m.copies.get(uid))
                .is_some_and(|c| c.pods.iter().any(|p| p.state == PodState::Running));
            // Its old copy, held by a finalizer, still runs: the job waits for it, charged.
            let draining = e.record.orphans.keys().any(|c| {
                w.members
                    .get(c)
                    .and_then(|m| m.copies.get(uid))
                    .is_some_and(|c| c.deleting.is_some() && alive(c))
            });
            let running = running || draining;
            if !watched || running {
                self.idle.remove(uid);
                continue;
            }
            // Per placement: a job admitted again (its spec edited) starts its timeouts anew.
            let on = format!(
                "{}@{}",
                e.record.cluster.as_deref().unwrap_or_default(),
                e.record.admitted_at.unwrap_or_default()
            );
            let (at, idle) = self.idle.entry(uid.clone()).or_default();
            if *at != on {
                (*at, *idle) = (on, 0);
            }
            *idle += TICK;
            if *idle > bound {
                return Err(format!(
                    "invariant 5: {uid} has held quota on {} for {}s with nothing running ({})",
                    e.record.cluster.as_deref().unwrap_or("-"),
                    *idle / 1000,
                    e.record.reason
                ));
            }
        }
        Ok(())
    }

    /// Every job has ended (the run may stop).
    pub fn settled(&self, w: &World) -> bool {
        w.jobs.values().filter(|j| !j.deleted).all(|j| {
            w.store
                .records
                .get(&j.uid)
                .is_some_and(|r| r.phase.terminal() && !r.lingering)
        }) && w.members.values().all(|m| {
            m.copies
                .iter()
                .all(|(uid, c)| !alive(c) || w.jobs.get(uid).is_none_or(|j| j.deleted))
        })
    }

    /// 4 and 6, once every fault has healed and the run went on.
    pub fn at_end(&self, w: &World, book: Option<&Book>) -> Result<(), String> {
        for j in w.jobs.values().filter(|j| !j.deleted) {
            match w.store.records.get(&j.uid) {
                Some(r) if r.phase.terminal() => {}
                Some(r) => {
                    return Err(format!(
                        "invariant 4: {} never ended: {} ({})",
                        j.uid,
                        r.phase.as_str(),
                        r.reason
                    ));
                }
                None => return Err(format!("invariant 4: {} has no record", j.uid)),
            }
        }
        let Some(book) = book else {
            return Err("invariant 6: no controller at the end".into());
        };
        for (uid, e) in book.iter() {
            let held = w.store.records.get(uid);
            if held != Some(&e.record) {
                let say = |r: &crate::lifecycle::Record| {
                    format!(
                        "{} on {:?}, old copies {:?}, requeues {}",
                        r.phase.as_str(),
                        r.cluster,
                        r.orphans.keys().collect::<Vec<_>>(),
                        r.requeues
                    )
                };
                return Err(format!(
                    "invariant 6: the hub's record of {uid} differs from the controller's (hub: {}; controller: {})",
                    held.map_or("none".into(), say),
                    say(&e.record)
                ));
            }
        }
        for (name, m) in &w.members {
            for (uid, c) in &m.copies {
                let placed = w
                    .store
                    .records
                    .get(uid)
                    .is_some_and(|r| r.cluster.as_deref() == Some(name.as_str()));
                if alive(c) && !placed && !m.removed {
                    return Err(format!(
                        "invariant 6: a live copy of {uid} is left on {name}"
                    ));
                }
            }
        }
        Ok(())
    }
}
