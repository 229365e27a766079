//! The job kinds muster manages, as API resources: group, version, plural, and how each is
//! found on a cluster. Nothing else.

use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::core::GroupVersionKind;

use crate::workload::JobKind;

/// The API resource for a kind, at its preferred version.
pub fn api_resource(kind: JobKind) -> ApiResource {
    let (group, version) = match kind.api_version().split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", kind.api_version()),
    };
    let plural = format!("{}s", kind.as_str().to_lowercase());
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(group, version, kind.as_str()),
        &plural,
    )
}

/// The kinds whose resource a cluster serves (a kind with no CRD installed is skipped rather
/// than watched forever). Errors other than "not found" are returned: the caller retries.
pub async fn served(client: &Client) -> Result<Vec<JobKind>, kube::Error> {
    let mut out = Vec::new();
    for kind in JobKind::ALL {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &api_resource(kind));
        match api.list_metadata(&ListParams::default().limit(1)).await {
            Ok(_) => out.push(kind),
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plurals_and_groups() {
        let r = api_resource(JobKind::PyTorchJob);
        assert_eq!(
            (r.group.as_str(), r.version.as_str(), r.plural.as_str()),
            ("kubeflow.org", "v1", "pytorchjobs")
        );
        let r = api_resource(JobKind::Job);
        assert_eq!(
            (r.group.as_str(), r.api_version.as_str(), r.plural.as_str()),
            ("batch", "batch/v1", "jobs")
        );
        let r = api_resource(JobKind::MPIJob);
        assert_eq!(
            (r.api_version.as_str(), r.plural.as_str()),
            ("kubeflow.org/v2beta1", "mpijobs")
        );
        assert_eq!(api_resource(JobKind::JobSet).plural, "jobsets");
        assert_eq!(api_resource(JobKind::RayCluster).plural, "rayclusters");
    }
}
