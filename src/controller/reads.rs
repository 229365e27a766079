//! Fresh reads of members for creates their views have not shown (the core's
//! `lifecycle::sent`). A create that failed or whose answer was lost, or one a member's watch
//! has not shown for a while, is settled by listing the job's copies on that member by muster's
//! UID label (a read of the API server, not of the watch): found at a resourceVersion, or not
//! there. One read per create at a time, off the sync loop; results are read at the start of the
//! next pass. Decides nothing.

use std::time::Duration;

use kube::Client;
use kube::api::{Api, DynamicObject, ListParams};

use std::collections::BTreeSet;

use super::clock::now_ms;
use super::ctx::{Core, Ctx, Inbox};
use super::jobs::HubJobs;
use super::kinds;
use super::members::JOB_UID_LABEL;
use super::membership::Fleet;
use crate::workload::JobKind;

/// How long one read may take.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Fresh reads under way, and their outcomes.
#[derive(Default)]
pub(super) struct Reads {
    /// Reads under way: (job, member).
    reading: BTreeSet<(String, String)>,
    /// (job, member, the version the copy was found at, None when there is none; Err when the
    /// member could not be read).
    ended: Inbox<(String, String, Result<Option<u64>, String>)>,
}

impl Reads {
    /// Starts a read for every create the core wants settled, except those still in flight or
    /// being read, on members that answer.
    pub(super) fn settle_sent(
        &mut self,
        ctx: &Ctx,
        core: &Core,
        (fleet, hubjobs): (&Fleet, &HubJobs),
        in_flight: &BTreeSet<(String, String)>,
    ) {
        let now = now_ms();
        let due: Vec<(String, String)> = core
            .book
            .sent
            .unsettled(now)
            .map(|(u, c)| (u.to_string(), c.to_string()))
            .filter(|k| !in_flight.contains(k) && !self.reading.contains(k))
            .collect();
        for (uid, cluster) in due {
            if !fleet.answering(&cluster) {
                continue;
            }
            let Some(m) = fleet.members.get(&cluster) else {
                continue;
            };
            // The job's kind; for a job known only from its record, every kind watched there.
            let kinds: Vec<JobKind> = match hubjobs.jobs.get(&uid) {
                Some(j) => vec![j.kind],
                None => m.jobs.keys().copied().collect(),
            };
            let (client, tx, wake) = (m.client.clone(), self.ended.sender(), ctx.wake.clone());
            self.reading.insert((uid.clone(), cluster.clone()));
            tokio::spawn(async move {
                let found = read(&client, &kinds, &uid).await;
                let _ = tx.send((uid, cluster, found));
                wake.notify_one();
            });
        }
    }

    /// The reads that finished since the last pass: what each found settles its create (a
    /// failed read is tried again).
    pub(super) fn landed(&mut self, core: &mut Core) {
        for (uid, cluster, found) in self.ended.drain() {
            self.read_done(core, uid, cluster, found);
        }
    }

    fn read_done(
        &mut self,
        core: &mut Core,
        uid: String,
        cluster: String,
        found: Result<Option<u64>, String>,
    ) {
        self.reading.remove(&(uid.clone(), cluster.clone()));
        match found {
            Ok(found) => core.book.sent.read(&uid, &cluster, found, now_ms()),
            Err(e) => {
                tracing::debug!(job = %uid, %cluster, error = %e, "could not read the member for a copy it does not show yet; tried again")
            }
        }
    }
}

/// The highest resourceVersion among the copies of hub job `uid` of `kinds` on the member
/// (None: there is none).
async fn read(client: &Client, kinds: &[JobKind], uid: &str) -> Result<Option<u64>, String> {
    let lp = ListParams::default().labels(&format!("{JOB_UID_LABEL}={uid}"));
    let mut found: Option<u64> = None;
    for kind in kinds {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &kinds::api_resource(*kind));
        let list = tokio::time::timeout(READ_TIMEOUT, api.list_metadata(&lp))
            .await
            .map_err(|_| format!("listing {kind} timed out"))?
            .map_err(|e| e.to_string())?;
        for o in list.items {
            let v = o
                .metadata
                .resource_version
                .as_deref()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
            found = Some(found.map_or(v, |f| f.max(v)));
        }
    }
    Ok(found)
}
