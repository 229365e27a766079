//! Placement modes on the local fleet: a member pinned by its MemberCluster spec, and a member
//! whose admission strips scheduling gates.
//!
//! 1. A member placed in pinned mode (`spec.placement: Pinned`): no gates, only plans whose
//!    component node sets keep apart, a job with no such plan is rejected with the reason, and
//!    runs once the member is back to gates.
//! 2. A member whose admission strips scheduling gates (a real MutatingAdmissionPolicy on
//!    member-b): muster notices, says so (`GatesDropped`, MemberCluster status) and places there
//!    by node set from then on; the job still ends up running whole.

// The std Mutex only serializes the tests of this binary; holding it across awaits is the point.
#![allow(clippy::await_holding_lock)]

mod support;

use kube::api::{Api, DeleteParams};
use muster::controller::crd::QueuedJobState;
use serde_json::json;
use support::fleet::{self, client_for, unique_name, wait_for};
use support::hub::{self, Controller};
use support::placement::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pinned_member_gets_only_plans_that_start_under_any_arrangement() {
    let _g = HUB.lock().unwrap_or_else(|e| e.into_inner());
    let hub = setup().await;
    let controller = Controller::start("placement-pinned", &[]).await;
    let result: Result<(), String> = async {
        set_placement(&hub, "member-b", Some("Pinned")).await;
        let mcs: Api<muster::controller::crd::MemberCluster> = Api::all(hub.clone());
        wait_for("member-b in pinned mode", T, || {
            let mcs = mcs.clone();
            async move {
                let mc = mcs.get("member-b").await.map_err(|e| e.to_string())?;
                let st = mc.status.unwrap_or_default();
                match st.placement.as_deref() {
                    Some("pinned") => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            }
        })
        .await;

        // README's shape (master + 3 workers, one GPU each) on member-b: a plan whose
        // components keep to separate nodes, no gate on any pod, every pod Running.
        let name = unique_name("pinned");
        let uid = create(&hub, &shared_pytorchjob("research", &name, 3)).await;
        let q = running(&hub, &name).await;
        let st = q.status.clone().unwrap_or_default();
        if master_shares_a_node(&st) || st.requeues != 0 {
            return Err(format!(
                "pinned plan shares a node or was taken back: {st:?}"
            ));
        }
        let pods = fleet::list_pods(
            &client_for("member-b").await,
            "research",
            &format!("muster.dev/job-uid={uid}"),
        )
        .await;
        if pods.len() != 4
            || pods.iter().any(|p| {
                p.spec
                    .as_ref()
                    .and_then(|s| s.scheduling_gates.as_ref())
                    .is_some_and(|g| !g.is_empty())
            })
        {
            return Err(format!(
                "pods in pinned mode: {}",
                fleet::describe_pods(&pods)
            ));
        }
        let (ok, text) = hub::explain(&format!("research/{name}"));
        if !ok || !text.contains("placement on member-b: pinned") {
            return Err(format!("explain: {text}"));
        }
        delete_and_wait(&hub, "kubeflow.org/v1", "PyTorchJob", "research", &name).await;

        // 6 pods on 6 GPUs must share nodes: no robust plan on member-b, even empty, so the job
        // is rejected and says why.
        let full = unique_name("pinned-full");
        create(&hub, &shared_pytorchjob("research", &full, 5)).await;
        let hub2 = hub.clone();
        let full2 = full.clone();
        wait_for(
            "the job that needs shared nodes to wait with the pinned-mode reason",
            T,
            || {
                let (hub, full) = (hub2.clone(), full2.clone());
                async move {
                    let q = hub::queued_job(&hub, "research", "PyTorchJob", &full)
                        .await
                        .ok_or("no QueuedJob")?;
                    let st = q.status.unwrap_or_default();
                    let text = st.explanation.clone().unwrap_or_default();
                    if st.state != QueuedJobState::Rejected || !text.contains("pinned mode") {
                        return Err(format!("{:?}: {:?} / {text}", st.state, st.reason));
                    }
                    Ok(())
                }
            },
        )
        .await;
        // Back to gates: the same job becomes admissible and starts whole on its plan.
        set_placement(&hub, "member-b", None).await;
        let q = wait_running_on_plan(&hub, "research", "PyTorchJob", &full).await;
        assert_exact(&q);
        delete_and_wait(&hub, "kubeflow.org/v1", "PyTorchJob", "research", &full).await;
        Ok(())
    }
    .await;
    set_placement(&hub, "member-b", None).await;
    finish(Some(&controller), result);
}

/// A MutatingAdmissionPolicy on member-b that removes every scheduling gate from pods created in
/// `research`: what an admission webhook unaware of gates can do to muster's pods.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_member_that_strips_gates_is_noticed_and_placed_by_node_set() {
    let _g = HUB.lock().unwrap_or_else(|e| e.into_inner());
    let hub = setup().await;
    strip_gates_on_member_b(true).await;
    // Policies take effect once the API server has loaded them: a probe pod shows when.
    let b = client_for("member-b").await;
    let probe_api: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(b.clone(), "research");
    let probe = unique_name("probe");
    wait_for("the policy to strip gates", T, || {
        let (api, probe) = (probe_api.clone(), probe.clone());
        async move {
            let _ = api
                .delete(&probe, &DeleteParams::default().grace_period(0))
                .await;
            let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
                "metadata": {"name": probe, "namespace": "research"},
                "spec": {"schedulingGates": [{"name": "x.io/probe"}],
                         "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}
            }))
            .map_err(|e| e.to_string())?;
            let made = api
                .create(&Default::default(), &pod)
                .await
                .map_err(|e| e.to_string())?;
            let _ = api
                .delete(&probe, &DeleteParams::default().grace_period(0))
                .await;
            if made
                .spec
                .and_then(|s| s.scheduling_gates)
                .is_some_and(|g| !g.is_empty())
            {
                Err("gate kept".into())
            } else {
                Ok(())
            }
        }
    })
    .await;
    // Short stuck-pod timeout: a first plan made for gates may not start when pinned by set.
    let controller = Controller::start(
        "placement-stripped",
        &[
            "--pods-ready-timeout-seconds",
            "15",
            "--requeue-backoff-seconds",
            "1",
        ],
    )
    .await;
    let name = unique_name("stripped");
    let result: Result<(), String> = async {
        create(&hub, &shared_pytorchjob("research", &name, 3)).await;
        let mcs: Api<muster::controller::crd::MemberCluster> = Api::all(hub.clone());
        wait_for("member-b in pinned mode, with the evidence", T, || {
            let mcs = mcs.clone();
            async move {
                let st = mcs
                    .get("member-b")
                    .await
                    .map_err(|e| e.to_string())?
                    .status
                    .unwrap_or_default();
                match (st.placement.as_deref(), st.placement_reason.as_deref()) {
                    (Some("pinned"), Some(r)) if r.contains("without muster's scheduling gate") => {
                        Ok(())
                    }
                    other => Err(format!("{other:?}")),
                }
            }
        })
        .await;
        let events = hub::events_for(&hub, "research", &name).await;
        if !events
            .iter()
            .any(|e| e.starts_with("GatesDropped: member-b"))
        {
            return Err(format!("no GatesDropped Event: {events:?}"));
        }
        // Whatever the first plan, the job runs whole on member-b in the end, and a plan made
        // from now on keeps the components on separate nodes.
        let q = running(&hub, &name).await;
        let st = q.status.unwrap_or_default();
        if st.cluster.as_deref() != Some("member-b") {
            return Err(format!("ran on {:?}", st.cluster));
        }
        delete_and_wait(&hub, "kubeflow.org/v1", "PyTorchJob", "research", &name).await;
        let next = unique_name("stripped-next");
        create(&hub, &shared_pytorchjob("research", &next, 3)).await;
        let q = running(&hub, &next).await;
        let st = q.status.unwrap_or_default();
        if master_shares_a_node(&st) || st.requeues != 0 {
            return Err(format!("the plan after the gates were dropped: {st:?}"));
        }
        delete_and_wait(&hub, "kubeflow.org/v1", "PyTorchJob", "research", &next).await;
        Ok(())
    }
    .await;
    strip_gates_on_member_b(false).await;
    finish(Some(&controller), result);
}
