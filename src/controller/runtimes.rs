//! Kubeflow Trainer's training runtimes as one cluster has them: the watches of its
//! `ClusterTrainingRuntime`s and `TrainingRuntime`s and the index built from them. On the hub
//! they are what TrainJobs are read against; on a member, what it serves.

use std::sync::Arc;

use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::GroupVersionKind;
use kube::{Client, ResourceExt};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::members::{Watched, optional_watch};
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
}

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
            }),
            _ => None,
        })
    }

    pub fn is_ready(&self) -> bool {
        self.cluster.is_ready() && self.namespaced.is_ready()
    }

    /// The runtimes as last seen. A runtime that cannot be read (no spec) is left out, logged.
    pub fn index(&self) -> TrainingRuntimes {
        let mut objs = Vec::new();
        for (kind, w) in [
            ("ClusterTrainingRuntime", &self.cluster),
            ("TrainingRuntime", &self.namespaced),
        ] {
            for o in w.state() {
                // Items of a list carry no kind: the watch says which.
                let mut v = serde_json::to_value(o.as_ref()).unwrap_or_default();
                v["kind"] = kind.into();
                objs.push((o.name_any(), v));
            }
        }
        let (index, bad) = TrainingRuntimes::from_objects(objs.iter().map(|(_, v)| v));
        for e in bad {
            tracing::warn!(error = %e, "a training runtime cannot be read; TrainJobs naming it wait");
        }
        index
    }
}
