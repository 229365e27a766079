//! Start-time forecasts in the controller. Every `--estimate-interval-seconds` the core is copied
//! with every followed job's expected run time and run forward off the sync loop
//! ([`crate::forecast`]), one instant at a time until it ends or `--estimate-budget-ms` of wall
//! time has passed (then the jobs it has not seen start get a lower bound, `notBefore`); the
//! answers become each waiting job's `status.estimate` and the forecast metrics. Owns the
//! durable history of finished run times (the ConfigMap `muster-runtime-history` in the
//! controller's namespace), so that a restart keeps it.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::crd::StartEstimate;
use super::ctx::{Core, Ctx};
use super::jobs::HubJobs;
use crate::forecast::{self, Arrival, Estimates, Inputs, Start};
use crate::lifecycle::Ms;
use crate::metrics::QueueOutlook;
use crate::runtime::{self, Declared, History, Source};
use crate::scheduler::{JobId, JobState};

/// The ConfigMap that keeps the run-time history.
pub const HISTORY_CONFIGMAP: &str = "muster-runtime-history";
const HISTORY_KEY: &str = "history.json";
/// The history is written at most this often.
const HISTORY_WRITE_EVERY: Duration = Duration::from_secs(30);

/// The controller's forecasting state.
#[derive(Default)]
pub(super) struct Forecasts {
    /// The last forecast, per waiting job (uid).
    pub by_uid: HashMap<String, StartEstimate>,
    /// When the last forecast was made (ms since the epoch).
    pub made_at: Option<Ms>,
    task: Option<tokio::task::JoinHandle<Outcome>>,
    started: Option<Instant>,
    pub history: History,
    history_loaded: bool,
    history_dirty: bool,
    history_written: Option<Instant>,
}

struct Outcome {
    est: Estimates,
    jobs: Vec<(JobId, String)>,
    arrivals: Vec<String>,
    runtimes: HashMap<String, (Ms, Source)>,
    queues: HashMap<String, String>,
    now: Ms,
    took: Duration,
}

impl Forecasts {
    /// What a followed job declares about its run time, and its history key.
    fn declared(core: &Core, hubjobs: &HubJobs, uid: &str) -> Option<Declared> {
        let j = hubjobs.jobs.get(uid)?;
        let w = j.spec.0.as_ref().ok()?;
        let queue = core
            .book
            .get(uid)
            .and_then(|e| e.id)
            .map(|id| core.sched.queue_name(id).to_string())
            .or_else(|| j.queue.clone())
            .unwrap_or_default();
        Some(Declared {
            key: runtime::history_key(&queue, w),
            declared: runtime::declared(w).ok().flatten(),
            deadline: j.deadline,
        })
    }

    /// A followed job's expected run time and where it came from.
    pub(super) fn expected_runtime(
        &self,
        ctx: &Ctx,
        core: &Core,
        hubjobs: &HubJobs,
        uid: &str,
    ) -> (Ms, Source) {
        match Forecasts::declared(core, hubjobs, uid) {
            Some(d) => d.expected(&self.history, &ctx.opts.runtime_rules),
            None => (ctx.opts.runtime_rules.default, Source::Default),
        }
    }

    /// A job ran to success: its run time (admission to end) joins its queue × shape history.
    pub(super) fn record_run(&mut self, core: &Core, hubjobs: &HubJobs, uid: &str) {
        let Some(started) = core
            .book
            .get(uid)
            .and_then(|e| e.record.admitted_at.or(e.record.dispatched_at))
        else {
            return;
        };
        let Some(d) = Forecasts::declared(core, hubjobs, uid) else {
            return;
        };
        let ran = super::clock::now_ms().saturating_sub(started);
        self.history.record(&d.key, ran);
        self.history_dirty = true;
    }

    /// The forecasting step of a pass: read the history once, take a finished forecast in,
    /// keep the history durable, start the next forecast when due.
    pub(super) async fn forecast(&mut self, ctx: &Ctx, core: &Core, hubjobs: &HubJobs) {
        if !self.history_loaded {
            self.load_history(ctx).await;
        }
        if self.task.as_ref().is_some_and(|t| t.is_finished())
            && let Some(task) = self.task.take()
        {
            match task.await {
                Ok(o) => self.take_in(ctx, o),
                Err(e) => tracing::error!(error = %e, "the forecast failed"),
            }
        }
        if self.history_dirty
            && self
                .history_written
                .is_none_or(|t| t.elapsed() >= HISTORY_WRITE_EVERY)
        {
            self.save_history(ctx).await;
        }
        let every = ctx.opts.estimate_interval;
        let due = self.started.is_none_or(|t| t.elapsed() >= every);
        if every.is_zero() || self.task.is_some() || !due {
            return;
        }
        self.started = Some(Instant::now());
        let (inputs, jobs, arrivals, runtimes, queues) =
            self.forecast_inputs(ctx, core, hubjobs, super::clock::now_ms());
        let copy = core.sched.clone();
        let wake = ctx.wake.clone();
        let budget = ctx.opts.estimate_budget;
        self.task = Some(tokio::task::spawn_blocking(move || {
            let t = Instant::now();
            let est = forecast::forecast_within(copy, &inputs, budget, || t.elapsed());
            wake.notify_one();
            Outcome {
                est,
                jobs,
                arrivals,
                runtimes,
                queues,
                now: inputs.now,
                took: t.elapsed(),
            }
        }));
    }

    /// The forward run's inputs: every admitted job's expected end, every waiting job's run
    /// time, and the jobs in back-off as arrivals at its end.
    #[allow(clippy::type_complexity)]
    pub(super) fn forecast_inputs(
        &self,
        ctx: &Ctx,
        core: &Core,
        hubjobs: &HubJobs,
        now: Ms,
    ) -> (
        Inputs,
        Vec<(JobId, String)>,
        Vec<String>,
        HashMap<String, (Ms, Source)>,
        HashMap<String, String>,
    ) {
        let mut inputs = Inputs {
            now,
            default_runtime: ctx.opts.runtime_rules.default,
            ..Inputs::default()
        };
        let mut jobs = Vec::new();
        let mut arrivals = Vec::new();
        let mut runtimes = HashMap::new();
        let mut queues = HashMap::new();
        for (uid, e) in core.book.iter() {
            let (ms, source) = self.expected_runtime(ctx, core, hubjobs, uid);
            match e.id {
                Some(id) => {
                    queues.insert(uid.clone(), core.sched.queue_name(id).to_string());
                    match core.sched.state(id) {
                        JobState::Admitted { .. } => {
                            let started = e.record.admitted_at.unwrap_or(now);
                            let left = runtime::remaining(started, ms, now);
                            inputs.ends.insert(id, now.saturating_add(left));
                            // Run again in full if preempted in the forecast.
                            inputs.runtimes.insert(id, ms);
                        }
                        JobState::Pending | JobState::Inadmissible(_) => {
                            inputs.runtimes.insert(id, ms);
                            runtimes.insert(uid.clone(), (ms, source));
                            jobs.push((id, uid.clone()));
                        }
                        JobState::Finished => {}
                    }
                }
                None => {
                    let (Some(until), Some(j)) = (e.record.backoff_until, hubjobs.jobs.get(uid))
                    else {
                        continue;
                    };
                    let Ok(w) = &j.spec.0 else { continue };
                    inputs.arrivals.push(Arrival {
                        workload: w.clone(),
                        at: until,
                        runtime: ms,
                    });
                    if let Some(q) = &j.queue {
                        queues.insert(uid.clone(), q.clone());
                    }
                    runtimes.insert(uid.clone(), (ms, source));
                    arrivals.push(uid.clone());
                }
            }
        }
        (inputs, jobs, arrivals, runtimes, queues)
    }

    fn take_in(&mut self, ctx: &Ctx, o: Outcome) {
        let mut by_uid = HashMap::new();
        let mut per_queue: BTreeMap<String, QueueOutlook> = BTreeMap::new();
        let answers = o
            .jobs
            .iter()
            .filter_map(|(id, uid)| Some((uid, o.est.get(*id)?)))
            .chain(o.arrivals.iter().zip(o.est.arrivals.iter()));
        for (uid, start) in answers {
            let (ms, source) = o.runtimes.get(uid).copied().unwrap_or_default();
            let q = per_queue
                .entry(o.queues.get(uid).cloned().unwrap_or_default())
                .or_default();
            let e = estimate_of(start, (ms, source), o.now, q);
            by_uid.insert(uid.clone(), e);
        }
        tracing::debug!(
            jobs = by_uid.len(),
            instants = o.est.instants,
            cycles = o.est.cycles,
            stopped = o.est.stopped,
            reached_s = o.est.reached.saturating_sub(o.now) / 1000,
            took_ms = o.took.as_millis() as u64,
            "forecast made"
        );
        ctx.metrics.forecast(&per_queue, o.took.as_secs_f64());
        self.by_uid = by_uid;
        self.made_at = Some(o.now);
    }

    async fn load_history(&mut self, ctx: &Ctx) {
        let api: Api<ConfigMap> = Api::namespaced(ctx.hub.clone(), &ctx.opts.namespace);
        match api.get_opt(HISTORY_CONFIGMAP).await {
            Ok(cm) => {
                let text = cm
                    .as_ref()
                    .and_then(|c| c.data.as_ref())
                    .and_then(|d| d.get(HISTORY_KEY));
                if let Some(text) = text {
                    match serde_json::from_str::<History>(text) {
                        Ok(h) => self.history = h,
                        Err(e) => tracing::warn!(
                            configmap = HISTORY_CONFIGMAP,
                            field = HISTORY_KEY,
                            error = %e,
                            "run-time history unreadable; starting a new one"
                        ),
                    }
                }
                self.history_loaded = true;
            }
            Err(e) => {
                tracing::warn!(configmap = HISTORY_CONFIGMAP, error = %e, "cannot read the run-time history; trying again next pass");
            }
        }
    }

    async fn save_history(&mut self, ctx: &Ctx) {
        if !ctx.leadership.is_leader() {
            return;
        }
        let text = match serde_json::to_string(&self.history) {
            Ok(t) => t,
            Err(e) => {
                tracing::error!(error = %e, "cannot serialise the run-time history");
                return;
            }
        };
        let api: Api<ConfigMap> = Api::namespaced(ctx.hub.clone(), &ctx.opts.namespace);
        let cm = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": HISTORY_CONFIGMAP,
                "labels": {"app.kubernetes.io/managed-by": "muster"}},
            "data": {HISTORY_KEY: text},
        });
        let pp = PatchParams::apply("muster").force();
        self.history_written = Some(Instant::now());
        match api.patch(HISTORY_CONFIGMAP, &pp, &Patch::Apply(&cm)).await {
            Ok(_) => self.history_dirty = false,
            Err(e) => {
                tracing::warn!(configmap = HISTORY_CONFIGMAP, error = %e, "cannot write the run-time history")
            }
        }
    }

    /// The estimate to write for a waiting job: the last forecast's, unless the one already
    /// written says the same within a tolerance (same member and reason, start within 30 s or a
    /// tenth of the wait), so that a forecast does not rewrite every status.
    pub(super) fn estimate_for(
        &self,
        uid: &str,
        written: Option<&StartEstimate>,
    ) -> Option<StartEstimate> {
        let new = self.by_uid.get(uid)?;
        let (Some(old), Some(now)) = (written, self.made_at) else {
            return Some(new.clone());
        };
        let at = |e: &StartEstimate| {
            e.start
                .as_deref()
                .or(e.not_before.as_deref())
                .and_then(|s| s.parse::<jiff::Timestamp>().ok())
                .map(|t| t.as_millisecond().max(0) as u64)
        };
        let close = match (at(old), at(new)) {
            (Some(a), Some(b)) => {
                let wait = b.saturating_sub(now);
                a.abs_diff(b) <= (wait / 10).max(30_000)
            }
            (None, None) => true,
            _ => false,
        };
        let same_rest = old.cluster == new.cluster
            && old.after == new.after
            && old.never == new.never
            && old.not_before.is_some() == new.not_before.is_some()
            && old.runtime == new.runtime
            && old.runtime_source == new.runtime_source;
        Some(if close && same_rest {
            old.clone()
        } else {
            new.clone()
        })
    }
}

/// A job's forecast as its `status.estimate` says it, counted into its queue's outlook.
fn estimate_of(
    start: &Start,
    (ms, source): (Ms, Source),
    now: Ms,
    q: &mut QueueOutlook,
) -> StartEstimate {
    let mut e = StartEstimate {
        runtime: Some(crate::sim::format_duration(ms)),
        runtime_source: Some(source.as_str().to_string()),
        ..StartEstimate::default()
    };
    match start {
        Start::At {
            at,
            cluster,
            after,
            more,
        } => {
            e.start = Some(timestamp(*at));
            e.cluster = Some(cluster.clone());
            e.after = after.clone();
            if *more > 0 {
                e.after.push(format!("+{more} more"));
            }
            q.waits.push(at.saturating_sub(now) / 1000);
        }
        Start::Never(why) => {
            e.never = Some(why.clone());
            q.never += 1;
        }
        Start::NotBefore { at } => {
            e.not_before = Some(timestamp(*at));
            q.not_before += 1;
        }
    }
    e
}

/// Milliseconds since the epoch as RFC 3339 (seconds).
fn timestamp(ms: Ms) -> String {
    let secs = i64::try_from(ms / 1000).unwrap_or(i64::MAX);
    jiff::Timestamp::from_second(secs)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lower_bound_is_written_as_not_before_and_counted_apart() {
        let mut q = QueueOutlook::default();
        let now = 1_800_000_000_000;
        let e = estimate_of(
            &Start::NotBefore {
                at: now + 7_200_000,
            },
            (1_800_000, Source::Declared),
            now,
            &mut q,
        );
        assert_eq!(e.start, None);
        assert_eq!(e.never, None);
        assert_eq!(e.not_before, Some(timestamp(now + 7_200_000)));
        assert_eq!(e.runtime.as_deref(), Some("30m"));
        let at = estimate_of(
            &Start::At {
                at: now + 60_000,
                cluster: "m1".into(),
                after: vec![],
                more: 0,
            },
            (1_800_000, Source::Declared),
            now,
            &mut q,
        );
        assert_eq!((at.start.is_some(), at.not_before), (true, None));
        // The bound is not a wait: the wait quantiles see only the start.
        assert_eq!((q.waits, q.never, q.not_before), (vec![60], 0, 1));
    }

    #[test]
    fn a_bound_replaces_a_start_and_a_close_bound_is_not_rewritten() {
        let now = 1_800_000_000_000;
        let mut f = Forecasts {
            made_at: Some(now),
            ..Forecasts::default()
        };
        let start = StartEstimate {
            start: Some(timestamp(now + 3_600_000)),
            cluster: Some("m1".into()),
            ..StartEstimate::default()
        };
        let bound = |at| StartEstimate {
            not_before: Some(timestamp(at)),
            ..StartEstimate::default()
        };
        f.by_uid.insert("u".into(), bound(now + 3_600_000));
        // A start that the next forecast only bounds: rewritten, even at the same time.
        assert_eq!(
            f.estimate_for("u", Some(&start)),
            Some(bound(now + 3_600_000))
        );
        // A bound that moved by less than a tenth of the wait: kept as written.
        let written = bound(now + 3_610_000);
        assert_eq!(f.estimate_for("u", Some(&written)), Some(written.clone()));
        // One that moved by more: rewritten.
        let far = bound(now + 5_000_000);
        assert_eq!(
            f.estimate_for("u", Some(&far)),
            Some(bound(now + 3_600_000))
        );
    }
}
