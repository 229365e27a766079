//! Records someone else changed on the hub (`kubectl edit --subresource=status`, another
//! tool): a followed job whose QueuedJob the driver's view shows holding a record other than
//! the last one written, for four times the settle time (the view lags behind a write that
//! landed, and a watch that dropped relists within seconds, so a shorter difference is not
//! taken for a change). Such a job's record is
//! written again ([`crate::lifecycle::outbox::Outbox::doubt`]): its patch is made from what the
//! view shows and carries the resourceVersion precondition, so that a change made since the last
//! write is met by a conflict and the record made again from what is there. What the book
//! believes the hub holds (`written`, which the garbage collection trusts) is left as it is: a
//! view that lags shows an older record of the job's own, not a change.

use std::borrow::Cow;
use std::collections::BTreeSet;

use super::Book;
use crate::lifecycle::{Ms, Record};

impl Book {
    /// `shown` reads the record the view shows in a job's QueuedJob (None: none, or not this
    /// job's). Returns the followed jobs whose written record it has shown otherwise for four
    /// times the settle time (each once per such time while it does).
    pub fn drifted<'r>(
        &mut self,
        shown: impl Fn(&str) -> Option<Cow<'r, Record>>,
        now: Ms,
    ) -> Vec<String> {
        let settle = self.settings.record_settle.saturating_mul(4);
        if self
            .settings
            .defect
            .is_some_and(crate::lifecycle::Defect::trusts_belief)
        {
            return Vec::new();
        }
        // The words a driver shows may be composed otherwise than the record's own (the
        // controller shows a waiting job's summary): the reason is left out of the comparison.
        let differs: BTreeSet<String> = self
            .jobs
            .iter()
            .filter_map(|(u, e)| {
                let written = e.written.as_ref()?;
                let there = shown(u)?;
                let differs = if there.reason == written.reason {
                    *there != *written
                } else {
                    let mut there = there.into_owned();
                    there.reason.clone_from(&written.reason);
                    there != *written
                };
                differs.then(|| u.clone())
            })
            .collect();
        super::held_for(&mut self.drift, differs, now, settle)
    }
}
