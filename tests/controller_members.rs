//! Member kubeconfig Secrets as the controller reads them on the local fleet: one that would run a
//! program (an exec plugin) or read a file in the controller is refused before any client is
//! built, and the MemberCluster says so in `Ready=False`, naming the Secret, the key and each
//! field; the fleet's own members (inline credentials) stay Ready. Runs its own
//! `muster controller` against the fleet's hub (one at a time: `support::failures::HUB`).

// The std Mutex only serializes the tests of this binary; holding it across awaits is the point.
#![allow(clippy::await_holding_lock)]

mod support;

use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};
use support::failures::*;
use support::fleet::{self, kubeconfig_path, repo_root, unique_name, wait_for};
use support::hub::{self, CONTROLLER_NS, Controller};

/// A member whose kubeconfig (member-a's server and CA, inline) authenticates with an exec
/// plugin that would leave a marker file behind, and names a second user with a `tokenFile`:
/// `Ready=False`, reason `Unreachable`, the message naming the Secret, the key and both fields;
/// the plugin never ran. The fleet's members, registered with inline credentials, are Ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubeconfig_with_an_exec_plugin_is_refused_naming_the_field() {
    let _lock = HUB.lock().unwrap_or_else(|e| e.into_inner());
    let ns = unique_name("kc");
    let hub = setup(&[&ns], root(vec![leaf("kc", &ns)])).await;
    let member = unique_name("exec-member");
    let secret_name = format!("{member}-kubeconfig");
    let marker = repo_root()
        .join("target")
        .join("e2e")
        .join(format!("{member}-exec-ran"));
    let _ = std::fs::remove_file(&marker);

    let text = std::fs::read_to_string(kubeconfig_path("member-a")).expect("member-a kubeconfig");
    let mut kc: Value = serde_yaml::from_str(&text).expect("kubeconfig parses");
    let credential = r#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"x"}}"#;
    kc["users"][0]["user"] = json!({"exec": {
        "apiVersion": "client.authentication.k8s.io/v1",
        "command": "/bin/sh",
        "args": ["-c", format!("touch '{}'; echo '{credential}'", marker.display())],
        "interactiveMode": "Never"
    }});
    kc["users"]
        .as_array_mut()
        .expect("users")
        .push(json!({"name": "other", "user": {"tokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token"}}));
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(hub.clone(), CONTROLLER_NS);
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": secret_name, "namespace": CONTROLLER_NS},
        "stringData": {"kubeconfig": serde_yaml::to_string(&kc).expect("yaml")}
    });
    secrets
        .patch(
            &secret_name,
            &PatchParams::apply("muster-test").force(),
            &Patch::Apply(&secret),
        )
        .await
        .expect("Secret");
    let mcs = hub::member_clusters(&hub);
    let mc = json!({
        "apiVersion": "muster.dev/v1alpha1", "kind": "MemberCluster",
        "metadata": {"name": member},
        "spec": {"kubeconfigSecretRef": {"name": secret_name}}
    });
    mcs.patch(
        &member,
        &PatchParams::apply("muster-test").force(),
        &Patch::Apply(&mc),
    )
    .await
    .expect("MemberCluster");

    let controller = Controller::start("kc-exec", &[]).await;
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(async {
        let cond = wait_for("the exec member Ready=False", T, || async {
            let c = hub::ready_condition(&mcs, &member).await?;
            if c["status"] == "False" {
                Ok(c)
            } else {
                Err(format!("Ready: {c}"))
            }
        })
        .await;
        assert_eq!(cond["reason"], "Unreachable", "{cond}");
        let msg = cond["message"].as_str().unwrap_or_default();
        for part in [
            format!("Secret {CONTROLLER_NS}/{secret_name} key \"kubeconfig\": refused"),
            "users[0].user.exec: runs a program in the controller".to_string(),
            "users[1].user.tokenFile: reads a file in the controller".to_string(),
            "--allow-kubeconfig-files-and-exec".to_string(),
        ] {
            assert!(msg.contains(&part), "{part:?} not in the message: {msg}");
        }
        // The fleet's members carry inline credentials: accepted.
        for m in fleet::MEMBERS {
            wait_for(&format!("{m} Ready"), T, || async {
                let c = hub::ready_condition(&mcs, m).await?;
                if c["status"] == "True" {
                    Ok(())
                } else {
                    Err(format!("Ready: {c}"))
                }
            })
            .await;
        }
        // Still refused a resync later, and the plugin never ran.
        let c = hub::ready_condition(&mcs, &member).await.expect("read");
        assert_eq!(c["status"], "False", "{c}");
        assert!(
            !marker.exists(),
            "the exec plugin ran in the controller: {} exists",
            marker.display()
        );
    }))
    .await;
    let _ = mcs.delete(&member, &DeleteParams::default()).await;
    let _ = secrets.delete(&secret_name, &DeleteParams::default()).await;
    let _ = std::fs::remove_file(&marker);
    finish(&hub, &[&ns], vec![controller], outcome).await;
}
