//! The status reports of the quota tree (`ElasticQuotaTree.status`: usage per node) and of the
//! members (`MemberCluster.status`), written off the sync loop: at most one write per object in
//! flight, and one whose only news is figures (usage, free capacity) at most every
//! [`REPORT_EVERY`]. What landed is read by the next pass
//! ([`Reports::landed`]), and kept by the step that owns the object (`tree`, `membership`).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::crd::MANAGER;
use super::crd::{ElasticQuotaTree, ElasticQuotaTreeStatus, MemberCluster, MemberClusterStatus};
use super::ctx::{Core, Ctx, Inbox};

/// How often a report whose only news is figures is written.
pub(super) const REPORT_EVERY: Duration = Duration::from_secs(2);
/// How long one report write may take before it counts as failed.
const REPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// A status report to write.
pub(super) enum Report {
    Tree {
        namespace: String,
        name: String,
        status: ElasticQuotaTreeStatus,
    },
    Member {
        name: String,
        status: MemberClusterStatus,
    },
}

impl Report {
    fn key(&self) -> String {
        match self {
            Report::Tree {
                namespace, name, ..
            } => format!("tree {namespace}/{name}"),
            Report::Member { name, .. } => format!("member {name}"),
        }
    }
}

/// Reports under way, and when each object's last was sent.
#[derive(Default)]
pub(super) struct Reports {
    out: HashSet<String>,
    sent: HashMap<String, Instant>,
    ended: Inbox<(String, Report, Result<(), String>)>,
}

impl Reports {
    /// Sends `report` off the loop unless one for the same object is still out, or (when
    /// `urgent` is false) the last was sent less than [`REPORT_EVERY`] ago.
    pub(super) fn send(&mut self, ctx: &Ctx, core: &mut Core, report: Report, urgent: bool) {
        let key = report.key();
        if self.out.contains(&key) {
            // Its end wakes a pass, which sends what is new then.
            return;
        }
        if !urgent && let Some(t) = self.sent.get(&key).filter(|t| t.elapsed() < REPORT_EVERY) {
            // A pass comes when it is due, even if nothing else happens by then.
            let left = REPORT_EVERY.saturating_sub(t.elapsed()).as_millis() as u64;
            core.wake_at(super::clock::now_ms() + left);
            return;
        }
        self.out.insert(key.clone());
        self.sent.insert(key.clone(), Instant::now());
        let (hub, tx, wake) = (ctx.hub.clone(), self.ended.sender(), ctx.wake.clone());
        tokio::spawn(async move {
            let result = match tokio::time::timeout(REPORT_TIMEOUT, write(&hub, &report)).await {
                Ok(r) => r,
                Err(_) => Err(format!("no answer in {}s", REPORT_TIMEOUT.as_secs())),
            };
            let _ = tx.send((key, report, result));
            wake.notify_one();
        });
    }

    /// The reports whose write ended since the last call, each with what the hub now holds
    /// (None: the write failed, and is logged).
    pub(super) fn landed(&mut self) -> Vec<Report> {
        let mut out = Vec::new();
        for (key, report, result) in self.ended.drain() {
            self.out.remove(&key);
            match (report, result) {
                (report, Ok(())) => out.push(report),
                (Report::Tree { name, .. }, Err(e)) => {
                    tracing::warn!(tree = %name, error = %e, "could not write the quota tree status")
                }
                (Report::Member { name, .. }, Err(e)) => {
                    tracing::warn!(member = %name, error = %e, "could not write MemberCluster status")
                }
            }
        }
        out
    }
}

async fn write(hub: &kube::Client, report: &Report) -> Result<(), String> {
    let pp = PatchParams::apply(MANAGER).force();
    let r = match report {
        Report::Tree {
            namespace,
            name,
            status,
        } => {
            let api: Api<ElasticQuotaTree> = Api::namespaced(hub.clone(), namespace);
            let body = json!({
                "apiVersion": "scheduling.sigs.k8s.io/v1beta1", "kind": "ElasticQuotaTree",
                "status": status,
            });
            api.patch_status(name, &pp, &Patch::Apply(&body))
                .await
                .map(|_| ())
        }
        Report::Member { name, status } => {
            let api: Api<MemberCluster> = Api::all(hub.clone());
            let body = json!({
                "apiVersion": "muster.dev/v1alpha1", "kind": "MemberCluster", "status": status,
            });
            api.patch_status(name, &pp, &Patch::Apply(&body))
                .await
                .map(|_| ())
        }
    };
    r.map_err(|e| e.to_string())
}
