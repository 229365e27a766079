//! Fair sharing between two borrowing teams on the local fleet (issue 30): `muster controller`
//! on the hub, real PyTorchJobs, the real training operator on the members. Under a root that
//! lends 4 GPUs and allows preemption for fairness (F1–F5 of docs/concepts.md), team-a borrows
//! all 4; team-b, arriving later, takes 2 of them back at once, and then nothing moves: each
//! team runs 2, the 2 of team-a's taken back wait with the reason, and no job is taken back
//! twice. The watchdog runs throughout (no job on two members, no pod without a record).
//! Starts the fleet if needed; fails (never skips) when it cannot.

mod support;

use std::time::Duration;

use kube::Client;
use muster::controller::crd::QueuedJobState;
use serde_json::{Value, json};
use support::fleet::{self, client_for, ensure_fleet_up, unique_name, wait_for};
use support::hub::{self, Controller};
use support::watchdog::Watchdog;

const T: Duration = Duration::from_secs(120);

/// A PyTorchJob of one master asking one GPU (runs until deleted: kwok never ends its pod).
fn one_gpu(ns: &str, name: &str) -> Value {
    let res = json!({"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"});
    json!({
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "runPolicy": {"cleanPodPolicy": "All"},
            "pytorchReplicaSpecs": {"Master": {"replicas": 1, "restartPolicy": "Never",
                "template": {"spec": {"containers": [{"name": "pytorch",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": res.clone(), "limits": res}}]}}}}
        }
    })
}

/// Each job's QueuedJob state, `None` while it has none.
async fn states(hub: &Client, ns: &str, names: &[String]) -> Vec<Option<QueuedJobState>> {
    let mut out = Vec::new();
    for n in names {
        let q = hub::queued_job(hub, ns, "PyTorchJob", n).await;
        out.push(q.and_then(|q| q.status).map(|s| s.state));
    }
    out
}

fn running(s: &[Option<QueuedJobState>]) -> usize {
    s.iter()
        .filter(|s| **s == Some(QueuedJobState::Running))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_late_team_takes_its_fair_part_back_from_a_borrowing_sibling() {
    ensure_fleet_up();
    let hub = client_for("hub").await;
    hub::reset_hub(&hub).await;
    hub::install_crds(&hub).await;
    hub::register_members(&hub).await;
    let (na, nb) = (unique_name("fair-a"), unique_name("fair-b"));
    for n in [&na, &nb] {
        fleet::create_namespace(&hub, n).await;
    }
    hub::apply_tree(
        &hub,
        json!({
            "name": "root",
            "max": {"cpu": "100", "memory": "400Gi", "nvidia.com/gpu": "4"},
            "attributes": {"muster.dev/fair-sharing-preemption": "LessThanOrEqualToFinalShare"},
            "children": [
                {"name": "team-a", "namespaces": [na]},
                {"name": "team-b", "namespaces": [nb]}
            ]
        }),
    )
    .await
    .expect("quota tree");
    let dog = Watchdog::start(&hub, &fleet::MEMBERS, &[&na, &nb]).await;
    let controller = Controller::start("fair", &[]).await;
    let a: Vec<String> = (0..4).map(|i| format!("a{i}")).collect();
    let b: Vec<String> = (0..2).map(|i| format!("b{i}")).collect();

    let result = tokio::time::timeout(Duration::from_secs(400), async {
        // team-a borrows all 4 GPUs.
        for n in &a {
            fleet::create_json(&hub, "pytorchjobs", one_gpu(&na, n))
                .await
                .expect("team-a job");
        }
        wait_for("team-a runs 4", T, || async {
            let s = states(&hub, &na, &a).await;
            if running(&s) == 4 {
                Ok(())
            } else {
                Err(format!("{s:?}"))
            }
        })
        .await;
        // team-b arrives: 2 of team-a's are taken back for it.
        for n in &b {
            fleet::create_json(&hub, "pytorchjobs", one_gpu(&nb, n))
                .await
                .expect("team-b job");
        }
        wait_for("team-b runs 2, team-a 2", T, || async {
            let (sa, sb) = (states(&hub, &na, &a).await, states(&hub, &nb, &b).await);
            if running(&sa) == 2 && running(&sb) == 2 {
                Ok(())
            } else {
                Err(format!("team-a {sa:?}, team-b {sb:?}"))
            }
        })
        .await;
        // The ones taken back say why, with both shares.
        let sa = states(&hub, &na, &a).await;
        let taken: Vec<&String> = a
            .iter()
            .zip(&sa)
            .filter(|(_, s)| **s != Some(QueuedJobState::Running))
            .map(|(n, _)| n)
            .collect();
        assert_eq!(taken.len(), 2, "{sa:?}");
        for n in &taken {
            let events = hub::events_for(&hub, &na, n).await;
            assert!(
                events
                    .iter()
                    .any(|e| e.contains("preempted for fair sharing under root")
                        && e.contains("team-a's share is ")),
                "{n}: {events:?}"
            );
        }
        let (ok, text) = hub::explain(&format!("{na}/{}", taken[0]));
        assert!(ok, "{text}");
        assert!(
            text.contains("Fair sharing") && text.contains("root/team-a  weight 1  share 1/2"),
            "{text}"
        );
        // Then nothing moves: team-a, with one more, would have 3/4, above team-b's 2/4.
        tokio::time::sleep(Duration::from_secs(10)).await;
        let (sa, sb) = (states(&hub, &na, &a).await, states(&hub, &nb, &b).await);
        assert_eq!((running(&sa), running(&sb)), (2, 2), "{sa:?} {sb:?}");
        // No job was taken back twice, none of team-b's at all (every state its record went
        // through, as the watchdog received them).
        for n in &a {
            let seen = dog.states_of(&format!("{na}/{n}"));
            let back = seen
                .windows(2)
                .filter(|w| w[0] == QueuedJobState::Running && w[1] != QueuedJobState::Running)
                .count();
            assert!(back <= 1, "{n} taken back {back} times: {seen:?}");
        }
        for n in &b {
            let seen = dog.states_of(&format!("{nb}/{n}"));
            assert!(seen.contains(&QueuedJobState::Running), "{n}: {seen:?}");
            let after = seen
                .iter()
                .skip_while(|s| **s != QueuedJobState::Running)
                .all(|s| *s == QueuedJobState::Running);
            assert!(after, "{n} left Running: {seen:?}");
        }
        dog.assert_clean("fair sharing").await;
    });
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(result)).await;

    for n in [&na, &nb] {
        fleet::delete_namespace(&hub, n).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    for m in fleet::MEMBERS {
        let c = client_for(m).await;
        for n in [&na, &nb] {
            fleet::delete_namespace(&c, n).await;
        }
    }
    hub::delete_webhook(&hub).await;
    let tail = controller.log_tail();
    drop(controller);
    fleet::finish(outcome, &tail);
}
