//! The hub controller: drives the scheduling core and the job lifecycle (`crate::lifecycle`)
//! against real clusters. This module only wires things up: the hub watches, the webhook, the
//! health, metrics and snapshot endpoints (`http`), leader election, and the loop that runs
//! `Brain::sync`. What happens in a pass, in order, is in `brain`; each resource has its own
//! reconciler module:
//!
//! - `tree`: the ElasticQuotaTree in force and its status;
//! - `membership`: MemberClusters, their connections and status;
//! - `jobs`: hub jobs (intake: suspend, interpret, follow, forget);
//! - `hubcheck`: the hub's admission for each pod template (server-side dry runs);
//! - `observe`: each followed job on its members (copy, pods, placement, hub status);
//! - `execute`: the lifecycle's intents (create and delete copies off the sync loop, Events,
//!   metrics);
//! - `record`: the one writer of QueuedJob status (the durable lifecycle record);
//! - `gc`: copies of hub jobs known deleted;
//! - `events`: Events on hub objects, published off the loop a few at a time.
//!
//! Everything that must survive a restart is in the API: a QueuedJob's status is the job's
//! lifecycle record (phase, member, plan, every deadline, the members that may still hold an old
//! copy), written before anything is created on or deleted from a member, so a new process (or a
//! new leader) rebuilds the core's queues, quota usage and reservations from it.

mod brain;
pub mod clock;
mod copies;
pub mod crd;
mod ctx;
pub mod dispatch;
mod events;
mod execute;
pub mod explain;
mod finalizers;
mod forecasting;
pub mod gates;
mod gc;
pub mod http;
pub mod hubcheck;
pub mod intake;
mod jobs;
mod judging;
pub mod kinds;
pub mod kubeconfig;
mod kubeconfig_errors;
pub mod leader;
pub mod members;
mod membership;
mod observe;
mod operators;
mod options;
mod owned;
mod placestep;
mod placing;
mod reads;
mod record;
pub mod registration;
mod reports;
mod runtimes;
pub mod secret_ref;
pub mod shutdown;
pub mod snapshot;
mod snapshot_fetch;
pub mod status;
mod stores;
pub mod tls;
mod tree;
pub mod watches;
mod writes;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::watcher;
use tokio::sync::Notify;

use crate::metrics::Metrics;
use crate::workload::JobKind;
pub use crd::{MANAGER, queued_job_name};
use members::watch;
pub use options::{Options, check_flags};
use stores::HubStores;

/// Runs the controller until SIGTERM / SIGINT (then drains: see `shutdown`).
pub async fn run(opts: Options) -> anyhow::Result<()> {
    let stop = shutdown::Stop::new(opts.shutdown_drain);
    let result = run_until(opts, &stop).await;
    stop.finish().await;
    result
}

/// A client of the hub, from `--kubeconfig` or the default chain.
async fn hub_client(opts: &Options) -> anyhow::Result<Client> {
    Ok(match &opts.hub_kubeconfig {
        Some(p) => {
            let text =
                std::fs::read_to_string(p).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?;
            members::client_from_kubeconfig("hub", &text).await?
        }
        None => Client::try_default().await?,
    })
}

async fn run_until(opts: Options, stop: &shutdown::Stop) -> anyhow::Result<()> {
    let hub = hub_client(&opts).await?;
    // Records are dated by the hub's clock, measured before anything is dated.
    clock::set(&hub).await;
    tokio::spawn(clock::keep(hub.clone()));
    let token = stop.token.clone();
    {
        let token = token.clone();
        tokio::spawn(async move {
            shutdown_signal().await;
            tracing::info!("shutdown requested");
            token.cancel();
        });
    }
    let wake = Arc::new(Notify::new());
    let hub_kinds = kinds::served(&hub).await?;
    tracing::info!(kinds = ?hub_kinds, "job kinds served by the hub");
    let mut tasks = Vec::new();
    let cfg = watcher::Config::default;
    let runtimes = if hub_kinds.contains(&JobKind::TrainJob) {
        runtimes::Watches::start("hub", &hub, &wake, &mut tasks).await?
    } else {
        None
    };
    let stores = HubStores {
        trees: watch(
            Api::namespaced(hub.clone(), &opts.quota_namespace),
            cfg(),
            (),
            wake.clone(),
            &mut tasks,
        ),
        members: watch(Api::all(hub.clone()), cfg(), (), wake.clone(), &mut tasks),
        queued: watch(Api::all(hub.clone()), cfg(), (), wake.clone(), &mut tasks),
        priorities: watch(Api::all(hub.clone()), cfg(), (), wake.clone(), &mut tasks),
        namespaces: watch(Api::all(hub.clone()), cfg(), (), wake.clone(), &mut tasks),
        runtimes,
        jobs: hub_kinds
            .iter()
            .map(|&k| {
                let ar = kinds::api_resource(k);
                let api: Api<DynamicObject> = Api::all_with(hub.clone(), &ar);
                (k, watch(api, cfg(), ar, wake.clone(), &mut tasks))
            })
            .collect(),
        _tasks: tasks,
    };
    let covered: intake::Covered = Default::default();
    // Every replica knows what is covered from its first answer, leader or not; once this one
    // leads, its sync (which keeps the last valid tree in force) is the only writer.
    let leading = Arc::new(AtomicBool::new(false));
    {
        let (trees, covered, leading, token) = (
            stores.trees.clone_store(),
            covered.clone(),
            leading.clone(),
            token.clone(),
        );
        tokio::spawn(async move {
            let mut seen = None;
            loop {
                if leading.load(Ordering::Relaxed) {
                    return;
                }
                let (store, ready) = &trees;
                let now = store.state();
                // Read again only when a tree changed.
                let key: Vec<_> = now
                    .iter()
                    .map(|t| (t.metadata.uid.clone(), t.metadata.resource_version.clone()))
                    .collect();
                if ready.load(Ordering::Relaxed) && seen.as_ref() != Some(&key) {
                    if let Ok(mut c) = covered.write() {
                        let next = intake::covered_by(crd::tree_in_force(&now), &c);
                        *c = Some(next);
                    }
                    seen = Some(key);
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(200)) => {}
                    _ = token.cancelled() => return,
                }
            }
        });
    }
    let ready = Arc::new(AtomicBool::new(false));
    let metrics = Arc::new(Metrics::new());
    let (snap_tx, snap_rx) = tokio::sync::mpsc::channel::<snapshot::Ask>(16);
    let http = tokio::spawn(http::serve(
        opts.http_addr,
        http::health_routes(ready.clone(), metrics.clone(), stop.clone()),
        stop.servers.clone(),
        "health and metrics",
    ));
    let snapshot_http = tokio::spawn(http::serve(
        opts.snapshot_addr,
        http::snapshot_routes(http::Snapshots {
            tx: snap_tx,
            wake: wake.clone(),
            leading: leading.clone(),
        }),
        stop.servers.clone(),
        "snapshot",
    ));
    let mut webhook = None;
    let mut registration = None;
    if let Some(addr) = opts.webhook_addr {
        let certs = tls::CertReloader::load_or_create(&opts.webhook_cert_dir, &opts.webhook_hosts)?;
        let exclude = vec!["kube-system".to_string(), opts.namespace.clone()];
        registration = opts.webhook_endpoint.clone().map(|ep| {
            let policy = &opts.webhook_failure_policy;
            registration::Registration::new(hub.clone(), ep, policy, exclude, certs.clone())
        });
        let (c, t) = (covered.clone(), stop.servers.clone());
        webhook = Some(tokio::spawn(async move {
            if let Err(e) = intake::serve(addr, certs, c, t).await {
                tracing::error!(error = %e, "webhook server failed");
            }
        }));
    }
    // Wait for the hub's view before deciding anything.
    while !stores.ready() {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            _ = token.cancelled() => return Ok(()),
        }
    }
    // Every replica registers the webhook for the namespaces it knows the tree covers.
    if let Some(r) = registration.as_mut() {
        r.register(&covered, &token).await?;
    }
    let mut elector = None;
    let leadership = match opts.lease.clone() {
        Some(cfg) => {
            let l = Arc::new(leader::Leadership::default());
            // A connection of its own: the controller's own traffic to the hub (a burst of
            // writes) must never delay a renewal past the lease's deadline.
            let lease_client = hub_client(&opts).await?;
            elector = Some(tokio::spawn(leader::run(
                lease_client,
                cfg,
                l.clone(),
                token.clone(),
            )));
            l
        }
        None => leader::Leadership::always(),
    };
    ready.store(true, Ordering::Relaxed);
    if !leadership.is_leader() {
        tracing::info!("standing by: another replica holds the lease");
    }
    while !leadership.is_leader() {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            _ = token.cancelled() => return Ok(()),
        }
    }
    let recorder = Recorder::new(
        hub.clone(),
        Reporter {
            controller: "muster".into(),
            instance: Some(opts.instance.clone()),
        },
    );
    leading.store(true, Ordering::Relaxed);
    if let Some(r) = registration {
        tokio::spawn(r.keep(covered.clone(), token.clone()));
    }
    let ctx = ctx::Ctx {
        hub,
        opts,
        stores,
        events: events::Events::start(recorder),
        wake: wake.clone(),
        metrics,
        leadership: leadership.clone(),
        epoch: Instant::now(),
    };
    let mut brain = brain::Brain::new(ctx, covered, snap_rx);
    tracing::info!("hub view synced; acting as leader");
    let mut result = Ok(());
    loop {
        // A stop asked during the last sync comes first: the elector has released the lease
        // because of it, which is not a lost leadership.
        if token.is_cancelled() {
            break;
        }
        if !leadership.is_leader() {
            // Everything is in the API: a fresh start (this process restarted, or the new
            // leader) rebuilds from it. Acting on without the lease could double-dispatch.
            tracing::error!("lost leadership; exiting");
            token.cancel();
            result = Err(anyhow::anyhow!("lost leadership"));
            break;
        }
        let started = Instant::now();
        brain.sync().await;
        // No later than the earliest deadline of any record; at once while the core has work.
        let pause = if brain.busy() {
            Duration::ZERO
        } else {
            brain.pause()
        };
        tokio::select! {
            _ = wake.notified() => {}
            _ = tokio::time::sleep(pause) => {}
            _ = token.cancelled() => break,
        }
        // Let a burst of watch events settle into one sync.
        let elapsed = started.elapsed();
        if elapsed < Duration::from_millis(200) {
            tokio::time::sleep(Duration::from_millis(200) - elapsed).await;
        }
    }
    brain.release_events();
    ready.store(false, Ordering::Relaxed);
    if let Some(w) = webhook {
        let _ = w.await;
    }
    let _ = http.await;
    let _ = snapshot_http.await;
    // Let the elector release the lease so that a standby takes over at once.
    if let Some(e) = elector {
        let _ = tokio::time::timeout(Duration::from_secs(3), e).await;
    }
    tracing::info!("stopped");
    result
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! { _ = ctrl_c => {}, _ = term.recv() => {} }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
