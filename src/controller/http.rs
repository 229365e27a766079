//! The controller's plain-HTTP listeners, and what each one serves. `--http-addr` (the port the
//! chart exposes through its metrics Service) serves /healthz, /readyz and /metrics: nothing
//! there shows a job's content (metrics are labelled by queue, cluster, quota node, resource,
//! priority class, reason and outcome only). `--snapshot-addr` (loopback by default) serves
//! /snapshot, which is every tenant's jobs in full; it is never on the metrics port, where
//! asking for it says where it moved. A non-loopback `--snapshot-addr` is refused unless
//! `--snapshot-insecure-expose` is given (nothing there authenticates the caller). Owns the
//! routes, the address check and the way /snapshot asks the sync loop; decides nothing else.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::{shutdown, snapshot};
use crate::metrics::Metrics;

/// Default of `--snapshot-addr`: loopback, reached by `muster snapshot` (a port-forward to the
/// leader) or `kubectl port-forward`.
pub const SNAPSHOT_ADDR: &str = "127.0.0.1:8081";

/// The flag that allows a non-loopback `--snapshot-addr`.
pub const INSECURE_EXPOSE_FLAG: &str = "--snapshot-insecure-expose";

/// The body of a request for /snapshot on the metrics port.
pub const MOVED: &str = "/snapshot is not served on this port: it shows every tenant's jobs, so \
     the controller serves it only on --snapshot-addr (default 127.0.0.1:8081, loopback): read it \
     with `muster snapshot` (a port-forward to the leading replica) or `kubectl port-forward`\n";

/// Checks `--snapshot-addr`: a loopback address, or anything with `--snapshot-insecure-expose`.
pub fn check_snapshot_addr(addr: SocketAddr, insecure_expose: bool) -> Result<(), String> {
    if addr.ip().is_loopback() || insecure_expose {
        return Ok(());
    }
    Err(format!(
        "--snapshot-addr {addr}: not a loopback address; /snapshot shows every tenant's jobs and \
         authenticates no one, so it is served on loopback only (reach it with `muster snapshot` \
         or `kubectl port-forward`); pass {INSECURE_EXPOSE_FLAG} to serve it on {addr} anyway"
    ))
}

/// How the snapshot listener asks the sync loop for a snapshot.
#[derive(Clone)]
pub(super) struct Snapshots {
    pub tx: tokio::sync::mpsc::Sender<snapshot::Ask>,
    pub wake: Arc<Notify>,
    pub leading: Arc<AtomicBool>,
}

impl Snapshots {
    /// The live state as scenario YAML, from the next pass of the leader.
    async fn take(&self) -> (StatusCode, String) {
        if !self.leading.load(Ordering::Relaxed) {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                "this replica does not lead: ask the leader\n".into(),
            );
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        if self.tx.send(tx).await.is_err() {
            return (StatusCode::SERVICE_UNAVAILABLE, "stopping\n".into());
        }
        self.wake.notify_one();
        match tokio::time::timeout(Duration::from_secs(60), rx).await {
            Ok(Ok(Ok(yaml))) => (StatusCode::OK, yaml),
            Ok(Ok(Err(e))) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")),
            _ => (
                StatusCode::SERVICE_UNAVAILABLE,
                "no pass answered within 60 s\n".into(),
            ),
        }
    }
}

/// The routes of `--http-addr`: health, readiness and metrics; /snapshot answers 404 with
/// [`MOVED`].
pub(super) fn health_routes(
    ready: Arc<AtomicBool>,
    metrics: Arc<Metrics>,
    stop: shutdown::Stop,
) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/snapshot",
            get(|| async { (StatusCode::NOT_FOUND, MOVED) }),
        )
        .route(
            "/metrics",
            get(move || {
                let metrics = metrics.clone();
                async move {
                    (
                        [(
                            axum::http::header::CONTENT_TYPE,
                            "text/plain; version=0.0.4; charset=utf-8",
                        )],
                        metrics.encode(),
                    )
                }
            }),
        )
        .route(
            "/readyz",
            get(move || {
                let (ready, stop) = (ready.clone(), stop.clone());
                async move {
                    if stop.ready(&ready) {
                        (StatusCode::OK, "ready")
                    } else {
                        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
                    }
                }
            }),
        )
}

/// The routes of `--snapshot-addr`: /snapshot only.
pub(super) fn snapshot_routes(snapshots: Snapshots) -> Router {
    Router::new().route(
        "/snapshot",
        get(move || {
            let s = snapshots.clone();
            async move { s.take().await }
        }),
    )
}

/// Serves `app` on `addr` until `servers` is cancelled; `what` names the listener in the log.
/// A failed bind is logged and ends only this listener.
pub(super) async fn serve(addr: SocketAddr, app: Router, servers: CancellationToken, what: &str) {
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(%addr, error = %e, "cannot bind the {what} endpoint");
            return;
        }
    };
    tracing::info!(%addr, "{what} endpoint listening");
    let _ = axum::serve(listener, app)
        .with_graceful_shutdown(async move { servers.cancelled().await })
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::ServiceExt;

    async fn get_path(app: Router, path: &str) -> (StatusCode, String) {
        let req = axum::http::Request::get(path)
            .body(axum::body::Body::empty())
            .expect("a request");
        let resp = app.oneshot(req).await.expect("an answer");
        let status = resp.status();
        let body = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .expect("a body");
        (status, String::from_utf8_lossy(&body).to_string())
    }

    fn health() -> Router {
        let stop = shutdown::Stop {
            token: CancellationToken::new(),
            servers: CancellationToken::new(),
        };
        health_routes(
            Arc::new(AtomicBool::new(true)),
            Arc::new(Metrics::new()),
            stop,
        )
    }

    fn snapshots(leading: bool) -> (Snapshots, tokio::sync::mpsc::Receiver<snapshot::Ask>) {
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        let s = Snapshots {
            tx,
            wake: Arc::new(Notify::new()),
            leading: Arc::new(AtomicBool::new(leading)),
        };
        (s, rx)
    }

    #[tokio::test]
    async fn the_metrics_port_says_where_the_snapshot_moved_and_serves_health_and_metrics() {
        let (status, body) = get_path(health(), "/snapshot").await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert!(body.contains("--snapshot-addr"), "{body}");
        assert!(body.contains("127.0.0.1:8081"), "{body}");
        assert_eq!(get_path(health(), "/healthz").await.0, StatusCode::OK);
        assert_eq!(get_path(health(), "/readyz").await.0, StatusCode::OK);
        let (status, body) = get_path(health(), "/metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert!(body.contains("muster_"), "{body}");
    }

    #[tokio::test]
    async fn the_snapshot_port_serves_the_snapshot_and_nothing_else() {
        let (s, mut rx) = snapshots(true);
        // The sync loop's side: answers the first ask.
        let answer = tokio::spawn(async move {
            let ask = rx.recv().await.expect("an ask");
            let _ = ask.send(Ok("clusters: []\n".into()));
        });
        let (status, body) = get_path(snapshot_routes(s.clone()), "/snapshot").await;
        answer.await.expect("answered");
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body, "clusters: []\n");
        for path in ["/metrics", "/healthz", "/readyz"] {
            let (status, _) = get_path(snapshot_routes(s.clone()), path).await;
            assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        }
    }

    #[tokio::test]
    async fn a_standby_replica_says_to_ask_the_leader() {
        let (s, _rx) = snapshots(false);
        let (status, body) = get_path(snapshot_routes(s), "/snapshot").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(body.contains("does not lead"), "{body}");
    }

    #[test]
    fn only_loopback_snapshot_addresses_pass_without_the_flag() {
        for ok in ["127.0.0.1:8081", "[::1]:8081", "127.0.0.5:1"] {
            let addr: SocketAddr = ok.parse().expect("an address");
            assert_eq!(check_snapshot_addr(addr, false), Ok(()), "{ok}");
        }
        for refused in ["0.0.0.0:8081", "[::]:8081", "10.0.0.7:8081"] {
            let addr: SocketAddr = refused.parse().expect("an address");
            let e = check_snapshot_addr(addr, false).expect_err(refused);
            assert!(
                e.starts_with(&format!("--snapshot-addr {addr}: not a loopback address")),
                "{e}"
            );
            assert!(e.contains(INSECURE_EXPOSE_FLAG), "{e}");
            assert_eq!(check_snapshot_addr(addr, true), Ok(()), "{refused}");
        }
        let default: SocketAddr = SNAPSHOT_ADDR.parse().expect("the default parses");
        assert_eq!(check_snapshot_addr(default, false), Ok(()));
    }
}
