//! Kubeflow Trainer's training runtimes as one cluster has them: the watches of its
//! `ClusterTrainingRuntime`s and `TrainingRuntime`s and the index built from them. On the hub
//! they are what TrainJobs are read against; on a member, what it serves.

use std::sync::{Arc, Mutex};

use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::GroupVersionKind;
use kube::{Client, ResourceExt};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::watches::{Watched, optional_watch};
use crate::workload::TrainingRuntimes;

const GROUP: &str = "trainer.kubeflow.org";
const VERSION: &str = "v1alpha1";

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, kind), plural)
}

/// The two runtime watches of one cluster.
pub struct Watches {
    cluster: Watched<DynamicObject>,
    namespaced: Watched<DynamicObject>,
    /// The index last built, and the (uid, resourceVersion) of the objects it was built from.
    cache: Mutex<Option<Versioned>>,
}

type Versioned = (Vec<(Option<String>, Option<String>)>, TrainingRuntimes);

impl Watches {
    /// Starts both watches; `None` (logged) when the cluster does not let muster list them or
    /// does not serve them.
    pub async fn start(
        cluster: &str,
        client: &Client,
        wake: &Arc<Notify>,
        tasks: &mut Vec<JoinHandle<()>>,
    ) -> anyhow::Result<Option<Self>> {
        let without = "TrainJobs' runtimes are not checked on this cluster";
        let mut watch = async |kind: &str, plural: &str| {
            let ar = resource(kind, plural);
            optional_watch(
                cluster,
                Api::<DynamicObject>::all_with(client.clone(), &ar),
                ar,
                None,
                without,
                wake,
                tasks,
            )
            .await
        };
        let c = watch("ClusterTrainingRuntime", "clustertrainingruntimes").await?;
        let n = watch("TrainingRuntime", "trainingruntimes").await?;
        Ok(match (c, n) {
            (Some(cluster), Some(namespaced)) => Some(Self {
                cluster,
                namespaced,
                cache: Mutex::new(None),
            }),
            _ => None,
        })
    }

    pub fn is_ready(&self) -> bool {
        self.cluster.is_ready() && self.namespaced.is_ready()
    }

    /// The runtimes as last seen. Built again (and a runtime that cannot be read, with no
    /// spec, logged) only when one of them changed: every sync pass asks.
    pub fn index(&self) -> TrainingRuntimes {
        let watches = [
            ("ClusterTrainingRuntime", &self.cluster),
            ("TrainingRuntime", &self.namespaced),
        ];
        let objects: Vec<(&str, _)> = watches
            .iter()
            .flat_map(|(kind, w)| w.state().into_iter().map(move |o| (*kind, o)))
            .collect();
        let versions: Vec<(Option<String>, Option<String>)> = objects
            .iter()
            .map(|(_, o)| (o.uid(), o.resource_version()))
            .collect();
        if let Ok(cache) = self.cache.lock()
            && let Some((v, index)) = cache.as_ref()
            && *v == versions
        {
            return index.clone();
        }
        let objs: Vec<serde_json::Value> = objects
            .iter()
            .map(|(kind, o)| {
                // Items of a list carry no kind: the watch says which.
                let mut v = serde_json::to_value(o.as_ref()).unwrap_or_default();
                v["kind"] = (*kind).into();
                v
            })
            .collect();
        let (index, bad) = TrainingRuntimes::from_objects(&objs);
        for e in bad {
            tracing::warn!(error = %e, "a training runtime cannot be read; TrainJobs naming it wait");
        }
        if let Ok(mut cache) = self.cache.lock() {
            *cache = Some((versions, index.clone()));
        }
        index
    }
}
