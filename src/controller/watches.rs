//! Watches of hub and member objects as the controller keeps them: a reflector's store with
//! whether its first list completed and the resourceVersion it has reached ([`Watched`]),
//! started with its objects trimmed, and a watch of something muster can do without on a member
//! that may not allow it. Decides nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use futures::StreamExt;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// What a reflector can hold.
pub trait Object:
    kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static
{
}

impl<K> Object for K where
    K: kube::Resource
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static
{
}

/// A reflector's store plus whether its first list completed.
pub struct Watched<K: kube::Resource + 'static>
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    store: Store<K>,
    ready: Arc<AtomicBool>,
    version: Arc<AtomicU64>,
}

impl<K: kube::Resource + 'static> Watched<K>
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    /// The store and its readiness flag, for a task of its own.
    pub fn clone_store(&self) -> (Store<K>, Arc<AtomicBool>) {
        (self.store.clone(), self.ready.clone())
    }

    /// Whether the first list completed (a view one may trust, though never complete).
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    /// The highest resourceVersion the store holds every change up to (0: none known): the
    /// largest of the objects' versions the watch has delivered, published only once the
    /// store holds them (a relist's objects once the whole list is in). Read it before the
    /// store's state, and that state shows every change up to it. (Kubernetes calls
    /// resourceVersions opaque; the API servers muster talks to keep etcd's revisions, which
    /// are integers that grow.)
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }
}

impl<K: kube::Resource + 'static> std::ops::Deref for Watched<K>
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    type Target = Store<K>;
    fn deref(&self) -> &Store<K> {
        &self.store
    }
}

/// A watch of something muster can do without: `None`, logged once with what is lost, when the
/// member does not let muster list it (HTTP 403) or does not serve it (404); other errors fail
/// the connection.
pub(super) async fn optional_watch<K>(
    member: &str,
    api: Api<K>,
    dyntype: K::DynamicType,
    fields: Option<&str>,
    without: &str,
    wake: &Arc<Notify>,
    tasks: &mut Vec<JoinHandle<()>>,
) -> anyhow::Result<Option<Watched<K>>>
where
    K: Object,
    K::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync,
{
    let mut lp = ListParams::default().limit(1);
    let mut cfg = watcher::Config::default();
    if let Some(f) = fields {
        lp = lp.fields(f);
        cfg = cfg.fields(f);
    }
    let plural = K::plural(&dyntype).to_string();
    match tokio::time::timeout(Duration::from_secs(10), api.list_metadata(&lp))
        .await
        .map_err(|_| anyhow::anyhow!("member {member}: listing {plural} timed out"))?
    {
        Ok(_) => Ok(Some(watch(api, cfg, dyntype, wake.clone(), tasks))),
        Err(kube::Error::Api(e)) if e.code == 403 || e.code == 404 => {
            tracing::warn!(member = %member, error = %e, "cannot list {plural}: {without}");
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

/// Starts a reflector over `api`; `wake` is notified on every event.
pub fn watch<K>(
    api: Api<K>,
    cfg: watcher::Config,
    dyntype: K::DynamicType,
    wake: Arc<Notify>,
    tasks: &mut Vec<JoinHandle<()>>,
) -> Watched<K>
where
    K: Object,
    K::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync,
{
    watch_trimmed(api, cfg, dyntype, wake, tasks, |o: &mut K| {
        o.managed_fields_mut().clear()
    })
}

/// [`watch`], keeping of each object only what `trim` leaves of it.
pub fn watch_trimmed<K>(
    api: Api<K>,
    cfg: watcher::Config,
    dyntype: K::DynamicType,
    wake: Arc<Notify>,
    tasks: &mut Vec<JoinHandle<()>>,
    trim: impl FnMut(&mut K) + Send + 'static,
) -> Watched<K>
where
    K: Object,
    K::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync,
{
    let writer = reflector::store::Writer::new(dyntype);
    let store = writer.as_reader();
    let ready = Arc::new(AtomicBool::new(false));
    let version = Arc::new(AtomicU64::new(0));
    let (flag, reached) = (ready.clone(), version.clone());
    tasks.push(tokio::spawn(async move {
        let stream = watcher::watcher(api, cfg).default_backoff().modify(trim);
        // The reflector applies each event to the store before it passes it on; a relist's
        // objects go into the store together, at its end.
        let mut listing = 0u64;
        reflector::reflector(writer, stream)
            .for_each(|ev| {
                match &ev {
                    Ok(watcher::Event::Apply(o) | watcher::Event::Delete(o)) => {
                        reached.fetch_max(version_of(o), Ordering::AcqRel);
                    }
                    Ok(watcher::Event::Init) => listing = 0,
                    Ok(watcher::Event::InitApply(o)) => listing = listing.max(version_of(o)),
                    Ok(watcher::Event::InitDone) => {
                        reached.fetch_max(listing, Ordering::AcqRel);
                        flag.store(true, Ordering::Relaxed);
                    }
                    Err(_) => {}
                }
                wake.notify_one();
                async {}
            })
            .await;
    }));
    Watched {
        store,
        ready,
        version,
    }
}

/// An object's resourceVersion as an integer (0 when it has none, or not a number).
pub fn version_of<K: kube::Resource>(o: &K) -> u64 {
    o.meta()
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}
