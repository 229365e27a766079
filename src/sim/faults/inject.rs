//! The faults of a run: which member, controller, hub job, QueuedJob or tree goes wrong at
//! each step (drawn from the run's seed), and the moment every fault heals.

use std::rc::Rc;

use super::world::Rng;
use super::{MEMBERS, Process, TICK, World};
use crate::lifecycle::{Defect, Ms};

/// Every fault heals: members answer and run pods again, the tree is valid.
pub(super) fn heal(w: &mut World) {
    let now = w.now;
    for m in w.members.values_mut() {
        m.back_unseen |= m.down_since.is_some() || m.removed;
        m.down_since = None;
        m.removed = false;
        for c in m.copies.values_mut() {
            if let Some((at, _)) = c.deleting {
                c.deleting = Some((at, now));
            }
        }
        m.stuck_until = 0;
        m.fail_creates = 0;
        m.lag_until = 0;
    }
    w.set_tree((w.tree.0, true));
    w.log("every fault heals".into());
}

/// Someone else edits a QueuedJob's status now and then while faults last (`kubectl edit
/// --subresource=status`, another tool): in one run in eight, 1.5% of its seconds, drawn on a
/// stream of its own (so the other faults of a run are unchanged until the first edit). The controller's next write of that record meets a
/// changed resourceVersion and is made again from what is there; without a precondition
/// (defect `unconditioned`), the edit stays wherever its patch does not reach. Returns how many.
pub(super) fn status_edits(w: &mut World, seed: u64) -> u32 {
    let mut r = Rng::new(seed ^ w.now.rotate_left(29) ^ 0x57A7);
    if !Rng::new(seed ^ 0xED17).chance(125) || w.store.statuses.is_empty() || !r.chance(15) {
        return 0;
    }
    let k = r.below(w.store.statuses.len() as u64) as usize;
    let Some(uid) = w.store.statuses.keys().nth(k).cloned() else {
        return 0;
    };
    let Some((was, now)) = Rc::make_mut(&mut w.store).edit_status(&uid) else {
        return 0;
    };
    w.log(format!(
        "someone edits the status of the QueuedJob of {uid}: requeues {was} → {now}"
    ));
    1
}

/// The hub's training runtime is edited when its time comes (its per-pod cpu flips between 1
/// and 2): every job that names it reads otherwise from now on, its generation unchanged, and
/// copies made from now on run its new pods; copies running keep theirs. Returns how many.
pub(super) fn runtime_edits(w: &mut World) -> u32 {
    let mut n = 0;
    while w.runtime.edits.first().is_some_and(|t| *t <= w.now) {
        w.runtime.edits.remove(0);
        w.runtime.cpu = 3 - w.runtime.cpu;
        let cpu = w.runtime.cpu;
        for j in Rc::make_mut(&mut w.jobs).values_mut().filter(|j| j.trains) {
            j.read(cpu);
        }
        w.log(format!(
            "the training runtime is edited: {cpu} cpu per pod for the jobs that name it"
        ));
        n += 1;
    }
    n
}

/// Injects this step's faults; returns how many.
pub(super) fn faults(
    w: &mut World,
    proc: &mut Option<Process>,
    restart_at: &mut Option<Ms>,
    crashes: &mut u32,
    term: &mut u64,
    stale: &mut Option<(Process, Ms)>,
    retired: &mut Vec<Process>,
) -> u32 {
    let mut n = 0;
    let now = w.now;
    let names: Vec<String> = w.members.keys().cloned().collect();
    for name in &names {
        let r = w.rng.below(1000);
        let Some(m) = w.members.get_mut(name) else {
            continue;
        };
        let line = if m.removed {
            // Registered again (a Secret rotated, a GitOps prune undone): its copies ran on.
            (now - m.removed_since > 30_000 && r < 20).then(|| {
                m.removed = false;
                m.back_unseen = true;
                format!("{name} registered again")
            })
        } else if let Some(since) = m.down_since {
            (now - since > 60_000 || r < 40).then(|| {
                m.down_since = None;
                m.back_unseen = true;
                format!("{name} answers again")
            })
        } else if r < 6 {
            m.down_since = Some(now);
            Some(format!("{name} partitioned (its copies keep running)"))
        } else if r < 10 {
            m.stuck_until = now + 10_000 + (r as Ms) * 5_000;
            Some(format!(
                "{name}: pods cannot start until {}s",
                m.stuck_until / 1000
            ))
        } else if r < 22 {
            let delay = if r < 18 { Some(3_000) } else { None };
            let mut rng = Rng::new(now ^ r);
            m.lose_pod(&mut rng, now, delay)
                .map(|j| format!("{name}: a pod of {j} lost (back: {delay:?})"))
        } else if r < 25 {
            m.fail_creates = 1 + (r as u32 % 20);
            Some(format!("{name}: the next {} creates fail", m.fail_creates))
        } else if (25..27).contains(&r) && !MEMBERS[..1].contains(&name.as_str()) {
            m.removed = true;
            m.removed_since = now;
            Some(format!("{name} removed from the fleet"))
        } else if (27..33).contains(&r) {
            // The controller's watch of the member lags (a slow API server, a watch being
            // re-established): what it shows is up to 8 s old.
            m.lag_until = now + (2 + (r as Ms) % 7) * 1_000;
            Some(format!(
                "{name}: the controller's watch lags until {}s",
                m.lag_until / 1000
            ))
        } else {
            None
        };
        if let Some(l) = line {
            n += 1;
            w.log(l);
        }
    }
    let r = w.rng.below(1000);
    if proc.is_some() && r < 8 {
        *crashes += 1;
        let back = now + (1 + w.rng.below(8)) * TICK;
        let back = match proc.take() {
            Some(old) => super::retire(old, w, back, retired),
            None => back,
        };
        *restart_at = Some(back);
        w.log(format!("controller crashes; back at {}s", back / 1000));
        n += 1;
    } else if proc.is_some() && r < 12 {
        *term += 1;
        Rc::make_mut(&mut w.store).term = *term;
        let Some(old) = proc.take() else {
            return n;
        };
        let defect = old.defect;
        if defect == Some(Defect::Unfenced) {
            // The defect: a new leader takes over while the old one goes on acting for a few
            // steps.
            let until = now + (1 + w.rng.below(5)) * TICK;
            *stale = Some((old, until));
            *proc = Some(Process::start(w, *term, defect));
            w.log(format!(
                "leader changes; the old leader goes on until {}s",
                until / 1000
            ));
        } else {
            // The old leader's lease runs out (or it hands it over): it acts no more, what it
            // sent lands or was given up, and then the next one takes over.
            let at = super::retire(old, w, now, retired);
            if at <= now {
                *proc = Some(Process::start(w, *term, defect));
            } else {
                *restart_at = Some(at);
            }
            w.log(format!(
                "leader changes; the next one leads from {}s",
                at / 1000
            ));
        }
        n += 1;
    } else if r < 16 {
        let k = w.rng.below(w.jobs.len() as u64) as usize;
        let runtime = w.runtime.cpu;
        if let Some(j) = Rc::make_mut(&mut w.jobs).values_mut().nth(k) {
            j.generation += 1;
            if r < 14 {
                j.cpu = 3 - j.cpu;
            }
            j.read(runtime);
            let line = format!(
                "{} edited (generation {}, cpu {})",
                j.uid, j.generation, j.cpu
            );
            w.log(line);
            n += 1;
        }
    } else if r < 18 {
        w.set_tree((w.tree.0, !w.tree.1));
        let line = format!(
            "the tree is now {}",
            if w.tree.1 { "valid" } else { "invalid" }
        );
        w.log(line);
        n += 1;
    } else if r < 19 {
        w.set_tree((w.tree.0 + 2, w.tree.1));
        let line = format!("the tree's root max is now {} cpu", w.tree.0);
        w.log(line);
        n += 1;
    } else if r < 22 {
        // Someone deletes a QueuedJob (`kubectl delete qj -A`, the CRD reinstalled), with the
        // controller up or not: its finalizer keeps it (and its record) until the hub job is
        // gone; without one the record goes.
        let k = w.rng.below(w.jobs.len() as u64) as usize;
        if let Some(uid) = w.store.records.keys().nth(k).cloned() {
            let gone = Rc::make_mut(&mut w.store).delete(&uid);
            let up = if proc.is_some() {
                ""
            } else {
                " while no controller runs"
            };
            w.log(format!(
                "QueuedJob of {uid} deleted{up}: {}",
                if gone {
                    "its record is gone"
                } else {
                    "kept by its finalizer"
                }
            ));
            n += 1;
        }
    } else if r < 24 {
        // A user deletes a hub job, more often one that runs (as users do).
        let running: Vec<String> = w
            .jobs
            .values()
            .filter(|j| {
                !j.deleted
                    && w.store
                        .records
                        .get(&j.uid)
                        .is_some_and(|r| r.phase.placed())
            })
            .map(|j| j.uid.clone())
            .collect();
        let uid = if r == 23 && !running.is_empty() {
            running
                .get(w.rng.below(running.len() as u64) as usize)
                .cloned()
        } else {
            let k = w.rng.below(w.jobs.len() as u64) as usize;
            w.jobs.keys().nth(k).cloned()
        };
        if let Some(j) = uid.and_then(|u| Rc::make_mut(&mut w.jobs).get_mut(&u))
            && !j.deleted
        {
            j.deleted = true;
            let uid = j.uid.clone();
            // Its QueuedJob is the hub's garbage collector's to delete (owner reference),
            // unless the user deleted it with `--cascade=orphan`: then it stays, its record
            // the earlier job's, for a job made again under the name to find.
            let held = w.store.records.contains_key(&uid);
            let orphan = w.rng.chance(200);
            let gone = !orphan && Rc::make_mut(&mut w.store).delete(&uid);
            w.log(format!(
                "hub job {uid} deleted, its QueuedJob with it ({})",
                if !held {
                    "none yet"
                } else if orphan {
                    "no: deleted with --cascade=orphan, it stays"
                } else if gone {
                    "record gone"
                } else {
                    "kept by its finalizer"
                }
            ));
            n += 1;
            // Half the time the user makes it again under the same name at once or a few
            // seconds on (`kubectl replace --force`, or a delete and an apply of the same
            // file): a new job, whose QueuedJob name the earlier one's may still hold.
            if w.rng.chance(500) {
                let again = w.rng.below(4);
                if let Some(mut j) = w.jobs.get(&uid).cloned() {
                    j.uid = format!("{uid}n");
                    j.generation = 1;
                    j.deleted = false;
                    j.submitted = now / 1000 + again;
                    j.read(w.runtime.cpu);
                    w.log(format!(
                        "hub job {}/{} made again as {} at {}s",
                        j.namespace, j.name, j.uid, j.submitted
                    ));
                    Rc::make_mut(&mut w.jobs).insert(j.uid.clone(), j);
                }
            }
        }
    }
    n
}
