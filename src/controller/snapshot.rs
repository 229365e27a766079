//! Snapshots: the controller's live state as a `muster sim` scenario, served at `/snapshot` on
//! the loopback snapshot listener (`http`) and read by `muster snapshot` / `muster what-if`
//! (`snapshot_fetch`). The members as the core knows them (nodes, what other pods use, which do
//! not answer), the quota tree in force, the PriorityClasses, and every followed job: running
//! ones on their member as planned for their remaining expected time, waiting ones in their
//! queue order, jobs in back-off arriving when it ends. Each job's run time is the controller's
//! expectation, written as its `runFor` and its `muster.dev/expected-runtime`, so that the
//! simulated forecast is the controller's.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

pub use super::snapshot_fetch::{Live, fetch};

use super::ctx::{Core, Ctx};
use super::forecasting::Forecasts;
use super::jobs::HubJobs;
use super::jobs::typed;
use super::membership::Fleet;
use super::tree::Tree;
use crate::runtime::{self, ANNOTATION};
use crate::scheduler::JobState;
use crate::sim::{ClusterSpec, JobSpec, NodeSpec, RunningSpec, Scenario, format_duration};

/// A request for a snapshot: the YAML text, or why there is none.
pub type Ask = oneshot::Sender<Result<String, String>>;

/// Answers every snapshot asked for since the last pass.
pub(super) fn answer(
    snapshots: &mut Option<mpsc::Receiver<Ask>>,
    scenario: impl FnOnce() -> Scenario,
) {
    let Some(rx) = snapshots.as_mut() else {
        return;
    };
    let mut asks = Vec::new();
    while let Ok(a) = rx.try_recv() {
        asks.push(a);
    }
    if asks.is_empty() {
        return;
    }
    let text = serde_yaml::to_string(&scenario()).map_err(|e| e.to_string());
    for a in asks {
        let _ = a.send(text.clone());
    }
}

/// The live state as a scenario starting now.
pub(super) fn scenario(
    ctx: &Ctx,
    core: &Core,
    (fleet, hubjobs, forecasts, tree): (&Fleet, &HubJobs, &Forecasts, &Tree),
) -> Scenario {
    let now = super::clock::now_ms();
    let mut clusters: Vec<ClusterSpec> = fleet
        .told_nodes
        .values()
        .map(|c| {
            let usage = fleet.told_usage.get(&c.name);
            ClusterSpec {
                name: c.name.clone(),
                labels: c.labels.clone(),
                nodes: c
                    .nodes
                    .iter()
                    .map(|n| NodeSpec {
                        name: n.name.clone(),
                        count: 1,
                        allocatable: n.allocatable.clone(),
                        labels: n.labels.clone(),
                        taints: n.taints.clone(),
                        unschedulable: n.unschedulable || !n.ready,
                        used: usage
                            .and_then(|u| u.get(&n.name))
                            .cloned()
                            .unwrap_or_default(),
                    })
                    .collect(),
                placement: c.placement,
                reachable: fleet.told_reachable.get(&c.name).copied().unwrap_or(true),
                serves: c.serves.clone(),
                topology: c.topology.clone(),
            }
        })
        .collect();
    clusters.sort_by(|a, b| a.name.cmp(&b.name));
    // Running first, then waiting in queue order (priority is the core's; among equals,
    // submission order, which the file order keeps), then back-off arrivals.
    let mut running = Vec::new();
    let mut waiting: Vec<(u64, String, JobSpec)> = Vec::new();
    let mut later = Vec::new();
    for (uid, e) in core.book.iter() {
        let Some(j) = hubjobs.jobs.get(uid) else {
            continue;
        };
        if j.gone || j.spec.0.is_err() {
            continue;
        }
        let Some(obj) = ctx.stores.job(j.kind, &j.namespace, &j.name) else {
            continue;
        };
        let Ok(mut manifest) = serde_json::to_value(obj.as_ref()) else {
            continue;
        };
        typed(&mut manifest, j.kind);
        if let Some(m) = manifest.as_object_mut() {
            m.remove("status");
        }
        if let Some(md) = manifest.get_mut("metadata").and_then(Value::as_object_mut) {
            for k in ["managedFields", "resourceVersion", "generation", "uid"] {
                md.remove(k);
            }
        }
        let (expected, _) = forecasts.expected_runtime(ctx, core, hubjobs, uid);
        let declare = |m: &mut Value, ms: u64| {
            if let Some(md) = m.get_mut("metadata").and_then(Value::as_object_mut) {
                let ann = md.entry("annotations").or_insert_with(|| json!({}));
                if let Some(a) = ann.as_object_mut() {
                    a.insert(ANNOTATION.into(), json!(format_duration(ms)));
                }
            }
        };
        match (e.id.map(|id| core.sched.state(id)), e.record.backoff_until) {
            (Some(JobState::Admitted { .. }), _) => {
                let Some(id) = e.id else { continue };
                let Some((cluster, plan)) = core.sched.plan(id) else {
                    continue;
                };
                let started = e.record.admitted_at.unwrap_or(now);
                let left = runtime::remaining(started, expected, now);
                declare(&mut manifest, left);
                running.push(JobSpec {
                    at: 0,
                    run_for: left,
                    running: Some(RunningSpec {
                        cluster: cluster.to_string(),
                        placement: plan,
                    }),
                    manifest: manifest.into(),
                });
            }
            (Some(JobState::Pending | JobState::Inadmissible(_)), _) => {
                declare(&mut manifest, expected);
                waiting.push((
                    e.submitted,
                    uid.clone(),
                    JobSpec {
                        at: 0,
                        run_for: expected,
                        running: None,
                        manifest: manifest.into(),
                    },
                ));
            }
            (None, Some(until)) => {
                declare(&mut manifest, expected);
                later.push(JobSpec {
                    at: until.saturating_sub(now),
                    run_for: expected,
                    running: None,
                    manifest: manifest.into(),
                });
            }
            _ => {}
        }
    }
    waiting.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    let mut jobs = running;
    jobs.extend(waiting.into_iter().map(|(_, _, j)| j));
    later.sort_by_key(|j| j.at);
    jobs.extend(later);
    Scenario {
        clusters,
        quota: tree.manifest.clone(),
        priority_classes: hubjobs
            .priorities
            .clone()
            .into_iter()
            .collect::<BTreeMap<_, _>>(),
        jobs,
        runtimes: hubjobs.runtimes.objects(),
        changes: Vec::new(),
    }
}
