//! The hub's admission holds for the pods that run on members, on the local fleet: a namespace
//! that enforces Pod Security `restricted` on the hub refuses a privileged pod template in a
//! server-side dry run, so the job is Rejected with the hub's words and the template's field
//! path and never reaches a member; a job that complies runs, and the namespace muster makes on
//! the member carries the hub namespace's pod-security labels. A watchdog watches every member
//! and the hub's records throughout. Runs its own `muster controller` (one at a time:
//! `support::failures::HUB`).

// The std Mutex only serializes the tests of this binary; holding it across awaits is the point.
#![allow(clippy::await_holding_lock)]

mod support;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, Patch, PatchParams};
use muster::controller::crd::QueuedJobState;
use serde_json::{Value, json};
use support::failures::*;
use support::fleet::{self, client_for, unique_name, wait_for};
use support::hub::{self, Controller};
use support::watchdog::Watchdog;

const ENFORCE: &str = "pod-security.kubernetes.io/enforce";

/// A one-pod batch Job with 2 GPUs; `privileged` adds what `restricted` forbids (a privileged
/// container and a hostPath volume), otherwise the pod complies with `restricted`.
fn job(ns: &str, name: &str, privileged: bool) -> Value {
    let mut job = restricted_job(ns, name, 2);
    if privileged {
        let pod = &mut job["spec"]["template"]["spec"];
        pod["containers"][0]["securityContext"] = json!({"privileged": true});
        pod["containers"][0]["volumeMounts"] = json!([{"name": "host", "mountPath": "/host"}]);
        pod["volumes"] = json!([{"name": "host", "hostPath": {"path": "/"}}]);
    }
    job
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_template_the_hub_refuses_is_rejected_and_never_dispatched() {
    let _lock = HUB.lock().unwrap_or_else(|e| e.into_inner());
    let ns = unique_name("restricted");
    let hub = setup(&[&ns], root(vec![leaf("restricted", &ns)])).await;
    let namespaces: Api<Namespace> = Api::all(hub.clone());
    namespaces
        .patch(
            &ns,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {ENFORCE: "restricted"}}})),
        )
        .await
        .expect("label the namespace restricted");
    let dog = Watchdog::start(&hub, &fleet::MEMBERS, &[&ns]).await;
    let controller = Controller::start("admission", &[]).await;
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(async {
        fleet::create_json(&hub, "jobs", job(&ns, "privileged", true))
            .await
            .expect("the hub takes the Job itself (Pod Security judges pods)");
        let q = hub::wait_queued_state(&hub, &ns, "Job", "privileged", QueuedJobState::Rejected, T)
            .await;
        let reason = q.status.and_then(|s| s.reason).unwrap_or_default();
        eprintln!("the privileged job: Rejected: {reason}");
        for part in [
            "refused by the hub's admission",
            "spec.template",
            "PodSecurity",
            "restricted",
            "privileged",
            "hostPath",
        ] {
            assert!(reason.contains(part), "{part:?} not in {reason:?}");
        }
        let events = hub::events_for(&hub, &ns, "privileged").await;
        assert!(
            events.iter().any(|e| e.contains("PodSecurity")),
            "{events:?}"
        );
        // A second Job of the same template: its generated labels (uid, name) differ, the
        // verdict it shares does not (one dry run per template, issue 31).
        fleet::create_json(&hub, "jobs", job(&ns, "privileged-again", true))
            .await
            .expect("the hub takes the second Job");
        let q2 = hub::wait_queued_state(
            &hub,
            &ns,
            "Job",
            "privileged-again",
            QueuedJobState::Rejected,
            T,
        )
        .await;
        let reason2 = q2.status.and_then(|s| s.reason).unwrap_or_default();
        for part in [
            "refused by the hub's admission",
            "PodSecurity",
            "privileged",
        ] {
            assert!(reason2.contains(part), "{part:?} not in {reason2:?}");
        }
        // A complying job in the same namespace runs; its member namespace enforces the same.
        fleet::create_json(&hub, "jobs", job(&ns, "complies", false))
            .await
            .expect("complies");
        let q =
            hub::wait_queued_state(&hub, &ns, "Job", "complies", QueuedJobState::Running, T).await;
        let cluster = q.status.and_then(|s| s.cluster).expect("a member");
        let member_ns: Api<Namespace> = Api::all(client_for(&cluster).await);
        let labels = member_ns
            .get(&ns)
            .await
            .expect("the member namespace")
            .metadata
            .labels
            .unwrap_or_default();
        assert_eq!(
            labels.get(ENFORCE).map(String::as_str),
            Some("restricted"),
            "{labels:?}"
        );
        // The privileged job stayed Rejected, and no member ever had a pod or a copy of it,
        // as the watchdog saw every pod of the test's namespace from the start.
        for name in ["privileged", "privileged-again"] {
            let st = status_of_job(&hub, &ns, name).await;
            assert_eq!(st, Some(QueuedJobState::Rejected), "{name}");
        }
        let seen = dog.pods_seen();
        assert!(
            seen.iter().any(|p| p.contains("/complies-")),
            "the watchdog saw no pod of the job that runs: {seen:?}"
        );
        assert!(
            !seen.iter().any(|p| p.contains("/privileged-")),
            "a pod of a refused job ran: {seen:?}"
        );
        wait_for("no copy of the privileged jobs anywhere", T, || async {
            let mut h = hub::members_with("batch/v1", "Job", "jobs", &ns, "privileged").await;
            h.extend(hub::members_with("batch/v1", "Job", "jobs", &ns, "privileged-again").await);
            if h.is_empty() {
                Ok(())
            } else {
                Err(format!("{h:?}"))
            }
        })
        .await;
        dog.assert_clean("admission").await;
    }))
    .await;
    finish(&hub, &[&ns], vec![controller], outcome).await;
}

async fn status_of_job(hub: &kube::Client, ns: &str, name: &str) -> Option<QueuedJobState> {
    hub::queued_job(hub, ns, "Job", name)
        .await
        .and_then(|q| q.status)
        .map(|s| s.state)
}
