//! Job kinds: the kinds muster understands, their apiVersions and where each is suspended.
//! Nothing about their contents (that is [`super::interpret`]).

use std::fmt;

/// The job kinds muster understands.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum JobKind {
    PyTorchJob,
    TFJob,
    XGBoostJob,
    PaddleJob,
    JAXJob,
    MPIJob,
    Job,
    JobSet,
    RayJob,
    RayCluster,
    TrainJob,
}

const KUBEFLOW_V1: &str = "kubeflow.org/v1";
const KUBEFLOW_V2BETA1: &str = "kubeflow.org/v2beta1";
const BATCH_V1: &str = "batch/v1";
const JOBSET_V1ALPHA2: &str = "jobset.x-k8s.io/v1alpha2";
const RAY_V1: &str = "ray.io/v1";
const TRAINER_V1ALPHA1: &str = "trainer.kubeflow.org/v1alpha1";

impl JobKind {
    pub const ALL: [JobKind; 11] = [
        JobKind::PyTorchJob,
        JobKind::TFJob,
        JobKind::XGBoostJob,
        JobKind::PaddleJob,
        JobKind::JAXJob,
        JobKind::MPIJob,
        JobKind::Job,
        JobKind::JobSet,
        JobKind::RayJob,
        JobKind::RayCluster,
        JobKind::TrainJob,
    ];

    /// The kind as written in manifests (`PyTorchJob`, `Job`, ...).
    pub fn as_str(&self) -> &'static str {
        match self {
            JobKind::PyTorchJob => "PyTorchJob",
            JobKind::TFJob => "TFJob",
            JobKind::XGBoostJob => "XGBoostJob",
            JobKind::PaddleJob => "PaddleJob",
            JobKind::JAXJob => "JAXJob",
            JobKind::MPIJob => "MPIJob",
            JobKind::Job => "Job",
            JobKind::JobSet => "JobSet",
            JobKind::RayJob => "RayJob",
            JobKind::RayCluster => "RayCluster",
            JobKind::TrainJob => "TrainJob",
        }
    }

    /// The preferred apiVersion of the kind. MPIJob is also accepted as the training-operator's
    /// `kubeflow.org/v1` ([`JobKind::from_type`]); this returns the mpi-operator's v2beta1.
    pub fn api_version(&self) -> &'static str {
        match self {
            JobKind::PyTorchJob
            | JobKind::TFJob
            | JobKind::XGBoostJob
            | JobKind::PaddleJob
            | JobKind::JAXJob => KUBEFLOW_V1,
            JobKind::MPIJob => KUBEFLOW_V2BETA1,
            JobKind::Job => BATCH_V1,
            JobKind::JobSet => JOBSET_V1ALPHA2,
            JobKind::RayJob | JobKind::RayCluster => RAY_V1,
            JobKind::TrainJob => TRAINER_V1ALPHA1,
        }
    }

    /// Every apiVersion accepted for the kind.
    pub fn api_versions(&self) -> &'static [&'static str] {
        match self {
            JobKind::MPIJob => &[KUBEFLOW_V2BETA1, KUBEFLOW_V1],
            JobKind::PyTorchJob
            | JobKind::TFJob
            | JobKind::XGBoostJob
            | JobKind::PaddleJob
            | JobKind::JAXJob => &[KUBEFLOW_V1],
            JobKind::Job => &[BATCH_V1],
            JobKind::JobSet => &[JOBSET_V1ALPHA2],
            JobKind::RayJob | JobKind::RayCluster => &[RAY_V1],
            JobKind::TrainJob => &[TRAINER_V1ALPHA1],
        }
    }

    /// JSON pointer (RFC 6901) of the boolean that suspends the job, for a JSON patch.
    pub fn suspend_pointer(&self) -> &'static str {
        match self {
            JobKind::PyTorchJob
            | JobKind::TFJob
            | JobKind::XGBoostJob
            | JobKind::PaddleJob
            | JobKind::JAXJob
            | JobKind::MPIJob => "/spec/runPolicy/suspend",
            JobKind::Job
            | JobKind::JobSet
            | JobKind::RayJob
            | JobKind::RayCluster
            | JobKind::TrainJob => "/spec/suspend",
        }
    }

    /// Whether `job` (the job as JSON) is suspended: `true` at [`Self::suspend_pointer`]. Read
    /// without the allocations of `Value::pointer` (those pointers hold no escapes): intake
    /// asks it of every hub job on every pass.
    pub fn is_suspended(&self, job: &serde_json::Value) -> bool {
        self.suspend_pointer()
            .split('/')
            .skip(1)
            .try_fold(job, |v, k| v.get(k))
            .and_then(serde_json::Value::as_bool)
            == Some(true)
    }

    /// The kind for an (apiVersion, kind) pair, `None` when muster does not understand it.
    pub fn from_type(api_version: &str, kind: &str) -> Option<JobKind> {
        JobKind::ALL
            .into_iter()
            .find(|k| k.as_str() == kind && k.api_versions().contains(&api_version))
    }
}

impl fmt::Display for JobKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    #[test]
    fn is_suspended_reads_what_the_suspend_pointer_holds() {
        for kind in JobKind::ALL {
            let ptr = kind.suspend_pointer();
            let mut cases = vec![
                json!({}),
                json!({"spec": 1}),
                json!({"spec": {"runPolicy": []}}),
            ];
            for v in [json!(true), json!(false), json!("true"), Value::Null] {
                let mut job = json!({});
                let mut at = &mut job;
                for k in ptr.split('/').skip(1) {
                    at = &mut at[k];
                }
                *at = v;
                cases.push(job);
            }
            for job in cases {
                assert_eq!(
                    kind.is_suspended(&job),
                    job.pointer(ptr) == Some(&Value::Bool(true)),
                    "{kind} {job}"
                );
            }
        }
    }
}
