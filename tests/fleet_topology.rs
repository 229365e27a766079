//! Topology inside a member on the local fleet (issue 30): `muster controller` on the hub, real
//! PyTorchJobs, the real training operator and kube-scheduler on the members, whose kwok nodes
//! carry the rack and block labels of `examples/fleet.yaml` (registered as each MemberCluster's
//! `spec.topology`). member-b has 6 GPUs in three racks of 2; member-c one rack of 8.
//!
//! Jobs of 4 one-GPU pods that require one rack land on member-c, every pod bound to its planned
//! node, though member-b, tighter and with room in total, would take them otherwise. The third
//! waits, and `muster explain` names the level and member-b's largest free rack; a job without
//! the ask then runs on member-b (it had the room, not the rack); when a rack frees up on
//! member-c, the waiting job lands there. The watchdog runs throughout. Starts the fleet if
//! needed; fails (never skips) when it cannot.

mod support;

use std::time::Duration;

use kube::Client;
use muster::controller::crd::QueuedJobState;
use serde_json::{Value, json};
use support::fleet::{self, client_for, ensure_fleet_up, unique_name, wait_for};
use support::hub::{self, Controller};
use support::watchdog::Watchdog;

const T: Duration = Duration::from_secs(120);

/// One master and 3 workers of one GPU each; `rack`: the job requires one example.com/rack.
fn job(ns: &str, name: &str, rack: bool) -> Value {
    let res = json!({"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"});
    let spec = |replicas: u32| {
        json!({"replicas": replicas, "restartPolicy": "Never",
            "template": {"spec": {"containers": [{"name": "pytorch",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": res.clone(), "limits": res.clone()}}]}}})
    };
    let mut meta = json!({"name": name, "namespace": ns});
    if rack {
        meta["annotations"] = json!({"muster.dev/topology-required": "example.com/rack"});
    }
    json!({
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": meta,
        "spec": {
            "runPolicy": {"cleanPodPolicy": "All"},
            "pytorchReplicaSpecs": {"Master": spec(1), "Worker": spec(3)}
        }
    })
}

/// Waits until the job runs; its member and its plan's nodes.
async fn runs(hub: &Client, ns: &str, name: &str) -> (String, Vec<(String, String, u32)>, String) {
    let q = hub::wait_queued_state(hub, ns, "PyTorchJob", name, QueuedJobState::Running, T).await;
    let st = q.status.expect("status");
    let plan = st
        .placement
        .iter()
        .flat_map(|(c, m)| m.iter().map(move |(n, k)| (c.clone(), n.clone(), *k)))
        .collect();
    (
        st.cluster.expect("a member"),
        plan,
        q.spec.job_ref.uid.clone(),
    )
}

/// Every pod of the job on `member` is bound to a node its component's plan names, as many as
/// planned there; the nodes' racks.
async fn pods_on_plan(
    member: &str,
    ns: &str,
    uid: &str,
    plan: &[(String, String, u32)],
) -> Result<Vec<String>, String> {
    let c = client_for(member).await;
    let pods = fleet::list_pods(&c, ns, &format!("muster.dev/job-uid={uid}")).await;
    let want: u32 = plan.iter().map(|(_, _, k)| *k).sum();
    if pods.len() as u32 != want {
        return Err(format!("{} pods of {want}", pods.len()));
    }
    let mut left = plan.to_vec();
    for p in &pods {
        let comp = p
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("muster.dev/component"))
            .cloned()
            .unwrap_or_default();
        let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.clone()) else {
            return Err(format!(
                "{} not bound yet",
                p.metadata.name.clone().unwrap_or_default()
            ));
        };
        match left
            .iter_mut()
            .find(|(c, n, k)| *c == comp && *n == node && *k > 0)
        {
            Some(slot) => slot.2 -= 1,
            None => return Err(format!("a {comp} pod on {node}, not in the plan {plan:?}")),
        }
    }
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(c);
    let mut racks = Vec::new();
    for (_, n, _) in plan {
        let node = nodes.get(n).await.map_err(|e| e.to_string())?;
        let labels = node.metadata.labels.unwrap_or_default();
        let rack = format!(
            "{}/{}",
            labels.get("example.com/block").cloned().unwrap_or_default(),
            labels.get("example.com/rack").cloned().unwrap_or_default()
        );
        if !racks.contains(&rack) {
            racks.push(rack);
        }
    }
    Ok(racks)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_job_that_requires_one_rack_avoids_a_fragmented_member() {
    ensure_fleet_up();
    let hub = client_for("hub").await;
    hub::reset_hub(&hub).await;
    hub::install_crds(&hub).await;
    hub::register_members(&hub).await;
    let ns = unique_name("topo");
    fleet::create_namespace(&hub, &ns).await;
    hub::apply_tree(
        &hub,
        json!({
            "name": "root",
            "max": {"cpu": "100", "memory": "400Gi", "nvidia.com/gpu": "16"},
            "children": [{"name": "team", "namespaces": [ns]}]
        }),
    )
    .await
    .expect("quota tree");
    let dog = Watchdog::start(&hub, &fleet::MEMBERS, &[&ns]).await;
    let controller = Controller::start("topology", &[]).await;

    let result = tokio::time::timeout(Duration::from_secs(400), async {
        for name in ["rack-1", "rack-2"] {
            fleet::create_json(&hub, "pytorchjobs", job(&ns, name, true))
                .await
                .expect("a job requiring one rack");
            let (member, plan, uid) = runs(&hub, &ns, name).await;
            assert_eq!(member, "member-c", "{name}: {plan:?}");
            let racks = wait_for("every pod on its planned node", T, || {
                pods_on_plan(&member, &ns, &uid, &plan)
            })
            .await;
            assert_eq!(racks, vec!["block-1/rack-1".to_string()], "{name}");
        }
        // The third waits: member-c is full, member-b has 6 GPUs but 2 per rack.
        fleet::create_json(&hub, "pytorchjobs", job(&ns, "rack-3", true))
            .await
            .expect("a third job requiring one rack");
        let key = format!("{ns}/rack-3");
        let text = wait_for("the third waits, saying why", T, || async {
            let (ok, text) = hub::explain(&key);
            if ok
                && text.contains("member-b: needs master and worker in one example.com/rack")
                && text.contains("the largest free example.com/rack is block-1/rack-1 with nvidia.com/gpu 2 free")
            {
                Ok(text)
            } else {
                Err(text)
            }
        })
        .await;
        assert!(
            text.contains("topology asked: required example.com/rack for the whole job"),
            "{text}"
        );
        // The same pods without the ask run on member-b: it had the room, not the rack.
        fleet::create_json(&hub, "pytorchjobs", job(&ns, "anywhere", false))
            .await
            .expect("a job without the ask");
        let (member, plan, uid) = runs(&hub, &ns, "anywhere").await;
        assert_eq!(member, "member-b", "{plan:?}");
        let racks = wait_for("every pod on its planned node", T, || {
            pods_on_plan(&member, &ns, &uid, &plan)
        })
        .await;
        assert!(racks.len() > 1, "spread over racks: {racks:?}");
        let q = hub::queued_job(&hub, &ns, "PyTorchJob", "rack-3").await;
        let state = q.and_then(|q| q.status).map(|s| s.state);
        assert_eq!(state, Some(QueuedJobState::Queued), "rack-3 still waits");
        // A rack frees up on member-c: the waiting job lands there.
        let api = fleet::dynamic_api(
            &hub,
            "kubeflow.org/v1",
            "PyTorchJob",
            "pytorchjobs",
            Some(&ns),
        );
        api.delete("rack-1", &Default::default())
            .await
            .expect("delete rack-1");
        let (member, plan, uid) = runs(&hub, &ns, "rack-3").await;
        assert_eq!(member, "member-c", "{plan:?}");
        wait_for("every pod on its planned node", T, || {
            pods_on_plan(&member, &ns, &uid, &plan)
        })
        .await;
        // The member's status counts its domains per level.
        let mcs = hub::member_clusters(&hub);
        wait_for("member-b's domains in its status", T, || async {
            let mc = mcs.get("member-b").await.map_err(|e| e.to_string())?;
            let d = mc.data["status"]["topologyDomains"].clone();
            if d == json!({"example.com/block": 2, "example.com/rack": 3}) {
                Ok(())
            } else {
                Err(format!("{d}"))
            }
        })
        .await;
        dog.assert_clean("topology").await;
    });
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(result)).await;

    fleet::delete_namespace(&hub, &ns).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    for m in fleet::MEMBERS {
        let c = client_for(m).await;
        fleet::delete_namespace(&c, &ns).await;
    }
    hub::delete_webhook(&hub).await;
    let tail = controller.log_tail();
    drop(controller);
    fleet::finish(outcome, &tail);
}
