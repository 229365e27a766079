//! The member reconciler: MemberClusters on the hub become connected members (their kubeconfig
//! Secret checked, connected off the sync loop so that a slow or frozen member never stalls
//! the others), described to the core (nodes, reachability, what other pods use), and their
//! status written back (Ready, nodes, allocatable and free capacity, last contact).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt;
use kube::api::Api;

use super::crd::{MemberCluster, MemberClusterStatus, PlacementPolicy};
use super::ctx::{Core, Ctx};
use super::members::{self, Member};
use super::owned;
use super::reports::{Report, Reports};
use super::secret_ref;
use super::stores::HubStores;
use crate::fleet::{ClusterInfo, PlacementMode as Mode};
use crate::lifecycle::Ms;
use crate::quantity::{Quantity, ResourceList};
use crate::resources::MAX_JOBS;
use crate::scheduler::JobState;

/// The members as this replica knows them.
#[derive(Default)]
pub(super) struct Fleet {
    pub members: BTreeMap<String, Member>,
    /// New connections of connected members, swapped in once in sync.
    pub incoming: BTreeMap<String, Member>,
    /// Members being connected (their source, the task).
    pub connecting: BTreeMap<String, (String, tokio::task::JoinHandle<anyhow::Result<Member>>)>,
    /// Members known but not connected, since when (this process's view).
    pub unconnected_since: BTreeMap<String, Ms>,
    /// Per member: why it could not be connected (for its status).
    pub errors: BTreeMap<String, String>,
    /// Last written MemberCluster status, and when.
    pub status: BTreeMap<String, (MemberClusterStatus, Instant)>,
    /// Per member: what the core was last told (nodes, reachability, per-node usage).
    pub told_nodes: HashMap<String, ClusterInfo>,
    pub told_reachable: HashMap<String, bool>,
    pub told_usage: HashMap<String, BTreeMap<String, ResourceList>>,
    /// Members seen dropping muster's scheduling gate (placed in pinned mode from then on),
    /// with the evidence.
    pub gates_dropped: BTreeMap<String, String>,
    /// Members whose operator for a kind is seen not to act.
    pub operators: super::operators::Operators,
    /// Members to connect again (they do not watch a kind a job needs), and when last asked.
    pub rediscover: BTreeMap<String, Instant>,
}

impl Fleet {
    /// Whether `cluster` is connected, in sync and answering.
    pub(super) fn answering(&self, cluster: &str) -> bool {
        self.members
            .get(cluster)
            .is_some_and(|m| m.synced() && m.health.answering())
    }

    /// How plans are carried out on `cluster`, and why.
    /// The member's `spec.topology` levels, or why they cannot be used (`spec.topology[i]: ...`;
    /// the member is then used without levels, so a job that requires one waits, saying so).
    pub(super) fn topology(
        &self,
        stores: &HubStores,
        cluster: &str,
    ) -> Result<Vec<String>, String> {
        let levels = stores
            .members
            .state()
            .iter()
            .find(|m| m.name_any() == cluster)
            .and_then(|m| m.spec.topology.clone())
            .unwrap_or_default();
        crate::topology::check_levels(&levels).map_err(|e| format!("spec.topology{e}"))?;
        Ok(levels)
    }

    pub(super) fn placement_mode(&self, stores: &HubStores, cluster: &str) -> (Mode, String) {
        let policy = stores
            .members
            .state()
            .iter()
            .find(|m| m.name_any() == cluster)
            .and_then(|m| m.spec.placement)
            .unwrap_or_default();
        match policy {
            PlacementPolicy::Gates => (Mode::Gates, "spec.placement is Gates".into()),
            PlacementPolicy::Pinned => (Mode::Pinned, "spec.placement is Pinned".into()),
            PlacementPolicy::Auto => {
                let version = self.members.get(cluster).map(|m| m.server_version);
                if let Some((major, minor)) = version
                    && (major, minor) != (0, 0)
                    && (major, minor) < (1, 30)
                {
                    return (
                        Mode::Pinned,
                        format!(
                            "the API server is v{major}.{minor}; scheduling gates with mutable node affinity need 1.30"
                        ),
                    );
                }
                if let Some(why) = self.gates_dropped.get(cluster) {
                    return (Mode::Pinned, why.clone());
                }
                (
                    Mode::Gates,
                    "every pod is released onto its planned node through a scheduling gate".into(),
                )
            }
        }
    }

    /// A member's status report landed: what the hub now holds (only for a member still
    /// known: it may have been removed meanwhile).
    pub(super) fn report_landed(&mut self, name: &str, status: MemberClusterStatus) {
        if let Some((st, _)) = self.status.get_mut(name) {
            *st = status;
        }
    }
}

impl Fleet {
    pub(super) async fn kubeconfig_of(
        ctx: &Ctx,
        mc: &MemberCluster,
    ) -> Result<(String, String), String> {
        let r = &mc.spec.kubeconfig_secret_ref;
        // Decided before anything is read: a refused Secret is never fetched.
        let ns = secret_ref::secret_namespace(
            r.namespace.as_deref(),
            &ctx.opts.namespace,
            &ctx.opts.member_secret_namespaces,
        )?;
        let key = r.key.clone().unwrap_or_else(|| "kubeconfig".into());
        let api: Api<Secret> = Api::namespaced(ctx.hub.clone(), &ns);
        let secret = api
            .get(&r.name)
            .await
            .map_err(|e| format!("Secret {ns}/{}: {e}", r.name))?;
        let allow = ctx.opts.allow_kubeconfig_files_and_exec;
        let text = secret_ref::kubeconfig_in(&secret, &format!("{ns}/{}", r.name), &key, allow)?;
        Ok((text, secret.resource_version().unwrap_or_default()))
    }

    pub(super) async fn sync(&mut self, ctx: &Ctx, core: &mut Core) {
        let wanted: BTreeMap<String, Arc<MemberCluster>> = ctx
            .stores
            .members
            .state()
            .into_iter()
            .map(|m| (m.name_any(), m))
            .collect();
        // Removed members: stop watching; nothing more is placed there.
        let gone: Vec<String> = self
            .members
            .keys()
            .filter(|n| !wanted.contains_key(*n))
            .cloned()
            .collect();
        for name in gone {
            tracing::info!(member = %name, "member removed");
            self.members.remove(&name);
            core.sched.set_cluster(&ClusterInfo {
                name: name.clone(),
                ..Default::default()
            });
            core.sched.set_reachable(&name, false);
            self.told_nodes.remove(&name);
            self.told_reachable.insert(name.clone(), false);
            self.told_usage.remove(&name);
            self.status.remove(&name);
        }
        let done: Vec<String> = self
            .connecting
            .iter()
            .filter(|(n, (_, t))| t.is_finished() || !wanted.contains_key(*n))
            .map(|(n, _)| n.clone())
            .collect();
        for name in done {
            let Some((_, task)) = self.connecting.remove(&name) else {
                continue;
            };
            if !wanted.contains_key(&name) {
                task.abort();
                continue;
            }
            match task.await {
                Ok(Ok(m)) => {
                    tracing::info!(member = %name, kinds = ?m.kinds, "member connected");
                    self.rediscover.remove(&name);
                    self.errors.remove(&name);
                    if self.members.contains_key(&name) {
                        // A reconnection: the old connection serves until the new one is in
                        // sync, so that the member never looks silent meanwhile.
                        self.incoming.insert(name.clone(), m);
                    } else {
                        self.members.insert(name.clone(), m);
                    }
                }
                Ok(Err(e)) => {
                    tracing::warn!(member = %name, error = %e, "cannot connect to member");
                    self.errors.insert(name.clone(), e.to_string());
                }
                Err(e) => {
                    self.errors.insert(name.clone(), e.to_string());
                }
            }
        }
        let ready: Vec<String> = self
            .incoming
            .iter()
            .filter(|(n, m)| {
                m.synced() || !wanted.contains_key(*n) || m.connected_at.elapsed().as_secs() > 30
            })
            .map(|(n, _)| n.clone())
            .collect();
        for name in ready {
            if let Some(m) = self.incoming.remove(&name)
                && wanted.contains_key(&name)
            {
                self.members.insert(name, m);
            }
        }
        let now = super::clock::now_ms();
        for name in wanted.keys() {
            if self.members.contains_key(name) {
                self.unconnected_since.remove(name);
            } else {
                self.unconnected_since.entry(name.clone()).or_insert(now);
            }
        }
        self.unconnected_since.retain(|n, _| wanted.contains_key(n));
        for (name, mc) in &wanted {
            // (Re)connect when new, when its spec or Secret changed, checked every few seconds.
            let due = self
                .status
                .get(name)
                .is_none_or(|(_, at)| at.elapsed() > Duration::from_secs(10))
                || !self.members.contains_key(name);
            if due {
                match Fleet::kubeconfig_of(ctx, mc).await {
                    Ok((text, rv)) => {
                        let source = format!("{}/{rv}", mc.metadata.generation.unwrap_or(0));
                        // Connected again (discovery anew) when a job needs a kind it does not
                        // watch, at most every 30 s.
                        let rediscover = self
                            .rediscover
                            .get(name)
                            .is_some_and(|at| at.elapsed() > Duration::from_secs(30));
                        let newest = self.incoming.get(name).or(self.members.get(name));
                        // A CRD installed or removed on the member: discovery anew.
                        let kinds_changed = newest.is_some_and(|m| m.kinds_changed());
                        let stale = rediscover
                            || kinds_changed
                            || newest.is_none_or(|m| m.source != source);
                        let pending = self.connecting.get(name).is_some_and(|(s, _)| *s == source);
                        if stale && !pending {
                            // Connected off the sync loop: discovery on a frozen member must
                            // not hold back the decisions for the others.
                            let (n, wake) = (name.clone(), ctx.wake.clone());
                            let src = source.clone();
                            let task = tokio::spawn(async move {
                                let c = members::client_from_kubeconfig(&n, &text).await?;
                                let m = Member::connect(&n, c, src, wake.clone()).await;
                                wake.notify_one();
                                m
                            });
                            if let Some((_, old)) =
                                self.connecting.insert(name.clone(), (source, task))
                            {
                                old.abort();
                            }
                        }
                    }
                    Err(e) => {
                        self.errors.insert(name.clone(), e);
                    }
                }
                if let Some((st, _)) = self.status.get(name).cloned() {
                    self.status.insert(name.clone(), (st, Instant::now()));
                } else {
                    self.status.insert(
                        name.clone(),
                        (MemberClusterStatus::default(), Instant::now()),
                    );
                }
            }
            let labels = mc.labels().clone();
            let (info, reachable) = match self.members.get(name) {
                Some(m) if m.synced() => {
                    let (mut info, problems) =
                        members::cluster_info(name, &labels, &m.nodes.state());
                    // The core makes only robust plans for a member placed by node set.
                    info.placement = self.placement_mode(&ctx.stores, name).0;
                    info.serves = m.serves();
                    info.topology = self.topology(&ctx.stores, name).unwrap_or_default();
                    info.serves.stalled = self.operators.stalled(name, super::clock::now_ms());
                    for p in problems {
                        tracing::warn!(member = %name, problem = %p, "node left out");
                    }
                    (Some(info), m.health.answering())
                }
                _ => (None, false),
            };
            if let Some(info) = info
                && self.told_nodes.get(name) != Some(&info)
            {
                core.sched.set_cluster(&info);
                self.told_nodes.insert(name.clone(), info);
                self.told_usage.remove(name);
            }
            if self.told_reachable.get(name) != Some(&reachable)
                && (self.told_nodes.contains_key(name) || !reachable)
            {
                tracing::info!(member = %name, reachable, "member reachability");
                if !self.told_nodes.contains_key(name) {
                    core.sched.set_cluster(&ClusterInfo {
                        name: name.clone(),
                        labels: labels.clone(),
                        nodes: vec![],
                        placement: Default::default(),
                        serves: Default::default(),
                        topology: Vec::new(),
                    });
                }
                core.sched.set_reachable(name, reachable);
                self.told_reachable.insert(name.clone(), reachable);
            }
        }
    }

    /// Whether every MemberCluster has been described to the core, or could not be reached
    /// (its connection failed, or it has not synced for 30 s since the controller started).
    pub(super) fn settled(&self, ctx: &Ctx) -> bool {
        let patience = ctx.epoch.elapsed() > Duration::from_secs(30);
        ctx.stores.members.state().iter().all(|mc| {
            let name = mc.name_any();
            self.told_nodes.contains_key(&name) || self.errors.contains_key(&name) || patience
        })
    }

    /// Tells the core what pods it does not account for use, per node: every active pod but
    /// those muster's own copies made, the copies of the jobs that hold a reservation (the copy
    /// UID each record holds, on the member it names; see `owned`).
    pub(super) fn sync_usage(&mut self, core: &mut Core) {
        let admitted = core.book.iter().filter(|(_, e)| {
            e.id.is_some_and(|id| matches!(core.sched.state(id), JobState::Admitted { .. }))
        });
        let mut recorded: BTreeMap<String, HashSet<String>> = BTreeMap::new();
        for r in admitted
            .map(|(_, e)| &e.record)
            .chain(core.book.deleted().map(|(_, r)| r))
        {
            // A record without a copy UID (not dispatched yet, or written before records held
            // it): its copy's pods are usage, on top of its reservation, until it has one.
            if let (Some(c), Some(u)) = (&r.cluster, &r.copy_uid) {
                recorded.entry(c.clone()).or_default().insert(u.clone());
            }
        }
        let none = HashSet::new();
        for (name, m) in &self.members {
            if !m.synced() || !self.told_nodes.contains_key(name) {
                continue;
            }
            let copies = m.recorded_copies(recorded.get(name).unwrap_or(&none));
            let links = m.intermediates.links();
            let (usage, problems) = owned::usage_by_node(&m.pods.state(), &copies, &links);
            for p in problems {
                tracing::warn!(member = %name, problem = %p, "pod usage unreadable");
            }
            let before = self.told_usage.get(name).cloned().unwrap_or_default();
            if before == usage {
                continue;
            }
            for node in before.keys().filter(|n| !usage.contains_key(*n)) {
                core.sched
                    .set_external_usage(name, node, &ResourceList::new());
            }
            for (node, used) in &usage {
                if before.get(node) != Some(used) {
                    core.sched.set_external_usage(name, node, used);
                }
            }
            self.told_usage.insert(name.clone(), usage);
        }
    }

    pub(super) fn write_statuses(&self, ctx: &Ctx, core: &mut Core, reports: &mut Reports) {
        let names: Vec<String> = self.status.keys().cloned().collect();
        for name in names {
            let table = &core.sched.table;
            let cluster = core.sched.clusters().iter().find(|c| c.name == name);
            let mut st = MemberClusterStatus::default();
            let (mode, why) = self.placement_mode(&ctx.stores, &name);
            st.placement = Some(mode.as_str().to_string());
            st.placement_reason = Some(why);
            if let Err(e) = self.topology(&ctx.stores, &name) {
                st.topology_error = Some(e);
            }
            if let Some(c) = cluster {
                for (l, d) in c.levels.levels.iter().zip(&c.levels.per_level) {
                    st.topology_domains.insert(l.clone(), d.len() as u32);
                }
            }
            let reachable = self.told_reachable.get(&name).copied().unwrap_or(false);
            let (status, reason, message) = match (self.errors.get(&name), cluster) {
                (Some(e), _) if e.starts_with(secret_ref::FIELD) => {
                    ("False", secret_ref::REFUSED_REASON, e.clone())
                }
                (Some(e), _) => ("False", "Unreachable", e.clone()),
                (None, Some(c)) if reachable => (
                    "True",
                    "Watching",
                    format!("{} nodes watched", c.nodes.len()),
                ),
                (None, _) => (
                    "False",
                    "Unreachable",
                    "the member does not answer".to_string(),
                ),
            };
            if let Some(c) = cluster {
                st.nodes = c.nodes.len() as u32;
                if let Some(k) = &c.serves.kinds {
                    st.kinds = k.iter().map(|k| k.as_str().to_string()).collect();
                }
                st.priority_classes = c
                    .serves
                    .priority_classes
                    .as_ref()
                    .map(|p| p.iter().cloned().collect());
                st.runtimes = c
                    .serves
                    .runtimes
                    .as_ref()
                    .map(|r| r.keys().cloned().collect());
                st.stalled = c
                    .serves
                    .stalled
                    .iter()
                    .map(|(k, why)| (k.as_str().to_string(), why.clone()))
                    .collect();
                for r in (0..table.len()).map(|i| crate::resources::Res(i as u16)) {
                    if r == MAX_JOBS {
                        continue;
                    }
                    let alloc: i128 = c
                        .nodes
                        .iter()
                        .map(|n| crate::resources::at(&n.alloc, r))
                        .sum();
                    if alloc == 0 {
                        continue;
                    }
                    let free: i128 = c.nodes.iter().map(|n| n.free(r).max(0)).sum();
                    st.allocatable.insert(
                        table.name(r).to_string(),
                        Quantity::from_milli(alloc).to_string(),
                    );
                    st.free.insert(
                        table.name(r).to_string(),
                        Quantity::from_milli(free).to_string(),
                    );
                }
            }
            let prev = self
                .status
                .get(&name)
                .map(|(s, _)| s.clone())
                .unwrap_or_default();
            let prev_cond = prev.conditions.first();
            let same_cond = prev_cond.is_some_and(|c| c.status == status && c.message == message);
            let last_contact = self
                .members
                .get(&name)
                .and_then(|m| m.health.silent_for())
                .map(|d| {
                    super::clock::now()
                        .checked_sub(jiff::SignedDuration::from_secs(d.as_secs() as i64))
                        .unwrap_or_else(|_| super::clock::now())
                });
            st.conditions = vec![Condition {
                type_: "Ready".into(),
                status: status.into(),
                reason: reason.into(),
                message,
                last_transition_time: match prev_cond {
                    Some(c) if same_cond => c.last_transition_time.clone(),
                    _ => Time(super::clock::now()),
                },
                observed_generation: None,
            }];
            // Last contact moves every second: written when something else changed or every 30 s.
            let stale_contact = prev
                .last_contact
                .as_deref()
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                .is_none_or(|t| super::clock::now().duration_since(t).as_secs() > 30);
            st.last_contact = if stale_contact {
                last_contact.map(|t| t.to_string())
            } else {
                prev.last_contact.clone()
            };
            if st == prev {
                continue;
            }
            // Free capacity alone changes with every admission: written at most every
            // REPORT_EVERY; anything else at once.
            let mut figures = prev.clone();
            figures.free = st.free.clone();
            figures.allocatable = st.allocatable.clone();
            figures.last_contact = st.last_contact.clone();
            let urgent = figures != st;
            reports.send(ctx, core, Report::Member { name, status: st }, urgent);
        }
    }
}
