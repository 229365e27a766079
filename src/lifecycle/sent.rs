//! Creates a driver's view of a member may not show yet. A driver sees a member through a watch,
//! and a watch lags: a copy created a moment ago may not be in it. Absence in such a view is no
//! proof that the copy is gone, and taking it for proof lets a job run twice (its orphan
//! "confirmed gone" while the copy runs) or be taken back for a copy "deleted, not by muster".
//! So every create muster sends is marked here, per job and member, and absence counts only
//! from a view that has reached the version at which the create landed (a resourceVersion in
//! Kubernetes). A create whose landing is not known (refused, or its answer lost), or one the
//! view has not shown for a while, is settled by a fresh read of the member: the copy found at
//! a version, or not there at all. [`Marks::judge`] turns what the driver saw into what may be
//! believed: a job's copy absent from a view behind its create is [`Member::Behind`], neither
//! there nor gone.

use std::collections::BTreeMap;

use super::{Member, Ms, Seen};

/// How long a create may stay unshown by a view that answers before the driver reads the
/// member afresh (a copy deleted meanwhile leaves the view nothing to show at its version).
pub const REREAD: Ms = 3_000;

/// A create of a job's copy on a member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sent {
    /// When it was sent.
    pub at: Ms,
    /// The version of the member's store it landed at, or a fresh read found the copy at
    /// (None: not known yet: in flight, refused, or its answer lost).
    pub version: Option<u64>,
    /// When that was last learnt.
    read_at: Ms,
}

/// The creates not yet shown by the driver's view, by (job UID, member).
#[derive(Clone, Debug, Default)]
pub struct Marks {
    by: BTreeMap<(String, String), Sent>,
    /// The defect `absence-trusted`: nothing is judged.
    trusted: bool,
}

impl Marks {
    pub fn new(defect: Option<super::Defect>) -> Marks {
        Marks {
            by: BTreeMap::new(),
            trusted: defect == Some(super::Defect::AbsenceTrusted),
        }
    }

    /// A create of `uid`'s copy on `cluster` is being sent at `now`.
    pub fn sending(&mut self, uid: &str, cluster: &str, now: Ms) {
        self.by.insert(
            (uid.to_string(), cluster.to_string()),
            Sent {
                at: now,
                version: None,
                read_at: now,
            },
        );
    }

    /// The create landed at `version` (its answer). Only ever raises what is known.
    pub fn landed(&mut self, uid: &str, cluster: &str, version: u64, now: Ms) {
        if let Some(m) = self.by.get_mut(&(uid.to_string(), cluster.to_string())) {
            m.version = Some(m.version.map_or(version, |v| v.max(version)));
            m.read_at = now;
        }
    }

    /// A fresh read of the member at `now` (not from the view) found the copy at `version`,
    /// or found none (whatever was sent is not there: absence is believed).
    pub fn read(&mut self, uid: &str, cluster: &str, found: Option<u64>, now: Ms) {
        match found {
            Some(v) => self.landed(uid, cluster, v, now),
            None => {
                self.by.remove(&(uid.to_string(), cluster.to_string()));
            }
        }
    }

    /// The marks a fresh read of the member should settle at `now`: (job UID, member). Each
    /// whose landing is not known (a driver leaves out the creates still in flight), and each
    /// the view has not shown within [`REREAD`] of the last read.
    pub fn unsettled(&self, now: Ms) -> impl Iterator<Item = (&str, &str)> {
        self.by.iter().filter_map(move |((u, c), s)| {
            let due = s.version.is_none() || now >= s.read_at.saturating_add(REREAD);
            due.then_some((u.as_str(), c.as_str()))
        })
    }

    /// Creates out on `cluster`: sent, and not known to have landed.
    pub fn out_on(&self, cluster: &str) -> usize {
        self.by
            .iter()
            .filter(|((_, c), s)| c == cluster && s.version.is_none())
            .count()
    }

    /// Whether `uid`'s create on `cluster` is marked.
    #[cfg(test)]
    pub(crate) fn get(&self, uid: &str, cluster: &str) -> Option<Sent> {
        self.by
            .get(&(uid.to_string(), cluster.to_string()))
            .copied()
    }

    /// Forgets `uid` (no longer followed, and no copy of it held back).
    pub fn forget(&mut self, uid: &str) {
        let keys: Vec<(String, String)> = self
            .by
            .range((uid.to_string(), String::new())..)
            .take_while(|((u, _), _)| u == uid)
            .map(|(k, _)| k.clone())
            .collect();
        for k in keys {
            self.by.remove(&k);
        }
    }

    /// What of `seen` (for `uid`) may be believed: on a member whose view has not reached a
    /// create of the job's copy there, absence is [`Member::Behind`]. Marks a view has reached,
    /// or on a member removed from the fleet, are dropped.
    /// `here`: the member the job's record places it on.
    pub fn judge(&mut self, uid: &str, here: Option<&str>, seen: &mut Seen) {
        if self.trusted {
            return;
        }
        let versions = &seen.versions;
        let by = &mut self.by;
        let mut one = |c: &str, m: &mut Member| {
            let key = (uid.to_string(), c.to_string());
            let Some(sent) = by.get(&key).copied() else {
                return;
            };
            let reached = sent
                .version
                .is_some_and(|s| versions.get(c).is_some_and(|v| *v >= s));
            match m {
                Member::Removed => {
                    by.remove(&key);
                }
                Member::Answering(_) if reached => {
                    by.remove(&key);
                }
                Member::Answering(None) => {
                    *m = Member::Behind { since: sent.at };
                }
                _ => {}
            }
        };
        if let (Some(c), Some(m)) = (here, seen.here.as_mut()) {
            one(c, m);
        }
        for (c, m) in seen.orphans.iter_mut() {
            one(c, m);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lifecycle::Copy;

    fn seen(here: Option<Member>, versions: &[(&str, u64)]) -> Seen {
        Seen {
            now: 10_000,
            spec: String::new(),
            generation: None,
            hub: None,
            here,
            orphans: BTreeMap::new(),
            created: None,
            refused: None,
            versions: versions.iter().map(|(c, v)| (c.to_string(), *v)).collect(),
        }
    }

    fn copy() -> Copy {
        Copy {
            uid: "c".into(),
            progress: crate::lifecycle::Progress::Starting {
                scheduled: 0,
                running: 0,
            },
            live_pods: 0,
            expected: 1,
            pods_done: false,
            waiting: None,
        }
    }

    #[test]
    fn absence_counts_only_from_a_view_that_reached_the_create() {
        let mut m = Marks::new(None);
        m.sending("j", "a", 5_000);
        // In flight: absent is not gone.
        let mut s = seen(Some(Member::Answering(None)), &[("a", 100)]);
        m.judge("j", Some("a"), &mut s);
        assert_eq!(s.here, Some(Member::Behind { since: 5_000 }));
        // Landed at 120; the view is at 110: still behind.
        m.landed("j", "a", 120, 6_000);
        let mut s = seen(Some(Member::Answering(None)), &[("a", 110)]);
        m.judge("j", Some("a"), &mut s);
        assert_eq!(s.here, Some(Member::Behind { since: 5_000 }));
        // A copy seen is believed whatever the view's age, and the mark stays until reached.
        let mut s = seen(Some(Member::Answering(Some(copy()))), &[("a", 110)]);
        m.judge("j", Some("a"), &mut s);
        assert_eq!(s.here, Some(Member::Answering(Some(copy()))));
        assert!(m.get("j", "a").is_some());
        // The view reached it: absence is real, and the mark goes.
        let mut s = seen(Some(Member::Answering(None)), &[("a", 120)]);
        m.judge("j", Some("a"), &mut s);
        assert_eq!(s.here, Some(Member::Answering(None)));
        assert_eq!(m.get("j", "a"), None);
    }

    #[test]
    fn a_view_with_no_version_never_proves_absence_and_removal_drops_the_mark() {
        let mut m = Marks::new(None);
        m.sending("j", "a", 1_000);
        m.landed("j", "a", 7, 1_000);
        let mut s = seen(Some(Member::Answering(None)), &[]);
        m.judge("j", Some("a"), &mut s);
        assert_eq!(s.here, Some(Member::Behind { since: 1_000 }));
        let mut s = seen(Some(Member::Silent { since: 2_000 }), &[]);
        m.judge("j", Some("a"), &mut s);
        assert_eq!(s.here, Some(Member::Silent { since: 2_000 }));
        let mut s = seen(Some(Member::Removed), &[]);
        m.judge("j", Some("a"), &mut s);
        assert_eq!(m.get("j", "a"), None);
        assert_eq!(m.unsettled(0).count(), 0);
    }

    #[test]
    fn a_create_not_known_to_have_landed_is_read_afresh() {
        let mut m = Marks::new(None);
        m.sending("j", "a", 1_000);
        assert_eq!(m.unsettled(1_000).collect::<Vec<_>>(), [("j", "a")]);
        // Found at 9: read again only if the view has not shown it within REREAD.
        m.read("j", "a", Some(9), 1_500);
        assert_eq!(m.unsettled(1_500 + REREAD - 1).count(), 0);
        assert_eq!(m.unsettled(1_500 + REREAD).count(), 1);
        // Found no more: absence is believed.
        m.read("j", "a", None, 5_000);
        let mut s = seen(Some(Member::Answering(None)), &[]);
        m.judge("j", Some("a"), &mut s);
        assert_eq!(s.here, Some(Member::Answering(None)));
    }

    #[test]
    fn the_defect_trusts_absence() {
        let mut m = Marks::new(Some(crate::lifecycle::Defect::AbsenceTrusted));
        m.sending("j", "a", 1_000);
        let mut s = seen(Some(Member::Answering(None)), &[]);
        m.judge("j", Some("a"), &mut s);
        assert_eq!(s.here, Some(Member::Answering(None)));
    }

    /// A record of `phase` on member-a, admitted at 0 and (when placed) dispatched at 1 s.
    fn rec(phase: crate::lifecycle::Phase) -> crate::lifecycle::Record {
        use crate::lifecycle::Phase;
        crate::lifecycle::Record {
            phase,
            cluster: Some("a".into()),
            spec: "d".into(),
            admitted_at: Some(0),
            copy_uid: (phase != Phase::Admitted).then(|| "c".into()),
            dispatched_at: (phase != Phase::Admitted).then_some(1_000),
            ..Default::default()
        }
    }

    fn step_at(
        r: &crate::lifecycle::Record,
        here: Member,
        orphans: &[(&str, Member)],
        now: Ms,
    ) -> (crate::lifecycle::Record, Vec<crate::lifecycle::Intent>) {
        let s = Seen {
            now,
            spec: "d".into(),
            generation: None,
            hub: Some(r.clone()),
            here: Some(here),
            orphans: orphans
                .iter()
                .map(|(c, m)| (c.to_string(), m.clone()))
                .collect(),
            created: None,
            refused: None,
            versions: BTreeMap::new(),
        };
        let settings = crate::lifecycle::Settings {
            member_lost_grace: 60_000,
            ..Default::default()
        };
        crate::lifecycle::step(r, &s, &settings)
    }

    #[test]
    fn a_copy_behind_the_view_is_neither_created_again_nor_called_missing() {
        use crate::lifecycle::{Intent, Phase};
        let creates = |out: &[Intent]| out.iter().any(|i| matches!(i, Intent::Create { .. }));
        let requeued = |out: &[Intent]| out.iter().any(|i| matches!(i, Intent::Requeued(_)));
        // Admitted, its create out: not sent again.
        let r = rec(Phase::Admitted);
        let (n, out) = step_at(&r, Member::Behind { since: 500 }, &[], 2_000);
        assert_eq!(n.phase, Phase::Admitted);
        assert!(!creates(&out));
        // Dispatched, its copy not in the view yet: not missing, not taken back, even long
        // after the copy-missing grace.
        let r = rec(Phase::Dispatched);
        let (n, out) = step_at(&r, Member::Behind { since: 1_000 }, &[], 40_000);
        assert_eq!(n.phase, Phase::Dispatched);
        assert_eq!(n.missing_since, None);
        assert!(!requeued(&out));
        // Behind for the lost grace: as a member that does not answer, taken back, the copy an
        // orphan there.
        let (n, out) = step_at(&r, Member::Behind { since: 1_000 }, &[], 61_000);
        assert_eq!(n.phase, Phase::Queued);
        assert!(n.orphans.contains_key("a"));
        assert!(requeued(&out));
        // An old copy on a member whose view is behind holds back the create elsewhere, and
        // stays an orphan.
        let mut r = rec(Phase::Admitted);
        r.orphans.insert("b".into(), 1_000);
        let (n, out) = step_at(
            &r,
            Member::Answering(None),
            &[("b", Member::Behind { since: 1_000 })],
            2_000,
        );
        assert!(!creates(&out));
        assert!(n.orphans.contains_key("b"));
        assert!(n.reason.contains("does not show it yet"), "{}", n.reason);
    }
}
