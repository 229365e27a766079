//! The controller's pass. `Brain` holds the parts side by side (the clients in `ctx`, the core's
//! state in `core`, and each step's own state, defined in that step's module) and `Brain::sync`
//! is the one place that says in what order things happen, lending each step only the parts it
//! needs: read what finished off the loop (each step its own outcomes), the tree, the members and
//! the hub jobs; tidy; observe every followed job on its members; one pass of the lifecycle book
//! (every job stepped, one scheduling cycle); carry out the intents, then the writes observing
//! asked for (pod releases, hub statuses); send the records; report. No step waits for a hub or
//! member write: they go off the loop (`copies`, `reads`, `writes`, `reports`, `judging`) and
//! their outcomes are read at the start of the next pass. What each step decides is the core's.
//! No step module imports this one.

use std::collections::BTreeMap;
use std::time::Instant;

use kube::ResourceExt;
use tokio::sync::mpsc;

use super::ctx::{Core, Ctx};
use super::intake;
use super::options::Options;
use super::reports::Report;
use crate::lifecycle::{Book, Settings};
use crate::scheduler::{Config, Scheduler};
use crate::workload::JobKind;

pub(super) struct Brain {
    ctx: Ctx,
    core: Core,
    /// The quota tree in force (`tree`).
    tree: super::tree::Tree,
    /// The members: connections, what the core was told of each, their statuses
    /// (`membership`).
    fleet: super::membership::Fleet,
    /// What the controller knows of each followed hub job beyond its record (`jobs`).
    hubjobs: super::jobs::HubJobs,
    /// The jobs' copies being created or deleted on members (`copies`).
    copies: super::copies::Copies,
    /// Fresh reads of members for creates their views have not shown (`reads`).
    reads: super::reads::Reads,
    /// QueuedJob status batches and observed writes out (`writes`).
    writer: super::writes::Writer,
    /// Quota tree and member status reports under way.
    reports: super::reports::Reports,
    /// QueuedJobs whose `muster.dev/record` finalizer is being added or removed.
    finalizing: super::finalizers::Finalizing,
    /// The record each QueuedJob holds, read once per version (`gc`).
    shown: super::gc::Shown,
    /// Start-time forecasts and the run-time history.
    forecasts: super::forecasting::Forecasts,
    /// Snapshots asked for over HTTP, answered at the end of a pass.
    snapshots: Option<mpsc::Receiver<super::snapshot::Ask>>,
}

impl Brain {
    pub fn new(
        ctx: Ctx,
        covered: intake::Covered,
        snapshots: mpsc::Receiver<super::snapshot::Ask>,
    ) -> Brain {
        let settings = settings(&ctx.opts);
        Brain {
            ctx,
            core: Core {
                sched: Scheduler::new(Config::default()),
                book: Book::new(settings),
                next_wake: None,
            },
            tree: super::tree::Tree::new(covered),
            fleet: Default::default(),
            hubjobs: super::jobs::HubJobs::new(),
            copies: Default::default(),
            reads: Default::default(),
            writer: Default::default(),
            reports: Default::default(),
            finalizing: Default::default(),
            shown: Default::default(),
            forecasts: Default::default(),
            snapshots: Some(snapshots),
        }
    }

    /// On the way out: publishes the Dispatched Events still held for their status
    /// (`HubJobs::release_events`).
    pub fn release_events(&mut self) {
        self.hubjobs.release_events(&self.ctx);
    }

    /// Whether the core has work left for another pass at once.
    pub fn busy(&self) -> bool {
        self.core.sched.has_work()
    }

    /// How long the loop may wait before the next pass: until the earliest deadline of any
    /// record, at most `--resync`.
    pub fn pause(&self) -> std::time::Duration {
        let resync = self.ctx.opts.resync;
        self.core.next_wake.map_or(resync, |at| {
            std::time::Duration::from_millis(at.saturating_sub(super::clock::now_ms())).min(resync)
        })
    }

    /// One pass: observe, decide, act, report. A pass slower than a second says where its
    /// time went.
    pub async fn sync(&mut self) {
        let mut t = Steps::new();
        // 1. What the hub and the members say.
        self.core.next_wake = None;
        self.sync_priorities();
        self.sync_runtimes();
        self.tree
            .sync(&self.ctx, &mut self.core.sched, &mut self.hubjobs.ignored);
        self.fleet.sync(&self.ctx, &mut self.core).await;
        t.mark("tree+members");
        if !self.fleet.settled(&self.ctx) {
            // Deciding before every member's nodes are known would call jobs unfit (or place
            // them on the members that happened to answer first).
            return;
        }
        // What finished off the loop since the last pass, each read by the step that sent it.
        self.copies
            .landed(&self.ctx, &mut self.core, &self.fleet, &self.hubjobs);
        self.reads.landed(&mut self.core);
        self.writer
            .landed(&self.ctx, &mut self.core, &mut self.hubjobs);
        self.hubjobs.verdicts_landed(&mut self.core);
        self.reports_landed();
        self.hubjobs.discover_kinds(&mut self.ctx).await;
        let (gone, intake) = self
            .hubjobs
            .sync_jobs(&self.ctx, &mut self.core, &self.tree)
            .await;
        self.execute(intake);
        self.fleet.sync_usage(&mut self.core);
        t.mark("jobs");
        // 2. The housekeeping (the core's `tidy`): gone hub jobs, copies to collect, QueuedJobs
        // deleted or to keep. Then every followed job on its members (pods to place, hub status
        // to sync).
        super::gc::tidy(
            &self.ctx,
            &mut self.core,
            (&self.fleet, &mut self.hubjobs),
            (&mut self.copies, &self.finalizing, &mut self.shown),
            (&mut self.writer.outbox, gone),
        );
        self.reads.settle_sent(
            &self.ctx,
            &self.core,
            (&self.fleet, &self.hubjobs),
            &self.copies.in_flight,
        );
        let (view, writes) = super::observe::observe(
            &self.ctx,
            &mut self.core,
            &mut self.fleet,
            &mut self.hubjobs,
        );
        // 3. The lifecycle: every job stepped, one scheduling cycle.
        let started = Instant::now();
        let intents = super::observe::step_all(&mut self.core, &self.hubjobs, &view);
        self.ctx
            .metrics
            .cycle_duration(started.elapsed().as_secs_f64());
        t.mark("decide");
        // 4. Carry out what it says (creates start at once, off the loop), then what observing
        // asked for; send the records (in the book's order, off the loop); report.
        self.execute(intents);
        self.writer.carry_out(&self.ctx, writes);
        t.mark("execute+observed");
        super::record::sync_reasons(&mut self.core, &mut self.hubjobs);
        t.mark("reasons");
        let held = super::record::write_records(
            &self.ctx,
            &mut self.core,
            (&self.hubjobs, &self.fleet, &self.forecasts),
            &mut self.writer,
        );
        for (uid, state) in held {
            self.hubjobs.status_landed(&self.ctx, &uid, state);
        }
        t.mark("records");
        self.tree
            .write_status(&self.ctx, &mut self.core, &mut self.reports);
        self.fleet
            .write_statuses(&self.ctx, &mut self.core, &mut self.reports);
        self.ctx.metrics.observe(&self.core.sched);
        let mut twice: BTreeMap<String, i64> = BTreeMap::new();
        for (_, e) in self.core.book.iter() {
            for c in e.record.orphans.keys() {
                if e.record.cluster.as_deref() != Some(c) && !self.fleet.answering(c) {
                    *twice.entry(c.clone()).or_default() += 1;
                }
            }
        }
        self.ctx.metrics.maybe_running_twice(&twice);
        t.mark("statuses");
        // 5. Forecasts (off the loop) and snapshots asked for.
        self.forecasts
            .forecast(&self.ctx, &self.core, &self.hubjobs)
            .await;
        super::snapshot::answer(&mut self.snapshots, || {
            super::snapshot::scenario(
                &self.ctx,
                &self.core,
                (&self.fleet, &self.hubjobs, &self.forecasts, &self.tree),
            )
        });
        t.mark("forecast");
        self.ctx
            .metrics
            .pass_duration(t.start.elapsed().as_secs_f64());
        t.report(self.core.book.iter().count());
    }

    /// Carries out the core's intents, in order (`execute`).
    fn execute(&mut self, intents: Vec<(String, crate::lifecycle::Intent)>) {
        super::execute::execute_all(
            &self.ctx,
            &mut self.core,
            (&mut self.fleet, &mut self.hubjobs),
            (&mut self.copies, &mut self.forecasts),
            intents,
        );
    }

    /// What the status reports that landed hold, kept by the step that owns each object.
    fn reports_landed(&mut self) {
        for report in self.reports.landed() {
            match report {
                Report::Tree { status, .. } => self.tree.written = Some(status),
                Report::Member { name, status } => self.fleet.report_landed(&name, status),
            }
        }
    }

    fn sync_priorities(&mut self) {
        let p: BTreeMap<String, i32> = self
            .ctx
            .stores
            .priorities
            .state()
            .iter()
            .map(|pc| (pc.name_any(), pc.value.unwrap_or(0)))
            .collect();
        if p != self.hubjobs.priorities {
            self.core.sched.set_priority_classes(p.clone());
            self.hubjobs.priorities = p;
        }
    }

    /// The hub's training runtimes; when they change, every TrainJob is read again. One that
    /// waits, or is admitted with no copy yet, is judged as it reads now; one whose copy runs
    /// keeps the spec it was admitted with while its generation has not moved (the core's
    /// rule: taking it back would kill a running job for an edit it never asked for; Trainer
    /// does not respec a running TrainJob either).
    fn sync_runtimes(&mut self) {
        let Some(w) = &self.ctx.stores.runtimes else {
            return;
        };
        let now = w.index();
        if now != self.hubjobs.runtimes {
            self.hubjobs.runtimes = now;
            for j in self.hubjobs.jobs.values_mut() {
                if j.kind == JobKind::TrainJob {
                    j.read_again = true;
                }
            }
        }
    }
}

/// How long each step of a pass took.
struct Steps {
    start: Instant,
    last: Instant,
    steps: Vec<(&'static str, std::time::Duration)>,
}

impl Steps {
    fn new() -> Steps {
        let now = Instant::now();
        Steps {
            start: now,
            last: now,
            steps: Vec::new(),
        }
    }

    fn mark(&mut self, step: &'static str) {
        let now = Instant::now();
        self.steps.push((step, now - self.last));
        self.last = now;
    }

    /// Logged when the pass took more than a second.
    fn report(&self, jobs: usize) {
        let total = self.start.elapsed();
        if total < std::time::Duration::from_secs(1) {
            return;
        }
        let steps: Vec<String> = self
            .steps
            .iter()
            .map(|(s, d)| format!("{s} {} ms", d.as_millis()))
            .collect();
        tracing::info!(
            jobs,
            "slow pass: {} ms ({})",
            total.as_millis(),
            steps.join(", ")
        );
    }
}

/// The lifecycle's settings from the controller's flags.
pub(super) fn settings(o: &Options) -> Settings {
    let ms = |d: std::time::Duration| d.as_millis().min(u128::from(u64::MAX)) as u64;
    Settings {
        pods_ready_timeout: ms(o.pods_ready_timeout),
        pods_lost_timeout: ms(o.pods_lost_timeout),
        member_lost_grace: ms(o.member_lost_grace),
        copy_missing_grace: ms(o.copy_missing_grace),
        create_retry: 5_000,
        create_give_up: ms(o.create_give_up),
        backoff: ms(o.requeue_backoff),
        backoff_max: ms(o.requeue_backoff_max),
        drain_grace: Settings::default().drain_grace,
        record_settle: Settings::default().record_settle,
        creates_per_member: super::members::WRITES_PER_MEMBER,
        dispatched_write_delay: Settings::default().dispatched_write_delay,
        defect: None,
        partition: o.partition,
    }
}
