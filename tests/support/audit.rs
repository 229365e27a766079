//! An auditor that watches every member's pods of muster's jobs for the whole of a test (a
//! watch per member, every event kept in order), so that a test can assert what held at every
//! instant, not only at the end: each pod bound exactly to the one node muster assigned it, and no
//! pod of a job released from its gate before every pod of the job existed.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use muster::controller::gates;
use muster::placement::PodSeen;
use tokio::task::JoinHandle;

use super::fleet;

/// One observation of one pod.
#[derive(Clone, Debug)]
pub struct Seen {
    pub member: String,
    pub uid: String,
    pub pod: PodSeen,
    pub gone: bool,
}

pub struct Auditor {
    log: Arc<Mutex<Vec<Seen>>>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Auditor {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Auditor {
    /// Starts watching the pods labelled `muster.dev/job-uid` on `members`; returns once every
    /// watch has listed.
    pub async fn start(members: &[&str]) -> Auditor {
        let log: Arc<Mutex<Vec<Seen>>> = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        let mut ready = Vec::new();
        for m in members {
            let client = fleet::watch_client_for(m).await;
            let api: Api<Pod> = Api::all(client);
            let (tx, rx) = tokio::sync::oneshot::channel::<()>();
            ready.push(rx);
            let log = log.clone();
            let member = m.to_string();
            tasks.push(tokio::spawn(async move {
                let mut tx = Some(tx);
                let cfg = watcher::Config::default().labels("muster.dev/job-uid");
                let mut stream = watcher::watcher(api, cfg).boxed();
                while let Some(ev) = stream.next().await {
                    let (pod, gone) = match ev {
                        Ok(Event::Apply(p)) | Ok(Event::InitApply(p)) => (p, false),
                        Ok(Event::Delete(p)) => (p, true),
                        Ok(Event::InitDone) => {
                            if let Some(tx) = tx.take() {
                                let _ = tx.send(());
                            }
                            continue;
                        }
                        _ => continue,
                    };
                    let uid = pod
                        .labels()
                        .get("muster.dev/job-uid")
                        .cloned()
                        .unwrap_or_default();
                    let seen = gates::seen(&pod);
                    if let Ok(mut l) = log.lock() {
                        l.push(Seen {
                            member: member.clone(),
                            uid,
                            pod: seen,
                            gone,
                        });
                    }
                }
            }));
        }
        for r in ready {
            let _ = r.await;
        }
        Auditor { log, tasks }
    }

    /// Everything seen so far of job `uid`, in order.
    pub fn of(&self, uid: &str) -> Vec<Seen> {
        self.log
            .lock()
            .map(|l| l.iter().filter(|s| s.uid == uid).cloned().collect())
            .unwrap_or_default()
    }

    /// Checks job `uid` over everything seen (`expected` pods in its first gang, the components
    /// in `staged` left out of it): every pod bound only to the one node its affinity names; no
    /// pod released before all `expected` pods existed. Returns the pods released, counted per
    /// pod name (a pod released twice would show 2).
    pub fn check(
        &self,
        uid: &str,
        expected: usize,
        staged: &[&str],
    ) -> Result<BTreeMap<String, u32>, String> {
        let seen = self.of(uid);
        let members: BTreeSet<&str> = seen.iter().map(|s| s.member.as_str()).collect();
        if members.len() > 1 {
            return Err(format!("pods of {uid} seen on {members:?}"));
        }
        let mut live: BTreeSet<String> = BTreeSet::new();
        let mut gated: BTreeSet<String> = BTreeSet::new();
        let mut releases: BTreeMap<String, u32> = BTreeMap::new();
        let mut first_release = true;
        for (i, s) in seen.iter().enumerate() {
            let p = &s.pod;
            if s.gone || p.finished {
                live.remove(&p.name);
            } else if !p.deleting {
                live.insert(p.name.clone());
            }
            if p.gated {
                gated.insert(p.name.clone());
            } else if gated.remove(&p.name) || !releases.contains_key(&p.name) && !s.gone {
                *releases.entry(p.name.clone()).or_insert(0) += 1;
                if first_release && !staged.contains(&p.component.as_str()) {
                    first_release = false;
                    let gang = live
                        .iter()
                        .filter(|n| {
                            seen[..=i]
                                .iter()
                                .rev()
                                .find(|o| &o.pod.name == *n)
                                .is_some_and(|o| !staged.contains(&o.pod.component.as_str()))
                        })
                        .count();
                    if gang < expected {
                        return Err(format!(
                            "event {i}: pod {} released while only {gang} of {expected} pods existed",
                            p.name
                        ));
                    }
                }
            }
            if let Some(node) = &p.bound {
                match p.assigned() {
                    Some(a) if a == node => {}
                    other => {
                        return Err(format!(
                            "event {i}: pod {} bound to {node}, assigned {other:?}",
                            p.name
                        ));
                    }
                }
            }
        }
        Ok(releases)
    }
}
