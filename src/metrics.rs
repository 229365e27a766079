//! Prometheus metrics of a muster driver: queue depth, quota, member capacity, decision counters,
//! wait and cycle-time histograms.
//!
//! Owns one `prometheus::Registry` and the names, labels, help texts and buckets of every muster
//! metric. Drivers (the simulator, the hub controller) count what they do with the counter
//! methods, call [`Metrics::observe`] to refresh the gauges from the scheduling core, and serve
//! or write [`Metrics::encode`]. No I/O and no clock: times arrive as seconds from the driver
//! (virtual seconds in the simulator). Quantities are exact milli-units in the core and become
//! `f64` in base units (cpu in cores, memory in bytes) only here. Labels are bounded: queues,
//! tree nodes, clusters, resources, priorities and small fixed reason sets; never job names.

use std::sync::Mutex;

use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry, TextEncoder,
};

use crate::scheduler::Scheduler;

/// Why a job was taken back (`reason` of `muster_requeued_jobs_total`): the lifecycle's own reasons.
pub use crate::lifecycle::RequeueReason;

/// How a job ended (`outcome` of `muster_finished_jobs_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    Succeeded,
    Failed,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::Failed => "failed",
        }
    }
}

/// Why creating an admitted job in its member failed (`reason` of
/// `muster_dispatch_errors_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DispatchFailure {
    /// The member's API server did not answer (connection, timeout).
    Unreachable,
    /// The member refused the object (validation, admission webhook, missing CRD, forbidden).
    Refused,
    /// An object of that name exists in the member and is not muster's.
    Conflict,
    Other,
}

impl DispatchFailure {
    pub fn as_str(self) -> &'static str {
        match self {
            DispatchFailure::Unreachable => "unreachable",
            DispatchFailure::Refused => "refused",
            DispatchFailure::Conflict => "conflict",
            DispatchFailure::Other => "other",
        }
    }
}

/// Buckets of `muster_admission_wait_time_seconds`: a second to a day.
const WAIT_BUCKETS: &[f64] = &[
    1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0, 14400.0,
    28800.0, 86400.0,
];

/// Buckets of `muster_admission_cycle_duration_seconds`: 100 µs to 10 s.
const CYCLE_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// What one forecast says of a queue's waiting jobs, for its metrics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueOutlook {
    /// Seconds from now to each expected start.
    pub waits: Vec<u64>,
    /// Jobs not expected to start while the known jobs run.
    pub never: i64,
    /// Jobs the forecast stopped before it saw start (a lower bound only).
    pub not_before: i64,
}

/// Every muster metric, in one registry of its own.
pub struct Metrics {
    registry: Registry,
    /// Held while gauges are refreshed and while the registry is gathered, so that a scrape
    /// never sees gauges half refreshed.
    gauges: Mutex<()>,
    pending: IntGaugeVec,
    admitted_active: IntGaugeVec,
    quota_min: prometheus::GaugeVec,
    quota_max: prometheus::GaugeVec,
    quota_used: prometheus::GaugeVec,
    quota_share: prometheus::GaugeVec,
    quota_weight: prometheus::GaugeVec,
    quota_fair_share: prometheus::GaugeVec,
    cluster_allocatable: prometheus::GaugeVec,
    cluster_free: prometheus::GaugeVec,
    cluster_largest_free: prometheus::GaugeVec,
    topology_domains: IntGaugeVec,
    topology_largest_free: prometheus::GaugeVec,
    cluster_reachable: IntGaugeVec,
    cluster_nodes: IntGaugeVec,
    cluster_schedulable_nodes: IntGaugeVec,
    maybe_twice: IntGaugeVec,
    submitted: IntCounterVec,
    admitted: IntCounterVec,
    dispatched: IntCounterVec,
    preempted: IntCounterVec,
    requeued: IntCounterVec,
    rejected: IntCounterVec,
    finished: IntCounterVec,
    dispatch_errors: IntCounterVec,
    pods_released: IntCounterVec,
    placement_mismatches: IntCounterVec,
    wait_time: HistogramVec,
    cycle_duration: Histogram,
    pass_duration: Histogram,
    estimated_wait: IntGaugeVec,
    not_expected: IntGaugeVec,
    beyond_forecast: IntGaugeVec,
    forecast_duration: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

/// Milli-units as base units (cores, bytes, GPUs, pods).
fn base(milli: i128) -> f64 {
    milli as f64 / 1000.0
}

impl Metrics {
    pub fn new() -> Metrics {
        let registry = Registry::new();
        // Names, labels and buckets are constants of this file: registering them cannot fail
        // unless this file is wrong, which every test would show.
        fn reg<C: prometheus::core::Collector + Clone + 'static>(r: &Registry, c: C) -> C {
            r.register(Box::new(c.clone()))
                .expect("muster metric definitions are valid and unique");
            c
        }
        let int_gauge = |name: &str, help: &str, labels: &[&str]| {
            reg(
                &registry,
                IntGaugeVec::new(Opts::new(name, help), labels).expect("valid gauge"),
            )
        };
        let gauge = |name: &str, help: &str, labels: &[&str]| {
            reg(
                &registry,
                prometheus::GaugeVec::new(Opts::new(name, help), labels).expect("valid gauge"),
            )
        };
        let counter = |name: &str, help: &str, labels: &[&str]| {
            reg(
                &registry,
                IntCounterVec::new(Opts::new(name, help), labels).expect("valid counter"),
            )
        };
        Metrics {
            pending: int_gauge(
                "muster_pending_jobs",
                "Jobs waiting in a queue, by priority; status is pending (waits for quota or capacity) or inadmissible (can never run as written).",
                &["queue", "priority", "status"],
            ),
            admitted_active: int_gauge(
                "muster_admitted_active_jobs",
                "Jobs admitted from a queue to a member cluster and not finished.",
                &["queue", "cluster"],
            ),
            quota_min: gauge(
                "muster_quota_min",
                "Guaranteed amount of a resource at a quota tree node (base units: cores, bytes, devices).",
                &["node", "resource"],
            ),
            quota_max: gauge(
                "muster_quota_max",
                "Ceiling of a resource at a quota tree node; absent when not limited there.",
                &["node", "resource"],
            ),
            quota_used: gauge(
                "muster_quota_used",
                "Amount of a resource charged to a quota tree node by admitted jobs of its subtree.",
                &["node", "resource"],
            ),
            quota_share: gauge(
                "muster_quota_share",
                "Weighted dominant share of what a quota tree node borrows from its parent (fair sharing among siblings: the lowest goes first; 0 within its min).",
                &["node"],
            ),
            quota_weight: gauge(
                "muster_quota_weight",
                "Weight of a quota tree node in fair sharing among its siblings (muster.dev/fair-sharing-weight, default 1).",
                &["node"],
            ),
            quota_fair_share: gauge(
                "muster_quota_fair_share",
                "Fair share of a quota tree node among its active siblings (those borrowing or with jobs waiting): 1 over the sum of their weights; absent when not active.",
                &["node"],
            ),
            cluster_allocatable: gauge(
                "muster_cluster_allocatable",
                "Allocatable amount of a resource summed over a member cluster's nodes.",
                &["cluster", "resource"],
            ),
            cluster_free: gauge(
                "muster_cluster_free",
                "Free amount of a resource summed over a member's nodes that take pods (allocatable minus pods muster does not manage minus reservations).",
                &["cluster", "resource"],
            ),
            cluster_largest_free: gauge(
                "muster_cluster_largest_free",
                "The most free of a resource on any one node of a member that takes pods: the largest block one pod can get (fragmentation).",
                &["cluster", "resource"],
            ),
            topology_domains: int_gauge(
                "muster_cluster_topology_domains",
                "Topology domains of a member at one level of its spec.topology (a rack is counted inside its block; nodes without the level's label are in none).",
                &["cluster", "level"],
            ),
            topology_largest_free: gauge(
                "muster_cluster_topology_largest_free",
                "The most free of a resource in any one topology domain of a level, over its nodes that take pods: the largest gang a job that requires that level can get.",
                &["cluster", "level", "resource"],
            ),
            cluster_reachable: int_gauge(
                "muster_cluster_reachable",
                "1 when the member cluster answers and may receive jobs, else 0.",
                &["cluster"],
            ),
            cluster_nodes: int_gauge(
                "muster_cluster_nodes",
                "Nodes of a member cluster.",
                &["cluster"],
            ),
            cluster_schedulable_nodes: int_gauge(
                "muster_cluster_schedulable_nodes",
                "Nodes of a member cluster that take new pods (neither unschedulable nor NotReady).",
                &["cluster"],
            ),
            maybe_twice: int_gauge(
                "muster_jobs_maybe_running_twice",
                "Jobs placed again (or waiting) while a member that does not answer may still run an old copy (partition policy Replace), per silent member.",
                &["cluster"],
            ),
            submitted: counter(
                "muster_submitted_jobs_total",
                "Jobs that entered a queue (queued or inadmissible at submission).",
                &["queue"],
            ),
            admitted: counter(
                "muster_admitted_jobs_total",
                "Admissions: the scheduler reserved quota and nodes of a member for a job.",
                &["queue", "cluster"],
            ),
            dispatched: counter(
                "muster_dispatched_jobs_total",
                "Admitted jobs created in their member cluster.",
                &["queue", "cluster"],
            ),
            preempted: counter(
                "muster_preempted_jobs_total",
                "Jobs taken back from a member cluster to reclaim guaranteed quota.",
                &["queue", "cluster"],
            ),
            requeued: counter(
                "muster_requeued_jobs_total",
                "Admitted jobs put back in their queue, by reason (stuck_pods, pods_lost, member_lost, preempted).",
                &["queue", "reason"],
            ),
            rejected: counter(
                "muster_rejected_jobs_total",
                "Jobs muster cannot read (unknown kind, malformed manifest).",
                &["queue"],
            ),
            finished: counter(
                "muster_finished_jobs_total",
                "Dispatched jobs that ended, by outcome (succeeded, failed).",
                &["queue", "cluster", "outcome"],
            ),
            dispatch_errors: counter(
                "muster_dispatch_errors_total",
                "Failed attempts to create an admitted job in its member, by reason (unreachable, refused, conflict, other).",
                &["cluster", "reason"],
            ),
            pods_released: counter(
                "muster_pods_released_total",
                "Pods muster assigned their planned node and released from its scheduling gate, per member.",
                &["cluster"],
            ),
            placement_mismatches: counter(
                "muster_placement_mismatches_total",
                "Pods found on a node their job's plan does not hold for them (an error: the member placed them elsewhere), per member.",
                &["cluster"],
            ),
            wait_time: reg(
                &registry,
                HistogramVec::new(
                    HistogramOpts::new(
                        "muster_admission_wait_time_seconds",
                        "Time from a job entering its queue (submitted or requeued) to its admission.",
                    )
                    .buckets(WAIT_BUCKETS.to_vec()),
                    &["queue"],
                )
                .expect("valid histogram"),
            ),
            cycle_duration: reg(
                &registry,
                Histogram::with_opts(
                    HistogramOpts::new(
                        "muster_admission_cycle_duration_seconds",
                        "Wall time of one admission cycle of the scheduling core.",
                    )
                    .buckets(CYCLE_BUCKETS.to_vec()),
                )
                .expect("valid histogram"),
            ),
            pass_duration: reg(
                &registry,
                Histogram::with_opts(
                    HistogramOpts::new(
                        "muster_sync_pass_duration_seconds",
                        "Wall time of one pass of the controller over every followed job (observe, step, one admission cycle, act, report); its count is the passes made.",
                    )
                    .buckets(CYCLE_BUCKETS.to_vec()),
                )
                .expect("valid histogram"),
            ),
            estimated_wait: int_gauge(
                "muster_estimated_wait_seconds",
                "Forecast time from now until waiting jobs start, per queue: the median (quantile 0.5), 90th percentile and longest of the jobs expected to start.",
                &["queue", "quantile"],
            ),
            not_expected: int_gauge(
                "muster_jobs_not_expected_to_start",
                "Waiting jobs the forecast does not see start while the known jobs run (inadmissible, or no capacity frees up), per queue.",
                &["queue"],
            ),
            beyond_forecast: int_gauge(
                "muster_jobs_beyond_forecast",
                "Waiting jobs the last forecast stopped before it saw start (its time budget, --estimate-budget-ms), per queue: their estimate is a lower bound (notBefore), not in muster_estimated_wait_seconds.",
                &["queue"],
            ),
            forecast_duration: reg(
                &registry,
                Histogram::with_opts(
                    HistogramOpts::new(
                        "muster_forecast_duration_seconds",
                        "Wall time of one start-time forecast (the core copied and run forward).",
                    )
                    .buckets(CYCLE_BUCKETS.to_vec()),
                )
                .expect("valid histogram"),
            ),
            gauges: Mutex::new(()),
            registry,
        }
    }

    /// The registry, for a driver that adds collectors of its own.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The Prometheus text exposition (format 0.0.4) of every metric that has samples.
    pub fn encode(&self) -> String {
        let families = {
            let _g = self.gauges.lock().unwrap_or_else(|e| e.into_inner());
            self.registry.gather()
        };
        TextEncoder::new()
            .encode_to_string(&families)
            .unwrap_or_else(|e| format!("# muster: cannot encode metrics: {e}\n"))
    }

    /// Sets every gauge from the core's state. Series of things that are gone (a queue with no
    /// waiting job, a removed cluster or tree node, a resource no longer named) disappear.
    pub fn observe(&self, s: &Scheduler) {
        let depths = s.queue_depths();
        let admitted = s.admitted_counts();
        let quota = s.quota_usage();
        let clusters = s.cluster_capacity();
        let _g = self.gauges.lock().unwrap_or_else(|e| e.into_inner());
        for g in [&self.pending, &self.admitted_active] {
            g.reset();
        }
        for g in [
            &self.cluster_reachable,
            &self.cluster_nodes,
            &self.cluster_schedulable_nodes,
            &self.topology_domains,
        ] {
            g.reset();
        }
        for g in [
            &self.quota_min,
            &self.quota_max,
            &self.quota_used,
            &self.quota_share,
            &self.quota_weight,
            &self.quota_fair_share,
            &self.cluster_allocatable,
            &self.cluster_free,
            &self.cluster_largest_free,
            &self.topology_largest_free,
        ] {
            g.reset();
        }
        let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        for d in &depths {
            let prio = d.priority.to_string();
            for (status, n) in [("pending", d.pending), ("inadmissible", d.inadmissible)] {
                if n > 0 {
                    self.pending
                        .with_label_values(&[d.queue.as_str(), prio.as_str(), status])
                        .set(count(n));
                }
            }
        }
        for a in &admitted {
            self.admitted_active
                .with_label_values(&[a.queue.as_str(), a.cluster.as_str()])
                .set(count(a.jobs));
        }
        for n in &quota {
            for r in &n.resources {
                let l = [n.node.as_str(), r.resource.as_str()];
                self.quota_min.with_label_values(&l).set(base(r.min));
                if let Some(max) = r.max {
                    self.quota_max.with_label_values(&l).set(base(max));
                }
                self.quota_used.with_label_values(&l).set(base(r.used));
            }
            if let Some((share, _)) = &n.share {
                let node = [n.node.as_str()];
                // A ratio for dashboards only; decisions compare the exact fraction.
                self.quota_share
                    .with_label_values(&node)
                    .set(share.num as f64 / share.den.max(1) as f64);
                self.quota_weight
                    .with_label_values(&node)
                    .set(base(n.weight_milli));
            }
            if let Some(f) = &n.fair_share {
                self.quota_fair_share
                    .with_label_values(&[n.node.as_str()])
                    .set(f.num as f64 / f.den.max(1) as f64);
            }
        }
        for c in &clusters {
            let name = [c.cluster.as_str()];
            self.cluster_reachable
                .with_label_values(&name)
                .set(i64::from(c.reachable));
            self.cluster_nodes
                .with_label_values(&name)
                .set(count(c.nodes));
            self.cluster_schedulable_nodes
                .with_label_values(&name)
                .set(count(c.schedulable_nodes));
            for r in &c.resources {
                let l = [c.cluster.as_str(), r.resource.as_str()];
                self.cluster_allocatable
                    .with_label_values(&l)
                    .set(base(r.allocatable));
                self.cluster_free.with_label_values(&l).set(base(r.free));
                self.cluster_largest_free
                    .with_label_values(&l)
                    .set(base(r.largest_free));
            }
            for t in &c.topology {
                self.topology_domains
                    .with_label_values(&[c.cluster.as_str(), t.level.as_str()])
                    .set(count(t.domains));
                for (resource, free) in &t.largest_free {
                    self.topology_largest_free
                        .with_label_values(&[
                            c.cluster.as_str(),
                            t.level.as_str(),
                            resource.as_str(),
                        ])
                        .set(base(*free));
                }
            }
        }
    }

    /// A job entered `queue` (queued, or inadmissible at submission).
    pub fn submitted(&self, queue: &str) {
        self.submitted.with_label_values(&[queue]).inc();
    }

    /// The core admitted a job of `queue` to `cluster`.
    pub fn admitted(&self, queue: &str, cluster: &str) {
        self.admitted.with_label_values(&[queue, cluster]).inc();
    }

    /// An admitted job was created in `cluster`.
    pub fn dispatched(&self, queue: &str, cluster: &str) {
        self.dispatched.with_label_values(&[queue, cluster]).inc();
    }

    /// A job of `queue` was preempted on `cluster`. Count its requeue with [`Metrics::requeued`].
    pub fn preempted(&self, queue: &str, cluster: &str) {
        self.preempted.with_label_values(&[queue, cluster]).inc();
    }

    /// An admitted job of `queue` went back to its queue.
    pub fn requeued(&self, queue: &str, reason: RequeueReason) {
        self.requeued
            .with_label_values(&[queue, reason.as_str()])
            .inc();
    }

    /// A job that would go to `queue` cannot be read.
    pub fn rejected(&self, queue: &str) {
        self.rejected.with_label_values(&[queue]).inc();
    }

    /// A dispatched job of `queue` ended on `cluster`.
    pub fn finished(&self, queue: &str, cluster: &str, outcome: Outcome) {
        self.finished
            .with_label_values(&[queue, cluster, outcome.as_str()])
            .inc();
    }

    /// Creating an admitted job in `cluster` failed.
    pub fn dispatch_error(&self, cluster: &str, reason: DispatchFailure) {
        self.dispatch_errors
            .with_label_values(&[cluster, reason.as_str()])
            .inc();
    }

    /// `n` pods were released onto their planned nodes in `cluster`.
    pub fn pods_released(&self, cluster: &str, n: u64) {
        self.pods_released.with_label_values(&[cluster]).inc_by(n);
    }

    /// A pod was found where its job's plan does not put it.
    /// Jobs that may run twice, per silent member holding an old copy (the whole set: members
    /// not named have none).
    pub fn maybe_running_twice(&self, per_cluster: &std::collections::BTreeMap<String, i64>) {
        let _g = self.gauges.lock().unwrap_or_else(|e| e.into_inner());
        self.maybe_twice.reset();
        for (c, n) in per_cluster {
            self.maybe_twice.with_label_values(&[c]).set(*n);
        }
    }

    /// The outcome of one forecast: per queue, the forecast waits (seconds from now) of the
    /// jobs expected to start, and how many are not expected to (the whole set: queues not
    /// named have no waiting job).
    pub fn forecast(
        &self,
        per_queue: &std::collections::BTreeMap<String, QueueOutlook>,
        seconds: f64,
    ) {
        self.forecast_duration.observe(seconds);
        let _g = self.gauges.lock().unwrap_or_else(|e| e.into_inner());
        self.estimated_wait.reset();
        self.not_expected.reset();
        self.beyond_forecast.reset();
        for (q, o) in per_queue {
            self.not_expected.with_label_values(&[q]).set(o.never);
            self.beyond_forecast
                .with_label_values(&[q])
                .set(o.not_before);
            let mut w = o.waits.clone();
            w.sort_unstable();
            if w.is_empty() {
                continue;
            }
            for (label, p) in [("0.5", 50usize), ("0.9", 90), ("1", 100)] {
                let rank = (p * w.len()).div_ceil(100).max(1) - 1;
                let v = i64::try_from(w[rank]).unwrap_or(i64::MAX);
                self.estimated_wait.with_label_values(&[q, label]).set(v);
            }
        }
    }

    pub fn placement_mismatch(&self, cluster: &str) {
        self.placement_mismatches
            .with_label_values(&[cluster])
            .inc();
    }

    /// A job of `queue` was admitted `seconds` after it entered its queue.
    pub fn wait_time(&self, queue: &str, seconds: f64) {
        self.wait_time.with_label_values(&[queue]).observe(seconds);
    }

    /// One admission cycle took `seconds`.
    pub fn pass_duration(&self, seconds: f64) {
        self.pass_duration.observe(seconds);
    }

    pub fn cycle_duration(&self, seconds: f64) {
        self.cycle_duration.observe(seconds);
    }
}

#[cfg(test)]
#[path = "metrics_tests.rs"]
mod tests;
