//! The committed CRD files against the Rust types, and on the local fleet's hub.
//!
//! - `crds/` and `charts/muster/crds/` hold exactly the CRDs `all_crds()` makes (one file per
//!   CRD, `<group>_<plural>.yaml`); any drift fails with the first differing field and
//!   "run `make crds`".
//! - The files, applied to the hub as they are, become Established; a sample object of each
//!   kind passes the API server's validation and a broken one is refused by it.

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use muster::controller::crd::{GENERATED_HEADER, all_crds, crd_files};
use serde_json::{Value, json};
use support::fleet::{self, client_for, ensure_fleet_up, repo_root, unique_name, wait_for};

const DIRS: [&str; 2] = ["crds", "charts/muster/crds"];

/// The first place two JSON values differ, as a path and both sides.
fn first_difference(path: &str, want: &Value, got: &Value) -> Option<String> {
    match (want, got) {
        (Value::Object(a), Value::Object(b)) => {
            for k in a.keys().chain(b.keys()) {
                let p = format!("{path}.{k}");
                match (a.get(k), b.get(k)) {
                    (Some(x), Some(y)) => {
                        if let Some(d) = first_difference(&p, x, y) {
                            return Some(d);
                        }
                    }
                    (x, y) => return Some(format!("{p}: types say {x:?}, file says {y:?}")),
                }
            }
            None
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => a
            .iter()
            .zip(b)
            .enumerate()
            .find_map(|(i, (x, y))| first_difference(&format!("{path}[{i}]"), x, y)),
        _ if want == got => None,
        _ => Some(format!("{path}: types say {want}, file says {got}")),
    }
}

/// Problems of one directory against the types (empty: in sync).
fn drift(dir: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    let expected: BTreeMap<String, Value> = all_crds()
        .into_iter()
        .map(|c| {
            (
                format!("{}_{}.yaml", c.spec.group, c.spec.names.plural),
                serde_json::to_value(c).expect("CRD to JSON"),
            )
        })
        .collect();
    let mut found = BTreeMap::new();
    match std::fs::read_dir(dir) {
        Ok(entries) => {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().to_string();
                if name.ends_with(".yaml") || name.ends_with(".yml") {
                    found.insert(name, e.path());
                }
            }
        }
        Err(e) => problems.push(format!("{}: {e}", dir.display())),
    }
    for (name, want) in &expected {
        let Some(path) = found.get(name) else {
            problems.push(format!("{name} is missing"));
            continue;
        };
        let text = std::fs::read_to_string(path).expect("readable");
        let docs: Vec<Value> = serde_yaml::Deserializer::from_str(&text)
            .map(|d| serde::Deserialize::deserialize(d).expect("YAML"))
            .collect();
        if docs.len() != 1 {
            problems.push(format!("{name}: {} YAML documents, want 1", docs.len()));
            continue;
        }
        if let Some(d) = first_difference("", want, &docs[0]) {
            problems.push(format!("{name}: {d}"));
        }
    }
    for name in found.keys().filter(|n| !expected.contains_key(*n)) {
        problems.push(format!("{name} is not a CRD muster serves (stale file?)"));
    }
    problems
}

#[test]
fn committed_crd_files_match_the_types() {
    let mut problems = Vec::new();
    for dir in DIRS {
        for p in drift(&repo_root().join(dir)) {
            problems.push(format!("{dir}/{p}"));
        }
    }
    assert!(
        problems.is_empty(),
        "the committed CRDs differ from src/controller/crd.rs; run `make crds` and commit:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn committed_crd_files_are_what_make_crds_writes() {
    // Byte for byte, header included: the files are generated, never edited.
    for dir in DIRS {
        for (name, text) in crd_files().expect("CRD YAML") {
            let path = repo_root().join(dir).join(&name);
            let got = std::fs::read_to_string(&path).unwrap_or_default();
            assert!(got.starts_with(GENERATED_HEADER), "{dir}/{name}: no header");
            assert!(got == text, "{dir}/{name} is not what `make crds` writes");
        }
    }
}

#[test]
fn drift_is_detected() {
    // The comparison itself: a changed description, a missing field and an extra file count.
    let crd = &all_crds()[0];
    let want = serde_json::to_value(crd).expect("json");
    let mut got = want.clone();
    got["spec"]["names"]["shortNames"] = json!(["x"]);
    let d = first_difference("", &want, &got).expect("a difference");
    assert!(d.starts_with(".spec.names.shortNames[0]"), "{d}");
    got = want.clone();
    got["spec"].as_object_mut().expect("spec").remove("scope");
    let d = first_difference("", &want, &got).expect("a difference");
    assert!(d.starts_with(".spec.scope"), "{d}");
    let dir = std::env::temp_dir().join(unique_name("crd-drift"));
    std::fs::create_dir_all(&dir).expect("temp dir");
    for (name, text) in crd_files().expect("files") {
        std::fs::write(dir.join(name), text).expect("write");
    }
    assert_eq!(drift(&dir), Vec::<String>::new());
    std::fs::write(dir.join("old_things.yaml"), "a: 1\n").expect("write");
    let p = drift(&dir);
    assert!(p.len() == 1 && p[0].contains("old_things.yaml"), "{p:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

fn read_crd_files(dir: &str) -> Vec<CustomResourceDefinition> {
    let mut files: Vec<_> = std::fs::read_dir(repo_root().join(dir))
        .expect("crds/")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 3, "{files:?}");
    files
        .iter()
        .map(|p| {
            serde_yaml::from_str(&std::fs::read_to_string(p).expect("read"))
                .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        })
        .collect()
}

fn api_for(
    crd: &CustomResourceDefinition,
    ns: Option<&str>,
    client: &kube::Client,
) -> Api<DynamicObject> {
    let v = &crd.spec.versions[0].name;
    let gvk = GroupVersionKind::gvk(&crd.spec.group, v, &crd.spec.names.kind);
    let ar = ApiResource::from_gvk_with_plural(&gvk, &crd.spec.names.plural);
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    }
}

fn condition(crd: &CustomResourceDefinition, type_: &str) -> Option<String> {
    crd.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.clone())
}

/// Validation through the API server without storing anything (server-side dry run).
async fn dry_run_create(api: &Api<DynamicObject>, obj: Value) -> kube::Result<DynamicObject> {
    let obj: DynamicObject = serde_json::from_value(obj).expect("object");
    api.create(
        &PostParams {
            dry_run: true,
            ..Default::default()
        },
        &obj,
    )
    .await
}

fn refused(r: kube::Result<DynamicObject>, field: &str) -> String {
    match r {
        Err(kube::Error::Api(e)) if e.code == 422 && e.message.contains(field) => e.message,
        other => panic!("expected 422 naming {field}, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crd_files_install_on_the_hub_and_validate() {
    ensure_fleet_up();
    let hub = client_for("hub").await;
    let crds_api: Api<CustomResourceDefinition> = Api::all(hub.clone());
    let crds = read_crd_files("crds");
    for crd in &crds {
        let name = crd.metadata.name.clone().expect("name");
        crds_api
            .patch(
                &name,
                &PatchParams::apply("muster-crds-test").force(),
                &Patch::Apply(crd),
            )
            .await
            .unwrap_or_else(|e| panic!("applying {name}: {e}"));
    }
    let mut by_kind = BTreeMap::new();
    for crd in &crds {
        let name = crd.metadata.name.clone().expect("name");
        let live = wait_for(
            &format!("CRD {name} Established"),
            Duration::from_secs(60),
            || {
                let (api, name) = (crds_api.clone(), name.clone());
                async move {
                    let c = api.get(&name).await.map_err(|e| e.to_string())?;
                    let ok = condition(&c, "Established").as_deref() == Some("True")
                        && condition(&c, "NamesAccepted").as_deref() == Some("True");
                    if ok {
                        Ok(c)
                    } else {
                        Err(format!("{:?}", c.status))
                    }
                }
            },
        )
        .await;
        if crd.spec.group.ends_with(".k8s.io") {
            // A *.k8s.io group needs the approval annotation; the API server says whether it
            // is acceptable.
            assert_eq!(
                condition(&live, "KubernetesAPIApprovalPolicyConformant").as_deref(),
                Some("True"),
                "{name}: {:?}",
                live.status
            );
        }
        by_kind.insert(crd.spec.names.kind.clone(), live);
    }
    assert_eq!(
        by_kind.keys().map(String::as_str).collect::<Vec<_>>(),
        ["ElasticQuotaTree", "MemberCluster", "QueuedJob"]
    );

    // MemberCluster (cluster-scoped).
    let mc = api_for(&by_kind["MemberCluster"], None, &hub);
    let sample = |spec: Value| {
        json!({"apiVersion": "muster.dev/v1alpha1", "kind": "MemberCluster",
               "metadata": {"name": "crd-sample", "labels": {"region": "eu"}}, "spec": spec})
    };
    dry_run_create(
        &mc,
        sample(
            json!({"kubeconfigSecretRef": {"name": "member-a-kubeconfig", "key": "kubeconfig"}}),
        ),
    )
    .await
    .expect("a valid MemberCluster is accepted");
    refused(
        dry_run_create(&mc, sample(json!({}))).await,
        "kubeconfigSecretRef",
    );
    refused(
        dry_run_create(&mc, sample(json!({"kubeconfigSecretRef": {"name": 7}}))).await,
        "kubeconfigSecretRef.name",
    );

    // ElasticQuotaTree (namespaced, in the upstream group).
    let eqt = api_for(&by_kind["ElasticQuotaTree"], Some("kube-system"), &hub);
    let tree = |spec: Value| {
        json!({"apiVersion": "scheduling.sigs.k8s.io/v1beta1", "kind": "ElasticQuotaTree",
               "metadata": {"name": "crd-sample", "namespace": "kube-system"}, "spec": spec})
    };
    dry_run_create(
        &eqt,
        tree(
            json!({"root": {"name": "root", "max": {"cpu": "10", "nvidia.com/gpu": "4"},
            "children": [{"name": "team-a", "namespaces": ["team-a"], "min": {"cpu": "2"},
                          "attributes": {"kube-queue/max-jobs": "3"}}]}}),
        ),
    )
    .await
    .expect("a valid ElasticQuotaTree is accepted, nested children and all");
    refused(dry_run_create(&eqt, tree(json!({}))).await, "spec.root");
    refused(
        dry_run_create(&eqt, tree(json!({"root": "everything"}))).await,
        "spec.root",
    );

    // QueuedJob (namespaced), and its status schema through the status subresource.
    let ns = unique_name("crds");
    fleet::create_namespace(&hub, &ns).await;
    let qj = api_for(&by_kind["QueuedJob"], Some(&ns), &hub);
    let queued = |job_ref: Value| {
        json!({"apiVersion": "muster.dev/v1alpha1", "kind": "QueuedJob",
               "metadata": {"name": "pytorchjob-sample", "namespace": ns},
               "spec": {"jobRef": job_ref}})
    };
    let good_ref = json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                          "name": "sample", "uid": "0b1c2d3e-0000-4000-8000-000000000001"});
    refused(
        dry_run_create(
            &qj,
            queued(json!({"apiVersion": "v1", "kind": "Job", "name": "x"})),
        )
        .await,
        "uid",
    );
    let result = async {
        let obj: DynamicObject = serde_json::from_value(queued(good_ref)).expect("object");
        qj.create(&PostParams::default(), &obj)
            .await
            .expect("a valid QueuedJob is stored");
        let status = |state: &str| {
            json!({"apiVersion": "muster.dev/v1alpha1", "kind": "QueuedJob",
                   "status": {"state": state, "queue": "root/team-a", "cluster": "member-c",
                              "placement": {"worker": {"c": 2}},
                              "pods": {"expected": 3, "scheduled": 3, "running": 3}}})
        };
        let pp = PatchParams {
            dry_run: true,
            ..PatchParams::apply("muster-crds-test")
        };
        qj.patch_status("pytorchjob-sample", &pp, &Patch::Apply(status("Running")))
            .await
            .expect("a valid status is accepted");
        match qj
            .patch_status("pytorchjob-sample", &pp, &Patch::Apply(status("Sleeping")))
            .await
        {
            Err(kube::Error::Api(e)) if e.code == 422 && e.message.contains("status.state") => {}
            other => panic!("an unknown state must be refused, got {other:?}"),
        }
    };
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(result)).await;
    let _ = qj
        .delete("pytorchjob-sample", &DeleteParams::default())
        .await;
    fleet::delete_namespace(&hub, &ns).await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e);
    }
}
