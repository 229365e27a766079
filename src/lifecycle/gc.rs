//! Garbage collection of member copies, decided once for both drivers (the hub controller's
//! `controller::gc` and the fault simulation): which of the copies muster made, found on
//! members that answer, go. A copy of a hub job known deleted goes. A copy of a job muster
//! follows goes when the record the hub holds neither places the job on that member nor lists
//! the member as one it left (a create that landed after the job was taken back, a copy from
//! before the record was lost): the lifecycle owns every copy its record names. Nothing else is
//! touched: not a copy of a job muster does not follow whose hub job exists, nor one whose hub
//! job muster cannot see.

use super::{Book, Defect, Ms};

/// What the hub says of a copy's job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HubJob {
    /// It exists, under the UID the copy carries, and is not being deleted.
    Exists,
    /// Known deleted: absent from a synced store, there under another UID, or being deleted.
    Gone,
    /// Not known (a kind the hub does not serve, a watch not listed yet).
    Unknown,
}

/// A copy muster made (its origin, job UID and admission annotation), on a member that answers
/// and is in sync, not being deleted already.
#[derive(Clone, Debug)]
pub struct Found<'a> {
    pub job: &'a str,
    pub member: &'a str,
    pub hub: HubJob,
}

/// A copy to delete, and why (for the log and the Event).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Doomed {
    pub job: String,
    pub member: String,
    pub why: String,
}

/// The copies of `found` that go.
pub fn doomed<'a>(book: &Book, found: impl IntoIterator<Item = Found<'a>>) -> Vec<Doomed> {
    let defect = book.settings.defect;
    let mut out = Vec::new();
    for f in found {
        let why = match (book.get(f.job), f.hub) {
            (None, HubJob::Gone) => Some("the hub job was deleted".to_string()),
            (None, _) if defect == Some(Defect::CollectUnknown) => {
                Some("not followed (defect: collect-unknown)".to_string())
            }
            (None, _) => None,
            (Some(e), _) => e.written.as_ref().and_then(|w| {
                let named =
                    w.cluster.as_deref() == Some(f.member) || w.orphans.contains_key(f.member);
                (!named && defect != Some(Defect::StraysKept)).then(|| match &w.cluster {
                    Some(c) if w.holds() => {
                        format!("a stray copy: the job's record places it on {c}")
                    }
                    _ => "a stray copy: the job's record places it on no member".to_string(),
                })
            }),
        };
        if let Some(why) = why {
            out.push(Doomed {
                job: f.job.to_string(),
                member: f.member.to_string(),
                why,
            });
        }
    }
    out
}

/// A copy muster made, being deleted since `since` (Terminating), on a member that answers.
#[derive(Clone, Debug)]
pub struct Deleting {
    pub job: String,
    pub member: String,
    pub since: Ms,
}

/// Tells the book which copies of jobs it does not follow (their hub job deleted) are still
/// being deleted and may still run: they hold back creates for the drain grace, as the
/// followed jobs' old copies do ([`Book::deleting`]). A followed job's own copies are its
/// record's to account for.
pub fn deleting(book: &mut Book, found: impl IntoIterator<Item = Deleting>) {
    let list = found
        .into_iter()
        .filter(|d| book.get(&d.job).is_none())
        .map(|d| (d.member, d.since))
        .collect();
    book.deleting = list;
}
