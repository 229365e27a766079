//! A tenant tries to get around the queue on the local fleet. The tenant has namespace-admin
//! rights on the hub, as a real cluster grants them (the `admin` ClusterRole bound in its
//! namespace), and more: a Role that lets it write QueuedJobs, as an over-broad aggregation
//! might. The hub runs the chart's ValidatingAdmissionPolicies (rendered from charts/muster) and
//! Pod Security `restricted` in the tenant's namespace. Every attempt is made as the tenant
//! (impersonated), each is refused or has no effect, and its answer is printed; throughout, a
//! watchdog watches every member and the queued job stays queued: nothing is admitted out of
//! order. Runs its own `muster controller` (one at a time: `support::failures::HUB`).

// The std Mutex only serializes the tests of this binary; holding it across awaits is the point.
#![allow(clippy::await_holding_lock)]

mod support;

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use muster::controller::crd::QueuedJobState;
use serde_json::{Value, json};
use support::failures::*;
use support::fleet::{self, client_for, kubeconfig_path, unique_name, wait_for};
use support::helm;
use support::hub::{self, Controller};
use support::watchdog::Watchdog;

/// A client of the hub acting as `user` (impersonated by the fleet's admin).
async fn as_user(user: &str) -> Client {
    as_user_on("hub", user).await
}

/// A client of `cluster` acting as `user` (impersonated by the fleet's admin).
async fn as_user_on(cluster: &str, user: &str) -> Client {
    let mut kc = Kubeconfig::read_from(kubeconfig_path(cluster)).expect("kubeconfig");
    for a in &mut kc.auth_infos {
        if let Some(info) = a.auth_info.as_mut() {
            info.impersonate = Some(user.to_string());
            info.impersonate_groups = Some(vec!["system:authenticated".into()]);
        }
    }
    let cfg = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("config");
    Client::try_from(fleet::bounded(cfg)).expect("client")
}

/// The answer to one attempt, printed; the refusal's message when refused.
fn refused<T>(what: &str, r: kube::Result<T>) -> String {
    match r {
        Ok(_) => panic!("{what}: the hub took it"),
        Err(kube::Error::Api(e)) => {
            eprintln!("attempt: {what}\n  refused: HTTP {} {}", e.code, e.message);
            e.message
        }
        Err(e) => panic!("{what}: not an answer of the hub: {e}"),
    }
}

/// The chart's ValidatingAdmissionPolicies and bindings, applied to the hub.
async fn apply_policies(hub: &Client) -> Vec<(String, String)> {
    let docs = helm::render(&[]);
    let mut applied = Vec::new();
    let pp = PatchParams::apply("muster-tenant-test").force();
    for d in docs {
        let name = d["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        match d["kind"].as_str() {
            Some("ValidatingAdmissionPolicy") => {
                let api: Api<ValidatingAdmissionPolicy> = Api::all(hub.clone());
                api.patch(&name, &pp, &Patch::Apply(&d))
                    .await
                    .expect("the chart's policy applies");
                applied.push(("policy".to_string(), name));
            }
            Some("ValidatingAdmissionPolicyBinding") => {
                let api: Api<ValidatingAdmissionPolicyBinding> = Api::all(hub.clone());
                api.patch(&name, &pp, &Patch::Apply(&d))
                    .await
                    .expect("the chart's binding applies");
                applied.push(("binding".to_string(), name));
            }
            _ => {}
        }
    }
    assert_eq!(applied.len(), 4, "{applied:?}");
    applied
}

async fn remove_policies(hub: &Client, applied: &[(String, String)]) {
    for (kind, name) in applied {
        let dp = DeleteParams::default();
        if kind == "policy" {
            let _ = Api::<ValidatingAdmissionPolicy>::all(hub.clone())
                .delete(name, &dp)
                .await;
        } else {
            let _ = Api::<ValidatingAdmissionPolicyBinding>::all(hub.clone())
                .delete(name, &dp)
                .await;
        }
    }
}

/// The `admin` ClusterRole bound to `user` in `ns`: a namespace admin.
async fn grant_admin(client: &Client, ns: &str, user: &str) {
    let rb: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "tenant-admin", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]
    }))
    .expect("rolebinding");
    Api::<RoleBinding>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &rb)
        .await
        .expect("bind admin");
}

/// RBAC as a real cluster grants a namespace admin, plus writes to QueuedJobs.
async fn grant(hub: &Client, ns: &str, user: &str) {
    grant_admin(hub, ns, user).await;
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": "tenant-queuedjobs", "namespace": ns},
        "rules": [{"apiGroups": ["muster.dev"], "resources": ["queuedjobs", "queuedjobs/status"],
                   "verbs": ["get", "list", "create", "update", "patch"]}]
    }))
    .expect("role");
    Api::<Role>::namespaced(hub.clone(), ns)
        .create(&PostParams::default(), &role)
        .await
        .expect("queuedjobs role");
    let rb: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "tenant-queuedjobs", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "tenant-queuedjobs"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]
    }))
    .expect("rolebinding");
    Api::<RoleBinding>::namespaced(hub.clone(), ns)
        .create(&PostParams::default(), &rb)
        .await
        .expect("bind queuedjobs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_admin_cannot_get_around_the_queue() {
    let _lock = HUB.lock().unwrap_or_else(|e| e.into_inner());
    let ns = unique_name("tenant");
    let user = format!("{ns}-admin");
    // 8 GPUs in the tenant's leaf: the first job (4 GPUs, on member-c's 8-GPU node: no other
    // node holds 4) runs, the second (8) waits for quota.
    let tree = json!({"name": "root", "max": {"nvidia.com/gpu": "8"}, "children": [
        {"name": "tenant", "namespaces": [ns], "max": {"nvidia.com/gpu": "8"}}]});
    let hub = setup(&[&ns], tree).await;
    Api::<Namespace>::all(hub.clone())
        .patch(
            &ns,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {
                "pod-security.kubernetes.io/enforce": "restricted"}}})),
        )
        .await
        .expect("restricted");
    grant(&hub, &ns, &user).await;
    let applied = apply_policies(&hub).await;
    let dog = Watchdog::start(&hub, &fleet::MEMBERS, &[&ns]).await;
    let controller = Controller::start("tenant", &[]).await;
    let tenant = as_user(&user).await;
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(async {
        let jobs: Api<DynamicObject> =
            fleet::dynamic_api(&tenant, "batch/v1", "Job", "jobs", Some(&ns));
        fleet::create_json(&tenant, "jobs", restricted_job(&ns, "first", 4))
            .await
            .expect("the tenant submits");
        hub::wait_queued_state(&hub, &ns, "Job", "first", QueuedJobState::Running, T).await;
        fleet::create_json(&tenant, "jobs", restricted_job(&ns, "second", 8))
            .await
            .expect("the tenant submits again");
        let q = hub::wait_queued_state(&hub, &ns, "Job", "second", QueuedJobState::Queued, T).await;
        eprintln!(
            "second waits: {}",
            q.status
                .as_ref()
                .and_then(|s| s.reason.clone())
                .unwrap_or_default()
        );

        // 1. Unsuspend the queued job. muster's mutating webhook suspends it again on UPDATE
        //    (the policy then sees a suspended job); without the webhook, the policy refuses.
        let what = "unsuspend the queued job (spec.suspend: false)";
        match jobs
            .patch(
                "second",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"suspend": false}})),
            )
            .await
        {
            Ok(o) => {
                assert_eq!(o.data["spec"]["suspend"], json!(true), "{what}: {o:?}");
                eprintln!("attempt: {what}\n  no effect: muster's webhook kept it suspended");
            }
            Err(e) => {
                let m = refused(what, Err::<(), _>(e));
                assert!(m.contains("muster") && m.contains("unsuspend"), "{m}");
            }
        }
        // The same with muster's webhook out of the way (a failure policy of Ignore while
        // muster is down): the policy refuses it.
        hub::delete_webhook(&hub).await;
        // The API server stops calling a deleted webhook once its own view of the
        // configurations catches up (milliseconds to a second): until then the webhook still
        // suspends the job again, which is no answer to this question yet.
        let what = "unsuspend the queued job with muster's webhook gone";
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let m = loop {
            let r = jobs
                .patch(
                    "second",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"suspend": false}})),
                )
                .await;
            match r {
                Ok(o)
                    if o.data["spec"]["suspend"] == json!(true)
                        && std::time::Instant::now() < deadline =>
                {
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                }
                r => break refused(what, r),
            }
        };
        assert!(m.contains("muster") && m.contains("unsuspend"), "{m}");
        // 2. Claim an admission with muster's marks.
        let m = refused(
            "set muster.dev/admission and muster.dev/job-uid on the queued job",
            jobs.patch(
                "second",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {
                    "annotations": {"muster.dev/admission": "1"},
                    "labels": {"muster.dev/job-uid": "forged"}}})),
            )
            .await,
        );
        assert!(m.contains("muster") && m.contains("marks"), "{m}");
        // 3. Forge a record: create a QueuedJob, and edit the queued job's.
        let qjs: Api<DynamicObject> = fleet::dynamic_api(
            &tenant,
            "muster.dev/v1alpha1",
            "QueuedJob",
            "queuedjobs",
            Some(&ns),
        );
        let forged: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "muster.dev/v1alpha1", "kind": "QueuedJob",
            "metadata": {"name": "job-forged", "namespace": ns},
            "spec": {"jobRef": {"apiVersion": "batch/v1", "kind": "Job", "name": "forged",
                                "uid": "00000000-0000-0000-0000-000000000000"}}
        }))
        .expect("queuedjob");
        let m = refused(
            "create a QueuedJob",
            qjs.create(&PostParams::default(), &forged).await,
        );
        assert!(m.contains("muster") && m.contains("records"), "{m}");
        let name = q.metadata.name.clone().expect("queuedjob name");
        let m = refused(
            "write the queued job's record as Running on member-c",
            qjs.patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"state": "Running", "cluster": "member-c"}})),
            )
            .await,
        );
        assert!(m.contains("muster") && m.contains("records"), "{m}");
        // 4. A privileged pod spec into the restricted namespace.
        let mut bad = restricted_job(&ns, "privileged", 1);
        bad["spec"]["template"]["spec"]["containers"][0]["securityContext"] =
            json!({"privileged": true});
        fleet::create_json(&tenant, "jobs", bad)
            .await
            .expect("the hub takes the Job itself");
        let r = hub::wait_queued_state(&hub, &ns, "Job", "privileged", QueuedJobState::Rejected, T)
            .await;
        let reason = r.status.and_then(|s| s.reason).unwrap_or_default();
        eprintln!(
            "attempt: a privileged pod template in a restricted namespace\n  rejected: {reason}"
        );
        assert!(reason.contains("PodSecurity"), "{reason}");

        // 5. Hide capacity on the member: a pod of the tenant's own on member-c's node, labelled
        //    with the running job's UID (visible in every copy's labels), holding the node's
        //    last 4 GPUs. A 4-GPU job within quota must then wait: were the pod left out of the
        //    node's usage, muster would admit it there and its pod would stay Pending.
        let first_uid = fleet::dynamic_api(&hub, "batch/v1", "Job", "jobs", Some(&ns))
            .get("first")
            .await
            .expect("first")
            .metadata
            .uid
            .expect("uid");
        let member = client_for("member-c").await;
        grant_admin(&member, &ns, &user).await;
        let tenant_on_member = as_user_on("member-c", &user).await;
        let mut squatter = restricted_job(&ns, "squatter", 4)["spec"]["template"].clone();
        squatter["apiVersion"] = json!("v1");
        squatter["kind"] = json!("Pod");
        squatter["metadata"] = json!({"name": "squatter", "namespace": ns,
            "labels": {"muster.dev/job-uid": first_uid}});
        squatter["spec"]["nodeName"] = json!("c");
        fleet::create_json(&tenant_on_member, "pods", squatter)
            .await
            .expect("the tenant may create pods in its namespace on the member");
        wait_for("the squatter running", T, || async {
            let p = Api::<Pod>::namespaced(member.clone(), &ns)
                .get("squatter")
                .await;
            match p.ok().and_then(|p| p.status).and_then(|s| s.phase) {
                Some(ph) if ph == "Running" => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
        fleet::create_json(&tenant, "jobs", restricted_job(&ns, "third", 4))
            .await
            .expect("third");
        let q = hub::wait_queued_state(&hub, &ns, "Job", "third", QueuedJobState::Queued, T).await;
        tokio::time::sleep(std::time::Duration::from_secs(10)).await;
        let states = dog.states_of(&format!("{ns}/third"));
        eprintln!(
            "attempt: label a pod of the tenant's on member-c with the running job's UID
  no effect: third stayed {states:?} for 10 s: {}",
            q.status.and_then(|s| s.reason).unwrap_or_default()
        );
        assert!(!states.is_empty(), "no record of third seen");
        assert!(
            states.iter().all(|s| *s == QueuedJobState::Queued),
            "third was admitted past the squatter: {states:?}"
        );
        // The squatter gone, third runs: it was what held the node.
        Api::<Pod>::namespaced(member.clone(), &ns)
            .delete("squatter", &DeleteParams::default().grace_period(0))
            .await
            .expect("delete the squatter");
        hub::wait_queued_state(&hub, &ns, "Job", "third", QueuedJobState::Running, T).await;

        // 6. Read /snapshot from another address than the pod's own loopback (as from the pod
        //    network), and on the metrics port.
        let snap = format!("127.0.0.2:{}", controller.snapshot);
        let r = std::net::TcpStream::connect_timeout(
            &snap.parse().expect("address"),
            std::time::Duration::from_secs(2),
        );
        eprintln!(
            "attempt: connect to /snapshot's port at {snap}
  got: {r:?}"
        );
        assert!(r.is_err(), "/snapshot answers on {snap}");
        let on_metrics = format!("http://127.0.0.1:{}/snapshot", controller.http);
        eprintln!(
            "attempt: GET {on_metrics}
  got: HTTP {:?}: {}",
            hub::http_status(&on_metrics),
            hub::http_get(&on_metrics)
                .lines()
                .next()
                .unwrap_or_default()
        );
        assert_eq!(hub::http_status(&on_metrics), Some(404));

        // Nothing moved out of order: the second job still waits, on no member; the first runs.
        let st = hub::queued_job(&hub, &ns, "Job", "second")
            .await
            .and_then(|q| q.status)
            .expect("second's record");
        assert_eq!(st.state, QueuedJobState::Queued, "{st:?}");
        assert!(st.cluster.is_none(), "{st:?}");
        assert!(
            hub::members_with("batch/v1", "Job", "jobs", &ns, "second")
                .await
                .is_empty()
        );
        let seen = dog.pods_seen();
        assert!(seen.iter().any(|p| p.contains("/first-")), "{seen:?}");
        assert!(
            !seen
                .iter()
                .any(|p| p.contains("/second-") || p.contains("/privileged-")),
            "{seen:?}"
        );
        dog.assert_clean("tenant").await;

        // 7. A MemberCluster naming a Secret of the tenant's namespace. The tenant cannot make
        //    one (cluster-scoped); made by someone who can, muster refuses to read the Secret.
        let kc = std::fs::read_to_string(kubeconfig_path("member-a")).expect("kubeconfig");
        fleet::create_json(
            &tenant,
            "secrets",
            json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "my-cluster", "namespace": ns},
            "stringData": {"kubeconfig": kc}}),
        )
        .await
        .expect("a Secret in its own namespace");
        let mc = json!({"apiVersion": "muster.dev/v1alpha1", "kind": "MemberCluster",
            "metadata": {"name": format!("{ns}-mc")},
            "spec": {"kubeconfigSecretRef": {"name": "my-cluster", "namespace": ns}}});
        refused(
            "create a MemberCluster naming a Secret of its namespace",
            fleet::create_json(&tenant, "memberclusters", mc.clone()).await,
        );
        fleet::create_json(&hub, "memberclusters", mc)
            .await
            .expect("an admin may");
        let mcs = hub::member_clusters(&hub);
        let cond = wait_for("the MemberCluster's Ready condition", T, || async {
            match hub::ready_condition(&mcs, &format!("{ns}-mc")).await? {
                Value::Null => Err("no Ready condition yet".to_string()),
                c => Ok(c),
            }
        })
        .await;
        let _ = mcs
            .delete(&format!("{ns}-mc"), &DeleteParams::default())
            .await;
        eprintln!(
            "attempt: a MemberCluster naming the tenant's Secret, made by an admin
  got: {cond}"
        );
        assert_eq!(cond["status"], "False", "{cond}");
        assert_eq!(cond["reason"], "SecretNamespaceRefused", "{cond}");
        assert!(
            cond["message"]
                .as_str()
                .unwrap_or_default()
                .contains("spec.kubeconfigSecretRef.namespace"),
            "{cond}"
        );
    }))
    .await;
    remove_policies(&hub, &applied).await;
    finish(&hub, &[&ns], vec![controller], outcome).await;
}
