//! Kubeflow Trainer's training runtimes (`ClusterTrainingRuntime`, `TrainingRuntime`) as one
//! cluster has them: an index with `apply`/`delete`, fed by a watch (the controller) or a
//! scenario (the simulator). A TrainJob is read against the hub's index; a member is a candidate
//! for it only if its own index holds the same runtime (the same spec digest).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::InterpretError;

/// Which runtime: a `ClusterTrainingRuntime` by name, or a `TrainingRuntime` in a namespace.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RuntimeKey {
    /// `None` for a ClusterTrainingRuntime.
    pub namespace: Option<String>,
    pub name: String,
}

impl RuntimeKey {
    pub fn cluster(name: &str) -> Self {
        Self {
            namespace: None,
            name: name.to_string(),
        }
    }

    pub fn namespaced(namespace: &str, name: &str) -> Self {
        Self {
            namespace: Some(namespace.to_string()),
            name: name.to_string(),
        }
    }

    pub fn kind(&self) -> &'static str {
        if self.namespace.is_some() {
            "TrainingRuntime"
        } else {
            "ClusterTrainingRuntime"
        }
    }
}

impl fmt::Display for RuntimeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "TrainingRuntime {ns}/{}", self.name),
            None => write!(f, "ClusterTrainingRuntime {}", self.name),
        }
    }
}

/// What a TrainJob needs of a member: this runtime, with this spec digest.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RuntimeNeed {
    pub key: RuntimeKey,
    pub digest: String,
}

/// One runtime: its `spec` and the digest of that spec.
#[derive(Clone, Debug, PartialEq)]
pub struct TrainingRuntime {
    pub spec: Value,
    pub digest: String,
}

/// The runtimes one cluster has.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TrainingRuntimes {
    by_key: BTreeMap<RuntimeKey, TrainingRuntime>,
}

/// The digest of a runtime spec: FNV-1a over its JSON with object keys sorted (serde_json's
/// map is ordered), so the same spec read from two API servers has the same digest.
pub fn spec_digest(spec: &Value) -> String {
    crate::lifecycle::digest_text(&spec.to_string())
}

impl TrainingRuntimes {
    /// The key of a runtime object (`kind`, `metadata.name`, `metadata.namespace`).
    pub fn key_of(obj: &Value) -> Result<RuntimeKey, InterpretError> {
        let name = obj
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| InterpretError::new("metadata.name", "missing"))?;
        match obj.get("kind").and_then(Value::as_str) {
            Some("ClusterTrainingRuntime") => Ok(RuntimeKey::cluster(name)),
            Some("TrainingRuntime") => {
                let ns = obj
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .filter(|n| !n.is_empty())
                    .unwrap_or("default");
                Ok(RuntimeKey::namespaced(ns, name))
            }
            other => Err(InterpretError::new(
                "kind",
                format!("expected ClusterTrainingRuntime or TrainingRuntime, found {other:?}"),
            )),
        }
    }

    /// Adds or replaces a runtime from its object; returns its key.
    pub fn apply(&mut self, obj: &Value) -> Result<RuntimeKey, InterpretError> {
        let key = Self::key_of(obj)?;
        let spec = match obj.get("spec") {
            Some(s @ Value::Object(_)) => s.clone(),
            _ => {
                return Err(InterpretError::new(
                    "spec",
                    "missing: a runtime needs a spec",
                ));
            }
        };
        let digest = spec_digest(&spec);
        self.by_key
            .insert(key.clone(), TrainingRuntime { spec, digest });
        Ok(key)
    }

    pub fn delete(&mut self, key: &RuntimeKey) {
        self.by_key.remove(key);
    }

    pub fn get(&self, key: &RuntimeKey) -> Option<&TrainingRuntime> {
        self.by_key.get(key)
    }

    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// Every runtime's digest (what a member serves).
    pub fn digests(&self) -> BTreeMap<RuntimeKey, String> {
        self.by_key
            .iter()
            .map(|(k, r)| (k.clone(), r.digest.clone()))
            .collect()
    }

    /// The runtimes as objects again (what a snapshot writes).
    pub fn objects(&self) -> Vec<Value> {
        self.by_key
            .iter()
            .map(|(k, r)| {
                let mut meta = serde_json::json!({ "name": k.name });
                if let Some(ns) = &k.namespace {
                    meta["namespace"] = ns.clone().into();
                }
                serde_json::json!({
                    "apiVersion": "trainer.kubeflow.org/v1alpha1",
                    "kind": k.kind(),
                    "metadata": meta,
                    "spec": r.spec,
                })
            })
            .collect()
    }

    /// The index of these objects; the ones that cannot be read are returned with why.
    pub fn from_objects<'a>(
        objs: impl IntoIterator<Item = &'a Value>,
    ) -> (Self, Vec<InterpretError>) {
        let mut out = Self::default();
        let mut bad = Vec::new();
        for o in objs {
            if let Err(e) = out.apply(o) {
                bad.push(e);
            }
        }
        (out, bad)
    }
}
