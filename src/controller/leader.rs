//! Leader election with a coordination.k8s.io Lease: at most one replica acts (decides,
//! dispatches, writes status) at a time; the others serve the webhook and health endpoints and
//! wait. Updates use resourceVersion preconditions, expiry is judged on the local monotonic clock
//! (how long the lease has not changed), never by comparing clocks across machines, and a leader
//! that cannot renew stops acting at its own deadline, before anyone else may take the lease.
//! Every write is counted while it is out ([`fenced`]); a replica hands the lease over only once
//! none is, and never takes a lease naming its identity that it did not acquire itself (an
//! earlier, killed process of it may have writes on their way), so no write of one leader lands
//! after the next has read the hub.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// Lease timings.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    /// How long a lease is valid after its last renewal.
    pub duration: Duration,
    /// How often the holder renews (and others check).
    pub retry: Duration,
}

/// Whether this replica may act now.
#[derive(Default)]
pub struct Leadership {
    held: AtomicBool,
    /// Until when the last successful renewal lets us act.
    deadline: Mutex<Option<Instant>>,
    /// Writes sent under the lease and not answered or given up yet: the lease is handed over
    /// only once there are none, so none lands after the next leader has read the hub.
    out: std::sync::atomic::AtomicUsize,
}

impl Leadership {
    /// A replica that runs without election always leads.
    pub fn always() -> Arc<Leadership> {
        let l = Leadership::default();
        l.held.store(true, Ordering::Relaxed);
        Arc::new(l)
    }

    pub fn is_leader(&self) -> bool {
        if !self.held.load(Ordering::Relaxed) {
            return false;
        }
        match self.deadline.lock().map(|d| *d) {
            Ok(Some(d)) => Instant::now() < d,
            Ok(None) => true,
            Err(_) => false,
        }
    }

    /// How long this replica may still act (None: it does not lead). A write is sent only
    /// with this much left, and given up when it runs out (see [`fenced`]).
    pub fn remaining(&self) -> Option<Duration> {
        if !self.held.load(Ordering::Relaxed) {
            return None;
        }
        match self.deadline.lock().map(|d| *d) {
            Ok(Some(d)) => d
                .checked_duration_since(Instant::now())
                .filter(|r| !r.is_zero()),
            Ok(None) => Some(Duration::MAX),
            Err(_) => None,
        }
    }

    fn renewed(&self, until: Instant) {
        if let Ok(mut d) = self.deadline.lock() {
            *d = Some(until);
        }
        self.held.store(true, Ordering::Relaxed);
    }

    fn lost(&self) {
        self.held.store(false, Ordering::Relaxed);
    }

    /// Writes sent under the lease not answered or given up yet.
    pub fn writes_out(&self) -> usize {
        self.out.load(Ordering::Acquire)
    }

    /// Waits, at most `max`, until no write sent under the lease is out.
    async fn writes_settled(&self, max: Duration) {
        let until = Instant::now() + max;
        while self.writes_out() > 0 && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Counts one write out while it lives.
struct Out<'a>(&'a Leadership);

impl<'a> Out<'a> {
    fn new(l: &'a Leadership) -> Out<'a> {
        l.out.fetch_add(1, Ordering::AcqRel);
        Out(l)
    }
}

impl Drop for Out<'_> {
    fn drop(&mut self) {
        self.0.out.fetch_sub(1, Ordering::AcqRel);
    }
}

/// How a write fenced by leadership ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Fenced<T> {
    /// Not sent: this replica did not lead when the write was about to go (after any wait for
    /// a permit).
    NotSent,
    /// The API server's answer.
    Answered(T),
    /// No answer within the bound: the write may or may not have landed.
    NoAnswer(Duration),
}

/// Sends `write` only if this replica leads at the moment it goes, and gives it up after
/// `limit` or when the lease this replica acts on runs out, whichever is first. The deadline is
/// `duration / 5` before another replica may take the lease, so a write that was sent in time
/// has that margin to land before the next leader acts; a write that waited for a permit
/// behind a slow member is judged when it leaves, not when it was decided.
pub async fn fenced<T>(
    leadership: &Leadership,
    limit: Duration,
    write: impl std::future::Future<Output = T>,
) -> Fenced<T> {
    let Some(left) = leadership.remaining() else {
        return Fenced::NotSent;
    };
    let bound = limit.min(left);
    let _out = Out::new(leadership);
    match tokio::time::timeout(bound, write).await {
        Ok(t) => Fenced::Answered(t),
        Err(_) => Fenced::NoAnswer(bound),
    }
}

impl<T> Fenced<T> {
    /// The answer, or the words for why there is none.
    pub fn answer(self) -> Result<T, String> {
        match self {
            Fenced::Answered(t) => Ok(t),
            Fenced::NotSent => Err("not sent: this replica no longer leads".into()),
            Fenced::NoAnswer(d) => Err(format!(
                "no answer within {} ms (the write may have landed)",
                d.as_millis()
            )),
        }
    }
}

fn now() -> MicroTime {
    MicroTime(jiff::Timestamp::now())
}

/// Runs the election until `token` is cancelled; then releases the lease if held, so that a
/// standby takes over at once.
pub async fn run(
    client: Client,
    cfg: LeaseConfig,
    state: Arc<Leadership>,
    token: CancellationToken,
) {
    let api: Api<Lease> = Api::namespaced(client, &cfg.namespace);
    // The lease as last seen, and when (monotonic) its resourceVersion last changed.
    let mut seen: Option<(String, Instant)> = None;
    // Whether this process holds the lease (a lease naming this identity that an earlier
    // process of it held, killed with writes still on their way, is waited out like anyone's).
    let mut ours = false;
    // Stop acting a little before the lease can expire for others.
    let margin = cfg.duration / 5;
    loop {
        let attempt_started = Instant::now();
        match step(&api, &cfg, &mut seen, &mut ours).await {
            Ok(true) => {
                if !state.held.load(Ordering::Relaxed) {
                    tracing::info!(identity = %cfg.identity, lease = %cfg.name, "became leader");
                }
                state.renewed(attempt_started + cfg.duration - margin);
            }
            Ok(false) => {
                if state.held.load(Ordering::Relaxed) {
                    tracing::warn!(identity = %cfg.identity, "lost the lease to another replica");
                }
                state.lost();
            }
            Err(e) => {
                tracing::warn!(error = %e, "lease update failed");
                if !state.is_leader() && state.held.load(Ordering::Relaxed) {
                    tracing::warn!("could not renew the lease before its deadline; stepping down");
                    state.lost();
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(cfg.retry) => {}
            _ = token.cancelled() => break,
        }
    }
    // Hand the lease over only once no write sent under it is out (each is given up by the
    // lease's deadline at the latest): none of them lands after the next leader read the hub.
    let held = state.held.load(Ordering::Relaxed);
    state.lost();
    if held {
        state.writes_settled(cfg.duration - margin).await;
    }
    if held
        && let Ok(mut lease) = api.get(&cfg.name).await
        && lease
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.as_deref())
            == Some(cfg.identity.as_str())
    {
        if let Some(spec) = lease.spec.as_mut() {
            spec.holder_identity = None;
            spec.renew_time = None;
        }
        match api.replace(&cfg.name, &PostParams::default(), &lease).await {
            Ok(_) => tracing::info!("lease released"),
            Err(e) => tracing::warn!(error = %e, "could not release the lease"),
        }
    }
}

/// One attempt: Ok(true) when we hold the lease after it.
async fn step(
    api: &Api<Lease>,
    cfg: &LeaseConfig,
    seen: &mut Option<(String, Instant)>,
    ours: &mut bool,
) -> Result<bool, kube::Error> {
    let held = step_once(api, cfg, seen, *ours).await;
    if let Ok(h) = held {
        *ours = h;
    }
    held
}

async fn step_once(
    api: &Api<Lease>,
    cfg: &LeaseConfig,
    seen: &mut Option<(String, Instant)>,
    ours: bool,
) -> Result<bool, kube::Error> {
    let secs = cfg.duration.as_secs().max(1) as i32;
    let Some(mut lease) = api.get_opt(&cfg.name).await? else {
        let lease: Lease = serde_json::from_value(json!({
            "metadata": {"name": cfg.name, "namespace": cfg.namespace},
            "spec": {"holderIdentity": cfg.identity, "leaseDurationSeconds": secs,
                     "acquireTime": now(), "renewTime": now(), "leaseTransitions": 0}
        }))
        .map_err(kube::Error::SerdeError)?;
        return match api.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => Err(e),
        };
    };
    let rv = lease.metadata.resource_version.clone().unwrap_or_default();
    let changed_at = match seen {
        Some((v, at)) if *v == rv => *at,
        _ => {
            *seen = Some((rv.clone(), Instant::now()));
            Instant::now()
        }
    };
    let spec = lease.spec.get_or_insert_with(Default::default);
    let holder = spec.holder_identity.clone().unwrap_or_default();
    let their_duration =
        Duration::from_secs(spec.lease_duration_seconds.unwrap_or(secs).max(1) as u64);
    let mine = holder == cfg.identity && ours;
    let free = holder.is_empty() || changed_at.elapsed() > their_duration;
    if !mine && !free {
        return Ok(false);
    }
    if !mine {
        spec.acquire_time = Some(now());
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        spec.holder_identity = Some(cfg.identity.clone());
        tracing::info!(previous = %holder, "taking over the lease");
    }
    spec.lease_duration_seconds = Some(secs);
    spec.renew_time = Some(now());
    // The resourceVersion in `lease` makes this a compare-and-swap.
    match api.replace(&cfg.name, &PostParams::default(), &lease).await {
        Ok(l) => {
            *seen = Some((
                l.metadata.resource_version.unwrap_or_default(),
                Instant::now(),
            ));
            Ok(true)
        }
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    fn leading_until(d: Duration) -> Arc<Leadership> {
        let l = Arc::new(Leadership::default());
        l.renewed(Instant::now() + d);
        l
    }

    #[tokio::test]
    async fn the_lease_waits_for_every_write_sent_under_it() {
        let l = leading_until(Duration::from_secs(60));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let write = {
            let l = l.clone();
            tokio::spawn(async move { fenced(&l, Duration::from_secs(30), rx).await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(l.writes_out(), 1);
        // Still out: the wait before handing the lease over does not end on its own.
        let waited = tokio::time::timeout(
            Duration::from_millis(200),
            l.writes_settled(Duration::from_secs(30)),
        )
        .await;
        assert!(waited.is_err(), "settled while a write was out");
        tx.send(()).expect("the write waits");
        assert!(matches!(write.await, Ok(Fenced::Answered(Ok(())))));
        assert_eq!(l.writes_out(), 0);
        tokio::time::timeout(
            Duration::from_millis(200),
            l.writes_settled(Duration::from_secs(30)),
        )
        .await
        .expect("settled once answered");
    }

    #[tokio::test]
    async fn a_write_that_waited_for_a_permit_is_not_sent_once_the_lease_is_lost() {
        let l = leading_until(Duration::from_secs(60));
        let permits = Arc::new(tokio::sync::Semaphore::new(1));
        let held = permits.clone().acquire_owned().await.expect("permit");
        let sent = Arc::new(AtomicUsize::new(0));
        let (l2, p2, s2) = (l.clone(), permits.clone(), sent.clone());
        // Decided while leading; queued behind a slow member's permit.
        assert!(l.is_leader());
        let task = tokio::spawn(async move {
            let _permit = p2.acquire_owned().await;
            fenced(&l2, Duration::from_secs(10), async {
                s2.fetch_add(1, Ordering::SeqCst);
            })
            .await
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        l.lost();
        drop(held);
        let out = task.await.expect("task");
        assert_eq!(out, Fenced::NotSent);
        assert_eq!(sent.load(Ordering::SeqCst), 0, "the write went out");
    }

    #[tokio::test]
    async fn a_write_is_given_up_when_the_lease_runs_out_not_after_its_own_limit() {
        let l = leading_until(Duration::from_millis(200));
        let started = Instant::now();
        let out = fenced(&l, Duration::from_secs(30), std::future::pending::<()>()).await;
        let Fenced::NoAnswer(bound) = out else {
            panic!("{out:?}")
        };
        assert!(bound <= Duration::from_millis(200), "{bound:?}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "waited its own limit"
        );
        assert!(Fenced::<()>::NoAnswer(bound).answer().is_err());
        // Past the deadline nothing more is sent.
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert_eq!(l.remaining(), None);
        assert_eq!(
            fenced(&l, Duration::from_secs(1), async { 1 }).await,
            Fenced::NotSent
        );
    }

    #[tokio::test]
    async fn a_leader_without_election_always_sends_and_is_bounded_by_the_limit() {
        let l = Leadership::always();
        assert_eq!(
            fenced(&l, Duration::from_secs(1), async { 7 }).await,
            Fenced::Answered(7)
        );
        let out = fenced(&l, Duration::from_millis(50), std::future::pending::<()>()).await;
        assert_eq!(out, Fenced::NoAnswer(Duration::from_millis(50)));
    }
}
