//! The admission webhook's reach, certificate and drain on the local fleet: which namespaces the
//! MutatingWebhookConfiguration `muster` intercepts (only those the quota tree in force covers,
//! following the tree), the serving certificate read again from `--webhook-cert-dir`, and the
//! stop in two steps (`/readyz` 503 while the webhook still answers). Each test runs its own
//! `muster controller` against the fleet's hub, one at a time (`support::failures::HUB`).
//!
//! 1. `failurePolicy: Fail` and the controller stopped: a Job in a namespace the tree does not
//!    cover is created as written; one in a covered namespace is refused by the API server.
//! 2. The tree gains a namespace: the selector lists it within seconds and a Job there is
//!    suspended; the tree loses one: the selector drops it.
//! 3. New files in `--webhook-cert-dir`: a TLS handshake gets the new certificate, the old CA no
//!    longer verifies it, the caBundle follows, and the API server still reaches the webhook.
//! 4. SIGTERM: `/readyz` answers 503 at once while the process drains (`/healthz` and the webhook
//!    still answer, a Job is still suspended through it); it exits after the drain.

// The std Mutex only serializes the tests of this binary; holding it across awaits is the point.
#![allow(clippy::await_holding_lock)]

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::Client;
use muster::controller::tls::ServingCert;
use serde_json::{Value, json};
use support::failures::*;
use support::fleet::{self, unique_name, wait_for};
use support::hub::{self, Controller};

/// How long a change of the tree may take to reach the webhook configuration.
const FEW_SECONDS: Duration = Duration::from_secs(10);

/// A batch Job of one pod (the hub runs no job controller: it only sits there).
fn batch_job(ns: &str, name: &str) -> Value {
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"parallelism": 1, "completions": 1, "template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": "100m"}}}]}}}
    })
}

/// Waits until the webhook configuration intercepts exactly `want`; returns how long it took.
async fn wait_selector(hub: &Client, want: &[&str], timeout: Duration) -> Duration {
    let started = Instant::now();
    let mut want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
    want.sort();
    wait_for(
        &format!("the webhook's namespaceSelector to list exactly {want:?}"),
        timeout,
        || {
            let want = want.clone();
            async move {
                let mut now = hub::webhook_namespaces(hub).await?;
                now.sort();
                if now == want {
                    Ok(())
                } else {
                    Err(format!("it lists {now:?}"))
                }
            }
        },
    )
    .await;
    started.elapsed()
}

/// The live webhook's caBundle, decoded.
async fn ca_bundle(hub: &Client) -> Result<String, String> {
    use base64::Engine;
    let mwc: kube::Api<k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration> =
        kube::Api::all(hub.clone());
    let live = mwc.get("muster").await.map_err(|e| e.to_string())?;
    let live = serde_json::to_value(&live).map_err(|e| e.to_string())?;
    let b64 = live["webhooks"][0]["clientConfig"]["caBundle"]
        .as_str()
        .ok_or("no caBundle")?
        .to_string();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map_err(|e| e.to_string())?;
    String::from_utf8(bytes).map_err(|e| e.to_string())
}

/// The DER of the first certificate in a PEM chain.
fn leaf_der(pem: &str) -> Vec<u8> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .next()
        .expect("a certificate")
        .expect("PEM")
        .as_ref()
        .to_vec()
}

/// A TLS handshake with the webhook on `port` as `localhost`, trusting only `ca_pem`: the leaf
/// certificate it was served (DER), or the error.
async fn served_leaf(port: u16, ca_pem: &str) -> Result<Vec<u8>, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName};
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots
            .add(c.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let name = ServerName::try_from("localhost").map_err(|e| e.to_string())?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(name, tcp)
        .await
        .map_err(|e| format!("TLS: {e}"))?;
    let (_, conn) = tls.get_ref();
    conn.peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.as_ref().to_vec())
        .ok_or_else(|| "no certificate".to_string())
}

/// Creates a batch Job and says whether it came back suspended by the webhook.
async fn created_suspended(hub: &Client, ns: &str, name: &str) -> bool {
    let created = fleet::create_json(hub, "jobs", batch_job(ns, name))
        .await
        .unwrap_or_else(|e| panic!("creating Job {ns}/{name}: {e}"));
    created.data["spec"]["suspend"] == json!(true)
}

/// 1. With `failurePolicy: Fail` and the controller stopped, only covered namespaces are
///    blocked: the old selector (every namespace but kube-system and muster's) blocked all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_fail_and_no_controller_only_covered_namespaces_are_blocked() {
    let _lock = HUB.lock().unwrap_or_else(|e| e.into_inner());
    let (covered, other) = (unique_name("wh-in"), unique_name("wh-out"));
    let hub = setup(&[&covered, &other], root(vec![leaf("wh-in", &covered)])).await;
    let flags = [
        "--webhook-failure-policy",
        "Fail",
        "--shutdown-drain-seconds",
        "1",
    ];
    let mut controller = Controller::start("wh-fail", &flags).await;
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(async {
        wait_selector(&hub, &[&covered], FEW_SECONDS).await;
        // While it runs, the covered namespace's jobs are suspended and the other's are not.
        assert!(created_suspended(&hub, &covered, "while-up").await);
        assert!(!created_suspended(&hub, &other, "while-up").await);

        controller.terminate();
        let exited = controller.wait_exit(Duration::from_secs(30)).await;
        assert!(
            exited.is_some_and(|s| s.success()),
            "the controller did not stop cleanly: {exited:?}"
        );
        let live = hub::webhook_namespaces(&hub)
            .await
            .expect("still registered");
        assert_eq!(live, vec![covered.clone()]);

        match fleet::create_json(&hub, "jobs", batch_job(&covered, "while-down")).await {
            Err(kube::Error::Api(e)) => assert!(
                e.message.contains("suspend.muster.dev"),
                "refused, but not for the webhook: {e:?}"
            ),
            other => panic!("a Job in a covered namespace got through muster's outage: {other:?}"),
        }
        let created = fleet::create_json(&hub, "jobs", batch_job(&other, "while-down"))
            .await
            .expect("a Job where the tree does not reach is created while muster is down");
        assert_ne!(
            created.data["spec"]["suspend"],
            json!(true),
            "{:?}",
            created.data
        );
        assert!(
            created.data["spec"].get("managedBy").is_none(),
            "{:?}",
            created.data
        );
    }))
    .await;
    finish(&hub, &[&covered, &other], vec![controller], outcome).await;
}

/// 2. The selector follows the tree: a namespace added to it is intercepted within seconds
///    (polled, not waited out), one removed from it no longer is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_selector_follows_the_tree() {
    let _lock = HUB.lock().unwrap_or_else(|e| e.into_inner());
    let (first, second) = (unique_name("wh-first"), unique_name("wh-second"));
    let hub = setup(&[&first, &second], root(vec![leaf("wh-first", &first)])).await;
    let controller = Controller::start("wh-follow", &[]).await;
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(async {
        wait_for("acting as leader", FEW_SECONDS, || async {
            if controller.log_text().contains("acting as leader") {
                Ok(())
            } else {
                Err("not yet".to_string())
            }
        })
        .await;
        wait_selector(&hub, &[&first], FEW_SECONDS).await;
        assert!(!created_suspended(&hub, &second, "before").await);

        hub::apply_tree(
            &hub,
            root(vec![leaf("wh-first", &first), leaf("wh-second", &second)]),
        )
        .await
        .expect("tree with a second leaf");
        let took = wait_selector(&hub, &[&first, &second], FEW_SECONDS).await;
        eprintln!("the selector listed the added namespace after {took:?}");
        assert!(created_suspended(&hub, &second, "after").await);

        hub::apply_tree(&hub, root(vec![leaf("wh-second", &second)]))
            .await
            .expect("tree without the first leaf");
        let took = wait_selector(&hub, &[&second], FEW_SECONDS).await;
        eprintln!("the selector dropped the removed namespace after {took:?}");
        assert!(!created_suspended(&hub, &first, "dropped").await);
        assert!(
            controller
                .log_text()
                .contains("webhook configuration updated"),
            "{}",
            controller.log_tail()
        );
    }))
    .await;
    finish(&hub, &[&first, &second], vec![controller], outcome).await;
}

/// 3. The serving certificate is read again after the files in `--webhook-cert-dir` are
///    replaced: new handshakes get the new one, and the API server, given the new CA in the
///    caBundle, still reaches the webhook.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_certificate_is_served_without_a_restart() {
    let _lock = HUB.lock().unwrap_or_else(|e| e.into_inner());
    let ns = unique_name("wh-cert");
    let hub = setup(&[&ns], root(vec![leaf("wh-cert", &ns)])).await;
    let controller = Controller::start("wh-cert", &[]).await;
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(async {
        let first = ServingCert::read(&controller.certs)
            .expect("readable")
            .expect("made at start");
        assert_eq!(
            served_leaf(controller.webhook, &first.ca_pem).await,
            Ok(leaf_der(&first.cert_pem))
        );
        wait_selector(&hub, &[&ns], FEW_SECONDS).await;
        assert_eq!(ca_bundle(&hub).await, Ok(first.ca_pem.clone()));
        assert!(created_suspended(&hub, &ns, "first-cert").await);

        // A rotation: a new CA and serving certificate replace the files.
        let second = ServingCert::generate(&["localhost".into(), "127.0.0.1".into()])
            .expect("a certificate");
        second.write(&controller.certs).expect("written");
        let replaced = Instant::now();
        let want = leaf_der(&second.cert_pem);
        wait_for(
            "the new certificate served",
            Duration::from_secs(20),
            || async {
                match served_leaf(controller.webhook, &second.ca_pem).await {
                    Ok(leaf) if leaf == want => Ok(()),
                    Ok(_) => Err("another certificate".to_string()),
                    Err(e) => Err(e),
                }
            },
        )
        .await;
        eprintln!("served after {:?}", replaced.elapsed());
        let old = served_leaf(controller.webhook, &first.ca_pem).await;
        assert!(
            old.as_ref().is_err_and(|e| e.starts_with("TLS")),
            "the old CA still verifies what is served: {old:?}"
        );
        wait_for(
            "the caBundle to hold the new CA",
            Duration::from_secs(20),
            || async {
                match ca_bundle(&hub).await {
                    Ok(ca) if ca == second.ca_pem => Ok(()),
                    Ok(_) => Err("the old CA".to_string()),
                    Err(e) => Err(e),
                }
            },
        )
        .await;
        assert!(created_suspended(&hub, &ns, "second-cert").await);
        assert!(
            controller
                .log_text()
                .contains("webhook certificate reloaded"),
            "{}",
            controller.log_tail()
        );
    }))
    .await;
    finish(&hub, &[&ns], vec![controller], outcome).await;
}

/// 4. After SIGTERM, `/readyz` answers 503 while the process still drains: `/healthz` and the
///    webhook answer (the API server still gets a job suspended through it) until
///    `--shutdown-drain-seconds` have passed; then it exits cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_sigterm_readyz_is_503_while_the_webhook_drains() {
    let _lock = HUB.lock().unwrap_or_else(|e| e.into_inner());
    const DRAIN: Duration = Duration::from_secs(8);
    let ns = unique_name("wh-drain");
    let hub = setup(&[&ns], root(vec![leaf("wh-drain", &ns)])).await;
    let drain = DRAIN.as_secs().to_string();
    let mut controller = Controller::start("wh-drain", &["--shutdown-drain-seconds", &drain]).await;
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(async {
        let readyz = format!("http://127.0.0.1:{}/readyz", controller.http);
        let healthz = format!("http://127.0.0.1:{}/healthz", controller.http);
        let get = |url: String| async move {
            tokio::task::spawn_blocking(move || hub::http_status(&url))
                .await
                .ok()
                .flatten()
        };
        wait_selector(&hub, &[&ns], FEW_SECONDS).await;
        assert_eq!(get(readyz.clone()).await, Some(200));
        let ca = ServingCert::read(&controller.certs)
            .expect("readable")
            .expect("made at start")
            .ca_pem;

        controller.terminate();
        let asked = Instant::now();
        let mut answers = Vec::new();
        let not_ready = loop {
            let status = get(readyz.clone()).await;
            answers.push(status);
            if status == Some(503) {
                break asked.elapsed();
            }
            assert!(
                asked.elapsed() < Duration::from_secs(3),
                "/readyz answers {answers:?} since SIGTERM"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        eprintln!("/readyz 503 after {not_ready:?}");
        assert!(
            controller.child.try_wait().ok().flatten().is_none(),
            "the process exited instead of draining"
        );
        assert_eq!(
            get(healthz.clone()).await,
            Some(200),
            "/healthz while draining"
        );
        served_leaf(controller.webhook, &ca)
            .await
            .expect("the webhook serves TLS while draining");
        assert!(
            created_suspended(&hub, &ns, "while-draining").await,
            "a Job created while the replica drains is still suspended by its webhook"
        );
        assert!(asked.elapsed() < DRAIN, "the checks outlasted the drain");
        assert_eq!(get(readyz.clone()).await, Some(503), "still not ready");

        let exited = controller.wait_exit(DRAIN + Duration::from_secs(20)).await;
        let took = asked.elapsed();
        assert!(
            exited.is_some_and(|s| s.success()),
            "the controller did not exit cleanly: {exited:?}"
        );
        assert!(
            took >= DRAIN - Duration::from_millis(500),
            "exited {took:?} after SIGTERM, before the {DRAIN:?} drain"
        );
        assert_eq!(get(readyz).await, None, "nothing answers once it exited");
    }))
    .await;
    finish(&hub, &[&ns], vec![controller], outcome).await;
}
